// libFuzzer target for the stream decoder's kind "mcp" (MCP's Streamable HTTP
// responses as `curl --dump-header -` prints them; make fuzz): the first byte picks
// the chunking and whether a header block is put in front (JSON or SSE). Checked:
// no crash, the same events for every chunking, the last event is `end`, every
// string is valid UTF-8, every message event carries a JSON-RPC 2.0 object of the
// kind it says, and no SSE id is longer than the limit.
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

std::vector<s::Event> run(std::string_view in, size_t chunk) {
  s::Decoder d(s::Kind::Mcp);
  std::vector<s::Event> evs;
  for (size_t i = 0; i < in.size(); i += chunk) d.feed(in.substr(i, chunk), evs);
  d.finish(evs);
  return evs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t seed = data[0];
  std::string in;
  if (seed & 0x40)
    in = (seed & 0x80) ? "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
                       : "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n";
  in.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t chunk = 1 + (seed & 0x1f);
  auto whole = run(in, in.empty() ? 1 : in.size());
  auto split = run(in, chunk);
  if (!(whole == split)) std::abort();
  if (whole.empty() || whole.back().type != s::Type::End) std::abort();
  for (const auto& e : whole) {
    if (!s::detail::valid_utf8(e.a) || !s::detail::valid_utf8(e.b)) std::abort();
    if (e.type == s::Type::SseId && e.a.size() > s::kMaxEventId * 3) std::abort();
    if (e.type != s::Type::JsonRpc) continue;
    auto j = nlohmann::json::parse(e.b, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("jsonrpc", "") != "2.0") std::abort();
    const bool has_method = j.contains("method");
    if ((e.status == 1 || e.status == 2) != has_method) std::abort();
    if (has_method && j["method"].get<std::string>() != e.a) std::abort();
  }
  return 0;
}
