// C ABI of the truncation library.
#include <cstring>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "truncate.hpp"

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

}  // extern "C"
