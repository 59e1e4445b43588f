#include <doctest/doctest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <utime.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "search.hpp"

namespace se = flemma::search;
namespace fs = std::filesystem;

namespace {

bool m(const char* pattern, const char* line, bool icase = false) {
  return se::Regex(pattern, false, icase).matches(line);
}

void write(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << content;
}

struct TempTree {
  fs::path root;
  TempTree() {
    char tmpl[] = "/tmp/flemma-search-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
  }
  ~TempTree() {
    std::error_code ec;
    fs::permissions(root / "locked", fs::perms::owner_all, ec);
    fs::remove_all(root, ec);
  }
};

// Runs a search to the end and returns its events.
std::vector<flemma::stream::Event> run(const se::Options& o) {
  std::atomic<bool> cancel{false};
  std::vector<flemma::stream::Event> all;
  se::run(o, cancel, [&](std::vector<flemma::stream::Event>&& evs) {
    for (auto& e : evs) all.push_back(std::move(e));
  });
  return all;
}

std::vector<std::string> matches_of(const std::vector<flemma::stream::Event>& evs) {
  std::vector<std::string> out;
  for (const auto& e : evs)
    if (static_cast<int32_t>(e.type) == se::kMatch)
      out.push_back(e.a + ":" + std::to_string(e.index) + (e.status == 2 ? "-" : ":") + e.b);
  return out;
}

const flemma::stream::Event& summary_of(const std::vector<flemma::stream::Event>& evs) {
  REQUIRE(!evs.empty());
  REQUIRE(static_cast<int32_t>(evs.back().type) == se::kSummary);
  return evs.back();
}

}  // namespace

