// Search for the grep, glob and find tools: a linear-time regular expression
// engine (a Pike VM over a documented subset of the usual syntax), a matcher of
// .gitignore rules and glob patterns built on it, a directory walker that honours
// .gitignore, .ignore and hidden files and skips binary files, and decoders of
// `rg --json` and of NUL-separated path lists (fd, git ls-files). Everything here
// runs on a native worker thread and never calls into Lua: results are the
// stream::Event values that the process manager queues for the host.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stream.hpp"

namespace flemma::search {

// ---------------------------------------------------------------------------
// Regular expressions
// ---------------------------------------------------------------------------
//
// Accepted syntax (bytes; a non-ASCII literal is its UTF-8 bytes):
//   literal characters, `\` before any punctuation, `\t` `\n` `\r`
//   `.` (any character but a newline; a whole UTF-8 sequence)
//   `[abc]` `[a-z]` `[^...]` (ASCII members; a negated class also takes a whole
//   UTF-8 sequence), `\d \D \w \W \s \S` (ASCII), also inside classes
//   `^` `$` (start and end of the line), `\b` `\B` (ASCII word boundary)
//   groups `( )` and `(?: )`, alternation `|`
//   quantifiers `*` `+` `?` `{n}` `{n,}` `{n,m}` (n, m <= 1000), each optionally
//   followed by `?` (lazy: the same lines match)
// Not accepted: backreferences, lookaround, named classes, inline flags.
// Matching is a simulation of the automaton: time linear in the line's length
// times the program's size, whatever the pattern.

constexpr size_t kMaxPattern = 1000;   // bytes of a pattern
constexpr size_t kMaxProgram = 20000;  // instructions after expanding {n,m}

struct Program;

class Regex {
 public:
  // Compiles a pattern; throws flemma::Error (FLEMMA_E_INVALID) with a message
  // naming the problem. fixed: the pattern is a literal string.
  Regex(std::string_view pattern, bool fixed, bool ignore_case);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Whether the line (without its newline) holds a match.
  bool matches(std::string_view line) const;
  // A literal every match contains (lower-cased when ignore_case), "" if none.
  const std::string& required() const { return required_; }
  // True when the pattern is that literal alone (no need to run the automaton).
  bool literal_only() const { return literal_only_; }
  bool ignore_case() const { return icase_; }
  // Anchored: the whole text must match (for globs).
  bool full_match(std::string_view text) const;

 private:
  std::unique_ptr<Program> prog_;
  std::string required_;
  bool literal_only_ = false;
  bool icase_ = false;
};

// The ReDoS screen: "" when the pattern is acceptable, else why not: longer
// than kMaxPattern, not in the accepted syntax, an unbounded quantifier applied
// to something that holds one (`(a+)+`, `(x*y)*`), or two unbounded quantifiers
// side by side over characters they share (`a*a*`, `\w+\d+`, `.*.*`).
std::string check_pattern(std::string_view pattern, bool fixed);

// The search's inner loops, exposed for tests and the fuzzer.
// The first occurrence of `needle` in `hay` (std::string_view::npos if none).
// ignore_case: `needle` is lower case and ASCII letters of `hay` match either
// case. 16 bytes at a time where the CPU has SSE2 (every x86-64), filtering
// candidates by the needle's first and last bytes.
size_t find_literal(std::string_view hay, std::string_view needle, bool ignore_case);
// The number of '\n' bytes in `text`.
size_t count_newlines(std::string_view text);

// ---------------------------------------------------------------------------
// Globs and ignore rules
// ---------------------------------------------------------------------------

// A glob: `*` (not `/`), `?`, `[...]` / `[!...]`, `**` (any number of
// directories), `\` escapes. Matched against a whole '/'-separated path.
class Glob {
 public:
  explicit Glob(std::string_view pattern, bool ignore_case = false);  // throws flemma::Error
  bool matches(std::string_view path) const;

 private:
  Regex re_;
};

// The regex source of a glob (exposed for tests).
std::string glob_to_regex(std::string_view glob);

// The rules of one .gitignore or .ignore file.
class IgnoreRules {
 public:
  // Adds the lines of an ignore file (rules relative to the directory holding it).
  void add(std::string_view content);
  // The decision of the last rule matching `rel` (path relative to that
  // directory): 1 ignored, -1 kept by a `!` rule, 0 no rule matches.
  int match(std::string_view rel, bool is_dir) const;
  size_t size() const { return rules_.size(); }

