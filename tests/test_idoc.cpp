#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "flemma/flemma.h"
#include "idoc.hpp"

using flemma::document::Incremental;
using flemma::document::kCheckpointEvery;

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      out.push_back(text.substr(start));
      return out;
    }
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
}

void edit(Incremental& d, int32_t first, int32_t last, const std::vector<std::string>& lines) {
  std::vector<std::string_view> v(lines.begin(), lines.end());
  d.edit(first, last, v);
}

void load(Incremental& d, const std::string& text) { edit(d, 0, 0, split(text)); }

// The same edit through the C ABI.
int capi_edit(flemma_idoc* d, int32_t first, int32_t last, const std::vector<std::string>& lines) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& l : lines) {
    ptrs.push_back(l.data());
    lens.push_back(l.size());
  }
  return flemma_idoc_edit(d, first, last, ptrs.data(), lens.data(), ptrs.size());
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Lines that change the structure most: fences of both kinds and lengths,
// role markers, tool headers, placeholders, thinking tags, frontmatter.
const char* const kPool[] = {
    "```",
    "````",
    "~~~",
    "```json",
    "```lua",
    "````markdown",
    "`````",
    "@You:",
    "@Assistant:",
    "@System:",
    "",
    "",
    "text",
    "more text here",
    "**Tool Use:** `bash` (`t1`)",
    "**Tool Use:** `read` (`t2`)",
    "**Tool Result:** `t1`",
    "**Tool Result:** `t2` (error)",
    "**Tool Result:** `t3`",
    "```flemma:tool status=pending",
    "```flemma:tool status=approved",
    "{\"command\": \"ls\"}",
    "{\"a\": [1, 2",
    "<thinking>",
    "</thinking>",
    "<thinking redacted>",
    "```lua\r",
    "text\r",
    "  ```",
    "~~~~ x",
};

std::string random_line(std::mt19937& rng) {
  return kPool[rng() % (sizeof(kPool) / sizeof(kPool[0]))];
}

}  // namespace

