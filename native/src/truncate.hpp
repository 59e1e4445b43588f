// Output truncation: sizes, head and tail windows of text by lines and bytes.
#pragma once

#include <cstdint>
#include <string>

namespace flemma::truncate {

// "512B", "12.1KB", "1.0MB", "2.5GB" (1 KB = 1024 bytes, one decimal).
std::string format_size(int64_t bytes);

}  // namespace flemma::truncate
