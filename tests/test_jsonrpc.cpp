#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "jsonrpc.hpp"

namespace j = flemma::jsonrpc;
namespace s = flemma::stream;

namespace {

std::vector<std::string> decode(const std::string& bytes, size_t chunk, size_t max_line = 0,
                                int depth = 0) {
  j::Decoder d(max_line, depth);
  std::vector<s::Event> evs;
  if (chunk == 0) chunk = bytes.size() ? bytes.size() : 1;
  for (size_t i = 0; i < bytes.size(); i += chunk)
    d.feed(std::string_view(bytes).substr(i, chunk), evs);
  d.finish(evs);
  std::vector<std::string> out;
  for (const auto& e : evs) out.push_back(s::describe(e));
  return out;
}

}  // namespace

TEST_CASE("jsonrpc: classifies requests, notifications, results and errors, any chunking") {
  const std::string in =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\r\n"
      "\n   \n"
      "{ \"jsonrpc\": \"2.0\", \"id\": \"a\", \"result\": {\"tools\": [], \"x\": \"\\u00e9\"} }\n"
      "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32601,\"message\":\"no\"}}";
  const std::vector<std::string> want = {
      "jsonrpc 1 \"ping\" "
      "\"{\\\"id\\\":1,\\\"jsonrpc\\\":\\\"2.0\\\",\\\"method\\\":\\\"ping\\\"}\"",
      "jsonrpc 2 \"notifications/progress\" "
      "\"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"method\\\":\\\"notifications/"
      "progress\\\",\\\"params\\\":{\\\"progress\\\":1}}\"",
      "jsonrpc 3 \"\" "
      "\"{\\\"id\\\":\\\"a\\\",\\\"jsonrpc\\\":\\\"2.0\\\",\\\"result\\\":{\\\"tools\\\":[],"
      "\\\"x\\\":\\\"\xc3\xa9\\\"}}\"",
      "jsonrpc 4 \"\" "
      "\"{\\\"error\\\":{\\\"code\\\":-32601,\\\"message\\\":\\\"no\\\"},\\\"id\\\":3,"
      "\\\"jsonrpc\\\":\\\"2.0\\\"}\"",
      "end complete",
  };
  CHECK(decode(in, 0) == want);
  for (size_t chunk : {1, 2, 3, 7, 64}) CHECK(decode(in, chunk) == want);
}

TEST_CASE("jsonrpc: garbage, non-messages and a batch") {
  auto out = decode(
      "hello world\n[1,2]\n{\"id\":1,\"result\":1}\n"
      "[{\"jsonrpc\":\"2.0\",\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"method\":\"b\"}]\n",
      5);
  REQUIRE(out.size() == 7);
  CHECK(out[0].rfind("error \"invalid_json\" \"not JSON: hello world\"", 0) == 0);
  CHECK(out[1].rfind("error \"not_jsonrpc\"", 0) == 0);  // each member of [1,2]
  CHECK(out[2].rfind("error \"not_jsonrpc\"", 0) == 0);
  CHECK(out[3].rfind("error \"not_jsonrpc\"", 0) == 0);  // no "jsonrpc": "2.0"
  CHECK(out[4].rfind("jsonrpc 2 \"a\"", 0) == 0);
  CHECK(out[5].rfind("jsonrpc 2 \"b\"", 0) == 0);
  CHECK(out[6] == "end complete");
}

TEST_CASE("jsonrpc: a line over the limit is dropped as it streams, the next line is decoded") {
  std::string big(1000, 'x');
  std::string in =
      "{\"jsonrpc\":\"2.0\",\"method\":\"" + big + "\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"ok\"}\n";
  for (size_t chunk : {0, 1, 10, 333}) {
    auto out = decode(in, chunk, 100);
    REQUIRE(out.size() == 3);
    CHECK(out[0].rfind("error \"line_too_long\"", 0) == 0);
    CHECK(out[1].rfind("jsonrpc 2 \"ok\"", 0) == 0);
  }
  // Unterminated at the end: reported, incomplete.
  auto out = decode(std::string(500, 'y'), 64, 100);
  REQUIRE(out.size() == 2);
  CHECK(out[0].rfind("error \"line_too_long\"", 0) == 0);
  CHECK(out[1] == "end incomplete");
}

TEST_CASE(
    "jsonrpc: nesting past the limit is refused before parsing; brackets in strings do not count") {
  std::string deep = "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":" + std::string(100, '[') +
                     std::string(100, ']') + "}\n";
  auto out = decode(deep, 0, 0, 16);
  REQUIRE(out.size() == 2);
  CHECK(out[0].rfind("error \"too_deep\"", 0) == 0);
  std::string strs =
      "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"s\":\"[[[[[[[[[[[[[[[[[[[[\\\"[[[[[[\"}}"
      "\n";
  out = decode(strs, 0, 0, 4);
  REQUIRE(out.size() == 2);
  CHECK(out[0].rfind("jsonrpc 2 \"m\"", 0) == 0);
  CHECK(j::json_depth("[[[]]]", 10) == 3);
  CHECK(j::json_depth("[[[]]]", 2) == 3);
}

