// The .chat parser. Linear in the input: a first pass records the few lines
// that matter for lookahead (role markers, closing fences, </thinking>), the
// second pass walks the lines once and jumps over closed blocks using those
// lists, so no line is examined more than a constant number of times.
#include "document.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "guard.hpp"

namespace flemma::document {

namespace {

using sv = std::string_view;

constexpr int kMaxJsonDepth = 500;

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

sv rtrim(sv s) {
  while (!s.empty() && is_blank_char(s.back())) s.remove_suffix(1);
  return s;
}
sv ltrim(sv s) {
  while (!s.empty() && is_blank_char(s.front())) s.remove_prefix(1);
  return s;
}
bool is_blank(sv s) { return rtrim(s).empty(); }

// One line: [start, end) is its content without "\r\n"; next is the start of
// the following line, or -1 for the last line.
struct Line {
  int32_t idx = 0;
  int32_t start = 0;
  int32_t end = 0;
  int32_t next = -1;
};

struct Fence {
  char ch = 0;
  int32_t len = 0;
  bool opener = false;
  bool closer = false;
  sv info;  // trimmed
};

Fence fence_of(sv s) {
  Fence f;
  size_t k = 0;
  while (k < 3 && k < s.size() && s[k] == ' ') ++k;
  if (k >= s.size() || (s[k] != '`' && s[k] != '~')) return f;
  char c = s[k];
  size_t n = 0;
  while (k + n < s.size() && s[k + n] == c) ++n;
  if (n < 3) return f;
  sv rest = s.substr(k + n);
  sv info = ltrim(rtrim(rest));
  f.ch = c;
  f.len = static_cast<int32_t>(std::min<size_t>(n, std::numeric_limits<int32_t>::max()));
  f.closer = info.empty();
  f.opener = c == '~' || info.find('`') == sv::npos;
  f.info = info;
  return f;
}

int role_of(sv s) {
  s = rtrim(s);
  if (s == "@You:") return FLEMMA_DOC_USER;
  if (s == "@Assistant:") return FLEMMA_DOC_ASSISTANT;
  if (s == "@System:") return FLEMMA_DOC_SYSTEM;
  return 0;
}

struct Mark {
  int32_t line;
  int32_t start;
  int32_t role;
};
struct Closer {
  int32_t line;
  int32_t start;
  int32_t len;
  char ch;
};

constexpr sv kToolUse = "**Tool Use:**";
constexpr sv kToolResult = "**Tool Result:**";
constexpr sv kThinkOpen = "<thinking";
constexpr sv kThinkClose = "</thinking>";

// Reads "`...`" at s[pos]; returns the inner range or npos.
bool read_ticked(sv s, size_t& pos, size_t& a, size_t& b) {
  if (pos >= s.size() || s[pos] != '`') return false;
  size_t e = s.find('`', pos + 1);
  if (e == sv::npos || e == pos + 1) return false;
  a = pos + 1;
  b = e;
  pos = e + 1;
  return true;
}
void skip_spaces(sv s, size_t& pos) {
  while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
}

// A quick check of a tool input, done before the full JSON parser: true only
// when `s` is certainly one JSON object that nlohmann's strict parser accepts
// (RFC 8259 grammar, well-formed UTF-8, no lone surrogate escapes, nesting
// within kFastDepth). Anything else returns false and goes to the full parser,
// which then decides and explains; so this may refuse valid input, never accept
// invalid input.
constexpr int kFastDepth = 64;

bool json_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool json_digit(unsigned char c) { return c >= '0' && c <= '9'; }
int json_hex(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string whose opening quote is at p[-1]; moves p past the closing quote.
bool fast_string(const unsigned char*& p, const unsigned char* e) {
  for (;;) {
#if defined(__SSE2__)
    // Plain ASCII without quotes, backslashes or control characters, 16 bytes at a
    // time (a 10 MB string value: about 1 ms instead of 8).
    {
      const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                    space = _mm_set1_epi8(0x20);
      while (e - p >= 16) {
        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        // Signed: bytes from 0x80 (UTF-8) are below 0x20 too, and take the slow path.
        __m128i special =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                         _mm_cmplt_epi8(v, space));
        auto mask = static_cast<unsigned>(_mm_movemask_epi8(special));
        if (mask != 0) {
          p += __builtin_ctz(mask);
          break;
        }
        p += 16;
      }
    }
#endif
    if (p >= e) return false;
    unsigned char c = *p;
    if (c == '"') {
      ++p;
      return true;
    }
    if (c < 0x20) return false;
    if (c == '\\') {
      if (e - p < 2) return false;
      unsigned char x = p[1];
      if (x == 'u') {
        if (e - p < 6) return false;
        int v = 0;
        for (int k = 2; k < 6; ++k) {
          int h = json_hex(p[k]);
          if (h < 0) return false;
          v = v * 16 + h;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
          return false;  // surrogates: the full parser checks the pairing
        p += 6;
        continue;
      }
      if (x != '"' && x != '\\' && x != '/' && x != 'b' && x != 'f' && x != 'n' && x != 'r' &&
          x != 't')
        return false;
      p += 2;
      continue;
    }
    if (c < 0x80) {
      ++p;
      continue;
    }
    // Well-formed UTF-8 (Unicode table 3-7): no overlongs, no surrogates, at most U+10FFFF.
    auto cont = [&](std::ptrdiff_t k, unsigned char lo, unsigned char hi) {
      return p + k < e && p[k] >= lo && p[k] <= hi;
    };
    if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(1, 0x80, 0xBF)) return false;
      p += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
      if (!cont(1, lo, hi) || !cont(2, 0x80, 0xBF)) return false;
      p += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
      if (!cont(1, lo, hi) || !cont(2, 0x80, 0xBF) || !cont(3, 0x80, 0xBF)) return false;
      p += 4;
    } else {
      return false;
    }
  }
}

// A number that is certainly finite as a double: no exponent, at most 300
// digits before the point (the full parser rejects numbers that overflow).
bool fast_number(const unsigned char*& p, const unsigned char* e) {
  if (p < e && *p == '-') ++p;
  if (p >= e) return false;
  if (*p == '0') {
    ++p;
  } else if (*p >= '1' && *p <= '9') {
    const unsigned char* d = p;
    while (p < e && json_digit(*p)) ++p;
    if (p - d > 300) return false;
  } else {
    return false;
  }
  if (p < e && *p == '.') {
    ++p;
    if (p >= e || !json_digit(*p)) return false;
    while (p < e && json_digit(*p)) ++p;
  }
  return p >= e || (*p != 'e' && *p != 'E');
}

bool fast_literal(const unsigned char*& p, const unsigned char* e, sv word) {
  if (static_cast<size_t>(e - p) < word.size() || std::memcmp(p, word.data(), word.size()) != 0)
    return false;
  p += word.size();
  return true;
}

bool fast_json_object(sv body) {
  const auto* p = reinterpret_cast<const unsigned char*>(body.data());
  const auto* e = p + body.size();
  unsigned char stack[kFastDepth];  // '{' or '['
  int depth = 0;
  auto ws = [&] {
    while (p < e && json_ws(*p)) ++p;
  };
  ws();
  if (p >= e || *p != '{') return false;
  ++p;
  stack[depth++] = '{';
  // After an opening bracket: a member, a value or the closing bracket.
  bool first = true;
  for (;;) {
    ws();
    if (p >= e) return false;
    const unsigned char top = stack[depth - 1];
    const unsigned char close = top == '{' ? '}' : ']';
    if (first && *p == close) {
      ++p;
    } else {
      if (!first) {
        if (*p == close) {
          ++p;
          goto closed;
        }
        if (*p != ',') return false;
        ++p;
        ws();
        if (p >= e) return false;
      }
      if (top == '{') {
        if (*p != '"') return false;
        ++p;
        if (!fast_string(p, e)) return false;
        ws();
        if (p >= e || *p != ':') return false;
        ++p;
        ws();
        if (p >= e) return false;
      }
      // A value.
      switch (*p) {
        case '{':
        case '[':
          if (depth == kFastDepth) return false;
          stack[depth++] = *p;
          ++p;
          first = true;
          continue;
        case '"':
          ++p;
          if (!fast_string(p, e)) return false;
          break;
        case 't':
          if (!fast_literal(p, e, "true")) return false;
          break;
        case 'f':
          if (!fast_literal(p, e, "false")) return false;
          break;
        case 'n':
          if (!fast_literal(p, e, "null")) return false;
          break;
        default:
          if (!fast_number(p, e)) return false;
      }
      first = false;
      continue;
    }
  closed:
    if (--depth == 0) break;
    first = false;
  }
  ws();
  return p == e;
}

// Tool ids, hashed while their bytes are hot so the final check reads only
// these lists.
struct IdRef {
  sv id;
  uint64_t hash;
  int32_t line;  // 1-based
};

uint64_t hash_id(sv s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

// Open addressing over indices into a list of IdRef; finds the first entry
// with the same id, or inserts r.
struct IdTable {
  std::vector<int32_t> slots;  // index + 1, 0 = empty
  const std::vector<IdRef>* refs = nullptr;
  explicit IdTable(const std::vector<IdRef>& r) : refs(&r) {
    size_t cap = 16;
    while (cap < r.size() * 2) cap <<= 1;
    slots.assign(cap, 0);
  }
  // The earlier entry with the id of refs[i], or -1 after inserting i.
  int32_t find_or_insert(int32_t i) {
    const IdRef& r = (*refs)[static_cast<size_t>(i)];
    size_t mask = slots.size() - 1;
    for (size_t k = r.hash & mask;; k = (k + 1) & mask) {
      int32_t s = slots[k];
      if (s == 0) {
        slots[k] = i + 1;
        return -1;
      }
      const IdRef& o = (*refs)[static_cast<size_t>(s - 1)];
      if (o.hash == r.hash && o.id == r.id) return s - 1;
    }
  }
  bool contains(const IdRef& r) const {
    size_t mask = slots.size() - 1;
    for (size_t k = r.hash & mask;; k = (k + 1) & mask) {
      int32_t s = slots[k];
      if (s == 0) return false;
      const IdRef& o = (*refs)[static_cast<size_t>(s - 1)];
      if (o.hash == r.hash && o.id == r.id) return true;
    }
  }
};

std::string printable_id(sv s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) {
    auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  if (s.size() > max) out += "...";
  return out;
}

template <class Out>
void check_id_refs(const std::vector<IdRef>& use_ids, const std::vector<IdRef>& result_ids,
                   Out&& out) {
  IdTable uses(use_ids), results(result_ids);
  for (size_t i = 0; i < use_ids.size(); ++i) {
    int32_t prev = uses.find_or_insert(static_cast<int32_t>(i));
    if (prev >= 0) {
      const IdRef& r = use_ids[i];
      out(r.line, FLEMMA_DOC_SEV_ERROR,
          "tool use id `" + printable_id(r.id, 80) + "` is already used on line " +
              std::to_string(use_ids[static_cast<size_t>(prev)].line) +
              ": every tool use needs its own id; rename or delete one of them");
    }
  }
  for (size_t i = 0; i < result_ids.size(); ++i) {
    const IdRef& r = result_ids[i];
    int32_t prev = results.find_or_insert(static_cast<int32_t>(i));
    if (prev >= 0)
      out(r.line, FLEMMA_DOC_SEV_ERROR,
          "tool `" + printable_id(r.id, 80) + "` already has a result on line " +
              std::to_string(result_ids[static_cast<size_t>(prev)].line) +
              ": delete one of the two results");
    if (!uses.contains(r))
      out(r.line, FLEMMA_DOC_SEV_ERROR,
          "tool result `" + printable_id(r.id, 80) +
              "` matches no **Tool Use:** block: correct the id or delete this result");
  }
}

class Parser {
 public:
  Parser(sv text, bool check_ids) : t_(text), check_ids_(check_ids) {}

  Document run(int32_t cp_every = 0) {
    cp_every_ = cp_every;
    prepass(0, 0);
    Line l = line_at(0, 0);
    bool first_is_text = false;
    if (parse_frontmatter(l, first_is_text)) {
      if (l.next < 0) return finish();
      l = line_at(l.idx + 1, l.next);
    }
    loop(l, first_is_text);
    return finish();
  }

  // Resumes at a checkpoint with the document emitted before it.
  Document resume(Document&& prefix, const ResumeFrom& from, Resumed& out) {
    doc_ = std::move(prefix);
    doc_.checkpoints.clear();
    cp_every_ = from.cp_every;
    stop_ = from.stop ? &from : nullptr;
    so_ = from.stop_first;
    const Checkpoint& c = from.at;
    prepass(c.byte, c.line);
    has_cr_ = has_cr_ || from.has_cr;
    in_msg_ = c.msg_item >= 0;
    msg_item_ = in_msg_ ? static_cast<size_t>(c.msg_item) : 0;
    msg_last_ = c.msg_last;
    run_first_ = c.run_first;
    run_last_ = c.run_last;
    run_start_ = c.run_start;
    run_end_ = c.run_end;
    last_cp_ = std::numeric_limits<int32_t>::min() / 2;
    loop(line_at(c.line, c.byte), false);
    if (stopped_) {
      out.stopped = true;
      out.old_cp = so_;
      out.state = stop_state_;
      std::stable_sort(
          doc_.diags.begin(), doc_.diags.end(),
          [](const flemma_doc_diag& a, const flemma_doc_diag& b) { return a.line < b.line; });
      return std::move(doc_);
    }
    return finish();
  }

 private:
  sv t_;
  bool check_ids_ = true;
  Document doc_;
  std::vector<Mark> markers_;
  std::vector<Closer> closers_;
  std::vector<int32_t> suf_tick_, suf_tilde_;  // suffix max of closer lengths per char
  std::vector<Mark> think_closes_;
  size_t mp_ = 0, cp_ = 0, tp_ = 0;
  std::vector<IdRef> use_ids_, result_ids_;
  bool has_cr_ = false;  // some line ends in "\r\n"

  bool in_msg_ = false;
  size_t msg_item_ = 0;
  int32_t msg_last_ = -1;  // last non-blank line index of the current message
  int32_t run_first_ = -1, run_last_ = -1, run_start_ = 0, run_end_ = 0;

  // Checkpoints and resuming.
  int32_t cp_every_ = 0;  // 0: none recorded
  int32_t last_cp_ = std::numeric_limits<int32_t>::min() / 2;
  const ResumeFrom* stop_ = nullptr;
  size_t so_ = 0;
  bool stopped_ = false;
  Checkpoint stop_state_;

  Checkpoint state_at(const Line& l) const {
    Checkpoint c;
    c.line = l.idx;
    c.byte = l.start;
    c.items = static_cast<int32_t>(doc_.items.size());
    c.diags = static_cast<int32_t>(doc_.diags.size());
    c.unclosed = static_cast<int32_t>(doc_.unclosed.size());
    c.msg_item = in_msg_ ? static_cast<int32_t>(msg_item_) : -1;
    c.role = current_role();
    c.msg_last = msg_last_;
    c.run_first = run_first_;
    c.run_last = run_last_;
    c.run_start = run_start_;
    c.run_end = run_end_;
    return c;
  }

  // The main loop from line l; records checkpoints and stops where asked.
  void loop(Line l, bool first_is_text) {
    for (;;) {
      if (stop_ && l.idx >= stop_->stop_min_line) {
        const auto& old = *stop_->stop;
        while (so_ < old.size() && old[so_].line + stop_->line_delta < l.idx) ++so_;
        if (so_ < old.size() && old[so_].line + stop_->line_delta == l.idx) {
          const Checkpoint& o = old[so_];
          if ((o.msg_item >= 0) == in_msg_ && o.role == current_role() &&
              (o.run_first >= 0) == (run_first_ >= 0)) {
            stopped_ = true;
            stop_state_ = state_at(l);
            return;
          }
        }
      }
      if (cp_every_ > 0 && !first_is_text && l.idx > 0 && l.idx - last_cp_ >= cp_every_) {
        doc_.checkpoints.push_back(state_at(l));
        last_cp_ = l.idx;
      }
      int32_t resume_idx = -1, resume_start = -1;
      const bool marker = step(l, first_is_text, resume_idx, resume_start);
      if (marker)
        last_cp_ = std::numeric_limits<int32_t>::min() / 2;  // the first line of a message gets one
      first_is_text = false;
      if (resume_idx < 0) break;
      l = line_at(resume_idx, resume_start);
    }
  }

  Line line_at(int32_t idx, int32_t start) const {
    Line l;
    l.idx = idx;
    l.start = start;
    const void* nl =
        start < static_cast<int32_t>(t_.size())
            ? std::memchr(t_.data() + start, '\n', t_.size() - static_cast<size_t>(start))
            : nullptr;
    int32_t e = nl ? static_cast<int32_t>(static_cast<const char*>(nl) - t_.data())
                   : static_cast<int32_t>(t_.size());
    l.next = nl ? e + 1 : -1;
    if (e > start && t_[static_cast<size_t>(e) - 1] == '\r') --e;
    l.end = e;
    return l;
  }
  sv text_of(const Line& l) const {
    return t_.substr(static_cast<size_t>(l.start), static_cast<size_t>(l.end - l.start));
  }
  // End of the content of the line before the line that starts at `start`.
  int32_t end_before(int32_t start) const {
    int32_t e = start - 1;  // the '\n'
    if (e > 0 && t_[static_cast<size_t>(e) - 1] == '\r') --e;
    return e;
  }

  // Looks at the first bytes of one line for the prepass lists.
  void classify(int32_t idx, int32_t start, int32_t end) {
    if (end > start && t_[static_cast<size_t>(end) - 1] == '\r') {
      has_cr_ = true;
      --end;
    }
    if (end <= start) return;
    char c0 = t_[static_cast<size_t>(start)];
    if (c0 != '@' && c0 != '<' && c0 != '`' && c0 != '~' && c0 != ' ') return;
    sv s = t_.substr(static_cast<size_t>(start), static_cast<size_t>(end - start));
    if (c0 == '@') {
      if (int r = role_of(s)) markers_.push_back({idx, start, r});
    } else if (c0 == '<') {
      if (rtrim(s) == kThinkClose) think_closes_.push_back({idx, start, 0});
    } else {
      Fence f = fence_of(s);
      if (f.closer) closers_.push_back({idx, start, f.len, f.ch});
    }
  }

  // One pass over the bytes: finds every line (16 bytes at a time where SSE2
  // is available) and records the role markers, fence closers and
  // </thinking> lines.
  void prepass(int32_t from_byte, int32_t from_line) {
    const char* p = t_.data();
    const int32_t n = static_cast<int32_t>(t_.size());
    int32_t idx = from_line, start = from_byte, i = from_byte;
#if defined(__SSE2__)
    const __m128i nl = _mm_set1_epi8('\n');
    for (; i + 16 <= n; i += 16) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, nl)));
      while (mask) {
        int32_t e = i + __builtin_ctz(mask);
        mask &= mask - 1;
        classify(idx++, start, e);
        start = e + 1;
      }
    }
