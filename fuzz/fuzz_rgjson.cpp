// libFuzzer target for the decoder of `rg --json` output (`make fuzz`): the first
// bytes choose max_results and a chunking; decoding the rest in those pieces must
// give exactly the events of feeding it at once, every string must be valid UTF-8
// and within the line limit, at most max_results matches may be reported, the
// summary (always the last event) must count at least those, and no more lines
// are kept than the limit allows.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "search.hpp"
#include "stream.hpp"

namespace se = flemma::search;
namespace s = flemma::stream;

namespace {

std::vector<s::Event> decode(std::string_view bytes, int64_t max, const uint8_t* sizes,
                             size_t nsizes) {
  se::OutputDecoder d(se::OutputDecoder::Kind::RgJson, max);
  std::vector<s::Event> out;
  size_t pos = 0, k = 0;
  while (pos < bytes.size()) {
    size_t n = nsizes ? 1 + sizes[k++ % nsizes] % 64 : bytes.size();
    n = std::min(n, bytes.size() - pos);
    d.feed(bytes.substr(pos, n), out);
    pos += n;
  }
  d.finish(out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  int64_t max = data[0] % 16;
  size_t nsizes = std::min<size_t>(data[1] % 8, size - 2);
  const uint8_t* sizes = data + 2;
  std::string_view bytes(reinterpret_cast<const char*>(data + 2 + nsizes), size - 2 - nsizes);

  auto whole = decode(bytes, max, nullptr, 0);
  auto chunked = decode(bytes, max, sizes, nsizes);
  if (!(whole == chunked)) std::abort();
  if (whole.empty() || static_cast<int32_t>(whole.back().type) != se::kSummary) std::abort();
  int64_t matches = 0;
  for (size_t i = 0; i + 1 < whole.size(); ++i) {
    const auto& e = whole[i];
    if (static_cast<int32_t>(e.type) != se::kMatch) std::abort();
    if (e.status == 1) ++matches;
    if (!s::detail::valid_utf8(e.a) || !s::detail::valid_utf8(e.b)) std::abort();
    if (e.b.size() > se::kMaxLine || e.a.size() > se::kMaxLine) std::abort();
  }
  if (matches > max || whole.back().usage[0] < matches) std::abort();
  return 0;
}
