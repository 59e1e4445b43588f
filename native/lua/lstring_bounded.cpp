// Lua's lstring.c whose string table charges the bytes it compares: strings of the
// same length whose sampled bytes hash alike all land in one chain, and making one
// more of them compares it with each (see native/src/isolate_vm.hpp).
#include <string.h>

#include "isolate_vm.hpp"

#define lstring_c
#define LUA_CORE
#include "lua.h"

#define memcmp(a, b, n) flemma::isolate::charged_memcmp(L, a, b, n)
#include "lstring.c"
