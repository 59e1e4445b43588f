// C ABI of the JSON-RPC line decoder: thin forwarders into flemma::jsonrpc.
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "jsonrpc.hpp"

struct flemma_jsonrpc {
  flemma_jsonrpc(size_t max_line, int max_depth) : decoder(max_line, max_depth) {}
  flemma::jsonrpc::Decoder decoder;
  std::vector<flemma::stream::Event> events;  // of the last call
  std::vector<flemma_stream_event> pub;       // points into `events`
};

namespace {

void publish(flemma_jsonrpc* d, const flemma_stream_event** events, size_t* count) {
  flemma::stream::to_c(d->events, d->pub);
  if (events) *events = d->pub.empty() ? nullptr : d->pub.data();
  if (count) *count = d->pub.size();
}

flemma_jsonrpc* need(flemma_jsonrpc* d) {
  if (!d) throw flemma::Error(FLEMMA_E_INVALID, "jsonrpc decoder is NULL");
  return d;
}

}  // namespace

extern "C" {

// Caller owns the decoder: flemma_jsonrpc_free.
FLEMMA_API flemma_jsonrpc* flemma_jsonrpc_new(int64_t max_line, int32_t max_depth) {
  return flemma::guard_ptr([&]() -> flemma_jsonrpc* {
    return new flemma_jsonrpc(max_line > 0 ? static_cast<size_t>(max_line) : 0, max_depth);
  });
}

// Takes ownership of decoder. NULL is a no-op.
FLEMMA_API void flemma_jsonrpc_free(flemma_jsonrpc* decoder) { delete decoder; }

// The events are owned by the decoder until its next call.
FLEMMA_API int flemma_jsonrpc_feed(flemma_jsonrpc* decoder, const char* data, size_t len,
                                   const flemma_stream_event** events, size_t* count) {
  if (events) *events = nullptr;
  if (count) *count = 0;
  return flemma::guard([&] {
    auto* d = need(decoder);
    if (!data && len > 0) throw flemma::Error(FLEMMA_E_INVALID, "jsonrpc: data is NULL");
    d->events.clear();
    d->decoder.feed(std::string_view(data ? data : "", len), d->events);
    publish(d, events, count);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_jsonrpc_finish(flemma_jsonrpc* decoder, const flemma_stream_event** events,
                                     size_t* count) {
  if (events) *events = nullptr;
  if (count) *count = 0;
  return flemma::guard([&] {
    auto* d = need(decoder);
    d->events.clear();
    d->decoder.finish(d->events);
    publish(d, events, count);
    return FLEMMA_OK;
  });
}

}  // extern "C"
