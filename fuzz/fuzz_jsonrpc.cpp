// libFuzzer target for the JSON-RPC line decoder (make fuzz): the first byte picks
// the chunk size and the limits (and how long a string is taken out as a blob);
// the invariants checked are: no crash, the events are the same for every
// chunking, every message event carries valid JSON of the kind it says, nothing
// is kept past the line limit, and the blobs put back at their paths (each a ""
// in the message) give the message the decoder gives with no blobs at all.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "jsonrpc.hpp"

namespace {

using nlohmann::json;
namespace s = flemma::stream;

std::vector<std::string> run(std::string_view in, size_t chunk, size_t max_line, int depth,
                             size_t blob_min, std::vector<flemma::stream::Event>* keep) {
  flemma::jsonrpc::Decoder d(max_line, depth, blob_min);
  std::vector<flemma::stream::Event> evs;
  for (size_t i = 0; i < in.size(); i += chunk) d.feed(in.substr(i, chunk), evs);
  d.finish(evs);
  std::vector<std::string> out;
  for (const auto& e : evs) out.push_back(flemma::stream::describe(e));
  if (keep) *keep = std::move(evs);
  return out;
}

// The events with each message's blobs put back at their paths; aborts when a
// blob does not follow its message or its path does not lead to a "".
std::vector<s::Event> put_back(const std::vector<s::Event>& evs) {
  std::vector<s::Event> out;
  json m;
  size_t wanted = 0;
  auto flush = [&] {
    if (out.empty() || out.back().type != s::Type::JsonRpc) return;
    out.back().b = m.dump();
    out.back().usage[0] = 0;
  };
  for (const auto& e : evs) {
    if (e.type == s::Type::Blob) {
      if (wanted == 0) abort();
      --wanted;
      json path = json::parse(e.a, nullptr, false);
      if (!path.is_array()) abort();
      json* at = &m;
      for (const auto& k : path) {
        if (k.is_string() && at->is_object() && at->contains(k.get<std::string>()))
          at = &(*at)[k.get<std::string>()];
        else if (k.is_number_unsigned() && at->is_array() && k.get<size_t>() < at->size())
          at = &(*at)[k.get<size_t>()];
        else
          abort();
      }
      if (*at != "" || e.b.empty()) abort();
      *at = e.b;
      if (wanted == 0) flush();
      continue;
    }
    if (wanted != 0) abort();
    out.push_back(e);
    if (e.type == s::Type::JsonRpc && e.usage[0] > 0) {
      m = json::parse(e.b, nullptr, false);
      if (m.is_discarded()) abort();
      wanted = static_cast<size_t>(e.usage[0]);
    }
  }
  if (wanted != 0) abort();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t seed = data[0];
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t chunk = 1 + (seed & 0x0f);
  const size_t max_line = (seed & 0x10) ? 64 : 0;
  const int depth = (seed & 0x20) ? 3 : 0;
  const size_t blob_min = (seed & 0x40) ? 0 : (seed & 0x80) ? 3 : s::kBlobMin;
  std::vector<flemma::stream::Event> evs, plain;
  auto whole = run(in, in.size() ? in.size() : 1, max_line, depth, blob_min, &evs);
  auto split = run(in, chunk, max_line, depth, blob_min, nullptr);
  if (whole != split) abort();
  run(in, in.size() ? in.size() : 1, max_line, depth, SIZE_MAX, &plain);
  auto back = put_back(evs);
  if (back.size() != plain.size()) abort();
  for (size_t i = 0; i < back.size(); ++i) {
    if (back[i].type != plain[i].type || back[i].status != plain[i].status ||
        back[i].a != plain[i].a)
      abort();
    if (back[i].type == s::Type::JsonRpc && json::parse(back[i].b) != json::parse(plain[i].b))
      abort();
  }
  if (evs.empty() || evs.back().type != flemma::stream::Type::End) abort();
  for (const auto& e : evs) {
    if (e.type == s::Type::JsonRpc &&
        (e.usage[0] < 0 || (max_line && e.b.size() > 4 * max_line + 64)))
      abort();
  }
  for (const auto& e : back) {  // the messages put back together
    if (e.type != flemma::stream::Type::JsonRpc) continue;
    auto j = nlohmann::json::parse(e.b, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("jsonrpc", "") != "2.0") abort();
    const bool has_method = j.contains("method");
    if ((e.status == 1 || e.status == 2) != has_method) abort();
    if (has_method && j["method"].get<std::string>() != e.a) abort();
  }
  return 0;
}