TEST_CASE("incremental document") {
  SUBCASE("a loaded document has one segment per message and matches the full parse") {
    Incremental d;
    load(d, "@System:\nterse\n@You:\nhi\n\n@Assistant:\nhello");
    CHECK(d.line_count() == 7);
    CHECK(d.segment_count() == 3);
    CHECK(d.segment_start(1) == 2);
    CHECK(d.check() == "");
  }

  SUBCASE("an edit inside one message re-parses only that message") {
    Incremental d;
    load(d, "@You:\na\n@Assistant:\nb\n@You:\nc");
    uint64_t id0 = d.segment(0).id, id1 = d.segment(1).id, id2 = d.segment(2).id;
    edit(d, 3, 4, {"b changed", "and a new line"});
    CHECK(d.check() == "");
    CHECK(d.segment(0).id == id0);
    CHECK(d.segment(1).id != id1);
    CHECK(d.segment(2).id == id2);
    CHECK(d.segment_start(2) == 5);
    size_t lo = 0, hi = 0;
    CHECK(d.changes(d.version() - 1, lo, hi));
    CHECK(lo == 1);
    CHECK(hi == 2);
  }

  SUBCASE("deleting a marker joins its lines to the message above") {
    Incremental d;
    load(d, "@You:\na\n@Assistant:\nb\n@You:\nc");
    edit(d, 2, 3, {});
    CHECK(d.segment_count() == 2);
    CHECK(d.check() == "");
  }

  SUBCASE("an opened fence swallows the markers down to the fence that closes it") {
    Incremental d;
    load(d, "@You:\na\n@Assistant:\nb\n```\n@You:\nc");
    CHECK(d.segment_count() == 3);
    edit(d, 1, 1, {"```"});
    CHECK(d.check() == "");
    CHECK(d.segment_count() == 2);
    edit(d, 1, 2, {});
    CHECK(d.check() == "");
    CHECK(d.segment_count() == 3);
  }

  SUBCASE("a closing fence added below closes a fence left open above") {
    Incremental d;
    load(d, "@You:\n````\nopen\n@Assistant:\nb\n@You:\nc");
    CHECK(d.segment_count() == 3);
    edit(d, 7, 7, {"````"});
    CHECK(d.check() == "");
    CHECK(d.segment_count() == 1);
  }

  SUBCASE("a frontmatter closed further down") {
    Incremental d;
    load(d, "```lua\nx = 1\n@You:\nhi");
    edit(d, 4, 4, {"```"});
    CHECK(d.check() == "");
  }

  SUBCASE("tool ids are checked across messages") {
    Incremental d;
    load(d,
         "@Assistant:\n**Tool Use:** `x` (`a`)\n\n```json\n{}\n```\n@You:\n**Tool Result:** "
         "`a`\n\n```\nok\n```");
    CHECK(d.diagnostics().empty());
    edit(d, 7, 8, {"**Tool Result:** `b`"});
    CHECK(d.check() == "");
    CHECK(d.diagnostics().size() == 1);
    size_t seg = 9, item = 9;
    CHECK(d.find_tool_use("a", seg, item));
    CHECK(seg == 0);
    CHECK(d.segment(seg).doc.items[item].kind == FLEMMA_DOC_TOOL_USE);
    CHECK_FALSE(d.find_tool_use("b", seg, item));
  }

  SUBCASE(
      "id diagnostics come and go as uses and results are added and removed in other messages") {
    Incremental d;
    const std::string use = "**Tool Use:** `x` (`a`)\n\n```json\n{}\n```\n";
    load(d, "@Assistant:\n" + use +
                "@You:\nhi\n@Assistant:\nplain\n@You:\n**Tool Result:** `a`\n\n```\nok\n```");
    CHECK(d.diagnostics().empty());
    edit(d, 9, 10, split(use + "x"));  // the second assistant message uses `a` too
    CHECK(d.check() == "");
    REQUIRE(d.diagnostics().size() == 1);
    CHECK(d.diagnostics()[0].line == 10);
    edit(d, 0, 6, {"@Assistant:", "gone"});  // the first use goes: no duplicate left
    CHECK(d.check() == "");
    CHECK(d.diagnostics().empty());
    edit(d, 3, 3,
         {"**Tool Result:** `a`", "", "```", "second", "```"});  // a second result, above the use
    CHECK(d.check() == "");
    REQUIRE(d.diagnostics().size() == 1);
    CHECK(d.diag_arena().find("already has a result on line 4") != std::string::npos);
    const int32_t n = d.line_count();
    edit(d, 0, n, {"@You:", "nothing"});  // every use and result deleted
    CHECK(d.check() == "");
    CHECK(d.diagnostics().empty());
    edit(d, 2, 2, {"**Tool Result:** `a`", "", "```", "orphan", "```"});
    CHECK(d.check() == "");
    CHECK(d.diagnostics().size() == 1);
  }

  SUBCASE("changes since an old version cover every edit since") {
    Incremental d;
    load(d, "@You:\na\n@You:\nb\n@You:\nc\n@You:\nd");
    uint64_t v = d.version();
    edit(d, 1, 2, {"A"});
    edit(d, 7, 8, {"D", "D2"});
    size_t lo = 0, hi = 0;
    CHECK(d.changes(v, lo, hi));
    CHECK(lo == 0);
    CHECK(hi == 4);
    CHECK(d.changes(d.version(), lo, hi));
    CHECK(lo == hi);
    CHECK_FALSE(d.changes(0, lo, hi) ==
                false);  // version 0 is the empty document: the log reaches it
  }

  SUBCASE("edits out of range are refused and change nothing") {
    Incremental d;
    load(d, "@You:\na");
    CHECK_THROWS(edit(d, 1, 5, {}));
    CHECK_THROWS(edit(d, -1, 0, {}));
    CHECK(d.line_count() == 2);
    CHECK(d.version() == 1);
  }

  SUBCASE("random edits of structural lines on the fixture chats always match a full parse") {
    std::mt19937 rng(16);
    const char* fixtures[] = {
        "basic",          "crlf",         "diagnostics", "nested_fences",
        "parallel_tools", "placeholders", "thinking",    "frontmatter_unterminated",
        "empty_messages", "unicode"};
    for (const char* name : fixtures) {
      std::string text =
          read_file(std::string(FLEMMA_SOURCE_DIR) + "/spec/fixtures/chat/" + name + ".chat");
      Incremental d;
      load(d, text);
      REQUIRE(d.check() == "");
      for (int step = 0; step < 400; ++step) {
        int32_t n = d.line_count();
        int32_t first = n > 0 ? static_cast<int32_t>(rng() % static_cast<uint32_t>(n + 1)) : 0;
        int32_t removed = static_cast<int32_t>(rng() % 3);
        int32_t last = std::min(n, first + removed);
        std::vector<std::string> lines;
        int added = static_cast<int>(rng() % 3);
        for (int k = 0; k < added; ++k) lines.push_back(random_line(rng));
        edit(d, first, last, lines);
        std::string diff = d.check();
        INFO(std::string(name) << " step " << step << "\n" << d.text());
        REQUIRE(diff == "");
      }
    }
  }

  SUBCASE("the C API edits, lists segments and reports changes") {
    flemma_idoc* d = flemma_idoc_new();
    REQUIRE(d);
    const char* lines[] = {"@You:", "hi",      "@Assistant:", "**Tool Use:** `bash` (`t`)",
                           "",      "```json", "{}",          "```"};
    size_t lens[8];
    for (int i = 0; i < 8; ++i) lens[i] = std::string_view(lines[i]).size();
    CHECK(flemma_idoc_edit(d, 0, 0, lines, lens, 8) == FLEMMA_OK);
    CHECK(flemma_idoc_line_count(d) == 8);
    CHECK(flemma_idoc_segment_count(d) == 2);
    CHECK(flemma_idoc_segment_at(d, 3) == 1);
    CHECK(flemma_idoc_segment_at(d, 9) == -1);
    flemma_idoc_segment s{};
    REQUIRE(flemma_idoc_get_segment(d, 1, &s) == FLEMMA_OK);
    CHECK(s.first_line == 3);
    CHECK(s.item_count == 2);
    CHECK(s.items[1].kind == FLEMMA_DOC_TOOL_USE);
    CHECK(s.items[1].first_line == 2);
    int32_t seg = -1, item = -1;
    CHECK(flemma_idoc_find_tool_use(d, "t", 1, &seg, &item) == 1);
    CHECK(seg == 1);
    CHECK(item == 1);
    CHECK(flemma_idoc_edit(d, 5, 99, lines, lens, 1) == FLEMMA_E_INVALID);
    CHECK(std::string(flemma_last_error()).find("not within") != std::string::npos);
    int32_t lo = 0, hi = 0;
    CHECK(flemma_idoc_changes(d, 0, &lo, &hi) == 1);
    CHECK(lo == 0);
    CHECK(hi == 2);
    const flemma_doc_diag* diags = nullptr;
    CHECK(flemma_idoc_diagnostics(d, &diags) == 0);
    CHECK(flemma_idoc_get_segment(d, 7, &s) == FLEMMA_E_INVALID);
    flemma_idoc_free(d);
    flemma_idoc_free(nullptr);
  }
}

