#include "truncate.hpp"

#include <cstdio>

namespace flemma::truncate {

std::string format_size(int64_t bytes) {
  char buf[64];
  if (bytes < 0) bytes = 0;
  constexpr double kKB = 1024.0;
  constexpr double kMB = kKB * 1024.0;
  constexpr double kGB = kMB * 1024.0;
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%lldB", static_cast<long long>(bytes));
  } else if (b < kMB) {
    std::snprintf(buf, sizeof buf, "%.1fKB", b / kKB);
  } else if (b < kGB) {
    std::snprintf(buf, sizeof buf, "%.1fMB", b / kMB);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fGB", b / kGB);
  }
  return buf;
}

}  // namespace flemma::truncate