TEST_CASE("search: regex engine") {
  SUBCASE("literals, classes, anchors, groups, alternation, repetition") {
    CHECK(m("foo", "a foo b"));
    CHECK_FALSE(m("foo", "a fo b"));
    CHECK(m("^foo", "foo bar"));
    CHECK_FALSE(m("^foo", " foo"));
    CHECK(m("bar$", "foo bar"));
    CHECK_FALSE(m("bar$", "bar foo"));
    CHECK(m("a[0-9]+b", "xa123b"));
    CHECK_FALSE(m("a[0-9]+b", "xab"));
    CHECK(m("a[^0-9]b", "axb"));
    CHECK_FALSE(m("a[^0-9]b", "a1b"));
    CHECK(m("(cat|dog)s?$", "hot dogs"));
    CHECK(m("(?:ab){2}c", "xababc"));
    CHECK_FALSE(m("(?:ab){2}c", "xabc"));
    CHECK(m("x{2,3}y", "axxy"));
    CHECK_FALSE(m("ax{2,3}y", "axxxxy"));
    CHECK(m("\\d+\\.\\d+", "v1.25"));
    CHECK(m("\\bword\\b", "a word here"));
    CHECK_FALSE(m("\\bword\\b", "swordfish"));
    CHECK(m("\\Bord", "sword"));
    CHECK(m("\\s\\S", "a b"));
    CHECK(m("\\w+_id", "user_id"));
    CHECK(m("a\\{b", "a{b"));
    CHECK(m("", "anything"));
  }
  SUBCASE("`.` and negated classes take a whole UTF-8 character") {
    CHECK(m("a.b", "aéb"));
    CHECK(m("a[^x]b", "a€b"));
    CHECK(m("^.{3}$", "日本語"));
    CHECK_FALSE(m("^.{2}$", "日本語"));
    CHECK(m("é+", "café"));
  }
  SUBCASE("ignore case (ASCII)") {
    CHECK(m("hello", "HeLLo world", true));
    CHECK(m("[a-c]+x", "ABCX", true));
    CHECK_FALSE(m("hello", "HeLLo world", false));
  }
  SUBCASE("the required literal and the literal-only fast path") {
    CHECK(se::Regex("foo(bar|baz)qux", false, false).required() == "foo");
    CHECK(se::Regex("fn_[0-9]+_handler", false, false).required() == "_handler");
    CHECK(se::Regex("(a|b)", false, false).required().empty());
    CHECK(se::Regex("Hello", false, true).required() == "hello");
    CHECK(se::Regex("hello", false, false).literal_only());
    CHECK(se::Regex("Hello", false, true).literal_only());
    CHECK_FALSE(se::Regex("hel+o", false, false).literal_only());
    CHECK(se::Regex("a.b(", true, false).matches("xa.b(y"));
    CHECK(se::Regex("a.b(", true, false).literal_only());
  }
  SUBCASE("unsupported syntax is an error naming it") {
    auto err = [](const char* p) {
      try {
        se::Regex r(p, false, false);
      } catch (const flemma::Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    CHECK(err("(?=x)").find("lookaround") != std::string::npos);
    CHECK(err("a\\1").find("unsupported escape") != std::string::npos);
    CHECK(err("(ab").find("not closed") != std::string::npos);
    CHECK(err("ab)").find("unmatched") != std::string::npos);
    CHECK(err("*a").find("nothing to repeat") != std::string::npos);
    CHECK(err("a{1001}").find("at most 1000") != std::string::npos);
    CHECK(err("[é]").find("ASCII") != std::string::npos);
    CHECK(err("(?:a{1000}){1000}").find("too large") != std::string::npos);
  }
  SUBCASE("matching stays linear: a pathological input finishes at once") {
    std::string text(20000, 'a');
    auto t0 = std::chrono::steady_clock::now();
    CHECK_FALSE(se::Regex("(a|aa)*c", false, false).matches(text));
    CHECK_FALSE(se::Regex("a*a*a*a*a*b", false, false).matches(text));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  }
}

TEST_CASE("search: the ReDoS screen") {
  // Nested unbounded quantifiers.
  for (const char* p : {"(a+)+", "(a*)*", "(x*y)+z", "(?:a|b+)*", "((ab)+c)+", "(a+){2,5}"}) {
    INFO(p);
    CHECK(se::check_pattern(p, false).find("nests an unbounded quantifier") != std::string::npos);
  }
  // Adjacent unbounded quantifiers over shared characters.
  for (const char* p : {"a*a*", ".*.*", "\\w+\\d+", "[a-z]+[k-p]*", "\\s*\\s+", "x.+.*y"}) {
    INFO(p);
    CHECK(se::check_pattern(p, false).find("side by side") != std::string::npos);
  }
  // Acceptable patterns.
  for (const char* p :
       {"a*b*", "\\d+\\.\\d+", "foo.*bar", "(ab)+", "(a{2})+", "[a-z]+_[0-9]+", "^\\s*#"}) {
    INFO(p);
    CHECK(se::check_pattern(p, false).empty());
  }
  CHECK(se::check_pattern(std::string(1001, 'a'), false).find("longer than 1000") !=
        std::string::npos);
  CHECK(se::check_pattern("", false).find("empty") != std::string::npos);
  CHECK(se::check_pattern("(a+)+", true).empty());  // a literal: nothing to screen
  CHECK(se::check_pattern("(ab", false).find("not closed") != std::string::npos);
  CHECK(flemma_search_check("(a+)+", 5, 0) == FLEMMA_E_INVALID);
  CHECK(std::string(flemma_last_error()).find("nests") != std::string::npos);
  CHECK(flemma_search_check("a+b", 3, 0) == FLEMMA_OK);
}

TEST_CASE("search: globs and ignore rules") {
  SUBCASE("globs") {
    CHECK(se::Glob("**/*.lua").matches("a.lua"));
    CHECK(se::Glob("**/*.lua").matches("lua/flemma/x.lua"));
    CHECK_FALSE(se::Glob("**/*.lua").matches("lua/flemma/x.luac"));
    CHECK(se::Glob("src/**/*.c").matches("src/a.c"));
    CHECK(se::Glob("src/**/*.c").matches("src/x/y/a.c"));
    CHECK_FALSE(se::Glob("src/**/*.c").matches("lib/src/a.c"));
    CHECK(se::Glob("*.c").matches("a.c"));
    CHECK_FALSE(se::Glob("*.c").matches("d/a.c"));
    CHECK(se::Glob("a?c").matches("abc"));
    CHECK_FALSE(se::Glob("a?c").matches("a/c"));
    CHECK(se::Glob("[!x]*.md").matches("README.md"));
    CHECK_FALSE(se::Glob("[!R]*.md").matches("README.md"));
    CHECK(se::Glob("file[0-9].txt").matches("file7.txt"));
    CHECK(se::Glob("a.b+(c)").matches("a.b+(c)"));
    CHECK_FALSE(se::Glob("a.b").matches("axb"));
    CHECK(se::Glob("build/**").matches("build/x/y.o"));
    CHECK(se::Glob("**").matches("any/thing"));
    CHECK(se::Glob("*.LUA", true).matches("x.lua"));
  }
  SUBCASE("gitignore rules: last match wins, negation, directories, anchoring") {
    se::IgnoreRules r;
    r.add("# comment\n*.log\n!keep.log\nbuild/\n/top.txt\ndocs/*.tmp\n\\#hash\ntrailing   \n");
    CHECK(r.match("x.log", false) == 1);
    CHECK(r.match("a/b/x.log", false) == 1);
    CHECK(r.match("keep.log", false) == -1);
    CHECK(r.match("build", true) == 1);
    CHECK(r.match("build", false) == 0);  // a file named build stays
    CHECK(r.match("top.txt", false) == 1);
    CHECK(r.match("sub/top.txt", false) == 0);
    CHECK(r.match("docs/a.tmp", false) == 1);
    CHECK(r.match("x/docs/a.tmp", false) == 0);
    CHECK(r.match("#hash", false) == 1);
    CHECK(r.match("trailing", false) == 1);
    CHECK(r.match("main.c", false) == 0);
  }
}

TEST_CASE("search: the vectorised literal search and newline count") {
  // Plain loops to compare with.
  auto fold = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c | 0x20) : c; };
  auto naive = [&](std::string_view h, std::string_view n, bool icase) -> size_t {
    for (size_t i = 0; i + n.size() <= h.size(); ++i) {
      size_t k = 0;
      while (k < n.size() && (icase ? fold(h[i + k]) : h[i + k]) == n[k]) ++k;
      if (k == n.size()) return i;
    }
    return std::string_view::npos;
  };
  CHECK(se::find_literal("abc", "", false) == 0);
  CHECK(se::find_literal("ab", "abc", false) == std::string_view::npos);
  CHECK(se::find_literal("xxxxxxxxxxxxxxxxxxxxHANDLER(", "handler(", true) == 20);
  CHECK(se::find_literal("xxxxxxxxxxxxxxxxxxxxHANDLER(", "handler(", false) ==
        std::string_view::npos);
  // '@' | 0x20 is '`': a byte that only looks like a folded letter is no match.
  CHECK(se::find_literal(std::string(40, '@') + "`x", "`x", true) == 40);
  CHECK(se::find_literal(std::string(40, '@') + "@X", "`x", true) == std::string_view::npos);
  // Every alignment around the 16-byte blocks, needles of 1 to 40 bytes, found
  // at every position and at the very end, in both cases.
  uint32_t seed = 12345;
  auto rnd = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
  const std::string alphabet("abAB_(\n\0\xff", 9);
  for (int round = 0; round < 3000; ++round) {
    std::string hay(rnd() % 90, 'a');
    for (auto& c : hay) c = alphabet[rnd() % alphabet.size()];
    std::string needle(1 + rnd() % 40, 'a');
    for (auto& c : needle) c = alphabet[rnd() % alphabet.size()];
    if (rnd() % 2 == 0 && needle.size() <= hay.size()) {
      size_t at = rnd() % (hay.size() - needle.size() + 1);
      hay.replace(at, needle.size(), needle);
    }
    for (bool icase : {false, true}) {
      std::string n = needle;
      if (icase)
        for (auto& c : n) c = fold(c);
      INFO("hay ", hay.size(), " needle ", n.size(), " icase ", icase);
      CHECK(se::find_literal(hay, n, icase) == naive(hay, n, icase));
    }
    size_t want = 0;
    for (char c : hay) want += c == '\n' ? 1 : 0;
    CHECK(se::count_newlines(hay) == want);
  }
  // Long runs: more than 255 blocks of newlines (the per-lane counters are summed in time).
  CHECK(se::count_newlines(std::string(100000, '\n')) == 100000);
  CHECK(se::count_newlines(std::string(100001, 'x')) == 0);
}

