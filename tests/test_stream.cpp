#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "stream.hpp"

namespace s = flemma::stream;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(FLEMMA_SOURCE_DIR) / "spec" / "fixtures" / "stream";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

s::Kind kind_of(const fs::path& p) {
  const std::string name = p.filename().string();
  if (name.rfind("responses", 0) == 0) return s::Kind::OpenAIResponses;
  if (name.rfind("vertex", 0) == 0) return s::Kind::Vertex;
  return name.rfind("openai", 0) == 0 ? s::Kind::OpenAIChat : s::Kind::Anthropic;
}

// Decodes bytes fed in the given chunk sizes (cycled; empty: all at once).
std::vector<s::Event> decode(s::Kind kind, const std::string& bytes,
                             const std::vector<size_t>& sizes = {}) {
  s::Decoder d(kind);
  std::vector<s::Event> out;
  size_t pos = 0, k = 0;
  while (pos < bytes.size()) {
    size_t n = sizes.empty() ? bytes.size() : std::max<size_t>(1, sizes[k++ % sizes.size()]);
    n = std::min(n, bytes.size() - pos);
    d.feed(std::string_view(bytes).substr(pos, n), out);
    pos += n;
  }
  d.finish(out);
  return out;
}

std::string lines(const std::vector<s::Event>& evs) {
  std::string r;
  for (const auto& e : evs) r += s::describe(e) + "\n";
  return r;
}

std::vector<fs::path> fixtures() {
  std::vector<fs::path> list;
  for (const auto& e : fs::directory_iterator(kFixtures)) {
    auto ext = e.path().extension();
    if (ext == ".http" || ext == ".sse") list.push_back(e.path());
  }
  std::sort(list.begin(), list.end());
  return list;
}

std::vector<s::Event> c_api_decode(const char* kind, const std::string& bytes, size_t chunk) {
  std::vector<s::Event> out;
  flemma_stream* st = flemma_stream_new(kind);
  REQUIRE(st != nullptr);
  auto take = [&](const flemma_stream_event* evs, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      s::Event e;
      e.type = static_cast<s::Type>(evs[i].type);
      e.index = evs[i].index;
      e.status = evs[i].status;
      e.mask = evs[i].flags;
      for (int k = 0; k < 5; ++k) e.usage[k] = evs[i].usage[k];
      if (evs[i].a) e.a.assign(evs[i].a, evs[i].a_len);
      if (evs[i].b) e.b.assign(evs[i].b, evs[i].b_len);
      out.push_back(std::move(e));
    }
  };
  for (size_t pos = 0; pos < bytes.size(); pos += chunk) {
    const flemma_stream_event* evs = nullptr;
    size_t n = 0;
    REQUIRE(flemma_stream_feed(st, bytes.data() + pos, std::min(chunk, bytes.size() - pos), &evs,
                               &n) == FLEMMA_OK);
    take(evs, n);
  }
  const flemma_stream_event* evs = nullptr;
  size_t n = 0;
  REQUIRE(flemma_stream_finish(st, &evs, &n) == FLEMMA_OK);
  take(evs, n);
  flemma_stream_free(st);
  return out;
}

}  // namespace

