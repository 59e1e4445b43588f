// The isolated Lua interpreter: arena, limits, hook, JSON in and out. See isolate.hpp.
#include "isolate.hpp"

#include <algorithm>
#include <locale.h>
#include <time.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "guard.hpp"
#include "isolate_vm.hpp"

// Lua is compiled as C++ (see CMakeLists.txt): its names have C++ linkage.
#include "lauxlib.h"
#include "lua.h"

namespace flemma::isolate {

namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;  // nesting of data crossing the boundary
constexpr size_t kMaxMessage = 2000;
const char* const kEntryKey = "flemma.isolate.entry";

// Library code inside the isolate uses the C locale (character classes, strcoll in
// string comparisons, the decimal point), whatever the locale of the process.
class LocaleGuard {
 public:
  LocaleGuard() {
    c_ = newlocale(LC_ALL_MASK, "C",
                   static_cast<locale_t>(0));  // NOLINT(modernize-use-nullptr): POSIX's "no locale"
    if (c_) prev_ = uselocale(c_);
  }
  ~LocaleGuard() {
    if (c_) {
      uselocale(prev_);
      freelocale(c_);
    }
  }
  LocaleGuard(const LocaleGuard&) = delete;
  LocaleGuard& operator=(const LocaleGuard&) = delete;

 private:
  locale_t c_ = static_cast<locale_t>(0);     // NOLINT(modernize-use-nullptr): POSIX's "no locale"
  locale_t prev_ = static_cast<locale_t>(0);  // NOLINT(modernize-use-nullptr): POSIX's "no locale"
};

void* alloc_fn(void* ud, void* ptr, size_t osize, size_t nsize) {
  return static_cast<Isolate*>(ud)->arena_mutable().realloc(ptr, osize, nsize);
}

// The state of the isolate running on this thread (the VM's string comparisons
// charge it: l_strcmp has no lua_State at hand).
thread_local lua_State* t_running = nullptr;

class Running {
 public:
  explicit Running(lua_State* L) : prev_(t_running) { t_running = L; }
  ~Running() { t_running = prev_; }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  lua_State* prev_;
};

int panic_fn(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  throw Error(FLEMMA_E_INTERNAL,
              std::string("isolated interpreter: unprotected error: ") + (msg ? msg : "?"));
}

// The count hook only keeps Lua's count check of luaV_execute armed: lvm_bounded.cpp
// sends that check to tick(), never to a hook (which Lua skips while a hook runs).
void hook_fn(lua_State* L, lua_Debug*) { owner(L).check_time(L); }

std::string clip(std::string s) {
  if (s.size() > kMaxMessage) {
    size_t n = kMaxMessage;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
      n--;  // not inside a UTF-8 sequence
    s.resize(n);
    s += "…";
  }
  return s;
}

// The text of an error value on top of the stack (never runs a __tostring).
std::string error_text(lua_State* L, int status) {
  if (status == LUA_ERRMEM) return "not enough memory";
  int t = lua_type(L, -1);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    size_t n = 0;
    lua_pushvalue(L, -1);
    const char* s = lua_tolstring(L, -1, &n);
    std::string out(s, n);
    lua_pop(L, 1);
    return clip(out);
  }
  if (t == LUA_TNONE || t == LUA_TNIL) return "an error without a message (nil)";
  return std::string("a ") + lua_typename(L, t) + " was raised as an error";
}

}  // namespace

