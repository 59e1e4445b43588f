// C ABI of the truncation library.
#include <cstring>
#include <new>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "truncate.hpp"

namespace {

// The public struct plus the storage its `content` points into.
struct TruncateBox {
  flemma_truncate_result pub{};
  std::string content;
};

flemma_truncate_result* make_result(flemma::truncate::Result&& r) {
  auto* box = new TruncateBox();
  box->content = std::move(r.content);
  auto& p = box->pub;
  p.content = box->content.data();
  p.content_len = box->content.size();
  p.truncated = r.truncated ? 1 : 0;
  p.truncated_by = static_cast<int>(r.truncated_by);
  p.total_lines = r.total_lines;
  p.total_bytes = r.total_bytes;
  p.output_lines = r.output_lines;
  p.output_bytes = r.output_bytes;
  p.last_line_partial = r.last_line_partial ? 1 : 0;
  p.first_line_exceeds_limit = r.first_line_exceeds_limit ? 1 : 0;
  static_assert(offsetof(TruncateBox, pub) == 0);
  return &box->pub;
}

void check_text(const char* text, size_t len) {
  if (!text && len > 0)
    throw flemma::Error(FLEMMA_E_INVALID, "truncate: text is NULL but its length is not 0");
}

}  // namespace

extern "C" {

FLEMMA_API int flemma_format_size(int64_t bytes, char* buf, size_t cap) {
  return flemma::guard([&] {
    std::string s = flemma::truncate::format_size(bytes);
    if (buf && cap > 0) {
      size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
      std::memcpy(buf, s.data(), n);
      buf[n] = '\0';
    }
    return static_cast<int>(s.size());
  });
}

// Caller owns the result: free it with flemma_truncate_result_free.
FLEMMA_API flemma_truncate_result* flemma_truncate_head(const char* text, size_t len,
                                                        int64_t max_lines, int64_t max_bytes) {
  return flemma::guard_ptr([&] {
    check_text(text, len);
    return make_result(flemma::truncate::truncate_head(std::string_view(text ? text : "", len),
                                                       max_lines, max_bytes));
  });
}

// Caller owns the result: free it with flemma_truncate_result_free.
FLEMMA_API flemma_truncate_result* flemma_truncate_tail(const char* text, size_t len,
                                                        int64_t max_lines, int64_t max_bytes) {
  return flemma::guard_ptr([&] {
    check_text(text, len);
    return make_result(flemma::truncate::truncate_tail(std::string_view(text ? text : "", len),
                                                       max_lines, max_bytes));
  });
}

// Releases a result and its content. NULL is a no-op.
FLEMMA_API void flemma_truncate_result_free(flemma_truncate_result* result) {
  delete reinterpret_cast<TruncateBox*>(result);
}

}  // extern "C"
