// libFuzzer target for the frontmatter's Lua pattern matcher (native/src/lpattern.cpp).
// Input: one byte n, then n bytes of pattern, then the subject. Invariants checked:
// no crash or sanitizer report, matching ends within its step budget (a budget
// error, never a hang), and every match and capture lies inside the subject.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "lpattern.hpp"

namespace lp = flemma::lpattern;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t plen = data[0] % 64;
  if (plen > size - 1) plen = size - 1;
  std::string_view pattern(reinterpret_cast<const char*>(data + 1), plen);
  std::string_view subject(reinterpret_cast<const char*>(data + 1 + plen), size - 1 - plen);
  lp::StepBudget budget(200000);
  try {
    lp::Matcher m(subject, pattern, budget);
    size_t start = (!pattern.empty() && pattern[0] == '^') ? 1 : 0;
    for (size_t at = 0; at <= subject.size(); at++) {
      ptrdiff_t e = m.match_at(at, start);
      if (e < 0) continue;
      if (static_cast<size_t>(e) < at || static_cast<size_t>(e) > subject.size()) std::abort();
      for (int i = 0; i < m.level(); i++) {
        const auto& c = m.capture(i);
        if (c.start > subject.size()) std::abort();
        if (c.len >= 0 && c.start + static_cast<size_t>(c.len) > subject.size()) std::abort();
        if (c.len < 0 && c.len != lp::kPosition && c.len != lp::kUnfinished) std::abort();
      }
    }
    if (m.steps() > 200000 + lp::Budget::kCheckEvery + 64) std::abort();  // the budget was honoured
  } catch (const lp::PatternError&) {
  } catch (const lp::BudgetExceeded&) {
  }
  return 0;
}