void push_json(lua_State* L, const json& v, int depth, bool null_sentinel) {
  if (depth > kMaxDepth) luaL_error(L, "data nested deeper than %d levels", kMaxDepth);
  luaL_checkstack(L, 4, "data nested too deeply");
  switch (v.type()) {
    case json::value_t::null:
      if (null_sentinel) {
        lua_pushlightuserdata(L, nullptr);
      } else {
        lua_pushnil(L);
      }
      return;
    case json::value_t::boolean:
      lua_pushboolean(L, v.get<bool>());
      return;
    case json::value_t::number_integer:
      lua_pushnumber(L, static_cast<lua_Number>(v.get<int64_t>()));
      return;
    case json::value_t::number_unsigned:
      lua_pushnumber(L, static_cast<lua_Number>(v.get<uint64_t>()));
      return;
    case json::value_t::number_float:
      lua_pushnumber(L, v.get<double>());
      return;
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      lua_pushlstring(L, s.data(), s.size());
      return;
    }
    case json::value_t::array: {
      lua_createtable(L, static_cast<int>(std::min<size_t>(v.size(), 1u << 16)), 0);
      int i = 1;
      for (const auto& item : v) {
        push_json(L, item, depth + 1, null_sentinel);
        lua_rawseti(L, -2, i++);
      }
      return;
    }
    case json::value_t::object: {
      lua_createtable(L, 0, static_cast<int>(std::min<size_t>(v.size(), 1u << 16)));
      for (auto it = v.begin(); it != v.end(); ++it) {
        lua_pushlstring(L, it.key().data(), it.key().size());
        push_json(L, it.value(), depth + 1, null_sentinel);
        lua_rawset(L, -3);
      }
      return;
    }
    default:
      lua_pushnil(L);
      return;
  }
}

namespace {

// Plain data only: nil, booleans, finite numbers, strings, tables of them (a table is an
// array when its keys are exactly 1..n, else an object with string keys).
json to_json(lua_State* L, int idx, int depth, size_t& budget) {
  if (depth > kMaxDepth) luaL_error(L, "data nested deeper than %d levels", kMaxDepth);
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return nullptr;
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) != 0;
    case LUA_TNUMBER: {
      double d = lua_tonumber(L, idx);
      if (!std::isfinite(d))
        luaL_error(L, "a NaN or infinite number cannot leave the isolated interpreter");
      if (d == std::floor(d) && std::fabs(d) < 9007199254740992.0) return static_cast<int64_t>(d);
      return d;
    }
    case LUA_TSTRING: {
      size_t n = 0;
      const char* s = lua_tolstring(L, idx, &n);
      if (n + 2 > budget)
        luaL_error(L, "the result is larger than %d bytes",
                   static_cast<int>(owner(L).limits().result));
      budget -= n + 2;
      return std::string(s, n);
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == nullptr) return nullptr;
      break;
    case LUA_TTABLE: {
      luaL_checkstack(L, 4, "data nested too deeply");
      size_t n = lua_objlen(L, idx);
      size_t count = 0;
      bool array = true;
      lua_pushnil(L);
      while (lua_next(L, idx) != 0) {
        count++;
        if (lua_type(L, -2) != LUA_TNUMBER) {
          array = false;
        } else {
          double k = lua_tonumber(L, -2);
          if (k != std::floor(k) || k < 1 || k > static_cast<double>(n)) array = false;
        }
        lua_pop(L, 1);
      }
      if (budget < count + 2)
        luaL_error(L, "the result is larger than %d bytes",
                   static_cast<int>(owner(L).limits().result));
      budget -= count + 2;
      if (array && count == n) {
        json out = json::array();
        for (size_t i = 1; i <= n; i++) {
          lua_rawgeti(L, idx, static_cast<int>(i));
          out.push_back(to_json(L, -1, depth + 1, budget));
          lua_pop(L, 1);
        }
        return out;
      }
      json out = json::object();
      lua_pushnil(L);
      while (lua_next(L, idx) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING)
          luaL_error(L, "a table with a %s key cannot leave the isolated interpreter",
                     luaL_typename(L, -2));
        size_t kn = 0;
        const char* k = lua_tolstring(L, -2, &kn);
        if (kn + 4 > budget)
          luaL_error(L, "the result is larger than %d bytes",
                     static_cast<int>(owner(L).limits().result));
        budget -= kn + 4;
        out[std::string(k, kn)] = to_json(L, -1, depth + 1, budget);
        lua_pop(L, 1);
      }
      return out;
    }
    default:
      break;
  }
  luaL_error(L, "a %s cannot leave the isolated interpreter", luaL_typename(L, idx));
  return nullptr;
}

