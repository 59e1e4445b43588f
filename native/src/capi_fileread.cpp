// C ABI of the file reader.
#include <cstddef>
#include <memory>

#include "fileread.hpp"
#include "flemma/flemma.h"
#include "guard.hpp"

struct flemma_freader {
  flemma::fileread::Reader reader;
};

namespace {

// The public struct plus the result its pointers refer into.
struct ResultBox {
  flemma_fread_result pub{};
  std::unique_ptr<flemma::fileread::Result> res;
};

flemma_fread_result* make_result(std::unique_ptr<flemma::fileread::Result> res) {
  auto* box = new ResultBox();
  box->res = std::move(res);
  auto& r = *box->res;
  auto& p = box->pub;
  p.id = r.id;
  p.ok = r.ok ? 1 : 0;
  p.err_no = r.err_no;
  p.file_type = static_cast<int>(r.type);
  p.message = r.message.c_str();
  p.size = r.size;
  p.head = r.head.data();
  p.head_len = r.head.size();
  p.text = r.text.data();
  p.text_len = r.text.size();
  p.total_lines = r.total_lines;
  p.shown_lines = r.shown_lines;
  p.cut_by = r.cut_by;
  p.long_line = r.long_line ? 1 : 0;
  static_assert(offsetof(ResultBox, pub) == 0);
  return &box->pub;
}

flemma::fileread::Reader& need(flemma_freader* r) {
  if (!r) throw flemma::Error(FLEMMA_E_INVALID, "file reader is NULL");
  return r->reader;
}

}  // namespace

extern "C" {

// Caller owns the reader: flemma_freader_free.
FLEMMA_API flemma_freader* flemma_freader_new(void) {
  return flemma::guard_ptr([] { return new flemma_freader(); });
}

// Takes ownership of reader and destroys it. NULL is a no-op.
FLEMMA_API void flemma_freader_free(flemma_freader* reader) {
  flemma::guard([&] {
    delete reader;
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_freader_fd(const flemma_freader* reader) {
  return flemma::guard([&] {
    if (!reader) throw flemma::Error(FLEMMA_E_INVALID, "file reader is NULL");
    return reader->reader.fd();
  });
}

// Borrows opts and its path for the call.
FLEMMA_API int flemma_freader_start(flemma_freader* reader, const flemma_fread_opts* opts,
                                    int64_t* id_out) {
  return flemma::guard([&] {
    auto& r = need(reader);
    if (!opts || !opts->path || !id_out)
      throw flemma::Error(FLEMMA_E_INVALID, "file reader: opts, path and id_out are needed");
    flemma::fileread::Request req;
    req.path = opts->path;
    req.whole = opts->whole != 0;
    req.first_line = opts->first_line;
    req.max_lines = opts->max_lines;
    req.max_bytes = opts->max_bytes;
    req.head_bytes = opts->head_bytes;
    req.max_line_bytes = opts->max_line_bytes;
    *id_out = r.start(std::move(req));
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_freader_cancel(flemma_freader* reader, int64_t id) {
  return flemma::guard([&] {
    need(reader).cancel(id);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_freader_ack(flemma_freader* reader) {
  return flemma::guard([&] {
    need(reader).ack();
    return FLEMMA_OK;
  });
}

// The caller owns the result: flemma_fread_result_free.
FLEMMA_API flemma_fread_result* flemma_freader_next(flemma_freader* reader) {
  return flemma::guard_ptr([&]() -> flemma_fread_result* {
    auto res = need(reader).next();
    if (!res) return nullptr;
    return make_result(std::move(res));
  });
}

FLEMMA_API void flemma_fread_result_free(flemma_fread_result* result) {
  flemma::guard([&] {
    delete reinterpret_cast<ResultBox*>(result);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_freader_running(const flemma_freader* reader) {
  return flemma::guard([&] {
    if (!reader) throw flemma::Error(FLEMMA_E_INVALID, "file reader is NULL");
    return reader->reader.running();
  });
}

}  // extern "C"
