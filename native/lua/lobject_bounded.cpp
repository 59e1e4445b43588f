// Lua's lobject.c with its number reader bounded: the VM reads numbers from strings
// (arithmetic on strings, tonumber, the lexer) through isolate_strtod/strtoul
// (native/src/isolate.cpp), which refuse strings of 200 bytes or more, so one
// instruction never scans megabytes of digits or spaces.
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" double isolate_strtod(const char* s, char** end) noexcept;
extern "C" unsigned long isolate_strtoul(const char* s, char** end, int base) noexcept;
#define strtod isolate_strtod
#define strtoul isolate_strtoul
#include "lobject.c"