TEST_CASE("search: line numbers across reads") {
  TempTree t;
  std::string big;
  for (int i = 1; i <= 120000; ++i) {
    big += (i == 7 || i == 60001 || i == 119999) ? "a Needle here" : "line " + std::to_string(i);
    big += '\n';
  }
  write(t.root / "big.txt", big);                         // over 1 MB: several reads
  write(t.root / "small.txt", "one\ntwo needle\nthree");  // no final newline
  se::Options o;
  o.root = t.root.string();
  o.pattern = "needle";
  o.ignore_case = true;
  o.max_results = 100;
  CHECK(matches_of(run(o)) ==
        std::vector<std::string>{"big.txt:7:a Needle here", "big.txt:60001:a Needle here",
                                 "big.txt:119999:a Needle here", "small.txt:2:two needle"});
  o.pattern = "N[e]edle";
  o.ignore_case = false;
  o.context = 1;
  CHECK(matches_of(run(o)) ==
        std::vector<std::string>{"big.txt:6-line 6", "big.txt:7:a Needle here", "big.txt:8-line 8",
                                 "big.txt:60000-line 60000", "big.txt:60001:a Needle here",
                                 "big.txt:60002-line 60002", "big.txt:119998-line 119998",
                                 "big.txt:119999:a Needle here", "big.txt:120000-line 120000"});
}

