#include "process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string_view>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#if defined(__linux__)
#include <sys/eventfd.h>
#include <sys/syscall.h>
#endif

#include <nlohmann/json.hpp>

#include "guard.hpp"
#include "html.hpp"
#include "jsonrpc.hpp"
#include "reaper.hpp"
#include "truncate.hpp"

// unistd.h declares it only on some systems (with _GNU_SOURCE on glibc; not on macOS).
extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace flemma::process {

namespace {

constexpr int64_t kProgressIntervalMs = 100;
constexpr int64_t kLingerMs = 500;  // wait for EOF this long after the leader exits
constexpr size_t kLastLineCap = 512;
constexpr size_t kReadBuffer = 64 * 1024;

std::string errno_text(int err) { return std::strerror(err); }

// ---------------------------------------------------------------------------
// Registry of process groups that may be alive, shared by every manager, so
// that one call (or the library's unload) can kill them all.
// ---------------------------------------------------------------------------
struct Registry {
  std::mutex mu;
  std::set<pid_t> groups;
  // A spawn on a worker thread holds `launch` from its check of `generation`
  // until its group is registered; kill_all_groups counts `generation` up, then
  // takes `launch`: a child is either registered before the kill or never started.
  std::mutex launch;
  std::atomic<uint64_t> generation{0};
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: used from exit handlers
  return *r;
}
void registry_add(pid_t pgid) {
  std::lock_guard<std::mutex> lock(registry().mu);
  // Forget groups that have emptied since they were registered (a leader that
  // exited before its background jobs): their number may be reused by an
  // unrelated group, which kill_all must never hit.
  for (auto it = registry().groups.begin(); it != registry().groups.end();) {
    if (::kill(-*it, 0) < 0 && errno == ESRCH) {
      it = registry().groups.erase(it);
    } else {
      ++it;
    }
  }
  registry().groups.insert(pgid);
}
}  // namespace

bool is_registered(pid_t pgid) {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().groups.count(pgid) != 0;
}

std::mutex& testing::launch_mutex() { return registry().launch; }
uint64_t testing::kill_generation() { return registry().generation.load(); }

namespace {
void registry_remove(pid_t pgid) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().groups.erase(pgid);
}

// ---------------------------------------------------------------------------
// Output of one stream: counters, the tail window, and the spill file.
// ---------------------------------------------------------------------------
struct Collector {
  int64_t max_lines = 2000;
  int64_t max_bytes = 51200;
  std::string mem;  // the whole output while under the limits, then the tail window
  bool spilled = false;
  int fd = -1;
  std::string path;
  int64_t max_file_bytes = 0;  // <= 0: the spill file holds everything
  int64_t file_bytes = 0;      // bytes written to the spill file
  bool file_cut = false;       // the file reached max_file_bytes and ends with the note
  const char* prefix = "flemma-output-";
  std::string spill_dir =
      "/tmp";  // $TMPDIR read at spawn, on the host thread (getenv races setenv)
  int64_t total_bytes = 0;
  int64_t newlines = 0;
  char last_char = '\n';
  bool binary = false;
  bool write_failed = false;
  std::string cur_line;   // the (capped) start of the line being written
  std::string last_line;  // the last complete line (capped)

  ~Collector() {
    if (fd >= 0) ::close(fd);
  }

  // Writes to the spill file, at most max_file_bytes in all; the first write
  // past the cap is cut there and the file ends with one line saying so.
  void write_file(const char* p, size_t n) {
    if (file_cut) return;
    bool cut = false;
    if (max_file_bytes > 0 && file_bytes + static_cast<int64_t>(n) > max_file_bytes) {
      n = static_cast<size_t>(std::max<int64_t>(0, max_file_bytes - file_bytes));
      cut = true;
    }
    write_raw(p, n);
    file_bytes += static_cast<int64_t>(n);
    if (cut) {
      file_cut = true;
      std::string note = "\n[flemma: output file cut at " + std::to_string(max_file_bytes) +
                         " bytes; the rest was not kept]\n";
      write_raw(note.data(), note.size());
    }
  }

  void write_raw(const char* p, size_t n) {
    while (n > 0 && !write_failed) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        write_failed = true;
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void spill() {
    std::string tmpl = spill_dir + "/" + prefix + "XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    // Close-on-exec from the start: the host thread may be spawning right now.
    int f = ::mkostemp(buf.data(), O_CLOEXEC);
    if (f < 0) {
      // No file: keep bounding memory, the result just lacks a path.
      write_failed = true;
    } else {
      fd = f;
      path = buf.data();
      write_file(mem.data(), mem.size());
    }
    spilled = true;
  }

  // Lines are kept one byte past the cap, so that the cut can land on a code
  // point boundary (utf8_prefix needs to see the first byte left out).
  static constexpr size_t kKeep = kLastLineCap + 1;

  void track_lines(const char* p, size_t n) {
    const void* last_nl = nullptr;
    for (size_t i = n; i > 0; --i) {
      if (p[i - 1] == '\n') {
        last_nl = p + i - 1;
        break;
      }
    }
    if (!last_nl) {
      if (cur_line.size() < kKeep) cur_line.append(p, std::min(n, kKeep - cur_line.size()));
      return;
    }
    size_t nl = static_cast<size_t>(static_cast<const char*>(last_nl) - p);
    size_t prev = nl;
    bool found_prev = false;
    while (prev > 0) {
      if (p[prev - 1] == '\n') {
        found_prev = true;
        break;
      }
      --prev;
    }
    if (found_prev) {
      last_line.assign(p + prev, std::min(nl - prev, kKeep));
    } else {
      last_line = cur_line;
      if (last_line.size() < kKeep) last_line.append(p, std::min(nl, kKeep - last_line.size()));
    }
    if (last_line.size() > kLastLineCap)
      last_line.resize(truncate::utf8_prefix(last_line, kLastLineCap));
    else if (!last_line.empty() && last_line.back() == '\r')
      last_line.pop_back();
    cur_line.assign(p + nl + 1, std::min(n - nl - 1, kKeep));
  }

  void append(const char* p, size_t n) {
    if (n == 0) return;
    total_bytes += static_cast<int64_t>(n);
    for (size_t i = 0; i < n; ++i) newlines += (p[i] == '\n');
    last_char = p[n - 1];
    if (!binary && std::memchr(p, '\0', n)) binary = true;
    track_lines(p, n);
    if (!spilled) {
      mem.append(p, n);
      if (total_bytes > max_bytes || lines() > max_lines || binary)
        spill();
      else
        return;
    } else {
      write_file(p, n);
      mem.append(p, n);
    }
    // Keep the tail window only: between max_bytes+1 and 2*max_bytes+1 bytes.
    const size_t keep = static_cast<size_t>(max_bytes) + 1;
    if (mem.size() > 2 * keep) mem.erase(0, mem.size() - keep);
  }

  int64_t lines() const { return newlines + ((total_bytes > 0 && last_char != '\n') ? 1 : 0); }

  StreamResult finish() {
    StreamResult r;
    auto t = truncate::truncate_tail(mem, max_lines, max_bytes);
    r.tail = std::move(t.content);
    r.total_bytes = total_bytes;
    r.total_lines = lines();
    r.truncated = total_bytes > max_bytes || r.total_lines > max_lines;
    r.binary = binary;
    r.path = path;
    if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
    return r;
  }
};

}  // namespace

// ---------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------

const std::vector<std::string>& noninteractive_env() {
  static const std::vector<std::string> vars = {
      "CI=true",      "DEBIAN_FRONTEND=noninteractive", "PAGER=cat",       "GIT_PAGER=cat",
      "MANPAGER=cat", "GIT_TERMINAL_PROMPT=0",          "GIT_EDITOR=true", "NO_COLOR=1",
  };
  return vars;
}

bool is_secret_name(const std::string& name) {
  std::string up;
  up.reserve(name.size());
  for (char c : name) up += static_cast<char>((c >= 'a' && c <= 'z') ? c - 32 : c);
  // GIT_AUTHOR_NAME is not a secret: AUTH counts except in the word AUTHOR.
  for (size_t at = up.find("AUTH"); at != std::string::npos; at = up.find("AUTH", at + 1)) {
    bool word_start = at == 0 || up[at - 1] == '_';
    bool author = word_start && up.compare(at, 6, "AUTHOR") == 0 &&
                  (at + 6 == up.size() || up[at + 6] == '_');
    if (!author) return true;
  }
  static const char* const parts[] = {"KEY",    "TOKEN",      "SECRET",          "PASSWORD",
                                      "PASSWD", "CREDENTIAL", "SERVICE_ACCOUNT", "PRIVATE",
                                      "COOKIE", "SESSION"};
  for (const char* part : parts)
    if (up.find(part) != std::string::npos) return true;
  return up.size() > 4 && up.compare(up.size() - 4, 4, "_PAT") == 0;
}

bool is_secret_value(const char* value, size_t len) {
  std::string_view v(value, len);
  size_t begin = v.find("-----BEGIN ");
  if (begin != std::string_view::npos &&
      v.find("PRIVATE KEY-----", begin) != std::string_view::npos)
    return true;
  return v.find("\"private_key\"") != std::string_view::npos;
}

std::vector<std::string> build_env(const char* const* base, const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  std::unordered_map<std::string, size_t> index;
  std::vector<bool> removed;
  auto put = [&](const std::string& kv) {
    size_t eq = kv.find('=');
    if (eq == 0 || kv.empty()) return;
    if (eq == std::string::npos) {  // a bare NAME takes it out
      auto it = index.find(kv);
      if (it != index.end()) removed[it->second] = true;
      return;
    }
    std::string name = kv.substr(0, eq);
    auto it = index.find(name);
    if (it != index.end()) {
      out[it->second] = kv;
      removed[it->second] = false;
    } else {
      index.emplace(std::move(name), out.size());
      out.push_back(kv);
      removed.push_back(false);
    }
  };
  if (base) {
    for (const char* const* e = base; *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq && (is_secret_name(std::string(*e, static_cast<size_t>(eq - *e))) ||
                 is_secret_value(eq + 1, std::strlen(eq + 1))))
        continue;
      put(*e);
    }
  }
  for (const auto& kv : noninteractive_env()) put(kv);
  for (const auto& kv : extra) put(kv);
  std::vector<std::string> kept;
  kept.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(out[i]));
  return kept;
}

