// Streaming response decoder: a state machine fed arbitrary byte chunks of what
// `curl --dump-header -` prints (HTTP header blocks, then the body). An SSE body
// is framed into events whose JSON is decoded, per provider kind, into one
// normalized event stream; any other body is kept (bounded) and reported at the
// end. Chunks may split anything (a header line, a CRLF, a UTF-8 sequence): the
// events are the same for every chunking of the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flemma/flemma.h"

namespace flemma::stream {

// The values of enum flemma_stream_event_type in flemma.h.
enum class Type : int32_t {
  Http = 1,               // status; a = headers, "name: value\n" each, names lower-cased
  MessageStart = 2,       // a = id, b = model
  Text = 3,               // index; a = text
  Thinking = 4,           // index; a = text
  ThinkingSignature = 5,  // index; a = signature
  RedactedThinking = 6,   // index; a = data
  ToolUseStart = 7,       // index; a = id, b = name
  ToolInputDelta = 8,     // index; a = partial JSON text
  ToolUseStop = 9,        // index
  Usage = 10,             // mask of present usage fields, usage[]
  Stop = 11,              // a = reason
  Error = 12,             // a = error type, b = message
  End = 13,               // status = 1 if complete; mask bit 1: a = the kept non-SSE body
  JsonRpc = 14,  // status = jsonrpc::MessageKind; a = method; b = the message (jsonrpc.hpp);
                 // usage[0] = the number of Blob events that follow it
  // 15-17: the search output decoder's events (search.hpp)
  SseId = 18,  // a = the `id` of the SSE event just dispatched (kind "mcp")
  // 19: spawn's decoder "fetch" (html.hpp)
  Blob = 20,  // a = a path (compact JSON array of keys and 0-based indices); b = the string
              // value taken out of the JsonRpc event before it at that path
};

// Usage fields, in the order of Event::usage (bit i of Event::mask: field i present).
enum UsageField {
  kInputTokens = 0,
  kOutputTokens,
  kCacheReadTokens,
  kCacheWriteTokens,
  kThinkingTokens,
  kUsageFields
};

struct Event {
  Type type = Type::End;
  int32_t index = -1;
  int32_t status = 0;
  uint32_t mask = 0;
  int64_t usage[kUsageFields] = {};
  std::string a, b;

  bool operator==(const Event& o) const;
};

// The provider kinds. New kinds (openai Responses, vertex) are one more entry and
// one more Provider implementation in stream.cpp. Mcp is no model provider: the
// response of MCP's Streamable HTTP transport, whose SSE events' data (or whole
// JSON body, up to kMaxEventData) are JSON-RPC 2.0 messages (Type::JsonRpc events),
// each SSE event's id reported (Type::SseId) for a resumption.
enum class Kind { Anthropic = 1, OpenAIChat = 2, OpenAIResponses = 3, Vertex = 4, Mcp = 5 };
std::optional<Kind> kind_from_name(std::string_view name);

// Limits.
constexpr size_t kMaxBody = 64 * 1024;         // a non-SSE body kept for the report
constexpr size_t kMaxHeaderBlock = 64 * 1024;  // header lines beyond this are dropped
constexpr size_t kMaxEventData = 16 << 20;  // one SSE line or event's data (then the stream fails)
constexpr size_t kMaxJsonDepth = 128;       // nesting of an event's JSON (then the stream fails)
constexpr size_t kMaxEventId = 1024;        // an SSE `id` (a longer one is ignored)
constexpr size_t kBlobMin = 64 * 1024;  // longer string values of a JSON-RPC message: Type::Blob

// The error type of a limit that failed the stream (Event::a of its Error event):
// a line or event larger than kMaxEventData, JSON nested deeper than
// kMaxJsonDepth, or a limit of the caller (Decoder::fail).
inline constexpr const char* kLimitError = "limit_exceeded";

class Provider;  // one provider's event decoder (stream.cpp)

class Decoder {
 public:
  explicit Decoder(Kind kind);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Decodes bytes and appends the events to out.
  void feed(std::string_view in, std::vector<Event>& out);
  // Ends the stream: flushes, reports a kept body, and appends the `end` event.
  // Feeding after finish is an error (flemma::Error, FLEMMA_E_STATE).
  void finish(std::vector<Event>& out);
  bool finished() const { return phase_ == Phase::Done; }
  // Ends the stream early: appends an Error event (kLimitError, message) and
  // ignores every later byte; finish() then reports the stream incomplete. The
  // decoder fails by itself when a line, an event or its JSON passes the limits.
  void fail(std::string message, std::vector<Event>& out, const char* type = kLimitError);
  bool failed() const { return failed_; }
  // Kind mcp: string values longer than n bytes are taken out of the messages
  // (Type::Blob; default kBlobMin). For the tests and the fuzzer.
  void set_blob_min(size_t n);
  // Clears events, keeping some of their strings' memory for the next events
  // (a caller that decodes batch after batch allocates less).
  void recycle(std::vector<Event>& events);