struct CallCtx {
  Isolate* self;
  std::string fn;
  const json* args;
  json values;
};

struct InitCtx {
  Isolate* self;
  const std::vector<std::pair<std::string, std::string>>* modules;
  const std::string* main;
};

int require_fn(lua_State* L) {
  const char* name = luaL_checkstring(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "flemma.isolate.loaded");
  lua_getfield(L, -1, name);
  if (!lua_isnil(L, -1)) return 1;
  lua_pop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "flemma.isolate.preload");
  lua_getfield(L, -1, name);
  if (lua_isnil(L, -1))
    return luaL_error(L, "module '%s' not found in the isolated interpreter", name);
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, -4, name);  // loaded[name]
  return 1;
}

// Compiled trusted modules, by source text: the next isolates load the bytecode
// instead of parsing again (only ever bytecode we dumped ourselves; code from users
// is text only, see isolate.load).
std::mutex g_code_mutex;
std::unordered_map<std::string, std::string> g_code;

int dump_writer(lua_State*, const void* p, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(static_cast<const char*>(p), n);
  return 0;
}

int init_fn(lua_State* L) {
  auto* ctx = static_cast<InitCtx*>(lua_touserdata(L, 1));
  open_library(L);
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "flemma.isolate.loaded");
  lua_newtable(L);
  for (const auto& [name, source] : *ctx->modules) {
    std::string chunkname = "=" + name;
    if (!source.empty() && source[0] == '\x1b')
      return luaL_error(L, "module %s: precompiled code is not accepted", name.c_str());
    std::string cached;
    {
      std::lock_guard<std::mutex> lock(g_code_mutex);
      auto it = g_code.find(source);
      if (it != g_code.end()) cached = it->second;
    }
    if (!cached.empty()) {
      if (luaL_loadbuffer(L, cached.data(), cached.size(), chunkname.c_str()) != 0)
        return lua_error(L);
    } else {
      if (luaL_loadbuffer(L, source.data(), source.size(), chunkname.c_str()) != 0)
        return lua_error(L);
      std::string code;
      lua_dump(L, dump_writer, &code);
      std::lock_guard<std::mutex> lock(g_code_mutex);
      if (g_code.size() > 64) g_code.clear();
      g_code.emplace(source, std::move(code));
    }
    lua_setfield(L, -2, name.c_str());
  }
  lua_setfield(L, LUA_REGISTRYINDEX, "flemma.isolate.preload");
  lua_pushcfunction(L, require_fn);
  lua_setglobal(L, "require");
  lua_pushcfunction(L, require_fn);
  lua_pushstring(L, ctx->main->c_str());
  lua_call(L, 1, 1);
  if (!lua_istable(L, -1))
    return luaL_error(L, "module %s should return a table of entry points", ctx->main->c_str());
  lua_setfield(L, LUA_REGISTRYINDEX, kEntryKey);
  return 0;
}

}  // namespace

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Isolate& owner(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return *static_cast<Isolate*>(ud);
}

// ---------------------------------------------------------------------------------
// Arena
// ---------------------------------------------------------------------------------

namespace {
// Slabs of freed arenas, kept for the next ones: memory the process has already
// touched (a fresh page costs a page fault, slow on some virtual machines), so a
// normal evaluation allocates no new pages at all.
constexpr size_t kPooledSlabs = 64;
std::mutex g_pool_mutex;
struct SlabPool : std::vector<void*> {
  ~SlabPool() {
    for (void* s : *this) std::free(s);
  }
};
SlabPool g_pool;

void* take_slab(size_t size) {
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (!g_pool.empty()) {
      void* s = g_pool.back();
      g_pool.pop_back();
      return s;
    }
  }
  return std::malloc(size);
}