// ---------------------------------------------------------------------------
// The worker
// ---------------------------------------------------------------------------

struct Proc;

struct Request {
  enum class Kind {
    Add,
    Write,
    CloseStdin,
    Cancel,
    MarkAllCancelled,
    Shutdown,
    Pause,
    Resume,
    Unhold,
    Spawn,
    ReleaseCpu
  };
  Request(Kind k, int64_t i = 0, std::string d = {}, Proc* p = nullptr)
      : kind(k), id(i), data(std::move(d)), proc(p) {}
  Kind kind;
  int64_t id;
  std::string data;
  Proc* proc;  // Add, Spawn
};

struct Manager::Impl {
  // Shared with the host thread.
  std::mutex mu;
  std::deque<Request> requests;
  std::deque<std::unique_ptr<Event>> events;
  int event_rfd = -1;
  int event_wfd = -1;
  std::atomic<int> running{0};
  std::atomic<int64_t> next_id{1};
  // Decoded stream bytes queued per child, and the children whose reading the
  // worker stopped because of them (resumed once the host took them).
  std::unordered_map<int64_t, int64_t> queued;
  std::unordered_set<int64_t> held;
  // Children of spawn_async whose spawn the worker has not tried yet.
  std::unordered_map<int64_t, Proc*> pending;

  // Worker only.
  uv_loop_t loop{};
  uv_async_t wakeup{};
  std::thread thread;
  std::unordered_map<int64_t, Proc*> procs;
  bool shutting_down = false;

  // Searches and file redactions (each on a thread of its own), shared with the
  // host thread.
  struct SearchJob {
    std::thread thread;
    std::atomic<bool> cancel{false};
    std::atomic<bool> done{false};
  };
  std::mutex jobs_mu;
  std::unordered_map<int64_t, std::unique_ptr<SearchJob>> jobs;

  // Joins the jobs that ended (jobs_mu held).
  void join_ended_jobs() {
    for (auto it = jobs.begin(); it != jobs.end();) {
      if (it->second->done.load()) {
        if (it->second->thread.joinable()) it->second->thread.join();
        it = jobs.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Set with a posted Pause or Resume: the reader applies it between two reads
  // (apply_pauses) instead of after the up to 32 reads of one loop turn, which
  // took seconds with a slow decoder.
  std::atomic<bool> pause_posted{false};

  void post(Request r) {
    bool pause = r.kind == Request::Kind::Pause || r.kind == Request::Kind::Resume;
    {
      std::lock_guard<std::mutex> lock(mu);
      requests.push_back(std::move(r));
    }
    if (pause) pause_posted.store(true);
    uv_async_send(&wakeup);
  }

  void emit(std::unique_ptr<Event> ev) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu);
      was_empty = events.empty();
      events.push_back(std::move(ev));
    }
    if (was_empty) signal_fd();
  }

  // Queues decoded events of a child, merged into its batch still waiting in
  // the queue if there is one (the host has not taken it yet).
  // Returns true when the child's queued events passed kMaxQueuedStreamBytes:
  // the caller stops reading it (the host's next_event resumes it).
  bool emit_stream(int64_t id, std::vector<stream::Event> evs) {
    if (evs.empty()) return false;
    std::vector<stream::Event> batch;
    batch.reserve(evs.size());
    int64_t bytes = 0;
    for (auto& e : evs) {
      bytes += static_cast<int64_t>(e.a.size() + e.b.size()) + 64;
      stream::coalesce(batch, std::move(e));
    }
    bool was_empty, full;
    {
      std::lock_guard<std::mutex> lock(mu);
      was_empty = events.empty();
      if (!was_empty && events.back()->kind == Event::Kind::Stream && events.back()->id == id) {
        for (auto& e : batch) stream::coalesce(events.back()->stream, std::move(e));
        events.back()->queued_bytes += bytes;
      } else {
        auto ev = std::make_unique<Event>();
        ev->kind = Event::Kind::Stream;
        ev->id = id;
        ev->stream = std::move(batch);
        ev->queued_bytes = bytes;
        events.push_back(std::move(ev));
      }
      full = (queued[id] += bytes) > kMaxQueuedStreamBytes;
      if (full) held.insert(id);
    }
    if (was_empty) signal_fd();
    return full;
  }

