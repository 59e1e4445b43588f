#include "search.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <bitset>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <queue>

#include "guard.hpp"
#include "truncate.hpp"

namespace flemma::search {

namespace {

using Set = std::bitset<256>;

// ---------------------------------------------------------------------------
// Parser: pattern -> tree
// ---------------------------------------------------------------------------

struct Node {
  enum Kind { Lit, Class, Bol, Eol, WordB, NotWordB, Cat, Alt, Rep, Empty } kind = Empty;
  uint8_t c = 0;
  Set set;
  bool utf8_tail = false;  // a class that takes a whole UTF-8 sequence (`.`, `[^...]`)
  int min = 0, max = 0;    // Rep; max -1: unbounded
  std::vector<Node> kids;
};

bool is_word(unsigned char c) { return std::isalnum(c) || c == '_'; }

Set class_of(char e) {
  Set s;
  for (int c = 0; c < 256; ++c) {
    bool in = false;
    switch (e) {
      case 'd':
      case 'D':
        in = c >= '0' && c <= '9';
        break;
      case 'w':
      case 'W':
        in = c < 128 && is_word(static_cast<unsigned char>(c));
        break;
      case 's':
      case 'S':
        in = c == ' ' || (c >= '\t' && c <= '\r');
        break;
    }
    if (in) s.set(c);
  }
  if (e == 'D' || e == 'W' || e == 'S') {
    s.flip();
    s.reset('\n');
  }
  return s;
}

Set fold(Set s) {
  for (int c = 'a'; c <= 'z'; ++c)
    if (s.test(c) || s.test(c - 32)) s.set(c), s.set(c - 32);
  return s;
}

class Parser {
 public:
  Parser(std::string_view p, bool icase) : p_(p), icase_(icase) {}

  Node parse() {
    Node n = alt(0);
    if (i_ < p_.size()) fail("unmatched `)`");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw Error(FLEMMA_E_INVALID, "pattern: " + why + " (at byte " + std::to_string(i_ + 1) + ")");
  }
  bool eof() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }

  Node alt(int depth) {
    if (depth > 100) fail("groups nested too deep");
    Node first = cat(depth);
    if (eof() || peek() != '|') return first;
    Node a;
    a.kind = Node::Alt;
    a.kids.push_back(std::move(first));
    while (!eof() && peek() == '|') {
      ++i_;
      a.kids.push_back(cat(depth));
    }
    return a;
  }

  Node cat(int depth) {
    Node c;
    c.kind = Node::Cat;
    while (!eof() && peek() != '|' && peek() != ')') c.kids.push_back(repeat(depth));
    if (c.kids.size() == 1) return std::move(c.kids[0]);
    if (c.kids.empty()) return Node{};
    return c;
  }

  bool number(int& out) {
    size_t start = i_;
    long v = 0;
    while (!eof() && std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 1000) fail("a repetition count is at most 1000");
      ++i_;
    }
    out = static_cast<int>(v);
    return i_ > start;
  }

  Node repeat(int depth) {
    Node a = atom(depth);
    while (!eof()) {
      char q = peek();
      int mn, mx;
      if (q == '*')
        mn = 0, mx = -1, ++i_;
      else if (q == '+')
        mn = 1, mx = -1, ++i_;
      else if (q == '?')
        mn = 0, mx = 1, ++i_;
      else if (q == '{') {
        ++i_;
        if (!number(mn))
          fail("`{` starts a repetition {n}, {n,} or {n,m}; write `\\{` for the character");
        mx = mn;
        if (!eof() && peek() == ',') {
          ++i_;
          if (!number(mx)) mx = -1;
        }
        if (eof() || peek() != '}') fail("a repetition {n,m} is not closed by `}`");
        ++i_;
        if (mx != -1 && mx < mn) fail("a repetition {n,m} needs n <= m");
      } else {
        break;
      }
      if (a.kind == Node::Bol || a.kind == Node::Eol || a.kind == Node::WordB ||
          a.kind == Node::NotWordB || a.kind == Node::Empty)
        fail("nothing to repeat before `" + std::string(1, q) + "`");
      if (!eof() && peek() == '?') ++i_;  // lazy: the same lines match
      Node r;
      r.kind = Node::Rep;
      r.min = mn;
      r.max = mx;
      r.kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  Node lit(unsigned char c) {
    Node n;
    if (icase_ && std::isalpha(c)) {
      n.kind = Node::Class;
      n.set.set(std::tolower(c));
      n.set.set(std::toupper(c));
    } else {
      n.kind = Node::Lit;
      n.c = c;
    }
    return n;
  }

  Node cls(Set s, bool tail) {
    Node n;
    n.kind = Node::Class;
    n.set = icase_ ? fold(s) : s;
    n.utf8_tail = tail;
    return n;
  }

  int hex(char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
  }

  // After a `\`: fills set (a class escape) or c (a character). Returns true for a class.
  bool escape(Set& set, unsigned char& c, bool in_class) {
    if (eof()) fail("the pattern ends with `\\`");
    char e = p_[i_++];
    switch (e) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S':
        set = class_of(e);
        return true;
      case 't':
        c = '\t';
        return false;
      case 'n':
        c = '\n';
        return false;
      case 'r':
        c = '\r';
        return false;
      case 'x': {
        if (i_ + 2 > p_.size() || hex(p_[i_]) < 0 || hex(p_[i_ + 1]) < 0)
          fail("`\\x` takes two hex digits");
        c = static_cast<unsigned char>(hex(p_[i_]) * 16 + hex(p_[i_ + 1]));
        if (c >= 0x80) fail("`\\x` takes an ASCII character (00-7F)");
        i_ += 2;
        return false;
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(e)) || static_cast<unsigned char>(e) >= 0x80)
          fail(std::string("unsupported escape `\\") + e + "`" + (in_class ? " in a class" : ""));
        c = static_cast<unsigned char>(e);
        return false;
    }
  }