TEST_CASE("stream") {
  SUBCASE("every fixture decodes to the events written beside it") {
    // Only the responses with their expected events beside them (the send
    // specs keep bodies of their own here too).
    int checked = 0;
    for (const auto& p : fixtures()) {
      auto events = fs::path(p.string() + ".events");
      if (!fs::exists(events)) continue;
      ++checked;
      CAPTURE(p.filename().string());
      auto expected = slurp(events);
      CHECK(lines(decode(kind_of(p), slurp(p))) == expected);
    }
    CHECK(checked >= 16);
  }

  SUBCASE("every fixture gives the same events however its bytes are chunked") {
    std::mt19937 rng(12345);
    for (const auto& p : fixtures()) {
      CAPTURE(p.filename().string());
      auto bytes = slurp(p);
      auto whole = decode(kind_of(p), bytes);
      CHECK(decode(kind_of(p), bytes, {1}) == whole);
      CHECK(decode(kind_of(p), bytes, {2}) == whole);
      CHECK(decode(kind_of(p), bytes, {3, 1, 7}) == whole);
      for (int round = 0; round < 50; ++round) {
        std::vector<size_t> sizes(16);
        for (auto& n : sizes) n = 1 + rng() % (round < 25 ? 8 : 200);
        auto got = decode(kind_of(p), bytes, sizes);
        CHECK(got == whole);
        for (const auto& e : got) {
          CHECK(s::detail::valid_utf8(e.a));
          CHECK(s::detail::valid_utf8(e.b));
        }
      }
    }
  }

  SUBCASE("the C API gives the same events as the decoder") {
    for (const auto& p : fixtures()) {
      CAPTURE(p.filename().string());
      auto bytes = slurp(p);
      const s::Kind k = kind_of(p);
      const char* kind = k == s::Kind::OpenAIChat        ? "openai_chat"
                         : k == s::Kind::OpenAIResponses ? "openai"
                         : k == s::Kind::Vertex          ? "vertex"
                                                         : "anthropic";
      CHECK(c_api_decode(kind, bytes, 5) == decode(kind_of(p), bytes));
    }
  }

  SUBCASE("an unknown kind is refused with a message naming the known ones") {
    CHECK(flemma_stream_new("gemini") == nullptr);
    CHECK(std::string(flemma_last_error()).find("openai_chat") != std::string::npos);
    CHECK(flemma_stream_new(nullptr) == nullptr);
    flemma_stream_free(nullptr);
  }

  SUBCASE("feeding or finishing after finish is a state error") {
    flemma_stream* st = flemma_stream_new("anthropic");
    const flemma_stream_event* evs = nullptr;
    size_t n = 99;
    CHECK(flemma_stream_feed(st, nullptr, 0, &evs, &n) == FLEMMA_OK);
    CHECK(n == 0);
    CHECK(flemma_stream_finish(st, &evs, &n) == FLEMMA_OK);
    REQUIRE(n == 1);
    CHECK(evs[0].type == FLEMMA_STREAM_END);
    CHECK(evs[0].status == 0);
    CHECK(flemma_stream_feed(st, "x", 1, &evs, &n) == FLEMMA_E_STATE);
    CHECK(n == 0);
    CHECK(flemma_stream_finish(st, &evs, &n) == FLEMMA_E_STATE);
    CHECK(flemma_stream_feed(st, nullptr, 3, &evs, &n) == FLEMMA_E_INVALID);
    flemma_stream_free(st);
  }

  SUBCASE("a CR at the end of one chunk and an LF at the start of the next end a single line") {
    std::string body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r";
    s::Decoder d(s::Kind::OpenAIChat);
    std::vector<s::Event> out;
    d.feed(body, out);
    d.feed("\n", out);  // not a blank line: the event is not dispatched yet
    CHECK(out.empty());
    d.feed("\r", out);
    d.feed("\n", out);
    REQUIRE(out.size() == 1);
    CHECK(s::describe(out[0]) == "text 0 \"a\"");
  }

  SUBCASE("lone CRs, LFs and CRLFs all end lines, mixed in one stream") {
    std::string body =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\r"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\r\n\r\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"d\"}}]}\r\n\n";
    auto evs = decode(s::Kind::OpenAIChat, body);
    CHECK(lines(evs) == "text 0 \"a\"\ntext 0 \"b\"\ntext 0 \"c\"\ntext 0 \"d\"\nend incomplete\n");
  }

  SUBCASE(
      "data lines of one event are joined with newlines; comments and other fields are skipped") {
    std::string body =
        ": comment\n"
        "id: 7\nretry: 10\nfoo: bar\n"
        "data: {\"type\":\"content_block_delta\",\n"
        "data:\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    CHECK(lines(decode(s::Kind::Anthropic, body)) == "text 2 \"x\"\nend incomplete\n");
  }

  SUBCASE("an event without data or with empty data is not dispatched") {
    CHECK(lines(decode(s::Kind::Anthropic, "event: ping\n\ndata:\n\n")) == "end incomplete\n");
  }

  SUBCASE("an event cut off before its blank line is dropped at the end") {
    std::string body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n";
    CHECK(lines(decode(s::Kind::OpenAIChat, body)) == "end incomplete\n");
  }

  SUBCASE("a byte order mark before a stream without headers is dropped, even in pieces") {
    std::string body =
        "\xEF\xBB\xBF"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
    CHECK(lines(decode(s::Kind::OpenAIChat, body, {1})) == "text 0 \"a\"\nend incomplete\n");
    CHECK(lines(decode(s::Kind::OpenAIChat, body)) == "text 0 \"a\"\nend incomplete\n");
  }

  SUBCASE(
      "interim header blocks are skipped and the last block's status and headers are reported") {
    std::string resp =
        "HTTP/1.1 100 Continue\r\n\r\n"
        "HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n"
        "HTTP/2 429 \r\nContent-Type: application/json\r\nRetry-After:  7 \r\nX-Dup: 1\r\n\r\n"
        "{\"error\":\"slow down\"}";
    auto evs = decode(s::Kind::OpenAIChat, resp);
    CHECK(lines(evs) ==
          "http 429 content-type=\"application/json\" retry-after=\"7\" x-dup=\"1\"\n"
          "error \"error\" \"slow down\"\n"
          "end incomplete body \"{\\\"error\\\":\\\"slow down\\\"}\"\n");
  }

  SUBCASE("a body that follows an interim block directly decodes the same in any chunking") {
    // Found by the fuzzer: the CR ending the body's first line was taken for the next line's.
    std::string resp =
        "HTTP/1.1 100 Continue\r\n\r\n"
        "event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n";
    auto whole = decode(s::Kind::Anthropic, resp);
    CHECK(lines(whole) == "end complete\n");
    CHECK(decode(s::Kind::Anthropic, resp, {1}) == whole);
  }

  SUBCASE("a proxy's tunnel block is skipped like an interim one") {
    std::string resp =
        "HTTP/1.1 200 Connection established\r\n\r\n"
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    CHECK(lines(decode(s::Kind::Anthropic, resp)) ==
          "http 200 content-type=\"text/event-stream\"\nend complete\n");
  }

  SUBCASE("a response cut inside its headers reports no status and is incomplete") {
    CHECK(lines(decode(s::Kind::Anthropic, "HTTP/1.1 200 OK\r\nContent-Ty")) == "end incomplete\n");
    CHECK(lines(decode(s::Kind::Anthropic, "HTT")) == "end incomplete\n");
    CHECK(lines(decode(s::Kind::Anthropic, "")) == "end incomplete\n");
  }

  SUBCASE("a large non-SSE body is kept up to 64 KiB, cut on a UTF-8 boundary") {
    std::string page;
    while (page.size() < 100000) page += "<p>h\xC3\xA9llo \xE6\x97\xA5</p>\n";
    auto evs = decode(s::Kind::Anthropic,
                      "HTTP/1.1 500 Oops\r\nContent-Type: text/html\r\n\r\n" + page, {4096});
    REQUIRE(evs.size() == 2);
    CHECK(evs[1].type == s::Type::End);
    CHECK(evs[1].mask == 1u);
    CHECK(evs[1].a.size() <= s::kMaxBody);
    CHECK(evs[1].a.size() > s::kMaxBody - 4);
    CHECK(s::detail::valid_utf8(evs[1].a));
    CHECK(page.compare(0, evs[1].a.size(), evs[1].a) == 0);
  }

  SUBCASE("the openai error shapes are all understood") {
    auto err = [](const std::string& body) {
      auto evs = decode(s::Kind::OpenAIChat,
                        "HTTP/1.1 400 Bad\r\nContent-Type: application/json\r\n\r\n" + body);
      return s::describe(evs.at(1));
    };
    CHECK(err(R"({"error":{"message":"bad model","type":"invalid_request_error"}})") ==
          R"(error "invalid_request_error" "bad model")");
    CHECK(err(R"({"error":{"message":"no key","code":"invalid_api_key"}})") ==
          R"(error "invalid_api_key" "no key")");
    CHECK(err(R"({"error":{"message":"busy","code":503}})") == R"(error "503" "busy")");
    CHECK(err(R"({"error":"model 'x' not found"})") == R"(error "error" "model 'x' not found")");
    CHECK(err(R"({"detail":"nope"})").rfind("end incomplete", 0) == 0);
  }

  SUBCASE("an SSE error in an openai stream is reported") {
    std::string body =
        "data: {\"error\":{\"message\":\"upstream failed\",\"type\":\"server_error\"}}\n\n";
    CHECK(lines(decode(s::Kind::OpenAIChat, body)) ==
          "error \"server_error\" \"upstream failed\"\nend incomplete\n");
  }

  SUBCASE(
      "openai: a new id at a used tool call index starts a new call; a close after finish_reason "
      "is complete") {
    std::string body =
        "data: "
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\","
        "\"function\":{\"name\":\"x\",\"arguments\":\"{}\"}}]}}]}\n\n"
        "data: "
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"b\","
        "\"function\":{\"name\":\"y\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}"
        "\n\n";
    CHECK(lines(decode(s::Kind::OpenAIChat, body)) ==
          "tool_use_start 0 \"a\" \"x\"\ntool_input_delta 0 \"{}\"\ntool_use_stop 0\n"
          "tool_use_start 1 \"b\" \"y\"\ntool_input_delta 1 \"{}\"\ntool_use_stop 1\nstop "
          "\"tool_calls\"\nend complete\n");
  }

  SUBCASE("event data that is not a JSON object is an error event, and decoding goes on") {
    std::string body =
        "data: [1,2]\n\n"
        "data: {\"choices\":\"nope\"}\n\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n";
    auto evs = decode(s::Kind::OpenAIChat, body);
    REQUIRE(evs.size() == 4);
    CHECK(evs[0].type == s::Type::Error);
    CHECK(evs[0].a == "malformed_event");
    CHECK(evs[1].b.find("`choices` should be an array") != std::string::npos);
    CHECK(s::describe(evs[2]) == "text 0 \"ok\"");
  }

  SUBCASE("a line longer than the limit fails the stream: an error, nothing after it is decoded") {
    std::string ok = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n";
    std::string big(s::kMaxEventData + 10, 'x');
    // With and without its line end (a line that never ends is cut off as well).
    for (const std::string& tail : {std::string("\n\n") + ok, std::string()}) {
      std::string body = ok + "data: " + big + tail;
      auto one = decode(s::Kind::OpenAIChat, body);
      auto chunked = decode(s::Kind::OpenAIChat, body, {65536});
      CHECK(one == chunked);
      CHECK(lines(one) ==
            "text 0 \"ok\"\nerror \"limit_exceeded\" \"a line of the stream is longer than 16 MiB: "
            "the "
            "stream was stopped\"\nend incomplete\n");
    }
    // An event's data lines count together.
    std::string half(s::kMaxEventData / 2 + 10, 'y');
    auto evs = decode(s::Kind::OpenAIChat, "data: " + half + "\ndata: " + half + "\n\n" + ok);
    CHECK(lines(evs) ==
          "error \"limit_exceeded\" \"an event's data is larger than 16 MiB: the stream was "
          "stopped\"\n"
          "end incomplete\n");
  }

  SUBCASE("JSON nested deeper than the limit fails the stream without parsing it") {
    // 15 MB of `[` took gigabytes in the JSON parser.
    std::string deep(15 << 20, '[');
    for (auto kind :
         {s::Kind::Anthropic, s::Kind::OpenAIChat, s::Kind::OpenAIResponses, s::Kind::Vertex}) {
      CAPTURE(static_cast<int>(kind));
      auto evs = decode(
          kind, "event: x\ndata: " + deep + "\n\ndata: {\"type\":\"message_stop\"}\n\n", {1 << 20});
      CHECK(lines(evs) ==
            "error \"limit_exceeded\" \"the `x` event's JSON is nested deeper than 128 levels: the "
            "stream was stopped\"\nend incomplete\n");
    }
    // At the limit it is parsed; brackets inside strings do not count.
    std::string at = std::string(127, '[') + "{\"a\":\"[[[[\\\"[[[\"}" + std::string(127, ']');
    CHECK(s::detail::json_depth_within(at, 128));
    CHECK_FALSE(s::detail::json_depth_within("[" + at + "]", 128));
    CHECK(s::detail::json_depth_within("\"[[[", 1));  // an unterminated string
    CHECK(s::detail::json_depth_within("\"\\", 0));
    auto evs = decode(s::Kind::OpenAIChat, "data: " + at + "\n\n");
    REQUIRE(evs.size() == 2);
    CHECK(evs[0].a == "malformed_event");  // parsed (not an object), decoding goes on
  }

  SUBCASE(
      "fail() ends the stream: an error of the caller's type, later bytes ignored, end "
      "incomplete") {
    s::Decoder d(s::Kind::Anthropic);
    std::vector<s::Event> out;
    d.feed(
        "event: message_start\ndata: "
        "{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\"}}\n\ndata: {\"ty",
        out);
    d.fail("too much", out, "response_too_large");
    CHECK(d.failed());
    d.feed("pe\":\"message_stop\"}\n\n", out);
    d.finish(out);
    CHECK(lines(out) ==
          "message_start \"m\" \"x\"\nerror \"response_too_large\" \"too much\"\nend incomplete\n");
  }

  SUBCASE("the fast path for content block deltas agrees with the JSON parser") {
    const char* cases[] = {
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}})",
        R"({"type":"content_block_delta","index":12,"delta":{"type":"thinking_delta","thinking":"a\nb\"c\\d\/e\u00e9\ud83c\udf0d\u0000"}})",
        R"({"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1"}}   )",
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf)"
        "\xC3\xA9"
        R"("}})",
    };
    for (const char* c : cases) {
      CAPTURE(c);
      s::Type t;
      int32_t idx;
      std::string text;
      REQUIRE(s::detail::fast_anthropic_delta(c, t, idx, text));
      auto j = nlohmann::json::parse(c);
      CHECK(idx == j["index"].get<int>());
      const auto& d = j["delta"];
      std::string key = t == s::Type::Text       ? "text"
                        : t == s::Type::Thinking ? "thinking"
                                                 : "partial_json";
      CHECK(text == d[key].get<std::string>());
    }
    const char* rejected[] = {
        R"({"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"Hi"}})",
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}x)",
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi","x":1}})",
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ud800"}})",
        R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\x"}})",
        R"({"type":"content_block_delta","index":1234567890,"delta":{"type":"text_delta","text":"Hi"}})",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
        "\"\t\"}}",
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
        "\"\xC0\xAF\"}}",
    };
    for (const char* c : rejected) {
      CAPTURE(c);
      s::Type t;
      int32_t idx;
      std::string text;
      CHECK_FALSE(s::detail::fast_anthropic_delta(c, t, idx, text));
    }
  }

  SUBCASE(
      "the fast path accepts exactly the texts the JSON parser accepts, at any position in a "
      "word") {
    // Pieces that stop the sixteen- or eight-byte scan, placed at every offset,
    // in texts spanning several blocks, before up to 20 bytes of trailing blanks
    // (the scan's last block is the final sixteen bytes of the data).
    const char* pieces[] = {"a",
                            "bcdefgh",
                            "ijklmnopqrstuvw",
                            "\"",
                            "\\\"",
                            "\\\\",
                            "\\n",
                            "\\u00e9",
                            "\\ud83c\\udf0d",
                            "\x7f",
                            "\xC3\xA9",
                            "\xE6\x97\xA5",
                            "\xF0\x9F\x8C\x8D",
                            "\n",
                            "\x01",
                            "\x1f",
                            " ",
                            "\xFF",
                            "\xC3",
                            "\\x",
                            "\\"};
    std::mt19937 rng(7);
    int accepted = 0;
    for (int round = 0; round < 8000; ++round) {
      std::string body;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 12); k < n; ++k)
        body += pieces[rng() % std::size(pieces)];
      std::string data =
          R"({"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":")" +
          body + "\"}}" + std::string(rng() % 21, ' ');
      CAPTURE(data);
      s::Type t;
      int32_t idx;
      std::string text;
      bool fast = s::detail::fast_anthropic_delta(data, t, idx, text);
      auto j = nlohmann::json::parse(data, nullptr, false);
      CHECK(fast == !j.is_discarded());
      if (fast && !j.is_discarded()) {
        ++accepted;
        CHECK(text == j["delta"]["text"].get<std::string>());
        CHECK(idx == 4);
      }
    }
    CHECK(accepted > 400);
  }

  SUBCASE("a decoder reusing the strings of recycled events decodes the same events") {
    // Deltas of many lengths (short ones fit the string's own buffer, long ones
    // do not), others in between, fed in pieces with the events recycled after
    // each piece as the C API does.
    std::mt19937 rng(11);
    std::string body = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
    for (int k = 0; k < 3000; ++k) {
      std::string text(rng() % 90, 'x');
      for (auto& c : text) c = static_cast<char>('a' + rng() % 26);
      if (k % 7 == 0) text += "\\u00e9\\n";
      body += "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":" +
              std::to_string(k / 100) + ",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text +
              "\"}}\n\n";
      if (k % 50 == 0) body += "event: ping\ndata: {\"type\": \"ping\"}\n\n";
      if (k % 100 == 99)
        body += "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":" +
                std::to_string(k / 100) + "}\n\n";
    }
    body += "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    auto whole = decode(s::Kind::Anthropic, body);
    for (size_t piece : {size_t{1} << 10, size_t{4093}, size_t{1} << 16}) {
      CAPTURE(piece);
      s::Decoder d(s::Kind::Anthropic);
      std::vector<s::Event> got, batch;
      for (size_t pos = 0; pos < body.size(); pos += piece) {
        d.feed(std::string_view(body).substr(pos, piece), batch);
        got.insert(got.end(), batch.begin(), batch.end());
        d.recycle(batch);
        CHECK(batch.empty());
      }
      d.finish(batch);
      got.insert(got.end(), batch.begin(), batch.end());
      CHECK(got.size() == whole.size());
      CHECK(got == whole);
    }
    CHECK(whole.size() > 2900);  // (empty deltas give no event)
  }

  SUBCASE("consecutive deltas of one block are coalesced, others are not") {
    std::vector<s::Event> out;
    auto ev = [](s::Type t, int32_t i, std::string a) {
      s::Event e;
      e.type = t;
      e.index = i;
      e.a = std::move(a);
      return e;
    };
    s::coalesce(out, ev(s::Type::Text, 0, "a"));
    s::coalesce(out, ev(s::Type::Text, 0, "b"));
    s::coalesce(out, ev(s::Type::Thinking, 0, "c"));
    s::coalesce(out, ev(s::Type::Text, 1, "d"));
    s::coalesce(out, ev(s::Type::ToolInputDelta, 2, "{"));
    s::coalesce(out, ev(s::Type::ToolInputDelta, 2, "}"));
    s::coalesce(out, ev(s::Type::ToolUseStop, 2, ""));
    s::coalesce(out, ev(s::Type::ToolUseStop, 2, ""));
    CHECK(lines(out) ==
          "text 0 \"ab\"\nthinking 0 \"c\"\ntext 1 \"d\"\ntool_input_delta 2 \"{}\"\ntool_use_stop "
          "2\ntool_use_stop 2\n");
  }

  SUBCASE("invalid UTF-8 is replaced and texts are always valid") {
    CHECK(s::detail::sanitize_utf8("a\xFF"
                                   "b\xE6\x97") ==
          "a\xEF\xBF\xBD"
          "b\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(s::detail::utf8_boundary("ab\xE6\x97\xA5", 4) == 2);
    CHECK(s::detail::utf8_boundary("ab\xE6\x97\xA5", 5) == 5);
    CHECK_FALSE(s::detail::valid_utf8("\xED\xA0\x80"));  // an encoded surrogate
  }
}

