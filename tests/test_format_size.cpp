#include <doctest/doctest.h>

#include <string>

#include "flemma/flemma.h"
#include "truncate.hpp"

using flemma::truncate::format_size;

TEST_CASE("format_size") {
  SUBCASE("bytes below 1 KB are whole bytes") {
    CHECK(format_size(0) == "0B");
    CHECK(format_size(1) == "1B");
    CHECK(format_size(1023) == "1023B");
  }
  SUBCASE("kilobytes have one decimal") {
    CHECK(format_size(1024) == "1.0KB");
    CHECK(format_size(12345) == "12.1KB");
    CHECK(format_size(51200) == "50.0KB");
  }
  SUBCASE("megabytes and gigabytes") {
    CHECK(format_size(1024 * 1024) == "1.0MB");
    CHECK(format_size(1024LL * 1024 * 1024 * 5 / 2) == "2.5GB");
  }
  SUBCASE("negative sizes are shown as zero") { CHECK(format_size(-5) == "0B"); }

  SUBCASE("the C ABI writes into the caller's buffer like snprintf") {
    char buf[16];
    CHECK(flemma_format_size(12345, buf, sizeof buf) == 6);
    CHECK(std::string(buf) == "12.1KB");
    char tiny[3];
    CHECK(flemma_format_size(12345, tiny, sizeof tiny) == 6);
    CHECK(std::string(tiny) == "12");
    CHECK(flemma_format_size(1, nullptr, 0) == 2);
  }
}
