// C ABI of the incremental document: thin forwarders into
// flemma::document::Incremental.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "idoc.hpp"

struct flemma_idoc {
  flemma::document::Incremental doc;
  std::vector<std::string_view> scratch;  // the lines of the edit being applied
  // Where flemma_idoc_line_is last stopped: segment (by id: never reused),
  // its line there (0-based) and that line's first byte.
  struct {
    uint64_t id = 0;
    int32_t line = 0;
    size_t off = 0;
  } cursor;
};

extern "C" {

FLEMMA_API flemma_idoc* flemma_idoc_new(void) {
  return flemma::guard_ptr([]() -> flemma_idoc* { return new flemma_idoc(); });
}

FLEMMA_API void flemma_idoc_free(flemma_idoc* doc) { delete doc; }

FLEMMA_API int flemma_idoc_edit(flemma_idoc* doc, int32_t first, int32_t last,
                                const char* const* lines, const size_t* lens, size_t count) {
  return flemma::guard([&] {
    if (!doc) throw flemma::Error(FLEMMA_E_INVALID, "flemma_idoc_edit: doc is NULL");
    if (count > 0 && (!lines || !lens))
      throw flemma::Error(FLEMMA_E_INVALID,
                          "flemma_idoc_edit: lines or lens is NULL but count is not 0");
    auto& v = doc->scratch;
    v.clear();
    v.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (!lines[i] && lens[i] > 0)
        throw flemma::Error(FLEMMA_E_INVALID, "flemma_idoc_edit: line " + std::to_string(i + 1) +
                                                  " is NULL but its length is not 0");
      if (lens[i] >= flemma::document::kMaxInput)
        throw flemma::Error(FLEMMA_E_INVALID,
                            "flemma_idoc_edit: a line of 1 GiB or more cannot be parsed");
      v.emplace_back(lines[i] ? lines[i] : "", lens[i]);
    }
    doc->doc.edit(first, last, v);
    v.clear();
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_idoc_edit_file(flemma_idoc* doc, int32_t first, int32_t last,
                                     const char* path, int64_t size, int32_t count,
                                     const int64_t* offsets, const char* const* lines,
                                     const size_t* lens, size_t nsamples, int* inserted) {
  return flemma::guard([&] {
    if (!doc || !path || !inserted)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_idoc_edit_file: a pointer is NULL");
    if (nsamples > 0 && (!offsets || !lines || !lens))
      throw flemma::Error(FLEMMA_E_INVALID,
                          "flemma_idoc_edit_file: samples are NULL but nsamples is not 0");
    *inserted = 0;
    if (size <= 0 || count <= 0 || static_cast<uint64_t>(size) >= (uint64_t{1} << 40))
      return FLEMMA_OK;
    const auto n = static_cast<size_t>(size);
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FLEMMA_OK;
    std::vector<char> text(n + 1);  // one byte more: a file grown since shows
    size_t got = 0;
    while (got < text.size()) {
      ssize_t r = ::read(fd, text.data() + got, text.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    ::close(fd);
    if (got != n || text[n - 1] != '\n') return FLEMMA_OK;
    for (size_t k = 0; k < nsamples; ++k) {
      if (offsets[k] < 0 || (lens[k] > 0 && !lines[k])) return FLEMMA_OK;
      const auto off = static_cast<uint64_t>(offsets[k]);
      if (off + lens[k] >= n || std::memcmp(text.data() + off, lines[k], lens[k]) != 0 ||
          text[off + lens[k]] != '\n')
        return FLEMMA_OK;
    }
    auto& v = doc->scratch;
    v.clear();
    v.reserve(static_cast<size_t>(count));
    const char* p = text.data();
    const char* end = p + n;
    while (p < end) {
      auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (!nl || v.size() == static_cast<size_t>(count)) {
        v.clear();
        return FLEMMA_OK;
      }
      if (static_cast<size_t>(nl - p) >= flemma::document::kMaxInput) {
        v.clear();
        return FLEMMA_OK;
      }
      v.emplace_back(p, static_cast<size_t>(nl - p));
      p = nl + 1;
    }
    if (v.size() != static_cast<size_t>(count)) {
      v.clear();
      return FLEMMA_OK;
    }
    doc->doc.edit(first, last, v);
    v.clear();
    *inserted = 1;
    return FLEMMA_OK;
  });
}

FLEMMA_API int32_t flemma_idoc_line_count(const flemma_idoc* doc) {
  return doc ? doc->doc.line_count() : 0;
}

FLEMMA_API uint64_t flemma_idoc_version(const flemma_idoc* doc) {
  return doc ? doc->doc.version() : 0;
}

FLEMMA_API int32_t flemma_idoc_segment_count(const flemma_idoc* doc) {
  return doc ? static_cast<int32_t>(doc->doc.segment_count()) : 0;
}

FLEMMA_API int32_t flemma_idoc_segment_at(const flemma_idoc* doc, int32_t line) {
  if (!doc || doc->doc.segment_count() == 0 || line < 1 || line > doc->doc.line_count()) return -1;
  return static_cast<int32_t>(doc->doc.segment_at(line - 1));
}

FLEMMA_API int flemma_idoc_get_segment(const flemma_idoc* doc, int32_t index,
                                       flemma_idoc_segment* out) {
  return flemma::guard([&] {
    if (!doc || !out)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_idoc_get_segment: doc or out is NULL");
    if (index < 0 || static_cast<size_t>(index) >= doc->doc.segment_count())
      throw flemma::Error(FLEMMA_E_INVALID,
                          "flemma_idoc_get_segment: no segment " + std::to_string(index));
    const auto& s = doc->doc.segment(static_cast<size_t>(index));
    out->id = s.id;
    out->version = s.version;
    out->first_line = doc->doc.segment_start(static_cast<size_t>(index)) + 1;
    out->line_count = s.nlines;
    out->item_count = static_cast<int32_t>(s.doc.items.size());
    out->diag_count = static_cast<int32_t>(s.doc.diags.size());
    out->items = s.doc.items.data();
    out->diags = s.doc.diags.data();
    out->text = s.text.data();
    out->arena = s.doc.arena.data();
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_idoc_changes(const flemma_idoc* doc, uint64_t since, int32_t* lo,
                                   int32_t* hi) {
  if (!doc || !lo || !hi) return FLEMMA_E_INVALID;
  size_t l = 0, h = 0;
  bool exact = doc->doc.changes(since, l, h);
  *lo = static_cast<int32_t>(l);
  *hi = static_cast<int32_t>(h);
  return exact ? 1 : 0;
}

FLEMMA_API int flemma_idoc_reparsed(const flemma_idoc* doc, uint64_t since, int32_t* first,
                                    int32_t* last) {
  if (!doc || !first || !last) return FLEMMA_E_INVALID;
  int32_t line = 0, end = 0;
  bool exact = doc->doc.reparsed(since, line, end);
  *first = line + 1;
  *last = end;
  return exact ? 1 : 0;
}

FLEMMA_API int32_t flemma_idoc_touched(const flemma_idoc* doc, uint64_t since, int32_t* ranges,
                                       int32_t cap) {
  if (!doc || !ranges || cap < 1) return FLEMMA_E_INVALID;
  return flemma::guard([&]() -> int32_t {
    std::vector<flemma::document::Incremental::LineRange> out;
    doc->doc.touched(since, static_cast<size_t>(cap), out);
    for (size_t k = 0; k < out.size(); ++k) {
      ranges[2 * k] = out[k].first + 1;
      ranges[2 * k + 1] = out[k].end;
    }
    return static_cast<int32_t>(out.size());
  });
}

FLEMMA_API int flemma_idoc_line_is(flemma_idoc* doc, int32_t line, const char* text, size_t len) {
  if (!doc || (!text && len > 0)) return FLEMMA_E_INVALID;
  const auto& d = doc->doc;
  if (line < 1 || line > d.line_count()) return 0;
  const size_t i = d.segment_at(line - 1);
  const auto& seg = d.segment(i);
  const int32_t k = line - 1 - d.segment_start(i);
  auto& c = doc->cursor;
  if (c.id != seg.id || k < c.line) {
    c.id = seg.id;
    c.line = 0;
    c.off = 0;
  }
  const std::string& t = seg.text;
  while (c.line < k) {
    const size_t nl = t.find('\n', c.off);
    if (nl == std::string::npos) return 0;
    c.off = nl + 1;
    ++c.line;
  }
  size_t end = t.find('\n', c.off);
  if (end == std::string::npos) end = t.size();
  return end - c.off == len && (len == 0 || std::memcmp(t.data() + c.off, text, len) == 0) ? 1 : 0;
}

FLEMMA_API int32_t flemma_idoc_diagnostics(flemma_idoc* doc, const flemma_doc_diag** out) {
  if (out) *out = nullptr;
  if (!doc || !out) return FLEMMA_E_INVALID;
  return flemma::guard([&] {
    const auto& d = doc->doc.diagnostics();
    *out = d.data();
    return static_cast<int>(d.size());
  });
}

FLEMMA_API const char* flemma_idoc_diag_arena(const flemma_idoc* doc) {
  return doc ? doc->doc.diag_arena().data() : nullptr;
}

FLEMMA_API int flemma_idoc_find_tool_use(const flemma_idoc* doc, const char* id, size_t len,
                                         int32_t* segment, int32_t* item) {
  return flemma::guard([&] {
    if (!doc || (!id && len > 0) || !segment || !item)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_idoc_find_tool_use: NULL argument");
    size_t s = 0, i = 0;
    if (!doc->doc.find_tool_use(std::string_view(id ? id : "", len), s, i)) return 0;
    *segment = static_cast<int32_t>(s);
    *item = static_cast<int32_t>(i);
    return 1;
  });
}

}  // extern "C"
