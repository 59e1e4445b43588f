// HTML into Markdown or plain text, and the fetched-page decoder (html.hpp).
#include "html.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "truncate.hpp"

namespace flemma::html {

namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_alnum(char c) { return is_alpha(c) || (c >= '0' && c <= '9'); }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); i++)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

void put_utf8(std::string& out, uint32_t cp) {
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

struct Named {
  const char* name;
  uint32_t cp;
};
// The named character references pages use most; others stay as written.
constexpr std::array<Named, 46> kNamed = {{
    {"amp", '&'},      {"lt", '<'},        {"gt", '>'},       {"quot", '"'},      {"apos", '\''},
    {"nbsp", ' '},     {"copy", 0xA9},     {"reg", 0xAE},     {"trade", 0x2122},  {"mdash", 0x2014},
    {"ndash", 0x2013}, {"hellip", 0x2026}, {"laquo", 0xAB},   {"raquo", 0xBB},    {"lsquo", 0x2018},
    {"rsquo", 0x2019}, {"ldquo", 0x201C},  {"rdquo", 0x201D}, {"sbquo", 0x201A},  {"bdquo", 0x201E},
    {"middot", 0xB7},  {"bull", 0x2022},   {"times", 0xD7},   {"divide", 0xF7},   {"euro", 0x20AC},
    {"pound", 0xA3},   {"yen", 0xA5},      {"cent", 0xA2},    {"sect", 0xA7},     {"para", 0xB6},
    {"deg", 0xB0},     {"plusmn", 0xB1},   {"larr", 0x2190},  {"rarr", 0x2192},   {"uarr", 0x2191},
    {"darr", 0x2193},  {"harr", 0x2194},   {"le", 0x2264},    {"ge", 0x2265},     {"ne", 0x2260},
    {"shy", 0xAD},     {"zwnj", 0x200C},   {"zwj", 0x200D},   {"thinsp", 0x2009}, {"ensp", 0x2002},
    {"emsp", 0x2003},
}};

// Decodes the character reference at s[i] == '&' into out; returns the bytes read
// (1 when it is not one: the '&' is then written as it is).
size_t entity(std::string_view s, size_t i, std::string& out) {
  size_t n = s.size();
  if (i + 1 < n && s[i + 1] == '#') {
    size_t j = i + 2;
    bool hex = j < n && (s[j] == 'x' || s[j] == 'X');
    if (hex) j++;
    size_t start = j;
    uint32_t cp = 0;
    bool big = false;
    while (j < n && j - start < 16) {
      char c = s[j];
      int d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (hex && lower(c) >= 'a' && lower(c) <= 'f')
        d = lower(c) - 'a' + 10;
      else
        break;
      if (cp > 0x10FFFF)
        big = true;
      else
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(d);
      j++;
    }
    if (j == start) {
      out += '&';
      return 1;
    }
    if (j < n && s[j] == ';') j++;
    put_utf8(out, big ? 0xFFFD : cp);
    return j - i;
  }
  size_t j = i + 1;
  while (j < n && j - i <= 10 && is_alnum(s[j])) j++;
  std::string_view name = s.substr(i + 1, j - i - 1);
  if (!name.empty()) {
    for (const auto& e : kNamed) {
      if (name == e.name) {
        put_utf8(out, e.cp);
        return j - i + ((j < n && s[j] == ';') ? 1 : 0);
      }
    }
  }
  out += '&';
  return 1;
}

// The decoded text of s (character references).
std::string decode_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '&')
      i += entity(s, i, out);
    else
      out += s[i++];
  }
  return out;
}

enum class Tag {
  Other,
  Block,  // p, div, section, ...
  Heading,
  Br,
  Hr,
  Ul,
  Ol,
  Li,
  Quote,
  Pre,
  Code,
  Em,
  Strong,
  Del,
  A,
  Img,
  Table,
  Tr,
  Cell,
  Raw,  // script, style, ...: content dropped
};

