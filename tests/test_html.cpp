// The HTML converter and the fetched-page decoder (native/src/html.cpp).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <string>
#include <vector>

#include "html.hpp"

namespace html = flemma::html;
namespace stream = flemma::stream;

namespace {
std::string md(const std::string& s) { return html::to_markdown(s); }
std::string txt(const std::string& s) { return html::to_markdown(s, html::Format::Text); }

std::vector<stream::Event> decode(html::FetchDecoder::Mode mode, int64_t max,
                                  const std::string& input, size_t piece, int64_t head_lines = 0,
                                  const std::string& save = {}) {
  html::FetchDecoder d(mode, max, head_lines, 0, save);
  std::vector<stream::Event> evs;
  for (size_t i = 0; i < input.size(); i += piece)
    d.feed(std::string_view(input).substr(i, piece), evs);
  d.finish(evs);
  return evs;
}
}  // namespace

TEST_CASE("html: headings, paragraphs, emphasis and links") {
  CHECK(md("<h1>Title</h1><p>Some <b>bold</b> and <em>soft</em> text.</p>") ==
        "# Title\n\nSome **bold** and *soft* text.\n");
  CHECK(md("<h3> Deep\n heading </h3>") == "### Deep heading\n");
  CHECK(md("<p>See <a href=\"https://example.com/x?a=1&amp;b=2\">the docs</a>.</p>") ==
        "See [the docs](https://example.com/x?a=1&b=2).\n");
  CHECK(md("<a href='javascript:alert(1)'>click</a>") == "click\n");
  CHECK(md("<a href=\"/x\"></a>after") == "after\n");
  CHECK(md("<p>one</p>\n\n<p>two<br>three</p>") == "one\n\ntwo\nthree\n");
  CHECK(md("<img src=\"/a.png\" alt=\"A [b]\">") == "![A \\[b\\]](/a.png)\n");
  CHECK(md("<em>foo </em>bar") == "*foo* bar\n");
}

TEST_CASE("html: lists, nested and ordered") {
  CHECK(md("<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul>") == "- a\n- b\n  - c\n");
  CHECK(md("<ol><li>one<li>two<li>three</ol>") == "1. one\n2. two\n3. three\n");
  CHECK(md("<blockquote><p>quoted</p><p>more</p></blockquote>") == "> quoted\n>\n> more\n");
}

TEST_CASE("html: code and pre") {
  CHECK(md("<p>Run <code>ls -l</code> now</p>") == "Run `ls -l` now\n");
  CHECK(md("<code>a`b</code>") == "``a`b``\n");
  CHECK(md("<pre><code>int main() {\n  return 0;\n}\n</code></pre>") ==
        "```\nint main() {\n  return 0;\n}\n```\n");
  CHECK(md("<pre>has ``` inside</pre>") == "````\nhas ``` inside\n````\n");
  CHECK(md("<pre>a &lt;b&gt;</pre>") == "```\na <b>\n```\n");
}

TEST_CASE("html: tables, simply") {
  CHECK(md("<table><tr><th>k</th><th>v</th></tr><tr><td>a|b</td><td>2</td></tr></table>") ==
        "| k | v |\n| --- | --- |\n| a\\|b | 2 |\n");
}

TEST_CASE("html: scripts, styles and comments are dropped; entities decoded") {
  CHECK(md("<script>var x = '</p>';</script><style>p{}</style><!-- c -->ok") == "ok\n");
  CHECK(md("<SCRIPT type=x>a</SCRIPT >b") == "b\n");
  CHECK(md("<script>never closed <p>text") == "");
  CHECK(md("&lt;&gt;&amp;&quot;&#39;&#x41;&#65;&mdash;&unknown;&#0;") ==
        "<>&\"'AA\xE2\x80\x94&unknown;\xEF\xBF\xBD\n");
  CHECK(md("a &#x110000; b") == "a \xEF\xBF\xBD b\n");
}

TEST_CASE("html: plain text format has no markup") {
  CHECK(txt("<h1>T</h1><p><b>x</b> <a href=\"/y\">y</a></p><pre>c</pre>") == "T\n\nx y\n\nc\n");
}

