#include "redact.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

#include "guard.hpp"

namespace flemma::redact {

namespace {

constexpr size_t npos = std::string_view::npos;

// The header names of util.redact, lowercase, in the order its rules run.
constexpr std::array<std::string_view, 3> kNames = {"x-api-key", "authorization", "x-goog-api-key"};
constexpr std::string_view kHeader = "header";
constexpr size_t kLongestName = 14;

// Lua's %s (LuaJIT: ASCII only).
inline bool is_ws(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
inline unsigned char lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c + 32) : c;
}

// ASCII lowercase of n bytes (a loop the compiler vectorizes).
void lower_ascii(const unsigned char* __restrict in, unsigned char* __restrict out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = in[i];
    out[i] = static_cast<unsigned char>(c - 'A') < 26 ? static_cast<unsigned char>(c | 0x20) : c;
  }
}

// Whether t holds `name` (lowercase) at p, in any case.
bool ci_at(std::string_view t, size_t p, std::string_view name) {
  if (p > t.size() || t.size() - p < name.size()) return false;
  for (size_t k = 0; k < name.size(); k++)
    if (lower(static_cast<unsigned char>(t[p + k])) != static_cast<unsigned char>(name[k]))
      return false;
  return true;
}

size_t skip_ws(std::string_view t, size_t i) {
  while (i < t.size() && is_ws(static_cast<unsigned char>(t[i]))) i++;
  return i;
}

// One of the header patterns at p (curl: the `header = "name: value"` form):
// the end of its capture and of its value.
bool match_header(std::string_view t, size_t p, std::string_view name, bool curl, size_t& cap,
                  size_t& end) {
  size_t n = t.size();
  size_t i = p;
  if (curl) {
    if (!ci_at(t, i, kHeader)) return false;
    i = skip_ws(t, i + kHeader.size());
    if (i >= n || t[i] != '=') return false;
    i = skip_ws(t, i + 1);
    if (i >= n || t[i] != '"') return false;
    i = skip_ws(t, i + 1);
  }
  if (!ci_at(t, i, name)) return false;
  i = skip_ws(t, i + name.size());
  if (i >= n || t[i] != ':') return false;
  i = skip_ws(t, i + 1);
  cap = i;
  while (i < n && t[i] != '"' && t[i] != '\n' && (curl || t[i] != '\r')) i++;
  end = i;
  return true;
}

// string.gsub(t, pattern, "%1[redacted]") for one header pattern.
std::string gsub_header(std::string_view t, std::string_view name, bool curl, uint64_t& count) {
  const unsigned char first = curl ? 'h' : static_cast<unsigned char>(name[0]);
  std::string out;
  out.reserve(t.size() + 16);
  size_t p = 0;
  size_t copied = 0;
  while (p < t.size()) {
    size_t cap, end;
    if (lower(static_cast<unsigned char>(t[p])) == first &&
        match_header(t, p, name, curl, cap, end)) {
      out.append(t.data() + copied, cap - copied);
      out.append(kReplacement);
      p = copied = end;
      count++;
    } else {
      p++;
    }
  }
  out.append(t.data() + copied, t.size() - copied);
  return out;
}

bool has_name(std::string_view t) {
  std::string lo(t.size(), '\0');
  lower_ascii(reinterpret_cast<const unsigned char*>(t.data()),
              reinterpret_cast<unsigned char*>(lo.data()), t.size());
  for (auto name : kNames)
    if (lo.find(name) != std::string::npos) return true;
  return false;
}

// The header rules of util.redact over a whole text; `count` counts the values
// replaced.
void redact_headers(std::string& t, uint64_t& count) {
  if (!has_name(t)) return;
  for (auto name : kNames) {
    std::string a = gsub_header(t, name, true, count);
    wipe(t);
    std::string b = gsub_header(a, name, false, count);
    wipe(a);
    t = std::move(b);
  }
}

// One literal value, found with Boyer-Moore-Horspool.
struct Literal {
  std::string v;
  std::array<size_t, 256> shift{};
  std::string carry;   // the end of the text so far that may start the value
  uint64_t count = 0;  // occurrences replaced