void give_slabs(std::vector<void*>& slabs) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  for (void* s : slabs) {
    if (g_pool.size() < kPooledSlabs) {
      g_pool.push_back(s);
    } else {
      std::free(s);
    }
  }
  slabs.clear();
}
}  // namespace

Arena::~Arena() {
  // Memory goes back to the system slowly on some machines (heap trimming, TLB
  // flushes): a few slabs are kept for the next arenas, anything large is freed on a
  // short-lived thread, never on the caller's (the editor's main loop).
  std::vector<void*> drop;
  size_t drop_bytes = 0;
  try {
    give_slabs(slabs_);
    for (Large* b = large_; b; b = b->next_all) {
      drop.push_back(b);
      drop_bytes += b->cap;
    }
  } catch (...) {
    for (void* s : slabs_) std::free(s);
    for (Large* b = large_; b;) {
      Large* next = b->next_all;
      std::free(b);
      b = next;
    }
    return;
  }
  if (drop_bytes < (256u << 10)) {
    for (void* p : drop) std::free(p);
    return;
  }
  try {
    std::thread([blocks = std::move(drop)] {
      for (void* p : blocks) std::free(p);
    }).detach();
  } catch (...) {
    for (void* p : drop) std::free(p);
  }
}

bool Arena::admit(size_t bytes, size_t n) {
  const Limits& lim = owner_.limits();
  if (n > lim.block) {
    owner_.exhaust(
        ("needed " + std::to_string(n) + " bytes for one string or table, more than the " +
         std::to_string(lim.block >> 10) + " KB one may hold, and was stopped")
            .c_str(),
        "memory");
    return false;
  }
  if (charged_ + bytes > lim.memory) {
    owner_.exhaust(
        ("used more than " + std::to_string(lim.memory >> 20) + " MB of memory and was stopped")
            .c_str(),
        "memory");
    return false;
  }
  if (live_ >= lim.objects) {
    owner_.exhaust(
        ("made more than " + std::to_string(lim.objects) + " objects and was stopped").c_str(),
        "memory");
    return false;
  }
  return !owner_.time_up();
}

namespace {
int large_class(size_t n, size_t& cap) {
  int k = 10;
  cap = size_t(1) << k;
  while (cap < n) {
    cap <<= 1;
    k++;
  }
  return k;
}
}  // namespace

void* Arena::alloc(size_t n) {
  if (n <= kMaxSmall) {
    size_t cls = (n + kStep - 1) / kStep;
    if (live_ >= owner_.limits().objects && !admit(0, n)) return nullptr;
    void* p = free_[cls];
    if (p) {
      free_[cls] = *static_cast<void**>(p);
    } else {
      size_t size = cls * kStep;
      if (left_ < size) {
        if (!admit(kSlab, n)) return nullptr;
        void* slab = take_slab(kSlab);
        if (!slab) return nullptr;
        try {
          slabs_.push_back(slab);
        } catch (...) {
          std::free(slab);
          return nullptr;
        }
        charged_ += kSlab;
        if (charged_ > peak_) peak_ = charged_;
        cur_ = static_cast<char*>(slab);
        left_ = kSlab;
      }
      p = cur_;
      cur_ += size;
      left_ -= size;
    }
    live_++;
    return p;
  }
  size_t cap = 0;
  int k = n > owner_.limits().block ? kLargeClasses : large_class(n, cap);
  if (k < kLargeClasses && free_large_[k]) {
    if (live_ >= owner_.limits().objects && !admit(0, n)) return nullptr;
    Large* b = free_large_[k];
    free_large_[k] = b->next_free;
    live_++;
    return b + 1;
  }
  size_t bytes = cap + sizeof(Large) + 16;
  if (!admit(bytes, n)) return nullptr;
  auto* b = static_cast<Large*>(std::malloc(sizeof(Large) + cap));
  if (!b) return nullptr;
  b->next_all = large_;
  b->next_free = nullptr;
  b->cap = cap;
  large_ = b;
  charged_ += bytes;
  if (charged_ > peak_) peak_ = charged_;
  live_++;
  return b + 1;
}

