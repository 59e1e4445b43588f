// A shell-word parser for per-command approval rules ("bash(git *)"): splits a POSIX
// shell / bash command line into its simple commands and their words, as bash would
// before expansion. Anything it cannot fully understand makes the result not ok (the
// rule then approves nothing): unbalanced quotes, an expansion in a command word,
// eval/exec/source or a shell as the command, keywords, arithmetic, assignments that
// change how programs are found or loaded (PATH, LD_*, ...).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace flemma::shellwords {

struct Word {
  std::string value;     // after quote and backslash removal (expansions kept as written)
  bool dynamic = false;  // holds an expansion, substitution or glob: its run-time value is unknown
  size_t start = 0;      // the word's span in the input: value is a subsequence of it
  size_t end = 0;
};

struct Command {
  std::vector<Word> words;  // the command word first, then the arguments, then redirections
};

struct Result {
  bool ok = true;
  std::string reason;  // why it is not ok
  std::vector<Command> commands;
};

constexpr size_t kMaxInput = 64 * 1024;
constexpr int kMaxDepth = 32;
constexpr size_t kMaxWords = 4096;

// Never throws except std::bad_alloc.
Result parse(std::string_view src);

}  // namespace flemma::shellwords
