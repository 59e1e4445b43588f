// Core entry points: ABI version, library version, last error.
#include <string>

#include "flemma/flemma.h"
#include "guard.hpp"

namespace flemma {

namespace {
thread_local std::string t_last_error;
}

void set_last_error(std::string message) { t_last_error = std::move(message); }
void clear_last_error() { t_last_error.clear(); }

}  // namespace flemma

extern "C" {

FLEMMA_API int flemma_abi_version(void) { return FLEMMA_ABI_VERSION; }

FLEMMA_API const char* flemma_version(void) { return "0.1.0"; }

FLEMMA_API const char* flemma_last_error(void) { return flemma::t_last_error.c_str(); }

}  // extern "C"
