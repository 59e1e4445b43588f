// The library of the isolated interpreter: every function that could loop for long
// is ours and checks the deadline as it works (every 64 KB of bytes, every few
// thousand pattern steps or table elements); results are built in buffers taken from
// the isolate's arena, so the memory limits hold for them too.
//
// Globals for trusted code (the modules the isolate was created with): Lua's base
// functions minus those that load code, touch the collector or the environment
// (with our pcall, xpcall, tonumber, unpack), `math` (our random), `string`,
// `table`, `os` (time, date), `debug` (getinfo only), `require` and `isolate`
// (load, json_decode, null). Frontmatter code gets a smaller environment, built by
// the runtime module out of these.
#include <time.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "isolate.hpp"
#include "isolate_vm.hpp"
#include "lpattern.hpp"

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

namespace flemma::isolate {

namespace {

constexpr size_t kMeterStep = 4 * 1024;  // bytes of work between two spends
constexpr size_t kStepCost =
    4 * kBytesPerTick;                    // one element moved or compared: a few instructions' work
constexpr size_t kMaxChunk = 256 * 1024;  // bytes of code isolate.load accepts
constexpr int kMaxResults = 8000;         // values a function may return at once

// Raises the limit that stopped the code (the time limit when that is the reason; a
// failed allocation otherwise): Lua's memory error, which no message handler sees.
[[noreturn]] void raise_exhausted(lua_State* L) {
  Isolate& iso = owner(L);
  iso.check_time(L);
  iso.raise_limit(L);
}

// Counts work in bytes (or byte-like units) and spends it from the isolate's countdown
// (isolate_vm.hpp), which reads the clock when it runs out.
class Meter {
 public:
  explicit Meter(lua_State* L) : L_(L) {}
  void add(size_t n) {
    acc_ += n;
    if (acc_ >= kMeterStep) {
      spend(L_, acc_ / kBytesPerTick);
      acc_ = 0;
    }
  }

