// HTML into Markdown or plain text (the `fetch` tool), and the decoder of a
// fetched page as `curl --dump-header -` prints it (spawn's decoder {"kind":
// "fetch"}), which converts on the process manager's worker thread.
//
// The converter is one pass over the input: every byte is looked at a bounded
// number of times (raw-text elements such as <script> are skipped with one
// forward scan, attribute values are read once), nesting is kept to kMaxDepth
// levels (deeper structure is read as text) and the output is capped at
// max_output(len) bytes, ending with a note when the cap cut it. The output is
// valid UTF-8 whatever the input's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stream.hpp"

namespace flemma::html {

enum class Format { Markdown = 0, Text = 1 };

constexpr size_t kMaxDepth = 32;  // lists, quotes, links kept as structure
constexpr size_t kMaxUrl = 4096;  // a longer href or src is dropped (its text kept)
constexpr size_t kMaxHeaderBlock = 64 * 1024;
inline constexpr const char* kCutNote = "\n\n[conversion stopped: the output reached its limit]\n";

// The most bytes the conversion of len input bytes writes.
constexpr size_t max_output(size_t len) { return 8 * len + 64 * 1024; }

std::string to_markdown(std::string_view html, Format format = Format::Markdown);

// s with every invalid UTF-8 sequence replaced by U+FFFD (and NUL by U+FFFD).
std::string valid_utf8(std::string_view s);
// ISO-8859-1 (and the printable part of windows-1252 read as it) into UTF-8.
std::string latin1_to_utf8(std::string_view s);

// The event of a fetched page (FLEMMA_STREAM_PAGE): a = the text (its head when
// cut), b = the file holding the whole text ("" none), status 1 when cut, usage =
// total lines, total bytes, kept lines, kept bytes.
constexpr int32_t kPage = 19;

// The decoder of a fetched page. Input: curl's `--dump-header -` output (header
// blocks, 1xx ones skipped, then the body). Events: Http (status; a = headers
// "name: value\n", names lower-cased) once the final header block is read; then
// at finish one kPage event (the page converted as `mode` says and the content
// type allows; past head_lines or head_bytes (> 0) only its head, as
// truncate::truncate_head keeps it, and the whole text written to a new private
// file at save_path, when given) unless the status is a redirect (3xx) or an
// error was reported; then End (status 1 when complete). All of it runs where
// feed and finish are called: on the process manager's worker thread. Errors (Error events, a =
// type): "response_too_large" (the body passed max_body: failed() turns true and the process stops
// the child), "not_text" (a binary content type or NUL bytes), "bad_response" (no HTTP header
// block).
class FetchDecoder {
 public:
  enum class Mode { Markdown, Text, Raw };
  FetchDecoder(Mode mode, int64_t max_body, int64_t head_lines = 0, int64_t head_bytes = 0,
               std::string save_path = {});
  void feed(std::string_view bytes, std::vector<stream::Event>& out);
  void finish(std::vector<stream::Event>& out);
  bool failed() const { return failed_; }

  static bool mode_from_name(std::string_view name, Mode& mode);

 private:
  void header_block(std::vector<stream::Event>& out);
  void fail(const char* type, const std::string& message, std::vector<stream::Event>& out);

  void page(std::string text, std::vector<stream::Event>& out);

  Mode mode_;
  size_t max_body_;
  int64_t head_lines_, head_bytes_;
  std::string save_path_;
  bool in_body_ = false, failed_ = false, finished_ = false;
  int status_ = 0;
  std::string head_;  // the header block being read
  std::string headers_;
  std::string content_type_;
  std::string body_;
};

}  // namespace flemma::html