  Node bracket() {
    Set s;
    bool neg = false;
    if (!eof() && peek() == '^') neg = true, ++i_;
    bool first = true;
    while (true) {
      if (eof()) fail("a class `[` is not closed by `]`");
      unsigned char c = static_cast<unsigned char>(p_[i_]);
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':')
        fail("named classes like [:alpha:] are not supported");
      ++i_;
      unsigned char lo = c;
      if (c == '\\') {
        Set es;
        if (escape(es, lo, true)) {
          s |= es;
          continue;
        }
      } else if (c >= 0x80) {
        fail("a class takes ASCII characters; write a non-ASCII character outside `[...]`");
      }
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        unsigned char hi = static_cast<unsigned char>(p_[i_++]);
        if (hi == '\\') {
          Set es;
          if (escape(es, hi, true)) fail("a range cannot end with a class escape");
        } else if (hi >= 0x80) {
          fail("a class takes ASCII characters; write a non-ASCII character outside `[...]`");
        }
        if (hi < lo) fail("a class range goes backwards");
        for (int k = lo; k <= hi; ++k) s.set(k);
      } else {
        s.set(lo);
      }
    }
    if (neg) {
      if (icase_) s = fold(s);
      s.flip();
      s.reset('\n');
      for (int k = 0x80; k < 0xC0; ++k) s.reset(k);  // continuation bytes come with their lead byte
      Node n;
      n.kind = Node::Class;
      n.set = s;
      n.utf8_tail = true;
      return n;
    }
    return cls(s, false);
  }

  Node atom(int depth) {
    unsigned char c = static_cast<unsigned char>(p_[i_++]);
    switch (c) {
      case '(': {
        if (!eof() && peek() == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':')
            i_ += 2;
          else
            fail(
                "only non-capturing groups `(?:...)` are supported (no lookaround or inline "
                "flags)");
        }
        Node inner = alt(depth + 1);
        if (eof() || peek() != ')') fail("a group `(` is not closed by `)`");
        ++i_;
        return inner;
      }
      case ')':
        fail("unmatched `)`");
      case '[':
        return bracket();
      case '.': {
        Set s;
        s.set();
        s.reset('\n');
        for (int k = 0x80; k < 0xC0; ++k) s.reset(k);
        Node n;
        n.kind = Node::Class;
        n.set = s;
        n.utf8_tail = true;
        return n;
      }
      case '^': {
        Node n;
        n.kind = Node::Bol;
        return n;
      }
      case '$': {
        Node n;
        n.kind = Node::Eol;
        return n;
      }
      case '*':
      case '+':
      case '?':
        --i_;
        fail(std::string("nothing to repeat before `") + char(c) + "`");
      case '{':
        --i_;
        fail("nothing to repeat before `{`; write `\\{` for the character");
      case '\\': {
        if (!eof() && (peek() == 'b' || peek() == 'B')) {
          Node n;
          n.kind = peek() == 'b' ? Node::WordB : Node::NotWordB;
          ++i_;
          return n;
        }
        Set s;
        unsigned char ch;
        if (escape(s, ch, false)) return cls(s, false);
        return lit(ch);
      }
      default:
        return lit(c);
    }
  }

  std::string_view p_;
  bool icase_;
  size_t i_ = 0;
};

// ---------------------------------------------------------------------------
// Program and Pike VM
// ---------------------------------------------------------------------------

struct Inst {
  enum Op : uint8_t { Byte, Cls, Split, Jmp, Match, Bol, Eol, WordB, NotWordB } op;
  uint8_t c = 0;
  int x = 0, y = 0;
};

Set cont_bytes() {
  Set s;
  for (int k = 0x80; k < 0xC0; ++k) s.set(k);
  return s;
}

}  // namespace

struct Program {
  std::vector<Inst> code;
  std::vector<Set> sets;
  bool anchored_start = false;  // unused by matches(); full_match anchors itself

  int add(Inst i) {
    if (code.size() >= kMaxProgram)
      throw Error(FLEMMA_E_INVALID,
                  "pattern: too large once its repetitions are expanded (at most " +
                      std::to_string(kMaxProgram) + " steps)");
    code.push_back(i);
    return static_cast<int>(code.size()) - 1;
  }
  int set_index(const Set& s) {
    for (size_t k = 0; k < sets.size(); ++k)
      if (sets[k] == s) return static_cast<int>(k);
    sets.push_back(s);
    return static_cast<int>(sets.size()) - 1;
  }

  void emit(const Node& n) {
    switch (n.kind) {
      case Node::Empty:
        break;
      case Node::Lit:
        add({Inst::Byte, n.c});
        break;
      case Node::Class: {
        add({Inst::Cls, 0, set_index(n.set)});
        if (n.utf8_tail) {  // L: split L+1, end; cls cont; jmp L
          int cont = set_index(cont_bytes());
          int l = add({Inst::Split});
          add({Inst::Cls, 0, cont});
          add({Inst::Jmp, 0, l});
          code[l].x = l + 1;
          code[l].y = static_cast<int>(code.size());
        }
        break;
      }
      case Node::Bol:
        add({Inst::Bol});
        break;
      case Node::Eol:
        add({Inst::Eol});
        break;
      case Node::WordB:
        add({Inst::WordB});
        break;
      case Node::NotWordB:
        add({Inst::NotWordB});
        break;
      case Node::Cat:
        for (const auto& k : n.kids) emit(k);
        break;
      case Node::Alt: {
        std::vector<int> jumps;
        for (size_t k = 0; k + 1 < n.kids.size(); ++k) {
          int s = add({Inst::Split});
          code[s].x = s + 1;
          emit(n.kids[k]);
          jumps.push_back(add({Inst::Jmp}));
          code[s].y = static_cast<int>(code.size());
        }
        emit(n.kids.back());
        for (int j : jumps) code[j].x = static_cast<int>(code.size());
        break;
      }
      case Node::Rep: {
        const Node& k = n.kids[0];
        for (int r = 0; r < n.min; ++r) emit(k);
        if (n.max == -1) {
          int s = add({Inst::Split});
          code[s].x = s + 1;
          emit(k);
          add({Inst::Jmp, 0, s});
          code[s].y = static_cast<int>(code.size());
        } else {
          std::vector<int> splits;
          for (int r = n.min; r < n.max; ++r) {
            int s = add({Inst::Split});
            code[s].x = s + 1;
            splits.push_back(s);
            emit(k);
          }
          for (int s : splits) code[s].y = static_cast<int>(code.size());
        }
        break;
      }
    }
  }

  // The automaton run over text: unanchored (a match anywhere) or full (the
  // whole text). Threads are a sparse set per position, so each instruction
  // runs at most once per byte.
  bool run(std::string_view text, bool full) const {
    struct Scratch {
      std::vector<int> clist, nlist, seeds, stack;
      std::vector<uint64_t> mark;
      uint64_t gen = 0;
    };
    thread_local Scratch sc;
    const size_t n = code.size();
    if (sc.mark.size() < n) sc.mark.assign(n, 0);
    auto& clist = sc.clist;
    auto& nlist = sc.nlist;
    auto& seeds = sc.seeds;
    auto& stack = sc.stack;
    auto& mark = sc.mark;
    clist.clear();
    const auto* t = reinterpret_cast<const unsigned char*>(text.data());
    const size_t len = text.size();
    // Adds pc and what it reaches without consuming a byte (at position i).
    auto add = [&](std::vector<int>& list, int pc0, size_t i, uint64_t g) -> bool {
      stack.clear();
      stack.push_back(pc0);
      while (!stack.empty()) {
        int pc = stack.back();
        stack.pop_back();
        if (mark[pc] == g) continue;
        mark[pc] = g;
        const Inst& in = code[pc];
        switch (in.op) {
          case Inst::Jmp:
            stack.push_back(in.x);
            break;
          case Inst::Split:
            stack.push_back(in.y);
            stack.push_back(in.x);
            break;
          case Inst::Bol:
            if (i == 0) stack.push_back(pc + 1);
            break;
          case Inst::Eol:
            if (i == len) stack.push_back(pc + 1);
            break;
          case Inst::WordB:
          case Inst::NotWordB: {
            bool a = i > 0 && is_word(t[i - 1]);
            bool b = i < len && is_word(t[i]);
            if ((a != b) == (in.op == Inst::WordB)) stack.push_back(pc + 1);
            break;
          }
          case Inst::Match:
            if (!full || i == len) return true;
            break;
          default:
            list.push_back(pc);
            break;
        }
      }
      return false;
    };
    for (size_t i = 0;; ++i) {
      uint64_t g = ++sc.gen;
      seeds.swap(clist);
      clist.clear();
      for (int pc : seeds)
        if (add(clist, pc, i, g)) return true;
      if (!full || i == 0)
        if (add(clist, 0, i, g)) return true;
      if (i >= len) return false;
      if (full && clist.empty()) return false;
      unsigned char b = t[i];
      nlist.clear();
      for (int pc : clist) {
        const Inst& in = code[pc];
        if ((in.op == Inst::Byte && in.c == b) || (in.op == Inst::Cls && sets[in.x].test(b)))
          nlist.push_back(pc + 1);
      }
      clist.swap(nlist);
    }
  }
};

