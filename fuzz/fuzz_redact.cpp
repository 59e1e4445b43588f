// libFuzzer target for the redaction of kept files (native/src/redact.cpp).
// Input: one byte giving the number of values (0-3) and the seed of where the text
// is cut, then each value as a length byte (1-16) and its bytes, then the text.
// Invariant: the text streamed through Redactor in pieces of random sizes gives
// exactly redact_text of the whole text (util.redact's semantics), and the
// redactor never holds back more than it may.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "redact.hpp"

namespace rd = flemma::redact;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t nvalues = data[0] % 4;
  std::mt19937 rng(data[0] >> 2);
  size_t pos = 1;
  std::vector<std::string> values;
  for (size_t i = 0; i < nvalues && pos < size; i++) {
    size_t len = data[pos++] % 16 + 1;
    if (pos + len > size) len = size - pos;
    values.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
  }
  std::string text(reinterpret_cast<const char*>(data + pos), size - pos);
  std::string want = rd::redact_text(text, values);
  std::string got;
  {
    rd::Redactor r(values);
    size_t at = 0;
    while (at < text.size()) {
      size_t n = std::min<size_t>(text.size() - at, rng() % 24);
      r.push(std::string_view(text).substr(at, n), got);
      at += n;
    }
    r.finish(got);
    if (r.held() != 0) __builtin_trap();
  }
  if (got != want) __builtin_trap();
  return 0;
}
