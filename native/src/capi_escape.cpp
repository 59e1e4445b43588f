// C ABI of the escaping of model text: thin forwarders into flemma::escape.
#include <cstring>
#include <string>

#include "escape.hpp"
#include "flemma/flemma.h"
#include "guard.hpp"

struct flemma_escaper {
  flemma::escape::Escaper escaper;
  std::string out;  // of the last feed
};

extern "C" {

// Caller owns the escaper: flemma_escaper_free.
FLEMMA_API flemma_escaper* flemma_escaper_new(void) {
  return flemma::guard_ptr([] { return new flemma_escaper(); });
}

FLEMMA_API void flemma_escaper_free(flemma_escaper* escaper) { delete escaper; }

// *out is owned by the escaper until its next call.
FLEMMA_API int flemma_escaper_feed(flemma_escaper* escaper, const char* data, size_t len, int final,
                                   const char** out, size_t* out_len) {
  return flemma::guard([&] {
    if (!escaper) throw flemma::Error(FLEMMA_E_INVALID, "flemma_escaper_feed: escaper is NULL");
    if (!data && len > 0)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_escaper_feed: data is NULL but len is not 0");
    escaper->out.clear();
    escaper->escaper.feed(std::string_view(data ? data : "", len), final != 0, escaper->out);
    if (out) *out = escaper->out.data();
    if (out_len) *out_len = escaper->out.size();
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_escaper_fence(const flemma_escaper* escaper, char* ch, int64_t* len) {
  return flemma::guard([&] {
    if (!escaper) throw flemma::Error(FLEMMA_E_INVALID, "flemma_escaper_fence: escaper is NULL");
    if (ch) *ch = escaper->escaper.fence_ch();
    if (len) *len = escaper->escaper.fence_len();
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_escaper_reset(flemma_escaper* escaper) {
  return flemma::guard([&] {
    if (!escaper) throw flemma::Error(FLEMMA_E_INVALID, "flemma_escaper_reset: escaper is NULL");
    escaper->escaper.reset();
    return FLEMMA_OK;
  });
}

// out is the caller's, len bytes at least.
FLEMMA_API int flemma_unescape(const char* text, size_t len, char* out, size_t* out_len) {
  return flemma::guard([&] {
    if (!text && len > 0)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_unescape: text is NULL but len is not 0");
    if (!out && len > 0)
      throw flemma::Error(FLEMMA_E_INVALID, "flemma_unescape: out is NULL but len is not 0");
    std::string s = flemma::escape::unescape(std::string_view(text ? text : "", len));
    if (s.size() > len) throw flemma::Error(FLEMMA_E_INTERNAL, "flemma_unescape: the output grew");
    if (!s.empty()) std::memcpy(out, s.data(), s.size());
    if (out_len) *out_len = s.size();
    return FLEMMA_OK;
  });
}

}  // extern "C"