Tag classify(std::string_view name, int& level) {
  level = 0;
  struct Entry {
    const char* name;
    Tag tag;
  };
  static constexpr Entry kTags[] = {
      {"p", Tag::Block},        {"div", Tag::Block},     {"section", Tag::Block},
      {"article", Tag::Block},  {"header", Tag::Block},  {"footer", Tag::Block},
      {"main", Tag::Block},     {"nav", Tag::Block},     {"aside", Tag::Block},
      {"form", Tag::Block},     {"figure", Tag::Block},  {"figcaption", Tag::Block},
      {"dl", Tag::Block},       {"dt", Tag::Block},      {"dd", Tag::Block},
      {"address", Tag::Block},  {"details", Tag::Block}, {"summary", Tag::Block},
      {"fieldset", Tag::Block}, {"caption", Tag::Block}, {"body", Tag::Block},
      {"html", Tag::Block},     {"center", Tag::Block},  {"br", Tag::Br},
      {"hr", Tag::Hr},          {"ul", Tag::Ul},         {"menu", Tag::Ul},
      {"ol", Tag::Ol},          {"li", Tag::Li},         {"blockquote", Tag::Quote},
      {"pre", Tag::Pre},        {"code", Tag::Code},     {"kbd", Tag::Code},
      {"samp", Tag::Code},      {"tt", Tag::Code},       {"em", Tag::Em},
      {"i", Tag::Em},           {"cite", Tag::Em},       {"strong", Tag::Strong},
      {"b", Tag::Strong},       {"del", Tag::Del},       {"s", Tag::Del},
      {"strike", Tag::Del},     {"a", Tag::A},           {"img", Tag::Img},
      {"table", Tag::Table},    {"tr", Tag::Tr},         {"td", Tag::Cell},
      {"th", Tag::Cell},        {"script", Tag::Raw},    {"style", Tag::Raw},
      {"noscript", Tag::Raw},   {"template", Tag::Raw},  {"svg", Tag::Raw},
      {"math", Tag::Raw},       {"iframe", Tag::Raw},    {"object", Tag::Raw},
      {"canvas", Tag::Raw},     {"title", Tag::Raw},     {"textarea", Tag::Raw},
      {"select", Tag::Raw},
  };
  if (name.size() == 2 && name[0] == 'h' && name[1] >= '1' && name[1] <= '6') {
    level = name[1] - '0';
    return Tag::Heading;
  }
  for (const auto& e : kTags)
    if (name == e.name) return e.tag;
  return Tag::Other;
}

// One structural level that writes a prefix at the start of each of its lines.
struct Level {
  enum class Kind { List, Item, Quote } kind;
  bool ordered = false;
  int counter = 0;
  std::string first, cont;  // Item: the marker line's prefix, and the following lines'
  bool used = false;
};

class Converter {
 public:
  Converter(std::string_view src, Format format)
      : src_(src), md_(format == Format::Markdown), cap_(max_output(src.size())) {}

  std::string run() {
    size_t n = src_.size();
    size_t i = 0;
    while (i < n && !cut_) {
      char c = src_[i];
      if (c == '<' && i + 1 < n) {
        char d = src_[i + 1];
        if (d == '!' || d == '?') {
          i = skip_markup(i);
          continue;
        }
        if (is_alpha(d) || (d == '/' && i + 2 < n && is_alpha(src_[i + 2]))) {
          i = tag(i);
          continue;
        }
      }
      if (c == '&') {
        std::string tmp;
        i += entity(src_, i, tmp);
        text(tmp);
        continue;
      }
      size_t j = i + 1;
      while (j < n && src_[j] != '<' && src_[j] != '&') j++;
      text(src_.substr(i, j - i));
      i = j;
    }
    close_all();
    if (cut_) out_ += kCutNote;
    while (!out_.empty() && (out_.back() == '\n' || out_.back() == ' ')) out_.pop_back();
    if (!out_.empty()) out_ += '\n';
    return valid_utf8(out_);
  }

 private:
  // <!-- comments -->, <!DOCTYPE ...>, <?...?>: skipped; returns the index after.
  size_t skip_markup(size_t i) {
    if (src_.compare(i, 4, "<!--") == 0) {
      size_t e = src_.find("-->", i + 4);
      return e == std::string_view::npos ? src_.size() : e + 3;
    }
    size_t e = src_.find('>', i + 2);
    return e == std::string_view::npos ? src_.size() : e + 1;
  }

