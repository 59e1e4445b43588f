#include <doctest/doctest.h>

#include <string>

#include "flemma/flemma.h"
#include "truncate.hpp"

namespace t = flemma::truncate;

namespace {
std::string numbered(int from, int to) {
  std::string s;
  for (int i = from; i <= to; ++i) s += std::to_string(i) + "\n";
  return s;
}
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}
}  // namespace

TEST_CASE("truncate") {
  SUBCASE("lines are counted with the newline belonging to its line") {
    CHECK(t::count_lines("") == 0);
    CHECK(t::count_lines("a") == 1);
    CHECK(t::count_lines("a\n") == 1);
    CHECK(t::count_lines("a\nb") == 2);
    CHECK(t::count_lines("\n\n") == 2);
  }
  SUBCASE("text within both limits is returned unchanged") {
    auto r = t::truncate_tail("a\nb\n", 10, 100);
    CHECK_FALSE(r.truncated);
    CHECK(r.content == "a\nb\n");
    CHECK(r.truncated_by == t::By::None);
    CHECK(r.total_lines == 2);
    CHECK(r.output_bytes == 4);
  }
  SUBCASE("the head keeps the first lines when the line limit is hit") {
    auto r = t::truncate_head(numbered(1, 10), 3, 1000);
    CHECK(r.truncated);
    CHECK(r.truncated_by == t::By::Lines);
    CHECK(r.content == "1\n2\n3\n");
    CHECK(r.total_lines == 10);
    CHECK(r.output_lines == 3);
    CHECK(r.output_bytes == 6);
  }
  SUBCASE("the tail keeps the last lines when the line limit is hit") {
    auto r = t::truncate_tail(numbered(1, 10), 3, 1000);
    CHECK(r.truncated_by == t::By::Lines);
    CHECK(r.content == "8\n9\n10\n");
    CHECK(r.output_lines == 3);
  }
  SUBCASE("the byte limit keeps whole lines only") {
    auto h = t::truncate_head(numbered(1, 100), 1000, 10);  // "1\n".."5\n" = 10 bytes
    CHECK(h.truncated_by == t::By::Bytes);
    CHECK(h.content == "1\n2\n3\n4\n5\n");
    auto tl = t::truncate_tail(numbered(1, 100), 1000, 10);  // "98\n99\n100\n" = 10
    CHECK(tl.truncated_by == t::By::Bytes);
    CHECK(tl.content == "98\n99\n100\n");
    CHECK(tl.output_bytes == 10);
    auto tl2 = t::truncate_tail(numbered(1, 100), 1000, 9);
    CHECK(tl2.content == "99\n100\n");
  }
  SUBCASE("a tail of text without a final newline keeps the unterminated line") {
    auto r = t::truncate_tail("one\ntwo\nthree", 2, 100);
    CHECK(r.content == "two\nthree");
    CHECK(r.total_lines == 3);
  }
  SUBCASE("an over-long first line is cut with a marker in the head") {
    std::string line(1000, 'x');
    auto r = t::truncate_head(line + "\nnext\n", 10, 100);
    CHECK(r.first_line_exceeds_limit);
    CHECK(r.truncated_by == t::By::Bytes);
    CHECK(r.output_lines == 1);
    CHECK(r.content.size() <= 100);
    CHECK(r.content.find("line cut") != std::string::npos);
    CHECK(r.content.rfind("xxxx", 0) == 0);
  }
  SUBCASE("an over-long last line keeps its end after a marker in the tail") {
    std::string line = std::string(1000, 'x') + "END";
    auto r = t::truncate_tail("first\n" + line, 10, 100);
    CHECK(r.last_line_partial);
    CHECK(r.content.size() <= 100);
    CHECK(r.content.rfind("[... line cut", 0) == 0);
    CHECK(r.content.substr(r.content.size() - 3) == "END");
  }
  SUBCASE("no cut ever splits a UTF-8 code point") {
    std::string euro = "\xE2\x82\xAC";  // 3 bytes
    std::string line;
    for (int i = 0; i < 400; ++i) line += euro;
    for (int64_t limit = 40; limit < 80; ++limit) {
      auto h = t::truncate_head(line, 10, limit);
      CHECK(valid_utf8(h.content));
      CHECK(h.output_bytes <= limit);
      auto tl = t::truncate_tail(line, 10, limit);
      CHECK(valid_utf8(tl.content));
      CHECK(tl.output_bytes <= limit);
    }
    CHECK(t::utf8_prefix(euro + euro, 4) == 3);
    CHECK(t::utf8_suffix_start(euro + euro, 4) == 3);
  }
  SUBCASE("a limit of 0 means no limit of that kind") {
    auto r = t::truncate_tail(numbered(1, 5000), 0, 0);
    CHECK_FALSE(r.truncated);
    CHECK(r.total_lines == 5000);
  }
  SUBCASE("the C ABI returns an owned result with the same fields") {
    std::string text = numbered(1, 3000);
    flemma_truncate_result* r = flemma_truncate_tail(text.data(), text.size(), 2000, 51200);
    REQUIRE(r != nullptr);
    CHECK(r->truncated == 1);
    CHECK(r->truncated_by == 1);
    CHECK(r->total_lines == 3000);
    CHECK(r->output_lines == 2000);
    CHECK(std::string(r->content, r->content_len).rfind("1001\n", 0) == 0);
    flemma_truncate_result_free(r);
    flemma_truncate_result_free(nullptr);
    CHECK(flemma_truncate_head(nullptr, 5, 1, 1) == nullptr);
    CHECK(std::string(flemma_last_error()).find("NULL") != std::string::npos);
    flemma_truncate_result* e = flemma_truncate_head(nullptr, 0, 1, 1);
    REQUIRE(e != nullptr);
    CHECK(e->content_len == 0);
    flemma_truncate_result_free(e);
  }
}