  void signal_fd() {
#if defined(__linux__)
    uint64_t one = 1;
    while (::write(event_wfd, &one, sizeof one) < 0 && errno == EINTR) {
    }
#else
    char c = 1;
    while (::write(event_wfd, &c, 1) < 0 && errno == EINTR) {
    }
#endif
  }

  void run();
  void handle_requests();
  void apply_pauses();
};

struct Proc {
  Manager::Impl* mgr = nullptr;
  int64_t id = 0;
  pid_t pid = -1;
  int pidfd = -1;
  SpawnOptions opts;
  std::vector<std::string> env;  // the child's whole environment, built on the host thread
  // spawn_async: kill_all_groups' generation when it was asked for, and whether
  // a cancel came before the worker started it.
  uint64_t generation = 0;
  std::atomic<bool> spawn_cancelled{false};
  Collector out, err;

  uv_poll_t pid_poll{};
  uv_timer_t wait_timer{};  // exit polling when there is no pidfd
  uv_timer_t timeout{};
  uv_timer_t grace{};
  uv_timer_t linger{};
  uv_pipe_t out_pipe{}, err_pipe{}, in_pipe{};
  int out_fd = -1, err_fd = -1, in_fd = -1;
  bool out_open = false, err_open = false, in_open = false;
  bool in_shutdown_requested = false;
  int open_handles = 0;
  std::vector<char> buf = std::vector<char>(kReadBuffer);

  bool exited = false;
  int status = 0;
  bool timed_out = false, cancelled = false, killing = false, finished = false;
  uint64_t last_progress = 0;
  std::string progress_line;
  std::unique_ptr<stream::Decoder> decoder;       // stdout's decoder (opts.decoder)
  std::unique_ptr<jsonrpc::Decoder> rpc;          // or its JSON-RPC decoder (decoder "jsonrpc")
  std::unique_ptr<search::OutputDecoder> outdec;  // or a search output decoder
  std::unique_ptr<html::FetchDecoder> fetchdec;   // or a fetched page's decoder
  // Reading stdout: on unless the host paused it or its queued events are held.
  bool reading = false, paused = false, held = false;

  // The pid_poll handle (stopped and closed before the Proc is deleted) does
  // not own its descriptor.
  ~Proc() {
    if (pidfd >= 0) ::close(pidfd);
  }
};

namespace {

void on_handle_closed(uv_handle_t* h) {
  Proc* p = static_cast<Proc*>(h->data);
  if (--p->open_handles == 0) delete p;
}

void close_handle(Proc*, uv_handle_t* h) {
  if (!uv_is_closing(h)) uv_close(h, on_handle_closed);
}

void finish(Proc* p);

void maybe_finish(Proc* p) {
  if (p->finished || !p->exited) return;
  if (p->out_open || p->err_open) return;
  finish(p);
}

void kill_group(Proc* p, int sig) {
  if (::kill(-p->pid, sig) < 0 && errno == ESRCH && !p->exited) ::kill(p->pid, sig);
}

void start_kill(Proc* p) {
  if (p->killing || p->finished) return;
  p->killing = true;
  kill_group(p, SIGTERM);
  if (p->exited) {
    kill_group(p, SIGKILL);
    return;
  }
  uv_timer_start(
      &p->grace,
      [](uv_timer_t* t) {
        Proc* q = static_cast<Proc*>(t->data);
        kill_group(q, SIGKILL);
      },
      static_cast<uint64_t>(std::max<int64_t>(p->opts.kill_grace_ms, 0)), 0);
}

void close_stream(Proc* p, uv_pipe_t* pipe, bool& open) {
  if (!open) return;
  open = false;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(pipe));
  close_handle(p, reinterpret_cast<uv_handle_t*>(pipe));
}

Collector& collector_for(Proc* p, uv_stream_t* s) {
  return s == reinterpret_cast<uv_stream_t*>(&p->out_pipe) ? p->out : p->err;
}

void emit_progress(Proc* p, bool force) {
  if (!p->opts.progress) return;
  uint64_t now = uv_now(&p->mgr->loop);
  if (!force && now - p->last_progress < static_cast<uint64_t>(kProgressIntervalMs)) return;
  p->last_progress = now;
  auto ev = std::make_unique<Event>();
  ev->kind = Event::Kind::Progress;
  ev->id = p->id;
  ev->bytes = p->out.total_bytes + p->err.total_bytes;
  ev->lines = p->out.lines() + p->err.lines();
  ev->last_line = p->out.last_line.empty() ? p->err.last_line : p->out.last_line;
  p->mgr->emit(std::move(ev));
}

void on_alloc(uv_handle_t* h, size_t, uv_buf_t* b) {
  Proc* p = static_cast<Proc*>(h->data);
  *b = uv_buf_init(p->buf.data(), static_cast<unsigned>(p->buf.size()));
}

void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* b);

// Starts or stops reading stdout as the host's pause and the queue's hold say.
void update_reading(Proc* p) {
  if (!p->out_open) return;
  bool want = !p->paused && !p->held;
  if (want == p->reading) return;
  auto* s = reinterpret_cast<uv_stream_t*>(&p->out_pipe);
  if (want)
    uv_read_start(s, on_alloc, on_read);
  else
    uv_read_stop(s);
  p->reading = want;
}

// Decodes stdout (opts.decoder): the bytes are counted, not kept. Past
// max_stdout_bytes the stream fails; a failed stream stops the child.
void decode(Proc* p, const char* data, size_t n, bool end) {
  std::vector<stream::Event> evs;
  try {
    if (p->fetchdec) {
      if (end)
        p->fetchdec->finish(evs);
      else
        p->fetchdec->feed(std::string_view(data, n), evs);
    } else if (p->outdec) {
      if (end)
        p->outdec->finish(evs);
      else
        p->outdec->feed(std::string_view(data, n), evs);
    } else if (p->rpc) {
      if (end)
        p->rpc->finish(evs);
      else
        p->rpc->feed(std::string_view(data, n), evs);
    } else if (end) {
      p->decoder->finish(evs);
    } else {
      int64_t cap = p->opts.max_stdout_bytes;
      int64_t before = p->out.total_bytes - static_cast<int64_t>(n);
      if (cap > 0 && p->out.total_bytes > cap) {
        size_t room = before < cap ? static_cast<size_t>(cap - before) : 0;
        p->decoder->feed(std::string_view(data, room), evs);
        p->decoder->fail("the response is larger than " + std::to_string(cap) + " bytes", evs,
                         kResponseTooLarge);
      } else {
        p->decoder->feed(std::string_view(data, n), evs);
      }
    }
  } catch (const std::exception& e) {
    stream::Event err;
    err.type = stream::Type::Error;
    err.a = "decoder_error";
    err.b = e.what();
    evs.push_back(std::move(err));
  }
  if (p->mgr->emit_stream(p->id, std::move(evs)) && !end) {
    p->held = true;
    update_reading(p);
  }
}