  explicit Literal(std::string value) : v(std::move(value)) {
    shift.fill(v.size());
    for (size_t k = 0; k + 1 < v.size(); k++)
      shift[static_cast<unsigned char>(v[k])] = v.size() - 1 - k;
  }
  ~Literal() {
    wipe(v);
    wipe(carry);
    std::memset(shift.data(), 0, sizeof shift);
    asm volatile("" : : "r"(shift.data()) : "memory");
  }
  Literal(Literal&& o) noexcept
      : v(std::move(o.v)), shift(o.shift), carry(std::move(o.carry)), count(o.count) {}
  Literal(const Literal&) = delete;
  Literal& operator=(const Literal&) = delete;
  Literal& operator=(Literal&&) = delete;

  // The first occurrence at or after `from`.
  size_t find(const char* s, size_t n, size_t from) const {
    const size_t L = v.size();
    if (n < L || from > n - L) return npos;
    if (L == 1) {
      const void* hit = std::memchr(s + from, v[0], n - from);
      return hit ? static_cast<size_t>(static_cast<const char*>(hit) - s) : npos;
    }
    const unsigned char last = static_cast<unsigned char>(v[L - 1]);
    size_t i = from;
    while (i <= n - L) {
      unsigned char c = static_cast<unsigned char>(s[i + L - 1]);
      if (c == last && std::memcmp(s + i, v.data(), L - 1) == 0) return i;
      i += shift[c];
    }
    return npos;
  }

  void push(std::string_view in, std::string& out) {
    const char* s;
    size_t n;
    bool own = !carry.empty();
    if (own) {
      carry.append(in);
      s = carry.data();
      n = carry.size();
    } else {
      s = in.data();
      n = in.size();
    }
    const size_t L = v.size();
    size_t pos = 0;
    for (size_t idx; (idx = find(s, n, pos)) != npos;) {
      out.append(s + pos, idx - pos);
      out.append(kReplacement);
      pos = idx + L;
      count++;
    }
    size_t keep = n >= L - 1 ? n - (L - 1) : 0;
    keep = std::max(keep, pos);
    out.append(s + pos, keep - pos);
    if (own)
      carry.erase(0, keep);
    else
      carry.assign(s + keep, n - keep);
  }

  void finish(std::string& out) {
    out.append(carry);
    carry.clear();
  }
};

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(FLEMMA_E_IO, "cannot write " + path + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(w);
  }
}

}  // namespace

void wipe(std::string& s) noexcept {
  if (s.capacity() > 0) {
    s.resize(s.capacity());
    std::memset(s.data(), 0, s.size());
    asm volatile("" : : "r"(s.data()) : "memory");
  }
  s.clear();
}

std::string redact_text(std::string_view text, const std::vector<std::string>& values) {
  std::string t(text);
  for (const auto& v : values) {
    if (v.empty()) continue;
    std::string out;
    size_t from = 0;
    for (size_t s; (s = t.find(v, from)) != std::string::npos;) {
      out.append(t, from, s - from);
      out.append(kReplacement);
      from = s + v.size();
    }
    if (from == 0) continue;
    out.append(t, from, std::string::npos);
    wipe(t);
    t = std::move(out);
  }
  uint64_t count = 0;
  redact_headers(t, count);
  return t;
}

// The header rules streamed: the text is cut where no match of any header rule
// can cross (held back from the start of a match that may still grow, or of a
// partial one at the end) and each part goes through redact_headers.
struct Redactor::Impl {
  std::vector<Literal> lits;
  std::string a, b;    // the literal stages' outputs
  std::string pend;    // the header rules' text not cut yet
  std::string_view t;  // the text being cut: pend, or the piece when nothing was held
  std::string lo;      // t lowercased
  uint64_t header_count = 0;

  ~Impl() {
    wipe(a);
    wipe(b);
    wipe(pend);
    wipe(lo);
  }

  // The start of the prefix `header ws* = ws* " ws*` of the curl form ending at
  // j (with the quote, or without when !need_quote: `header ws*`, `header ws* = ws*`).
  size_t curl_start(size_t j, bool need_quote) const {
    size_t i = j;
    auto back_ws = [&] {
      while (i > 0 && is_ws(static_cast<unsigned char>(t[i - 1]))) i--;
    };
    back_ws();
    if (i > 0 && t[i - 1] == '"') {
      i--;
      back_ws();
      if (!(i > 0 && t[i - 1] == '=')) return npos;
      i--;
      back_ws();
    } else if (need_quote) {
      return npos;
    } else if (i > 0 && t[i - 1] == '=') {
      i--;
      back_ws();
    }
    if (i >= kHeader.size() && lo.compare(i - kHeader.size(), kHeader.size(), kHeader) == 0)
      return i - kHeader.size();
    return npos;
  }

