#include "fileread.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "guard.hpp"

namespace flemma::fileread {

namespace {

Type type_of(mode_t mode) {
  if (S_ISREG(mode)) return Type::Regular;
  if (S_ISDIR(mode)) return Type::Directory;
  if (S_ISFIFO(mode)) return Type::Fifo;
  if (S_ISSOCK(mode)) return Type::Socket;
  if (S_ISCHR(mode)) return Type::CharDevice;
  if (S_ISBLK(mode)) return Type::BlockDevice;
  return Type::Other;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::Directory:
      return "a directory";
    case Type::Fifo:
      return "a FIFO";
    case Type::Socket:
      return "a socket";
    case Type::CharDevice:
      return "a character device";
    case Type::BlockDevice:
      return "a block device";
    default:
      return "not a regular file";
  }
}

void fail(Result& r, int err, const std::string& what) {
  r.ok = false;
  r.err_no = err;
  r.message = what + ": " + std::strerror(err);
}

void refuse(Result& r, Type t) {
  r.ok = false;
  r.type = t;
  r.message = std::string("it is ") + type_name(t) + ", not a regular file";
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Window mode: lines split on "\n" (a final line without one counts), the kept
// ones joined by "\n", as the read tool shows them.
struct Window {
  const Request& req;
  Result& r;
  std::string line;      // the start of the current line while it may be kept
  int64_t line_len = 0;  // its whole length
  int64_t bytes = 0;     // bytes of text so far
  bool keeping() const { return r.cut_by == 0 && r.total_lines + 1 >= req.first_line; }

  void feed(const char* p, size_t n) {
    while (n > 0) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', n));
      size_t part = nl ? static_cast<size_t>(nl - p) : n;
      if (keeping()) {
        // A line longer than the limit is kept only as far as it can be shown.
        size_t cap = static_cast<size_t>(req.max_bytes) + 1;
        if (req.max_line_bytes > 0)
          cap = std::min(cap, static_cast<size_t>(req.max_line_bytes) + 4);
        if (line.size() < cap) line.append(p, std::min(part, cap - line.size()));
      }
      line_len += static_cast<int64_t>(part);
      if (!nl) return;
      end_line();
      p += part + 1;
      n -= part + 1;
    }
  }

  void end_line() {
    r.total_lines++;
    if (r.cut_by == 0 && r.total_lines >= req.first_line) {
      if (req.max_lines > 0 && r.shown_lines >= req.max_lines) {
        r.cut_by = 1;
      } else {
        int64_t kept = line_len;
        if (req.max_line_bytes > 0) kept = std::min(kept, req.max_line_bytes + 4);
        int64_t cost = kept + (r.shown_lines > 0 ? 1 : 0);
        if (bytes + cost > req.max_bytes) {
          if (r.shown_lines == 0) {
            r.text = cut_utf8(line, static_cast<size_t>(req.max_bytes));
            r.long_line = true;
          }
          r.cut_by = 2;
        } else {
          if (r.shown_lines > 0) r.text.push_back('\n');
          r.text.append(line);
          r.shown_lines++;
          bytes += cost;
        }
      }
    }
    line.clear();
    line_len = 0;
  }

  void finish(bool pending) {
    if (pending) end_line();
  }
};

}  // namespace

std::string cut_utf8(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t k = n;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) k--;
  return s.substr(0, k);
}