void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* b) {
  Proc* p = static_cast<Proc*>(s->data);
  if (n > 0 && (p->decoder || p->rpc || p->outdec || p->fetchdec) &&
      s == reinterpret_cast<uv_stream_t*>(&p->out_pipe)) {
    p->out.total_bytes += n;
    decode(p, b->base, static_cast<size_t>(n), false);
    if (p->mgr->pause_posted.exchange(false)) p->mgr->apply_pauses();
    if (((p->decoder && p->decoder->failed()) || (p->fetchdec && p->fetchdec->failed())) &&
        p->out_open) {
      // Nothing more is read: the child is stopped like a cancel.
      close_stream(p, &p->out_pipe, p->out_open);
      start_kill(p);
      maybe_finish(p);
    }
    return;
  }
  if (n > 0) {
    collector_for(p, s).append(b->base, static_cast<size_t>(n));
    uv_update_time(&p->mgr->loop);
    emit_progress(p, false);
    return;
  }
  if (n < 0) {  // EOF or error: the stream is done
    if (s == reinterpret_cast<uv_stream_t*>(&p->out_pipe))
      close_stream(p, &p->out_pipe, p->out_open);
    else
      close_stream(p, &p->err_pipe, p->err_open);
    maybe_finish(p);
  }
}

// A decoded stream of a child being stopped is of no more use: it is not read
// further (a paused one would otherwise wait for its reader).
void stop_stream(Proc* p) {
  if ((p->decoder || p->fetchdec) && p->out_open) {
    close_stream(p, &p->out_pipe, p->out_open);
    maybe_finish(p);
  }
}

void on_exit_status(Proc* p, int status) {
  if (p->exited) return;
  p->exited = true;
  p->status = status;
  if (p->pidfd >= 0) {
    uv_poll_stop(&p->pid_poll);
  } else {
    uv_timer_stop(&p->wait_timer);
  }
  uv_timer_stop(&p->timeout);
  if (p->killing) {
    // The leader is gone; nothing of the group may outlive a cancel or timeout.
    kill_group(p, SIGKILL);
    uv_timer_stop(&p->grace);
  }
  if (p->out_open || p->err_open) {
    // Something in the group still holds the pipes: give it a moment, then stop reading.
    uv_timer_start(
        &p->linger,
        [](uv_timer_t* t) {
          Proc* q = static_cast<Proc*>(t->data);
          if (!q->killing && q->out_open && !q->reading) {
            // The host holds stdout back: what the child wrote waits in the pipe.
            return;  // the timer repeats
          }
          uv_timer_stop(t);
          close_stream(q, &q->out_pipe, q->out_open);
          close_stream(q, &q->err_pipe, q->err_open);
          maybe_finish(q);
        },
        p->killing ? 50 : kLingerMs, p->killing ? 50 : kLingerMs);
  }
  maybe_finish(p);
}

bool try_reap(Proc* p) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(p->pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == p->pid) {
    on_exit_status(p, status);
    return true;
  }
  if (r < 0 && errno == ECHILD) {  // reaped elsewhere: the status is lost
    on_exit_status(p, 0);
    return true;
  }
  return false;
}

void finish(Proc* p) {
  p->finished = true;
  if (p->decoder || p->rpc || p->outdec || p->fetchdec)
    decode(p, nullptr, 0, true);  // the last events, before the exit event
  uv_timer_stop(&p->linger);
  uv_timer_stop(&p->grace);
  auto ev = std::make_unique<Event>();
  ev->kind = Event::Kind::Exit;
  ev->id = p->id;
  if (WIFEXITED(p->status)) {
    ev->exit_code = WEXITSTATUS(p->status);
  } else if (WIFSIGNALED(p->status)) {
    ev->signal = WTERMSIG(p->status);
  }
  ev->timed_out = p->timed_out;
  ev->cancelled = p->cancelled;
  ev->bytes = p->out.total_bytes + p->err.total_bytes;
  ev->lines = p->out.lines() + p->err.lines();
  ev->last_line = p->out.last_line.empty() ? p->err.last_line : p->out.last_line;
  ev->out = p->out.finish();
  if (!p->opts.merge_output) ev->err = p->err.finish();
  // A group whose leader exited may still hold members (background jobs): keep
  // it registered for kill_all only while it exists.
  if (::kill(-p->pid, 0) < 0 && errno == ESRCH) registry_remove(p->pid);
  Manager::Impl* mgr = p->mgr;
  mgr->procs.erase(p->id);
  if (p->in_open) {
    p->in_open = false;
    close_handle(p, reinterpret_cast<uv_handle_t*>(&p->in_pipe));
  }
  if (p->pidfd >= 0)
    close_handle(p, reinterpret_cast<uv_handle_t*>(&p->pid_poll));
  else
    close_handle(p, reinterpret_cast<uv_handle_t*>(&p->wait_timer));
  close_handle(p, reinterpret_cast<uv_handle_t*>(&p->timeout));
  close_handle(p, reinterpret_cast<uv_handle_t*>(&p->grace));
  close_handle(p, reinterpret_cast<uv_handle_t*>(&p->linger));
  mgr->running.fetch_sub(1);
  mgr->emit(std::move(ev));
  if (mgr->shutting_down && mgr->procs.empty() &&
      !uv_is_closing(reinterpret_cast<uv_handle_t*>(&mgr->wakeup)))
    uv_close(reinterpret_cast<uv_handle_t*>(&mgr->wakeup), nullptr);
}

struct WriteReq {
  uv_write_t req{};
  std::string data;
  Proc* proc = nullptr;
};

void stdin_shutdown(Proc* p) {
  if (!p->in_open || p->in_shutdown_requested) return;
  p->in_shutdown_requested = true;
  // Close after the pending writes are flushed (a plain close would cancel them).
  auto* req = new uv_shutdown_t();
  req->data = p;
  int rc = uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&p->in_pipe), [](uv_shutdown_t* r, int) {
    Proc* q = static_cast<Proc*>(r->data);
    delete r;
    if (q->in_open) {
      q->in_open = false;
      close_handle(q, reinterpret_cast<uv_handle_t*>(&q->in_pipe));
    }
  });
  if (rc != 0) {
    delete req;
    p->in_open = false;
    close_handle(p, reinterpret_cast<uv_handle_t*>(&p->in_pipe));
  }
}

void stdin_write(Proc* p, std::string data) {
  if (!p->in_open || data.empty()) return;
  auto* w = new WriteReq();
  w->data = std::move(data);
  w->proc = p;
  uv_buf_t b = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
  int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&p->in_pipe), &b, 1,
                    [](uv_write_t* req, int) {
                      // Errors (EPIPE: the child closed stdin) are not the caller's problem.
                      delete reinterpret_cast<WriteReq*>(req);
                    });
  if (rc != 0) delete w;
}

