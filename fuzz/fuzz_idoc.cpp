// libFuzzer target for the incremental document (`make fuzz`): the input is a
// text and an edit script; after every edit the document must equal a fresh
// full parse of its text (same items, strings and diagnostics).
//
// Format: chunks separated by NUL bytes. The first chunk is the initial text.
// Each further chunk is an edit: byte 0 picks the first line (modulo the line
// count + 1), byte 1 how many lines it replaces (0-3), the rest (split at
// "\n") are the new lines (none when the chunk has 2 bytes or fewer). When
// byte 1 has its high bit set the rest is appended to the last line instead
// (cut at its "\n", as a streamed answer is written). Checkpoints are set 1,
// 2, 3 or 16 lines apart by the input's size, so edits inside short messages
// also resume at checkpoints. After every edit, the places edited since the
// load (touched) must be ordered, disjoint ranges inside the document, at most
// the cap asked for, and merged into one give the lines reparsed reports.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "idoc.hpp"

namespace {

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t nl = s.find('\n', start);
    if (nl == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
}

void expect_same(flemma::document::Incremental& d) {
  std::string diff = d.check();
  if (!diff.empty()) {
    std::fprintf(stderr, "incremental document differs from the full parse: %s\n", diff.c_str());
    std::abort();
  }
}

void fail(const char* what) {
  std::fprintf(stderr, "touched: %s\n", what);
  std::abort();
}

void expect_ranges(const flemma::document::Incremental& d, uint64_t since, size_t cap) {
  std::vector<flemma::document::Incremental::LineRange> r;
  if (!d.touched(since, cap, r)) fail("the log does not reach the load");
  if (r.size() > cap) fail("more ranges than the cap");
  for (size_t k = 0; k < r.size(); ++k) {
    if (r[k].first < 0 || r[k].first > r[k].end || r[k].end > d.line_count())
      fail("a range outside the document");
    if (k > 0 && r[k - 1].end >= r[k].first) fail("ranges out of order or overlapping");
  }
  int32_t line = 0, end = 0;
  d.reparsed(since, line, end);
  if (r.empty() ? line != d.line_count() || end != d.line_count()
                : line != r.front().first || end != r.back().end)
    fail("not the lines reparsed reports");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> chunks;
  size_t start = 0;
  for (;;) {
    size_t z = in.find('\0', start);
    if (z == std::string_view::npos) {
      chunks.push_back(in.substr(start));
      break;
    }
    chunks.push_back(in.substr(start, z - start));
    start = z + 1;
  }
  flemma::document::Incremental d;
  static const int32_t kEvery[] = {1, 2, 3, 16};
  d.set_checkpoint_every(kEvery[size % 4]);
  d.edit(0, 0, split(chunks[0]));
  expect_same(d);
  const uint64_t loaded = d.version();
  for (size_t c = 1; c < chunks.size() && c <= 64; ++c) {
    std::string_view e = chunks[c];
    const int32_t n = d.line_count();
    if (e.size() >= 2 && (static_cast<uint8_t>(e[1]) & 0x80) && n > 0) {
      std::string text = d.text();
      size_t nl = text.rfind('\n');
      std::string last =
          (nl == std::string::npos ? text : text.substr(nl + 1)) + std::string(e.substr(2));
      d.edit(n - 1, n, split(last));
      expect_same(d);
      expect_ranges(d, loaded, 1 + c % 5);
      continue;
    }
    const int32_t first =
        e.empty() ? n
                  : static_cast<int32_t>(static_cast<uint8_t>(e[0]) % static_cast<uint32_t>(n + 1));
    const int32_t count = e.size() < 2 ? 0 : static_cast<uint8_t>(e[1]) % 4;
    const int32_t last = std::min(n, first + count);
    std::vector<std::string_view> lines;
    if (e.size() > 2) lines = split(e.substr(2));
    d.edit(first, last, lines);
    expect_same(d);
    expect_ranges(d, loaded, 1 + c % 5);
  }
  return 0;
}