namespace {

// Appends a chunk at the end of the last line, as a streamed answer is
// written (nvim_buf_set_text there): the last line is replaced by itself plus
// the chunk, cut at its newlines.
void append_chunk(Incremental& d, const std::string& chunk) {
  const int32_t n = d.line_count();
  std::string text = d.text();
  size_t nl = text.rfind('\n');
  std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
  edit(d, n - 1, n, split(last + chunk));
}

// Prose with a ```lua block every `every` chunks, cut anywhere (chunks end mid-line).
std::string stream_chunk(int i, int every) {
  static const char* const words[] = {"the ",  "model ",  "writes ", "a ",
                                      "long ", "answer ", "about ",  "fences. "};
  if (i % every == 0) return (i / every) % 2 == 1 ? "\n\n```lua\n" : "\n```\n\n";
  if (i % 7 == 0) return "\nline " + std::to_string(i) + " ";
  return words[i % 8];
}

// A long @Assistant: answer (lines 4 on): blocks of 41 lines, lines 10-21 of
// each a ```lua block.
std::string long_message(int lines) {
  std::string out = "@You:\nquestion\n\n@Assistant:\n";
  for (int i = 0; i < lines; ++i) {
    if (i % 40 == 10) out += "```lua\n";
    out += i % 40 == 20 ? "```\n" : "prose line " + std::to_string(i) + "\n";
  }
  return out + "\n@You:\nthanks";
}

}  // namespace