namespace {

// The longest literal that every match contains, from the tree.
struct Lits {
  std::string best;
};

void required_literal(const Node& n, std::string& best) {
  auto consider = [&](const std::string& s) {
    if (s.size() > best.size()) best = s;
  };
  switch (n.kind) {
    case Node::Lit:
      consider(std::string(1, static_cast<char>(n.c)));
      break;
    case Node::Class: {
      // A letter in both cases (ignore_case) counts as the lower-case letter.
      if (n.set.count() == 2 && !n.utf8_tail) {
        for (int c = 'a'; c <= 'z'; ++c)
          if (n.set.test(c) && n.set.test(c - 32)) consider(std::string(1, static_cast<char>(c)));
      }
      break;
    }
    case Node::Cat: {
      std::string run;
      for (const auto& k : n.kids) {
        char ch = 0;
        bool is_char = false;
        if (k.kind == Node::Lit)
          ch = static_cast<char>(k.c), is_char = true;
        else if (k.kind == Node::Class && k.set.count() == 2 && !k.utf8_tail) {
          for (int c = 'a'; c <= 'z'; ++c)
            if (k.set.test(c) && k.set.test(c - 32)) ch = static_cast<char>(c), is_char = true;
        }
        if (is_char) {
          run += ch;
          continue;
        }
        consider(run);
        run.clear();
        if (k.kind == Node::Bol || k.kind == Node::Eol || k.kind == Node::WordB ||
            k.kind == Node::NotWordB)
          continue;
        std::string inner;
        required_literal(k, inner);
        consider(inner);
      }
      consider(run);
      break;
    }
    case Node::Rep:
      if (n.min >= 1) required_literal(n.kids[0], best);
      break;
    default:
      break;
  }
}

bool only_literals(const Node& n, bool icase) {
  if (icase) {
    // Letters became two-member classes; those count as literal characters.
    auto ok = [](const Node& k) {
      return k.kind == Node::Lit ||
             (k.kind == Node::Class && k.set.count() == 2 && !k.utf8_tail && [&] {
               for (int c = 'a'; c <= 'z'; ++c)
                 if (k.set.test(c) && k.set.test(c - 32)) return true;
               return false;
             }());
    };
    if (n.kind == Node::Cat) return std::all_of(n.kids.begin(), n.kids.end(), ok);
    return ok(n);
  }
  if (n.kind == Node::Lit) return true;
  if (n.kind == Node::Cat)
    return std::all_of(n.kids.begin(), n.kids.end(),
                       [](const Node& k) { return k.kind == Node::Lit; });
  return false;
}

Node literal_tree(std::string_view s, bool icase) {
  Node c;
  c.kind = Node::Cat;
  for (unsigned char ch : s) {
    Node n;
    if (icase && std::isalpha(ch)) {
      n.kind = Node::Class;
      n.set.set(std::tolower(ch));
      n.set.set(std::toupper(ch));
    } else {
      n.kind = Node::Lit;
      n.c = ch;
    }
    c.kids.push_back(std::move(n));
  }
  return c;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// ReDoS screen on the tree.
bool unbounded_inside(const Node& n) {
  if (n.kind == Node::Rep && n.max == -1) return true;
  for (const auto& k : n.kids)
    if (unbounded_inside(k)) return true;
  return false;
}

Set first_bytes(const Node& n) {
  Set s;
  switch (n.kind) {
    case Node::Lit:
      s.set(n.c);
      break;
    case Node::Class:
      s = n.set;
      break;
    case Node::Cat:
      for (const auto& k : n.kids) {
        if (k.kind == Node::Bol || k.kind == Node::Eol || k.kind == Node::WordB ||
            k.kind == Node::NotWordB)
          continue;
        s |= first_bytes(k);
        if (!(k.kind == Node::Rep && k.min == 0)) break;
      }
      break;
    case Node::Alt:
      for (const auto& k : n.kids) s |= first_bytes(k);
      break;
    case Node::Rep:
      s = first_bytes(n.kids[0]);
      break;
    default:
      break;
  }
  return s;
}

std::string screen(const Node& n) {
  if (n.kind == Node::Rep && (n.max == -1 || n.max > 1) && unbounded_inside(n.kids[0]))
    return "it nests an unbounded quantifier inside a repeated group (like `(a+)+`), which can "
           "take exponential time";
  if (n.kind == Node::Cat) {
    for (size_t k = 0; k + 1 < n.kids.size(); ++k) {
      const Node& a = n.kids[k];
      const Node& b = n.kids[k + 1];
      if (a.kind == Node::Rep && a.max == -1 && b.kind == Node::Rep && b.max == -1 &&
          (first_bytes(a) & first_bytes(b)).any())
        return "it has two unbounded quantifiers side by side over the same characters (like "
               "`a*a*` or `.*.*`), "
               "which can take polynomial time";
    }
  }
  for (const auto& k : n.kids) {
    std::string r = screen(k);
    if (!r.empty()) return r;
  }
  return {};
}

}  // namespace

Regex::Regex(std::string_view pattern, bool fixed, bool ignore_case) : icase_(ignore_case) {
  if (pattern.size() > kMaxPattern)
    throw Error(FLEMMA_E_INVALID, "pattern: longer than " + std::to_string(kMaxPattern) +
                                      " bytes (" + std::to_string(pattern.size()) + ")");
  Node tree = fixed ? literal_tree(pattern, ignore_case) : Parser(pattern, ignore_case).parse();
  prog_ = std::make_unique<Program>();
  prog_->emit(tree);
  prog_->add({Inst::Match});
  required_literal(tree, required_);
  if (ignore_case) required_ = lower(required_);
  literal_only_ = only_literals(tree, ignore_case) && !required_.empty() &&
                  (tree.kind == Node::Cat ? tree.kids.size() : 1) == required_.size();
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

bool Regex::matches(std::string_view line) const { return prog_->run(line, false); }
bool Regex::full_match(std::string_view text) const { return prog_->run(text, true); }

std::string check_pattern(std::string_view pattern, bool fixed) {
  if (pattern.empty()) return "the pattern is empty";
  if (pattern.size() > kMaxPattern)
    return "the pattern is longer than " + std::to_string(kMaxPattern) + " bytes (" +
           std::to_string(pattern.size()) + ")";
  if (fixed) return {};
  try {
    Node tree = Parser(pattern, false).parse();
    std::string why = screen(tree);
    if (!why.empty()) return why;
    Regex re(pattern, false, false);  // the program fits
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// ---------------------------------------------------------------------------
// Globs and ignore rules
// ---------------------------------------------------------------------------

std::string glob_to_regex(std::string_view g) {
  std::string r;
  const std::string special = ".+()|{}^$[]\\*?";
  size_t i = 0;
  while (i < g.size()) {
    char c = g[i];
    if (c == '*' && i + 1 < g.size() && g[i + 1] == '*') {
      bool at_start = i == 0 || g[i - 1] == '/';
      bool slash_after = i + 2 < g.size() && g[i + 2] == '/';
      bool at_end = i + 2 == g.size();
      if (at_start && slash_after) {
        r += "(?:.*/)?";
        i += 3;
        continue;
      }
      if (at_start && at_end) {
        r += ".*";
        i += 2;
        continue;
      }
      r += "[^/]*";
      i += 2;
      while (i < g.size() && g[i] == '*') ++i;
      continue;
    }
    if (c == '*') {
      r += "[^/]*";
      ++i;
    } else if (c == '?') {
      r += "[^/]";
      ++i;
    } else if (c == '[') {
      size_t j = i + 1;
      if (j < g.size() && (g[j] == '!' || g[j] == '^')) ++j;
      if (j < g.size() && g[j] == ']') ++j;
      while (j < g.size() && g[j] != ']') ++j;
      if (j >= g.size()) {  // no closing `]`: a plain `[`
        r += "\\[";
        ++i;
        continue;
      }
      r += '[';
      size_t k = i + 1;
      if (g[k] == '!' || g[k] == '^') {
        r += '^';
        ++k;
      }
      for (; k < j; ++k) {
        char m = g[k];
        if (m == '\\' && k + 1 < j) {
          ++k;
          m = g[k];
        }
        if (m == '\\' || m == ']' || m == '[' || m == '^') r += '\\';
        r += m;
      }
      r += ']';
      i = j + 1;
    } else if (c == '\\' && i + 1 < g.size()) {
      char m = g[i + 1];
      if (!std::isalnum(static_cast<unsigned char>(m))) r += '\\';
      r += m;
      i += 2;
    } else {
      if (special.find(c) != std::string::npos) r += '\\';
      r += c;
      ++i;
    }
  }
  return r;
}

Glob::Glob(std::string_view pattern, bool ignore_case)
    : re_(glob_to_regex(pattern), false, ignore_case) {}

bool Glob::matches(std::string_view path) const {
  // The literal every match holds (`.c` of `**/*.c`) rules most paths out at once.
  const std::string& lit = re_.required();
  if (!lit.empty() && !re_.ignore_case() && path.find(lit) == std::string_view::npos) return false;
  return re_.full_match(path);
}

namespace {
std::string_view basename_of(std::string_view p) {
  size_t s = p.rfind('/');
  return s == std::string_view::npos ? p : p.substr(s + 1);
}
}  // namespace

void IgnoreRules::add(std::string_view content) {
  size_t pos = 0;
  while (pos < content.size() && rules_.size() < 10000) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    std::string line(content.substr(pos, nl - pos));
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Trailing spaces go, unless escaped.
    while (!line.empty() && line.back() == ' ' &&
           !(line.size() >= 2 && line[line.size() - 2] == '\\'))
      line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    Rule r;
    if (line[0] == '!') {
      r.negate = true;
      line.erase(0, 1);
    } else if (line[0] == '\\' && line.size() > 1 && (line[1] == '!' || line[1] == '#')) {
      line.erase(0, 1);
    }
    if (!line.empty() && line.back() == '/') {
      r.dir_only = true;
      line.pop_back();
    }
    if (line.empty()) continue;
    if (line.find('/') != std::string::npos) {
      r.anchored = true;
      if (line[0] == '/') line.erase(0, 1);
    }
    if (line.empty()) continue;
    try {
      r.glob = std::make_unique<Glob>(line);
    } catch (const std::exception&) {
      continue;  // a rule this matcher cannot read is left out
    }
    rules_.push_back(std::move(r));
  }
}

int IgnoreRules::match(std::string_view rel, bool is_dir) const {
  for (size_t k = rules_.size(); k > 0; --k) {
    const Rule& r = rules_[k - 1];
    if (r.dir_only && !is_dir) continue;
    if (r.glob->matches(r.anchored ? rel : basename_of(rel))) return r.negate ? -1 : 1;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

std::string clean_line(std::string_view s, bool* cut) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  bool c = false;
  if (s.size() > kMaxLine) {
    s = s.substr(0, truncate::utf8_prefix(s, kMaxLine));
    c = true;
  }
  if (cut) *cut = c;
  if (stream::detail::valid_utf8(s)) return std::string(s);
  return stream::detail::sanitize_utf8(s);
}

bool looks_binary(std::string_view head) { return head.find('\0') != std::string_view::npos; }

namespace {

unsigned char fold_ascii(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c | 0x20) : c;
}

bool same_at(const char* h, std::string_view needle, bool icase) {
  if (!icase) return std::memcmp(h, needle.data(), needle.size()) == 0;
  for (size_t i = 0; i < needle.size(); ++i)
    if (fold_ascii(static_cast<unsigned char>(h[i])) != static_cast<unsigned char>(needle[i]))
      return false;
  return true;
}

size_t find_scalar(std::string_view hay, size_t from, std::string_view needle, bool icase) {
  if (from >= hay.size() || hay.size() - from < needle.size()) return std::string_view::npos;
  if (!icase) {
    const void* f = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
    return f ? static_cast<size_t>(static_cast<const char*>(f) - hay.data())
             : std::string_view::npos;
  }
  for (size_t i = from; i + needle.size() <= hay.size(); ++i)
    if (same_at(hay.data() + i, needle, icase)) return i;
  return std::string_view::npos;
}

}  // namespace

size_t find_literal(std::string_view hay, std::string_view needle, bool ignore_case) {
  const size_t n = needle.size();
  if (n == 0) return 0;
  if (n > hay.size()) return std::string_view::npos;
  if (n == 1 && !ignore_case) {
    const void* f = std::memchr(hay.data(), needle[0], hay.size());
    return f ? static_cast<size_t>(static_cast<const char*>(f) - hay.data())
             : std::string_view::npos;
  }
  size_t i = 0;
#if defined(__SSE2__)
  // 16 positions at a time: those whose first and last bytes are the needle's
  // (either case of a letter when ignore_case: OR-ing 0x20 lower-cases exactly
  // the upper-case letters among the bytes that can equal a lower-case one).
  const auto f = static_cast<unsigned char>(needle[0]);
  const auto l = static_cast<unsigned char>(needle[n - 1]);
  auto fold_mask = [&](unsigned char c) {
    return _mm_set1_epi8(ignore_case && c >= 'a' && c <= 'z' ? 0x20 : 0);
  };
  const __m128i vf = _mm_set1_epi8(static_cast<char>(f)), vl = _mm_set1_epi8(static_cast<char>(l));
  const __m128i mf = fold_mask(f), ml = fold_mask(l);
  const char* p = hay.data();
  for (; i + n - 1 + 16 <= hay.size(); i += 16) {
    __m128i a = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), mf);
    __m128i b = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + n - 1)), ml);
    auto mask = static_cast<unsigned>(
        _mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, vf), _mm_cmpeq_epi8(b, vl))));
    while (mask != 0) {
      auto bit = static_cast<size_t>(__builtin_ctz(mask));
      if (same_at(p + i + bit, needle, ignore_case)) return i + bit;
      mask &= mask - 1;
    }
  }