  // A start or end tag at src_[i] == '<'; returns the index after it.
  size_t tag(size_t i) {
    size_t n = src_.size();
    size_t j = i + 1;
    bool end = src_[j] == '/';
    if (end) j++;
    size_t ns = j;
    while (j < n && (is_alnum(src_[j]) || src_[j] == '-' || src_[j] == ':')) j++;
    std::string name;  // a name of 16 bytes or more is no tag this converter knows
    if (j - ns < 16)
      for (size_t k = ns; k < j; k++) name.push_back(lower(src_[k]));
    // Attributes, read once: only href, src and alt are kept.
    std::string href, srcattr, alt;
    bool self_closing = false;
    while (j < n && src_[j] != '>') {
      char c = src_[j];
      if (is_space(c)) {
        j++;
        continue;
      }
      if (c == '/') {
        self_closing = true;
        j++;
        continue;
      }
      self_closing = false;
      size_t as = j;
      while (j < n && !is_space(src_[j]) && src_[j] != '=' && src_[j] != '>' && src_[j] != '/') j++;
      if (j == as) {  // a stray '=': skip it
        j++;
        continue;
      }
      std::string_view aname = src_.substr(as, j - as);
      while (j < n && is_space(src_[j])) j++;
      std::string_view value;
      if (j < n && src_[j] == '=') {
        j++;
        while (j < n && is_space(src_[j])) j++;
        if (j < n && (src_[j] == '"' || src_[j] == '\'')) {
          char q = src_[j++];
          size_t vs = j;
          size_t e = src_.find(q, j);
          if (e == std::string_view::npos) e = n;
          value = src_.substr(vs, e - vs);
          j = e < n ? e + 1 : n;
        } else {
          size_t vs = j;
          while (j < n && !is_space(src_[j]) && src_[j] != '>') j++;
          value = src_.substr(vs, j - vs);
        }
      }
      if (value.size() <= kMaxUrl) {
        if (iequals(aname, "href"))
          href = decode_text(value);
        else if (iequals(aname, "src"))
          srcattr = decode_text(value);
        else if (iequals(aname, "alt"))
          alt = decode_text(value);
      }
    }
    size_t after = j < n ? j + 1 : n;
    int level = 0;
    Tag t = classify(name, level);
    if (end) {
      close_tag(t, level);
      return after;
    }
    if (t == Tag::Raw && !self_closing) return skip_raw(name, after);
    open_tag(t, level, href, srcattr, alt);
    return after;
  }

  // Skips the content of a raw-text element up to its end tag (one forward scan).
  size_t skip_raw(const std::string& name, size_t i) {
    size_t n = src_.size();
    while (true) {
      size_t e = src_.find("</", i);
      if (e == std::string_view::npos) return n;
      size_t k = e + 2;
      if (k + name.size() <= n && iequals(src_.substr(k, name.size()), name)) {
        size_t after = k + name.size();
        if (after >= n || src_[after] == '>' || is_space(src_[after]) || src_[after] == '/') {
          size_t gt = src_.find('>', after);
          return gt == std::string_view::npos ? n : gt + 1;
        }
      }
      i = e + 2;
    }
  }

  static bool url_ok(const std::string& u) {
    if (u.empty() || u.size() > kMaxUrl) return false;
    for (char c : u)
      if (static_cast<unsigned char>(c) < 0x20) return false;
    std::string head;
    for (size_t k = 0; k < u.size() && k < 12; k++) head += lower(u[k]);
    return head.rfind("javascript:", 0) != 0 && head.rfind("data:", 0) != 0 &&
           head.rfind("vbscript:", 0) != 0;
  }

  void open_heading(int level) {
    block(2);
    if (md_) {
      raw(std::string(static_cast<size_t>(level), '#') + " ");
      pending_space_ = false;
    }
    heading_++;
  }

  void open_br() {
    if (pre_ > 0)
      pre_buf_ += '\n';
    else if (code_ || cell_ || heading_)
      pending_space_ = true;
    else
      block(1, true);
  }