 private:
  enum class Phase { Start, Headers, Sse, Raw, Done };

  void header_bytes(std::string_view& in, std::vector<Event>& out);
  void header_line(std::string_view line, std::vector<Event>& out);
  void end_header_block(std::vector<Event>& out);
  void sse_bytes(std::string_view in, std::vector<Event>& out);
  void sse_line(std::string_view line, bool stable, std::vector<Event>& out);
  void keep_data();
  void dispatch(std::vector<Event>& out);
  void line_too_long(std::vector<Event>& out);
  void raw_bytes(std::string_view in);

  std::unique_ptr<Provider> provider_;
  std::vector<std::string> spare_;  // see recycle
  Phase phase_ = Phase::Start;
  // Line assembly (header lines and SSE lines).
  std::string line_;
  bool skip_lf_ = false;  // the last line ended with a CR: a following LF belongs to it
  bool line_overflow_ = false;
  // Header block.
  int status_ = 0;
  bool in_block_ = false;
  std::string headers_;  // "name: value\n" lines of the current block
  std::string content_type_;
  // SSE event being assembled.
  std::string event_name_;
  std::string data_;
  std::string_view data_view_;  // the data while it is one line in the caller's buffer
  bool data_in_view_ = false;
  bool has_data_ = false;
  bool bom_checked_ = false;
  int bom_seen_ = 0;
  bool failed_ = false;
  std::string event_id_;  // the id field of the SSE event being assembled
  bool has_id_ = false;
  // Raw (non-SSE) body.
  std::string body_;
  bool body_truncated_ = false;
  size_t body_limit_ = kMaxBody;
};

// Appends ev to out, merging it into out's last event when both are deltas of
// the same type (text, thinking, tool input) and block index.
void coalesce(std::vector<Event>& out, Event&& ev);

// One line describing an event, the notation of the fixtures' .events files:
//   text 0 "Hello"     usage input=10 output=5     end complete
std::string describe(const Event& ev);

// The C view of events (capi_stream.cpp): out[i] points into in[i]'s strings.
void to_c(const std::vector<Event>& in, std::vector<flemma_stream_event>& out);

namespace detail {
// The fast path for Anthropic's content block deltas (text, thinking, input
// JSON): true when data is exactly such an event, valid JSON in the compact
// form the API sends; then type, index and the decoded string are set. Anything
// else (including any JSON it does not recognize) returns false and goes to the
// general decoder, which must give the same result (checked by the fuzzer).
bool fast_anthropic_delta(std::string_view data, Type& type, int32_t& index, std::string& text);

// Whether the JSON text s nests arrays and objects at most max deep (strings
// are skipped; s need not be valid JSON). One pass; stops at the first excess.
bool json_depth_within(std::string_view s, size_t max);

// One JSON-RPC 2.0 text (a message or a batch) decoded into Type::JsonRpc events
// (status: jsonrpc::MessageKind; a: the method; b: the message as compact JSON) or
// one Type::Error (a: "invalid_json", "too_deep" or "not_jsonrpc"; b: why, with a
// short quote). A blank text gives nothing. Every string value (not an object's
// key) longer than blob_min bytes is taken out of a message: its compact JSON holds
// "" there, its JsonRpc event's usage[0] counts them, and one Type::Blob event per
// string follows it (a: the path, made here, never read from the text; b: the
// string). Shared by the JSON-RPC line decoder and the kind "mcp".
void jsonrpc_text(std::string_view text, int max_depth, std::vector<Event>& out,
                  size_t blob_min = kBlobMin);

// Whether s is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);
// s with every invalid UTF-8 sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s);
// The length of the longest prefix of s that does not end inside a UTF-8
// sequence (at most s.size()).
size_t utf8_boundary(std::string_view s, size_t max);
}  // namespace detail

}  // namespace flemma::stream
