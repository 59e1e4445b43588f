#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "guard.hpp"
#include "isolate.hpp"
#include "lpattern.hpp"

namespace iso = flemma::isolate;
namespace lp = flemma::lpattern;

namespace {
// A runtime module whose `run(code)` runs code as user code ("=user") and returns its results.
const char* kRuntime = R"(
local M = {}
function M.run(code)
  local env = { string = string, table = table, math = math, os = os, pcall = pcall, xpcall = xpcall,
                tonumber = tonumber, tostring = tostring, type = type, error = error, pairs = pairs,
                ipairs = ipairs, select = select, unpack = unpack, setmetatable = setmetatable }
  local fn, err = isolate.load(code, "=user", env)
  if not fn then error(err, 0) end
  return fn()
end
return M
)";

iso::Isolate make(iso::Limits limits = {}) { return iso::Isolate({{"rt", kRuntime}}, "rt", limits); }

std::string run(iso::Isolate& i, const std::string& code) {
  std::string esc;
  for (char c : code) {
    if (c == '"' || c == '\\') esc += '\\';
    if (c == '\n') {
      esc += "\\n";
      continue;
    }
    esc += c;
  }
  return i.call("run", "[\"" + esc + "\"]");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

TEST_CASE("isolate") {
  SUBCASE("runs code and returns plain data") {
    auto i = make();
    CHECK(run(i, "return 1 + 2, 'x', { a = { true } }, { 1, 2 }") ==
          R"J({"ok":true,"values":[3,"x",{"a":[true]},[1,2]]})J");
  }
  SUBCASE("reports an error with the user line") {
    auto i = make();
    CHECK(run(i, "local x\nerror('nope')") == R"J({"error":"user:2: nope","limit":null,"ok":false})J");
  }
  SUBCASE("stops an endless loop at the deadline, even under pcall") {
    auto i = make();
    auto t0 = std::chrono::steady_clock::now();
    auto out = run(i, "while true do pcall(function() while true do end end) end");
    MESSAGE("endless loop stopped after " << ms_since(t0) << " ms");
    CHECK(out == R"J({"error":"user:1: ran longer than 35 ms and was stopped (an endless loop?)","limit":"time","ok":false})J");
    CHECK(run(i, "return 1") == R"J({"ok":true,"values":[1]})J");  // the next call has its own deadline
  }
  SUBCASE("stops code that holds too much memory") {
    iso::Limits small;
    small.memory = 1u << 20;  // reached in time even where fresh pages are slow
    small.time_ms = 5000;     // and under sanitizers
    auto i = make(small);
    auto t0 = std::chrono::steady_clock::now();
    auto out = run(i, "local t = {}\nfor i = 1, 1e6 do t[i] = ('y'):rep(1000) .. i end");
    MESSAGE("memory stopped after " << ms_since(t0) << " ms, peak " << i.arena().peak());
    CHECK(out == R"J({"error":"user:2: used more than 1 MB of memory and was stopped","limit":"memory","ok":false})J");
    CHECK(i.arena().peak() <= (1u << 20));
  }
  SUBCASE("refuses a table part over the block limit") {
    iso::Limits slow;
    slow.time_ms = 5000;
    auto i = make(slow);
    CHECK(run(i, "local t = {}\nfor i = 1, 1e6 do t[i] = i end") ==
          R"J({"error":"user:2: needed 1048576 bytes for one string or table, more than the 512 KB one may hold, and was stopped","limit":"memory","ok":false})J");
  }
  SUBCASE("refuses one string over the block limit") {
    auto i = make();
    CHECK(run(i, "return ('x'):rep(2^30)") ==
          R"J({"error":"user:1: string.rep: the result would be 1073741824 bytes, more than the 512 KB one string may hold","limit":null,"ok":false})J");
  }
  SUBCASE("pattern attacks end at the deadline") {
    for (const char* code : {"local s = ('('):rep(3e5) return s:find('%b()')", "local s = ('a'):rep(2e4) return s:find('(.-)%1b')",
                             "local s = ('a'):rep(40) for i = 1, 1e9 do s:find('^a*a*a*a*a*b') end"}) {
      auto i = make();
      auto t0 = std::chrono::steady_clock::now();
      auto out = run(i, code);
      MESSAGE(code << " stopped after " << ms_since(t0) << " ms");
      CHECK(out.find("ran longer than 35 ms") != std::string::npos);
    }
  }
}

TEST_CASE("lpattern") {
  auto m = [](std::string s, std::string p) {
    lp::StepBudget b(1000000);
    lp::Matcher mm(s, p, b);
    for (size_t at = 0; at <= s.size(); at++) {
      auto e = mm.match_at(at);
      if (e >= 0) return s.substr(at, static_cast<size_t>(e) - at);
    }
    return std::string("<none>");
  };
  SUBCASE("matches like Lua 5.1") {
    CHECK(m("hello world", "o w") == "o w");
    CHECK(m("git status --short", "%a+") == "git");
    CHECK(m("[tag]", "%[(.-)%]") == "[tag]");
    CHECK(m("THE (quick) fox", "%f[%a]%a+%f[%A]") == "THE");
    CHECK(m("x = (a(b)c)", "%b()") == "(a(b)c)");
    CHECK(m("abcabc", "(abc)%1") == "abcabc");
    CHECK(m("aaab", "a-b") == "aaab");
    CHECK(m("ab", "x*") == "");
  }
  SUBCASE("reports malformed patterns") {
    lp::StepBudget b(1000);
    CHECK_THROWS_WITH_AS(lp::Matcher("a", "[a", b).match_at(0), "malformed pattern (missing ']')", lp::PatternError);
    CHECK_THROWS_WITH_AS(lp::Matcher("a", "%", b).match_at(0), "malformed pattern (ends with '%')", lp::PatternError);
    CHECK_THROWS_WITH_AS(lp::Matcher("a", "a)", b).match_at(0), "invalid pattern capture", lp::PatternError);
  }
  SUBCASE("stops at the step budget") {
    lp::StepBudget b(100000);
    std::string s(30, 'a');
    CHECK_THROWS_AS(lp::Matcher(s, "a*a*a*a*a*a*a*b", b).match_at(0), lp::BudgetExceeded);
  }
}