  // <li>: ends the open item of its list, starts one with the list's marker.
  void open_item() {
    if (cell_) return;
    if (!levels_.empty() && levels_.back().kind == Level::Kind::Item) pop_level();
    Level* list = nullptr;
    if (!levels_.empty() && levels_.back().kind == Level::Kind::List) list = &levels_.back();
    if (levels_.size() >= kMaxDepth) return;
    std::string marker = "- ";
    if (list && list->ordered) marker = std::to_string(++list->counter) + ". ";
    block(1);
    levels_.push_back(
        Level{Level::Kind::Item, false, 0, marker, std::string(marker.size(), ' '), false});
  }

  void open_link(const std::string& href) {
    if (link_ || code_ || pre_ > 0 || !url_ok(href)) return;
    if (md_) {
      inline_mark("[");
      link_start_ = out_.size();
    }
    link_ = true;
    link_href_ = href;
  }

  void open_image(const std::string& src, const std::string& alt) {
    if (code_ || pre_ > 0) return;
    if (md_ && url_ok(src)) {
      std::string a = collapse(alt);
      inline_mark("![" + escape_brackets(a) + "](" + src + ")");
    } else if (!alt.empty()) {
      text(alt);
    }
  }

  // <td>, <th>: a cell of the outermost table (a nested table's cells are spaces).
  void open_cell() {
    if (table_ != 1) {
      pending_space_ = true;
      return;
    }
    if (row_cells_ == 0) {
      block(1);
      raw("|");
    } else {
      raw(" |");
    }
    raw(" ");
    pending_space_ = false;
    row_cells_++;
    cell_ = true;
  }

  void open_tag(Tag t, int level, const std::string& href, const std::string& src,
                const std::string& alt) {
    switch (t) {
      case Tag::Block:
        block(2);
        break;
      case Tag::Heading:
        open_heading(level);
        break;
      case Tag::Br:
        open_br();
        break;
      case Tag::Hr:
        block(2);
        if (md_ && !cell_) {
          raw("---");
          block(2);
        }
        break;
      case Tag::Ul:
      case Tag::Ol:
        if (levels_.size() >= kMaxDepth || cell_) break;
        block(levels_.empty() ? 2 : 1);
        levels_.push_back(Level{Level::Kind::List, t == Tag::Ol, 0, {}, {}, false});
        break;
      case Tag::Li:
        open_item();
        break;
      case Tag::Quote:
        if (levels_.size() >= kMaxDepth || cell_) break;
        block(2);
        levels_.push_back(Level{Level::Kind::Quote, false, 0, "> ", "> ", false});
        break;
      case Tag::Pre:
        if (pre_++ == 0) {
          if (code_) end_code();
          block(2);
          pre_buf_.clear();
        }
        break;
      case Tag::Code:
        if (pre_ > 0 || code_) break;
        code_ = true;
        code_buf_.clear();
        break;
      case Tag::Em:
        if (md_ && !code_ && pre_ == 0) inline_mark("*");
        break;
      case Tag::Strong:
        if (md_ && !code_ && pre_ == 0) inline_mark("**");
        break;
      case Tag::Del:
        if (md_ && !code_ && pre_ == 0) inline_mark("~~");
        break;
      case Tag::A:
        open_link(href);
        break;
      case Tag::Img:
        open_image(src, alt);
        break;
      case Tag::Table:
        if (table_++ == 0) {
          block(2);
          rows_ = 0;
          row_cells_ = 0;
          cell_ = false;
        }
        break;
      case Tag::Tr:
        if (table_ == 1) end_row();
        break;
      case Tag::Cell:
        open_cell();
        break;
      case Tag::Other:
      case Tag::Raw:
        break;
    }
  }

