// JSON-RPC 2.0 over newline-delimited stdio (the MCP stdio transport): a decoder
// fed arbitrary byte chunks that frames lines, parses each as JSON with bounded
// line length and nesting depth, classifies it (request, notification, result,
// error response) and hands it on as one compact JSON text. Every byte comes from
// a process that may be hostile: a line past max_line is dropped while it streams
// (memory stays bounded) and reported as one error; so are invalid JSON, nesting
// past max_depth and JSON that is no JSON-RPC 2.0 message. Chunks may split
// anything: the events are the same for every chunking of the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stream.hpp"

namespace flemma::jsonrpc {

// Event::status of a Type::JsonRpc event (FLEMMA_JSONRPC_* in flemma.h).
enum MessageKind : int32_t { kRequest = 1, kNotification = 2, kResult = 3, kError = 4 };

constexpr size_t kDefaultMaxLine = 16 << 20;  // one message (a large tool result, an image)
constexpr int kDefaultMaxDepth = 64;
constexpr size_t kQuoteCap = 120;  // bytes of a bad line quoted in its error

class Decoder {
 public:
  // max_line == 0 / max_depth <= 0: the defaults. String values longer than
  // blob_min bytes are taken out of the messages (Type::Blob, see jsonrpc_text).
  Decoder(size_t max_line = kDefaultMaxLine, int max_depth = kDefaultMaxDepth,
          size_t blob_min = stream::kBlobMin);

  // Appends the events of the complete lines in bytes: Type::JsonRpc (status:
  // MessageKind; a: the method of a request or notification; b: the message as
  // compact JSON, its string values longer than blob_min taken out: usage[0] of
  // them, each in a Type::Blob event right after it, a = its path, b = the
  // string) or Type::Error (a: "line_too_long", "invalid_json",
  // "too_deep" or "not_jsonrpc"; b: one line saying what was wrong).
  void feed(std::string_view in, std::vector<stream::Event>& out);
  // Ends the stream: a last line without newline is decoded; then the End event
  // (status 1). Feeding after finish is flemma::Error (FLEMMA_E_STATE).
  void finish(std::vector<stream::Event>& out);

 private:
  void line(std::string_view text, std::vector<stream::Event>& out);
  void overflow_error(std::vector<stream::Event>& out);

  size_t max_line_;
  int max_depth_;
  size_t blob_min_;
  std::string line_;
  bool overflow_ = false;
  size_t overflow_bytes_ = 0;
  bool done_ = false;
};

// The deepest nesting of arrays and objects in text (strings skipped), stopping
// early once past limit (then limit + 1).
int json_depth(std::string_view text, int limit);

}  // namespace flemma::jsonrpc