void Arena::release(void* p, size_t n) {
  live_--;
  if (n <= kMaxSmall) {
    size_t cls = (n + kStep - 1) / kStep;
    if (cls == 0) cls = 1;
    *static_cast<void**>(p) = free_[cls];
    free_[cls] = p;
    return;
  }
  Large* b = static_cast<Large*>(p) - 1;
  size_t cap = 0;
  int k = large_class(b->cap, cap);
  b->next_free = free_large_[k];
  free_large_[k] = b;
}

void* Arena::realloc(void* ptr, size_t osize, size_t nsize) {
  if (nsize == 0) {
    if (ptr) release(ptr, osize);
    return nullptr;
  }
  // A large block is filled (copied, hashed) by whoever asked for it: that work spends
  // from the countdown, even when a freed block of its size is at hand.
  if (nsize > kMaxSmall && owner_.state()) charge(owner_.state(), nsize / kBytesPerTick);
  if (nsize < kStep) nsize = kStep;  // every block can hold a free-list link
  if (ptr && osize < kStep) osize = kStep;
  if (ptr && osize <= kMaxSmall && nsize <= kMaxSmall &&
      (osize + kStep - 1) / kStep == (nsize + kStep - 1) / kStep) {
    return ptr;
  }
  if (ptr && osize > kMaxSmall && nsize > kMaxSmall &&
      nsize <= (static_cast<Large*>(ptr) - 1)->cap) {
    return ptr;  // a large block that still fits its power of two
  }
  void* q = alloc(nsize);
  if (!q) return nullptr;
  if (ptr) {
    std::memcpy(q, ptr, std::min(osize, nsize));
    release(ptr, osize);
  }
  return q;
}

// ---------------------------------------------------------------------------------
// Isolate
// ---------------------------------------------------------------------------------

Isolate::Isolate(const std::vector<std::pair<std::string, std::string>>& modules,
                 const std::string& main, Limits limits)
    : limits_(limits), arena_(*this) {
  LocaleGuard locale;
  start_clock(0, 0);
  L_ = lua_newstate(alloc_fn, this);
  if (!L_) throw Error(FLEMMA_E_NOMEM, "cannot create the isolated interpreter (out of memory)");
  Running running(L_);
  lua_atpanic(L_, panic_fn);
  lua_sethook(L_, hook_fn, LUA_MASKCOUNT, kTicks);
  InitCtx ctx{this, &modules, &main};
  int status = lua_cpcall(L_, init_fn, &ctx);
  stop_clock();
  if (status != 0) {
    std::string msg = exhausted_.empty() ? error_text(L_, status) : exhausted_;
    throw Error(FLEMMA_E_INVALID, "isolated interpreter: " + msg);
  }
}

Isolate::~Isolate() = default;  // the arena frees everything the state allocated

void Isolate::start_clock(double cpu_ms, double wall_ms) {
  cpu_cut_ = cpu_ms > 0 && cpu_ms < limits_.time_ms;
  wall_cut_ = wall_ms > 0 && wall_ms < limits_.wall_ms;
  cpu_ms_ = cpu_cut_ ? cpu_ms : limits_.time_ms;
  const double wall = std::max(wall_cut_ ? wall_ms : limits_.wall_ms, 1.0);
  const auto budget = static_cast<int64_t>(cpu_ms_ * 1e6);
  const int64_t now = monotonic_ns();
  cpu_start_ns_ = cpu_ns();
  deadline_ns_ = now + std::min(budget, static_cast<int64_t>(wall * 1e6));
  cpu_deadline_ns_ = cpu_start_ns_ + budget;
  wall_cap_ns_ = now + static_cast<int64_t>(wall * 1e6);
  if (L_) lua_sethook(L_, hook_fn, LUA_MASKCOUNT, kTicks);  // a full countdown
}

