// libFuzzer target for the HTML converter and the fetched-page decoder
// (native/src/html.cpp). Invariants checked: no crash or sanitizer report, the
// conversion ends in bounded time (libFuzzer's -timeout), is deterministic, its
// output is valid UTF-8 (valid_utf8 leaves it as it is) and within max_output; the
// decoder gives the same events however the input is split (the first byte seeds
// the piece size), ends with one End event, and never passes its body cap.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "html.hpp"

namespace html = flemma::html;
namespace stream = flemma::stream;

namespace {
std::vector<stream::Event> run(std::string_view in, size_t piece, int64_t max) {
  html::FetchDecoder d(html::FetchDecoder::Mode::Markdown, max);
  std::vector<stream::Event> evs;
  for (size_t i = 0; i < in.size(); i += piece) d.feed(in.substr(i, piece), evs);
  d.finish(evs);
  return evs;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t piece = 1 + data[0] % 17;
  std::string_view src(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (auto f : {html::Format::Markdown, html::Format::Text}) {
    std::string a = html::to_markdown(src, f);
    if (a != html::to_markdown(src, f)) std::abort();
    if (html::valid_utf8(a) != a) std::abort();
    if (a.size() > html::max_output(src.size()) + 1) std::abort();
  }
  int64_t max = 64 + data[0];
  auto x = run(src, piece, max);
  auto y = run(src, src.size() + 1, max);
  if (x.size() != y.size() || x.empty() || x.back().type != stream::Type::End) std::abort();
  for (size_t i = 0; i < x.size(); i++)
    if (!(x[i] == y[i])) std::abort();
  return 0;
}
