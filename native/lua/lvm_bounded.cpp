// Lua's lvm.c with the deadline kept by the VM itself (see native/src/isolate_vm.hpp):
//  - the count check of luaV_execute (every kTicks instructions, whatever hooks are
//    allowed) calls flemma::isolate::tick, which reads the clock, instead of
//    luaD_callhook, which does nothing while a hook runs (Lua 5.1 runs an error's
//    message handler inside the hook that raised it);
//  - `#t` and string comparisons (l_strcmp) charge the slots and bytes they read.
// Nothing else of lvm.c changes. The helpers that need Lua's internals live here too.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isolate_vm.hpp"

#define lvm_c
#define LUA_CORE
#include "lua.h"

#include "ldebug.h"
#include "ldo.h"
#include "lfunc.h"
#include "lgc.h"
#include "lobject.h"
#include "lopcodes.h"
#include "lstate.h"
#include "lstring.h"
#include "ltable.h"
#include "ltm.h"
#include "lvm.h"

namespace {
// OP_LEN of a table: a table built for it makes luaH_getn walk every slot.
int flemma_getn(lua_State* L, Table* t) {
  flemma::isolate::charge(L, flemma::isolate::table_slots(t) / 16);
  return luaH_getn(t);
}
}  // namespace

// Only traceexec calls it in lvm.c, with L->savedpc set, for the count (no line
// hooks are set).
#define luaD_callhook(L, event, line) flemma::isolate::tick(L)
#define luaH_getn(t) flemma_getn(L, t)
#define strcoll flemma::isolate::vm_strcoll
#define strlen flemma::isolate::vm_strlen

#include "lvm.c"

#undef luaH_getn
#undef strlen

namespace flemma::isolate {

void throw_memory_error(lua_State* L) {
  luaD_throw(L, LUA_ERRMEM);
  throw 0;  // not reached: luaD_throw does not return
}

void charge(lua_State* L, size_t units) noexcept {
  if (units == 0) return;
  // The VM checks `--hookcount == 0`: never leave it below 1.
  if (static_cast<size_t>(L->hookcount) <= units) {
    L->hookcount = 1;
  } else {
    L->hookcount -= static_cast<int>(units);
  }
}

void spend(lua_State* L, size_t units) {
  if (static_cast<size_t>(L->hookcount) <= units) {
    resethookcount(L);
    tick(L);
  } else {
    L->hookcount -= static_cast<int>(units);
  }
}

size_t table_slots(const void* table) {
  const Table* t = static_cast<const Table*>(table);
  return static_cast<size_t>(t->sizearray) + static_cast<size_t>(sizenode(t));
}

int charged_memcmp(lua_State* L, const void* a, const void* b, size_t n) noexcept {
  charge(L, n / kBytesPerTick);
  return ::memcmp(a, b, n);
}

}  // namespace flemma::isolate
