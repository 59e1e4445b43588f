// The .chat document parser: one linear pass over the lines of a buffer that
// produces flat items (frontmatter, messages, parts) and diagnostics. Strings
// are byte ranges into the input, or into the document's arena when the bytes
// had to be rewritten (CRLF) or were generated (messages).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "flemma/flemma.h"

namespace flemma::document {

// Inputs of this size or more are refused (offsets stay in int32 with room
// for the arena).
inline constexpr size_t kMaxInput = size_t{1} << 30;

struct Document {
  std::vector<flemma_doc_item> items;
  std::vector<flemma_doc_diag> diags;
  std::string arena;

  // Reads a range against the parsed input (for tests and C++ callers).
  std::string_view str(std::string_view input, flemma_doc_str s) const {
    if (s.off >= 0) return input.substr(static_cast<size_t>(s.off), static_cast<size_t>(s.len));
    return std::string_view(arena).substr(static_cast<size_t>(-s.off - 1), static_cast<size_t>(s.len));
  }
};

// Parses text. Total: never throws on content (only std::bad_alloc), linear in
// the size of the input. Throws flemma::Error for inputs of 2 GiB or more.
Document parse(std::string_view text);

}  // namespace flemma::document