TEST_CASE(
    "jsonrpc: invalid UTF-8 is an error, quotes stay valid UTF-8; feed after finish is an error") {
  auto out = decode("{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}\n", 0);
  REQUIRE(out.size() == 2);
  CHECK(out[0].rfind("error \"invalid_json\"", 0) == 0);
  j::Decoder d;
  std::vector<s::Event> evs;
  d.finish(evs);
  CHECK_THROWS_AS(d.feed("x", evs), flemma::Error);
}

TEST_CASE("jsonrpc: the C ABI") {
  flemma_jsonrpc* d = flemma_jsonrpc_new(64, 8);
  REQUIRE(d != nullptr);
  const flemma_stream_event* evs = nullptr;
  size_t n = 0;
  std::string a = "{\"jsonrpc\":\"2.0\",\"id\":7,\"res";
  REQUIRE(flemma_jsonrpc_feed(d, a.data(), a.size(), &evs, &n) == FLEMMA_OK);
  CHECK(n == 0);
  std::string b = "ult\":{}}\n";
  REQUIRE(flemma_jsonrpc_feed(d, b.data(), b.size(), &evs, &n) == FLEMMA_OK);
  REQUIRE(n == 1);
  CHECK(evs[0].type == FLEMMA_STREAM_JSONRPC);
  CHECK(evs[0].status == FLEMMA_JSONRPC_RESULT);
  CHECK(std::string(evs[0].b, evs[0].b_len) == "{\"id\":7,\"jsonrpc\":\"2.0\",\"result\":{}}");
  REQUIRE(flemma_jsonrpc_finish(d, &evs, &n) == FLEMMA_OK);
  REQUIRE(n == 1);
  CHECK(evs[0].type == FLEMMA_STREAM_END);
  CHECK(flemma_jsonrpc_finish(d, &evs, &n) == FLEMMA_E_STATE);
  CHECK(flemma_jsonrpc_feed(nullptr, "", 0, &evs, &n) == FLEMMA_E_INVALID);
  flemma_jsonrpc_free(d);
  flemma_jsonrpc_free(nullptr);
}

namespace {

// The events of kind "mcp" (MCP's Streamable HTTP responses) for bytes fed in chunks.
std::vector<std::string> mcp(const std::string& bytes, size_t chunk) {
  s::Decoder d(s::Kind::Mcp);
  std::vector<s::Event> evs;
  if (chunk == 0) chunk = bytes.size() ? bytes.size() : 1;
  for (size_t i = 0; i < bytes.size(); i += chunk)
    d.feed(std::string_view(bytes).substr(i, chunk), evs);
  d.finish(evs);
  std::vector<std::string> out;
  for (const auto& e : evs) out.push_back(s::describe(e));
  return out;
}

}  // namespace

TEST_CASE("mcp http: a JSON body, an SSE body with ids, any chunking") {
  const std::string json =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: abc-1\r\n\r\n"
      "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {}\n}\n";
  for (size_t chunk : {0, 1, 5, 17}) {
    auto out = mcp(json, chunk);
    REQUIRE(out.size() == 3);
    CHECK(out[0].rfind("http 200", 0) == 0);
    CHECK(out[0].find("mcp-session-id=\"abc-1\"") != std::string::npos);
    CHECK(out[1] ==
          "jsonrpc 3 \"\" \"{\\\"id\\\":1,\\\"jsonrpc\\\":\\\"2.0\\\",\\\"result\\\":{}}\"");
    CHECK(out[2] == "end complete");
  }
  const std::string sse =
      "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
      "id: e0\r\ndata:\r\n\r\n"
      ": comment\r\nevent: message\r\nid: e1\r\ndata: "
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
      "progress\",\r\ndata: \"params\":{}}\r\n\r\n"
      "event: message\ndata:{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n\n";
  for (size_t chunk : {0, 1, 3, 17}) {
    auto out = mcp(sse, chunk);
    REQUIRE(out.size() == 6);
    CHECK(out[1] == "sse_id \"e0\"");
    CHECK(out[2].rfind("jsonrpc 2 \"notifications/progress\"", 0) == 0);
    CHECK(out[3] == "sse_id \"e1\"");
    CHECK(out[4].rfind("jsonrpc 3 \"\"", 0) == 0);
    CHECK(out[5] == "end complete");
  }
}

TEST_CASE("mcp http: garbage, a bad status, a body over 16 MiB") {
  auto out = mcp("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\nnot json {{{", 4);
  REQUIRE(out.size() == 3);
  CHECK(out[1].rfind("error \"invalid_json\"", 0) == 0);
  out = mcp("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: \"x\"\n\n", 3);
  REQUIRE(out.size() == 3);
  CHECK(out[1].rfind("error \"not_jsonrpc\"", 0) == 0);
  out =
      mcp("HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\r\n"
          "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32001,\"message\":\"Session not "
          "found\"}}",
          7);
  REQUIRE(out.size() == 3);
  CHECK(out[0].rfind("http 404", 0) == 0);
  CHECK(out[1] == "error \"-32001\" \"Session not found\"");
  CHECK(out[2].rfind("end incomplete body", 0) == 0);
  std::string big =
      "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,"
      "\"result\":{\"x\":\"" +
      std::string(17 << 20, 'x') + "\"}}";
  out = mcp(big, 1 << 16);
  REQUIRE(out.size() == 3);
  CHECK(out[1].rfind("error \"limit_exceeded\"", 0) == 0);
  CHECK(out[2] == "end incomplete");
}
