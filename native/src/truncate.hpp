// Output truncation: sizes, head and tail windows of text by lines and bytes.
//
// A "line" is a run of bytes ending in '\n' (the newline belongs to the line);
// the last line may lack its newline. "" has 0 lines, "a" 1, "a\n" 1, "a\nb" 2.
// A cut never splits a UTF-8 code point.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flemma::truncate {

inline constexpr int64_t kMaxLines = 2000;
inline constexpr int64_t kMaxBytes = 51200;

// "512B", "12.1KB", "1.0MB", "2.5GB" (1 KB = 1024 bytes, one decimal).
std::string format_size(int64_t bytes);

enum class By { None = 0, Lines = 1, Bytes = 2 };

struct Result {
  std::string content;
  bool truncated = false;
  By truncated_by = By::None;
  int64_t total_lines = 0;
  int64_t total_bytes = 0;
  int64_t output_lines = 0;
  int64_t output_bytes = 0;
  // Tail: the one kept line is only the end of a longer line (cut with a marker).
  bool last_line_partial = false;
  // Head: the first line alone is longer than max_bytes (cut with a marker).
  bool first_line_exceeds_limit = false;
};

// Number of lines of text, as defined above.
int64_t count_lines(std::string_view text);

// Largest n <= want such that text[0, n) does not end inside a UTF-8 code point.
size_t utf8_prefix(std::string_view text, size_t want);
// Smallest s >= text.size() - want such that text[s, end) does not start inside one.
size_t utf8_suffix_start(std::string_view text, size_t want);

// Keeps the first max_lines lines and at most max_bytes bytes, whole lines only,
// except that a first line longer than max_bytes is cut (with a marker).
// Limits <= 0 mean "no limit" of that kind.
Result truncate_head(std::string_view text, int64_t max_lines = kMaxLines,
                     int64_t max_bytes = kMaxBytes);

// Keeps the last max_lines lines and at most max_bytes bytes, whole lines only,
// except that a last line longer than max_bytes keeps its end (with a marker).
Result truncate_tail(std::string_view text, int64_t max_lines = kMaxLines,
                     int64_t max_bytes = kMaxBytes);

}  // namespace flemma::truncate
