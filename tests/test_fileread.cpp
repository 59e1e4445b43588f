#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fileread.hpp"
#include "flemma/flemma.h"

namespace fr = flemma::fileread;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flemma-fileread-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string write(const std::string& name, const std::string& content) const {
    std::string p = path + "/" + name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

fr::Request window(const std::string& path, int64_t first, int64_t max_lines, int64_t max_bytes) {
  fr::Request req;
  req.path = path;
  req.first_line = first;
  req.max_lines = max_lines;
  req.max_bytes = max_bytes;
  return req;
}

// Waits up to ms for the reader's descriptor, then takes one result.
std::unique_ptr<fr::Result> wait_result(fr::Reader& r, int ms) {
  struct pollfd p = {r.fd(), POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return nullptr;
  r.ack();
  return r.next();
}

}  // namespace

TEST_CASE("fileread: window mode") {
  TempDir d;
  SUBCASE("lines from first_line, counted to the end; a last line without newline counts") {
    auto p = d.write("a.txt", "1\n2\n3\n4\n5");
    auto r = fr::read_file(window(p, 2, 2, 1000));
    REQUIRE(r.ok);
    CHECK(r.type == fr::Type::Regular);
    CHECK(r.text == "2\n3");
    CHECK(r.shown_lines == 2);
    CHECK(r.total_lines == 5);
    CHECK(r.cut_by == 1);
    CHECK(r.size == 9);
  }
  SUBCASE("a final newline adds no line; empty file has none") {
    auto r = fr::read_file(window(d.write("b.txt", "x\n"), 1, 0, 100));
    CHECK(r.total_lines == 1);
    CHECK(r.text == "x");
    CHECK(r.cut_by == 0);
    r = fr::read_file(window(d.write("e.txt", ""), 1, 0, 100));
    CHECK(r.ok);
    CHECK(r.total_lines == 0);
    CHECK(r.text.empty());
  }
  SUBCASE("cut by bytes: a line that does not fit ends the window") {
    auto r = fr::read_file(window(d.write("c.txt", "aaaa\nbbbb\ncccc\n"), 1, 0, 9));
    CHECK(r.text == "aaaa\nbbbb");
    CHECK(r.cut_by == 2);
    CHECK(r.total_lines == 3);
  }
  SUBCASE("a first line over the limit is cut without splitting UTF-8") {
    std::string line;
    for (int i = 0; i < 10; ++i) line += "\xC3\xA9";  // é
    auto r = fr::read_file(window(d.write("u.txt", line + "\nnext\n"), 1, 0, 5));
    CHECK(r.long_line);
    CHECK(r.text == "\xC3\xA9\xC3\xA9");
    CHECK(r.shown_lines == 0);
    CHECK(r.total_lines == 2);
  }
  SUBCASE("lines across read chunks are whole") {
    std::string big;
    for (int i = 0; i < 20000; ++i) big += "line " + std::to_string(i) + "\n";
    auto r = fr::read_file(window(d.write("big.txt", big), 19999, 0, 100000));
    CHECK(r.total_lines == 20000);
    CHECK(r.text == "line 19998\nline 19999");
  }
  SUBCASE("max_line_bytes keeps and counts only the start of a long line") {
    std::string wide(5000, 'w');
    std::string body;
    for (int i = 0; i < 30; ++i) body += wide + "\n";
    fr::Request req = window(d.write("wide.txt", body), 1, 0, 51200);
    auto whole_lines = fr::read_file(req);
    CHECK(whole_lines.shown_lines == 10);  // 10 lines of 5000 bytes fill 51200
    req.max_line_bytes = 2000;
    auto r = fr::read_file(req);
    CHECK(r.total_lines == 30);
    CHECK(r.shown_lines == 25);  // 25 x (2004 + 1) <= 51200
    CHECK(r.text.substr(0, 2005) == std::string(2004, 'w') + "\n");
    CHECK_FALSE(r.long_line);
    req.max_line_bytes = 0;
    req.path = d.write("short.txt", "a\nbb\n");
    req.max_line_bytes = 2000;
    CHECK(fr::read_file(req).text == "a\nbb");
  }
  SUBCASE("head bytes") {
    fr::Request req = window(d.write("h.txt", "abcdef"), 1, 0, 100);
    req.head_bytes = 3;
    CHECK(fr::read_file(req).head == "abc");
  }
}

TEST_CASE("fileread: whole mode and refusals") {
  TempDir d;
  SUBCASE("bytes as they are, and cut_by when over max_bytes") {
    fr::Request req;
    req.path = d.write("w.txt", "a\r\nb\n");
    req.whole = true;
    req.max_bytes = 100;
    auto r = fr::read_file(req);
    CHECK(r.text == "a\r\nb\n");
    CHECK(r.cut_by == 0);
    req.max_bytes = 3;
    r = fr::read_file(req);
    CHECK(r.cut_by == 2);
  }
  SUBCASE("a FIFO, a directory and a device are refused without blocking") {
    std::string fifo = d.path + "/pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    auto r = fr::read_file(window(fifo, 1, 0, 100));
    CHECK_FALSE(r.ok);
    CHECK(r.type == fr::Type::Fifo);
    CHECK(r.message.find("FIFO") != std::string::npos);
    CHECK(fr::read_file(window(d.path, 1, 0, 100)).type == fr::Type::Directory);
    CHECK(fr::read_file(window("/dev/zero", 1, 0, 100)).type == fr::Type::CharDevice);
  }
  SUBCASE("a missing file gives its errno") {
    auto r = fr::read_file(window(d.path + "/none", 1, 0, 100));
    CHECK_FALSE(r.ok);
    CHECK(r.type == fr::Type::Missing);
    CHECK(r.err_no == ENOENT);
  }
}

TEST_CASE("fileread: the reader reports through its descriptor") {
  TempDir d;
  fr::Reader reader;
  auto p = d.write("r.txt", "hello\n");
  int64_t id = reader.start(window(p, 1, 0, 100));
  auto res = wait_result(reader, 5000);
  REQUIRE(res);
  CHECK(res->id == id);
  CHECK(res->text == "hello");
  CHECK(reader.running() == 0);
  // A cancelled read's result is dropped.
  int64_t id2 = reader.start(window(p, 1, 0, 100));
  reader.cancel(id2);
  auto none = wait_result(reader, 300);
  CHECK(none == nullptr);
  CHECK(reader.running() == 0);
}
