// The shell-word parser of per-command approval rules: see shellwords.hpp.
#include "shellwords.hpp"

#include <algorithm>
#include <array>

namespace flemma::shellwords {
namespace {

struct Stop {};

struct Heredoc {
  std::string delim;
  bool quoted;
  bool strip_tabs;
};

bool is_name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_name(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_blank(char c) { return c == ' ' || c == '\t'; }

constexpr std::array<std::string_view, 24> kKeywords = {
    "if",   "then",  "else",  "elif", "fi", "do",     "done", "case",
    "esac", "while", "until", "for",  "in", "select", "time", "coproc",
    "{",    "}",     "[[",    "]]",   "!",  "((",     "))",   "function"};

// Commands that run text or files as shell code (or other commands in a way a rule
// about the wrapper cannot judge).
constexpr std::array<std::string_view, 17> kRunners = {
    "eval", "exec", "source", ".",    "sh",      "bash",    "zsh",     "dash", "ksh",
    "mksh", "fish", "csh",    "tcsh", "busybox", "command", "builtin", "trap"};

bool blocked_assignment(std::string_view name) {
  static constexpr std::array<std::string_view, 18> exact = {
      "PATH",          "IFS",        "ENV",      "BASH_ENV",
      "SHELLOPTS",     "BASHOPTS",   "PS4",      "PROMPT_COMMAND",
      "PAGER",         "EDITOR",     "VISUAL",   "NODE_OPTIONS",
      "PYTHONSTARTUP", "PYTHONPATH", "PERL5OPT", "RUBYOPT",
      "CDPATH",        "GLOBIGNORE"};
  if (std::find(exact.begin(), exact.end(), name) != exact.end()) return true;
  for (std::string_view p : {"LD_", "DYLD_", "GIT_", "BASH_FUNC_"})
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

class Parser {
 public:
  Parser(std::string_view s, Result& r) : s_(s), n_(s.size()), r_(r) {}

  void run() {
    list(0);
    if (!pending_.empty()) fail("a here-document without its body");
  }

 private:
  std::string_view s_;
  size_t n_;
  size_t i_ = 0;
  Result& r_;
  int depth_ = 0;
  int in_backtick_ = 0;
  size_t words_ = 0;
  std::vector<Heredoc> pending_;

  [[noreturn]] void fail(const char* why) {
    if (r_.ok) {
      r_.ok = false;
      r_.reason = why;
    }
    throw Stop{};
  }

  void enter() {
    if (++depth_ > kMaxDepth) fail("nested too deeply");
  }

  void skip_blanks() {
    while (i_ < n_) {
      if (is_blank(s_[i_])) {
        i_++;
      } else if (s_[i_] == '\\' && i_ + 1 < n_ && s_[i_ + 1] == '\n') {
        i_ += 2;
      } else {
        break;
      }
    }
  }

  // A list of commands up to `term` (0: the end of the input; ')' or '`': consumed).
  void list(char term) {
    for (;;) {
      skip_blanks();
      if (i_ >= n_) {
        if (term == ')') fail("an unbalanced parenthesis");
        if (term == '`') fail("an unbalanced backtick");
        return;
      }
      char c = s_[i_];
      if (term != 0 && c == term) {
        i_++;
        return;
      }
      if (c == '\n') {
        i_++;
        heredocs();
      } else if (c == '#') {
        while (i_ < n_ && s_[i_] != '\n') i_++;
      } else if (c == ';' || c == '&' || c == '|') {
        i_++;
      } else if (c == '(') {
        if (i_ + 1 < n_ && s_[i_ + 1] == '(') fail("arithmetic");
        i_++;
        enter();
        list(')');
        depth_--;
      } else if (c == ')') {
        fail("an unbalanced parenthesis");
      } else {
        command(term);
      }
    }
  }

  // The bodies of the here-documents announced on the line that just ended.
  void heredocs() {
    for (const Heredoc& h : pending_) {
      for (;;) {
        if (i_ >= n_) fail("an unterminated here-document");
        size_t nl = s_.find('\n', i_);
        size_t e = nl == std::string_view::npos ? n_ : nl;
        std::string_view line = s_.substr(i_, e - i_);
        std::string_view cmp = line;
        if (h.strip_tabs) {
          while (!cmp.empty() && cmp.front() == '\t') cmp.remove_prefix(1);
        }
        i_ = nl == std::string_view::npos ? n_ : nl + 1;
        if (cmp == h.delim) break;
        if (!h.quoted && line.find_first_of("$`\\") != std::string_view::npos)
          fail("an expansion inside a here-document");
      }
    }
    pending_.clear();
  }

  bool ends_command(char c, char term) const {
    return c == ';' || c == '&' || c == '|' || c == '\n' || c == ')' || (term == '`' && c == '`');
  }

  // A redirection operator at i_, or an empty view (process substitution is a word).
  std::string_view redirection() const {
    size_t j = i_;
    while (j < n_ && is_digit(s_[j])) j++;
    if (j >= n_) return {};
    size_t k = j;
    char c = s_[k];
    if (c == '&' && j == i_ && k + 1 < n_ && s_[k + 1] == '>') {
      k += 2;
      if (k < n_ && s_[k] == '>') k++;
      return s_.substr(i_, k - i_);
    }
    if (c != '<' && c != '>') return {};
    if (k + 1 < n_ && s_[k + 1] == '(') return {};
    k++;
    if (c == '<') {
      if (k < n_ && s_[k] == '<') {
        k++;
        if (k < n_ && (s_[k] == '<' || s_[k] == '-')) k++;
      } else if (k < n_ && (s_[k] == '>' || s_[k] == '&')) {
        k++;
      }
    } else if (k < n_ && (s_[k] == '>' || s_[k] == '&' || s_[k] == '|')) {
      k++;
    }
    return s_.substr(i_, k - i_);
  }

  void command(char term) {
    Command cmd;
    std::vector<Word> redirs;
    bool named = false;
    for (;;) {
      skip_blanks();
      if (i_ >= n_) break;
      char c = s_[i_];
      if (ends_command(c, term)) break;
      if (c == '(') fail("a parenthesis inside a command");
      if (c == '#') {
        while (i_ < n_ && s_[i_] != '\n') i_++;
        break;
      }
      std::string_view op = redirection();
      if (!op.empty()) {
        Word w;
        w.start = i_;
        w.value = std::string(op);
        i_ += op.size();
        w.end = i_;
        skip_blanks();
        if (i_ >= n_ || ends_command(s_[i_], term) || s_[i_] == '<' || s_[i_] == '>' ||
            s_[i_] == '(')
          fail("a redirection without its target");
        Word target = word(term);
        bool heredoc = op.size() >= 2 && op.find("<<") != std::string_view::npos &&
                       op.find("<<<") == std::string_view::npos;
        if (heredoc) {
          if (target.dynamic) fail("an expansion in a here-document delimiter");
          std::string_view raw = s_.substr(target.start, target.end - target.start);
          pending_.push_back({target.value, raw.find_first_of("'\"\\") != std::string_view::npos,
                              op.back() == '-'});
        }
        push(redirs, std::move(w));
        push(redirs, std::move(target));
        continue;
      }
      Word w = word(term);
      if (!named) {
        std::string_view raw = s_.substr(w.start, w.end - w.start);
        size_t k = 0;
        while (k < raw.size() && is_name(raw[k])) k++;
        bool assignment = k > 0 && is_name_start(raw[0]) &&
                          ((k < raw.size() && raw[k] == '=') ||
                           (k + 1 < raw.size() && raw[k] == '+' && raw[k + 1] == '='));
        if (assignment) {
          if (blocked_assignment(raw.substr(0, k)))
            fail("an assignment that changes how commands run");
          continue;
        }
        if (w.dynamic) fail("an expansion in the command word");
        if (std::find(kKeywords.begin(), kKeywords.end(), w.value) != kKeywords.end())
          fail("a shell keyword");
        std::string_view base = w.value;
        size_t slash = base.rfind('/');
        if (slash != std::string_view::npos) base = base.substr(slash + 1);
        if (std::find(kRunners.begin(), kRunners.end(), base) != kRunners.end())
          fail("a command that runs shell code (eval, exec, source, a shell)");
        named = true;
      }
      push(cmd.words, std::move(w));
    }
    for (Word& w : redirs) cmd.words.push_back(std::move(w));
    if (!cmd.words.empty()) r_.commands.push_back(std::move(cmd));
  }

  void push(std::vector<Word>& into, Word&& w) {
    if (++words_ > kMaxWords) fail("too many words");
    into.push_back(std::move(w));
  }

  Word word(char term) {
    Word w;
    w.start = i_;
    while (i_ < n_) {
      char c = s_[i_];
      if (is_blank(c) || c == '\n' || c == ';' || c == '&' || c == '|' || c == ')') break;
      if (term == '`' && c == '`') break;
      if (c == '<' || c == '>') {
        if (i_ + 1 < n_ && s_[i_ + 1] == '(') {
          // Process substitution: its commands are commands of the line.
          size_t st = i_;
          i_ += 2;
          enter();
          list(')');
          depth_--;
          w.value.append(s_.substr(st, i_ - st));
          w.dynamic = true;
          continue;
        }
        break;
      }
      if (c == '(') fail("a parenthesis inside a word");
      if (c == '\\') {
        if (in_backtick_ > 0) fail("a backslash inside backticks");
        if (i_ + 1 >= n_) fail("a trailing backslash");
        if (s_[i_ + 1] != '\n') w.value.push_back(s_[i_ + 1]);
        i_ += 2;
      } else if (c == '\'') {
        size_t close = s_.find('\'', i_ + 1);
        if (close == std::string_view::npos) fail("an unbalanced single quote");
        w.value.append(s_.substr(i_ + 1, close - i_ - 1));
        i_ = close + 1;
      } else if (c == '"') {
        double_quoted(w);
      } else if (c == '$') {
        dollar(w);
      } else if (c == '`') {
        backtick(w);
      } else {
        if (c == '*' || c == '?' || c == '[' || c == '{' || c == '~') w.dynamic = true;
        w.value.push_back(c);
        i_++;
      }
    }
    w.end = i_;
    return w;
  }

  void double_quoted(Word& w) {
    i_++;
    for (;;) {
      if (i_ >= n_) fail("an unbalanced double quote");
      char c = s_[i_];
      if (c == '"') {
        i_++;
        return;
      }
      if (c == '\\') {
        if (in_backtick_ > 0) fail("a backslash inside backticks");
        if (i_ + 1 >= n_) fail("an unbalanced double quote");
        char d = s_[i_ + 1];
        if (d == '$' || d == '`' || d == '"' || d == '\\') {
          w.value.push_back(d);
          i_ += 2;
        } else if (d == '\n') {
          i_ += 2;
        } else {
          w.value.push_back(c);
          i_++;
        }
      } else if (c == '$') {
        dollar(w);
      } else if (c == '`') {
        if (in_backtick_ > 0) fail("nested backticks");
        backtick(w);
      } else {
        w.value.push_back(c);
        i_++;
      }
    }
  }

  void dollar(Word& w) {
    size_t st = i_;
    char d = i_ + 1 < n_ ? s_[i_ + 1] : '\0';
    if (d == '(') {
      if (i_ + 2 < n_ && s_[i_ + 2] == '(') fail("arithmetic");
      i_ += 2;
      enter();
      list(')');
      depth_--;
    } else if (d == '{') {
      size_t close = s_.find('}', i_ + 2);
      if (close == std::string_view::npos) fail("an unbalanced parameter expansion");
      std::string_view inner = s_.substr(i_ + 2, close - i_ - 2);
      if (inner.empty() || inner.find_first_of("$`'\"\\({\n") != std::string_view::npos)
        fail("a parameter expansion it cannot follow");
      i_ = close + 1;
    } else if (d == '\'' || d == '"') {
      fail("$'...' or $\"...\" quoting");
    } else if (is_name_start(d)) {
      i_ += 2;
      while (i_ < n_ && is_name(s_[i_])) i_++;
    } else if (is_digit(d) || d == '@' || d == '*' || d == '#' || d == '?' || d == '-' ||
               d == '$' || d == '!') {
      i_ += 2;
    } else {
      w.value.push_back('$');  // a lone dollar is literal
      i_++;
      return;
    }
    w.value.append(s_.substr(st, i_ - st));
    w.dynamic = true;
  }

  void backtick(Word& w) {
    if (in_backtick_ > 0) fail("nested backticks");
    size_t st = i_;
    i_++;
    enter();
    in_backtick_++;
    list('`');
    in_backtick_--;
    depth_--;
    w.value.append(s_.substr(st, i_ - st));
    w.dynamic = true;
  }
};

}  // namespace

Result parse(std::string_view src) {
  Result r;
  if (src.size() > kMaxInput) {
    r.ok = false;
    r.reason = "the command is too long";
    return r;
  }
  if (src.find('\0') != std::string_view::npos) {
    r.ok = false;
    r.reason = "a NUL byte";
    return r;
  }
  Parser p(src, r);
  try {
    p.run();
  } catch (const Stop&) {
  }
  if (!r.ok) r.commands.clear();
  return r;
}

}  // namespace flemma::shellwords
