// libFuzzer target for the search's pattern matchers (`make fuzz`): the input's
// first line is a pattern, the rest lines of text. The line is compiled as a glob,
// as ignore rules (the whole input is also read as an ignore file) and as a grep
// regex (after the ReDoS screen); each is then matched against every other line.
// Invariants: no crash; a pattern either compiles or raises flemma::Error; the
// regex screen and the compiler agree on what is accepted; a literal pattern
// (fixed_strings) matches exactly the lines that contain it; matching ends
// (the engine is linear: the fuzzer's timeout catches any blow-up); the
// vectorised literal search and newline count equal plain loops.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "guard.hpp"
#include "search.hpp"

namespace se = flemma::search;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  std::string_view pattern = in.substr(0, nl);
  std::vector<std::string_view> lines;
  if (nl != std::string_view::npos) {
    std::string_view rest = in.substr(nl + 1);
    size_t pos = 0;
    while (pos <= rest.size() && lines.size() < 64) {
      size_t e = rest.find('\n', pos);
      if (e == std::string_view::npos) e = rest.size();
      lines.push_back(rest.substr(pos, e - pos));
      pos = e + 1;
    }
  }

  try {
    se::Glob g(pattern);
    for (auto l : lines) (void)g.matches(l);
  } catch (const flemma::Error&) {
  }

  se::IgnoreRules rules;
  rules.add(in);
  for (auto l : lines) {
    (void)rules.match(l, false);
    (void)rules.match(l, true);
  }

  std::string why = se::check_pattern(pattern, false);
  bool compiled = true;
  try {
    se::Regex re(pattern, false, (size & 1) != 0);
    for (auto l : lines) (void)re.matches(l);
  } catch (const flemma::Error&) {
    compiled = false;
  }
  // What the screen accepts must compile (the screen refuses more than the compiler).
  if (why.empty() && !compiled) std::abort();

  if (!pattern.empty() && pattern.size() <= se::kMaxPattern) {
    se::Regex lit(pattern, true, false);
    for (auto l : lines)
      if (lit.matches(l) != (l.find(pattern) != std::string_view::npos)) std::abort();
  }
  // The vectorised literal search and newline count agree with plain loops, in
  // both cases (the needle lower-cased for ignore_case, as the walker passes it).
  std::string folded(pattern);
  for (auto& c : folded)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c | 0x20);
  auto fold = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c | 0x20) : c; };
  std::string_view rest = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
  for (bool icase : {false, true}) {
    std::string_view needle = icase ? std::string_view(folded) : pattern;
    size_t want = std::string_view::npos;
    for (size_t i = 0; !needle.empty() && i + needle.size() <= rest.size(); ++i) {
      size_t k = 0;
      while (k < needle.size() && (icase ? fold(rest[i + k]) : rest[i + k]) == needle[k]) ++k;
      if (k == needle.size()) {
        want = i;
        break;
      }
    }
    if (needle.empty()) want = 0;
    if (se::find_literal(rest, needle, icase) != want) std::abort();
  }
  size_t newlines = 0;
  for (char c : rest) newlines += c == '\n' ? 1 : 0;
  if (se::count_newlines(rest) != newlines) std::abort();
  return 0;
}