void Isolate::stop_clock() { used_ms_ = static_cast<double>(cpu_ns() - cpu_start_ns_) / 1e6; }

bool Isolate::past_deadline() const {
  const int64_t now = monotonic_ns();
  if (now <= deadline_ns_) return false;
  if (now > wall_cap_ns_) return true;
  const int64_t left = cpu_deadline_ns_ - cpu_ns();
  if (left <= 0) return true;
  deadline_ns_ = std::min(now + left, wall_cap_ns_);
  return false;
}

bool Isolate::time_up() {
  if (!past_deadline()) return false;
  // Stopped by the wall clock or by the CPU budget: either is the caller's budget
  // when it gave less than the limits' own.
  const bool by_wall = monotonic_ns() > wall_cap_ns_;
  if (by_wall ? wall_cut_ : cpu_cut_) {
    exhaust("was stopped: the time frontmatter and templates may use for one action is spent",
            "budget");
  } else {
    exhaust(("ran longer than " + std::to_string(static_cast<int>(limits_.time_ms)) +
             " ms and was stopped (an endless loop?)")
                .c_str(),
            "time");
  }
  return true;
}

void Isolate::raise_limit(lua_State* L) {
  // Once a limit stopped the code, every instruction from here raises it again.
  if (!exhausted_.empty()) lua_sethook(L, hook_fn, LUA_MASKCOUNT, 1);
  throw_memory_error(L);
}

void Isolate::check_time(lua_State* L) {
  if (exhausted_.empty() && !time_up()) return;
  raise_limit(L);
}

std::string Isolate::location() {
  if (!L_ || user_chunks_.empty()) return "";
  lua_Debug ar;
  for (int level = 0; level < 200 && lua_getstack(L_, level, &ar); level++) {
    if (!lua_getinfo(L_, "Sl", &ar) || !ar.source) continue;
    for (const auto& name : user_chunks_) {
      if (name == ar.source && ar.currentline > 0) {
        return std::string(ar.short_src) + ":" + std::to_string(ar.currentline) + ": ";
      }
    }
  }
  return "";
}

const std::string& Isolate::exhaust(const char* what, const char* limit_kind) {
  if (exhausted_.empty()) {
    exhausted_ = location() + what;
    limit_kind_ = limit_kind;
  }
  return exhausted_;
}