TEST_CASE("incremental document: edits inside a long message") {
  SUBCASE("appending chunks to a growing answer parses only the lines near its end") {
    for (int32_t every : {1, 3, 16}) {
      Incremental d;
      d.set_checkpoint_every(every);
      load(d, "@You:\nwrite a long answer\n\n@Assistant:\n");
      int64_t most = 0;
      for (int i = 1; i <= 1500; ++i) {
        append_chunk(d, stream_chunk(i, 120));
        most = std::max(most, d.stats().last_parsed_lines);
        if (i % 10 == 0 || i % 120 < 2) {
          INFO("cp every " << every << " chunk " << i << "\n" << d.text());
          REQUIRE(d.check() == "");
        }
      }
      CHECK(d.line_count() > 200);
      // All but the first chunks, written on the line right after the marker.
      CHECK(d.stats().within >= 1490);
      // The answer's open ```lua block (up to ~20 lines) and one checkpoint interval at most.
      CHECK(most <= 2 * every + 40);
      CHECK(d.check() == "");
    }
  }

  SUBCASE("a marker written at the end of a long answer cuts it without parsing it again") {
    Incremental d;
    std::string text = long_message(3000);
    load(d, text.substr(0, text.rfind("\n\n@You:")));
    const uint64_t whole = d.stats().whole;
    const size_t segs = d.segment_count();
    const int32_t n = d.line_count();
    // The answer ends, the writer opens a new @You: message.
    edit(d, n - 1, n, {"thanks", "", "@You:", ""});
    CHECK(d.check() == "");
    CHECK(d.stats().whole == whole);
    CHECK(d.stats().last_parsed_lines < 40);
    CHECK(d.segment_count() == segs + 1);
    // And one in the middle of the answer: the rest becomes a new message.
    edit(d, 4 + 41 * 37 + 30, 4 + 41 * 37 + 30, {"@Assistant:"});
    CHECK(d.check() == "");
    CHECK(d.segment_count() == segs + 2);
    // Inside a code block it is code: no new message.
    edit(d, 4 + 41 * 20 + 15, 4 + 41 * 20 + 15, {"@You:"});
    CHECK(d.check() == "");
    CHECK(d.segment_count() == segs + 2);
    CHECK(d.stats().whole == whole);
  }

  SUBCASE("an edit in the middle of a long message stops where the scan state is the same again") {
    Incremental d;
    load(d, long_message(2000));
    REQUIRE(d.check() == "");
    const uint64_t whole = d.stats().whole;
    edit(d, 1003, 1004, {"an edited line", "and one more"});
    CHECK(d.check() == "");
    CHECK(d.stats().whole == whole);
    CHECK(d.stats().last_parsed_lines <= 3 * kCheckpointEvery + 40);
    // A fence opened mid-message turns the lines below into code up to the
    // next closing fence: the scan goes on until the states agree again.
    edit(d, 1200, 1200, {"````"});
    CHECK(d.check() == "");
    edit(d, 1500, 1500, {"````"});
    CHECK(d.check() == "");
    edit(d, 1200, 1201, {});
    CHECK(d.check() == "");
    edit(d, 1499, 1500, {});
    CHECK(d.check() == "");
    CHECK(d.stats().whole == whole);
  }

  SUBCASE("an edit after the end of a text run keeps the run's last line (fuzz_idoc)") {
    Incremental d;
    d.set_checkpoint_every(1);
    load(d,
         "@System:\nYou are terse.\nlook.\n\n**Tool Use:** `bash` "
         "(`t`)\n\n```json\n{}\n```\n@You:\nok");
    edit(d, 3, 4, {});
    CHECK(d.check() == "");
    edit(d, 3, 3, {"", ""});
    CHECK(d.check() == "");
    edit(d, 2, 2, {"more"});
    CHECK(d.check() == "");
  }

  SUBCASE("random edits and chunked appends inside long messages always match a full parse") {
    std::mt19937 rng(1612);
    for (int32_t every : {1, 2, 5, 16}) {
      Incremental d;
      d.set_checkpoint_every(every);
      load(d, long_message(300) + "\n\n@Assistant:\n" + long_message(200).substr(6));
      REQUIRE(d.check() == "");
      for (int step = 0; step < 600; ++step) {
        const int32_t n = d.line_count();
        if (rng() % 4 == 0) {
          std::string chunk;
          int parts = 1 + static_cast<int>(rng() % 3);
          for (int k = 0; k < parts; ++k) {
            if (rng() % 3 == 0) chunk += '\n';
            chunk += random_line(rng);
          }
          append_chunk(d, chunk);
        } else {
          // Mostly inside messages: a line away from the markers, few lines changed.
          int32_t first = static_cast<int32_t>(rng() % static_cast<uint32_t>(n + 1));
          int32_t last = std::min(n, first + static_cast<int32_t>(rng() % 3));
          std::vector<std::string> lines;
          int added = static_cast<int>(rng() % 3);
          for (int k = 0; k < added; ++k)
            lines.push_back(rng() % 3 == 0 ? random_line(rng)
                                           : "prose " + std::to_string(rng() % 1000));
          // Markers would end the message: mostly leave them out.
          for (auto& l : lines)
            if (!l.empty() && l[0] == '@' && rng() % 8 != 0) l = "plain";
          edit(d, first, last, lines);
        }
        std::string diff = d.check();
        INFO("cp every " << every << " step " << step << "\n" << d.text());
        REQUIRE(diff == "");
      }
      CHECK(d.stats().within > 100);
    }
  }
}