 private:
  lua_State* L_;
  size_t acc_ = 0;
};

// lua_objlen of a table spends the slots luaH_getn may walk.
size_t objlen(lua_State* L, int idx) {
  spend(L, 1 + table_slots(lua_topointer(L, idx)) / 16);
  return lua_objlen(L, idx);
}

// A growing byte buffer in the isolate's arena, limited to one block.
class Buffer {
 public:
  Buffer(lua_State* L, const char* what) : L_(L), meter_(L), what_(what) {
    f_ = lua_getallocf(L, &ud_);
  }
  ~Buffer() {
    if (p_) f_(ud_, p_, cap_, 0);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void add(const char* s, size_t n) {
    if (n == 0) return;
    reserve(n);
    std::memcpy(p_ + n_, s, n);
    n_ += n;
    meter_.add(n);
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  void add(char c) {
    reserve(1);
    p_[n_++] = c;
    meter_.add(1);
  }
  void reserve(size_t extra) {
    if (extra <= cap_ - n_) return;
    size_t limit = owner(L_).limits().block - 64;
    if (extra > limit || n_ + extra > limit) {
      luaL_error(L_, "%s: the result would be more than %d KB, the most one string may hold", what_,
                 static_cast<int>(owner(L_).limits().block >> 10));
    }
    size_t ncap = std::max(n_ + extra, std::max<size_t>(cap_ * 2, 256));
    if (ncap > limit) ncap = limit;
    void* q = f_(ud_, p_, cap_, ncap);
    if (!q) raise_exhausted(L_);
    p_ = static_cast<char*>(q);
    cap_ = ncap;
  }
  void push() { lua_pushlstring(L_, p_ ? p_ : "", n_); }
  const char* data() const { return p_; }
  void truncate(size_t n) { n_ = std::min(n_, n); }
  size_t size() const { return n_; }

 private:
  lua_State* L_;
  Meter meter_;
  const char* what_;
  lua_Alloc f_;
  void* ud_ = nullptr;
  char* p_ = nullptr;
  size_t n_ = 0;
  size_t cap_ = 0;
};

// An integer argument; out-of-range values are clamped (a position past the end of a
// string behaves like its end), NaN reads as 0.
lua_Integer clamp_int(double d) {
  if (d != d) return 0;
  constexpr double kMax = 9007199254740992.0;
  if (d > kMax) return static_cast<lua_Integer>(kMax);
  if (d < -kMax) return static_cast<lua_Integer>(-kMax);
  return static_cast<lua_Integer>(d);
}
lua_Integer arg_int(lua_State* L, int idx) { return clamp_int(luaL_checknumber(L, idx)); }
lua_Integer opt_int(lua_State* L, int idx, lua_Integer def) {
  return lua_isnoneornil(L, idx) ? def : arg_int(L, idx);
}

lua_Integer posrelat(lua_Integer pos, size_t len) {
  if (pos < 0) pos += static_cast<lua_Integer>(len) + 1;
  return pos >= 0 ? pos : 0;
}

std::string_view check_sv(lua_State* L, int idx) {
  size_t n = 0;
  const char* s = luaL_checklstring(L, idx, &n);
  return {s, n};
}

// ---------------------------------------------------------------------------------
// string
// ---------------------------------------------------------------------------------

int str_len(lua_State* L) {
  lua_pushinteger(L, static_cast<lua_Integer>(check_sv(L, 1).size()));
  return 1;
}

int str_sub(lua_State* L) {
  auto s = check_sv(L, 1);
  lua_Integer l = static_cast<lua_Integer>(s.size());
  lua_Integer i = posrelat(arg_int(L, 2), s.size());
  lua_Integer j = posrelat(opt_int(L, 3, -1), s.size());
  if (i < 1) i = 1;
  if (j > l) j = l;
  if (i <= j) {
    lua_pushlstring(L, s.data() + i - 1, static_cast<size_t>(j - i + 1));
  } else {
    lua_pushliteral(L, "");
  }
  return 1;
}

template <bool Upper>
int str_case(lua_State* L) {
  auto s = check_sv(L, 1);
  Buffer b(L, Upper ? "string.upper" : "string.lower");
  b.reserve(s.size());
  char chunk[4096];
  for (size_t i = 0; i < s.size(); i += sizeof chunk) {
    size_t n = std::min(sizeof chunk, s.size() - i);
    for (size_t k = 0; k < n; k++) {
      unsigned char c = static_cast<unsigned char>(s[i + k]);
      if (Upper && c >= 'a' && c <= 'z') c = static_cast<unsigned char>(c - 32);
      if (!Upper && c >= 'A' && c <= 'Z') c = static_cast<unsigned char>(c + 32);
      chunk[k] = static_cast<char>(c);
    }
    b.add(chunk, n);
  }
  b.push();
  return 1;
}

int str_rep(lua_State* L) {
  auto s = check_sv(L, 1);
  lua_Integer n = arg_int(L, 2);
  std::string_view sep = lua_isnoneornil(L, 3) ? std::string_view() : check_sv(L, 3);
  if (n <= 0 || (s.empty() && sep.empty())) {
    lua_pushliteral(L, "");
    return 1;
  }
  double total = static_cast<double>(n) * static_cast<double>(s.size()) +
                 static_cast<double>(n - 1) * static_cast<double>(sep.size());
  size_t limit = owner(L).limits().block - 64;
  if (total > static_cast<double>(limit)) {
    char msg[160];
    std::snprintf(
        msg, sizeof msg,
        "string.rep: the result would be %.0f bytes, more than the %d KB one string may hold",
        total, static_cast<int>(owner(L).limits().block >> 10));
    return luaL_error(L, "%s", msg);
  }
  // The result is a prefix of (s .. sep) repeated: write one unit, then double it.
  size_t size = static_cast<size_t>(total);
  Buffer b(L, "string.rep");
  b.reserve(size);
  b.add(s);
  b.add(sep);
  while (b.size() < size) b.add(b.data(), std::min(b.size(), size - b.size()));
  b.truncate(size);
  b.push();
  return 1;
}

int str_reverse(lua_State* L) {
  auto s = check_sv(L, 1);
  Buffer b(L, "string.reverse");
  b.reserve(s.size());
  for (size_t i = s.size(); i > 0; i--) b.add(s[i - 1]);
  b.push();
  return 1;
}

int str_byte(lua_State* L) {
  auto s = check_sv(L, 1);
  lua_Integer posi = posrelat(opt_int(L, 2, 1), s.size());
  lua_Integer pose = posrelat(opt_int(L, 3, posi), s.size());
  if (posi <= 0) posi = 1;
  if (pose > static_cast<lua_Integer>(s.size())) pose = static_cast<lua_Integer>(s.size());
  if (posi > pose) return 0;
  lua_Integer n = pose - posi + 1;
  if (n > kMaxResults || !lua_checkstack(L, static_cast<int>(n)))
    return luaL_error(L, "string slice too long");
  for (lua_Integer i = 0; i < n; i++)
    lua_pushinteger(L, static_cast<unsigned char>(s[static_cast<size_t>(posi + i - 1)]));
  return static_cast<int>(n);
}

int str_char(lua_State* L) {
  int n = lua_gettop(L);
  Buffer b(L, "string.char");
  for (int i = 1; i <= n; i++) {
    lua_Integer c = arg_int(L, i);
    luaL_argcheck(L, c >= 0 && c <= 255, i, "invalid value");
    b.add(static_cast<char>(c));
  }
  b.push();
  return 1;
}

void add_quoted(lua_State* L, Buffer& b, int arg) {
  auto s = check_sv(L, arg);
  b.add('"');
  for (char c : s) {
    switch (c) {
      case '"':
      case '\\':
      case '\n':
        b.add('\\');
        b.add(c);
        break;
      case '\r':
        b.add("\\r");
        break;
      case '\0':
        b.add("\\000");
        break;
      default:
        b.add(c);
        break;
    }
  }
  b.add('"');
}

// Reads a conversion of string.format from f[i] (just after its %) to its
// conversion character, which it returns in conv; i moves past it. Returns
// its "%", flags, width and precision. Raises the error Lua's would on a bad one.
std::string format_spec(lua_State* L, std::string_view f, size_t& i, char& conv) {
  size_t start = i;
  while (i < f.size() && std::strchr("-+ #0", f[i]) && f[i] != '\0') i++;
  if (i - start >= 6) luaL_error(L, "invalid format (repeated flags)");
  auto digit = [&] { return i < f.size() && f[i] >= '0' && f[i] <= '9'; };
  if (digit()) i++;
  if (digit()) i++;
  if (i < f.size() && f[i] == '.') {
    i++;
    if (digit()) i++;
    if (digit()) i++;
  }
  if (digit()) luaL_error(L, "invalid format (width or precision too long)");
  if (i >= f.size()) luaL_error(L, "invalid option '%%' to 'format'");
  conv = f[i++];
  std::string spec = "%";
  spec.append(f.substr(start, i - 1 - start));
  return spec;
}

// Adds argument arg formatted by conversion conv (spec: its "%", flags, width
// and precision) to b.
int format_arg(lua_State* L, Buffer& b, char conv, std::string spec, int arg) {
  char out[512];
  int len = 0;
  switch (conv) {
    case 'c': {
      lua_Integer c = arg_int(L, arg);
      spec += 'c';
      len = std::snprintf(out, sizeof out, spec.c_str(),
                          static_cast<int>(static_cast<unsigned char>(c)));
      break;
    }
    case 'd':
    case 'i': {
      double d = luaL_checknumber(L, arg);
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
        return luaL_argerror(L, arg, "number has no integer representation");
      }
      spec += "ll";
      spec += conv;
      len = std::snprintf(out, sizeof out, spec.c_str(), static_cast<long long>(d));
      break;
    }
    case 'o':
    case 'u':
    case 'x':
    case 'X': {
      double d = luaL_checknumber(L, arg);
      if (!(d >= -9223372036854775808.0 && d < 18446744073709551616.0)) {
        return luaL_argerror(L, arg, "number has no integer representation");
      }
      unsigned long long u = d < 0 ? static_cast<unsigned long long>(static_cast<long long>(d))
                                   : static_cast<unsigned long long>(d);
      spec += "ll";
      spec += conv;
      len = std::snprintf(out, sizeof out, spec.c_str(), u);
      break;
    }
    case 'e':
    case 'E':
    case 'f':
    case 'g':
    case 'G': {
      spec += conv;
      len = std::snprintf(out, sizeof out, spec.c_str(),
                          static_cast<double>(luaL_checknumber(L, arg)));
      break;
    }
    case 'q':
      add_quoted(L, b, arg);
      return 0;
    case 's': {
      auto s = check_sv(L, arg);
      if (spec.find('.') == std::string::npos && s.size() >= 100) {
        b.add(s);  // no precision and too long to format: the string as it is
        return 0;
      }
      spec += 's';
      std::string z(s);  // NUL-terminated copy (at most 99 bytes are used)
      len = std::snprintf(out, sizeof out, spec.c_str(), z.c_str());
      break;
    }
    default:
      return luaL_error(L, "invalid option '%%%c' to 'format'", conv);
  }
  if (len < 0) return luaL_error(L, "invalid format");
  b.add(out, std::min<size_t>(static_cast<size_t>(len), sizeof out - 1));
  return 0;
}

int str_format(lua_State* L) {
  int top = lua_gettop(L);
  int arg = 1;
  auto f = check_sv(L, 1);
  Buffer b(L, "string.format");
  size_t i = 0;
  while (i < f.size()) {
    if (f[i] != '%') {
      b.add(f[i++]);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '%') {
      b.add('%');
      i += 2;
      continue;
    }
    i++;
    if (++arg > top) luaL_argerror(L, arg, "no value");
    char conv = 0;
    std::string spec = format_spec(L, f, i, conv);
    format_arg(L, b, conv, std::move(spec), arg);
  }
  b.push();
  return 1;
}

// Pattern matching under the deadline.
class DeadlineBudget : public lpattern::Budget {
 public:
  explicit DeadlineBudget(lua_State* L) : L_(L) {}
  bool keep_going(uint64_t) override { return !owner(L_).past_deadline(); }

