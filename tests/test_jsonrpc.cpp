#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
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

namespace {

using nlohmann::json;

// The messages of events: each JsonRpc event's JSON with the Blob events after it
// put back at their paths (a path that does not lead to a "" fails the test).
std::vector<json> whole(const std::vector<s::Event>& evs) {
  std::vector<json> out;
  size_t wanted = 0;
  for (const auto& e : evs) {
    if (e.type == s::Type::JsonRpc) {
      REQUIRE(wanted == 0);
      out.push_back(json::parse(e.b));
      wanted = static_cast<size_t>(e.usage[0]);
    } else if (e.type == s::Type::Blob) {
      REQUIRE(wanted > 0);
      --wanted;
      json* at = &out.back();
      for (const auto& k : json::parse(e.a))
        at = k.is_string() ? &at->at(k.get<std::string>()) : &at->at(k.get<size_t>());
      REQUIRE(*at == "");
      *at = e.b;
    } else {
      REQUIRE(wanted == 0);
    }
  }
  REQUIRE(wanted == 0);
  return out;
}

std::vector<s::Event> events(const std::string& bytes, size_t chunk, size_t blob_min) {
  j::Decoder d(0, 0, blob_min);
  std::vector<s::Event> evs;
  for (size_t i = 0; i < bytes.size(); i += chunk)
    d.feed(std::string_view(bytes).substr(i, chunk), evs);
  d.finish(evs);
  return evs;
}

}  // namespace