#endif
  return find_scalar(hay, i, needle, ignore_case);
}

size_t count_newlines(std::string_view text) {
  const char* p = text.data();
  const size_t n = text.size();
  size_t i = 0, c = 0;
#if defined(__SSE2__)
  // Per byte lane, a counter that each 16-byte block adds its newlines to; the
  // lanes are summed before any can pass 255.
  const __m128i nl = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
  while (n - i >= 16) {
    size_t stop = i + std::min<size_t>(255, (n - i) / 16) * 16;
    __m128i acc = zero;
    for (; i < stop; i += 16)
      acc = _mm_sub_epi8(
          acc, _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)), nl));
    __m128i sums = _mm_sad_epu8(acc, zero);
    c += static_cast<size_t>(_mm_cvtsi128_si32(sums)) +
         static_cast<size_t>(_mm_cvtsi128_si32(_mm_srli_si128(sums, 8)));
  }
#endif
  for (; i < n; ++i) c += p[i] == '\n' ? 1 : 0;
  return c;
}

namespace {

stream::Event match_event(std::string_view path, std::string_view text, int64_t line, int status) {
  stream::Event e;
  e.type = static_cast<stream::Type>(kMatch);
  bool cut = false;
  e.a = clean_line(path, nullptr);
  e.b = clean_line(text, &cut);
  e.index = static_cast<int32_t>(std::min<int64_t>(line, INT32_MAX));
  e.status = status;
  e.mask = cut ? 1 : 0;
  return e;
}

stream::Event file_event(std::string_view path, int64_t mtime, int64_t size, bool dir) {
  stream::Event e;
  e.type = static_cast<stream::Type>(kFile);
  e.a = clean_line(path, nullptr);
  e.usage[0] = mtime;
  e.usage[1] = size;
  e.status = dir ? 2 : 1;
  return e;
}

stream::Event summary_event(const Summary& s) {
  stream::Event e;
  e.type = static_cast<stream::Type>(kSummary);
  e.usage[0] = s.found;
  e.usage[1] = s.searched;
  e.usage[2] = s.binary;
  e.usage[3] = s.unreadable;
  e.usage[4] = s.files;
  e.mask = 31;
  e.a = s.error;
  return e;
}

// The newest entries (files mode), at most `cap`.
struct TopFiles {
  struct Entry {
    int64_t mtime_ns;
    std::string path;
    int64_t size;
    bool dir;
  };
  size_t cap;
  // Oldest on top: it is the one to drop.
  struct Older {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.mtime_ns != b.mtime_ns) return a.mtime_ns > b.mtime_ns;
      return a.path < b.path;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, Older> heap;