 private:
  lua_State* L_;
};

template <class F>
auto pattern_guard(lua_State* L, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const lpattern::PatternError& e) {
    std::string msg = e.what();
    luaL_error(L, "%s", msg.c_str());
  } catch (const lpattern::BudgetExceeded&) {
    raise_exhausted(L);
  }
  throw 0;  // not reached
}

void push_onecapture(lua_State* L, const lpattern::Matcher& m, std::string_view s, int i, size_t ms,
                     size_t me) {
  if (i >= m.level()) {
    if (i != 0) luaL_error(L, "invalid capture index");
    lua_pushlstring(L, s.data() + ms, me - ms);
    return;
  }
  const auto& c = m.capture(i);
  if (c.len == lpattern::kUnfinished) luaL_error(L, "unfinished capture");
  if (c.len == lpattern::kPosition) {
    lua_pushinteger(L, static_cast<lua_Integer>(c.start + 1));
  } else {
    lua_pushlstring(L, s.data() + c.start, static_cast<size_t>(c.len));
  }
}

int push_captures(lua_State* L, const lpattern::Matcher& m, std::string_view s, size_t ms,
                  size_t me, bool whole) {
  int n = (m.level() == 0 && whole) ? 1 : m.level();
  luaL_checkstack(L, n, "too many captures");
  for (int i = 0; i < n; i++) push_onecapture(L, m, s, i, ms, me);
  return n;
}

int find_aux(lua_State* L, bool find) {
  auto s = check_sv(L, 1);
  auto p = check_sv(L, 2);
  lua_Integer init = posrelat(opt_int(L, 3, 1), s.size()) - 1;
  if (init < 0) {
    init = 0;
  } else if (init > static_cast<lua_Integer>(s.size())) {
    init = static_cast<lua_Integer>(s.size());
  }
  if (find && (lua_toboolean(L, 4) || lpattern::is_plain(p))) {
    const void* hit = p.empty() ? s.data() + init
                                : ::memmem(s.data() + init, s.size() - static_cast<size_t>(init),
                                           p.data(), p.size());
    if (hit) {
      size_t at = static_cast<size_t>(static_cast<const char*>(hit) - s.data());
      lua_pushinteger(L, static_cast<lua_Integer>(at + 1));
      lua_pushinteger(L, static_cast<lua_Integer>(at + p.size()));
      return 2;
    }
    lua_pushnil(L);
    return 1;
  }
  return pattern_guard(L, [&]() -> int {
    DeadlineBudget budget(L);
    lpattern::Matcher m(s, p, budget);
    bool anchor = !p.empty() && p[0] == '^';
    size_t s1 = static_cast<size_t>(init);
    do {
      ptrdiff_t e = m.match_at(s1, anchor ? 1 : 0);
      if (e >= 0) {
        if (find) {
          lua_pushinteger(L, static_cast<lua_Integer>(s1 + 1));
          lua_pushinteger(L, static_cast<lua_Integer>(e));
          return push_captures(L, m, s, s1, static_cast<size_t>(e), false) + 2;
        }
        return push_captures(L, m, s, s1, static_cast<size_t>(e), true);
      }
    } while (s1++ < s.size() && !anchor);
    lua_pushnil(L);
    return 1;
  });
}

int str_find(lua_State* L) { return find_aux(L, true); }
int str_match(lua_State* L) { return find_aux(L, false); }

int gmatch_aux(lua_State* L) {
  size_t ls = 0, lp = 0;
  const char* s = lua_tolstring(L, lua_upvalueindex(1), &ls);
  const char* p = lua_tolstring(L, lua_upvalueindex(2), &lp);
  size_t pos = static_cast<size_t>(lua_tonumber(L, lua_upvalueindex(3)));
  std::string_view sv(s, ls), pv(p, lp);
  return pattern_guard(L, [&]() -> int {
    DeadlineBudget budget(L);
    lpattern::Matcher m(sv, pv, budget);
    for (size_t src = pos; src <= ls; src++) {
      ptrdiff_t e = m.match_at(src, 0);
      if (e >= 0) {
        size_t next = static_cast<size_t>(e);
        if (next == src) next++;  // an empty match: move on at least one byte
        lua_pushnumber(L, static_cast<lua_Number>(next));
        lua_replace(L, lua_upvalueindex(3));
        return push_captures(L, m, sv, src, static_cast<size_t>(e), true);
      }
    }
    return 0;
  });
}

int str_gmatch(lua_State* L) {
  luaL_checkstring(L, 1);
  luaL_checkstring(L, 2);
  lua_settop(L, 2);
  lua_pushnumber(L, 0);
  lua_pushcclosure(L, gmatch_aux, 3);
  return 1;
}

void add_value(lua_State* L, Buffer& b, const lpattern::Matcher& m, std::string_view src, size_t ms,
               size_t me, int tr) {
  switch (tr) {
    case LUA_TFUNCTION: {
      lua_pushvalue(L, 3);
      int n = push_captures(L, m, src, ms, me, true);
      lua_call(L, n, 1);
      break;
    }
    case LUA_TTABLE:
      push_onecapture(L, m, src, 0, ms, me);
      lua_gettable(L, 3);
      break;
    default: {  // a string (or number): %0-%9 and %%
      size_t l = 0;
      const char* r = lua_tolstring(L, 3, &l);
      for (size_t i = 0; i < l; i++) {
        if (r[i] != '%') {
          b.add(r[i]);
          continue;
        }
        i++;
        char c = i < l ? r[i] : '\0';
        if (c < '0' || c > '9') {
          b.add(c);
        } else if (c == '0') {
          b.add(src.data() + ms, me - ms);
        } else {
          push_onecapture(L, m, src, c - '1', ms, me);
          size_t vl = 0;
          const char* v = lua_tolstring(L, -1, &vl);
          b.add(v, vl);
          lua_pop(L, 1);
        }
      }
      return;
    }
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    b.add(src.data() + ms, me - ms);  // keep the original text
  } else if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  } else {
    size_t vl = 0;
    const char* v = lua_tolstring(L, -1, &vl);
    b.add(v, vl);
    lua_pop(L, 1);
  }
}

int str_gsub(lua_State* L) {
  auto src = check_sv(L, 1);
  auto p = check_sv(L, 2);
  int tr = lua_type(L, 3);
  lua_Integer max_n = opt_int(L, 4, static_cast<lua_Integer>(src.size()) + 1);
  luaL_argcheck(L,
                tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE,
                3, "string/function/table expected");
  Buffer b(L, "string.gsub");
  lua_Integer n = 0;
  pattern_guard(L, [&]() -> int {
    DeadlineBudget budget(L);
    lpattern::Matcher m(src, p, budget);
    bool anchor = !p.empty() && p[0] == '^';
    size_t pos = 0;
    while (n < max_n) {
      ptrdiff_t e = m.match_at(pos, anchor ? 1 : 0);
      if (e >= 0) {
        n++;
        add_value(L, b, m, src, pos, static_cast<size_t>(e), tr);
      }
      if (e >= 0 && static_cast<size_t>(e) > pos) {
        pos = static_cast<size_t>(e);
      } else if (pos < src.size()) {
        b.add(src[pos++]);
        m.charge(1);
      } else {
        break;
      }
      if (anchor) break;
    }
    b.add(src.data() + pos, src.size() - pos);
    return 0;
  });
  b.push();
  lua_pushinteger(L, n);
  return 2;
}

const luaL_Reg kStringLib[] = {
    {"byte", str_byte},        {"char", str_char},         {"find", str_find},
    {"format", str_format},    {"gmatch", str_gmatch},     {"gsub", str_gsub},
    {"len", str_len},          {"lower", str_case<false>}, {"match", str_match},
    {"rep", str_rep},          {"reverse", str_reverse},   {"sub", str_sub},
    {"upper", str_case<true>}, {nullptr, nullptr}};

// ---------------------------------------------------------------------------------
// table
// ---------------------------------------------------------------------------------

int tab_getn(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushinteger(L, static_cast<lua_Integer>(objlen(L, 1)));
  return 1;
}

int tab_maxn(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  Meter meter(L);
  double max = 0;
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TNUMBER) {
      double v = lua_tonumber(L, -1);
      if (v > max) max = v;
    }
    meter.add(kStepCost);
  }
  lua_pushnumber(L, max);
  return 1;
}