#endif
    for (; i < n; ++i) {
      if (p[i] != '\n') continue;
      classify(idx++, start, i);
      start = i + 1;
    }
    classify(idx, start, n);
    suf_tick_.assign(closers_.size() + 1, 0);
    suf_tilde_.assign(closers_.size() + 1, 0);
    for (size_t k = closers_.size(); k-- > 0;) {
      suf_tick_[k] = suf_tick_[k + 1];
      suf_tilde_[k] = suf_tilde_[k + 1];
      auto& m = closers_[k].ch == '`' ? suf_tick_[k] : suf_tilde_[k];
      m = std::max(m, closers_[k].len);
    }
    // Every item starts at a marker, a fence, a tool header or text between
    // them; this covers typical documents without a regrowth.
    doc_.items.reserve(
        doc_.items.size() +
        std::min<size_t>(2 * markers_.size() + closers_.size() + 2 * think_closes_.size() + 16,
                         (t_.size() - static_cast<size_t>(from_byte)) / 8 + 16));
  }

  // ---- output helpers ----------------------------------------------------

  flemma_doc_str arena(sv s) {
    int32_t off = static_cast<int32_t>(doc_.arena.size());
    doc_.arena.append(s);
    return {-off - 1, static_cast<int32_t>(s.size())};
  }
  // A range of the input; rewritten into the arena without "\r" before "\n".
  flemma_doc_str range(int32_t a, int32_t b) {
    if (b <= a) return {a, 0};
    if (!has_cr_) return {a, b - a};
    sv s = t_.substr(static_cast<size_t>(a), static_cast<size_t>(b - a));
    if (s.find("\r\n") == sv::npos) return {a, b - a};
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') continue;
      out.push_back(s[i]);
    }
    return arena(out);
  }
  flemma_doc_str slice(sv part) {
    if (part.empty()) return {0, 0};  // also covers a default view, whose data() is null
    return {static_cast<int32_t>(part.data() - t_.data()), static_cast<int32_t>(part.size())};
  }
  void diag(int32_t idx, int severity, const std::string& msg) {
    doc_.diags.push_back({idx + 1, severity, arena(msg)});
  }
  flemma_doc_item& push(int32_t kind, int32_t first_idx, int32_t last_idx) {
    flemma_doc_item it{};
    it.kind = kind;
    it.first_line = first_idx + 1;
    it.last_line = last_idx + 1;
    doc_.items.push_back(it);
    return doc_.items.back();
  }

  // ---- lookahead ---------------------------------------------------------

  // The first role marker after line idx (markers_.size() if none).
  size_t marker_after(int32_t idx) {
    while (mp_ < markers_.size() && markers_[mp_].line <= idx) ++mp_;
    return mp_;
  }
  // The first closer of (ch, len) after line idx, or npos.
  size_t closer_after(int32_t idx, char ch, int32_t len) {
    while (cp_ < closers_.size() && closers_[cp_].line <= idx) ++cp_;
    const auto& suf = ch == '`' ? suf_tick_ : suf_tilde_;
    if (suf[cp_] < len) return std::string::npos;
    for (size_t q = cp_; q < closers_.size(); ++q)
      if (closers_[q].ch == ch && closers_[q].len >= len) return q;
    return std::string::npos;  // unreachable: the suffix max said there is one
  }
  size_t think_close_after(int32_t idx) {
    while (tp_ < think_closes_.size() && think_closes_[tp_].line <= idx) ++tp_;
    return tp_;
  }

  // Walks from the line after `from` to the line before the next role marker;
  // returns the last non-blank line (or `from`) and sets the resume point.
  Line walk_to_marker(const Line& from, int32_t& resume_idx, int32_t& resume_start) {
    size_t m = marker_after(from.idx);
    int32_t stop = m < markers_.size() ? markers_[m].line : std::numeric_limits<int32_t>::max();
    Line last = from;
    Line l = from;
    while (l.next >= 0 && l.idx + 1 < stop) {
      l = line_at(l.idx + 1, l.next);
      if (!is_blank(text_of(l))) last = l;
    }
    if (m < markers_.size()) {
      resume_idx = markers_[m].line;
      resume_start = markers_[m].start;
    } else {
      resume_idx = -1;
    }
    return last;
  }

  // A fence of text opened on line `open` and closed on line `close` (0-based)
  // reads every role marker between them as text: the first of them is named in
  // a warning on the opening line (flemma.document refuses a send when its role
  // differs from the message's). Not for the block of a tool use or result:
  // Flemma writes those with a fence longer than any in their content, which
  // may quote anything (the output of `cat x.chat`).
  void swallowed(int32_t open, int32_t close) {
    size_t m = marker_after(open);
    if (m >= markers_.size() || markers_[m].line >= close) return;
    const int r = markers_[m].role;
    const char* name = r == FLEMMA_DOC_ASSISTANT ? "@Assistant:"
                       : r == FLEMMA_DOC_SYSTEM  ? "@System:"
                                                 : "@You:";
    // No line numbers of other lines in the message: an incremental parse keeps
    // diagnostics of unchanged lines as they were.
    diag(open, FLEMMA_DOC_SEV_WARNING,
         std::string("this fence is not closed: the ") + name +
             " below it is read as text, up to the fence that closes this one; close it before "
             "that marker "
             "(or write \\" +
             name + " to quote a marker)");
  }

  // ---- messages and text runs ---------------------------------------------

  void flush_text() {
    if (run_first_ < 0) return;
    auto& it = push(FLEMMA_DOC_TEXT, run_first_, run_last_);
    it.body = range(run_start_, run_end_);
    run_first_ = -1;
  }
  void extend_text(int32_t first_idx, int32_t first_start, int32_t last_idx, int32_t last_end) {
    if (run_first_ < 0) {
      run_first_ = first_idx;
      run_start_ = first_start;
    }
    run_last_ = last_idx;
    run_end_ = last_end;
    note_line(last_idx);
  }
  void note_line(int32_t idx) { msg_last_ = std::max(msg_last_, idx); }
  void close_message() {
    flush_text();
    if (!in_msg_) return;
    auto& m = doc_.items[msg_item_];
    m.last_line = std::max(m.first_line, msg_last_ + 1);
    in_msg_ = false;
  }
  void open_message(int role, int32_t idx) {
    close_message();
    msg_item_ = doc_.items.size();
    auto& m = push(FLEMMA_DOC_MESSAGE, idx, idx);
    m.role = role;
    in_msg_ = true;
    msg_last_ = idx;
  }
  int current_role() const { return in_msg_ ? doc_.items[msg_item_].role : 0; }

  // ---- frontmatter --------------------------------------------------------

  bool parse_frontmatter(Line& l, bool& first_is_text) {
    Fence f = fence_of(text_of(l));
    if (!f.opener || f.ch != '`' || (f.info != "lua" && f.info != "json")) return false;
    size_t q = closer_after(0, f.ch, f.len);
    if (q == std::string::npos) {
      diag(0, FLEMMA_DOC_SEV_ERROR,
           "the frontmatter opened on line 1 is never closed: add a line with " +
               std::string(static_cast<size_t>(f.len), '`') +
               " after its code (until then line 1 is read as plain text)");
      first_is_text = true;
      doc_.unclosed.push_back({0, f.len, f.ch});
      return false;
    }
    const Closer& c = closers_[q];
    auto& it = push(FLEMMA_DOC_FRONTMATTER, 0, c.line);
    it.key = slice(f.info);
    it.body = c.line > 1 ? range(l.next, end_before(c.start)) : flemma_doc_str{c.start, 0};
    l = line_at(c.line, c.start);
    return true;
  }

  // ---- one step of the main loop: handles the line l and says where to go on

  // Returns true when l is a role marker.
  bool step(const Line& l, bool plain_text, int32_t& resume_idx, int32_t& resume_start) {
    auto go_next = [&](const Line& x) {
      if (x.next < 0) {
        resume_idx = -1;
      } else {
        resume_idx = x.idx + 1;
        resume_start = x.next;
      }
    };
    sv s = text_of(l);
    size_t m = marker_after(l.idx - 1);
    if (m < markers_.size() && markers_[m].line == l.idx) {
      open_message(markers_[m].role, l.idx);
      go_next(l);
      return true;
    }
    if (is_blank(s)) {
      go_next(l);
      return false;
    }
    if (!in_msg_) open_message(FLEMMA_DOC_USER, l.idx);
    doc_.items[msg_item_].first_line = std::min(doc_.items[msg_item_].first_line, l.idx + 1);
    if (!plain_text && s[0] == '*') {
      if (s.substr(0, kToolUse.size()) == kToolUse) {
        if (tool_use(l, resume_idx, resume_start)) return false;
      } else if (s.substr(0, kToolResult.size()) == kToolResult) {
        if (tool_result(l, resume_idx, resume_start)) return false;
      }
    } else if (!plain_text && s[0] == '<') {
      if (s.substr(0, kThinkOpen.size()) == kThinkOpen) {
        if (thinking(l, resume_idx, resume_start)) return false;
      }
    }
    if (!plain_text) {
      Fence f = fence_of(s);
      if (f.opener) {
        size_t q = closer_after(l.idx, f.ch, f.len);
        if (q != std::string::npos) {
          const Closer& c = closers_[q];
          swallowed(l.idx, c.line);
          Line cl = line_at(c.line, c.start);
          extend_text(l.idx, l.start, cl.idx, cl.end);
          go_next(cl);
          return false;
        }
        doc_.unclosed.push_back({l.idx, f.len, f.ch});
        Line last = walk_to_marker(l, resume_idx, resume_start);
        extend_text(l.idx, l.start, last.idx, last.end);
        diag(l.idx, FLEMMA_DOC_SEV_WARNING,
             "this code fence is never closed, so it runs to the end of the message: add a closing "
             "line of " +
                 std::to_string(f.len) + " " + (f.ch == '`' ? "backticks" : "tildes"));
        return false;
      }
    }
    extend_text(l.idx, l.start, l.idx, l.end);
    go_next(l);
    return false;
  }

  // The fenced block after a tool header: skips blank lines, then expects a
  // fence opener. Returns false (and sets resume to the offending line) if
  // there is none.
  struct Block {
    bool found = false;
    bool closed = false;
    Fence fence;
    Line open;
    Line last;           // closing fence, or last non-blank line when unclosed
    int32_t body_a = 0;  // byte range of the content
    int32_t body_b = 0;
  };
  Block fenced_block(const Line& header, int32_t& resume_idx, int32_t& resume_start) {
    Block b;
    Line l = header;
    for (;;) {
      if (l.next < 0) {
        resume_idx = -1;
        return b;
      }
      l = line_at(l.idx + 1, l.next);
      sv s = text_of(l);
      if (!is_blank(s)) break;
    }
    resume_idx = l.idx;
    resume_start = l.start;
    sv s = text_of(l);
    if (role_of(s)) return b;
    Fence f = fence_of(s);
    if (!f.opener) return b;
    b.found = true;
    b.fence = f;
    b.open = l;
    size_t q = closer_after(l.idx, f.ch, f.len);
    if (q != std::string::npos) {
      const Closer& c = closers_[q];
      b.closed = true;
      b.last = line_at(c.line, c.start);
      b.body_a = l.next;
      b.body_b = c.line > l.idx + 1 ? end_before(c.start) : l.next;
      if (b.last.next < 0) {
        resume_idx = -1;
      } else {
        resume_idx = b.last.idx + 1;
        resume_start = b.last.next;
      }
      return b;
    }
    doc_.unclosed.push_back({l.idx, f.len, f.ch});
    b.last = walk_to_marker(l, resume_idx, resume_start);
    b.body_a = l.next < 0 ? l.end : l.next;
    b.body_b = b.last.idx > l.idx ? b.last.end : b.body_a;
    return b;
  }

  bool tool_use(const Line& l, int32_t& resume_idx, int32_t& resume_start) {
    sv s = rtrim(text_of(l));
    size_t pos = kToolUse.size(), na, nb, ia, ib;
    skip_spaces(s, pos);
    bool ok = read_ticked(s, pos, na, nb);
    if (ok) {
      skip_spaces(s, pos);
      ok = pos < s.size() && s[pos] == '(';
      ++pos;
      ok = ok && read_ticked(s, pos, ia, ib) && pos + 1 == s.size() && s[pos] == ')';
    }
    if (!ok) {
      diag(l.idx, FLEMMA_DOC_SEV_ERROR,
           "malformed **Tool Use:** header: write it as **Tool Use:** `NAME` (`ID`) (it is read as "
           "plain text until then)");
      return false;
    }
    flush_text();
    note_line(l.idx);
    Block b = fenced_block(l, resume_idx, resume_start);
    flemma_doc_item it{};
    it.kind = FLEMMA_DOC_TOOL_USE;
    it.first_line = l.idx + 1;
    it.last_line = l.idx + 1;
    it.key = slice(s.substr(ia, ib - ia));
    it.label = slice(s.substr(na, nb - na));
    use_ids_.push_back({s.substr(ia, ib - ia), hash_id(s.substr(ia, ib - ia)), l.idx + 1});
    // Built only for a diagnostic: most tool uses have none.
    auto where = [&] {
      return "tool use `" + std::string(s.substr(ia, ib - ia)) + "` (" +
             std::string(s.substr(na, nb - na)) + ")";
    };
    if (current_role() != FLEMMA_DOC_ASSISTANT)
      diag(l.idx, FLEMMA_DOC_SEV_WARNING,
           where() +
               " is outside an @Assistant: message: only the model writes tool uses; move it below "
               "an @Assistant: line");
    if (!b.found) {
      it.flags |= FLEMMA_DOC_F_NO_FENCE | FLEMMA_DOC_F_BAD_INPUT;
      std::string msg = where() +
                        " has no fenced input block: add a blank line and a ```json block holding "
                        "the input object";
      it.note = arena("no fenced input block");
      diag(l.idx, FLEMMA_DOC_SEV_ERROR, msg);
      doc_.items.push_back(it);
      return true;
    }
    it.fence_line = b.open.idx + 1;
    it.last_line = b.last.idx + 1;
    note_line(b.last.idx);
    it.body = range(b.body_a, b.body_b);
    if (!b.closed) {
      // An input that never ends is not an input, whatever JSON it holds: not
      // checked (a writer streaming a long input into the buffer would have it
      // parsed again on every change), never run.
      it.flags |= FLEMMA_DOC_F_UNCLOSED | FLEMMA_DOC_F_BAD_INPUT;
      it.note = arena("the input block is never closed");
      diag(b.open.idx, FLEMMA_DOC_SEV_ERROR,
           "the input block of " + where() + " is never closed: add a closing " +
               std::string(static_cast<size_t>(std::min(b.fence.len, 64)), b.fence.ch) +
               " line after the JSON");
      doc_.items.push_back(it);
      return true;
    }
    std::string err;
    int32_t err_line = b.open.idx + 1;
    check_json(t_.substr(static_cast<size_t>(b.body_a), static_cast<size_t>(b.body_b - b.body_a)),
               err, err_line);
    if (!err.empty()) {
      it.flags |= FLEMMA_DOC_F_BAD_INPUT;
      it.note = arena(err);
      diag(err_line, FLEMMA_DOC_SEV_ERROR, "the input of " + where() + " is not valid: " + err);
    }
    doc_.items.push_back(it);
    return true;
  }

  struct Sax : nlohmann::json_sax<nlohmann::json> {
    int depth = 0;
    bool first = true;
    bool not_object = false;
    bool too_deep = false;
    bool error = false;
    size_t error_pos = 0;
    std::string message;
    bool scalar() {
      if (first) {
        first = false;
        not_object = true;
        return false;
      }
      return true;
    }
    bool open(bool obj) {
      if (first) {
        first = false;
        if (!obj) {
          not_object = true;
          return false;
        }
      }
      if (++depth > kMaxJsonDepth) {
        too_deep = true;
        return false;
      }
      return true;
    }
    bool null() override { return scalar(); }
    bool boolean(bool) override { return scalar(); }
    bool number_integer(number_integer_t) override { return scalar(); }
    bool number_unsigned(number_unsigned_t) override { return scalar(); }
    bool number_float(number_float_t, const string_t&) override { return scalar(); }
    bool string(string_t&) override { return scalar(); }
    bool binary(binary_t&) override { return scalar(); }
    bool start_object(std::size_t) override { return open(true); }
    bool key(string_t&) override { return true; }
    bool end_object() override {
      --depth;
      return true;
    }
    bool start_array(std::size_t) override { return open(false); }
    bool end_array() override {
      --depth;
      return true;
    }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& ex) override {
      error = true;
      error_pos = position;
      message = ex.what();
      return false;
    }
  };

  static std::string printable(sv s, size_t max) {
    std::string out;
    for (char c : s.substr(0, max)) {
      auto u = static_cast<unsigned char>(c);
      out.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
    }
    if (s.size() > max) out += "...";
    return out;
  }

  // Validates a tool input; on failure sets err (what is wrong and how to fix
  // it) and err_line (0-based) to the line of the problem.
  void check_json(sv body, std::string& err, int32_t& err_line) {
    if (body.find_first_not_of(" \t\r\n\f\v") == sv::npos) {
      err = "the block is empty: write a JSON object, {} if the tool takes no arguments";
      return;
    }
    if (fast_json_object(body)) return;
    Sax sax;
    bool ok = nlohmann::json::sax_parse(body.begin(), body.end(), &sax);
    if (ok && !sax.not_object && !sax.too_deep && !sax.error) return;
    if (sax.not_object) {
      err = "the input is not a JSON object: wrap the arguments in { }";
    } else if (sax.too_deep) {
      err = "the JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels: flatten it";
    } else {
      std::string what = sax.message;
      // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> the part after
      // the location
      size_t colon = what.find(": ");
      if (colon != std::string::npos) what = what.substr(colon + 2);
      size_t pos = std::min(sax.error_pos > 0 ? sax.error_pos - 1 : 0, body.size());
      err_line += static_cast<int32_t>(
          std::count(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
      err = "JSON " + printable(what, 160) + "; fix the JSON between the fences";
    }
  }

  static int status_of(sv w) {
    if (w == "approved") return FLEMMA_DOC_STATUS_APPROVED;
    if (w == "pending") return FLEMMA_DOC_STATUS_PENDING;
    if (w == "denied") return FLEMMA_DOC_STATUS_DENIED;
    if (w == "rejected") return FLEMMA_DOC_STATUS_REJECTED;
    return FLEMMA_DOC_STATUS_UNKNOWN;
  }

  bool tool_result(const Line& l, int32_t& resume_idx, int32_t& resume_start) {
    sv s = rtrim(text_of(l));
    size_t pos = kToolResult.size(), ia, ib;
    skip_spaces(s, pos);
    bool ok = read_ticked(s, pos, ia, ib);
    sv suffix;
    if (ok) {
      skip_spaces(s, pos);
      if (pos < s.size()) {
        ok = s[pos] == '(' && s.back() == ')' && s.size() - pos > 2;
        if (ok) suffix = ltrim(rtrim(s.substr(pos + 1, s.size() - pos - 2)));
      }
    }
    if (!ok) {
      diag(l.idx, FLEMMA_DOC_SEV_ERROR,
           "malformed **Tool Result:** header: write it as **Tool Result:** `ID`, or **Tool "
           "Result:** `ID` (error) "
           "(it is read as plain text until then)");
      return false;
    }
    flush_text();
    note_line(l.idx);
    flemma_doc_item it{};
    it.kind = FLEMMA_DOC_TOOL_RESULT;
    it.first_line = it.last_line = l.idx + 1;
    it.key = slice(s.substr(ia, ib - ia));
    result_ids_.push_back({s.substr(ia, ib - ia), hash_id(s.substr(ia, ib - ia)), l.idx + 1});
    // Built only for a diagnostic: most results have none.
    auto where = [&] { return "tool result `" + std::string(s.substr(ia, ib - ia)) + "`"; };
    if (current_role() != FLEMMA_DOC_USER)
      diag(l.idx, FLEMMA_DOC_SEV_WARNING,
           where() +
               " is outside a @You: message: results are sent by you; move it below a @You: line");
    if (suffix == "error") {
      it.flags |= FLEMMA_DOC_F_ERROR;
    } else if (!suffix.empty()) {
      it.flags |= FLEMMA_DOC_F_LEGACY;
      it.status = status_of(suffix);
      it.note = slice(suffix);
      if (it.status == FLEMMA_DOC_STATUS_UNKNOWN)
        diag(l.idx, FLEMMA_DOC_SEV_ERROR,
             where() + " has an unknown status (" + printable(suffix, 40) +
                 "): use (error), or one of (approved), (pending), (denied), (rejected)");
    }
    Block b = fenced_block(l, resume_idx, resume_start);
    if (!b.found) {
      it.flags |= FLEMMA_DOC_F_NO_FENCE;
      diag(l.idx, FLEMMA_DOC_SEV_ERROR,
           where() +
               " has no fenced block: add a blank line and a fenced block with the output (or a "
               "```flemma:tool "
               "status=pending placeholder)");
      doc_.items.push_back(it);
      return true;
    }
    it.fence_line = b.open.idx + 1;
    it.last_line = b.last.idx + 1;
    note_line(b.last.idx);
    it.label = slice(b.fence.info);
    it.body = range(b.body_a, b.body_b);
    if (!b.closed) {
      it.flags |= FLEMMA_DOC_F_UNCLOSED;
      diag(b.open.idx, FLEMMA_DOC_SEV_ERROR,
           "the block of " + where() + " is never closed: add a closing " +
               std::string(static_cast<size_t>(std::min(b.fence.len, 64)), b.fence.ch) +
               " line after its content");
    }
    sv info = b.fence.info;
    constexpr sv kTag = "flemma:tool";
    if (info.substr(0, kTag.size()) == kTag &&
        (info.size() == kTag.size() || is_blank_char(info[kTag.size()]))) {
      it.flags &= ~FLEMMA_DOC_F_LEGACY;
      sv rest = ltrim(info.substr(kTag.size()));
      sv word;
      while (!rest.empty()) {
        size_t e = 0;
        while (e < rest.size() && !is_blank_char(rest[e])) ++e;
        sv tok = rest.substr(0, e);
        if (tok.substr(0, 7) == "status=") word = tok.substr(7);
        rest = ltrim(rest.substr(e));
      }
      it.note = slice(word);
      it.status = status_of(word);
      if (it.status == FLEMMA_DOC_STATUS_UNKNOWN)
        diag(b.open.idx, FLEMMA_DOC_SEV_ERROR,
             word.empty()
                 ? "placeholder of " + where() +
                       " has no status: write ```flemma:tool status=pending (or approved, denied, "
                       "rejected)"
                 : "placeholder of " + where() + " has an unknown status `" + printable(word, 40) +
                       "`: use approved, pending, denied or rejected");
    }
    doc_.items.push_back(it);
    return true;
  }

  bool thinking(const Line& l, int32_t& resume_idx, int32_t& resume_start) {
    sv s = rtrim(text_of(l));
    if (s.size() < kThinkOpen.size() + 1 || s.back() != '>') return false;
    sv attrs = s.substr(kThinkOpen.size(), s.size() - kThinkOpen.size() - 1);
    if (!attrs.empty() && !is_blank_char(attrs[0])) return false;
    flemma_doc_item it{};
    it.kind = FLEMMA_DOC_THINKING;
    attrs = ltrim(attrs);
    while (!attrs.empty()) {
      size_t e = 0;
      while (e < attrs.size() &&
             (std::isalnum(static_cast<unsigned char>(attrs[e])) || attrs[e] == '_' ||
              attrs[e] == ':' || attrs[e] == '-' || attrs[e] == '.'))
        ++e;
      if (e == 0) return false;
      sv name = attrs.substr(0, e);
      sv value;
      attrs = attrs.substr(e);
      if (!attrs.empty() && attrs[0] == '=') {
        if (attrs.size() < 2 || attrs[1] != '"') return false;
        size_t q = attrs.find('"', 2);
        if (q == sv::npos) return false;
        value = attrs.substr(2, q - 2);
        attrs = attrs.substr(q + 1);
      }
      if (!attrs.empty() && !is_blank_char(attrs[0])) return false;
      attrs = ltrim(attrs);
      constexpr sv kSig = "signature";
      if (name == "redacted") {
        it.flags |= FLEMMA_DOC_F_REDACTED;
      } else if (name == kSig) {
        it.key = slice(value);
      } else if (name.size() > kSig.size() + 1 && name.substr(name.size() - kSig.size()) == kSig &&
                 name[name.size() - kSig.size() - 1] == ':') {
        it.key = slice(value);
        it.label = slice(name.substr(0, name.size() - kSig.size() - 1));
      }
    }
    flush_text();
    note_line(l.idx);
    it.first_line = l.idx + 1;
    size_t m = marker_after(l.idx);
    size_t c = think_close_after(l.idx);
    int32_t marker_line =
        m < markers_.size() ? markers_[m].line : std::numeric_limits<int32_t>::max();
    if (c < think_closes_.size() && think_closes_[c].line < marker_line) {
      const Mark& cm = think_closes_[c];
      it.last_line = cm.line + 1;
      it.body =
          cm.line > l.idx + 1 ? range(l.next, end_before(cm.start)) : flemma_doc_str{cm.start, 0};
      Line cl = line_at(cm.line, cm.start);
      note_line(cl.idx);
      if (cl.next < 0) {
        resume_idx = -1;
      } else {
        resume_idx = cl.idx + 1;
        resume_start = cl.next;
      }
    } else {
      Line last = walk_to_marker(l, resume_idx, resume_start);
      it.flags |= FLEMMA_DOC_F_UNCLOSED;
      it.last_line = last.idx + 1;
      note_line(last.idx);
      it.body = last.idx > l.idx ? range(l.next, last.end) : flemma_doc_str{l.end, 0};
      diag(l.idx, FLEMMA_DOC_SEV_WARNING,
           "this <thinking> block is never closed, so it runs to the end of the message: add a "
           "</thinking> line");
    }
    doc_.items.push_back(it);
    return true;
  }

  // ---- end -----------------------------------------------------------------

  void check_ids() {
    check_id_refs(use_ids_, result_ids_,
                  [&](int32_t line, int sev, const std::string& msg) { diag(line - 1, sev, msg); });
  }

  Document finish() {
    close_message();
    if (check_ids_) check_ids();
    std::stable_sort(
        doc_.diags.begin(), doc_.diags.end(),
        [](const flemma_doc_diag& a, const flemma_doc_diag& b) { return a.line < b.line; });
    return std::move(doc_);
  }
};

}  // namespace