namespace {

std::vector<s::Event> coalesced(const std::vector<s::Event>& evs) {
  std::vector<s::Event> out;
  for (auto e : evs) s::coalesce(out, std::move(e));
  return out;
}

// Runs bash -c script with a decoder; returns the stream events (coalesced
// across batches) and the exit event, checking that no stream event follows it.
std::vector<s::Event> run_decoded(const char* decoder, const std::string& script,
                                  std::string* err_tail = nullptr, int* batches = nullptr) {
  flemma_procmgr* m = flemma_procmgr_new();
  REQUIRE(m != nullptr);
  const char* argv[] = {"bash", "-c", script.c_str(), nullptr};
  flemma_spawn_opts o{};
  o.argv = argv;
  o.merge_output = 0;
  o.decoder = decoder;
  int64_t id = 0, pid = 0;
  REQUIRE(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_OK);
  std::vector<s::Event> got;
  bool exited = false;
  int n = 0;
  for (int round = 0; round < 200 && !exited; ++round) {
    pollfd p{flemma_procmgr_fd(m), POLLIN, 0};
    ::poll(&p, 1, 50);
    flemma_procmgr_ack(m);
    while (flemma_proc_event* e = flemma_procmgr_next_event(m)) {
      CHECK_FALSE(exited);  // nothing after the exit event
      if (e->kind == 3) {
        ++n;
        for (size_t i = 0; i < e->stream_event_count; ++i) {
          const auto& c = e->stream_events[i];
          s::Event ev;
          ev.type = static_cast<s::Type>(c.type);
          ev.index = c.index;
          ev.status = c.status;
          ev.mask = c.flags;
          for (int k = 0; k < 5; ++k) ev.usage[k] = c.usage[k];
          if (c.a) ev.a.assign(c.a, c.a_len);
          if (c.b) ev.b.assign(c.b, c.b_len);
          s::coalesce(got, std::move(ev));
        }
      } else if (e->kind == 2) {
        exited = true;
        CHECK(e->exit_code == 0);
        CHECK(e->out_tail_len == 0);  // stdout went to the decoder
        CHECK(e->out_total_bytes > 0);
        if (err_tail) err_tail->assign(e->err_tail, e->err_tail_len);
      }
      flemma_proc_event_free(e);
    }
  }
  CHECK(exited);
  flemma_procmgr_free(m);
  if (batches) *batches = n;
  return got;
}

}  // namespace