int tab_insert(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer e = static_cast<lua_Integer>(objlen(L, 1)) + 1;
  lua_Integer pos;
  switch (lua_gettop(L)) {
    case 2:
      pos = e;
      break;
    case 3: {
      pos = arg_int(L, 2);
      if (pos > e) e = pos;
      Meter meter(L);
      for (lua_Integer i = e; i > pos; i--) {  // move up elements
        lua_pushnumber(L, static_cast<lua_Number>(i - 1));
        lua_rawget(L, 1);
        lua_pushnumber(L, static_cast<lua_Number>(i));
        lua_insert(L, -2);
        lua_rawset(L, 1);
        meter.add(kStepCost);
      }
      break;
    }
    default:
      return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_pushnumber(L, static_cast<lua_Number>(pos));
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 0;
}

int tab_remove(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer e = static_cast<lua_Integer>(objlen(L, 1));
  lua_Integer pos = opt_int(L, 2, e);
  if (e == 0) return 0;
  lua_pushnumber(L, static_cast<lua_Number>(pos));
  lua_rawget(L, 1);
  Meter meter(L);
  for (; pos < e; pos++) {
    lua_pushnumber(L, static_cast<lua_Number>(pos));
    lua_pushnumber(L, static_cast<lua_Number>(pos + 1));
    lua_rawget(L, 1);
    lua_rawset(L, 1);
    meter.add(kStepCost);
  }
  lua_pushnumber(L, static_cast<lua_Number>(e));
  lua_pushnil(L);
  lua_rawset(L, 1);
  return 1;
}

int tab_concat(lua_State* L) {
  size_t lsep = 0;
  const char* sep = luaL_optlstring(L, 2, "", &lsep);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer i = opt_int(L, 3, 1);
  lua_Integer last = lua_isnoneornil(L, 4) ? static_cast<lua_Integer>(objlen(L, 1)) : arg_int(L, 4);
  Buffer b(L, "table.concat");
  for (; i <= last; i++) {
    lua_pushnumber(L, static_cast<lua_Number>(i));
    lua_rawget(L, 1);
    if (!lua_isstring(L, -1)) {
      return luaL_error(L, "invalid value (at index %lld) in table for 'concat'",
                        static_cast<long long>(i));
    }
    size_t l = 0;
    const char* v = lua_tolstring(L, -1, &l);
    b.add(v, l);
    lua_pop(L, 1);
    if (i != last) b.add(sep, lsep);
  }
  b.push();
  return 1;
}

int tab_unpack(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer i = opt_int(L, 2, 1);
  lua_Integer e = lua_isnoneornil(L, 3) ? static_cast<lua_Integer>(objlen(L, 1)) : arg_int(L, 3);
  if (i > e) return 0;
  lua_Integer n = e - i + 1;
  if (n >= kMaxResults || !lua_checkstack(L, static_cast<int>(n)))
    return luaL_error(L, "too many results to unpack");
  for (lua_Integer k = i; k <= e; k++) {
    lua_pushnumber(L, static_cast<lua_Number>(k));
    lua_rawget(L, 1);
  }
  return static_cast<int>(n);
}

// table.move(a1, f, e, t [, a2]) as in Lua 5.3 / LuaJIT (raw access).
int tab_move(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer f = arg_int(L, 2);
  lua_Integer e = arg_int(L, 3);
  lua_Integer t = arg_int(L, 4);
  int tt = lua_isnoneornil(L, 5) ? 1 : 5;
  luaL_checktype(L, tt, LUA_TTABLE);
  if (e >= f) {
    Meter meter(L);
    bool forward = t > e || t <= f || tt != 1;
    for (lua_Integer k = 0; k <= e - f; k++) {
      lua_Integer from = forward ? f + k : e - k;
      lua_Integer to = forward ? t + k : t + (e - f) - k;
      lua_pushnumber(L, static_cast<lua_Number>(to));
      lua_pushnumber(L, static_cast<lua_Number>(from));
      lua_rawget(L, 1);
      lua_rawset(L, tt);
      meter.add(kStepCost);
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

// table.sort: heapsort (no recursion, O(n log n) comparisons whatever the order
// function does), comparisons through lua_lessthan or the order function.
class Sorter {
 public:
  Sorter(lua_State* L, bool has_cmp) : L_(L), cmp_(has_cmp), meter_(L) {}
  void get(lua_Integer i) { lua_rawgeti(L_, 1, static_cast<int>(i)); }
  void set(lua_Integer i) { lua_rawseti(L_, 1, static_cast<int>(i)); }
  // a[i] < a[j]
  bool less(lua_Integer i, lua_Integer j) {
    meter_.add(kStepCost);
    if (cmp_) {
      lua_pushvalue(L_, 2);
      get(i);
      get(j);
      lua_call(L_, 2, 1);
      bool r = lua_toboolean(L_, -1) != 0;
      lua_pop(L_, 1);
      return r;
    }
    get(i);
    get(j);
    bool r = lua_lessthan(L_, -2, -1) != 0;
    lua_pop(L_, 2);
    return r;
  }
  void swap(lua_Integer i, lua_Integer j) {
    get(i);
    get(j);
    set(i);
    set(j);
  }
  void sift(lua_Integer root, lua_Integer n) {  // 1-based heap over a[1..n]
    for (;;) {
      lua_Integer child = root * 2;
      if (child > n) return;
      if (child + 1 <= n && less(child, child + 1)) child++;
      if (!less(root, child)) return;
      swap(root, child);
      root = child;
    }
  }

 private:
  lua_State* L_;
  bool cmp_;
  Meter meter_;
};

int tab_sort(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = static_cast<lua_Integer>(objlen(L, 1));
  if (n > INT_MAX / 2) return luaL_error(L, "array too big");
  bool has_cmp = !lua_isnoneornil(L, 2);
  if (has_cmp) luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  luaL_checkstack(L, 8, "table.sort");
  Sorter s(L, has_cmp);
  for (lua_Integer i = n / 2; i >= 1; i--) s.sift(i, n);
  for (lua_Integer end = n; end > 1; end--) {
    s.swap(1, end);
    s.sift(1, end - 1);
  }
  return 0;
}

const luaL_Reg kTableLib[] = {
    {"concat", tab_concat}, {"getn", tab_getn},     {"insert", tab_insert},
    {"maxn", tab_maxn},     {"move", tab_move},     {"remove", tab_remove},
    {"sort", tab_sort},     {"unpack", tab_unpack}, {nullptr, nullptr}};

// ---------------------------------------------------------------------------------
// os.time, os.date
// ---------------------------------------------------------------------------------

void set_field(lua_State* L, const char* key, int value) {
  lua_pushinteger(L, value);
  lua_setfield(L, -2, key);
}

int get_field(lua_State* L, const char* key, int d) {
  lua_getfield(L, -1, key);
  int res;
  if (lua_isnumber(L, -1)) {
    double v = lua_tonumber(L, -1);
    if (!(v >= INT_MIN && v <= INT_MAX)) luaL_error(L, "field '%s' is out of range", key);
    res = static_cast<int>(v);
  } else {
    if (d < 0) luaL_error(L, "field '%s' missing in date table", key);
    res = d;
  }
  lua_pop(L, 1);
  return res;
}

int os_time(lua_State* L) {
  time_t t;
  if (lua_isnoneornil(L, 1)) {
    t = time(nullptr);
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    struct tm ts {};
    ts.tm_sec = get_field(L, "sec", 0);
    ts.tm_min = get_field(L, "min", 0);
    ts.tm_hour = get_field(L, "hour", 12);
    ts.tm_mday = get_field(L, "day", -1);
    ts.tm_mon = get_field(L, "month", -1) - 1;
    ts.tm_year = get_field(L, "year", -1) - 1900;
    lua_getfield(L, -1, "isdst");
    ts.tm_isdst = lua_isnil(L, -1) ? -1 : lua_toboolean(L, -1);
    lua_pop(L, 1);
    t = mktime(&ts);
  }
  if (t == static_cast<time_t>(-1)) {
    lua_pushnil(L);
  } else {
    lua_pushnumber(L, static_cast<lua_Number>(t));
  }
  return 1;
}

int os_date(lua_State* L) {
  auto fmt = lua_isnoneornil(L, 1) ? std::string_view("%c") : check_sv(L, 1);
  double when = lua_isnoneornil(L, 2) ? static_cast<double>(time(nullptr)) : luaL_checknumber(L, 2);
  if (!(when >= -67768040609740800.0 && when <= 67768036191676800.0))
    return luaL_argerror(L, 2, "time out of range");
  time_t t = static_cast<time_t>(when);
  struct tm stm {};
  struct tm* st;
  if (!fmt.empty() && fmt[0] == '!') {
    st = gmtime_r(&t, &stm);
    fmt.remove_prefix(1);
  } else {
    st = localtime_r(&t, &stm);
  }
  if (!st) {
    lua_pushnil(L);
    return 1;
  }
  if (fmt.substr(0, 2) == "*t") {
    lua_createtable(L, 0, 9);
    set_field(L, "sec", st->tm_sec);
    set_field(L, "min", st->tm_min);
    set_field(L, "hour", st->tm_hour);
    set_field(L, "day", st->tm_mday);
    set_field(L, "month", st->tm_mon + 1);
    set_field(L, "year", st->tm_year + 1900);
    set_field(L, "wday", st->tm_wday + 1);
    set_field(L, "yday", st->tm_yday + 1);
    lua_pushboolean(L, st->tm_isdst);
    lua_setfield(L, -2, "isdst");
    return 1;
  }
  Buffer b(L, "os.date");
  Meter meter(L);
  for (size_t i = 0; i < fmt.size(); i++) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      b.add(fmt[i]);
      continue;
    }
    char conv[3] = {'%', fmt[++i], '\0'};
    char out[256];
    size_t n = strftime(out, sizeof out, conv, st);
    b.add(out, n);
    meter.add(256);  // a conversion costs like copying its largest output
  }
  b.push();
  return 1;
}

// ---------------------------------------------------------------------------------
// base, math, debug, isolate
// ---------------------------------------------------------------------------------

// pcall and xpcall that do not swallow a limit: once the code ran out of time or
// memory, the error goes on up whatever catches it.
int base_pcall(lua_State* L) {
  luaL_checkany(L, 1);
  int status = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  if (!owner(L).exhausted().empty()) raise_exhausted(L);
  lua_pushboolean(L, status == 0);
  lua_insert(L, 1);
  return lua_gettop(L);
}

int base_xpcall(lua_State* L) {
  luaL_checkany(L, 2);
  int n = lua_gettop(L);
  lua_pushvalue(L, 2);  // handler below the function
  lua_pushvalue(L, 1);
  for (int i = 3; i <= n; i++) lua_pushvalue(L, i);
  int base = n + 1;
  int status = lua_pcall(L, n - 2, LUA_MULTRET, base);
  if (!owner(L).exhausted().empty()) raise_exhausted(L);
  lua_pushboolean(L, status == 0);
  lua_replace(L, base);  // over the handler
  return lua_gettop(L) - base + 1;
}

int base_tonumber(lua_State* L) {
  if (lua_isnoneornil(L, 2)) {
    luaL_checkany(L, 1);
    if (lua_isnumber(L, 1)) {  // numbers from strings go through isolate_strtod
      lua_pushnumber(L, lua_tonumber(L, 1));
      return 1;
    }
    lua_pushnil(L);
    return 1;
  }
  lua_Integer base = arg_int(L, 2);
  auto s = check_sv(L, 1);
  luaL_argcheck(L, 2 <= base && base <= 36, 2, "base out of range");
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (i < s.size() && space(s[i])) i++;
  bool neg = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  size_t digits = 0;
  double n = 0;
  for (; i < s.size(); i++, digits++) {
    char c = s[i];
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'z') ? c - 'a' + 10
            : (c >= 'A' && c <= 'Z') ? c - 'A' + 10
                                     : 99;
    if (d >= base) break;
    n = n * static_cast<double>(base) + d;
  }
  while (i < s.size() && space(s[i])) i++;
  if (digits == 0 || i != s.size()) {
    lua_pushnil(L);
  } else {
    lua_pushnumber(L, neg ? -n : n);
  }
  return 1;
}

int math_random(lua_State* L) {
  Isolate& iso = owner(L);
  double r = static_cast<double>(iso.random_next() >> 11) * (1.0 / 9007199254740992.0);
  switch (lua_gettop(L)) {
    case 0:
      lua_pushnumber(L, r);
      break;
    case 1: {
      lua_Integer u = arg_int(L, 1);
      luaL_argcheck(L, 1 <= u, 1, "interval is empty");
      lua_pushnumber(L, std::floor(r * static_cast<double>(u)) + 1);
      break;
    }
    case 2: {
      lua_Integer l = arg_int(L, 1);
      lua_Integer u = arg_int(L, 2);
      luaL_argcheck(L, l <= u, 2, "interval is empty");
      lua_pushnumber(L, std::floor(r * (static_cast<double>(u) - static_cast<double>(l) + 1)) +
                            static_cast<double>(l));
      break;
    }
    default:
      return luaL_error(L, "wrong number of arguments");
  }
  return 1;
}

int math_randomseed(lua_State* L) {
  owner(L).random_seed(luaL_checknumber(L, 1));
  return 0;
}

// debug.getinfo(level, what): { source, short_src, currentline } (what is ignored).
int debug_getinfo(lua_State* L) {
  lua_Debug ar;
  lua_Integer level = arg_int(L, 1);
  if (level < 0 || level > 1000 || !lua_getstack(L, static_cast<int>(level), &ar)) {
    lua_pushnil(L);
    return 1;
  }
  lua_getinfo(L, "Sl", &ar);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, ar.source ? ar.source : "?");
  lua_setfield(L, -2, "source");
  lua_pushstring(L, ar.short_src);
  lua_setfield(L, -2, "short_src");
  lua_pushinteger(L, ar.currentline);
  lua_setfield(L, -2, "currentline");
  return 1;
}