namespace {

// What each line (0-based) of the document is: the kind of the block or
// frontmatter holding it and whether it is its first or last line, "marker" on a
// role marker's line, else "-" (text and the lines between parts read the same
// for folds whichever run holds them).
std::vector<std::string> line_kinds(const Incremental& d) {
  const int32_t below = d.line_count();
  std::vector<std::string> out(static_cast<size_t>(std::max(below, 0)), "-");
  for (size_t k = 0; k < d.segment_count(); ++k) {
    const int32_t base = d.segment_start(k);
    for (const auto& it : d.segment(k).doc.items) {
      const int32_t first = base + it.first_line - 1, last = base + it.last_line - 1;
      if (it.kind == FLEMMA_DOC_TEXT) continue;
      if (it.kind == FLEMMA_DOC_MESSAGE) {
        if (first < below) out[static_cast<size_t>(first)] = "marker";
        continue;
      }
      for (int32_t x = first; x <= last && x < below; ++x)
        out[static_cast<size_t>(x)] =
            std::to_string(it.kind) + (x == first ? "F" : "") + (x == last ? "L" : "");
    }
  }
  return out;
}

}  // namespace

TEST_CASE("incremental document: the lines parsed again") {
  SUBCASE("an edit deep in a long message is parsed again from a checkpoint just above it") {
    Incremental d;
    load(d, long_message(2000));
    const uint64_t v = d.version();
    edit(d, 1003, 1004, {"an edited line"});
    int32_t line = -1, end = -1;
    CHECK(d.reparsed(v, line, end));
    CHECK(line <= 1003);
    CHECK(line >= 1003 - 2 * kCheckpointEvery - 40);
    CHECK(end >= 1004);
    CHECK(end <= 1004 + 2 * kCheckpointEvery + 40);
    CHECK(d.reparsed(d.version(), line, end));
    CHECK(line == d.line_count());
    CHECK(end == d.line_count());
  }

  SUBCASE("a marker written at the end of a long answer: parsed again from near the end") {
    Incremental d;
    std::string text = long_message(3000);
    load(d, text.substr(0, text.rfind("\n\n@You:")));
    const uint64_t v = d.version();
    const int32_t n = d.line_count();
    edit(d, n - 1, n, {"thanks", "", "@You:", ""});
    int32_t line = -1, end = -1;
    CHECK(d.reparsed(v, line, end));
    CHECK(line >= n - 1 - 2 * kCheckpointEvery - 40);
    CHECK(end == d.line_count());
  }

  SUBCASE("through the C ABI, and too old a version") {
    flemma_idoc* d = flemma_idoc_new();
    const char* lines[] = {"@You:", "a", "@Assistant:", "b"};
    size_t lens[] = {5, 1, 11, 1};
    REQUIRE(flemma_idoc_edit(d, 0, 0, lines, lens, 4) == FLEMMA_OK);
    const char* more[] = {"c"};
    size_t more_len[] = {1};
    REQUIRE(flemma_idoc_edit(d, 4, 4, more, more_len, 1) == FLEMMA_OK);
    int32_t first = 0, last = 0;
    CHECK(flemma_idoc_reparsed(d, 1, &first, &last) == 1);
    CHECK(first >= 1);
    CHECK(first <= 5);
    CHECK(last == 5);
    CHECK(flemma_idoc_reparsed(d, 2, &first, &last) == 1);
    CHECK(first == 6);
    CHECK(last == 5);
    CHECK(flemma_idoc_reparsed(nullptr, 0, &first, &last) < 0);
    flemma_idoc_free(d);
  }

  SUBCASE("random edits: the lines outside them read the same before and after") {
    std::mt19937 rng(4242);
    for (int32_t every : {1, 3, 16}) {
      Incremental d;
      d.set_checkpoint_every(every);
      load(d, "```lua\nx = 1\n```\n" + long_message(120) + "\n\n@Assistant:\n" +
                  long_message(80).substr(6));
      std::vector<uint64_t> versions;
      std::vector<std::vector<std::string>> kinds;
      for (int step = 0; step < 400; ++step) {
        versions.push_back(d.version());
        kinds.push_back(line_kinds(d));
        const int32_t n = d.line_count();
        if (rng() % 4 == 0) {
          std::string chunk(rng() % 2 ? "\n" : "");
          chunk += random_line(rng);
          append_chunk(d, chunk);
        } else {
          int32_t first = static_cast<int32_t>(rng() % static_cast<uint32_t>(n + 1));
          int32_t last = std::min(n, first + static_cast<int32_t>(rng() % 3));
          std::vector<std::string> lines;
          int added = static_cast<int>(rng() % 3);
          for (int k = 0; k < added; ++k) lines.push_back(random_line(rng));
          edit(d, first, last, lines);
        }
        const std::vector<std::string> after = line_kinds(d);
        // Since the last version, and since one 1 to 4 edits back.
        for (size_t back : {size_t{1}, size_t{1} + rng() % 4}) {
          if (back > versions.size()) continue;
          const std::vector<std::string>& before = kinds[kinds.size() - back];
          int32_t line = -1, end = -1;
          REQUIRE(d.reparsed(versions[versions.size() - back], line, end));
          INFO("cp every " << every << " step " << step << " back " << back << " parsed again "
                           << line << ".." << end << "\n"
                           << d.text());
          REQUIRE(line <= end);
          REQUIRE(line <= static_cast<int32_t>(before.size()));
          const int32_t delta = d.line_count() - static_cast<int32_t>(before.size());
          for (int32_t x = 0; x < line; ++x) {
            INFO("line " << x);
            REQUIRE(before[static_cast<size_t>(x)] == after[static_cast<size_t>(x)]);
          }
          for (int32_t x = end; x < d.line_count(); ++x) {
            INFO("line " << x);
            REQUIRE(x - delta >= 0);
            REQUIRE(before[static_cast<size_t>(x - delta)] == after[static_cast<size_t>(x)]);
          }
        }
      }
    }
  }
}