  void close_tag(Tag t, int) {
    switch (t) {
      case Tag::Block:
        block(2);
        break;
      case Tag::Heading:
        if (heading_ > 0) heading_--;
        block(2);
        break;
      case Tag::Ul:
      case Tag::Ol:
        // Closes the innermost list with what is open inside it.
        for (size_t k = levels_.size(); k-- > 0;) {
          if (levels_[k].kind == Level::Kind::List) {
            while (levels_.size() > k) pop_level();
            block(levels_.empty() ? 2 : 1);
            break;
          }
        }
        break;
      case Tag::Li:
        if (!levels_.empty() && levels_.back().kind == Level::Kind::Item) {
          pop_level();
          block(1);
        }
        break;
      case Tag::Quote:
        for (size_t k = levels_.size(); k-- > 0;) {
          if (levels_[k].kind == Level::Kind::Quote) {
            while (levels_.size() > k) pop_level();
            block(2);
            break;
          }
        }
        break;
      case Tag::Pre:
        if (pre_ > 0 && --pre_ == 0) end_pre();
        break;
      case Tag::Code:
        if (code_ && pre_ == 0) end_code();
        break;
      case Tag::Em:
        if (md_ && !code_ && pre_ == 0) raw("*");
        break;
      case Tag::Strong:
        if (md_ && !code_ && pre_ == 0) raw("**");
        break;
      case Tag::Del:
        if (md_ && !code_ && pre_ == 0) raw("~~");
        break;
      case Tag::A:
        end_link();
        break;
      case Tag::Table:
        if (table_ > 0 && --table_ == 0) {
          end_row();
          block(2);
        }
        break;
      case Tag::Tr:
        if (table_ == 1) end_row();
        break;
      case Tag::Cell:
        break;
      default:
        break;
    }
  }

  void end_link() {
    if (!link_) return;
    link_ = false;
    if (!md_) return;
    if (out_.size() == link_start_ && !out_.empty() && out_.back() == '[') {
      out_.pop_back();  // a link without text: nothing to show
      return;
    }
    raw("](" + link_href_ + ")");
  }

  void end_row() {
    if (cell_) cell_ = false;
    if (row_cells_ > 0) {
      raw(" |");
      if (rows_ == 0 && md_) {
        std::string sep = "|";
        for (int k = 0; k < row_cells_; k++) sep += " --- |";
        block(1);
        raw(sep);
      }
      rows_++;
      block(1);
    }
    row_cells_ = 0;
  }

  void end_code() {
    code_ = false;
    std::string body = collapse(code_buf_);
    code_buf_.clear();
    if (body.empty()) return;
    if (!md_) {
      text(body);
      return;
    }
    size_t run = longest_run(body, '`');
    std::string fence(run + 1, '`');
    bool pad = body.front() == '`' || body.back() == '`';
    inline_mark(fence + (pad ? " " : "") + body + (pad ? " " : "") + fence);
  }

  void end_pre() {
    std::string body;
    body.reserve(pre_buf_.size());
    for (size_t k = 0; k < pre_buf_.size(); k++) {
      char c = pre_buf_[k];
      if (c == '\r') {
        if (k + 1 < pre_buf_.size() && pre_buf_[k + 1] == '\n') continue;
        c = '\n';
      }
      body += c;
    }
    pre_buf_.clear();
    size_t lead = body.find_first_not_of('\n');
    body.erase(0, lead == std::string::npos ? body.size() : lead);
    while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.pop_back();
    if (body.empty()) return;
    block(2);
    std::string fence;
    if (md_) {
      fence.assign(std::max<size_t>(3, longest_run(body, '`') + 1), '`');
      raw(fence);
    }
    size_t s = 0;
    bool first = !md_;
    while (s <= body.size()) {
      size_t e = body.find('\n', s);
      if (e == std::string::npos) e = body.size();
      if (!first) block(1, true);
      first = false;
      raw(body.substr(s, e - s));
      s = e + 1;
    }
    if (md_) {
      block(1, true);
      raw(fence);
    }
    block(2);
  }

  static size_t longest_run(const std::string& s, char ch) {
    size_t best = 0, cur = 0;
    for (char c : s) {
      cur = c == ch ? cur + 1 : 0;
      best = std::max(best, cur);
    }
    return best;
  }

  static std::string collapse(const std::string& s) {
    std::string out;
    bool sp = false;
    for (char c : s) {
      if (is_space(c)) {
        sp = !out.empty();
        continue;
      }
      if (sp) out += ' ';
      sp = false;
      out += c;
    }
    return out;
  }