// Sets up the worker-side handles of a freshly spawned child.
void add_proc(Manager::Impl* m, Proc* p) {
  m->procs[p->id] = p;
  uv_loop_t* loop = &m->loop;
  auto init_timer = [&](uv_timer_t* t) {
    uv_timer_init(loop, t);
    t->data = p;
    ++p->open_handles;
  };
  init_timer(&p->timeout);
  init_timer(&p->grace);
  init_timer(&p->linger);
  auto open_pipe = [&](uv_pipe_t* pipe, int fd, bool& open, bool readable) {
    if (fd < 0) return;
    uv_pipe_init(loop, pipe, 0);
    pipe->data = p;
    ++p->open_handles;
    if (uv_pipe_open(pipe, fd) != 0) {
      ::close(fd);
      close_handle(p, reinterpret_cast<uv_handle_t*>(pipe));
      return;
    }
    open = true;
    if (readable) uv_read_start(reinterpret_cast<uv_stream_t*>(pipe), on_alloc, on_read);
  };
  open_pipe(&p->out_pipe, p->out_fd, p->out_open, true);
  p->reading = p->out_open;
  open_pipe(&p->err_pipe, p->err_fd, p->err_open, true);
  open_pipe(&p->in_pipe, p->in_fd, p->in_open, false);
  if (p->in_open) {
    stdin_write(p, std::move(p->opts.stdin_data));
    if (p->opts.stdin_mode == SpawnOptions::Stdin::Data) stdin_shutdown(p);
  }
  bool watching = false;
  if (p->pidfd >= 0) {
    if (uv_poll_init(loop, &p->pid_poll, p->pidfd) == 0) {
      p->pid_poll.data = p;
      ++p->open_handles;
      uv_poll_start(&p->pid_poll, UV_READABLE,
                    [](uv_poll_t* h, int, int) { try_reap(static_cast<Proc*>(h->data)); });
      watching = true;
    } else {
      ::close(p->pidfd);
      p->pidfd = -1;
    }
  }
  if (!watching) {
    init_timer(&p->wait_timer);
    uv_timer_start(
        &p->wait_timer, [](uv_timer_t* t) { try_reap(static_cast<Proc*>(t->data)); }, 5, 10);
  }
  if (p->opts.timeout_ms > 0) {
    uv_timer_start(
        &p->timeout,
        [](uv_timer_t* t) {
          Proc* q = static_cast<Proc*>(t->data);
          if (q->exited || q->finished) return;
          q->timed_out = true;
          start_kill(q);
        },
        static_cast<uint64_t>(p->opts.timeout_ms), 0);
  }
  // The child may have exited before the watch started.
  try_reap(p);
}

}  // namespace

// Takes the posted Pause and Resume requests of running children out of the queue,
// in their order, and applies them now (only the reading of stdout changes: safe
// inside a read callback). One for a child not added yet stays for handle_requests.
void Manager::Impl::apply_pauses() {
  std::vector<Request> pauses;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = requests.begin(); it != requests.end();) {
      bool pause = it->kind == Request::Kind::Pause || it->kind == Request::Kind::Resume;
      if (pause && procs.count(it->id) > 0) {
        pauses.push_back(std::move(*it));
        it = requests.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : pauses) {
    Proc* p = procs[r.id];
    p->paused = r.kind == Request::Kind::Pause;
    update_reading(p);
  }
}

namespace {
void spawn_requested(Manager::Impl* m, Proc* p);
}  // namespace

void Manager::Impl::handle_requests() {
  std::deque<Request> batch;
  {
    std::lock_guard<std::mutex> lock(mu);
    batch.swap(requests);
  }
  for (auto& r : batch) {
    if (r.kind == Request::Kind::Add) {
      add_proc(this, r.proc);
      continue;
    }
    if (r.kind == Request::Kind::Spawn) {
      spawn_requested(this, r.proc);
      continue;
    }
    if (r.kind == Request::Kind::Shutdown) {
      shutting_down = true;
      std::vector<Proc*> all;
      for (auto& [id, p] : procs) all.push_back(p);
      for (Proc* p : all) {
        p->cancelled = true;
        p->killing = true;
        kill_group(p, SIGKILL);
        stop_stream(p);
      }
      continue;
    }
    if (r.kind == Request::Kind::MarkAllCancelled) {
      // Their groups were killed (kill_all_groups): nothing more is read.
      std::vector<Proc*> all;
      for (auto& [id, p] : procs) all.push_back(p);
      for (Proc* p : all) {
        p->cancelled = true;
        p->killing = true;
        stop_stream(p);
      }
      continue;
    }
    auto it = procs.find(r.id);
    if (it == procs.end()) continue;  // already finished: nothing to do
    Proc* p = it->second;
    switch (r.kind) {
      case Request::Kind::Write:
        stdin_write(p, std::move(r.data));
        break;
      case Request::Kind::CloseStdin:
        stdin_shutdown(p);
        break;
      case Request::Kind::Cancel:
        if (!p->exited) {
          p->cancelled = true;
          start_kill(p);
        }
        stop_stream(p);
        break;
      case Request::Kind::Pause:
      case Request::Kind::Resume:
        p->paused = r.kind == Request::Kind::Pause;
        update_reading(p);
        break;
      case Request::Kind::Unhold:
        p->held = false;
        update_reading(p);
        break;
      case Request::Kind::ReleaseCpu:
        // To the reaper only (never its group: SIGURG would reach the command).
        if (p->opts.spare_cpu >= 0 && p->pid > 0 && !p->exited) ::kill(p->pid, SIGURG);
        break;
      default:
        break;
    }
  }
  if (shutting_down && procs.empty() && !uv_is_closing(reinterpret_cast<uv_handle_t*>(&wakeup))) {
    uv_close(reinterpret_cast<uv_handle_t*>(&wakeup), nullptr);
  }
}

void Manager::Impl::run() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
}

// ---------------------------------------------------------------------------
// Manager (host side)
// ---------------------------------------------------------------------------

Manager::Manager() : impl_(std::make_unique<Impl>()) {
  Impl* m = impl_.get();
#if defined(__linux__)
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) throw Error(FLEMMA_E_IO, "process manager: eventfd failed: " + errno_text(errno));
  m->event_rfd = m->event_wfd = efd;
#else
  int fds[2];
  if (::pipe(fds) < 0)
    throw Error(FLEMMA_E_IO, "process manager: pipe failed: " + errno_text(errno));
  for (int fd : fds) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  m->event_rfd = fds[0];
  m->event_wfd = fds[1];
#endif
  if (int rc = uv_loop_init(&m->loop); rc != 0)
    throw Error(FLEMMA_E_IO,
                std::string("process manager: uv_loop_init failed: ") + uv_strerror(rc));
  m->wakeup.data = m;
  uv_async_init(&m->loop, &m->wakeup,
                [](uv_async_t* a) { static_cast<Impl*>(a->data)->handle_requests(); });
  m->thread = std::thread([m] { m->run(); });
}

Manager::~Manager() {
  Impl* m = impl_.get();
  {
    std::lock_guard<std::mutex> lock(m->jobs_mu);
    for (auto& [id, job] : m->jobs) job->cancel = true;
    for (auto& [id, job] : m->jobs)
      if (job->thread.joinable()) job->thread.join();
    m->jobs.clear();
  }
  m->post(Request{Request::Kind::Shutdown});
  if (m->thread.joinable()) m->thread.join();
  // Handles still closing are finished by one more pass.
  uv_run(&m->loop, UV_RUN_NOWAIT);
  uv_loop_close(&m->loop);
  ::close(m->event_rfd);
  if (m->event_wfd != m->event_rfd) ::close(m->event_wfd);
}

int Manager::fd() const { return impl_->event_rfd; }

int Manager::running() const { return impl_->running.load(); }

void Manager::ack() {
#if defined(__linux__)
  uint64_t v;
  while (::read(impl_->event_rfd, &v, sizeof v) < 0 && errno == EINTR) {
  }
#else
  char b[256];
  while (::read(impl_->event_rfd, b, sizeof b) > 0) {
  }
#endif
}

