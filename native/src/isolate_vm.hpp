// What the interpreter's own sources (native/lua/*_bounded.cpp: Lua's files compiled
// with a few names redirected) and the library share about time: one countdown of
// work, the state's hook count. The VM spends one unit per instruction (Lua's count
// check in luaV_execute); work that one instruction or library function does over
// many bytes or slots spends more. When the countdown runs out, `tick` reads the
// clock. The VM calls it directly, not through Lua's hook machinery: Lua 5.1 turns
// hooks off while a hook runs, so a message handler called for an error the hook
// raised used to run with no check at all.
#pragma once

#include <cstddef>
#include <cstdint>

struct lua_State;

namespace flemma::isolate {

constexpr int kTicks = 1024;          // units between two clock reads
constexpr size_t kBytesPerTick = 64;  // bytes compared or copied for one unit

// Raises Lua's memory error (native/lua/lvm_bounded.cpp): it runs no message handler.
[[noreturn]] void throw_memory_error(lua_State* L);

// Reads the clock: raises the limit error (never returns) when the time is up or a
// limit already stopped the code (native/src/isolate.cpp).
void tick(lua_State* L);

// Spends units of work without raising: the next instruction (or `spend`) reads the
// clock when they exhaust the countdown (native/lua/lvm_bounded.cpp).
void charge(lua_State* L, size_t units) noexcept;

// Spends units of work and reads the clock when the countdown runs out (may raise).
void spend(lua_State* L, size_t units);

// Slots of a table (array part and hash part): what finding its length (`#t`,
// lua_objlen) may have to walk.
size_t table_slots(const void* table);

// The string comparison of the VM (l_strcmp, C locale): strcmp and strlen that charge
// what they read to the isolate running on this thread.
int vm_strcoll(const char* a, const char* b) noexcept;
size_t vm_strlen(const char* s) noexcept;

// memcmp for the string table (lstring.c): charges what it compares.
int charged_memcmp(lua_State* L, const void* a, const void* b, size_t n) noexcept;

}  // namespace flemma::isolate
