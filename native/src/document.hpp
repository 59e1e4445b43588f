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

// The scan state at the start of a line where the parser's main loop stands
// (top level: not inside a block it is skipping), from which a parse can
// resume after the lines below it changed. Lines are 0-based, bytes index the
// parsed text; counts say how much of the document was emitted before it.
struct Checkpoint {
  int32_t line = 0;
  int32_t byte = 0;
  int32_t items = 0;      // items emitted before the line
  int32_t diags = 0;      // diagnostics (all on earlier lines)
  int32_t unclosed = 0;   // entries of Document::unclosed
  int32_t msg_item = -1;  // index of the open message item, -1: none
  int32_t role = 0;       // its role
  int32_t msg_last = -1;  // last line noted for that message so far
  int32_t run_first = -1, run_last = -1, run_start = 0,
          run_end = 0;  // an open text run (run_first < 0: none)
};

struct Document {
  std::vector<flemma_doc_item> items;
  std::vector<flemma_doc_diag> diags;
  std::string arena;
  std::vector<Unclosed> unclosed;       // in line order
  std::vector<Checkpoint> checkpoints;  // in line order; only from parse_region with checkpoints

  // Reads a range against the parsed input (for tests and C++ callers).
  std::string_view str(std::string_view input, flemma_doc_str s) const {
    if (s.off >= 0) return input.substr(static_cast<size_t>(s.off), static_cast<size_t>(s.len));
    return std::string_view(arena).substr(static_cast<size_t>(-s.off - 1),
                                          static_cast<size_t>(s.len));
  }
};

// Parses text. Total: never throws on content (only std::bad_alloc), linear in
// the size of the input. Throws flemma::Error for inputs of 2 GiB or more.
Document parse(std::string_view text);

// Like parse, without the document-wide checks of tool ids (duplicates,
// results without a use): for a region of a larger document, which checks
// them itself with check_ids.
// With cp_every > 0 it also records a checkpoint at the first loop line after
// each role marker and then at loop lines at least cp_every lines apart.
Document parse_region(std::string_view text, int32_t cp_every = 0);

// Resumes a region parse after an edit. `text` is the region's new text,
// `prefix` the document as it was before from.at (items, diagnostics and
// unclosed entries emitted before it; its arena whole), from.at a checkpoint
// at a line above the edit. When `stop` is given the parse stops at the first
// loop line at or below `stop_min_line` where an old checkpoint (its line
// shifted by `line_delta`) has the same state (message, role, open text run):
// from there on the old parse holds, shifted. Then `Resumed` says where; the
// message item's last line and the open text run are left for the caller to
// finish with the old document's tail.
struct ResumeFrom {
  Checkpoint at;
  bool has_cr = true;  // some line of the text may end in "\r"
  int32_t cp_every = 16;
  const std::vector<Checkpoint>* stop = nullptr;  // old checkpoints (old lines)
  size_t stop_first = 0;                          // the first of them that may match
  int32_t stop_min_line = 0;
  int32_t line_delta = 0;
};
struct Resumed {
  bool stopped = false;
  size_t old_cp = 0;  // index in *stop
  Checkpoint state;   // the new state there
};
Document resume_region(std::string_view text, Document&& prefix, const ResumeFrom& from,
                       Resumed& out);

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
