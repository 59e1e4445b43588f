#include <doctest/doctest.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "redact.hpp"

namespace rd = flemma::redact;

namespace {

std::string streamed(const std::string& text, const std::vector<std::string>& values,
                     const std::vector<size_t>& cuts) {
  rd::Redactor r(values);
  std::string out;
  size_t pos = 0;
  for (size_t c : cuts) {
    if (c < pos || c > text.size()) continue;
    r.push(std::string_view(text).substr(pos, c - pos), out);
    pos = c;
  }
  r.push(std::string_view(text).substr(pos), out);
  r.finish(out);
  return out;
}

// The text streamed cut at every single position, and one byte at a time: each
// gives the whole-text result.
void check_every_cut(const std::string& text, const std::vector<std::string>& values,
                     const std::string& want) {
  CHECK(rd::redact_text(text, values) == want);
  for (size_t c = 0; c <= text.size(); c++) CHECK(streamed(text, values, {c}) == want);
  std::vector<size_t> all;
  for (size_t c = 1; c < text.size(); c++) all.push_back(c);
  CHECK(streamed(text, values, all) == want);
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flemma-redact-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string write(const std::string& name, const std::string& content) const {
    std::string p = path + "/" + name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("redact: a secret split at any point between pieces is removed") {
  check_every_cut("aaa sk-SECRET-1234 bbb sk-SECRET-1234", {"sk-SECRET-1234"},
                  "aaa [redacted] bbb [redacted]");
  check_every_cut("sk-SECRET-1234", {"sk-SECRET-1234"}, "[redacted]");
  // A near miss at the end is given back whole.
  check_every_cut("x sk-SECRET-123", {"sk-SECRET-1234"}, "x sk-SECRET-123");
}

TEST_CASE("redact: overlapping values, longest first, each over the previous one's text") {
  check_every_cut("xabcdefghy", {"abcdef", "defgh"}, "x[redacted]ghy");
  check_every_cut("abcdefgh", {"cdefgh", "abcd"}, "ab[redacted]");
  check_every_cut("aaaaaaa", {"aaa"}, "[redacted][redacted]a");
  // A later value found across an earlier replacement, as util.redact finds it.
  check_every_cut("SECRETXXYY", {"SECRETXX", "d]YY"}, "[redacte[redacted]");
}

TEST_CASE("redact: header values in both forms, any case, CRLF") {
  check_every_cut("Authorization: Bearer abc\r\nX-Api-Key: k1\nx-goog-api-key:k2", {},
                  "Authorization: [redacted]\r\nX-Api-Key: [redacted]\nx-goog-api-key:[redacted]");
  check_every_cut("header = \"Authorization: Bearer abc\"\nurl = \"x\"\n", {},
                  "header = \"Authorization: [redacted]\"\nurl = \"x\"\n");
  // The curl form's value runs to the quote or "\n" (a "\r" is part of it).
  check_every_cut("HEADER=\"  x-api-key :abc\r\nnext", {},
                  "HEADER=\"  x-api-key :[redacted]\nnext");
  // Lua's %s* after the colon takes newlines too.
  check_every_cut("authorization:\n\nfoo\nbar", {}, "authorization:\n\n[redacted]\nbar");
  // No colon: nothing.
  check_every_cut("authorization = bar\nx-api-keyz: 1", {}, "authorization = bar\nx-api-keyz: 1");
  check_every_cut("x-api-key: \"quoted\"", {}, "x-api-key: [redacted]\"quoted\"");
  check_every_cut("authorizauthorization: v", {}, "authorizauthorization: [redacted]");
  // A header's value that holds a secret and another header.
  check_every_cut("x-api-key: authorization: SEKRET\n", {"SEKRET"}, "x-api-key: [redacted]\n");
}

TEST_CASE("redact: binary bytes, an empty text, no values") {
  using namespace std::string_literals;
  std::string bin = "\0\xff x-api-key: \x01\x02\0abc\n\0TOKEN99\xfe"s;
  std::string want = "\0\xff x-api-key: [redacted]\n\0[redacted]\xfe"s;
  check_every_cut(bin, {"TOKEN99"}, want);
  check_every_cut("", {"abcd"}, "");
  check_every_cut("", {}, "");
  check_every_cut("plain text", {}, "plain text");
  check_every_cut("plain text", {"", "text"}, "plain [redacted]");
}

TEST_CASE("redact: random texts streamed in random pieces equal the whole-text result") {
  std::mt19937 rng(12345);
  const std::vector<std::string> frags = {"sk-ant-XY12",
                                          "XY12",
                                          "Authorization",
                                          "x-api-key",
                                          "X-GOOG-API-KEY",
                                          "header",
                                          " = ",
                                          "\"",
                                          ":",
                                          " ",
                                          "\n",
                                          "\r",
                                          "\t",
                                          "abc",
                                          "[redacted]",
                                          "=",
                                          "he",
                                          "x-ap",
                                          "d]",
                                          "auth"};
  const std::vector<std::string> values = {"sk-ant-XY12", "ant-XY", "XY12", "d]sk"};
  for (int round = 0; round < 3000; round++) {
    std::string text;
    int parts = static_cast<int>(rng() % 24);
    for (int k = 0; k < parts; k++) text += frags[rng() % frags.size()];
    std::vector<size_t> cuts;
    size_t ncuts = rng() % 6;
    for (size_t k = 0; k < ncuts; k++) cuts.push_back(text.empty() ? 0 : rng() % (text.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    std::string want = rd::redact_text(text, values);
    std::string got = streamed(text, values, cuts);
    if (got != want) {
      INFO("text: " << text);
      CHECK(got == want);
      break;
    }
  }
}

TEST_CASE("redact: a file is rewritten redacted, private, read in small pieces") {
  TempDir d;
  std::string text;
  for (int i = 0; i < 2000; i++) text += "line " + std::to_string(i) + " sk-SECRET-9\n";
  text += "Authorization: Bearer zzz\n";
  std::string p = d.write("out.txt", text);
  std::atomic<bool> cancel{false};
  auto r = rd::redact_file(p, {"sk-SECRET-9"}, cancel, 7);
  REQUIRE(r.ok);
  std::string got = slurp(p);
  CHECK(got == rd::redact_text(text, {"sk-SECRET-9"}));
  CHECK(got.find("SECRET") == std::string::npos);
  CHECK(got.find("zzz") == std::string::npos);
  struct stat st;
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK_FALSE(exists(p + ".redacted"));

  std::string empty = d.write("empty.txt", "");
  REQUIRE(rd::redact_file(empty, {}, cancel).ok);
  CHECK(exists(empty));
  CHECK(slurp(empty).empty());
}

TEST_CASE("redact: a file with nothing to redact is left as it is; a late change keeps its start") {
  TempDir d;
  std::atomic<bool> cancel{false};
  std::string clean;
  for (int i = 0; i < 300000; i++) clean += std::to_string(i) + "\n";
  std::string p = d.write("clean.txt", clean);
  struct stat before, after;
  REQUIRE(::stat(p.c_str(), &before) == 0);
  REQUIRE(rd::redact_file(p, {"sk-SECRET-9"}, cancel, 4096).ok);
  REQUIRE(::stat(p.c_str(), &after) == 0);
  CHECK(before.st_ino == after.st_ino);  // not rewritten
  CHECK(slurp(p) == clean);
  CHECK_FALSE(exists(p + ".redacted"));
  // The first secret is megabytes in: the new file holds the start as it was.
  std::string late = clean + "x sk-SECRET-9 y\n" + clean + "x-api-key: zz\n";
  std::string q = d.write("late.txt", late);
  REQUIRE(rd::redact_file(q, {"sk-SECRET-9"}, cancel, 1u << 20).ok);
  CHECK(slurp(q) == clean + "x [redacted] y\n" + clean + "x-api-key: [redacted]\n");
  struct stat st;
  REQUIRE(::stat(q.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("redact: a failure removes the file and the temporary one") {
  TempDir d;
  std::atomic<bool> cancel{false};
  // The temporary name is taken: never written through, both removed.
  std::string p = d.write("a.txt", "key sk-SECRET-9\n");
  std::string other = d.write("a.txt.redacted", "someone's");
  auto r = rd::redact_file(p, {"sk-SECRET-9"}, cancel);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("cannot create") != std::string::npos);
  CHECK_FALSE(exists(p));
  CHECK_FALSE(exists(other));
  // A missing file.
  r = rd::redact_file(d.path + "/missing", {}, cancel);
  CHECK_FALSE(r.ok);
  // Cancelled: removed.
  std::string q = d.write("b.txt", "data");
  cancel = true;
  r = rd::redact_file(q, {}, cancel);
  CHECK_FALSE(r.ok);
  CHECK(r.cancelled);
  CHECK_FALSE(exists(q));
  CHECK_FALSE(exists(q + ".redacted"));
}

TEST_CASE("redact: through the process manager, completion as an exit event") {
  TempDir d;
  std::string text = "a sk-SECRET-9 b\nx-api-key: k\n";
  std::string p = d.write("o.txt", text);
  std::string missing = d.path + "/nope";
  flemma_procmgr* mgr = flemma_procmgr_new();
  REQUIRE(mgr);
  const char* vals[] = {"sk-SECRET-9"};
  size_t lens[] = {11};
  int64_t id = 0, id2 = 0;
  REQUIRE(flemma_procmgr_redact_file(mgr, p.c_str(), vals, lens, 1, &id) == FLEMMA_OK);
  REQUIRE(flemma_procmgr_redact_file(mgr, missing.c_str(), nullptr, nullptr, 0, &id2) == FLEMMA_OK);
  CHECK(flemma_procmgr_redact_file(mgr, "", vals, lens, 1, &id2) == FLEMMA_E_INVALID);
  int exits = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (exits < 2 && std::chrono::steady_clock::now() < deadline) {
    pollfd pf{flemma_procmgr_fd(mgr), POLLIN, 0};
    ::poll(&pf, 1, 100);
    flemma_procmgr_ack(mgr);
    while (flemma_proc_event* e = flemma_procmgr_next_event(mgr)) {
      CHECK(e->kind == FLEMMA_PROC_EXIT);
      if (e->id == id) {
        CHECK(e->exit_code == 0);
        CHECK(e->error == nullptr);
      } else {
        CHECK(e->exit_code == 2);
        REQUIRE(e->error != nullptr);
        CHECK(std::string(e->error, e->error_len).find("cannot read") != std::string::npos);
      }
      exits++;
      flemma_proc_event_free(e);
    }
  }
  CHECK(exits == 2);
  CHECK(slurp(p) == "a [redacted] b\nx-api-key: [redacted]\n");
  CHECK(flemma_procmgr_running(mgr) == 0);
  flemma_procmgr_free(mgr);
}