 private:
  struct Rule {
    std::unique_ptr<Glob> glob;
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;  // holds a '/': matched against the whole relative path
  };
  std::vector<Rule> rules_;
};

// ---------------------------------------------------------------------------
// Walking and searching
// ---------------------------------------------------------------------------

// Event types of search results (enum flemma_stream_event_type).
constexpr int32_t kMatch = 15;  // a = path, b = line text, index = line (1-based), status 1 match /
                                // 2 context, mask bit 0: line cut
constexpr int32_t kFile =
    16;  // a = path, usage[0] = mtime (s), usage[1] = size, status 1 file / 2 directory
constexpr int32_t kSummary = 17;  // usage: see Summary; a = an error, "" if none

struct Summary {
  int64_t found = 0;       // matches (grep) or files (glob) in all
  int64_t searched = 0;    // files searched (grep) or entries seen (glob)
  int64_t binary = 0;      // binary files with a match, skipped
  int64_t unreadable = 0;  // files or directories that could not be read
  int64_t files = 0;       // files with a match (grep)
  std::string error;
};

constexpr size_t kMaxLine = 400;  // bytes of a result line kept (then cut)

struct Options {
  std::string root;         // absolute file or directory
  std::string pattern;      // grep: the regex; files: the glob
  bool files_mode = false;  // glob/find instead of grep
  bool fixed = false;
  bool ignore_case = false;
  bool hidden = false;     // also dot files and directories
  bool no_ignore = false;  // ignore .gitignore / .ignore
  bool name_only = false;  // files mode: the glob matches the file's name (find)
  int want_type = 0;       // files mode: 0 files, 1 directories, 2 both
  std::string include;     // grep: a glob the files must match ("" none)
  int context = 0;         // lines before and after each match (<= 10)
  int64_t max_results = 100;
  std::vector<std::string> skip_dirs;  // directory names never entered
};

// Where results go: batches of events, then the summary (the last call).
using Emit = std::function<void(std::vector<stream::Event>&&)>;

// Runs a search to the end (or until `cancel`), emitting matches (grep: at most
// max_results, in walk order) or files (at most max_results, newest first) and
// finally one kSummary event. Throws flemma::Error on a bad pattern.
void run(const Options& opts, const std::atomic<bool>& cancel, const Emit& emit);

// ---------------------------------------------------------------------------
// Decoders of other programs' output
// ---------------------------------------------------------------------------

// `rg --json` lines, or NUL-separated paths (fd -0, git ls-files -z).
class OutputDecoder {
 public:
  enum class Kind { RgJson, Paths };
  // Paths: `cwd` is where the paths are relative to (they are lstat'ed for
  // their modification time), `glob` filters them ("" none; name_only: their
  // file name), and the newest max_results are reported at finish().
  // Paths below a hidden folder (or hidden themselves) are left out unless `hidden`.
  OutputDecoder(Kind kind, int64_t max_results, std::string cwd = {}, const std::string& glob = {},
                bool name_only = false, std::vector<std::string> skip_dirs = {},
                bool hidden = false);
  ~OutputDecoder();
  void feed(std::string_view bytes, std::vector<stream::Event>& out);
  void finish(std::vector<stream::Event>& out);  // appends the kSummary event
  const Summary& summary() const { return sum_; }

  static std::optional<Kind> kind_from_name(std::string_view name);

 private:
  void line(std::string_view l, std::vector<stream::Event>& out);
  void rg_line(std::string_view l, std::vector<stream::Event>& out);
  bool rg_quick(std::string_view l, std::vector<stream::Event>& out);
  void path_entry(std::string_view p);

  Kind kind_;
  int64_t max_;
  std::string cwd_;
  std::unique_ptr<Glob> glob_;
  bool name_only_;
  std::vector<std::string> skip_;
  bool hidden_ = false;
  std::string buf_;
  bool overflow_ = false;
  void commit(bool binary, std::vector<stream::Event>& out);

  int64_t emitted_ = 0;
  std::vector<stream::Event> pend_;  // the matches of the file being decoded
  int64_t pend_found_ = 0, pend_kept_ = 0;
  Summary sum_;
  struct Top;
  std::unique_ptr<Top> top_;
};

// Helpers shared with the tests.
std::string clean_line(std::string_view s, bool* cut);  // valid UTF-8, at most kMaxLine bytes
bool looks_binary(std::string_view head);               // a NUL byte

}  // namespace flemma::search
