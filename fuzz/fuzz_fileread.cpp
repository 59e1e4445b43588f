// libFuzzer target for the file reader's line window (native/src/fileread.cpp).
// Input: four bytes of parameters (first line, line limit, byte limit, read size
// and, in its top bits, the long-line cap max_line_bytes),
// then the file's content, written to a memfd and read through /proc/self/fd.
// Invariants checked against a plain reference (the file split on "\n" as Lua's
// f:lines() does): the line count, the kept lines, where and why the window was
// cut, and a long first line cut at a UTF-8 boundary; the whole mode gives the
// bytes back.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fileread.hpp"

namespace fr = flemma::fileread;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  int64_t first = data[0] % 8 + 1;
  int64_t max_lines = data[1] % 6;  // 0: no limit
  int64_t max_bytes = data[2] % 40;
  size_t chunk = data[3] % 32 + 1;
  int64_t max_line_bytes = (data[3] / 32) % 8;  // 0: no cap
  std::string content(reinterpret_cast<const char*>(data + 4), size - 4);

  int fd = ::memfd_create("fuzz_fileread", 0);
  if (fd < 0) return 0;
  if (!content.empty() &&
      ::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    ::close(fd);
    return 0;
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);

  fr::Request req;
  req.path = path;
  req.first_line = first;
  req.max_lines = max_lines;
  req.max_bytes = max_bytes;
  req.head_bytes = 7;
  req.chunk = chunk;
  req.max_line_bytes = max_line_bytes;
  fr::Result r = fr::read_file(req);

  // The reference.
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < content.size()) {
    size_t nl = content.find('\n', at);
    if (nl == std::string::npos) {
      lines.push_back(content.substr(at));
      break;
    }
    lines.push_back(content.substr(at, nl - at));
    at = nl + 1;
  }
  std::string text;
  int64_t shown = 0, bytes = 0;
  int cut = 0;
  bool long_line = false;
  for (size_t i = 0; i < lines.size() && cut == 0; i++) {
    if (static_cast<int64_t>(i) + 1 < first) continue;
    if (max_lines > 0 && shown >= max_lines) {
      cut = 1;
      break;
    }
    // With a cap, a longer line is kept (and counted) as its first cap + 4 bytes.
    std::string kept = lines[i];
    if (max_line_bytes > 0 && static_cast<int64_t>(kept.size()) > max_line_bytes + 4)
      kept.resize(static_cast<size_t>(max_line_bytes + 4));
    int64_t cost = static_cast<int64_t>(kept.size()) + (shown > 0 ? 1 : 0);
    if (bytes + cost > max_bytes) {
      if (shown == 0) {
        text = fr::cut_utf8(kept, static_cast<size_t>(max_bytes));
        long_line = true;
      }
      cut = 2;
      break;
    }
    if (shown > 0) text += "\n";
    text += kept;
    shown++;
    bytes += cost;
  }
  if (!r.ok || r.type != fr::Type::Regular) std::abort();
  if (r.total_lines != static_cast<int64_t>(lines.size())) std::abort();
  if (r.text != text || r.shown_lines != shown || r.cut_by != cut || r.long_line != long_line)
    std::abort();
  if (r.head != content.substr(0, 7)) std::abort();
  if (r.size != static_cast<int64_t>(content.size())) std::abort();
  if (long_line) {
    if (r.text.size() > static_cast<size_t>(max_bytes)) std::abort();
    if (r.text.size() < content.size() && !r.text.empty() &&
        r.text.size() < lines[first - 1].size() &&
        (static_cast<unsigned char>(lines[first - 1][r.text.size()]) & 0xC0) == 0x80)
      std::abort();
  }

  req.whole = true;
  req.max_line_bytes = 0;
  fr::Result w = fr::read_file(req);
  if (!w.ok) std::abort();
  if (static_cast<int64_t>(content.size()) <= max_bytes) {
    if (w.text != content || w.cut_by != 0) std::abort();
  } else if (w.cut_by != 2 || w.text != content.substr(0, static_cast<size_t>(max_bytes))) {
    std::abort();
  }
  ::close(fd);
  return 0;
}
