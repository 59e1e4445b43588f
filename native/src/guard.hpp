// The single exception guard for every extern "C" entry point: no C++
// exception may unwind into LuaJIT, which would take the user's editor down.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "flemma/flemma.h"

namespace flemma {

// Stores the message returned by flemma_last_error() for the calling thread.
void set_last_error(std::string message);
void clear_last_error();

// An error that carries its FLEMMA_E_* code.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// Runs fn (returning int) and converts any exception into a status code plus
// a stored message. Used as `return flemma::guard([&] { ...; return FLEMMA_OK; });`
template <class Fn>
int guard(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return FLEMMA_E_NOMEM;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return FLEMMA_E_INTERNAL;
  } catch (...) {
    set_last_error("unknown internal error");
    return FLEMMA_E_INTERNAL;
  }
}

// Like guard, for functions returning a pointer: nullptr on failure.
template <class Fn>
auto guard_ptr(Fn&& fn) noexcept -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
  } catch (const std::exception& e) {
    set_last_error(e.what());
  } catch (...) {
    set_last_error("unknown internal error");
  }
  return nullptr;
}

}  // namespace flemma