TEST_CASE("search: the walker") {
  TempTree t;
  write(t.root / "a.txt", "alpha\nneedle one\ngamma\n");
  write(t.root / "src/b.lua", "local x = 1\n-- NEEDLE two\nreturn x\n");
  write(t.root / "src/gen/c.lua", "needle ignored\n");
  write(t.root / "src/.gitignore", "gen/\n");
  write(t.root / ".hidden/d.txt", "needle hidden\n");
  write(t.root / "skip.log", "needle log\n");
  write(t.root / ".ignore", "*.log\n");
  write(t.root / "bin.dat", std::string("needle\0binary\n", 14));
  write(t.root / "late.bin", "needle early\n" + std::string(300000, 'x') + std::string("\0", 1));
  write(t.root / "other.bin",
        std::string("no match\0here\n", 15));  // binary, no match: not counted
  write(t.root / "long.txt", "x\n" + std::string(1000, 'y') + "needle" + "\n");
  write(t.root / "node_modules/m.txt", "needle in modules\n");
  fs::create_symlink("/etc", t.root / "link_out");
  fs::create_symlink(t.root / "a.txt", t.root / "link_in.txt");
  write(t.root / "locked/secret.txt", "needle locked\n");
  fs::permissions(t.root / "locked", fs::perms::none);

  se::Options o;
  o.root = t.root.string();
  o.pattern = "needle";
  auto evs = run(o);
  auto got = matches_of(evs);
  // Root reads a directory without permissions anyway.
  const bool root = ::geteuid() == 0;
  std::vector<std::string> want = {"a.txt:2:needle one"};
  if (root) want.push_back("locked/secret.txt:1:needle locked");
  want.push_back("long.txt:2:" + std::string(400, 'y'));
  want.push_back("node_modules/m.txt:1:needle in modules");
  CHECK(got == want);
  const auto& s = summary_of(evs);
  CHECK(s.usage[0] == (root ? 4 : 3));  // found
  CHECK(s.usage[2] == 2);               // binary files with a match skipped (a NUL byte anywhere)
  if (!root) CHECK(s.usage[3] == 1);    // the locked directory
  CHECK(s.usage[4] == (root ? 4 : 3));  // files with a match

  SUBCASE("ignore case, hidden, no_ignore, include") {
    o.ignore_case = true;
    o.hidden = true;
    o.no_ignore = true;
    o.include = "*.lua";
    auto g = matches_of(run(o));
    CHECK(g ==
          std::vector<std::string>{"src/b.lua:2:-- NEEDLE two", "src/gen/c.lua:1:needle ignored"});
  }
  SUBCASE("context lines and max_results (all counted)") {
    o.context = 1;
    o.max_results = 1;
    auto e = run(o);
    CHECK(matches_of(e) ==
          std::vector<std::string>{"a.txt:1-alpha", "a.txt:2:needle one", "a.txt:3-gamma"});
    CHECK(summary_of(e).usage[0] == (root ? 4 : 3));
  }
  SUBCASE("files mode: globs, skipped folders, newest first") {
    se::Options f;
    f.root = t.root.string();
    f.files_mode = true;
    f.pattern = "**/*.lua";
    auto e = run(f);
    std::vector<std::string> paths;
    for (const auto& x : e)
      if (static_cast<int32_t>(x.type) == se::kFile) paths.push_back(x.a);
    CHECK(paths == std::vector<std::string>{"src/b.lua"});
    f.pattern = "*.txt";
    f.name_only = true;
    f.skip_dirs = {"node_modules", "locked"};
    ::utime((t.root / "a.txt").c_str(), nullptr);
    struct timeval old[2] = {{1000000, 0}, {1000000, 0}};
    ::utimes((t.root / "long.txt").c_str(), old);
    paths.clear();
    for (const auto& x : run(f))
      if (static_cast<int32_t>(x.type) == se::kFile) paths.push_back(x.a);
    CHECK(paths == std::vector<std::string>{"a.txt", "long.txt"});
  }
}