  explicit TopFiles(size_t c) : cap(c) {}
  void add(Entry e) {
    if (cap == 0) return;
    if (heap.size() < cap) {
      heap.push(std::move(e));
    } else if (Older()(e, heap.top())) {
      heap.pop();
      heap.push(std::move(e));
    }
  }
  void drain(std::vector<stream::Event>& out) {
    std::vector<Entry> all;
    while (!heap.empty()) {
      all.push_back(heap.top());
      heap.pop();
    }
    std::reverse(all.begin(), all.end());  // newest first
    for (auto& e : all) out.push_back(file_event(e.path, e.mtime_ns / 1000000000, e.size, e.dir));
  }
};

int64_t mtime_ns(const struct stat& st) {
#if defined(__APPLE__)
  return int64_t(st.st_mtimespec.tv_sec) * 1000000000 + st.st_mtimespec.tv_nsec;
#else
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
#endif
}

// `name` relative to the directory `dfd` (AT_FDCWD: a path).
bool read_small(int dfd, const char* name, std::string& out, size_t cap) {
  int fd = ::openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  out.clear();
  char buf[8192];
  while (out.size() < cap) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (out.size() > cap) out.resize(cap);
  return true;
}

// ---------------------------------------------------------------------------
// The walk
// ---------------------------------------------------------------------------

class Walker {
 public:
  Walker(const Options& o, const std::atomic<bool>& cancel, const Emit& emit)
      : o_(o),
        cancel_(cancel),
        emit_(emit),
        top_(static_cast<size_t>(std::max<int64_t>(o.max_results, 0))) {
    if (!o.files_mode) re_.emplace(o.pattern, o.fixed, o.ignore_case);
    if (o.files_mode && !o.pattern.empty()) glob_.emplace(o.pattern);
    if (!o.include.empty()) include_.emplace(o.include);
    context_ = std::clamp(o.context, 0, 10);
    last_flush_ = std::chrono::steady_clock::now();
  }

  void run() {
    struct stat st;
    if (::stat(o_.root.c_str(), &st) != 0) {
      sum_.error = "cannot read " + o_.root + ": " + std::strerror(errno);
    } else if (S_ISDIR(st.st_mode)) {
      int dfd = ::open(o_.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0) {
        sum_.error = "cannot read " + o_.root + ": " + std::strerror(errno);
      } else {
        load_ignores(dfd, "");
        walk(dfd, "", 0);
      }
    } else if (!o_.files_mode) {
      std::string_view base = basename_of(o_.root);
      search_file(AT_FDCWD, o_.root.c_str(), std::string(base));
    } else {
      sum_.error = o_.root + " is not a directory";
    }
    if (o_.files_mode) top_.drain(batch_);
    batch_.push_back(summary_event(sum_));
    flush();
  }