TEST_CASE("incremental document: the places edited, one range each") {
  using Range = Incremental::LineRange;
  SUBCASE("two edits far apart: two ranges, each around its edit, in the lines after both") {
    Incremental d;
    load(d, long_message(3000));
    const uint64_t v = d.version();
    edit(d, 2500, 2501, {"late"});
    edit(d, 400, 401, {"early", "and one more line"});
    std::vector<Range> r;
    CHECK(d.touched(v, 32, r));
    REQUIRE(r.size() == 2);
    CHECK(r[0].first <= 400);
    CHECK(r[0].end >= 402);
    CHECK(r[0].end < 1000);
    CHECK(r[1].first > 1000);
    CHECK(r[1].first <= 2501);  // moved down by the line the edit above added
    CHECK(r[1].end >= 2502);
    // One range at most: the union, as reparsed gives it.
    std::vector<Range> one;
    CHECK(d.touched(v, 1, one));
    REQUIRE(one.size() == 1);
    int32_t line = -1, end = -1;
    CHECK(d.reparsed(v, line, end));
    CHECK(one[0].first == line);
    CHECK(one[0].end == end);
    CHECK(one[0].first == r[0].first);
    CHECK(one[0].end == r[1].end);
    // Nothing since the last version; everything when too old.
    CHECK(d.touched(d.version(), 32, r));
    CHECK(r.empty());
  }

  SUBCASE("more places than the cap: the closest ones merged") {
    Incremental d;
    load(d, long_message(4000));
    const uint64_t v = d.version();
    for (int32_t at : {500, 1500, 1540, 3000}) edit(d, at, at + 1, {"x"});
    std::vector<Range> r;
    CHECK(d.touched(v, 3, r));
    REQUIRE(r.size() == 3);
    CHECK(r[0].end < 1400);
    CHECK(r[1].first <= 1500);
    CHECK(r[1].end >= 1541);
    CHECK(r[2].first > 1600);
  }

  SUBCASE("through the C ABI") {
    flemma_idoc* d = flemma_idoc_new();
    const std::string text = long_message(2000);
    std::vector<std::string> lines = split(text);
    REQUIRE(capi_edit(d, 0, 0, lines) == FLEMMA_OK);
    const char* one[] = {"y"};
    size_t one_len[] = {1};
    REQUIRE(flemma_idoc_edit(d, 1800, 1801, one, one_len, 1) == FLEMMA_OK);
    REQUIRE(flemma_idoc_edit(d, 100, 101, one, one_len, 1) == FLEMMA_OK);
    int32_t ranges[8] = {0};
    CHECK(flemma_idoc_touched(d, 1, ranges, 4) == 2);
    CHECK(ranges[0] <= 101);  // 1-based, inclusive
    CHECK(ranges[1] >= 101);
    CHECK(ranges[2] > ranges[1] + 1000);
    CHECK(ranges[2] <= 1801);
    CHECK(ranges[3] >= 1801);
    CHECK(flemma_idoc_touched(d, 3, ranges, 4) == 0);
    CHECK(flemma_idoc_touched(d, 1, ranges, 0) < 0);
    CHECK(flemma_idoc_touched(nullptr, 1, ranges, 4) < 0);
    flemma_idoc_free(d);
  }

  SUBCASE("random edits: every line outside the ranges reads as the line it was") {
    std::mt19937 rng(777);
    for (int32_t every : {1, 16}) {
      Incremental d;
      d.set_checkpoint_every(every);
      load(d, "```lua\nx = 1\n```\n" + long_message(200) + "\n\n@Assistant:\n" +
                  long_message(150).substr(6));
      struct Edit {
        int32_t first, last, count;
      };
      std::vector<uint64_t> versions;
      std::vector<std::vector<std::string>> kinds;
      std::vector<Edit> edits;
      for (int step = 0; step < 300; ++step) {
        versions.push_back(d.version());
        kinds.push_back(line_kinds(d));
        const int32_t n = d.line_count();
        int32_t first = static_cast<int32_t>(rng() % static_cast<uint32_t>(n + 1));
        int32_t last = std::min(n, first + static_cast<int32_t>(rng() % 3));
        std::vector<std::string> lines;
        const int added = static_cast<int>(rng() % 3);
        for (int k = 0; k < added; ++k) lines.push_back(random_line(rng));
        edit(d, first, last, lines);
        edits.push_back({first, last, added});
        const std::vector<std::string> after = line_kinds(d);
        for (size_t back : {size_t{1}, size_t{1} + rng() % 6}) {
          if (back > versions.size()) continue;
          const std::vector<std::string>& before = kinds[kinds.size() - back];
          std::vector<Range> r;
          const size_t cap = 1 + rng() % 4;
          REQUIRE(d.touched(versions[versions.size() - back], cap, r));
          REQUIRE(r.size() <= cap);
          for (size_t k = 0; k < r.size(); ++k) {
            REQUIRE(r[k].first <= r[k].end);
            if (k > 0) REQUIRE(r[k - 1].end < r[k].first);
          }
          size_t k = 0;
          for (int32_t x = 0; x < d.line_count(); ++x) {
            while (k < r.size() && r[k].end <= x) ++k;
            if (k < r.size() && r[k].first <= x) continue;
            // Back through the edits, newest first, to the line it was.
            int32_t old = x;
            for (size_t e = edits.size(); e-- > edits.size() - back;) {
              const Edit& ed = edits[e];
              INFO("line " << x << " is a line edit " << e << " wrote, outside every range");
              REQUIRE(!(old >= ed.first && old < ed.first + ed.count));
              if (old >= ed.first + ed.count) old -= ed.count - (ed.last - ed.first);
            }
            INFO("cp every " << every << " step " << step << " back " << back << " line " << x
                             << " was " << old);
            REQUIRE(before[static_cast<size_t>(old)] == after[static_cast<size_t>(x)]);
          }
        }
      }
    }
  }
}

