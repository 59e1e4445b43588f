// libFuzzer target for the stream decoder (`make fuzz`): the first bytes of the
// input choose the provider kind and a chunking; decoding the rest in those
// chunks (also with the events recycled after each chunk, as the C API does)
// must give exactly the events of feeding it at once, every emitted
// string must be valid UTF-8, the last event must be `end`, and the fast path
// for content block deltas must agree with the JSON parser.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "stream.hpp"

namespace s = flemma::stream;

namespace {

std::vector<s::Event> decode(s::Kind kind, std::string_view bytes, const uint8_t* sizes,
                             size_t nsizes) {
  s::Decoder d(kind);
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

// As the C API decodes: the events of each piece are copied out, then recycled
// (their strings are reused for the next events).
std::vector<s::Event> decode_recycled(s::Kind kind, std::string_view bytes, const uint8_t* sizes,
                                      size_t nsizes) {
  s::Decoder d(kind);
  std::vector<s::Event> out, batch;
  size_t pos = 0, k = 0;
  while (pos < bytes.size()) {
    size_t n = nsizes ? 1 + sizes[k++ % nsizes] % 64 : bytes.size();
    n = std::min(n, bytes.size() - pos);
    d.feed(bytes.substr(pos, n), batch);
    out.insert(out.end(), batch.begin(), batch.end());
    d.recycle(batch);
    pos += n;
  }
  d.finish(batch);
  out.insert(out.end(), batch.begin(), batch.end());
  return out;
}

void check_fast_path(std::string_view data) {
  s::Type t;
  int32_t index;
  std::string text;
  if (!s::detail::fast_anthropic_delta(data, t, index, text)) return;
  auto j = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded()) std::abort();  // the fast path accepted invalid JSON
  const char* key = t == s::Type::Text       ? "text"
                    : t == s::Type::Thinking ? "thinking"
                                             : "partial_json";
  if (j.at("index").get<int64_t>() != index || j.at("delta").at(key).get<std::string>() != text)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const s::Kind kinds[] = {s::Kind::Anthropic, s::Kind::OpenAIChat, s::Kind::OpenAIResponses,
                                  s::Kind::Vertex};
  s::Kind kind = kinds[data[0] & 3];
  size_t nsizes = std::min<size_t>(data[1] % 8, size - 2);
  const uint8_t* sizes = data + 2;
  std::string_view bytes(reinterpret_cast<const char*>(data + 2 + nsizes), size - 2 - nsizes);

  auto whole = decode(kind, bytes, nullptr, 0);
  auto chunked = decode(kind, bytes, sizes, nsizes);
  auto single = decode(kind, bytes, reinterpret_cast<const uint8_t*>("\0"), 1);
  auto recycled = decode_recycled(kind, bytes, sizes, nsizes);
  if (!(whole == chunked) || !(whole == single) || !(whole == recycled)) std::abort();
  if (whole.empty() || whole.back().type != s::Type::End) std::abort();
  for (const auto& e : whole)
    if (!s::detail::valid_utf8(e.a) || !s::detail::valid_utf8(e.b)) std::abort();

  // Every data line also goes through the fast path on its own.
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t nl = bytes.find('\n', pos);
    if (nl == std::string_view::npos) nl = bytes.size();
    std::string_view line = bytes.substr(pos, nl - pos);
    if (line.substr(0, 6) == "data: ") check_fast_path(line.substr(6));
    pos = nl + 1;
  }
  check_fast_path(bytes);
  return 0;
}