Document parse(sv text) {
  if (text.size() >= kMaxInput)
    throw Error(FLEMMA_E_INVALID,
                "the document is " + std::to_string(text.size() >> 20) +
                    " MiB; documents of 1 GiB or more cannot be parsed: split the conversation");
  return Parser(text, true).run();
}

int role_of_line(std::string_view line) { return role_of(line); }

bool closing_fence(std::string_view line, char& ch, int32_t& len) {
  if (line.empty() || (line[0] != '`' && line[0] != '~' && line[0] != ' ')) return false;
  Fence f = fence_of(line);
  if (!f.closer) return false;
  ch = f.ch;
  len = f.len;
  return true;
}

void check_ids(const std::vector<IdLine>& uses, const std::vector<IdLine>& results,
               const std::function<void(int32_t, int, std::string)>& out) {
  std::vector<IdRef> u, r;
  u.reserve(uses.size());
  r.reserve(results.size());
  for (const IdLine& x : uses) u.push_back({x.id, hash_id(x.id), x.line});
  for (const IdLine& x : results) r.push_back({x.id, hash_id(x.id), x.line});
  check_id_refs(u, r, out);
}

Document parse_region(std::string_view text, int32_t cp_every) {
  if (text.size() >= kMaxInput)
    throw Error(FLEMMA_E_INVALID,
                "the document is " + std::to_string(text.size() >> 20) +
                    " MiB; documents of 1 GiB or more cannot be parsed: split the conversation");
  return Parser(text, false).run(cp_every);
}

Document resume_region(std::string_view text, Document&& prefix, const ResumeFrom& from,
                       Resumed& out) {
  if (text.size() >= kMaxInput)
    throw Error(FLEMMA_E_INVALID,
                "the document is " + std::to_string(text.size() >> 20) +
                    " MiB; documents of 1 GiB or more cannot be parsed: split the conversation");
  out = Resumed{};
  return Parser(text, false).resume(std::move(prefix), from, out);
}

}  // namespace flemma::document
