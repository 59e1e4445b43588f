// Where the flemma-reap helper (native/reaper/) is: next to the library (or the
// test executable) that holds this code.
#pragma once

#include <string>

namespace flemma::reaper {

// The helper's absolute path; "" where there is none (not Linux).
const std::string& path();

// Whether the helper exists and is executable.
bool available();

}  // namespace flemma::reaper
