// libFuzzer target for the JSON-RPC line decoder (make fuzz): the first byte picks
// the chunk size and the limits; the invariants checked are: no crash, the events
// are the same for every chunking, every message event carries valid JSON of the
// kind it says, and nothing is kept past the line limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "jsonrpc.hpp"

namespace {

std::vector<std::string> run(std::string_view in, size_t chunk, size_t max_line, int depth,
                             std::vector<flemma::stream::Event>* keep) {
  flemma::jsonrpc::Decoder d(max_line, depth);
  std::vector<flemma::stream::Event> evs;
  for (size_t i = 0; i < in.size(); i += chunk) d.feed(in.substr(i, chunk), evs);
  d.finish(evs);
  std::vector<std::string> out;
  for (const auto& e : evs) out.push_back(flemma::stream::describe(e));
  if (keep) *keep = std::move(evs);
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
  std::vector<flemma::stream::Event> evs;
  auto whole = run(in, in.size() ? in.size() : 1, max_line, depth, &evs);
  auto split = run(in, chunk, max_line, depth, nullptr);
  if (whole != split) abort();
  if (evs.empty() || evs.back().type != flemma::stream::Type::End) abort();
  for (const auto& e : evs) {
    if (e.type != flemma::stream::Type::JsonRpc) continue;
    auto j = nlohmann::json::parse(e.b, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("jsonrpc", "") != "2.0") abort();
    const bool has_method = j.contains("method");
    if ((e.status == 1 || e.status == 2) != has_method) abort();
    if (has_method && j["method"].get<std::string>() != e.a) abort();
    if (max_line && e.b.size() > 4 * max_line + 64) abort();
  }
  return 0;
}
