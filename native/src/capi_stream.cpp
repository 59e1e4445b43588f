// C ABI of the stream decoder: thin forwarders into flemma::stream.
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "stream.hpp"

struct flemma_stream {
  explicit flemma_stream(flemma::stream::Kind kind) : decoder(kind) {}
  flemma::stream::Decoder decoder;
  std::vector<flemma::stream::Event> events;  // of the last call
  std::vector<flemma_stream_event> pub;       // points into `events`
};

namespace {

void publish(flemma_stream* s, const flemma_stream_event** events, size_t* count) {
  flemma::stream::to_c(s->events, s->pub);
  if (events) *events = s->pub.empty() ? nullptr : s->pub.data();
  if (count) *count = s->pub.size();
}

flemma_stream* need(flemma_stream* s) {
  if (!s) throw flemma::Error(FLEMMA_E_INVALID, "stream decoder is NULL");
  return s;
}

}  // namespace

void flemma::stream::to_c(const std::vector<Event>& in, std::vector<flemma_stream_event>& out) {
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto& e = in[i];
    auto& p = out[i];
    p.type = static_cast<int32_t>(e.type);
    p.index = e.index;
    p.status = e.status;
    p.flags = e.mask;
    for (int k = 0; k < kUsageFields; ++k) p.usage[k] = e.usage[k];
    p.a = e.a.empty() ? nullptr : e.a.data();
    p.a_len = e.a.size();
    p.b = e.b.empty() ? nullptr : e.b.data();
    p.b_len = e.b.size();
  }
}

extern "C" {

// Caller owns the decoder: flemma_stream_free.
FLEMMA_API flemma_stream* flemma_stream_new(const char* kind) {
  return flemma::guard_ptr([&]() -> flemma_stream* {
    auto k = flemma::stream::kind_from_name(kind ? kind : "");
    if (!k) {
      flemma::set_last_error(std::string("stream: unknown kind `") + (kind ? kind : "(null)") +
                             "`: use anthropic, openai_chat, openai or vertex");
      return nullptr;
    }
    return new flemma_stream(*k);
  });
}

// Takes ownership of stream. NULL is a no-op.
FLEMMA_API void flemma_stream_free(flemma_stream* stream) { delete stream; }

// The events are owned by the decoder until its next call.
FLEMMA_API int flemma_stream_feed(flemma_stream* stream, const char* data, size_t len,
                                  const flemma_stream_event** events, size_t* count) {
  if (events) *events = nullptr;
  if (count) *count = 0;
  return flemma::guard([&] {
    auto* s = need(stream);
    if (!data && len > 0) throw flemma::Error(FLEMMA_E_INVALID, "stream: data is NULL");
    s->decoder.recycle(s->events);
    s->decoder.feed(std::string_view(data ? data : "", len), s->events);
    publish(s, events, count);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_stream_finish(flemma_stream* stream, const flemma_stream_event** events,
                                    size_t* count) {
  if (events) *events = nullptr;
  if (count) *count = 0;
  return flemma::guard([&] {
    auto* s = need(stream);
    s->decoder.recycle(s->events);
    s->decoder.finish(s->events);
    publish(s, events, count);
    return FLEMMA_OK;
  });
}

}  // extern "C"