  static std::string escape_brackets(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '[' || c == ']') out += '\\';
      out += c;
    }
    return out;
  }

  void pop_level() {
    if (levels_.empty()) return;
    levels_.pop_back();
  }

  void close_all() {
    if (code_) end_code();
    if (pre_ > 0) {
      pre_ = 0;
      end_pre();
    }
    end_link();
    if (table_ > 0) {
      table_ = 0;
      end_row();
    }
    levels_.clear();
  }

  // Asks for n line breaks (2: a blank line) before what comes next; `hard`
  // keeps them inside a heading (a <br> there is a space).
  void block(int n, bool hard = false) {
    if (cell_) {
      pending_space_ = true;
      return;
    }
    if (heading_ && !hard) {
      // A block inside a heading ends it on the same line.
      pending_space_ = true;
      return;
    }
    pending_nl_ = std::max(pending_nl_, n);
    pending_space_ = false;
  }

  // Starts a line: the pending breaks, then the prefix of each open level.
  void start_line() {
    if (out_.empty()) {
      pending_nl_ = 0;
    }
    if (pending_nl_ > 0) {
      for (int k = 0; k < pending_nl_; k++) {
        if (k > 0) {
          // A blank line inside a quote keeps its marker.
          std::string p = blank_prefix();
          while (!p.empty() && p.back() == ' ') p.pop_back();
          emit(p);
        }
        emit("\n");
      }
      pending_nl_ = 0;
      at_line_start_ = true;
    }
    if (at_line_start_) {
      emit(prefix(true));
      at_line_start_ = false;
    }
  }

  // The prefix of a blank line: the quote markers only.
  std::string blank_prefix() const {
    std::string p;
    for (const auto& l : levels_) {
      if (l.kind == Level::Kind::Quote) p += md_ ? "> " : "";
      if (l.kind == Level::Kind::Item) p += l.cont;
    }
    return p;
  }

  std::string prefix(bool consume) {
    std::string p;
    for (auto& l : levels_) {
      if (l.kind == Level::Kind::List) continue;
      if (l.kind == Level::Kind::Quote) {
        p += md_ ? "> " : "  ";
      } else if (!l.used) {
        p += l.first;
        if (consume) l.used = true;
      } else {
        p += l.cont;
      }
    }
    return p;
  }

  void emit(std::string_view s) {
    if (cut_) return;
    if (out_.size() + s.size() > cap_) {
      cut_ = true;
      return;
    }
    out_.append(s);
  }

  // Markup (not text): written as it is, after the pending breaks and space.
  void raw(std::string_view s) {
    start_line();
    emit(s);
  }

  void inline_mark(std::string_view s) {
    if (pending_space_) {
      start_line();
      if (!at_line_start_ && !out_.empty() && out_.back() != ' ' && out_.back() != '\n') emit(" ");
      pending_space_ = false;
    }
    raw(s);
  }

  // Text of the page: whitespace collapsed (kept inside <pre>).
  void text(std::string_view s) {
    if (pre_ > 0) {
      if (pre_buf_.size() + s.size() > cap_) {
        cut_ = true;
        return;
      }
      pre_buf_.append(s);
      return;
    }
    if (code_) {
      if (code_buf_.size() + s.size() > cap_) {
        cut_ = true;
        return;
      }
      code_buf_.append(s);
      return;
    }
    size_t k = 0;
    while (k < s.size()) {
      if (is_space(s[k])) {
        pending_space_ = true;
        k++;
        continue;
      }
      size_t e = k;
      while (e < s.size() && !is_space(s[e])) e++;
      if (pending_space_) {
        bool line_start = out_.empty() || pending_nl_ > 0 || at_line_start_;
        start_line();
        if (!line_start && !out_.empty() && out_.back() != ' ') emit(" ");
        pending_space_ = false;
      } else {
        start_line();
      }
      std::string_view word = s.substr(k, e - k);
      if (cell_ && md_ && word.find('|') != std::string_view::npos) {
        std::string w;
        for (char c : word) {
          if (c == '|') w += '\\';
          w += c;
        }
        emit(w);
      } else {
        emit(word);
      }
      k = e;
    }
  }

  std::string_view src_;
  bool md_;
  size_t cap_;
  std::string out_;
  bool cut_ = false;
  int pending_nl_ = 0;
  bool pending_space_ = false;
  bool at_line_start_ = true;
  std::vector<Level> levels_;
  int heading_ = 0;
  int pre_ = 0;
  std::string pre_buf_;
  bool code_ = false;
  std::string code_buf_;
  bool link_ = false;
  size_t link_start_ = 0;
  std::string link_href_;
  int table_ = 0, rows_ = 0, row_cells_ = 0;
  bool cell_ = false;
};