  // Where pend may be cut now, and whether a header name is before it.
  size_t cut(bool& names_before) {
    const size_t e = t.size();
    lo.resize(e);
    lower_ascii(reinterpret_cast<const unsigned char*>(t.data()),
                reinterpret_cast<unsigned char*>(lo.data()), e);
    size_t c = e;
    // A partial match at the end: a name's start, `header` (or its start), the curl
    // form's prefix, that prefix followed by a name's start.
    for (size_t m = 1; m < kLongestName && m <= e; m++) {
      std::string_view tail(lo.data() + e - m, m);
      bool prefix = false;
      for (auto name : kNames) prefix = prefix || (m < name.size() && name.substr(0, m) == tail);
      if (!prefix) continue;
      c = std::min(c, e - m);
      c = std::min(c, curl_start(e - m, true));
    }
    for (size_t k = 1; k < kHeader.size() && k <= e; k++)
      if (std::string_view(lo.data() + e - k, k) == kHeader.substr(0, k)) c = std::min(c, e - k);
    c = std::min(c, curl_start(e, false));
    // The names' matches, from the last: one that may grow or that crosses the cut
    // moves it to its start.
    struct Occ {
      size_t q, len;
    };
    std::vector<Occ> occ;
    for (auto name : kNames)
      for (size_t q = lo.find(name); q != std::string::npos; q = lo.find(name, q + 1))
        occ.push_back({q, name.size()});
    std::sort(occ.begin(), occ.end(), [](const Occ& x, const Occ& y) { return x.q < y.q; });
    for (size_t k = occ.size(); k-- > 0;) {
      size_t q = occ[k].q;
      size_t i = skip_ws(t, q + occ[k].len);
      size_t f;  // the end of its value (e + 1: not known yet)
      if (i >= e) {
        f = e + 1;
      } else if (t[i] != ':') {
        continue;  // no match
      } else {
        i = skip_ws(t, i + 1);
        while (i < e && t[i] != '"' && t[i] != '\n') i++;
        f = i >= e ? e + 1 : i;
      }
      size_t s = std::min(q, curl_start(q, true));
      if (s < c && f > c) c = s;
    }
    names_before = false;
    for (const auto& o : occ) names_before = names_before || o.q + o.len <= c;
    return c;
  }

  void headers_push(std::string_view in, std::string& out) {
    const bool held = !pend.empty();
    if (held) {
      pend.append(in);
      t = pend;
    } else {
      t = in;
    }
    bool names = false;
    size_t c = cut(names);
    if (names) {
      std::string seg(t.substr(0, c));
      redact_headers(seg, header_count);
      out.append(seg);
      wipe(seg);
    } else {
      out.append(t.data(), c);
    }
    if (held)
      pend.erase(0, c);
    else
      pend.assign(t.data() + c, t.size() - c);
    t = {};
    if (pend.size() > kMaxHeld)
      throw Error(FLEMMA_E_INVALID, "redaction: a header's value or whitespace is over " +
                                        std::to_string(kMaxHeld >> 20) + " MiB long");
  }

  void headers_finish(std::string& out) {
    redact_headers(pend, header_count);
    out.append(pend);
    wipe(pend);
  }
};

Redactor::Redactor(std::vector<std::string> values) : impl_(std::make_unique<Impl>()) {
  for (auto& v : values) {
    if (!v.empty()) impl_->lits.emplace_back(std::move(v));
    wipe(v);
  }
}

Redactor::~Redactor() = default;

void Redactor::push(std::string_view piece, std::string& out) {
  Impl& m = *impl_;
  std::string_view cur = piece;
  for (size_t k = 0; k < m.lits.size(); k++) {
    std::string& dst = k % 2 == 0 ? m.a : m.b;
    dst.clear();
    m.lits[k].push(cur, dst);
    cur = dst;
  }
  m.headers_push(cur, out);
}