std::unique_ptr<Event> Manager::next_event() {
  std::unique_ptr<Event> ev;
  bool unhold = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->events.empty()) return nullptr;
    ev = std::move(impl_->events.front());
    impl_->events.pop_front();
    if (ev->kind == Event::Kind::Stream) {
      auto it = impl_->queued.find(ev->id);
      if (it != impl_->queued.end()) {
        it->second -= ev->queued_bytes;
        if (it->second <= kMaxQueuedStreamBytes / 2 && impl_->held.erase(ev->id) > 0) unhold = true;
      }
    } else if (ev->kind == Event::Kind::Exit) {
      impl_->queued.erase(ev->id);
      impl_->held.erase(ev->id);
    }
  }
  if (unhold) impl_->post(Request{Request::Kind::Unhold, ev->id});
  return ev;
}

void Manager::write_stdin(int64_t id, std::string data) {
  impl_->post(Request{Request::Kind::Write, id, std::move(data)});
}
void Manager::close_stdin(int64_t id) { impl_->post(Request{Request::Kind::CloseStdin, id}); }
void Manager::cancel(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(impl_->jobs_mu);
    auto it = impl_->jobs.find(id);
    if (it != impl_->jobs.end()) {
      it->second->cancel = true;
      return;
    }
  }
  {
    // Not started yet: it never will be. (Started meanwhile: the request kills it.)
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->pending.find(id);
    if (it != impl_->pending.end()) it->second->spawn_cancelled = true;
  }
  impl_->post(Request{Request::Kind::Cancel, id});
}

int64_t Manager::search(search::Options opts) {
  // The pattern is checked here, so that a bad one is an error of this call.
  if (opts.files_mode) {
    if (!opts.pattern.empty()) search::Glob g(opts.pattern);
  } else {
    search::Regex re(opts.pattern, opts.fixed, opts.ignore_case);
  }
  if (!opts.include.empty()) search::Glob g(opts.include);
  Impl* m = impl_.get();
  int64_t id = m->next_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(m->jobs_mu);
  m->join_ended_jobs();
  auto job = std::make_unique<Impl::SearchJob>();
  Impl::SearchJob* j = job.get();
  m->running.fetch_add(1);
  job->thread = std::thread([m, j, id, opts = std::move(opts)] {
    auto ev = std::make_unique<Event>();
    ev->kind = Event::Kind::Exit;
    ev->id = id;
    ev->exit_code = 0;
    try {
      search::run(opts, j->cancel, [m, id](std::vector<stream::Event>&& evs) {
        m->emit_stream(id, std::move(evs));
      });
    } catch (const std::exception& e) {
      stream::Event s;
      s.type = static_cast<stream::Type>(search::kSummary);
      s.a = std::string("search failed: ") + e.what();
      std::vector<stream::Event> evs;
      evs.push_back(std::move(s));
      try {
        m->emit_stream(id, std::move(evs));
      } catch (...) {
      }
      ev->exit_code = 2;
    }
    ev->cancelled = j->cancel.load();
    m->running.fetch_sub(1);
    m->emit(std::move(ev));
    j->done = true;
  });
  m->jobs.emplace(id, std::move(job));
  return id;
}

void Manager::release_cpu(int64_t id) { impl_->post(Request{Request::Kind::ReleaseCpu, id}); }

int64_t Manager::redact_file(std::string path, redact::Secrets values) {
  if (path.empty()) throw Error(FLEMMA_E_INVALID, "redact_file: empty path");
  Impl* m = impl_.get();
  int64_t id = m->next_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(m->jobs_mu);
  m->join_ended_jobs();
  auto job = std::make_unique<Impl::SearchJob>();
  Impl::SearchJob* j = job.get();
  auto secrets = std::make_shared<redact::Secrets>(std::move(values));
  m->running.fetch_add(1);
  try {
    job->thread = std::thread([m, j, id, path = std::move(path), secrets]() mutable {
      redact::FileResult res = redact::redact_file(path, secrets->values, j->cancel);
      secrets.reset();
      try {
        auto ev = std::make_unique<Event>();
        ev->kind = Event::Kind::Exit;
        ev->id = id;
        ev->exit_code = res.ok ? 0 : 2;
        ev->cancelled = res.cancelled;
        if (!res.ok) ev->error = res.error.empty() ? "redaction failed" : res.error;
        m->running.fetch_sub(1);
        m->emit(std::move(ev));
      } catch (...) {
        m->running.fetch_sub(1);
      }
      j->done = true;
    });
  } catch (...) {
    m->running.fetch_sub(1);
    throw;
  }
  m->jobs.emplace(id, std::move(job));
  return id;
}

void Manager::pause(int64_t id, bool paused) {
  impl_->post(Request{paused ? Request::Kind::Pause : Request::Kind::Resume, id});
}

void Manager::kill_all() {
  {
    std::lock_guard<std::mutex> lock(impl_->jobs_mu);
    for (auto& [id, job] : impl_->jobs) job->cancel = true;
  }
  kill_all_groups();
  impl_->post(Request{Request::Kind::MarkAllCancelled});
}

void kill_all_groups() {
  Registry& r = registry();
  r.generation.fetch_add(1);
  std::lock_guard<std::mutex> launching(r.launch);
  std::lock_guard<std::mutex> lock(r.mu);
  for (pid_t pg : r.groups) ::kill(-pg, SIGKILL);
  // Leaders are reaped by their manager; the groups can go.
  r.groups.clear();
}

namespace {

struct Fds {
  int fd[2] = {-1, -1};
  ~Fds() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void make() {
#if defined(__linux__)
    if (::pipe2(fd, O_CLOEXEC) < 0)
      throw Error(FLEMMA_E_IO, "cannot create a pipe: " + errno_text(errno));
#else
    if (::pipe(fd) < 0) throw Error(FLEMMA_E_IO, "cannot create a pipe: " + errno_text(errno));
    ::fcntl(fd[0], F_SETFD, FD_CLOEXEC);
    ::fcntl(fd[1], F_SETFD, FD_CLOEXEC);
#endif
  }
  int release(int i) {
    int f = fd[i];
    fd[i] = -1;
    return f;
  }
};

struct SpawnAttrs {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  SpawnAttrs() {
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
  }
  ~SpawnAttrs() {
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
  }
};

}  // namespace

namespace {

// The file execvp would run for `name` with this PATH, "" when there is none
// (so that a missing program is still a synchronous error when the reaper runs
// it). A name with a slash is returned as it is (relative to the child's cwd).
std::string resolve(const std::string& name, const std::vector<std::string>& env,
                    const std::string& cwd) {
  if (name.find('/') != std::string::npos) {
    std::string full = (name[0] != '/' && !cwd.empty()) ? cwd + "/" + name : name;
    return ::access(full.c_str(), X_OK) == 0 ? name : std::string();
  }
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& kv : env)
    if (kv.rfind("PATH=", 0) == 0) path = kv.substr(5);
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find(':', i);
    if (j == std::string::npos) j = path.size();
    std::string dir = j > i ? path.substr(i, j - i) : ".";
    std::string full = dir + "/" + name;
    // A relative entry is relative to the child's working directory.
    std::string at = (dir[0] != '/' && !cwd.empty()) ? cwd + "/" + full : full;
    struct stat st;
    if (::stat(at.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(at.c_str(), X_OK) == 0)
      return full;
    i = j + 1;
  }
  return std::string();
}