TEST_CASE("jsonrpc: string values over 64 KiB come after their message, at their paths") {
  // A text with everything JSON escapes, and multi-byte UTF-8 (escaped and not).
  const std::string escaped =
      "line \\\"q\\\" \\\\ \\t\\u0001 \\u00e9 \\ud83d\\ude00 \xe2\x82\xac\\n";
  const std::string piece = "line \"q\" \\ \t\x01 \xc3\xa9 \xf0\x9f\x98\x80 \xe2\x82\xac\n";
  std::string text, want;
  while (want.size() <= s::kBlobMin) {
    text += escaped;
    want += piece;
  }
  const std::string exact(s::kBlobMin, 'x');  // exactly the limit: stays
  const std::string over(s::kBlobMin + 1, 'y');
  const std::string key(s::kBlobMin + 5, 'k');  // a long key stays where it is
  const std::string in =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" +
      text + "\"}]}}\n" + "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"a\":[{\"b\":[\"" +
      over + "\",\"short\",1,null,\"" + exact + "\",[\"" + over + "\"]]}],\"" + key +
      "\":\"v\",\"z\":\"" + over + "\"}}\n" +
      "[{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":[\"" + over +
      "\"]},{\"jsonrpc\":\"2.0\",\"id\":\"" + over + "\",\"result\":\"" + over + "\"}]\n";
  auto evs = events(in, in.size(), s::kBlobMin);
  std::vector<std::string> shape;
  for (const auto& e : evs)
    shape.push_back(e.type == s::Type::Blob      ? "blob " + e.a
                    : e.type == s::Type::JsonRpc ? "jsonrpc " + std::to_string(e.usage[0])
                                                 : s::describe(e));
  const std::vector<std::string> want_shape = {
      "jsonrpc 1",
      "blob [\"result\",\"content\",0,\"text\"]",
      "jsonrpc 3",
      "blob [\"params\",\"a\",0,\"b\",0]",
      "blob [\"params\",\"a\",0,\"b\",5,0]",
      "blob [\"params\",\"z\"]",
      "jsonrpc 1",
      "blob [\"params\",0]",
      "jsonrpc 2",
      "blob [\"id\"]",
      "blob [\"result\"]",
      "end complete",
  };
  CHECK(shape == want_shape);
  CHECK(evs[1].b == want);
  CHECK(evs[0].b ==
        "{\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"text\":\"\",\"type\":\"text\"}]}"
        "}");
  CHECK(evs[2].b.size() < 2 * s::kBlobMin + 200);  // the exact-limit string and the long key stay
  CHECK(evs[2].b.find(exact) != std::string::npos);
  CHECK(evs[2].b.find(key) != std::string::npos);
  CHECK(evs[8].a == "");  // a result's method
  // Put back, the messages are those the decoder gives with no blobs at all.
  auto all = events(in, in.size(), SIZE_MAX);
  REQUIRE(all.size() == 5);
  std::vector<json> plain;
  for (const auto& e : all) {
    CHECK(e.type != s::Type::Blob);
    CHECK(e.usage[0] == 0);
    if (e.type == s::Type::JsonRpc) plain.push_back(json::parse(e.b));
  }
  CHECK(whole(evs) == plain);
  CHECK(plain[0]["result"]["content"][0]["text"] == want);
  // Any chunking, and a small limit that takes short strings too.
  for (size_t chunk : {1000, 4096, 65537}) CHECK(events(in, chunk, s::kBlobMin) == evs);
  auto small = events(in, 4096, 0);  // every non-empty string: "2.0", "text", "m", "v", ...
  CHECK(whole(small) == plain);
  CHECK(small[0].usage[0] == 3);  // jsonrpc, result.content[0].text and .type (id: a number)
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
  CHECK(evs[0].usage[0] == 0);  // no blob follows
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

TEST_CASE("mcp http: long strings of a JSON body and of SSE events come as blobs") {
  const std::string text(s::kBlobMin + 10, 't');
  const std::string msg =
      "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[{\"type\":\"image\",\"data\":\"" +
      text + "\"}],\"structuredContent\":{\"deep\":[[{\"s\":\"" + text + "\"}]]}}}";
  const std::string plain =
      "{\"id\":4,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"data\":\"\","
      "\"type\":\"image\"}],\"structuredContent\":{\"deep\":[[{\"s\":\"\"}]]}}}";
  const std::string json_body =
      "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + msg + "\n";
  const std::string sse =
      "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nid: e7\ndata: " + msg + "\n\n";
  for (const auto* in : {&json_body, &sse}) {
    for (size_t chunk : {0, 4096}) {
      s::Decoder d(s::Kind::Mcp);
      std::vector<s::Event> evs;
      size_t step = chunk ? chunk : in->size();
      for (size_t i = 0; i < in->size(); i += step)
        d.feed(std::string_view(*in).substr(i, step), evs);
      d.finish(evs);
      const size_t at = 1;  // after the http event
      REQUIRE(evs.size() >= 5);
      CHECK(evs[at].type == s::Type::JsonRpc);
      CHECK(evs[at].b == plain);
      CHECK(evs[at].usage[0] == 2);
      CHECK(evs[at + 1].type == s::Type::Blob);
      CHECK(evs[at + 1].a == "[\"result\",\"content\",0,\"data\"]");
      CHECK(evs[at + 1].b == text);
      CHECK(evs[at + 2].a == "[\"result\",\"structuredContent\",\"deep\",0,0,\"s\"]");
      CHECK(evs[at + 2].b == text);
      if (in == &sse) CHECK(s::describe(evs[at + 3]) == "sse_id \"e7\"");
    }
  }
  // The C ABI: the count in usage[0], then FLEMMA_STREAM_BLOB.
  flemma_stream* st = flemma_stream_new("mcp");
  REQUIRE(st != nullptr);
  const flemma_stream_event* evs = nullptr;
  size_t n = 0;
  REQUIRE(flemma_stream_feed(st, json_body.data(), json_body.size(), &evs, &n) == FLEMMA_OK);
  REQUIRE(flemma_stream_finish(st, &evs, &n) == FLEMMA_OK);  // a whole body: decoded at its end
  REQUIRE(n == 4);
  CHECK(evs[0].type == FLEMMA_STREAM_JSONRPC);
  CHECK(evs[0].usage[0] == 2);
  CHECK(evs[1].type == FLEMMA_STREAM_BLOB);
  CHECK(std::string(evs[1].a, evs[1].a_len) == "[\"result\",\"content\",0,\"data\"]");
  CHECK(std::string(evs[1].b, evs[1].b_len) == text);
  CHECK(evs[3].type == FLEMMA_STREAM_END);
  flemma_stream_free(st);
}