void Redactor::finish(std::string& out) {
  Impl& m = *impl_;
  std::string_view cur;
  for (size_t k = 0; k < m.lits.size(); k++) {
    std::string& dst = k % 2 == 0 ? m.a : m.b;
    dst.clear();
    m.lits[k].push(cur, dst);
    m.lits[k].finish(dst);
    cur = dst;
  }
  m.headers_push(cur, out);
  m.headers_finish(out);
}

uint64_t Redactor::replacements() const {
  uint64_t n = impl_->header_count;
  for (const auto& l : impl_->lits) n += l.count;
  return n;
}

size_t Redactor::held() const {
  size_t n = impl_->pend.size();
  for (const auto& l : impl_->lits) n += l.carry.size();
  return n;
}

// Copies the first `len` bytes of src to dst (at its offset).
void copy_prefix(int src, int dst, uint64_t len, const std::string& path) {
  off_t off = 0;
  while (static_cast<uint64_t>(off) < len) {
    ssize_t n = ::copy_file_range(src, &off, dst, nullptr, static_cast<size_t>(len - off), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) throw Error(FLEMMA_E_IO, "cannot copy " + path + ": it became shorter");
    break;  // not supported here: read and write
  }
  std::string buf;
  buf.resize(1u << 20);
  while (static_cast<uint64_t>(off) < len) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), len - off));
    ssize_t n = ::pread(src, buf.data(), want, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      wipe(buf);
      throw Error(FLEMMA_E_IO, "cannot copy " + path);
    }
    buf.resize(static_cast<size_t>(n));
    write_all(dst, buf, path);
    buf.resize(1u << 20);
    off += n;
  }
  wipe(buf);
}

FileResult redact_file(const std::string& path, const std::vector<std::string>& values,
                       const std::atomic<bool>& cancel, size_t chunk) {
  FileResult r;
  const std::string tmp = path + ".redacted";
  int src = -1;
  int dst = -1;
  std::string buf;
  std::string out;
  try {
    Redactor red(values);
    src = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (src < 0) throw Error(FLEMMA_E_IO, "cannot read " + path + ": " + std::strerror(errno));
    struct stat st;
    if (::fstat(src, &st) != 0 || !S_ISREG(st.st_mode))
      throw Error(FLEMMA_E_IO, "cannot redact " + path + ": not a regular file");
    // Nothing is written while the text is unchanged (the output so far is the
    // file's start): most outputs hold no secret, and are then only read. At the
    // first change, the new file gets that start and the rest is written to it.
    uint64_t emitted = 0;
    auto put = [&] {
      if (dst < 0 && red.replacements() > 0) {
        dst = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (dst < 0) throw Error(FLEMMA_E_IO, "cannot create " + tmp + ": " + std::strerror(errno));
        copy_prefix(src, dst, emitted, tmp);
      }
      if (dst >= 0) write_all(dst, out, tmp);
      emitted += out.size();
      out.clear();
    };
    buf.resize(chunk > 0 ? chunk : 1u << 20);
    for (;;) {
      if (cancel.load()) {
        r.cancelled = true;
        throw Error(FLEMMA_E_STATE, "redaction of " + path + " cancelled");
      }
      ssize_t got = ::read(src, buf.data(), buf.size());
      if (got < 0) {
        if (errno == EINTR) continue;
        throw Error(FLEMMA_E_IO, "cannot read " + path + ": " + std::strerror(errno));
      }
      if (got == 0) break;
      red.push(std::string_view(buf.data(), static_cast<size_t>(got)), out);
      put();
    }
    red.finish(out);
    put();
    if (dst >= 0) {
      int rc = ::close(dst);
      dst = -1;
      if (rc != 0) throw Error(FLEMMA_E_IO, "cannot write " + tmp + ": " + std::strerror(errno));
      if (::rename(tmp.c_str(), path.c_str()) != 0)
        throw Error(FLEMMA_E_IO, "cannot rename " + tmp + ": " + std::strerror(errno));
    }
    r.ok = true;
  } catch (const std::bad_alloc&) {
    r.error = "out of memory while redacting " + path;
  } catch (const std::exception& e) {
    r.error = e.what();
  } catch (...) {
    r.error = "redaction of " + path + " failed";
  }
  if (src >= 0) ::close(src);
  if (dst >= 0) ::close(dst);
  wipe(buf);
  wipe(out);
  if (!r.ok) {
    ::unlink(tmp.c_str());
    ::unlink(path.c_str());
  }
  return r;
}

}  // namespace flemma::redact