// The reaper's --exec for `name`: the file found in an absolute PATH entry, so
// that the command's execvp does not search PATH again (a relative entry is
// left to the search in the child's working directory).
void add_exec(std::vector<std::string>& out, const std::string& name,
              const std::vector<std::string>& env, const std::string& cwd) {
  std::string file = resolve(name, env, cwd);
  if (file.empty())
    throw Error(FLEMMA_E_INVALID,
                "spawn: cannot run `" + name +
                    "`: No such file or directory (is it installed and on PATH?)");
  if (name.find('/') == std::string::npos && file[0] == '/')
    out.insert(out.end(), {"--exec", file});
}

// On Linux every command runs under flemma-reap (native/reaper/), which kills
// the command's whole tree, setsid'd and double-forked jobs included, on
// cancel, timeout and exit. A command the sandbox already wrapped starts with it.
std::vector<std::string> under_reaper(const SpawnOptions& opts,
                                      const std::vector<std::string>& env) {
#if defined(__linux__)
  const std::string& reaper = flemma::reaper::path();
  if (!flemma::reaper::available())
    throw Error(FLEMMA_E_IO, "spawn: the helper `" + reaper +
                                 "` is missing: rebuild Flemma (`make` in the plugin's directory)");
  std::vector<std::string> out{reaper, "--grace-ms", std::to_string(opts.kill_grace_ms)};
  if (opts.spare_cpu >= 0 && opts.spare_ms > 0)
    out.insert(out.end(), {"--spare-cpu", std::to_string(opts.spare_cpu), "--spare-ms",
                           std::to_string(opts.spare_ms)});
  size_t first = 0;
  if (opts.argv[0] == reaper) {
    first = 1;
    auto dash = std::find(opts.argv.begin() + 1, opts.argv.end(), std::string("--"));
    if (dash == opts.argv.end() || dash + 1 == opts.argv.end())
      throw Error(FLEMMA_E_INVALID, "spawn: the reaper's command is empty");
    add_exec(out, *(dash + 1), env, opts.cwd);
  } else {
    add_exec(out, opts.argv[0], env, opts.cwd);
    out.push_back("--");
  }
  out.insert(out.end(), opts.argv.begin() + static_cast<std::ptrdiff_t>(first), opts.argv.end());
  return out;
#else
  (void)env;
  return opts.argv;
#endif
}

}  // namespace

