// libFuzzer target for the escaping of model text (`make fuzz`): for any text,
// fed to the streaming escaper in pieces split anywhere (the first input byte
// seeds the cuts),
//   - the output is the same as escaping the whole at once;
//   - unescape(escape(text)) == text;
//   - the escaped text written as an assistant's answer (with the line that
//     closes a fence it leaves open, as the writer adds it) parses as that one
//     message of text: no tool use, no result, no thinking, no other message,
//     no fence left open, and its text unescaped is the text (as the parser
//     reads lines: one CR before each LF dropped, blank lines around trimmed);
//   - written as thinking, it is one thinking block whose text unescaped is
//     the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "document.hpp"
#include "escape.hpp"

namespace {

namespace d = flemma::document;
namespace e = flemma::escape;

bool blank_char(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
bool blank(std::string_view s) {
  for (char c : s)
    if (!blank_char(c)) return false;
  return true;
}

std::vector<std::string_view> lines_of(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t nl = s.find('\n', start);
    std::string_view l =
        s.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    out.push_back(l);
    if (nl == std::string_view::npos) return out;
    start = nl + 1;
  }
}

std::string join(const std::vector<std::string_view>& ls, size_t a, size_t b) {
  std::string out;
  for (size_t i = a; i < b; ++i) {
    if (i > a) out.push_back('\n');
    out.append(ls[i]);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t seed = data[0] | 1u;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  // Streaming at random cuts == at once.
  e::Escaper esc;
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    size_t n = 1 + seed % 17;
    esc.feed(text.substr(at, n), false, out);
    at += std::min(n, text.size() - at);
  }
  esc.feed("", true, out);
  if (out != e::escape(text)) std::abort();
  if (e::unescape(out) != text) std::abort();

  // As an assistant's text.
  std::string body = out;
  std::string expect_src(text);
  if (esc.fence_ch()) {
    std::string closer(static_cast<size_t>(esc.fence_len()), esc.fence_ch());
    if (!body.empty() && body.back() != '\n') {
      body.push_back('\n');
      expect_src.push_back('\n');
    }
    body += closer;
    expect_src += closer;
  }
  const std::string chat = "@You:\nq\n\n@Assistant:\n" + body + "\n\n@You:\n";
  d::Document doc = d::parse(chat);
  int msgs = 0, texts = 0;
  std::string got;
  for (const auto& it : doc.items) {
    if (it.kind == FLEMMA_DOC_MESSAGE) {
      ++msgs;
      const int want = msgs == 2 ? FLEMMA_DOC_ASSISTANT : FLEMMA_DOC_USER;
      if (it.role != want) std::abort();
    } else if (it.kind == FLEMMA_DOC_TEXT) {
      if (msgs == 2) {
        ++texts;
        got = e::unescape(doc.str(chat, it.body));
      }
    } else {
      std::abort();  // structure from text
    }
  }
  if (msgs != 3 || texts > 1 || !doc.unclosed.empty()) std::abort();
  auto ls = lines_of(expect_src);
  size_t a = 0, b = ls.size();
  while (a < b && blank(ls[a])) ++a;
  while (b > a && blank(ls[b - 1])) --b;
  if (got != join(ls, a, b)) std::abort();

  // As thinking.
  const std::string think = "@Assistant:\n<thinking>\n" + out + "\n</thinking>\n\n@You:\n";
  d::Document td = d::parse(think);
  int thinking = 0, tm = 0;
  for (const auto& it : td.items) {
    if (it.kind == FLEMMA_DOC_MESSAGE) {
      ++tm;
    } else if (it.kind == FLEMMA_DOC_THINKING) {
      ++thinking;
      if (it.flags & FLEMMA_DOC_F_UNCLOSED) std::abort();
      auto tl = lines_of(text);
      if (e::unescape(td.str(think, it.body)) != join(tl, 0, tl.size())) std::abort();
    } else {
      std::abort();
    }
  }
  if (tm != 2 || thinking != 1) std::abort();
  return 0;
}