TEST_CASE("search: rg --json and path list decoders") {
  const std::string rg =
      R"({"type":"begin","data":{"path":{"text":"src/a.lua"}}})"
      "\n"
      R"({"type":"context","data":{"path":{"text":"src/a.lua"},"lines":{"text":"before\n"},"line_number":1,"absolute_offset":0,"submatches":[]}})"
      "\n"
      R"({"type":"match","data":{"path":{"text":"src/a.lua"},"lines":{"text":"the needle\r\n"},"line_number":2,"absolute_offset":7,"submatches":[{"match":{"text":"needle"},"start":4,"end":10}]}})"
      "\n"
      R"({"type":"end","data":{"path":{"text":"src/a.lua"},"binary_offset":null,"stats":{}}})"
      "\n"
      R"({"type":"begin","data":{"path":{"bytes":"Yi50eHQ="}}})"
      "\n"
      R"({"type":"match","data":{"path":{"bytes":"Yi50eHQ="},"lines":{"bytes":"bmVlZGxlIP8K"},"line_number":9}})"
      "\n"
      R"({"type":"end","data":{"path":{"bytes":"Yi50eHQ="},"binary_offset":null,"stats":{}}})"
      "\n"
      R"({"type":"begin","data":{"path":{"text":"bin"}}})"
      "\n"
      R"({"type":"match","data":{"path":{"text":"bin"},"lines":{"text":"needle in a binary\n"},"line_number":1}})"
      "\n"
      R"({"type":"end","data":{"path":{"text":"bin"},"binary_offset":12,"stats":{}}})"
      "\n"
      "not json\n"
      R"({"type":"begin","data":{"path":{"text":"c"}}})"
      "\n"
      R"({"type":"match","data":{"path":{"text":"c"},"lines":{"text":"third\n"},"line_number":3}})"
      "\n"
      R"({"type":"end","data":{"path":{"text":"c"},"binary_offset":null,"stats":{}}})"
      "\n"
      R"({"type":"summary","data":{}})"
      "\n";
  auto decode = [&](size_t piece, int64_t max) {
    se::OutputDecoder d(se::OutputDecoder::Kind::RgJson, max);
    std::vector<flemma::stream::Event> out;
    for (size_t i = 0; i < rg.size(); i += piece)
      d.feed(std::string_view(rg).substr(i, piece), out);
    d.finish(out);
    return out;
  };
  auto whole = decode(rg.size(), 2);
  CHECK(matches_of(whole) == std::vector<std::string>{"src/a.lua:1-before",
                                                      "src/a.lua:2:the needle",
                                                      "b.txt:9:needle \xEF\xBF\xBD"});
  const auto& s = summary_of(whole);
  CHECK(s.usage[0] == 3);  // all matches counted, the binary file's left out
  CHECK(s.usage[1] == 3);  // text files searched (end events)
  CHECK(s.usage[2] == 1);  // one binary
  CHECK(s.usage[4] == 3);
  CHECK(decode(1, 2) == whole);  // the same in any pieces
  CHECK(decode(7, 2) == whole);

  SUBCASE("lines known by rg's spelling give what parsing them gives") {
    // The same stream spelt with a space after "type": (valid JSON, parsed in full).
    auto respell = [](std::string text) {
      for (size_t at = 0; (at = text.find(R"({"type":")", at)) != std::string::npos; at += 9)
        text.replace(at, 8, R"({"type": )");
      return text;
    };
    // A binary file whose path holds what a text file's end line says after its path.
    const std::string tricky =
        R"({"type":"begin","data":{"path":{"text":"x\"},\"binary_offset\":null,\"stats\":{"}}})"
        "\n"
        R"({"type":"match","data":{"path":{"text":"x"},"lines":{"text":"needle\n"},"line_number":1}})"
        "\n"
        R"({"type":"end","data":{"path":{"text":"x\"},\"binary_offset\":null,\"stats\":{"},"binary_offset":3,"stats":{}}})"
        "\n";
    for (const std::string& text : {rg, tricky + rg}) {
      const std::string spelt = respell(text);
      REQUIRE(spelt != text);
      for (int64_t max = 0; max <= 4; ++max) {
        auto run_on = [&](const std::string& t) {
          se::OutputDecoder d(se::OutputDecoder::Kind::RgJson, max);
          std::vector<flemma::stream::Event> out;
          d.feed(t, out);
          d.finish(out);
          return out;
        };
        INFO("max ", max);
        CHECK(run_on(text) == run_on(spelt));
      }
    }
    se::OutputDecoder d(se::OutputDecoder::Kind::RgJson, 0);
    std::vector<flemma::stream::Event> out;
    d.feed(tricky, out);
    d.finish(out);
    CHECK(summary_of(out).usage[2] == 1);  // binary: its end line was parsed
    CHECK(summary_of(out).usage[0] == 0);
  }

  SUBCASE("NUL-separated paths: filtered by the glob and skip list, newest first") {
    TempTree t;
    write(t.root / "a.c", "");
    write(t.root / "sub/b.c", "");
    write(t.root / "sub/c.h", "");
    write(t.root / "node_modules/x.c", "");
    struct timeval old[2] = {{1000000, 0}, {1000000, 0}};
    ::utimes((t.root / "a.c").c_str(), old);
    se::OutputDecoder d(se::OutputDecoder::Kind::Paths, 10, t.root.string(), "**/*.c", false,
                        {"node_modules"});
    std::vector<flemma::stream::Event> out;
    std::string list = std::string("./a.c\0sub/b.c\0sub/c.h\0node_modules/x.c\0missing.c\0", 49);
    d.feed(list, out);
    d.finish(out);
    std::vector<std::string> paths;
    for (const auto& x : out)
      if (static_cast<int32_t>(x.type) == se::kFile) paths.push_back(x.a);
    CHECK(paths == std::vector<std::string>{"sub/b.c", "a.c"});
    CHECK(summary_of(out).usage[3] == 1);  // missing.c
  }
}