namespace {

// A search output decoder from its JSON description (see SpawnOptions::decoder).
std::unique_ptr<search::OutputDecoder> make_output_decoder(const std::string& desc,
                                                           const std::string& cwd) {
  auto j = nlohmann::json::parse(desc, nullptr, false);
  if (!j.is_object())
    throw Error(FLEMMA_E_INVALID, "spawn: the decoder description is not a JSON object");
  auto kind = search::OutputDecoder::kind_from_name(j.value("kind", std::string()));
  if (!kind) throw Error(FLEMMA_E_INVALID, "spawn: unknown search decoder: use rg_json or paths");
  int64_t max = j.value("max", int64_t{100});
  std::vector<std::string> skip;
  if (j.contains("skip") && j["skip"].is_array())
    for (const auto& s : j["skip"])
      if (s.is_string()) skip.push_back(s.get<std::string>());
  std::string dir = cwd;
  if (dir.empty()) {
    char buf[4096];
    if (::getcwd(buf, sizeof buf)) dir = buf;
  }
  return std::make_unique<search::OutputDecoder>(*kind, max, dir, j.value("glob", std::string()),
                                                 j.value("name_only", false), std::move(skip),
                                                 j.value("hidden", false));
}

// The options of a spawn checked (throws on a bad one) and completed with
// their defaults.
void check_spawn_options(SpawnOptions& opts) {
  if (opts.argv.empty() || opts.argv[0].empty())
    throw Error(FLEMMA_E_INVALID, "spawn: the command is empty: give at least the program name");
  if (opts.max_lines <= 0) opts.max_lines = truncate::kMaxLines;
  if (opts.max_bytes <= 0) opts.max_bytes = truncate::kMaxBytes;
  // The tail window holds up to 2 * (max_bytes + 1) bytes: keep that in size_t.
  opts.max_bytes = std::min<int64_t>(opts.max_bytes, int64_t{1} << 40);
  if (opts.kill_grace_ms < 0) opts.kill_grace_ms = 2000;
}

// Throws unless the working directory exists (a stat: the worker's, for spawn_async).
void check_cwd(const SpawnOptions& opts) {
  if (opts.cwd.empty()) return;
  struct stat st;
  if (::stat(opts.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(FLEMMA_E_INVALID, "spawn: the working directory `" + opts.cwd + "` does not exist");
}

// The decoder of stdout that opts.decoder names (at most one of them).
struct Decoders {
  std::unique_ptr<stream::Decoder> stream;
  std::unique_ptr<jsonrpc::Decoder> rpc;
  std::unique_ptr<search::OutputDecoder> search;
  std::unique_ptr<html::FetchDecoder> fetch;
};

// A fetched page's decoder ({"kind": "fetch", "format": "markdown"|"text"|"raw",
// "max": bytes of the body, "head_lines", "head_bytes", "save": the whole text's
// file when cut}), or nullptr when the description is of another kind.
std::unique_ptr<html::FetchDecoder> make_fetch_decoder(const std::string& desc) {
  auto j = nlohmann::json::parse(desc, nullptr, false);
  if (!j.is_object() || j.value("kind", std::string()) != "fetch") return nullptr;
  html::FetchDecoder::Mode mode = html::FetchDecoder::Mode::Markdown;
  if (!html::FetchDecoder::mode_from_name(j.value("format", std::string("markdown")), mode))
    throw Error(FLEMMA_E_INVALID, "spawn: the fetch decoder's format is markdown, text or raw");
  int64_t max = j.value("max", int64_t{5} << 20);
  if (max <= 0) throw Error(FLEMMA_E_INVALID, "spawn: the fetch decoder's max should be > 0");
  return std::make_unique<html::FetchDecoder>(mode, max, j.value("head_lines", int64_t{0}),
                                              j.value("head_bytes", int64_t{0}),
                                              j.value("save", std::string()));
}

Decoders make_decoders(const SpawnOptions& opts) {
  Decoders d;
  if (opts.decoder.empty()) return d;
  if (opts.merge_output)
    throw Error(FLEMMA_E_INVALID, "spawn: a decoder reads stdout alone: set merge_output to false");
  if (opts.decoder[0] == '{') {
    d.fetch = make_fetch_decoder(opts.decoder);
    if (!d.fetch) d.search = make_output_decoder(opts.decoder, opts.cwd);
  } else if (opts.decoder == "jsonrpc") {
    d.rpc = std::make_unique<jsonrpc::Decoder>();
  } else {
    auto kind = stream::kind_from_name(opts.decoder);
    if (!kind)
      throw Error(FLEMMA_E_INVALID,
                  "spawn: unknown decoder `" + opts.decoder +
                      "`: use anthropic, openai_chat, openai, vertex, mcp or jsonrpc");
    d.stream = std::make_unique<stream::Decoder>(*kind);
  }
  return d;
}

// How the child starts: stdin from the pipe `in` (or /dev/null), stdout and
// stderr to the pipes out and err (or both to out), no other descriptor, its
// directory, default signals unblocked, a session of its own.
void set_spawn_attrs(SpawnAttrs& sa, const SpawnOptions& opts, const Fds& out, const Fds& err,
                     const Fds& in) {
  if (opts.stdin_mode == SpawnOptions::Stdin::Closed)
    posix_spawn_file_actions_addopen(&sa.fa, 0, "/dev/null", O_RDONLY, 0);
  else
    posix_spawn_file_actions_adddup2(&sa.fa, in.fd[0], 0);
  posix_spawn_file_actions_adddup2(&sa.fa, out.fd[1], 1);
  posix_spawn_file_actions_adddup2(&sa.fa, opts.merge_output ? out.fd[1] : err.fd[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors the host left without close-on-exec (Neovim inherits some from
  // its own parent) must not reach the child: it sees 0, 1 and 2 only.
  posix_spawn_file_actions_addclosefrom_np(&sa.fa, 3);
#endif
  if (!opts.cwd.empty()) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29)) || \
    defined(__APPLE__)
    posix_spawn_file_actions_addchdir_np(&sa.fa, opts.cwd.c_str());
#else
#error "posix_spawn_file_actions_addchdir_np is needed"
#endif
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&sa.at, &none);
  posix_spawnattr_setsigdefault(&sa.at, &all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
#if defined(POSIX_SPAWN_SETSID)
  flags |= POSIX_SPAWN_SETSID;
#else
  flags |= POSIX_SPAWN_SETPGROUP;  // at least a group of its own
  posix_spawnattr_setpgroup(&sa.at, 0);
#endif
  posix_spawnattr_setflags(&sa.at, flags);
}

// Starts the child (under the reaper when it runs one) with its environment;
// its pid. Throws when it cannot be started.
pid_t start_child(const SpawnOptions& opts, std::vector<std::string>& run_argv,
                  std::vector<std::string>& env, const SpawnAttrs& sa) {
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  argv.reserve(run_argv.size() + 1);
  for (auto& a : run_argv) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0], &sa.fa, &sa.at, argv.data(), envp.data());
  if (rc != 0) {
    throw Error(rc == ENOENT ? FLEMMA_E_INVALID : FLEMMA_E_IO,
                "spawn: cannot run `" + opts.argv[0] + "`: " + errno_text(rc) +
                    (rc == ENOENT ? " (is it installed and on PATH?)" : ""));
  }
  return pid;
}

// A child to be started: its options checked (the working directory is the
// caller's to check), its decoder made, its environment and spill directory
// taken from this (the host's) thread: getenv races setenv. Throws on bad options.
std::unique_ptr<Proc> prepare(Manager::Impl* m, SpawnOptions opts) {
  check_spawn_options(opts);
  Decoders decoders = make_decoders(opts);
  auto p = std::make_unique<Proc>();
  p->mgr = m;
  p->env = build_env(environ, opts.env);
  p->out.max_lines = p->err.max_lines = opts.max_lines;
  p->out.max_bytes = p->err.max_bytes = opts.max_bytes;
  p->out.max_file_bytes = p->err.max_file_bytes = opts.max_file_bytes;
  p->err.prefix = "flemma-stderr-";
  if (!opts.spill_dir.empty())
    p->out.spill_dir = p->err.spill_dir = opts.spill_dir;
  else if (const char* dir = std::getenv("TMPDIR"); dir && *dir)
    p->out.spill_dir = p->err.spill_dir = dir;
  p->decoder = std::move(decoders.stream);
  p->rpc = std::move(decoders.rpc);
  p->outdec = std::move(decoders.search);
  p->fetchdec = std::move(decoders.fetch);
  p->opts = std::move(opts);
  return p;
}

// Starts p's child: its pipes, the spawn, its group registered, its pidfd and
// descriptors kept in p. Throws when it cannot be started. For spawn_async
// (`worker`): returns false and starts nothing when a cancel of p or a
// kill_all_groups came first.
bool launch(Proc* p, bool worker) {
  check_cwd(p->opts);
  std::vector<std::string> run_argv = under_reaper(p->opts, p->env);
  Fds out, err, in;
  out.make();
  if (!p->opts.merge_output) err.make();
  if (p->opts.stdin_mode != SpawnOptions::Stdin::Closed) in.make();
  SpawnAttrs sa;
  set_spawn_attrs(sa, p->opts, out, err, in);
  pid_t pid = -1;
  if (worker) {
    std::lock_guard<std::mutex> launching(registry().launch);
    if (p->spawn_cancelled.load() || registry().generation.load() != p->generation) return false;
    pid = start_child(p->opts, run_argv, p->env, sa);
    registry_add(pid);
  } else {
    pid = start_child(p->opts, run_argv, p->env, sa);
    registry_add(pid);
  }
  p->pid = pid;
#if defined(__linux__) && defined(SYS_pidfd_open)
  p->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (p->pidfd >= 0) ::fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
#endif
  p->out_fd = out.release(0);
  if (!p->opts.merge_output) p->err_fd = err.release(0);
  if (p->opts.stdin_mode != SpawnOptions::Stdin::Closed) p->in_fd = in.release(1);
  return true;
}

// The worker's turn of a spawn_async child: started (a Started event, then it is
// watched), or an Exit event saying why not (an error, or cancelled).
void spawn_requested(Manager::Impl* m, Proc* proc) {
  std::unique_ptr<Proc> p(proc);
  std::string error;
  bool started = false;
  if (!m->shutting_down) {
    try {
      started = launch(p.get(), true);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  {
    std::lock_guard<std::mutex> lock(m->mu);
    m->pending.erase(p->id);
  }
  if (started) {
    auto ev = std::make_unique<Event>();
    ev->kind = Event::Kind::Started;
    ev->id = p->id;
    ev->pid = p->pid;
    m->emit(std::move(ev));
    uv_update_time(&m->loop);  // the timeout counts from now, not from before the spawn
    add_proc(m, p.release());
    return;
  }
  auto ev = std::make_unique<Event>();
  ev->kind = Event::Kind::Exit;
  ev->id = p->id;
  ev->error = std::move(error);
  ev->cancelled = ev->error.empty();
  m->running.fetch_sub(1);
  m->emit(std::move(ev));
}

}  // namespace

int64_t Manager::spawn(SpawnOptions opts, pid_t* pid_out) {
  std::unique_ptr<Proc> p = prepare(impl_.get(), std::move(opts));
  launch(p.get(), false);
  p->id = impl_->next_id.fetch_add(1);
  const pid_t pid = p->pid;
  const int64_t id = p->id;
  impl_->running.fetch_add(1);
  impl_->post(Request{Request::Kind::Add, 0, {}, p.release()});
  if (pid_out) *pid_out = pid;
  return id;
}

int64_t Manager::spawn_async(SpawnOptions opts) {
  std::unique_ptr<Proc> p = prepare(impl_.get(), std::move(opts));
  p->generation = registry().generation.load();
  p->id = impl_->next_id.fetch_add(1);
  const int64_t id = p->id;
  impl_->running.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->pending.emplace(id, p.get());
  }
  impl_->post(Request{Request::Kind::Spawn, id, {}, p.release()});
  return id;
}

}  // namespace flemma::process

// Kill every group still registered when the library is unloaded or the
// process exits, so that no child outlives Neovim.
__attribute__((destructor)) static void flemma_process_unload() {
  flemma::process::kill_all_groups();
}