std::string lower_str(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = lower(c);
  return out;
}

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_space(s[a])) a++;
  while (b > a && is_space(s[b - 1])) b--;
  return std::string(s.substr(a, b - a));
}

}  // namespace

std::string to_markdown(std::string_view html, Format format) {
  return Converter(html, format).run();
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t n = s.size();
  for (size_t i = 0; i < n;) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == 0)
        out += "\xEF\xBF\xBD";
      else
        out += static_cast<char>(c);
      i++;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
      min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; k++) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80)
        ok = false;
      else
        cp = (cp << 6) | (d & 0x3F);
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (!ok) {
      out += "\xEF\xBF\xBD";
      i++;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

std::string latin1_to_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char ch : s) put_utf8(out, static_cast<unsigned char>(ch));
  return out;
}

FetchDecoder::FetchDecoder(Mode mode, int64_t max_body, int64_t head_lines, int64_t head_bytes,
                           std::string save_path)
    : mode_(mode),
      max_body_(max_body > 0 ? static_cast<size_t>(max_body) : size_t{5} << 20),
      head_lines_(head_lines),
      head_bytes_(head_bytes),
      save_path_(std::move(save_path)) {}

namespace {
// Writes text to a new file (0600, never an existing one); false on any failure
// (the partial file is removed).
bool save_new(const std::string& path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = done == text.size();
  if (::close(fd) != 0) ok = false;
  if (!ok) ::unlink(path.c_str());
  return ok;
}
}  // namespace

void FetchDecoder::page(std::string text, std::vector<stream::Event>& out) {
  stream::Event e;
  e.type = static_cast<stream::Type>(kPage);
  if (head_lines_ > 0 || head_bytes_ > 0) {
    truncate::Result r = truncate::truncate_head(text, head_lines_, head_bytes_);
    e.usage[0] = r.total_lines;
    e.usage[1] = r.total_bytes;
    e.usage[2] = r.output_lines;
    e.usage[3] = r.output_bytes;
    if (r.truncated) {
      e.status = 1;
      if (!save_path_.empty() && save_new(save_path_, text)) e.b = save_path_;
      e.a = std::move(r.content);
      out.push_back(std::move(e));
      return;
    }
  } else {
    e.usage[0] = e.usage[2] = truncate::count_lines(text);
    e.usage[1] = e.usage[3] = static_cast<int64_t>(text.size());
  }
  e.a = std::move(text);
  out.push_back(std::move(e));
}

bool FetchDecoder::mode_from_name(std::string_view name, Mode& mode) {
  if (name == "markdown") {
    mode = Mode::Markdown;
  } else if (name == "text") {
    mode = Mode::Text;
  } else if (name == "raw") {
    mode = Mode::Raw;
  } else {
    return false;
  }
  return true;
}

void FetchDecoder::fail(const char* type, const std::string& message,
                        std::vector<stream::Event>& out) {
  if (failed_) return;
  failed_ = true;
  stream::Event e;
  e.type = stream::Type::Error;
  e.a = type;
  e.b = message;
  out.push_back(std::move(e));
}

void FetchDecoder::header_block(std::vector<stream::Event>& out) {
  // head_ holds one block, its blank line included.
  std::string_view h(head_);
  size_t eol = h.find('\n');
  std::string_view status_line = h.substr(0, eol);
  if (status_line.rfind("HTTP/", 0) != 0) {
    fail("bad_response", "the answer is not an HTTP response", out);
    return;
  }
  size_t sp = status_line.find(' ');
  int status = 0;
  for (size_t k = sp == std::string_view::npos ? status_line.size() : sp + 1;
       k < status_line.size() && status_line[k] >= '0' && status_line[k] <= '9' && status < 1000;
       k++)
    status = status * 10 + (status_line[k] - '0');
  if (status >= 100 && status < 200) {
    head_.clear();
    return;  // an interim answer: the real one follows
  }
  status_ = status;
  headers_.clear();
  content_type_.clear();
  size_t pos = eol == std::string_view::npos ? h.size() : eol + 1;
  while (pos < h.size()) {
    size_t e = h.find('\n', pos);
    if (e == std::string_view::npos) e = h.size();
    std::string_view line = h.substr(pos, e - pos);
    pos = e + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t colon = line.find(':');
    if (line.empty() || colon == std::string_view::npos || colon == 0) continue;
    std::string name = lower_str(trim(line.substr(0, colon)));
    std::string value = trim(line.substr(colon + 1));
    for (auto& c : value)
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') c = ' ';
    if (name == "content-type") content_type_ = lower_str(value);
    headers_ += name + ": " + value + "\n";
  }
  head_.clear();
  in_body_ = true;
  stream::Event e;
  e.type = stream::Type::Http;
  e.status = status_;
  e.a = valid_utf8(headers_);
  out.push_back(std::move(e));
}

