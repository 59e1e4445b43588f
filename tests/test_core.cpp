#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "flemma/flemma.h"
#include "guard.hpp"

TEST_CASE("core ABI") {
  SUBCASE("reports the ABI version of the header") {
    CHECK(flemma_abi_version() == FLEMMA_ABI_VERSION);
  }

  SUBCASE("has a version string") { CHECK(std::strlen(flemma_version()) > 0); }

  SUBCASE("guard turns exceptions into status codes and a message") {
    int rc = flemma::guard([]() -> int { throw flemma::Error(FLEMMA_E_INVALID, "bad thing"); });
    CHECK(rc == FLEMMA_E_INVALID);
    CHECK(std::string(flemma_last_error()) == "bad thing");
    rc = flemma::guard([]() -> int { throw std::runtime_error("boom"); });
    CHECK(rc == FLEMMA_E_INTERNAL);
    CHECK(std::string(flemma_last_error()) == "boom");
    rc = flemma::guard([]() -> int { throw 42; });
    CHECK(rc == FLEMMA_E_INTERNAL);
  }

  SUBCASE("guard_ptr returns nullptr on failure") {
    const char* p = flemma::guard_ptr([]() -> const char* { throw std::runtime_error("nope"); });
    CHECK(p == nullptr);
    CHECK(std::string(flemma_last_error()) == "nope");
  }
}
