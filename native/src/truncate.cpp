#include "truncate.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

namespace flemma::truncate {

std::string format_size(int64_t bytes) {
  char buf[64];
  if (bytes < 0) bytes = 0;
  constexpr double kKB = 1024.0;
  constexpr double kMB = kKB * 1024.0;
  constexpr double kGB = kMB * 1024.0;
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%lldB", static_cast<long long>(bytes));
  } else if (b < kMB) {
    std::snprintf(buf, sizeof buf, "%.1fKB", b / kKB);
  } else if (b < kGB) {
    std::snprintf(buf, sizeof buf, "%.1fMB", b / kMB);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fGB", b / kGB);
  }
  return buf;
}

namespace {

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

int64_t count_newlines(const char* p, size_t n) {
  // A plain loop the compiler vectorizes; faster than memchr on short lines.
  int64_t count = 0;
  constexpr size_t kBlock = 4096;
  while (n > 0) {
    size_t m = n < kBlock ? n : kBlock;
    uint32_t c = 0;
    for (size_t i = 0; i < m; ++i) c += (p[i] == '\n');
    count += c;
    p += m;
    n -= m;
  }
  return count;
}

int64_t limit_or_max(int64_t v) { return v <= 0 ? std::numeric_limits<int64_t>::max() : v; }

}  // namespace

int64_t count_lines(std::string_view text) {
  if (text.empty()) return 0;
  int64_t n = count_newlines(text.data(), text.size());
  if (text.back() != '\n') ++n;
  return n;
}

size_t utf8_prefix(std::string_view text, size_t want) {
  if (want >= text.size()) return text.size();
  size_t n = want;
  // text[n] is the first byte left out; it must start a code point.
  size_t steps = 0;
  while (n > 0 && is_continuation(text[n]) && steps < 4) {
    --n;
    ++steps;
  }
  return n;
}

size_t utf8_suffix_start(std::string_view text, size_t want) {
  if (want >= text.size()) return 0;
  size_t s = text.size() - want;
  size_t steps = 0;
  while (s < text.size() && is_continuation(text[s]) && steps < 4) {
    ++s;
    ++steps;
  }
  return s;
}

// Counts text into r; when it is within the limits, r becomes the whole text
// (returns true), else r is marked truncated for the caller to fill.
static bool fits_whole(std::string_view text, int64_t max_lines, int64_t max_bytes, Result& r) {
  r.total_bytes = static_cast<int64_t>(text.size());
  r.total_lines = count_lines(text);
  if (r.total_lines <= max_lines && r.total_bytes <= max_bytes) {
    r.content.assign(text);
    r.output_lines = r.total_lines;
    r.output_bytes = r.total_bytes;
    return true;
  }
  r.truncated = true;
  return false;
}

Result truncate_head(std::string_view text, int64_t max_lines_in, int64_t max_bytes_in) {
  const int64_t max_lines = limit_or_max(max_lines_in);
  const int64_t max_bytes = limit_or_max(max_bytes_in);
  Result r;
  if (fits_whole(text, max_lines, max_bytes, r)) return r;
  size_t end = 0;
  int64_t lines = 0;
  r.truncated_by = By::Lines;
  while (end < text.size()) {
    if (lines >= max_lines) {
      r.truncated_by = By::Lines;
      break;
    }
    const void* nl = std::memchr(text.data() + end, '\n', text.size() - end);
    size_t line_end =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1 : text.size();
    if (static_cast<int64_t>(line_end) > max_bytes) {
      r.truncated_by = By::Bytes;
      break;
    }
    end = line_end;
    ++lines;
  }
  if (lines == 0 && max_lines > 0 && !text.empty()) {
    // The first line alone is over the byte limit: keep its start, with a marker.
    const void* nl = std::memchr(text.data(), '\n', text.size());
    size_t line_len =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) : text.size();
    std::string marker =
        " [... line cut: " + format_size(static_cast<int64_t>(line_len)) + " in total]";
    size_t budget = static_cast<size_t>(max_bytes) > marker.size()
                        ? static_cast<size_t>(max_bytes) - marker.size()
                        : 0;
    size_t keep = utf8_prefix(text.substr(0, line_len), budget);
    r.content.reserve(keep + marker.size());
    r.content.assign(text.substr(0, keep));
    r.content += marker;
    r.first_line_exceeds_limit = true;
    r.truncated_by = By::Bytes;
    r.output_lines = 1;
    r.output_bytes = static_cast<int64_t>(r.content.size());
    return r;
  }
  r.content.assign(text.substr(0, end));
  r.output_lines = lines;
  r.output_bytes = static_cast<int64_t>(end);
  return r;
}

Result truncate_tail(std::string_view text, int64_t max_lines_in, int64_t max_bytes_in) {
  const int64_t max_lines = limit_or_max(max_lines_in);
  const int64_t max_bytes = limit_or_max(max_bytes_in);
  Result r;
  if (fits_whole(text, max_lines, max_bytes, r)) return r;
  // Walk back line by line; `start` is the first kept byte.
  size_t start = text.size();
  int64_t lines = 0;
  r.truncated_by = By::Lines;
  while (start > 0) {
    if (lines >= max_lines) {
      r.truncated_by = By::Lines;
      break;
    }
    // The line ending at `start` begins after the previous '\n' (skipping its own).
    size_t search_end = start - 1;  // index of this line's newline (or last byte)
    size_t line_start = 0;
    for (size_t i = search_end; i > 0; --i) {
      if (text[i - 1] == '\n') {
        line_start = i;
        break;
      }
      if (static_cast<int64_t>(text.size() - i) > max_bytes) {
        line_start = i;  // already over: the exact start no longer matters
        break;
      }
    }
    if (static_cast<int64_t>(text.size() - line_start) > max_bytes) {
      r.truncated_by = By::Bytes;
      break;
    }
    start = line_start;
    ++lines;
  }
  if (lines == 0 && max_lines > 0 && !text.empty()) {
    // The last line alone is over the byte limit: keep its end, with a marker.
    size_t line_start = 0;
    size_t stop = text.back() == '\n' ? text.size() - 1 : text.size();
    for (size_t i = stop; i > 0; --i) {
      if (text[i - 1] == '\n') {
        line_start = i;
        break;
      }
    }
    size_t line_len = text.size() - line_start;
    std::string marker =
        "[... line cut: " + format_size(static_cast<int64_t>(line_len)) + " in total] ";
    size_t budget = static_cast<size_t>(max_bytes) > marker.size()
                        ? static_cast<size_t>(max_bytes) - marker.size()
                        : 0;
    std::string_view line = text.substr(line_start);
    size_t s = utf8_suffix_start(line, budget);
    r.content.reserve(marker.size() + line.size() - s);
    r.content = marker;
    r.content.append(line.substr(s));
    r.last_line_partial = true;
    r.truncated_by = By::Bytes;
    r.output_lines = 1;
    r.output_bytes = static_cast<int64_t>(r.content.size());
    return r;
  }
  r.content.assign(text.substr(start));
  r.output_lines = lines;
  r.output_bytes = static_cast<int64_t>(text.size() - start);
  return r;
}

}  // namespace flemma::truncate
