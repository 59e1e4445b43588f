#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "document.hpp"
#include "flemma/flemma.h"

using flemma::document::Document;
using flemma::document::parse;

namespace {

struct Parsed {
  std::string text;
  Document doc;
  std::string_view s(flemma_doc_str r) const { return doc.str(text, r); }
  int count(int kind) const {
    int n = 0;
    for (const auto& it : doc.items) n += it.kind == kind;
    return n;
  }
  const flemma_doc_item* first(int kind) const {
    for (const auto& it : doc.items)
      if (it.kind == kind) return &it;
    return nullptr;
  }
  bool has_diag(std::string_view needle) const {
    for (const auto& d : doc.diags)
      if (s(d.message).find(needle) != std::string_view::npos) return true;
    return false;
  }
};

Parsed run(std::string text) {
  Parsed p{std::move(text), {}};
  p.doc = parse(p.text);
  return p;
}

// Pathological inputs must finish: a quadratic parser would run for hours on them and
// hit the ctest TIMEOUT set in CMakeLists.txt. Speed itself is measured by `make bench`.
size_t parts_of(const std::string& text) {
  Document d = parse(text);
  return d.items.size();
}

}  // namespace

TEST_CASE("document") {
  SUBCASE("a message with text and a tool use gets items with 1-based lines") {
    auto p = run(
        "@Assistant:\nHi.\n\n**Tool Use:** `bash` (`t1`)\n\n```json\n{\"command\": \"ls\"}\n```");
    REQUIRE(p.doc.items.size() == 3);
    CHECK(p.doc.items[0].kind == FLEMMA_DOC_MESSAGE);
    CHECK(p.doc.items[0].role == FLEMMA_DOC_ASSISTANT);
    CHECK(p.doc.items[0].first_line == 1);
    CHECK(p.doc.items[0].last_line == 8);
    CHECK(p.s(p.doc.items[1].body) == "Hi.");
    const auto& u = p.doc.items[2];
    CHECK(u.kind == FLEMMA_DOC_TOOL_USE);
    CHECK(p.s(u.key) == "t1");
    CHECK(p.s(u.label) == "bash");
    CHECK(p.s(u.body) == "{\"command\": \"ls\"}");
    CHECK(u.first_line == 4);
    CHECK(u.fence_line == 6);
    CHECK(u.last_line == 8);
    CHECK(p.doc.diags.empty());
  }

  SUBCASE("markers and headers inside a fence are content") {
    auto p = run("@You:\n````\n```\n@Assistant:\n**Tool Use:** `a` (`b`)\n```\n````\n");
    CHECK(p.count(FLEMMA_DOC_MESSAGE) == 1);
    CHECK(p.count(FLEMMA_DOC_TOOL_USE) == 0);
    // The one diagnostic: the marker the fence reads as text (issue 24.6).
    REQUIRE(p.doc.diags.size() == 1);
    CHECK(p.doc.diags[0].severity == FLEMMA_DOC_SEV_WARNING);
    CHECK(p.doc.diags[0].line == 2);
    CHECK(p.has_diag("this fence is not closed: the @Assistant: below it is read as text"));
  }

  SUBCASE("a fence that reads a role marker as text is named on its opening line") {
    // An unclosed fence in a question, closed by the fence of the answer below.
    auto p =
        run("@You:\nfix this:\n```python\nx = 1\n\n@Assistant:\nHere:\n\n```python\nx = "
            "2\n```\n\n@You:\nok\n");
    CHECK(p.count(FLEMMA_DOC_MESSAGE) == 2);
    REQUIRE(p.doc.diags.size() == 1);
    CHECK(p.doc.diags[0].line == 3);
    CHECK(p.doc.diags[0].severity == FLEMMA_DOC_SEV_WARNING);
    CHECK(p.has_diag("the @Assistant: below it is read as text"));
    // Closed before the marker, or unclosed up to it: no warning.
    CHECK(run("@You:\n```python\nx\n```\n@Assistant:\n```\ny\n```\n").doc.diags.empty());
    CHECK_FALSE(run("@You:\n```python\nx\n@Assistant:\nplain\n").has_diag("is read as text"));
    // Not the block of a tool result: its output may quote a chat.
    auto r =
        run("@Assistant:\n**Tool Use:** `a` (`b`)\n\n```json\n{}\n```\n@You:\n**Tool Result:** "
            "`b`\n\n```\nout\n@Assistant:\nx\n```\n");
    CHECK(r.doc.diags.empty());
    CHECK(r.count(FLEMMA_DOC_MESSAGE) == 2);
  }

  SUBCASE("an unclosed fence ends at the next role marker with a warning") {
    auto p = run("@You:\n```\ncode\n@Assistant:\nreply");
    CHECK(p.count(FLEMMA_DOC_MESSAGE) == 2);
    REQUIRE(p.doc.diags.size() == 1);
    CHECK(p.doc.diags[0].line == 2);
    CHECK(p.doc.diags[0].severity == FLEMMA_DOC_SEV_WARNING);
    CHECK(p.has_diag("never closed"));
  }

  SUBCASE("invalid tool input is flagged with the line of the error") {
    auto p = run("@Assistant:\n**Tool Use:** `x` (`i`)\n\n```json\n{\"a\": 1,\n \"b\" 2}\n```");
    const auto* u = p.first(FLEMMA_DOC_TOOL_USE);
    REQUIRE(u);
    CHECK((u->flags & FLEMMA_DOC_F_BAD_INPUT) != 0);
    REQUIRE(p.doc.diags.size() == 1);
    CHECK(p.doc.diags[0].line == 6);
    CHECK(p.doc.diags[0].severity == FLEMMA_DOC_SEV_ERROR);
    CHECK(p.has_diag("fix the JSON"));
  }

  SUBCASE("an input block that is never closed is a bad input, its JSON not checked") {
    // Valid JSON: still never run. Invalid JSON: no JSON error (the block is
    // parsed again on each change while a writer streams a long input into it).
    for (const char* json : {"{\"command\": \"ls\"}", "{\"content\": \"abc"}) {
      auto p = run(std::string("@Assistant:\n**Tool Use:** `bash` (`i`)\n\n```json\n") + json +
                   "\n\n@You:\nhi");
      const auto* u = p.first(FLEMMA_DOC_TOOL_USE);
      REQUIRE(u);
      CHECK((u->flags & FLEMMA_DOC_F_UNCLOSED) != 0);
      CHECK((u->flags & FLEMMA_DOC_F_BAD_INPUT) != 0);
      CHECK(p.s(u->note) == "the input block is never closed");
      CHECK(p.has_diag("never closed"));
      CHECK_FALSE(p.has_diag("is not valid"));
    }
  }

  SUBCASE("a long string value: every byte the quick check skips 16 at a time is still checked") {
    // Each special byte at every offset of a 16-byte block, in a 100-byte value:
    // the verdict is nlohmann's (valid or not), whatever the alignment.
    const std::vector<std::string> specials = {
        "\\\"", "\\n",  "\\u00e9", "\xc3\xa9", "\xf0\x9f\x98\x80", "\x01", "\x1f", "\x7f",
        "\xc3", "\xff", "\"",      "\\q",      "\\ud800"};
    for (const auto& sp : specials) {
      for (size_t at = 0; at < 40; ++at) {
        std::string value = std::string(at, 'a') + sp + std::string(100, 'b');
        std::string input = "{\"content\": \"" + value + "\"}";
        bool valid = nlohmann::json::accept(input);
        auto p = run("@Assistant:\n**Tool Use:** `write` (`w`)\n\n```json\n" + input + "\n```\n");
        const auto* u = p.first(FLEMMA_DOC_TOOL_USE);
        REQUIRE(u);
        INFO("special " << sp << " at " << at);
        CHECK(((u->flags & FLEMMA_DOC_F_BAD_INPUT) == 0) == valid);
      }
    }
  }

  SUBCASE("tool input nested deeper than the limit is rejected without recursion") {
    std::string deep =
        "@Assistant:\n**Tool Use:** `x` (`i`)\n\n```json\n{\"a\":" + std::string(100000, '[') +
        "\n```";
    auto p = run(deep);
    CHECK((p.first(FLEMMA_DOC_TOOL_USE)->flags & FLEMMA_DOC_F_BAD_INPUT) != 0);
    CHECK(p.has_diag("nests deeper"));
  }

  SUBCASE("placeholders, legacy suffixes and error results are told apart") {
    auto p =
        run("@Assistant:\n**Tool Use:** `x` (`a`)\n\n```json\n{}\n```\n**Tool Use:** `x` "
            "(`b`)\n\n```json\n{}\n```\n"
            "**Tool Use:** `x` (`c`)\n\n```json\n{}\n```\n"
            "@You:\n**Tool Result:** `a`\n\n```flemma:tool status=denied\n```\n"
            "**Tool Result:** `b` (pending)\n\n```\n```\n"
            "**Tool Result:** `c` (error)\n\n```\nboom\n```\n");
    int seen = 0;
    for (const auto& it : p.doc.items) {
      if (it.kind != FLEMMA_DOC_TOOL_RESULT) continue;
      std::string_view id = p.s(it.key);
      if (id == "a") CHECK(it.status == FLEMMA_DOC_STATUS_DENIED);
      if (id == "b") {
        CHECK(it.status == FLEMMA_DOC_STATUS_PENDING);
        CHECK((it.flags & FLEMMA_DOC_F_LEGACY) != 0);
      }
      if (id == "c") {
        CHECK(it.status == FLEMMA_DOC_STATUS_NONE);
        CHECK((it.flags & FLEMMA_DOC_F_ERROR) != 0);
        CHECK(p.s(it.body) == "boom");
      }
      ++seen;
    }
    CHECK(seen == 3);
    CHECK(p.doc.diags.empty());
  }

  SUBCASE("ids are checked across the document") {
    auto p =
        run("@Assistant:\n**Tool Use:** `x` (`a`)\n\n```json\n{}\n```\n**Tool Use:** `x` "
            "(`a`)\n\n```json\n{}\n```\n"
            "@You:\n**Tool Result:** `zz`\n\n```\n```\n");
    CHECK(p.has_diag("already used on line 2"));
    CHECK(p.has_diag("matches no **Tool Use:**"));
  }

  SUBCASE("CRLF line endings are read like LF, with text normalized") {
    auto p = run("@You:\r\nline 1\r\nline 2\r\n@Assistant:\r\nok\r\n");
    CHECK(p.count(FLEMMA_DOC_MESSAGE) == 2);
    CHECK(p.s(p.first(FLEMMA_DOC_TEXT)->body) == "line 1\nline 2");
  }

  SUBCASE("frontmatter only on line 1, and an unterminated one is reported") {
    auto p = run("```json\n{\"a\":1}\n```\n@You:\nhi");
    REQUIRE(p.first(FLEMMA_DOC_FRONTMATTER));
    CHECK(p.s(p.first(FLEMMA_DOC_FRONTMATTER)->key) == "json");
    CHECK(p.s(p.first(FLEMMA_DOC_FRONTMATTER)->body) == "{\"a\":1}");
    auto q = run("\n```lua\nx = 1\n```\n");
    CHECK(q.first(FLEMMA_DOC_FRONTMATTER) == nullptr);
    auto r = run("```lua\nx = 1\n@You:\nhi");
    CHECK(r.first(FLEMMA_DOC_FRONTMATTER) == nullptr);
    CHECK(r.has_diag("never closed"));
    CHECK(r.count(FLEMMA_DOC_MESSAGE) == 2);
  }

  SUBCASE("regressions found by the fuzzer stay fixed") {
    // Inputs that once looked risky: lone fences, headers at EOF, NULs, bare CRs.
    const char* cases[] = {"",
                           "\n",
                           "```",
                           "```lua",
                           "**Tool Use:** `a` (`b`)",
                           "**Tool Result:** `a`",
                           "**Tool Result:** `a` (",
                           "<thinking",
                           "<thinking a=\"",
                           "@You:\r",
                           "\r\r\n\r",
                           "**Tool Use:** `a` (`b`)\n\n```json\n",
                           "```lua\n```",
                           "<thinking>\n</thinking>"};
    for (const char* c : cases) {
      auto p = run(c);
      for (const auto& it : p.doc.items) {
        CHECK(it.first_line >= 1);
        CHECK(it.last_line >= it.first_line);
      }
    }
    // Found by the fuzzer: an absent status word or attribute value gave a range
    // computed from a null view, far outside the input.
    const char* found[] = {"@You:\n**Tool Result:** `p4`\n\n```flemma:tool status;maybe\n```\n",
                           "@Assistant:\n<thinking signature>\nx\n</thinking>\n"};
    for (const char* c : found) {
      auto p = run(c);
      for (const auto& it : p.doc.items)
        for (flemma_doc_str r : {it.key, it.label, it.body, it.note}) CHECK_NOTHROW(p.s(r));
      CHECK(p.doc.items.size() == 2);
    }
    std::string nul("@You:\n\0\n**Tool Use:** `\0` (`\0`)\n```json\n{}\n```", 42);
    auto p = run(nul);
    CHECK(p.count(FLEMMA_DOC_MESSAGE) == 1);
  }

  SUBCASE("pathological inputs finish (no quadratic blow-up)") {
    std::string one_line(50u << 20, '`');
    CHECK(parts_of(one_line) >= 1);
    std::string fences;
    for (int i = 0; i < 100000; ++i) {
      fences += std::string(static_cast<size_t>(3 + i % 5), '`');
      fences += (i % 2) ? "x\n" : "\n";
      if (i % 7 == 0) fences += "@You:\n";
    }
    CHECK(parts_of(fences) >= 1);
    std::string think;
    for (int i = 0; i < 100000; ++i) think += "<thinking>\n@You:\n";
    CHECK(parts_of(think) >= 1);
  }

  SUBCASE("the C ABI returns owned arrays and frees NULL") {
    std::string text = "@You:\nhello\n**Tool Result:** `x`";
    flemma_doc* d = flemma_doc_new(text.data(), text.size());
    REQUIRE(d);
    CHECK(flemma_doc_item_count(d) == 3);
    CHECK(flemma_doc_items(d)[1].kind == FLEMMA_DOC_TEXT);
    CHECK(flemma_doc_diag_count(d) == 2);
    const flemma_doc_diag& g = flemma_doc_diags(d)[0];
    CHECK(g.message.off < 0);
    std::string msg(flemma_doc_arena(d) + (-g.message.off - 1), static_cast<size_t>(g.message.len));
    CHECK(msg.find("no fenced block") != std::string::npos);
    flemma_doc_free(d);
    flemma_doc_free(nullptr);
    CHECK(flemma_doc_new(nullptr, 3) == nullptr);
    CHECK(std::string(flemma_last_error()).find("NULL") != std::string::npos);
    flemma_doc* empty = flemma_doc_new(nullptr, 0);
    CHECK(flemma_doc_item_count(empty) == 0);
    flemma_doc_free(empty);
  }

  SUBCASE(
      "lines given one by one parse like the same lines joined with newlines, from the document's "
      "own copy") {
    std::string text =
        "@Assistant:\nHi.\n\n**Tool Use:** `bash` (`t1`)\n\n```json\n{\"a\": 1}\n```\n@You:\r\nok";
    std::vector<std::string> lines;
    for (size_t a = 0;;) {
      size_t e = text.find('\n', a);
      lines.push_back(text.substr(a, e == std::string::npos ? std::string::npos : e - a));
      if (e == std::string::npos) break;
      a = e + 1;
    }
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const auto& l : lines) {
      ptrs.push_back(l.empty() ? nullptr : l.data());
      lens.push_back(l.size());
    }
    flemma_doc* by_lines = flemma_doc_new_lines(ptrs.data(), lens.data(), lines.size());
    flemma_doc* by_text = flemma_doc_new(text.data(), text.size());
    REQUIRE(by_lines);
    REQUIRE(by_text);
    CHECK(flemma_doc_text(by_text) == text.data());
    CHECK(flemma_doc_text(by_lines) != text.data());
    CHECK(std::string(flemma_doc_text(by_lines), text.size()) == text);
    REQUIRE(flemma_doc_item_count(by_lines) == flemma_doc_item_count(by_text));
    for (int32_t i = 0; i < flemma_doc_item_count(by_text); ++i) {
      const flemma_doc_item& x = flemma_doc_items(by_lines)[i];
      const flemma_doc_item& y = flemma_doc_items(by_text)[i];
      CHECK(x.kind == y.kind);
      CHECK(x.first_line == y.first_line);
      CHECK(x.last_line == y.last_line);
      CHECK(x.body.off == y.body.off);
      CHECK(x.body.len == y.body.len);
    }
    // The lines may go away once the document exists.
    lines.clear();
    const flemma_doc_item& use = flemma_doc_items(by_lines)[2];
    REQUIRE(use.kind == FLEMMA_DOC_TOOL_USE);
    CHECK(std::string(flemma_doc_text(by_lines) + use.body.off,
                      static_cast<size_t>(use.body.len)) == "{\"a\": 1}");
    flemma_doc_free(by_lines);
    flemma_doc_free(by_text);

    flemma_doc* none = flemma_doc_new_lines(nullptr, nullptr, 0);
    REQUIRE(none);
    CHECK(flemma_doc_item_count(none) == 0);
    flemma_doc_free(none);
    CHECK(flemma_doc_text(nullptr) == nullptr);
    size_t len = 3;
    const char* null_line = nullptr;
    CHECK(flemma_doc_new_lines(nullptr, &len, 1) == nullptr);
    CHECK(std::string(flemma_last_error()).find("NULL") != std::string::npos);
    CHECK(flemma_doc_new_lines(&null_line, &len, 1) == nullptr);
    CHECK(std::string(flemma_last_error()).find("line 1") != std::string::npos);
    size_t huge[2] = {size_t{1} << 29, size_t{1} << 29};
    const char* two[2] = {"a", "b"};
    CHECK(flemma_doc_new_lines(two, huge, 2) == nullptr);
    CHECK(std::string(flemma_last_error()).find("1 GiB") != std::string::npos);
  }
}