TEST_CASE("incremental document: a line compared in place") {
  flemma_idoc* d = flemma_idoc_new();
  std::vector<std::string> lines = {"@You:", "first", "", "@Assistant:", "alpha", "beta", "gamma"};
  REQUIRE(capi_edit(d, 0, 0, lines) == FLEMMA_OK);
  auto is = [&](int32_t line, const std::string& text) {
    return flemma_idoc_line_is(d, line, text.data(), text.size());
  };
  // In order, across the two segments, then backwards and at random.
  for (int32_t l = 1; l <= 7; ++l) CHECK(is(l, lines[static_cast<size_t>(l - 1)]) == 1);
  for (int32_t l = 7; l >= 1; --l) CHECK(is(l, lines[static_cast<size_t>(l - 1)]) == 1);
  CHECK(is(6, "beta") == 1);
  CHECK(is(5, "alpha") == 1);
  CHECK(is(6, "bet") == 0);
  CHECK(is(6, "betaa") == 0);
  CHECK(is(3, "") == 1);
  CHECK(is(2, "") == 0);
  CHECK(is(0, "@You:") == 0);
  CHECK(is(8, "") == 0);
  // After an edit the segment it changed is read anew.
  const char* more[] = {"delta", "beta"};
  size_t more_len[] = {5, 4};
  REQUIRE(flemma_idoc_edit(d, 5, 6, more, more_len, 2) == FLEMMA_OK);
  CHECK(is(6, "delta") == 1);
  CHECK(is(7, "beta") == 1);
  CHECK(is(8, "gamma") == 1);
  CHECK(is(2, "first") == 1);
  CHECK(flemma_idoc_line_is(nullptr, 1, "x", 1) < 0);
  CHECK(flemma_idoc_line_is(d, 1, nullptr, 3) < 0);
  flemma_idoc_free(d);
}

