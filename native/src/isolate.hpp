// An isolated Lua 5.1 interpreter for code from untrusted files (the frontmatter of a
// .chat buffer): its own lua_State, its own memory, and limits that hold by
// construction, whatever the code does:
//  - memory: every byte comes from the isolate's arena, which refuses to go past
//    Limits::memory in total, Limits::block for one string or table part, and
//    Limits::objects live allocations (allocation fails: a Lua error);
//  - time: one countdown of work (isolate_vm.hpp) that the VM spends on every
//    instruction, whatever the state of Lua's hooks (inside error handlers too), and
//    that string comparisons, the string table, `#t`, the arena and every library
//    loop spend by the bytes or slots they touch; when it runs out the clock is
//    compared with the call's deadline (and, once that passes, the thread's CPU clock
//    with the CPU budget, never past the call's wall-clock budget);
//  - a limit error cannot be caught: it is raised as Lua's memory error, which runs no
//    message handler, and our pcall and xpcall raise it again; once raised, every
//    check raises it, up to the boundary of the call;
//  - the work that one VM instruction does without any of these checks is linear in
//    the objects it touches, which the block and object limits keep small (reading a
//    number from a string is refused past 200 bytes);
//  - the library is ours: only base functions that cannot loop, Lua's math with a
//    private generator, and bounded string, table and os.time/os.date functions.
// Only plain data crosses: JSON in (arguments), JSON out (results). Nothing in the
// isolate ever refers to Neovim's Lua. The isolate is dropped with its arena (no
// lua_close walk over every object).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

struct lua_State;

namespace flemma::isolate {

struct Limits {
  double time_ms = 35;  // CPU time one call (or the creation) may use
  double wall_ms =
      1000;  // wall-clock time one call may hold its thread, however loaded the machine
  size_t memory = 64u << 20;  // bytes of arena (slabs and large blocks)
  size_t block = 512u << 10;  // one allocation: a string, a table's array or hash part
  size_t objects = 1u << 17;  // live allocations (bounds GC and teardown work)
  size_t result = 1u << 20;   // bytes of JSON a call may return
};

class Isolate;

// The arena of one isolate: size classes of 16 bytes up to 512 from 64 KB slabs,
// larger blocks from malloc on an intrusive list. Freed all at once.
class Arena {
 public:
  explicit Arena(Isolate& owner) : owner_(owner) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Lua's allocation function contract (osize is the block's size when ptr != NULL).
  void* realloc(void* ptr, size_t osize, size_t nsize);
  size_t charged() const { return charged_; }
  size_t peak() const { return peak_; }
  size_t live() const { return live_; }

 private:
  static constexpr size_t kStep = 16;
  static constexpr size_t kMaxSmall = 512;
  static constexpr size_t kSlab = 64 * 1024;
  // A large block: a power of two from 1 KB, kept on the arena's free list of its
  // size once Lua frees it (no memory goes back to the system while the isolate lives).
  struct Large {
    Large* next_all;
    Large* next_free;
    size_t cap;
    size_t pad;
  };
  static constexpr int kLargeClasses = 40;
  void* alloc(size_t n);
  void release(void* p, size_t n);
  bool admit(size_t bytes, size_t n);

  Isolate& owner_;
  void* free_[kMaxSmall / kStep + 1] = {};
  std::vector<void*> slabs_;
  char* cur_ = nullptr;
  size_t left_ = 0;
  Large* large_ = nullptr;
  Large* free_large_[kLargeClasses] = {};
  size_t charged_ = 0;
  size_t peak_ = 0;
  size_t live_ = 0;
};

class Isolate {
 public:
  // Loads the trusted modules (name -> Lua source) and runs `main`, whose returned
  // table holds the entry points. Throws flemma::Error on failure.
  Isolate(const std::vector<std::pair<std::string, std::string>>& modules, const std::string& main,
          Limits limits = {});
  ~Isolate();
  Isolate(const Isolate&) = delete;
  Isolate& operator=(const Isolate&) = delete;

  // Calls entry point `fn` with the JSON array `args` under the limits. cpu_ms and
  // wall_ms > 0 are what the caller has left for it (CPU and wall-clock time): the
  // call ends by then, and a stop with less than the limits' own reports the limit
  // "budget". Returns {"ok":true,"values":[...]} or
  // {"ok":false,"error":"...","limit":"time"|"budget"|"memory"|null}.
  std::string call(std::string_view fn, std::string_view args_json, double cpu_ms = 0,
                   double wall_ms = 0);
  // CPU time (ms) of the last call, or of the creation.
  double cpu_ms() const { return used_ms_; }

  const Limits& limits() const { return limits_; }
  const Arena& arena() const { return arena_; }
  Arena& arena_mutable() { return arena_; }

  // --- used by the allocator, the VM (isolate_vm.hpp) and the library ---
  // Raises the limit error when the deadline has passed or a limit already stopped
  // the code.
  void check_time(lua_State* L);
  // Raises the limit error (Lua's memory error: no message handler runs); the message
  // is exhausted().
  [[noreturn]] void raise_limit(lua_State* L);
  bool past_deadline() const;
  // When the deadline has passed: records the time limit (see exhaust) and true.
  bool time_up();
  // Records that a limit stopped the code (the first reason wins) and returns the
  // message, "CHUNK:LINE: ..." at the innermost frame of user code when there is one.
  const std::string& exhaust(const char* what, const char* limit_kind);
  const std::string& exhausted() const { return exhausted_; }
  void add_user_chunk(std::string name) { user_chunks_.push_back(std::move(name)); }
  uint64_t random_next();
  void random_seed(double seed);
  lua_State* state() const { return L_; }

 private:
  static int protected_call(lua_State* L);
  std::string location();

  Limits limits_;
  Arena arena_;
  lua_State* L_ = nullptr;
  // The time limit counts the CPU time the interpreter used, not the time other
  // processes of a loaded machine took from it: the monotonic deadline is a cheap
  // first check; when it passes, the CPU clock decides, and the monotonic deadline
  // moves by what is left of the budget (never past the call's wall-clock budget).
  void start_clock(double cpu_ms, double wall_ms);
  void stop_clock();
  mutable int64_t deadline_ns_ = 0;
  double cpu_ms_ = 0;      // the CPU budget of the running call
  bool cpu_cut_ = false;   // the caller gave it less CPU time than Limits::time_ms
  bool wall_cut_ = false;  // ... or less wall-clock time than Limits::wall_ms
  int64_t cpu_start_ns_ = 0;
  double used_ms_ = 0;
  int64_t cpu_deadline_ns_ = 0;
  int64_t wall_cap_ns_ = 0;
  std::string exhausted_;
  std::string limit_kind_;
  std::vector<std::string> user_chunks_;
  uint64_t rng_[2] = {0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull};
};

// Opens the isolate's library into L (isolate_lib.cpp).
void open_library(lua_State* L);

// Pushes JSON as Lua data: null as nil, or with null_sentinel as the isolate's null
// (a NULL light userdata); a Lua error past 64 levels of nesting (isolate.cpp).
void push_json(lua_State* L, const nlohmann::json& v, int depth, bool null_sentinel);

// The isolate that owns L.
Isolate& owner(lua_State* L);

int64_t monotonic_ns();
// CPU time of the calling thread (a system call: read only when the cheap monotonic
// clock says the budget may be spent).
int64_t cpu_ns();

}  // namespace flemma::isolate
