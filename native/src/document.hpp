// The .chat document parser: one linear pass over the lines of a buffer that
// produces flat items (frontmatter, messages, parts) and diagnostics. Strings
// are byte ranges into the input, or into the document's arena when the bytes
// had to be rewritten (CRLF) or were generated (messages).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "flemma/flemma.h"

namespace flemma::document {

// Inputs of this size or more are refused (offsets stay in int32 with room
// for the arena).
inline constexpr size_t kMaxInput = size_t{1} << 30;

// An opening fence (of a text block, a tool block or the frontmatter) that no
// later line of the parsed text closes. `line` is 0-based.
struct Unclosed {
  int32_t line;
  int32_t len;
  char ch;
};

struct Document {
  std::vector<flemma_doc_item> items;
  std::vector<flemma_doc_diag> diags;
  std::string arena;
  std::vector<Unclosed> unclosed;  // in line order

  // Reads a range against the parsed input (for tests and C++ callers).
  std::string_view str(std::string_view input, flemma_doc_str s) const {
    if (s.off >= 0) return input.substr(static_cast<size_t>(s.off), static_cast<size_t>(s.len));
    return std::string_view(arena).substr(static_cast<size_t>(-s.off - 1), static_cast<size_t>(s.len));
  }
};

// Parses text. Total: never throws on content (only std::bad_alloc), linear in
// the size of the input. Throws flemma::Error for inputs of 2 GiB or more.
Document parse(std::string_view text);

// Like parse, without the document-wide checks of tool ids (duplicates,
// results without a use): for a region of a larger document, which checks
// them itself with check_ids.
Document parse_region(std::string_view text);

// The role (FLEMMA_DOC_*) of a role marker line, else 0.
int role_of_line(std::string_view line);

// True when line is a closing fence; sets its character and length.
bool closing_fence(std::string_view line, char& ch, int32_t& len);

// The document-wide checks of tool ids over the tool uses and results of a
// document, each given as (id, 1-based header line) in document order. Calls
// out(line, severity, message) for each problem, in the order parse reports them.
struct IdLine {
  std::string_view id;
  int32_t line;
};
void check_ids(const std::vector<IdLine>& uses, const std::vector<IdLine>& results,
               const std::function<void(int32_t, int, std::string)>& out);

}  // namespace flemma::document
