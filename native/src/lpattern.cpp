// Lua 5.1 pattern matching with a step budget. See lpattern.hpp.
#include "lpattern.hpp"

#include <cstring>

namespace flemma::lpattern {

namespace {

constexpr char kEsc = '%';

bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_lower(unsigned char c) { return c >= 'a' && c <= 'z'; }
bool is_upper(unsigned char c) { return c >= 'A' && c <= 'Z'; }
bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_cntrl(unsigned char c) { return c < 32 || c == 127; }
bool is_punct(unsigned char c) { return c > 32 && c < 127 && !is_alpha(c) && !is_digit(c); }
bool is_xdigit(unsigned char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
unsigned char to_lower(unsigned char c) {
  return is_upper(c) ? static_cast<unsigned char>(c - 'A' + 'a') : c;
}

}  // namespace

bool match_class(unsigned char c, unsigned char cl) {
  bool res;
  switch (to_lower(cl)) {
    case 'a':
      res = is_alpha(c);
      break;
    case 'c':
      res = is_cntrl(c);
      break;
    case 'd':
      res = is_digit(c);
      break;
    case 'l':
      res = is_lower(c);
      break;
    case 'p':
      res = is_punct(c);
      break;
    case 's':
      res = is_space(c);
      break;
    case 'u':
      res = is_upper(c);
      break;
    case 'w':
      res = is_alpha(c) || is_digit(c);
      break;
    case 'x':
      res = is_xdigit(c);
      break;
    case 'z':
      res = (c == 0);
      break;
    default:
      return cl == c;
  }
  return is_upper(cl) ? !res : res;
}

bool is_plain(std::string_view pattern) {
  return pattern.find_first_of(std::string_view("^$*+?.([%-", 10)) == std::string_view::npos;
}

Matcher::Matcher(std::string_view subject, std::string_view pattern, Budget& budget)
    : src_(subject.data()),
      send_(subject.data() + subject.size()),
      pat_(pattern.data()),
      pend_(pattern.data() + ::strnlen(pattern.data(), pattern.size())),
      budget_(budget) {}

void Matcher::charge(uint64_t n) {
  steps_ += n;
  if (steps_ >= next_check_) {
    if (!budget_.keep_going(steps_)) throw BudgetExceeded();
    next_check_ = steps_ + Budget::kCheckEvery;
  }
}

ptrdiff_t Matcher::match_at(size_t at, size_t p) {
  level_ = 0;
  depth_ = 0;
  const char* e = match(src_ + at, pat_ + p);
  return e ? e - src_ : -1;
}

const char* Matcher::class_end(const char* p) {
  char c = *p++;
  if (c == kEsc) {
    if (p >= pend_) throw PatternError("malformed pattern (ends with '%')");
    return p + 1;
  }
  if (c == '[') {
    if (p < pend_ && *p == '^') p++;
    do {  // look for the closing ']' (a ']' right after '[' or '[^' is a member)
      if (p >= pend_) throw PatternError("malformed pattern (missing ']')");
      c = *p++;
      if (c == kEsc && p < pend_) p++;
      charge(1);
    } while (p >= pend_ || *p != ']');
    return p + 1;
  }
  return p;
}

// p points at '[', ec at the closing ']'.
bool Matcher::bracket_class(unsigned char c, const char* p, const char* ec) {
  bool sig = true;
  if (p[1] == '^') {
    sig = false;
    p++;
  }
  charge(static_cast<uint64_t>(ec - p) / 4);
  while (++p < ec) {
    if (*p == kEsc) {
      p++;
      if (match_class(c, static_cast<unsigned char>(*p))) return sig;
    } else if (p + 2 < ec && p[1] == '-') {
      p += 2;
      if (static_cast<unsigned char>(p[-2]) <= c && c <= static_cast<unsigned char>(*p)) return sig;
    } else if (static_cast<unsigned char>(*p) == c) {
      return sig;
    }
  }
  return !sig;
}

bool Matcher::single_match(unsigned char c, const char* p, const char* ep) {
  switch (*p) {
    case '.':
      return true;
    case kEsc:
      return match_class(c, static_cast<unsigned char>(p[1]));
    case '[':
      return bracket_class(c, p, ep - 1);
    default:
      return static_cast<unsigned char>(*p) == c;
  }
}

const char* Matcher::max_expand(const char* s, const char* p, const char* ep) {
  ptrdiff_t i = 0;
  while (s + i < send_ && single_match(static_cast<unsigned char>(s[i]), p, ep)) {
    i++;
    charge(1);
  }
  while (i >= 0) {  // try with the most repetitions first, then fewer
    const char* res = match(s + i, ep + 1);
    if (res) return res;
    i--;
    charge(1);
  }
  return nullptr;
}

const char* Matcher::min_expand(const char* s, const char* p, const char* ep) {
  for (;;) {
    const char* res = match(s, ep + 1);
    if (res) return res;
    if (s < send_ && single_match(static_cast<unsigned char>(*s), p, ep)) {
      s++;
      charge(1);
    } else {
      return nullptr;
    }
  }
}

const char* Matcher::start_capture(const char* s, const char* p, ptrdiff_t what) {
  if (level_ >= kMaxCaptures) throw PatternError("too many captures");
  cap_[level_].start = static_cast<size_t>(s - src_);
  cap_[level_].len = what;
  level_++;
  const char* res = match(s, p);
  if (!res) level_--;
  return res;
}

const char* Matcher::end_capture(const char* s, const char* p) {
  int l = -1;
  for (int i = level_ - 1; i >= 0; i--) {
    if (cap_[i].len == kUnfinished) {
      l = i;
      break;
    }
  }
  if (l < 0) throw PatternError("invalid pattern capture");
  cap_[l].len = s - (src_ + cap_[l].start);
  const char* res = match(s, p);
  if (!res) cap_[l].len = kUnfinished;
  return res;
}

const char* Matcher::match_balance(const char* s, const char* p) {
  if (p + 1 >= pend_) throw PatternError("unbalanced pattern");
  if (s >= send_ || *s != *p) return nullptr;
  char b = p[0], e = p[1];
  int cont = 1;
  while (++s < send_) {
    charge(1);
    if (*s == e) {
      if (--cont == 0) return s + 1;
    } else if (*s == b) {
      cont++;
    }
  }
  return nullptr;
}

const char* Matcher::match_capture(const char* s, int l) {
  l -= '1';
  if (l < 0 || l >= level_ || cap_[l].len == kUnfinished)
    throw PatternError("invalid capture index");
  ptrdiff_t len = cap_[l].len;
  if (len < 0) return nullptr;  // a position capture never matches text
  charge(static_cast<uint64_t>(len) / 16 + 1);
  if (send_ - s >= len && std::memcmp(src_ + cap_[l].start, s, static_cast<size_t>(len)) == 0)
    return s + len;
  return nullptr;
}

namespace {
struct DepthGuard {
  int& d;
  explicit DepthGuard(int& depth) : d(depth) {
    if (++d > kMaxDepth) {
      --d;
      throw PatternError("pattern too complex");
    }
  }
  ~DepthGuard() { --d; }
};
}  // namespace

const char* Matcher::match(const char* s, const char* p) {
  DepthGuard guard(depth_);
  for (;;) {
    charge(1);
    if (p >= pend_) return s;
    switch (*p) {
      case '(':
        if (p + 1 < pend_ && p[1] == ')') return start_capture(s, p + 2, kPosition);
        return start_capture(s, p + 1, kUnfinished);
      case ')':
        return end_capture(s, p + 1);
      case '$':
        if (p + 1 == pend_) return s == send_ ? s : nullptr;
        break;
      case kEsc:
        if (p + 1 < pend_ && p[1] == 'b') {
          s = match_balance(s, p + 2);
          if (!s) return nullptr;
          p += 4;
          continue;
        }
        if (p + 1 < pend_ && p[1] == 'f') {
          p += 2;
          if (p >= pend_ || *p != '[') throw PatternError("missing '[' after '%f' in pattern");
          const char* ep = class_end(p);
          unsigned char prev = (s == src_) ? 0 : static_cast<unsigned char>(s[-1]);
          unsigned char cur = (s < send_) ? static_cast<unsigned char>(*s) : 0;
          if (bracket_class(prev, p, ep - 1) || !bracket_class(cur, p, ep - 1)) return nullptr;
          p = ep;
          continue;
        }
        if (p + 1 < pend_ && is_digit(static_cast<unsigned char>(p[1]))) {
          s = match_capture(s, p[1]);
          if (!s) return nullptr;
          p += 2;
          continue;
        }
        break;
      default:
        break;
    }
    // A single-character class, maybe followed by a repetition suffix.
    const char* ep = class_end(p);
    bool m = s < send_ && single_match(static_cast<unsigned char>(*s), p, ep);
    char suffix = ep < pend_ ? *ep : '\0';
    switch (suffix) {
      case '?': {
        if (m) {
          const char* res = match(s + 1, ep + 1);
          if (res) return res;
        }
        p = ep + 1;
        continue;
      }
      case '*':
        return max_expand(s, p, ep);
      case '+':
        return m ? max_expand(s + 1, p, ep) : nullptr;
      case '-':
        return min_expand(s, p, ep);
      default:
        if (!m) return nullptr;
        s++;
        p = ep;
        continue;
    }
  }
}

}  // namespace flemma::lpattern