// isolate.load(code, chunkname, env): a function running `code` (text only) with
// `env` as its globals; nil, message on a syntax error. Lines of this chunk name the
// place in limit errors.
int iso_load(lua_State* L) {
  auto code = check_sv(L, 1);
  const char* name = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (!code.empty() && code[0] == '\x1b') {
    lua_pushnil(L);
    lua_pushstring(L, "precompiled chunks are not accepted");
    return 2;
  }
  if (code.size() > kMaxChunk) {
    lua_pushnil(L);
    lua_pushfstring(L, "the code is larger than %d KB", static_cast<int>(kMaxChunk / 1024));
    return 2;
  }
  owner(L).add_user_chunk(name);
  const int status = luaL_loadbuffer(L, code.data(), code.size(), name);
  if (!owner(L).exhausted().empty())
    raise_exhausted(L);  // a limit stopped the parser: it goes on up
  if (status != 0) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  lua_pushvalue(L, 3);
  lua_setfenv(L, -2);
  return 1;
}

// isolate.json_decode(text): the value, with JSON null as isolate.null; nil, message
// when the text is not JSON.
int iso_json_decode(lua_State* L) {
  auto text = check_sv(L, 1);
  if (text.size() > kMaxChunk) {
    lua_pushnil(L);
    lua_pushfstring(L, "the JSON is larger than %d KB", static_cast<int>(kMaxChunk / 1024));
    return 2;
  }
  nlohmann::json v;
  std::string err;
  try {
    v = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    err = e.what();
    size_t at = err.find("] ");  // drop "[json.exception.parse_error.101] "
    if (at != std::string::npos) err = err.substr(at + 2);
  }
  if (!err.empty()) {
    lua_pushnil(L);
    lua_pushlstring(L, err.data(), std::min<size_t>(err.size(), 500));
    return 2;
  }
  push_json(L, v, 0, true);
  return 1;
}

