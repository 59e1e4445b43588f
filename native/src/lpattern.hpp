// Lua 5.1 patterns (string.find/match/gmatch/gsub of the frontmatter's isolated
// interpreter), matched with a step budget: every step counts, and a caller-supplied
// check runs every few thousand steps, so a pattern that would backtrack for hours
// (`("a"):rep(2e4):find("(.-)%1b")`, `%b()` over 300,000 parentheses) stops in time.
// Pure C++: no Lua, no allocation while matching; the fuzz target drives it alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flemma::lpattern {

constexpr int kMaxCaptures = 32;  // LUA_MAXCAPTURES
constexpr int kMaxDepth = 200;    // nested items (each repetition, optional, capture)
constexpr ptrdiff_t kUnfinished = -1;
constexpr ptrdiff_t kPosition = -2;

// A malformed pattern ("malformed pattern (missing ']')", ...): a Lua error.
class PatternError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The budget ran out (the check said stop): the caller reports its limit.
class BudgetExceeded : public std::exception {
 public:
  const char* what() const noexcept override { return "pattern matching budget exceeded"; }
};

// Decides whether matching may go on; called every kCheckEvery steps.
class Budget {
 public:
  static constexpr uint64_t kCheckEvery = 4096;
  virtual ~Budget() = default;
  // false: stop (the matcher throws BudgetExceeded).
  virtual bool keep_going(uint64_t steps) = 0;
};

// A plain step limit (tests and the fuzzer).
class StepBudget : public Budget {
 public:
  explicit StepBudget(uint64_t max_steps) : max_(max_steps) {}
  bool keep_going(uint64_t steps) override { return steps <= max_; }

 private:
  uint64_t max_;
};

struct Capture {
  size_t start = 0;             // offset into the subject
  ptrdiff_t len = kUnfinished;  // bytes, or kUnfinished / kPosition
};

// One pattern over one subject. The pattern ends at its first NUL byte (as in Lua 5.1).
class Matcher {
 public:
  Matcher(std::string_view subject, std::string_view pattern, Budget& budget);

  // Tries to match the pattern from pattern offset `p` at subject offset `at`.
  // Returns the end offset of the match, or -1. Throws PatternError, BudgetExceeded.
  ptrdiff_t match_at(size_t at, size_t p = 0);

  // Captures of the last successful match_at (level() of them).
  int level() const { return level_; }
  const Capture& capture(int i) const { return cap_[i]; }
  uint64_t steps() const { return steps_; }
  // Charges n steps (work the caller does for the match, e.g. building captures).
  void charge(uint64_t n);
  std::string_view pattern() const { return {pat_, static_cast<size_t>(pend_ - pat_)}; }

 private:
  const char* match(const char* s, const char* p);
  const char* class_end(const char* p);
  bool single_match(unsigned char c, const char* p, const char* ep);
  bool bracket_class(unsigned char c, const char* p, const char* ec);
  const char* max_expand(const char* s, const char* p, const char* ep);
  const char* min_expand(const char* s, const char* p, const char* ep);
  const char* start_capture(const char* s, const char* p, ptrdiff_t what);
  const char* end_capture(const char* s, const char* p);
  const char* match_balance(const char* s, const char* p);
  const char* match_capture(const char* s, int l);

  const char* src_;
  const char* send_;
  const char* pat_;
  const char* pend_;
  Budget& budget_;
  uint64_t steps_ = 0;
  uint64_t next_check_ = Budget::kCheckEvery;
  int depth_ = 0;
  int level_ = 0;
  Capture cap_[kMaxCaptures];
};

// Whether a Lua pattern has no special characters (find can search it plainly).
bool is_plain(std::string_view pattern);

// Lua 5.1's character classes (%a, %d, ...) in the C locale; `cl` is the letter.
bool match_class(unsigned char c, unsigned char cl);

}  // namespace flemma::lpattern