 private:
  struct Rules {
    std::string base;  // relative directory ("" the root)
    IgnoreRules rules;
  };

  void flush() {
    if (batch_.empty()) return;
    emit_(std::move(batch_));
    batch_.clear();
    last_flush_ = std::chrono::steady_clock::now();
  }

  void maybe_flush() {
    if (batch_.size() >= 256 || (!batch_.empty() && std::chrono::steady_clock::now() - last_flush_ >
                                                        std::chrono::milliseconds(30)))
      flush();
  }

  void load_ignores(int dfd, const std::string& rel) {
    if (o_.no_ignore) return;
    Rules r;
    r.base = rel;
    std::string content;
    for (const char* name : {".gitignore", ".ignore"}) {
      if (read_small(dfd, name, content, 1 << 20)) r.rules.add(content);
    }
    if (r.rules.size() > 0) stack_.push_back(std::move(r));
  }

  bool ignored(const std::string& rel, bool is_dir) const {
    for (size_t k = stack_.size(); k > 0; --k) {
      const Rules& r = stack_[k - 1];
      std::string_view sub = rel;
      if (!r.base.empty()) {
        if (rel.size() <= r.base.size() || rel.compare(0, r.base.size(), r.base) != 0 ||
            rel[r.base.size()] != '/')
          continue;
        sub = std::string_view(rel).substr(r.base.size() + 1);
      }
      int m = r.rules.match(sub, is_dir);
      if (m != 0) return m > 0;
    }
    return false;
  }

  // Walks the directory open as `dfd` (closed here). Entries are opened relative
  // to it, without following symbolic links: a folder swapped for a link while
  // the walk runs is not entered.
  void walk(int dfd, const std::string& rel, int depth) {
    DIR* d = ::fdopendir(dfd);
    if (!d) {
      ::close(dfd);
      ++sum_.unreadable;
      return;
    }
    std::unique_ptr<DIR, int (*)(DIR*)> hold(d, ::closedir);
    if (cancel_.load(std::memory_order_relaxed)) return;
    std::vector<std::pair<std::string, unsigned char>> entries;
    while (struct dirent* e = ::readdir(d)) {
      const char* n = e->d_name;
      if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
      entries.emplace_back(n, e->d_type);
    }
    std::sort(entries.begin(), entries.end());
    for (auto& [name, type] : entries) {
      if (cancel_.load(std::memory_order_relaxed)) return;
      if (name[0] == '.' && (!o_.hidden || name == ".git")) continue;
      std::string child_rel = rel.empty() ? name : rel + "/" + name;
      unsigned char t = type;
      if (t == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          ++sum_.unreadable;
          continue;
        }
        t = S_ISDIR(st.st_mode)   ? DT_DIR
            : S_ISREG(st.st_mode) ? DT_REG
            : S_ISLNK(st.st_mode) ? DT_LNK
                                  : DT_UNKNOWN;
      }
      if (t == DT_DIR) {
        enter(dfd, name, child_rel, depth);
      } else if (t == DT_REG) {
        if (ignored(child_rel, false)) continue;
        if (o_.files_mode) {
          if (o_.want_type != 1) consider_entry(dfd, name, child_rel, false);
        } else {
          if (include_ && !include_->matches(o_.include.find('/') == std::string::npos
                                                 ? std::string_view(name)
                                                 : std::string_view(child_rel)))
            continue;
          search_file(dfd, name.c_str(), child_rel);
        }
      }
      // Symbolic links are not followed; sockets, FIFOs and devices are skipped.
    }
  }