void FetchDecoder::feed(std::string_view bytes, std::vector<stream::Event>& out) {
  if (failed_ || finished_) return;
  while (!bytes.empty() && !in_body_ && !failed_) {
    // Header lines: up to the blank line that ends the block.
    size_t nl = bytes.find('\n');
    std::string_view piece = nl == std::string_view::npos ? bytes : bytes.substr(0, nl + 1);
    bytes.remove_prefix(piece.size());
    if (head_.size() + piece.size() > kMaxHeaderBlock) {
      fail("bad_response", "the answer's headers are larger than 64 KiB", out);
      return;
    }
    head_.append(piece);
    if (head_.size() >= 5 && head_.rfind("HTTP/", 0) != 0) {
      fail("bad_response", "the answer is not an HTTP response", out);
      return;
    }
    size_t hs = head_.size();
    bool blank = (hs >= 2 && head_.compare(hs - 2, 2, "\n\n") == 0) ||
                 (hs >= 4 && head_.compare(hs - 4, 4, "\r\n\r\n") == 0);
    if (blank) header_block(out);
  }
  if (failed_ || bytes.empty()) return;
  if (body_.size() + bytes.size() > max_body_) {
    fail("response_too_large",
         "the page is larger than " + std::to_string(max_body_) + " bytes (max_bytes)", out);
    body_.clear();
    return;
  }
  body_.append(bytes);
}

void FetchDecoder::finish(std::vector<stream::Event>& out) {
  if (finished_) return;
  finished_ = true;
  bool complete = false;
  if (!failed_ && !in_body_) {
    fail("bad_response", "no HTTP answer was read", out);
  } else if (!failed_ && status_ >= 300 && status_ < 400) {
    complete = true;  // a redirect: the caller follows it (or not)
  } else if (!failed_) {
    const std::string& ct = content_type_;
    bool html = ct.find("html") != std::string::npos;
    std::string_view head = std::string_view(body_).substr(0, 1024);
    if (ct.empty()) {
      std::string start = lower_str(trim(head));
      html = start.rfind("<!doctype html", 0) == 0 || start.rfind("<html", 0) == 0;
    }
    bool textual = html || ct.rfind("text/", 0) == 0 || ct.find("json") != std::string::npos ||
                   ct.find("xml") != std::string::npos ||
                   ct.find("javascript") != std::string::npos ||
                   ct.find("yaml") != std::string::npos || ct.find("csv") != std::string::npos ||
                   ct.find("toml") != std::string::npos || ct.empty();
    bool nul = std::memchr(body_.data(), 0, std::min<size_t>(body_.size(), 65536)) != nullptr;
    if (!textual || (nul && !html)) {
      fail("not_text",
           "the page is not text (content type: " + (ct.empty() ? std::string("none") : ct) + ")",
           out);
    } else {
      std::string body = std::move(body_);
      body_.clear();
      if (ct.find("charset=iso-8859-1") != std::string::npos ||
          ct.find("charset=latin1") != std::string::npos ||
          ct.find("charset=windows-1252") != std::string::npos)
        body = latin1_to_utf8(body);
      if (html && mode_ != Mode::Raw)
        page(to_markdown(body, mode_ == Mode::Markdown ? Format::Markdown : Format::Text), out);
      else
        page(valid_utf8(body), out);
      complete = true;
    }
  }
  stream::Event end;
  end.type = stream::Type::End;
  end.status = complete ? 1 : 0;
  out.push_back(std::move(end));
}

}  // namespace flemma::html
