// Escaping of text that must stay text in a .chat document (see
// `:help flemma-escaping`). A line whose start has the shape of structure the
// parser reads (a role marker, a tool header, a thinking tag, a placeholder
// fence), after zero or more backslashes, gets one more backslash at the very
// start of the line; unescape removes exactly one from lines of that shape.
// The two are exact inverses: unescape(escape(t)) == t for every t.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flemma::escape {

// Decides, byte by byte, whether the bytes of a line after its leading
// backslashes start with a structural shape:
//   @You:  @Assistant:  @System:  **Tool Use:**  **Tool Result:**
//   <thinking  </thinking
//   up to 3 spaces, 3 or more ` or ~, blanks (space, tab, CR, FF, VT), flemma:
class Shape {
 public:
  enum Verdict { kMaybe, kYes, kNo };
  // Takes the next byte of the line (never '\n').
  Verdict step(unsigned char c);
  // The verdict so far; at the end of a line kMaybe means no.
  Verdict verdict() const { return verdict_; }
  void reset() { *this = Shape(); }

 private:
  Verdict verdict_ = kMaybe;
  uint32_t pos_ = 0;       // bytes taken
  uint32_t alive_ = 0x7f;  // fixed prefixes still possible (bit per prefix)
  // The placeholder fence: 0 spaces, 1 fence run, 2 blanks, 3 "flemma:", 4 impossible.
  int fstate_ = 0;
  uint32_t fcount_ = 0;  // spaces, run length, or matched bytes of "flemma:"
  char fch_ = 0;
};

// True when the line (without '\n') has the shape after k >= 0 backslashes.
bool structural(std::string_view line);

// Escapes a whole text (as a streaming Escaper fed it in one piece).
std::string escape(std::string_view text);

// Removes one backslash from each line with k >= 1 backslashes and the shape.
std::string unescape(std::string_view text);

// The streaming escaper: text fed in pieces split anywhere gives the same
// output as escape() of the whole. It holds back only the undecided start of
// the current line (its backslashes are counted, not kept). It also follows
// the code fences of the text it wrote, as the parser pairs them, so a caller
// can close a fence the text leaves open.
class Escaper {
 public:
  // Appends the escaped form of data to out. With final, the current line is
  // taken as complete and the escaper starts again at a line start (its fence
  // state is kept until reset()).
  void feed(std::string_view data, bool final, std::string& out);
  // The fence the text written so far leaves open: its character ('`' or '~';
  // 0 when none) and length.
  char fence_ch() const { return open_ch_; }
  int64_t fence_len() const { return open_len_; }
  void reset() { *this = Escaper(); }

 private:
  void emit(std::string_view s, std::string& out);
  void end_line();

  // Deciding the start of the current line.
  bool deciding_ = true;
  uint64_t backslashes_ = 0;
  std::string held_;
  Shape shape_;

  // Fence of the output line being written: 0 indent, 1 run, 2 info, 3 not a fence.
  int lstate_ = 0;
  int lindent_ = 0;
  char lch_ = 0;
  int64_t lrun_ = 0;
  bool linfo_blank_ = true;
  bool linfo_tick_ = false;
  bool lempty_ = true;

  char open_ch_ = 0;
  int64_t open_len_ = 0;
};

}  // namespace flemma::escape