TEST_CASE("html: invalid UTF-8 becomes U+FFFD; broken markup ends") {
  CHECK(md("a\xFF"
           "b") ==
        "a\xEF\xBF\xBD"
        "b\n");
  CHECK(md("<a href=\"x") == "");
  CHECK(md("<p") == "");
  CHECK(md("1 < 2") == "1 < 2\n");
  CHECK(html::valid_utf8("\xC3\xA9\xED\xA0\x80") == "\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(html::latin1_to_utf8("caf\xE9") == "caf\xC3\xA9");
}

TEST_CASE("html: nesting deeper than the limit is read as text, output is capped") {
  std::string deep;
  for (int i = 0; i < 10000; i++) deep += "<ul><li>";
  deep += "x";
  std::string out = md(deep);
  CHECK(out.find('x') != std::string::npos);
  CHECK(out.size() <= html::max_output(deep.size()));
  // Many breaks inside deep quotes cannot grow the output past its cap.
  std::string wide;
  for (int i = 0; i < 32; i++) wide += "<blockquote>";
  for (int i = 0; i < 200000; i++) wide += "<br>";
  wide += "x";
  out = md(wide);
  CHECK(out.size() <= html::max_output(wide.size()) + 1);
}

TEST_CASE("html: 5 MB of adversarial shapes convert within the output cap") {
  // Unclosed comments, many '<' and '&', unterminated attributes, raw-text end tags
  // that never close: each shape would be quadratic with a rescan (this case would
  // then not end); bench/html.lua measures the time.
  const std::vector<std::string> shapes = {"<",   "&",    "<!", "<a ",     "</",
                                           "<p>", "<li>", "&#", "</script"};
  for (const auto& shape : shapes) {
    std::string big;
    while (big.size() < (5u << 20)) big += shape;
    std::string out = md(big);
    CHECK(out.size() <= html::max_output(big.size()) + 1);
  }
  std::string script = "<script>";
  while (script.size() < (5u << 20)) script += "</scrip";
  CHECK(md(script) == "");
}

TEST_CASE("fetch decoder: headers, then the page converted") {
  std::string in =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/html; "
      "charset=utf-8\r\nX-A: b\r\n\r\n<h2>Hi</h2><p>there</p>";
  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, in.size()}) {
    auto evs = decode(html::FetchDecoder::Mode::Markdown, 1000, in, piece);
    REQUIRE(evs.size() == 3);
    CHECK(evs[0].type == stream::Type::Http);
    CHECK(evs[0].status == 200);
    CHECK(evs[0].a == "content-type: text/html; charset=utf-8\nx-a: b\n");
    CHECK(evs[1].type == static_cast<stream::Type>(html::kPage));
    CHECK(evs[1].a == "## Hi\n\nthere\n");
    CHECK(evs[2].type == stream::Type::End);
    CHECK(evs[2].status == 1);
  }
  auto raw = decode(html::FetchDecoder::Mode::Raw, 1000, in, 5);
  REQUIRE(raw.size() == 3);
  CHECK(raw[1].a == "<h2>Hi</h2><p>there</p>");
}

TEST_CASE("fetch decoder: redirects, size cap, binary and non-HTTP input") {
  auto r = decode(html::FetchDecoder::Mode::Markdown, 1000,
                  "HTTP/1.1 302 Found\nLocation: /next\n\nmoved", 4);
  REQUIRE(r.size() == 2);
  CHECK(r[0].status == 302);
  CHECK(r[0].a == "location: /next\n");
  CHECK(r[1].type == stream::Type::End);
  CHECK(r[1].status == 1);

  html::FetchDecoder d(html::FetchDecoder::Mode::Markdown, 10);
  std::vector<stream::Event> evs;
  d.feed("HTTP/1.1 200 OK\r\n\r\n0123456789", evs);
  CHECK_FALSE(d.failed());
  d.feed("x", evs);
  CHECK(d.failed());
  d.finish(evs);
  REQUIRE(evs.size() == 3);
  CHECK(evs[1].type == stream::Type::Error);
  CHECK(evs[1].a == "response_too_large");
  CHECK(evs[2].status == 0);

  auto bin = decode(html::FetchDecoder::Mode::Markdown, 1000,
                    "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n\r\n\x89PNG", 100);
  REQUIRE(bin.size() == 3);
  CHECK(bin[1].a == "not_text");
  auto nul = decode(html::FetchDecoder::Mode::Markdown, 1000,
                    std::string("HTTP/1.1 200 OK\r\n\r\na\0b", 22), 100);
  CHECK(nul[1].a == "not_text");
  auto bad = decode(html::FetchDecoder::Mode::Markdown, 1000, "<html>no headers", 3);
  CHECK(bad[0].type == stream::Type::Error);
  CHECK(bad[0].a == "bad_response");
  auto latin =
      decode(html::FetchDecoder::Mode::Text, 1000,
             "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=ISO-8859-1\r\n\r\ncaf\xE9", 100);
  CHECK(latin[1].a == "caf\xC3\xA9");
  auto sniff = decode(html::FetchDecoder::Mode::Markdown, 1000,
                      "HTTP/1.1 200 OK\r\n\r\n  <!DOCTYPE html><title>t</title><p>x</p>", 100);
  CHECK(sniff[1].a == "x\n");
}

TEST_CASE("fetch decoder: a long page keeps its head; the whole text goes to a new private file") {
  std::string body = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
  for (int i = 0; i < 100; i++) body += "line " + std::to_string(i) + "\n";
  std::string path = "/tmp/flemma-test-html-" + std::to_string(::getpid()) + ".txt";
  ::unlink(path.c_str());
  auto evs = decode(html::FetchDecoder::Mode::Markdown, 100000, body, 9, 10, path);
  REQUIRE(evs.size() == 3);
  const auto& p = evs[1];
  CHECK(p.type == static_cast<stream::Type>(html::kPage));
  CHECK(p.status == 1);
  CHECK(p.a.rfind("line 0\nline 1\n", 0) == 0);
  CHECK(p.a.find("line 10") == std::string::npos);
  CHECK(p.b == path);
  CHECK(p.usage[0] == 100);
  CHECK(p.usage[2] == 10);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string saved;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) saved.append(buf, n);
  std::fclose(f);
  CHECK(saved.find("line 99\n") != std::string::npos);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // An existing file is never written over: the head still comes, without a path.
  auto again = decode(html::FetchDecoder::Mode::Markdown, 100000, body, 9, 10, path);
  CHECK(again[1].status == 1);
  CHECK(again[1].b.empty());
  ::unlink(path.c_str());
  // Short enough: the whole text, not cut, no file.
  auto whole = decode(html::FetchDecoder::Mode::Markdown, 100000, body, 9, 1000, path);
  CHECK(whole[1].status == 0);
  CHECK(whole[1].b.empty());
  CHECK(::access(path.c_str(), F_OK) != 0);
}