uint64_t Isolate::random_next() {  // xorshift128+
  uint64_t s1 = rng_[0];
  const uint64_t s0 = rng_[1];
  rng_[0] = s0;
  s1 ^= s1 << 23;
  rng_[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
  return rng_[1] + s0;
}

void Isolate::random_seed(double seed) {
  uint64_t x = 0;
  std::memcpy(&x, &seed, sizeof x);
  for (auto& s : rng_) {  // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    s = z ^ (z >> 31);
  }
  if (rng_[0] == 0 && rng_[1] == 0) rng_[0] = 1;
  for (int i = 0; i < 16; i++) random_next();
}

int Isolate::protected_call(lua_State* L) {
  auto* ctx = static_cast<CallCtx*>(lua_touserdata(L, 1));
  lua_settop(L, 0);
  lua_getfield(L, LUA_REGISTRYINDEX, kEntryKey);
  lua_getfield(L, -1, ctx->fn.c_str());
  if (!lua_isfunction(L, -1))
    return luaL_error(L, "the isolated interpreter has no entry point %s", ctx->fn.c_str());
  int nargs = 0;
  if (ctx->args->is_array()) {
    luaL_checkstack(L, static_cast<int>(std::min<size_t>(ctx->args->size(), 200)) + 2,
                    "too many arguments");
    for (const auto& a : *ctx->args) {
      if (nargs >= 200) break;
      push_json(L, a, 0, false);
      nargs++;
    }
  }
  int base = 2;
  lua_call(L, nargs, LUA_MULTRET);
  int top = lua_gettop(L);
  size_t budget = owner(L).limits().result;
  json values = json::array();
  for (int i = base; i <= top; i++) values.push_back(to_json(L, i, 0, budget));
  ctx->values = std::move(values);
  return 0;
}

std::string Isolate::call(std::string_view fn, std::string_view args_json, double cpu_ms,
                          double wall_ms) {
  json args = json::parse(args_json.begin(), args_json.end(), nullptr, false);
  if (args.is_discarded() || !args.is_array())
    throw Error(FLEMMA_E_INVALID, "the arguments should be a JSON array");
  LocaleGuard locale;
  Running running(L_);
  exhausted_.clear();
  limit_kind_.clear();
  start_clock(cpu_ms, wall_ms);
  CallCtx ctx{this, std::string(fn), &args, json()};
  int status = lua_cpcall(L_, protected_call, &ctx);
  stop_clock();
  json out;
  if (status == 0 && exhausted_.empty()) {
    out = {{"ok", true}, {"values", std::move(ctx.values)}};
  } else {
    std::string msg = exhausted_.empty() ? error_text(L_, status) : exhausted_;
    out = {{"ok", false}, {"error", clip(msg)}};
    out["limit"] = limit_kind_.empty() ? json(nullptr) : json(limit_kind_);
  }
  lua_settop(L_, 0);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace flemma::isolate

// Numbers read from strings by the VM (arithmetic on strings, tonumber, the lexer):
// a string of 200 bytes or more is not a number, so reading one never scans megabytes.
namespace flemma::isolate {

void tick(lua_State* L) { owner(L).check_time(L); }

namespace {
// Charges the isolate running on this thread (none: nothing to charge).
void charge_running(size_t bytes) noexcept {
  if (t_running) charge(t_running, bytes / kBytesPerTick);
}
}  // namespace

int vm_strcoll(const char* a, const char* b) noexcept {
  // strcmp (the isolate runs in the C locale): the first bytes one by one (most
  // comparisons end there), then a block at a time, charging what it read.
  for (size_t i = 0; i < kBytesPerTick; i++) {
    const auto ca = static_cast<unsigned char>(a[i]);
    const auto cb = static_cast<unsigned char>(b[i]);
    if (ca != cb) return static_cast<int>(ca) - static_cast<int>(cb);
    if (ca == 0) return 0;
  }
  constexpr size_t kBlock = 4096;
  size_t read = kBytesPerTick;
  for (;;) {
    const size_t la = ::strnlen(a + read, kBlock);
    const size_t lb = ::strnlen(b + read, kBlock);
    const size_t n = std::min(la, lb);
    const int c = std::memcmp(a + read, b + read, n);
    if (c != 0 || n < kBlock) {
      charge_running(read + n);
      if (c != 0) return c;
      return static_cast<int>(static_cast<unsigned char>(a[read + n])) -
             static_cast<int>(static_cast<unsigned char>(b[read + n]));
    }
    read += n;
  }
}

size_t vm_strlen(const char* s) noexcept {
  const size_t n = ::strlen(s);
  charge_running(n);
  return n;
}

}  // namespace flemma::isolate

extern "C" double isolate_strtod(const char* s, char** end) noexcept {
  if (::strnlen(s, 200) >= 200) {
    *end = const_cast<char*>(s);
    return 0;
  }
  return ::strtod(s, end);
}

extern "C" unsigned long isolate_strtoul(const char* s, char** end, int base) noexcept {
  if (::strnlen(s, 200) >= 200) {
    *end = const_cast<char*>(s);
    return 0;
  }
  return ::strtoul(s, end, base);
}