void new_lib(lua_State* L, const char* name, const luaL_Reg* fns) {
  lua_newtable(L);
  for (; fns->name; fns++) {
    lua_pushcfunction(L, fns->func);
    lua_setfield(L, -2, fns->name);
  }
  lua_setglobal(L, name);
}

void set_global_fn(lua_State* L, const char* name, lua_CFunction fn) {
  lua_pushcfunction(L, fn);
  lua_setglobal(L, name);
}

}  // namespace

void open_library(lua_State* L) {
  lua_pushcfunction(L, luaopen_base);
  lua_pushliteral(L, "");
  lua_call(L, 1, 0);
  for (const char* name : {"dofile", "loadfile", "load", "loadstring", "print", "collectgarbage",
                           "gcinfo", "getfenv", "setfenv", "newproxy", "coroutine", "module"}) {
    lua_pushnil(L);
    lua_setglobal(L, name);
  }
  set_global_fn(L, "pcall", base_pcall);
  set_global_fn(L, "xpcall", base_xpcall);
  set_global_fn(L, "tonumber", base_tonumber);
  set_global_fn(L, "unpack", tab_unpack);

  lua_pushcfunction(L, luaopen_math);
  lua_pushliteral(L, "math");
  lua_call(L, 1, 0);
  lua_getglobal(L, "math");
  lua_pushcfunction(L, math_random);
  lua_setfield(L, -2, "random");
  lua_pushcfunction(L, math_randomseed);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);

  new_lib(L, "string", kStringLib);
  // Strings index the string library (trusted code only reaches this table).
  lua_pushliteral(L, "");
  lua_createtable(L, 0, 1);
  lua_getglobal(L, "string");
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);

  new_lib(L, "table", kTableLib);

  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, os_time);
  lua_setfield(L, -2, "time");
  lua_pushcfunction(L, os_date);
  lua_setfield(L, -2, "date");
  lua_setglobal(L, "os");

  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, debug_getinfo);
  lua_setfield(L, -2, "getinfo");
  lua_setglobal(L, "debug");

  lua_createtable(L, 0, 3);
  lua_pushcfunction(L, iso_load);
  lua_setfield(L, -2, "load");
  lua_pushcfunction(L, iso_json_decode);
  lua_setfield(L, -2, "json_decode");
  lua_pushlightuserdata(L, nullptr);
  lua_setfield(L, -2, "null");
  lua_pushinteger(L, static_cast<lua_Integer>(owner(L).limits().time_ms));
  lua_setfield(L, -2, "time_limit_ms");
  lua_pushinteger(L, static_cast<lua_Integer>(owner(L).limits().memory >> 20));
  lua_setfield(L, -2, "memory_limit_mb");
  lua_setglobal(L, "isolate");
}

}  // namespace flemma::isolate