TEST_CASE("incremental document: lines read from a file") {
  char tmpl[] = "/tmp/flemma_idoc_file_XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string text = "@You:\nhello\n\n@Assistant:\nhi there\n";
  {
    std::ofstream f(tmpl, std::ios::binary);
    f << text;
  }
  const int64_t size = static_cast<int64_t>(text.size());
  // Samples as a buffer would give them: line 2 at offset 6, line 5 at 25.
  const int64_t offsets[] = {6, 25};
  const char* lines[] = {"hello", "hi there"};
  const size_t lens[] = {5, 8};
  auto load = [&](int64_t sz, int32_t count, const char* const* ls, const size_t* lns, size_t ns) {
    flemma_idoc* d = flemma_idoc_new();
    int inserted = -1;
    REQUIRE(flemma_idoc_edit_file(d, 0, 0, tmpl, sz, count, offsets, ls, lns, ns, &inserted) ==
            FLEMMA_OK);
    const int32_t n = flemma_idoc_line_count(d);
    const int32_t segs = flemma_idoc_segment_count(d);
    flemma_idoc_free(d);
    return std::make_tuple(inserted, n, segs);
  };
  SUBCASE("the same file: its lines, parsed") {
    auto [inserted, n, segs] = load(size, 5, lines, lens, 2);
    CHECK(inserted == 1);
    CHECK(n == 5);
    CHECK(segs == 2);
  }
  SUBCASE("another size, line count or sample: nothing changed") {
    CHECK(std::get<0>(load(size - 1, 5, lines, lens, 2)) == 0);
    CHECK(std::get<0>(load(size + 1, 5, lines, lens, 2)) == 0);
    CHECK(std::get<0>(load(size, 4, lines, lens, 2)) == 0);
    CHECK(std::get<0>(load(size, 6, lines, lens, 2)) == 0);
    const char* other[] = {"hellO", "hi there"};
    auto [inserted, n, segs] = load(size, 5, other, lens, 2);
    CHECK(inserted == 0);
    CHECK(n == 0);
    const size_t longer[] = {6, 8};  // "hello\n" is not followed by a line end
    CHECK(std::get<0>(load(size, 5, lines, longer, 2)) == 0);
  }
  SUBCASE("no final newline, or no file: nothing changed") {
    {
      std::ofstream f(tmpl, std::ios::binary | std::ios::trunc);
      f.write(text.data(), static_cast<std::streamsize>(text.size() - 1));
    }
    CHECK(std::get<0>(load(size - 1, 5, lines, lens, 2)) == 0);
    unlink(tmpl);
    CHECK(std::get<0>(load(size, 5, lines, lens, 2)) == 0);
  }
  unlink(tmpl);
}