  // The folder `name` in `dfd`, unless skipped or ignored.
  void enter(int dfd, const std::string& name, const std::string& rel, int depth) {
    if (std::find(o_.skip_dirs.begin(), o_.skip_dirs.end(), name) != o_.skip_dirs.end()) return;
    if (ignored(rel, true)) return;
    if (o_.files_mode && o_.want_type != 0) consider_entry(dfd, name, rel, true);
    if (depth + 1 > 200) {
      ++sum_.unreadable;
      return;
    }
    int sub = ::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      ++sum_.unreadable;
      return;
    }
    size_t before = stack_.size();
    load_ignores(sub, rel);
    walk(sub, rel, depth + 1);
    stack_.resize(before);
  }

  void consider_entry(int dfd, const std::string& name, const std::string& rel, bool dir) {
    ++sum_.searched;
    if (glob_ && !glob_->matches(o_.name_only ? std::string_view(name) : std::string_view(rel)))
      return;
    struct stat st;
    if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      ++sum_.unreadable;
      return;
    }
    ++sum_.found;
    top_.add({mtime_ns(st), rel, static_cast<int64_t>(st.st_size), dir});
  }

  // A match of the file being searched: kept aside until the file is known not
  // to be binary (a NUL byte may come later), at most what max_results leaves room for.
  void record(const std::string& rel, std::string_view line, int64_t no, bool&) {
    ++pend_found_;
    if (emitted_ + pend_kept_ < o_.max_results) {
      ++pend_kept_;
      pend_.push_back(match_event(rel, line, no, 1));
    }
  }

  bool room() const { return emitted_ + pend_kept_ < o_.max_results; }

  void commit(bool binary) {
    if (binary) {
      if (pend_found_ > 0) ++sum_.binary;  // binary files with a match are counted
      --sum_.searched;
    } else {
      sum_.found += pend_found_;
      if (pend_found_ > 0) ++sum_.files;
      emitted_ += pend_kept_;
      for (auto& e : pend_) batch_.push_back(std::move(e));
    }
    pend_.clear();
    pend_found_ = pend_kept_ = 0;
  }

  // Reads once into buf_ after `have`; false (counted unreadable) on an error.
  bool fill(int fd, size_t& have, uint64_t& total, bool& eof, bool& binary) {
    ssize_t n;
    do {
      n = ::read(fd, buf_.data() + have, buf_.size() - have);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      ++sum_.unreadable;
      return false;
    }
    if (n == 0) eof = true;
    // A NUL byte anywhere makes the file binary: it is still searched (as rg
    // --binary does), so that a binary file with a match can be counted, but
    // its matches are dropped.
    if (n > 0 && !binary &&
        looks_binary(std::string_view(buf_.data() + have, static_cast<size_t>(n))))
      binary = true;
    have += static_cast<size_t>(n);
    total += static_cast<uint64_t>(n);
    return true;
  }

  // `name` is opened relative to the directory `dfd` (AT_FDCWD: a path).
  void search_file(int dfd, const char* name, const std::string& rel) {
    int fd = ::openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      ++sum_.unreadable;
      return;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return;
    }
    ++sum_.searched;
    if (buf_.size() < kChunk) buf_.resize(kChunk);
    size_t have = 0;
    uint64_t total = 0;
    const auto size = static_cast<uint64_t>(st.st_size);
    bool eof = false, file_hit = false, binary = false;
    int64_t line_no = 1;  // of the first line in buf_[0..]
    ctx_.clear();
    after_ = 0;
    last_emitted_ = 0;
    while (!eof) {
      if (cancel_.load(std::memory_order_relaxed)) break;
      if (have == buf_.size()) {
        if (buf_.size() >= kMaxChunk) {
          // One line longer than the largest chunk: search what is there as a line.
          line_no += process(rel, std::string_view(buf_.data(), have), line_no, file_hit, false);
          have = 0;
        } else {
          buf_.resize(buf_.size() * 2);
        }
      }
      if (!fill(fd, have, total, eof, binary)) break;
      // All of the file's bytes (by its size) are in: one more read tells whether
      // it ended, so that its last text is searched without counting its lines.
      if (!eof && total >= size && have < buf_.size() && !fill(fd, have, total, eof, binary)) break;
      if (binary && pend_found_ > 0) break;  // one match is enough to count it
      size_t upto;
      if (eof) {
        upto = have;
      } else {
        const void* nl = memrchr(buf_.data(), '\n', have);
        if (!nl) continue;
        upto = static_cast<size_t>(static_cast<const char*>(nl) - buf_.data()) + 1;
      }
      if (upto > 0)
        line_no += process(rel, std::string_view(buf_.data(), upto), line_no, file_hit, eof);
      std::memmove(buf_.data(), buf_.data() + upto, have - upto);
      have -= upto;
    }
    ::close(fd);
    commit(binary);
    maybe_flush();
  }

  // Searches whole lines (`text` ends at a newline, or at the end of the file)
  // starting with line `no`; returns the number of lines in it, or 0 when `last`
  // (nothing of the file follows: its lines need no counting).
  int64_t process(const std::string& rel, std::string_view text, int64_t no, bool& hit, bool last) {
    const Regex& re = *re_;
    if (context_ > 0) return by_line(rel, text, no, hit);
    const std::string& lit = re.required();
    if (lit.empty()) return by_line(rel, text, no, hit);
    size_t pos = 0, counted = 0;
    int64_t line = no;
    while (pos < text.size()) {
      size_t at = find_literal(text.substr(pos), lit, re.ignore_case());
      if (at == std::string_view::npos) break;
      at += pos;
      const void* ls = at > pos ? memrchr(text.data() + pos, '\n', at - pos) : nullptr;
      size_t start = ls ? static_cast<size_t>(static_cast<const char*>(ls) - text.data()) + 1 : pos;
      const void* le = std::memchr(text.data() + at, '\n', text.size() - at);
      size_t end =
          le ? static_cast<size_t>(static_cast<const char*>(le) - text.data()) : text.size();
      line += static_cast<int64_t>(count_newlines(text.substr(counted, start - counted)));
      counted = start;
      std::string_view l = text.substr(start, end - start);
      if (re.literal_only() || re.matches(l)) record(rel, l, line, hit);
      pos = end + 1;
    }
    if (last) return 0;
    return line - no + static_cast<int64_t>(count_newlines(text.substr(counted))) +
           ((!text.empty() && text.back() != '\n') ? 1 : 0);
  }

  int64_t by_line(const std::string& rel, std::string_view text, int64_t no, bool& hit) {
    const Regex& re = *re_;
    size_t pos = 0;
    int64_t line = no;
    while (pos < text.size()) {
      const void* le = memchr(text.data() + pos, '\n', text.size() - pos);
      size_t end =
          le ? static_cast<size_t>(static_cast<const char*>(le) - text.data()) : text.size();
      std::string_view l = text.substr(pos, end - pos);
      bool m;
      if (!re.required().empty()) {
        m = find_literal(l, re.required(), re.ignore_case()) != std::string_view::npos &&
            (re.literal_only() || re.matches(l));
      } else {
        m = re.matches(l);
      }
      if (m) {
        bool keep = room();
        if (keep && context_ > 0) {
          for (auto& [cn, ct] : ctx_)
            if (cn > last_emitted_) pend_.push_back(match_event(rel, ct, cn, 2));
        }
        ctx_.clear();
        record(rel, l, line, hit);
        if (keep) {
          last_emitted_ = line;
          after_ = context_;
        } else {
          after_ = 0;
        }
      } else if (context_ > 0) {
        if (after_ > 0) {
          --after_;
          pend_.push_back(match_event(rel, l, line, 2));
          last_emitted_ = line;
        } else {
          bool cut;
          ctx_.emplace_back(line, clean_line(l, &cut));
          if (static_cast<int>(ctx_.size()) > context_) ctx_.erase(ctx_.begin());
        }
      }
      ++line;
      pos = end + 1;
    }
    return line - no;
  }

  static constexpr size_t kChunk = 256 * 1024;
  static constexpr size_t kMaxChunk = 16 << 20;

  const Options& o_;
  const std::atomic<bool>& cancel_;
  const Emit& emit_;
  std::optional<Regex> re_;
  std::optional<Glob> glob_, include_;
  int context_ = 0;
  std::vector<Rules> stack_;
  std::vector<stream::Event> batch_;
  std::chrono::steady_clock::time_point last_flush_;
  Summary sum_;
  int64_t emitted_ = 0;
  TopFiles top_;
  std::vector<char> buf_;
  std::vector<std::pair<int64_t, std::string>> ctx_;
  std::vector<stream::Event> pend_;
  int64_t pend_found_ = 0, pend_kept_ = 0;
  int after_ = 0;
  int64_t last_emitted_ = 0;
};

}  // namespace

void run(const Options& opts, const std::atomic<bool>& cancel, const Emit& emit) {
  Walker w(opts, cancel, emit);
  w.run();
}

// ---------------------------------------------------------------------------
// Output decoders
// ---------------------------------------------------------------------------

struct OutputDecoder::Top {
  TopFiles files;
  explicit Top(size_t cap) : files(cap) {}
};