TEST_CASE("search: through the process manager") {
  TempTree t;
  write(t.root / "x.txt", "one needle\n");
  flemma_procmgr* mgr = flemma_procmgr_new();
  REQUIRE(mgr);
  flemma_search_opts o{};
  std::string root = t.root.string();
  o.root = root.c_str();
  o.pattern = "needle";
  o.max_results = 10;
  int64_t id = 0;
  REQUIRE(flemma_procmgr_search(mgr, &o, &id) == FLEMMA_OK);
  bool exited = false;
  std::vector<std::string> got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!exited && std::chrono::steady_clock::now() < deadline) {
    pollfd p{flemma_procmgr_fd(mgr), POLLIN, 0};
    ::poll(&p, 1, 100);
    flemma_procmgr_ack(mgr);
    while (flemma_proc_event* e = flemma_procmgr_next_event(mgr)) {
      CHECK(e->id == id);
      if (e->kind == 3)
        for (size_t k = 0; k < e->stream_event_count; ++k) {
          const auto& s = e->stream_events[k];
          if (s.type == FLEMMA_STREAM_SEARCH_MATCH)
            got.push_back(std::string(s.a, s.a_len) + ":" + std::string(s.b, s.b_len));
        }
      if (e->kind == 2) {
        exited = true;
        CHECK(e->exit_code == 0);
      }
      flemma_proc_event_free(e);
    }
  }
  CHECK(exited);
  CHECK(got == std::vector<std::string>{"x.txt:one needle"});
  o.pattern = "(ab";
  CHECK(flemma_procmgr_search(mgr, &o, &id) == FLEMMA_E_INVALID);
  o.root = "relative";
  CHECK(flemma_procmgr_search(mgr, &o, &id) == FLEMMA_E_INVALID);
  flemma_procmgr_free(mgr);
}
