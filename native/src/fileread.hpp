// The file reader: reads a file on a native thread of its own, so that the host's
// thread never blocks on one (a FIFO, a device, a file behind a lease or on a hung
// mount). A read thread never calls into Lua: it queues its result and signals a
// file descriptor (a pipe) that the host polls; the host takes the results on its
// own thread with next(). Only regular files are read: the path is opened with
// O_NONBLOCK (a FIFO does not wait for a writer) and refused unless fstat says it
// is a regular file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace flemma::fileread {

// What a path is (FLEMMA_FILE_* in flemma.h).
enum class Type {
  Missing = 0,
  Regular = 1,
  Directory = 2,
  Fifo = 3,
  Socket = 4,
  CharDevice = 5,
  BlockDevice = 6,
  Other = 7
};

struct Request {
  std::string path;
  // Whole mode: the bytes as they are, at most max_bytes (cut_by = 2 when more).
  // Window mode: the lines from first_line (1-based), at most max_lines of them
  // (<= 0: no limit) and max_bytes (their text joined by "\n"), and every line counted.
  bool whole = false;
  int64_t first_line = 1;
  int64_t max_lines = 0;
  int64_t max_bytes = 51200;
  int64_t head_bytes = 0;  // the first bytes of the file, also returned
  // Window mode, > 0: a longer line is kept (and counted) as its first
  // max_line_bytes + 4 bytes only; the caller cuts it and says so.
  int64_t max_line_bytes = 0;
  size_t chunk = 64 * 1024;  // bytes per read() (smaller in tests and the fuzzer)
};

struct Result {
  int64_t id = 0;
  bool ok = false;
  int err_no = 0;  // errno of a failed stat, open or read
  Type type = Type::Missing;
  std::string message;  // why it failed ("" when ok)
  int64_t size = 0;     // st_size
  std::string head;
  std::string text;
  int64_t total_lines = 0;  // window mode: the lines of the file (a last one without "\n" counts)
  int64_t shown_lines = 0;  // window mode: the lines in text
  int cut_by = 0;           // 0 none, 1 max_lines, 2 max_bytes
  bool long_line =
      false;  // window mode: the first line alone was over max_bytes; text is its start
};

// Reads on the calling thread (the body of a read thread; tests call it directly).
Result read_file(const Request& req);

// The start of s, at most n bytes, not cut inside a UTF-8 sequence.
std::string cut_utf8(const std::string& s, size_t n);

class Reader {
 public:
  Reader();   // throws flemma::Error when the pipe cannot be made
  ~Reader();  // results of reads still running are dropped when they end

  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // The descriptor that becomes readable when results are waiting.
  int fd() const;
  // Starts a read on a thread of its own; returns its id. Throws when too many
  // reads are still running (a file that never answers keeps its thread).
  int64_t start(Request req);
  // The read's result is dropped when it comes (its thread ends when the system
  // call it waits in returns).
  void cancel(int64_t id);
  // Resets the descriptor (call before taking results).
  void ack();
  // The next result, or nullptr.
  std::unique_ptr<Result> next();
  // Reads started whose result was not taken or dropped yet.
  int running() const;

  // The most reads that may run at once.
  static constexpr int kMaxRunning = 64;

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace flemma::fileread
