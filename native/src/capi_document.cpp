// C ABI of the .chat document parser: thin forwarders into flemma::document.
#include <string_view>

#include "document.hpp"
#include "flemma/flemma.h"
#include "guard.hpp"

struct flemma_doc {
  flemma::document::Document doc;
};

extern "C" {

// Returns a new document owned by the caller (free with flemma_doc_free), or
// NULL with flemma_last_error() set. `text` stays owned by the caller.
FLEMMA_API flemma_doc* flemma_doc_new(const char* text, size_t len) {
  return flemma::guard_ptr([&]() -> flemma_doc* {
    if (!text && len > 0) throw flemma::Error(FLEMMA_E_INVALID, "flemma_doc_new: text is NULL but len is not 0");
    std::string_view sv = text ? std::string_view(text, len) : std::string_view();
    return new flemma_doc{flemma::document::parse(sv)};
  });
}

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
FLEMMA_API const char* flemma_doc_arena(const flemma_doc* doc) { return doc ? doc->doc.arena.data() : nullptr; }

}  // extern "C"