Result read_file(const Request& req) {
  Result r;
  struct stat st;
  if (::stat(req.path.c_str(), &st) != 0) {
    fail(r, errno, "cannot read " + req.path);
    return r;
  }
  r.type = type_of(st.st_mode);
  if (r.type != Type::Regular) {
    refuse(r, r.type);
    return r;
  }
  Fd f;
  f.fd = ::open(req.path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (f.fd < 0 && (errno == EWOULDBLOCK || errno == EAGAIN)) {
    // A lease held by another process: wait for it here, on this thread.
    f.fd = ::open(req.path.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC);
  }
  if (f.fd < 0) {
    fail(r, errno, "cannot read " + req.path);
    return r;
  }
  // What was opened may not be what was looked at (a FIFO swapped in).
  if (::fstat(f.fd, &st) != 0) {
    fail(r, errno, "cannot read " + req.path);
    return r;
  }
  r.type = type_of(st.st_mode);
  if (r.type != Type::Regular) {
    refuse(r, r.type);
    return r;
  }
  r.size = static_cast<int64_t>(st.st_size);
  const int64_t max_bytes = req.max_bytes < 0 ? 0 : req.max_bytes;
  Window win{req, r, {}, 0, 0};
  bool pending = false;  // bytes after the last "\n"
  std::string buf(req.chunk > 0 ? req.chunk : 64 * 1024, '\0');
  for (;;) {
    ssize_t got = ::read(f.fd, buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(r, errno, "cannot read " + req.path);
      r.text.clear();
      return r;
    }
    if (got == 0) break;
    const char* p = buf.data();
    size_t n = static_cast<size_t>(got);
    if (req.head_bytes > 0 && static_cast<int64_t>(r.head.size()) < req.head_bytes)
      r.head.append(p, std::min(n, static_cast<size_t>(req.head_bytes) - r.head.size()));
    if (req.whole) {
      size_t room =
          static_cast<size_t>(max_bytes) - std::min(r.text.size(), static_cast<size_t>(max_bytes));
      r.text.append(p, std::min(n, room));
      if (n > room) {
        r.cut_by = 2;
        break;  // more than asked for: the caller refuses it, no need to read on
      }
    } else {
      win.feed(p, n);
      pending = p[n - 1] != '\n';
    }
  }
  if (!req.whole) win.finish(pending);
  r.ok = true;
  return r;
}

struct Reader::Shared {
  std::mutex mu;
  std::deque<std::unique_ptr<Result>> done;
  std::unordered_set<int64_t> running;
  std::unordered_set<int64_t> dropped;
  int64_t next_id = 1;
  bool closed = false;
  int rfd = -1;
  int wfd = -1;

  ~Shared() {
    if (rfd >= 0) ::close(rfd);
    if (wfd >= 0) ::close(wfd);
  }

  // Called with mu held.
  void signal() {
    char c = 1;
    ssize_t w;
    do {
      w = ::write(wfd, &c, 1);
    } while (w < 0 && errno == EINTR);
    // EAGAIN: the pipe is full, so it is readable already.
  }
};

Reader::Reader() : shared_(std::make_shared<Shared>()) {
  int fds[2];
  if (::pipe(fds) != 0)
    throw Error(FLEMMA_E_IO, std::string("file reader: pipe failed: ") + std::strerror(errno));
  shared_->rfd = fds[0];
  shared_->wfd = fds[1];
  for (int fd : fds) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

Reader::~Reader() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->closed = true;
  shared_->done.clear();
}

int Reader::fd() const { return shared_->rfd; }

int64_t Reader::start(Request req) {
  if (req.path.empty()) throw Error(FLEMMA_E_INVALID, "file reader: empty path");
  if (req.max_bytes < 0) throw Error(FLEMMA_E_INVALID, "file reader: max_bytes < 0");
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (static_cast<int>(shared_->running.size()) >= kMaxRunning)
      throw Error(FLEMMA_E_STATE, "file reader: too many reads are waiting for their files (" +
                                      std::to_string(kMaxRunning) + ")");
    id = shared_->next_id++;
    shared_->running.insert(id);
  }
  std::shared_ptr<Shared> sh = shared_;
  try {
    std::thread([sh, id, req = std::move(req)]() noexcept {
      std::unique_ptr<Result> res;
      try {
        res = std::make_unique<Result>(read_file(req));
      } catch (const std::bad_alloc&) {
        res.reset();
      } catch (...) {
        res.reset();
      }
      if (!res) {
        try {
          res = std::make_unique<Result>();
          res->message = "out of memory while reading " + req.path;
        } catch (...) {
        }
      }
      std::lock_guard<std::mutex> lock(sh->mu);
      sh->running.erase(id);
      if (sh->dropped.erase(id) > 0 || sh->closed || !res) return;
      res->id = id;
      bool was_empty = sh->done.empty();
      sh->done.push_back(std::move(res));
      if (was_empty) sh->signal();
    }).detach();
  } catch (...) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->running.erase(id);
    throw;
  }
  return id;
}

void Reader::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->running.count(id)) {
    shared_->dropped.insert(id);
    return;
  }
  for (auto it = shared_->done.begin(); it != shared_->done.end(); ++it) {
    if ((*it)->id == id) {
      shared_->done.erase(it);
      return;
    }
  }
}

void Reader::ack() {
  char buf[256];
  while (::read(shared_->rfd, buf, sizeof buf) > 0) {
  }
}

std::unique_ptr<Result> Reader::next() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->done.empty()) return nullptr;
  auto r = std::move(shared_->done.front());
  shared_->done.pop_front();
  return r;
}

int Reader::running() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return static_cast<int>(shared_->running.size() - shared_->dropped.size() + shared_->done.size());
}

}  // namespace flemma::fileread