TEST_CASE("stream through the process manager") {
  signal(SIGPIPE, SIG_IGN);

  SUBCASE("a child's stdout is decoded into batches that all come before the exit event") {
    for (const char* name :
         {"anthropic_tool_use.http", "openai_tool_calls.http", "anthropic_truncated.http"}) {
      CAPTURE(name);
      auto path = (kFixtures / name).string();
      // In three pieces with pauses, so that several batches are queued.
      std::string script =
          "f='" + path +
          "'; head -c 300 \"$f\"; sleep 0.1; tail -c +301 \"$f\" | head -c 900; sleep 0.1; "
          "tail -c +1201 \"$f\"; echo oops >&2";
      std::string err;
      int batches = 0;
      auto got =
          run_decoded(std::string(name).rfind("openai", 0) == 0 ? "openai_chat" : "anthropic",
                      script, &err, &batches);
      auto expected = coalesced(decode(kind_of(name), slurp(kFixtures / name)));
      CHECK(lines(got) == lines(expected));
      CHECK(batches >= 2);
      CHECK(err == "oops\n");
    }
  }

  SUBCASE("past max_stdout_bytes the stream fails and the child is stopped") {
    flemma_procmgr* m = flemma_procmgr_new();
    // An endless stream of text deltas.
    std::string script =
        "printf 'HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\n\\r\\n'; while :; do "
        "printf 'data: "
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":"
        "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}]}\\n\\n'; done";
    const char* argv[] = {"bash", "-c", script.c_str(), nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    o.decoder = "openai_chat";
    o.kill_grace_ms = 100;
    o.max_stdout_bytes = 200000;
    int64_t id = 0, pid = 0;
    REQUIRE(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_OK);
    size_t text = 0;
    std::string errors;
    bool exited = false;
    auto start = std::chrono::steady_clock::now();
    while (!exited && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      pollfd p{flemma_procmgr_fd(m), POLLIN, 0};
      ::poll(&p, 1, 50);
      flemma_procmgr_ack(m);
      while (flemma_proc_event* e = flemma_procmgr_next_event(m)) {
        if (e->kind == 3) {
          for (size_t i = 0; i < e->stream_event_count; ++i) {
            const auto& c = e->stream_events[i];
            if (c.type == 3) text += c.a_len;
            if (c.type == 12)
              errors += std::string(c.a, c.a_len) + ": " + std::string(c.b, c.b_len) + "\n";
            if (c.type == 13) CHECK(c.status == 0);
          }
        } else if (e->kind == 2) {
          exited = true;
          CHECK(e->signal != 0);
          CHECK(e->out_total_bytes >= 200000);
        }
        flemma_proc_event_free(e);
      }
    }
    CHECK(exited);
    CHECK(errors == "response_too_large: the response is larger than 200000 bytes\n");
    CHECK(text > 60000);
    CHECK(text < 200000);
    flemma_procmgr_free(m);
  }

  SUBCASE("a host that does not take the events holds the child back; pause holds it too") {
    flemma_procmgr* m = flemma_procmgr_new();
    // Writes 16 MiB of deltas as fast as it can.
    std::string script =
        "printf 'HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\n\\r\\n'; yes 'data: "
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":"
        "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}]}"
        "\n' | head -c 16777216";
    const char* argv[] = {"bash", "-c", script.c_str(), nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    o.decoder = "openai_chat";
    int64_t id = 0, pid = 0;
    REQUIRE(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_OK);
    auto take = [&](bool* exited, int64_t* stdout_bytes) {
      size_t bytes = 0;
      flemma_procmgr_ack(m);
      while (flemma_proc_event* e = flemma_procmgr_next_event(m)) {
        if (e->kind == 3)
          for (size_t i = 0; i < e->stream_event_count; ++i)
            bytes += e->stream_events[i].a_len + 64;
        if (e->kind == 2) {
          if (exited) *exited = true;
          if (stdout_bytes) *stdout_bytes = e->out_total_bytes;
        }
        flemma_proc_event_free(e);
      }
      return bytes;
    };
    // Untaken, the queue stops at about 1 MiB (plus one read) and stays there.
    ::usleep(500 * 1000);
    size_t queued = take(nullptr, nullptr);
    CHECK(queued > 0);
    CHECK(queued < (2u << 20));
    // Paused, nothing more comes however long the host waits.
    flemma_procmgr_pause(m, id, 1);
    // What was read before the pause arrived still comes (one read at most): take it
    // until 100 ms pass without any.
    size_t in_flight = 0;
    auto paused_at = std::chrono::steady_clock::now();
    for (;;) {
      ::usleep(100 * 1000);
      size_t got = take(nullptr, nullptr);
      in_flight += got;
      if (got == 0 || std::chrono::steady_clock::now() - paused_at > std::chrono::seconds(10))
        break;
    }
    // A pause applies between two reads (not after a loop turn's 32: 1.8 MB came
    // over 3 s under ASan with both cores busy before).
    CHECK(in_flight < (256u << 10));
    ::usleep(300 * 1000);
    CHECK(take(nullptr, nullptr) == 0);
    // Resumed and taken as it comes: all of it arrives and the child exits.
    flemma_procmgr_pause(m, id, 0);
    bool exited = false;
    int64_t total = 0;
    auto start = std::chrono::steady_clock::now();
    while (!exited && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      pollfd p{flemma_procmgr_fd(m), POLLIN, 0};
      ::poll(&p, 1, 50);
      take(&exited, &total);
    }
    CHECK(exited);
    CHECK(total > (16 << 20));  // and the header block
    flemma_procmgr_free(m);
  }

  SUBCASE("an unknown decoder or a merged output is refused before anything runs") {
    flemma_procmgr* m = flemma_procmgr_new();
    const char* argv[] = {"true", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    o.decoder = "gemini";
    int64_t id = 0, pid = 0;
    CHECK(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_E_INVALID);
    CHECK(std::string(flemma_last_error()).find("unknown decoder `gemini`") != std::string::npos);
    o.decoder = "anthropic";
    o.merge_output = 1;
    CHECK(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_E_INVALID);
    CHECK(std::string(flemma_last_error()).find("merge_output") != std::string::npos);
    CHECK(flemma_procmgr_running(m) == 0);
    flemma_procmgr_free(m);
  }
}
