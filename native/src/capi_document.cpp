// C ABI of the .chat document parser: thin forwarders into flemma::document.
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "document.hpp"
#include "flemma/flemma.h"
#include "guard.hpp"

struct flemma_doc {
  std::unique_ptr<char[]> joined;  // flemma_doc_new_lines: the lines joined with "\n"
  const char* text = nullptr;      // what ranges with off >= 0 index
  flemma::document::Document doc;
};

extern "C" {

// Returns a new document owned by the caller (free with flemma_doc_free), or
// NULL with flemma_last_error() set. `text` stays owned by the caller.
FLEMMA_API flemma_doc* flemma_doc_new(const char* text, size_t len) {
  return flemma::guard_ptr([&]() -> flemma_doc* {
    if (!text && len > 0)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_doc_new: text is NULL but len is not 0");
    std::string_view sv = text ? std::string_view(text, len) : std::string_view();
    return new flemma_doc{nullptr, text, flemma::document::parse(sv)};
  });
}

// Returns a new document owned by the caller (free with flemma_doc_free), or
// NULL with flemma_last_error() set. It copies the lines; they stay owned by
// the caller.
FLEMMA_API flemma_doc* flemma_doc_new_lines(const char* const* lines, const size_t* lens,
                                            size_t count) {
  return flemma::guard_ptr([&]() -> flemma_doc* {
    if (count > 0 && (!lines || !lens))
      throw flemma::Error(FLEMMA_E_INVALID,
                          "flemma_doc_new_lines: lines or lens is NULL but count is not 0");
    size_t total = count > 0 ? count - 1 : 0;  // the "\n" between lines
    for (size_t i = 0; i < count; ++i) {
      if (!lines[i] && lens[i] > 0)
        throw flemma::Error(FLEMMA_E_INVALID, "flemma_doc_new_lines: line " +
                                                  std::to_string(i + 1) +
                                                  " is NULL but its length is not 0");
      total += lens[i];
      if (lens[i] >= flemma::document::kMaxInput || total >= flemma::document::kMaxInput)
        throw flemma::Error(FLEMMA_E_INVALID,
                            "the document is 1 GiB or more; documents that large cannot be parsed: "
                            "split the conversation");
    }
    auto d = std::make_unique<flemma_doc>();
    d->joined.reset(new char[total + 1]);  // not zeroed: every byte is written below
    char* out = d->joined.get();
    for (size_t i = 0; i < count; ++i) {
      if (i > 0) *out++ = '\n';
      if (lens[i] > 0) std::memcpy(out, lines[i], lens[i]);
      out += lens[i];
    }
    *out = '\0';
    d->text = d->joined.get();
    d->doc = flemma::document::parse(std::string_view(d->text, total));
    return d.release();
  });
}

// The text that ranges with off >= 0 index, owned by doc (joined copy) or by
// the caller of flemma_doc_new; NULL for NULL.
FLEMMA_API const char* flemma_doc_text(const flemma_doc* doc) { return doc ? doc->text : nullptr; }

// Releases doc and everything it owns; NULL is a no-op.
FLEMMA_API void flemma_doc_free(flemma_doc* doc) { delete doc; }

// The count of items; 0 for NULL.
FLEMMA_API int32_t flemma_doc_item_count(const flemma_doc* doc) {
  return doc ? static_cast<int32_t>(doc->doc.items.size()) : 0;
}

// The items, owned by doc (valid until flemma_doc_free); NULL for NULL.
FLEMMA_API const flemma_doc_item* flemma_doc_items(const flemma_doc* doc) {
  return doc ? doc->doc.items.data() : nullptr;
}

// The count of diagnostics; 0 for NULL.
FLEMMA_API int32_t flemma_doc_diag_count(const flemma_doc* doc) {
  return doc ? static_cast<int32_t>(doc->doc.diags.size()) : 0;
}

// The diagnostics, owned by doc (valid until flemma_doc_free); NULL for NULL.
FLEMMA_API const flemma_doc_diag* flemma_doc_diags(const flemma_doc* doc) {
  return doc ? doc->doc.diags.data() : nullptr;
}

// The arena, owned by doc (valid until flemma_doc_free); NULL for NULL.
FLEMMA_API const char* flemma_doc_arena(const flemma_doc* doc) {
  return doc ? doc->doc.arena.data() : nullptr;
}

}  // extern "C"
