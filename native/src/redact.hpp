// Redaction of a file Flemma kept (a process's whole output, an MCP result's text),
// with the semantics of util.redact in lua/flemma/core/util.lua:
//  1. each literal value, in the order given (the caller gives them longest first),
//     is replaced by "[redacted]" wherever it occurs (left to right, not
//     overlapping), each value over the text the previous one left;
//  2. then, for each header name in turn (x-api-key, authorization, x-goog-api-key;
//     any case), the value of curl's config form `header = "name: value"` (to the
//     closing quote or the end of the line) and of `name: value` (to "\r", "\n" or
//     a quote) becomes "[redacted]", as the Lua patterns
//       ([Hh][Ee][Aa][Dd][Ee][Rr]%s*=%s*"%s*NAME%s*:%s*)[^"\n]*
//       (NAME%s*:%s*)[^\r\n"]*
//     do with gsub (%s is ASCII whitespace: space, \t, \n, \v, \f, \r).
// The streamed Redactor gives the same bytes as redact_text on the whole text,
// however the text is cut into pieces.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flemma::redact {

inline constexpr std::string_view kReplacement = "[redacted]";

// The whole text redacted (the reference the streamed Redactor follows). Empty
// values are ignored.
std::string redact_text(std::string_view text, const std::vector<std::string>& values);

// Overwrites a string's bytes (its whole capacity) and empties it.
void wipe(std::string& s) noexcept;

// A redactor of a stream given in pieces: push() appends to `out` what is
// already safe, holding back what may still be part of a secret or of a
// header's value (a few bytes in ordinary text); finish() appends the rest.
// The values and every byte held are wiped when it is destroyed.
class Redactor {
 public:
  explicit Redactor(std::vector<std::string> values);
  ~Redactor();
  Redactor(const Redactor&) = delete;
  Redactor& operator=(const Redactor&) = delete;

  void push(std::string_view piece, std::string& out);
  void finish(std::string& out);
  // Bytes held back now.
  size_t held() const;
  // Values replaced so far (0: the output so far is the input's start).
  uint64_t replacements() const;

  // At most this many bytes are held back (a header's value without an end
  // longer than this, or as much whitespace inside a header): push() throws
  // flemma::Error past it.
  static constexpr size_t kMaxHeld = 64u << 20;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct FileResult {
  bool ok = false;
  bool cancelled = false;
  std::string error;  // why it failed ("" when ok)
};

// Rewrites `path` redacted into a new private file (path + ".redacted", made
// with O_EXCL, mode 0600) renamed over it, reading `chunk` bytes at a time; a
// file that holds nothing to redact is only read, and left as it is. On
// any failure, and when `cancel` becomes true, the file and the temporary one are
// both removed (fail closed). Wipes its buffers.
FileResult redact_file(const std::string& path, const std::vector<std::string>& values,
                       const std::atomic<bool>& cancel, size_t chunk = 1u << 20);

// Secret values held for a job: wiped when destroyed.
struct Secrets {
  std::vector<std::string> values;
  Secrets() = default;
  Secrets(Secrets&&) = default;
  Secrets& operator=(Secrets&&) = default;
  Secrets(const Secrets&) = delete;
  Secrets& operator=(const Secrets&) = delete;
  ~Secrets() {
    for (auto& v : values) wipe(v);
  }
};

}  // namespace flemma::redact
