// libFuzzer target for the stream decoder's kind "mcp" (MCP's Streamable HTTP
// responses as `curl --dump-header -` prints them; make fuzz): the first byte picks
// the chunking and whether a header block is put in front (JSON or SSE). Checked:
// no crash, the same events for every chunking, the last event is `end`, every
// string is valid UTF-8, every message event carries a JSON-RPC 2.0 object of the
// kind it says, no SSE id is longer than the limit, and the blobs (strings taken
// out of a message; the fuzzer makes them short) put back at their paths give
// the messages decoded with no blobs at all.
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

using nlohmann::json;

std::vector<s::Event> run(std::string_view in, size_t chunk, size_t blob_min = 3) {
  s::Decoder d(s::Kind::Mcp);
  d.set_blob_min(blob_min);
  std::vector<s::Event> evs;
  for (size_t i = 0; i < in.size(); i += chunk) d.feed(in.substr(i, chunk), evs);
  d.finish(evs);
  return evs;
}

// The events with each message's blobs put back at their paths (a blob must
// follow its message and its path lead to a ""): the events with no blobs.
std::vector<s::Event> put_back(const std::vector<s::Event>& evs) {
  std::vector<s::Event> out;
  json m;
  size_t wanted = 0;
  for (const auto& e : evs) {
    if (e.type == s::Type::Blob) {
      if (wanted == 0) std::abort();
      json path = json::parse(e.a, nullptr, false);
      if (!path.is_array()) std::abort();
      json* at = &m;
      for (const auto& k : path) {
        if (k.is_string() && at->is_object() && at->contains(k.get<std::string>()))
          at = &(*at)[k.get<std::string>()];
        else if (k.is_number_unsigned() && at->is_array() && k.get<size_t>() < at->size())
          at = &(*at)[k.get<size_t>()];
        else
          std::abort();
      }
      if (*at != "") std::abort();
      *at = e.b;
      if (--wanted == 0) {
        out.back().b = m.dump();
        out.back().usage[0] = 0;
      }
      continue;
    }
    if (wanted != 0) std::abort();
    out.push_back(e);
    if (e.type == s::Type::JsonRpc && e.usage[0] > 0) {
      m = json::parse(e.b, nullptr, false);
      if (m.is_discarded()) std::abort();
      wanted = static_cast<size_t>(e.usage[0]);
    }
  }
  if (wanted != 0) std::abort();
  return out;
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
  auto plain = run(in, in.empty() ? 1 : in.size(), SIZE_MAX);
  auto back = put_back(whole);
  if (back.size() != plain.size()) std::abort();
  for (size_t i = 0; i < back.size(); ++i) {
    if (back[i].type != plain[i].type || back[i].a != plain[i].a) std::abort();
    if (back[i].type == s::Type::JsonRpc && json::parse(back[i].b) != json::parse(plain[i].b))
      std::abort();
  }
  for (const auto& e : whole) {
    if (!s::detail::valid_utf8(e.a) || !s::detail::valid_utf8(e.b)) std::abort();
    if (e.type == s::Type::SseId && e.a.size() > s::kMaxEventId * 3) std::abort();
  }
  for (const auto& e : back) {  // the messages put back together
    if (e.type != s::Type::JsonRpc) continue;
    auto j = nlohmann::json::parse(e.b, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("jsonrpc", "") != "2.0") std::abort();
    const bool has_method = j.contains("method");
    if ((e.status == 1 || e.status == 2) != has_method) std::abort();
    if (has_method && j["method"].get<std::string>() != e.a) std::abort();
  }
  return 0;
}