namespace {
constexpr size_t kMaxDecodedLine = 16 << 20;

std::string base64(std::string_view in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    size_t k = chars.find(c);
    if (k == std::string::npos) continue;
    val = (val << 6) + static_cast<int>(k);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

// rg's "arbitrary data": {"text": "..."} or {"bytes": "<base64>"}.
bool data_text(const nlohmann::json& j, std::string& out) {
  if (!j.is_object()) return false;
  auto t = j.find("text");
  if (t != j.end() && t->is_string()) {
    out = t->get<std::string>();
    return true;
  }
  auto b = j.find("bytes");
  if (b != j.end() && b->is_string()) {
    out = base64(b->get<std::string>());
    return true;
  }
  return false;
}
}  // namespace

std::optional<OutputDecoder::Kind> OutputDecoder::kind_from_name(std::string_view name) {
  if (name == "rg_json") return Kind::RgJson;
  if (name == "paths") return Kind::Paths;
  return std::nullopt;
}

OutputDecoder::OutputDecoder(Kind kind, int64_t max_results, std::string cwd,
                             const std::string& glob, bool name_only,
                             std::vector<std::string> skip_dirs, bool hidden)
    : kind_(kind),
      max_(std::max<int64_t>(max_results, 0)),
      cwd_(std::move(cwd)),
      name_only_(name_only),
      skip_(std::move(skip_dirs)),
      hidden_(hidden),
      top_(std::make_unique<Top>(static_cast<size_t>(std::max<int64_t>(max_results, 0)))) {
  if (!glob.empty()) glob_ = std::make_unique<Glob>(glob);
}

OutputDecoder::~OutputDecoder() = default;

void OutputDecoder::feed(std::string_view bytes, std::vector<stream::Event>& out) {
  const char sep = kind_ == Kind::Paths ? '\0' : '\n';
  while (!bytes.empty()) {
    size_t k = bytes.find(sep);
    if (k == std::string_view::npos) {
      if (!overflow_) {
        if (buf_.size() + bytes.size() > kMaxDecodedLine) {
          overflow_ = true;  // one line past the limit: dropped to its end
          buf_.clear();
          ++sum_.unreadable;
        } else {
          buf_.append(bytes);
        }
      }
      return;
    }
    if (overflow_) {
      overflow_ = false;
    } else if (buf_.empty()) {
      line(bytes.substr(0, k), out);
    } else {
      if (buf_.size() + k <= kMaxDecodedLine) {
        buf_.append(bytes.substr(0, k));
        line(buf_, out);
      } else {
        ++sum_.unreadable;
      }
      buf_.clear();
    }
    bytes.remove_prefix(k + 1);
  }
}

void OutputDecoder::finish(std::vector<stream::Event>& out) {
  if (!overflow_ && !buf_.empty()) line(buf_, out);
  buf_.clear();
  commit(false, out);
  if (kind_ == Kind::Paths) top_->files.drain(out);
  out.push_back(summary_event(sum_));
}

void OutputDecoder::line(std::string_view l, std::vector<stream::Event>& out) {
  if (kind_ == Kind::RgJson)
    rg_line(l, out);
  else
    path_entry(l);
}

namespace {

// The starts of the lines rg writes, in its own spelling.
constexpr std::string_view kRgBegin = R"({"type":"begin","data":{)";
constexpr std::string_view kRgMatch = R"({"type":"match","data":{)";
constexpr std::string_view kRgContext = R"({"type":"context","data":{)";
constexpr std::string_view kRgEnd = R"({"type":"end","data":{"path":)";
// In an "end" line, after its path: the file was not binary. A JSON string holds no
// unescaped quote, so this cannot be part of a path.
constexpr std::string_view kRgEndText = R"(},"binary_offset":null,"stats":{)";

bool starts_with(std::string_view l, std::string_view p) { return l.substr(0, p.size()) == p; }

}  // namespace

// The lines whose kind alone matters, known by how rg spells them, without parsing
// them: a file's begin, a match or context line past max_results (only counted),
// the end of a text file. 2,000 matching files gave 1.1 MB of rg output, 14 ms of
// parsing on the worker while rg wanted both cores. Anything else is parsed.
bool OutputDecoder::rg_quick(std::string_view l, std::vector<stream::Event>& out) {
  if (l.size() < 2 || l.substr(l.size() - 2) != "}}") return false;
  if (starts_with(l, kRgBegin)) {
    commit(false, out);
    return true;
  }
  const bool full = emitted_ + pend_kept_ >= max_;
  if (full && starts_with(l, kRgMatch)) {
    ++pend_found_;
    return true;
  }
  if (full && pend_kept_ == 0 && starts_with(l, kRgContext)) return true;
  if (starts_with(l, kRgEnd) && l.find(kRgEndText) != std::string_view::npos) {
    ++sum_.searched;
    commit(false, out);
    return true;
  }
  return false;
}

void OutputDecoder::rg_line(std::string_view l, std::vector<stream::Event>& out) {
  if (rg_quick(l, out)) return;
  auto j = nlohmann::json::parse(l.begin(), l.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  auto type = j.find("type");
  auto data = j.find("data");
  if (type == j.end() || !type->is_string() || data == j.end() || !data->is_object()) return;
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "match" || t == "context") {
    std::string path, text;
    auto p = data->find("path");
    auto ls = data->find("lines");
    if (p == data->end() || !data_text(*p, path) || ls == data->end() || !data_text(*ls, text))
      return;
    int64_t no = 0;
    auto n = data->find("line_number");
    if (n != data->end() && n->is_number_integer()) no = n->get<int64_t>();
    if (no < 0) no = 0;
    // Kept aside until the file's end says whether it is binary.
    if (t == "match") {
      ++pend_found_;
      if (emitted_ + pend_kept_ < max_) {
        ++pend_kept_;
        pend_.push_back(match_event(path, text, no, 1));
      }
    } else if (emitted_ + pend_kept_ < max_ || pend_kept_ > 0) {
      pend_.push_back(match_event(path, text, no, 2));
    }
  } else if (t == "begin") {
    commit(false, out);
  } else if (t == "end") {
    ++sum_.searched;
    auto bo = data->find("binary_offset");
    commit(bo != data->end() && bo->is_number(), out);
  }
}

void OutputDecoder::commit(bool binary, std::vector<stream::Event>& out) {
  if (binary) {
    if (pend_found_ > 0) ++sum_.binary;  // binary files with a match are counted
    --sum_.searched;
  } else {
    sum_.found += pend_found_;
    if (pend_found_ > 0) ++sum_.files;
    emitted_ += pend_kept_;
    for (auto& e : pend_) out.push_back(std::move(e));
  }
  pend_.clear();
  pend_found_ = pend_kept_ = 0;
}

void OutputDecoder::path_entry(std::string_view p) {
  while (p.size() >= 2 && p[0] == '.' && p[1] == '/') p.remove_prefix(2);
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  if (p.empty()) return;
  ++sum_.searched;
  // Skipped folders and hidden entries, as the native walk skips them.
  size_t pos = 0;
  while (pos < p.size()) {
    size_t s = p.find('/', pos);
    std::string_view seg =
        p.substr(pos, s == std::string_view::npos ? std::string_view::npos : s - pos);
    if (s != std::string_view::npos && std::find(skip_.begin(), skip_.end(), seg) != skip_.end())
      return;
    if (!seg.empty() && seg[0] == '.' && (!hidden_ || seg == ".git")) return;
    if (s == std::string_view::npos) break;
    pos = s + 1;
  }
  if (glob_ && !glob_->matches(name_only_ ? basename_of(p) : p)) return;
  std::string abs = p[0] == '/' ? std::string(p) : cwd_ + "/" + std::string(p);
  struct stat st;
  if (::lstat(abs.c_str(), &st) != 0) {
    ++sum_.unreadable;
    return;
  }
  ++sum_.found;
  top_->files.add(
      {mtime_ns(st), std::string(p), static_cast<int64_t>(st.st_size), S_ISDIR(st.st_mode)});
}

}  // namespace flemma::search
