// C ABI of the process manager.
#include <sched.h>

#include <cstddef>
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "process.hpp"

struct flemma_procmgr {
  flemma::process::Manager mgr;
};

namespace {

// The public struct plus the event its pointers refer into.
struct EventBox {
  flemma_proc_event pub{};
  std::unique_ptr<flemma::process::Event> ev;
  std::vector<flemma_stream_event> stream;  // points into ev->stream
};

const char* opt_str(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

flemma_proc_event* make_event(std::unique_ptr<flemma::process::Event> ev) {
  auto* box = new EventBox();
  box->ev = std::move(ev);
  auto& e = *box->ev;
  auto& p = box->pub;
  p.id = e.id;
  p.kind = static_cast<int>(e.kind);
  p.bytes = e.bytes;
  p.lines = e.lines;
  p.last_line = e.last_line.c_str();
  p.last_line_len = e.last_line.size();
  p.exit_code = e.exit_code;
  p.signal = e.signal;
  p.timed_out = e.timed_out;
  p.cancelled = e.cancelled;
  p.out_tail = e.out.tail.c_str();
  p.out_tail_len = e.out.tail.size();
  p.out_truncated = e.out.truncated;
  p.out_binary = e.out.binary;
  p.out_total_bytes = e.out.total_bytes;
  p.out_total_lines = e.out.total_lines;
  p.out_path = opt_str(e.out.path);
  p.err_tail = e.err.tail.c_str();
  p.err_tail_len = e.err.tail.size();
  p.err_truncated = e.err.truncated;
  p.err_binary = e.err.binary;
  p.err_total_bytes = e.err.total_bytes;
  p.err_total_lines = e.err.total_lines;
  p.err_path = opt_str(e.err.path);
  p.pid = e.pid;
  p.error = opt_str(e.error);
  p.error_len = e.error.size();
  if (!e.stream.empty()) {
    flemma::stream::to_c(e.stream, box->stream);
    p.stream_events = box->stream.data();
    p.stream_event_count = box->stream.size();
  }
  static_assert(offsetof(EventBox, pub) == 0);
  return &box->pub;
}

flemma::process::Manager& need(flemma_procmgr* m) {
  if (!m) throw flemma::Error(FLEMMA_E_INVALID, "process manager is NULL");
  return m->mgr;
}

// The options of a spawn, copied out of the caller's struct.
flemma::process::SpawnOptions spawn_options(const flemma_spawn_opts* opts) {
  if (!opts || !opts->argv || !opts->argv[0])
    throw flemma::Error(FLEMMA_E_INVALID,
                        "spawn: the command is empty: give at least the program name");
  flemma::process::SpawnOptions o;
  for (const char* const* a = opts->argv; *a; ++a) o.argv.emplace_back(*a);
  if (opts->cwd) o.cwd = opts->cwd;
  if (opts->env)
    for (const char* const* e = opts->env; *e; ++e) o.env.emplace_back(*e);
  if (opts->stdin_mode < 0 || opts->stdin_mode > 2)
    throw flemma::Error(FLEMMA_E_INVALID, "spawn: stdin_mode should be 0, 1 or 2");
  o.stdin_mode = static_cast<flemma::process::SpawnOptions::Stdin>(opts->stdin_mode);
  if (opts->stdin_data) o.stdin_data.assign(opts->stdin_data, opts->stdin_len);
  o.merge_output = opts->merge_output != 0;
  o.progress = opts->progress != 0;
  o.timeout_ms = opts->timeout_ms;
  o.kill_grace_ms = opts->kill_grace_ms;
  o.max_lines = opts->max_lines;
  o.max_bytes = opts->max_bytes;
  if (opts->decoder) o.decoder = opts->decoder;
  o.max_stdout_bytes = opts->max_stdout_bytes;
  o.max_file_bytes = opts->max_file_bytes;
  if (opts->spill_dir) o.spill_dir = opts->spill_dir;
#if defined(__linux__)
  if (opts->spare_cpu_ms > 0) {
    o.spare_cpu = sched_getcpu();  // the caller's (Neovim's main thread), now
    o.spare_ms = opts->spare_cpu_ms;
  }
#endif
  return o;
}

}  // namespace

extern "C" {

// Caller owns the manager: flemma_procmgr_free.
FLEMMA_API flemma_procmgr* flemma_procmgr_new(void) {
  return flemma::guard_ptr([] { return new flemma_procmgr(); });
}

// Takes ownership of mgr and destroys it. NULL is a no-op.
FLEMMA_API void flemma_procmgr_free(flemma_procmgr* mgr) {
  flemma::guard([&] {
    delete mgr;
    return FLEMMA_OK;
  });
}

// The descriptor is owned by the manager.
FLEMMA_API int flemma_procmgr_fd(const flemma_procmgr* mgr) {
  return flemma::guard([&] { return need(const_cast<flemma_procmgr*>(mgr)).fd(); });
}

// Borrows opts for the duration of the call; everything is copied.
FLEMMA_API int flemma_procmgr_spawn(flemma_procmgr* mgr, const flemma_spawn_opts* opts,
                                    int64_t* id_out, int64_t* pid_out) {
  return flemma::guard([&] {
    auto& m = need(mgr);
    pid_t pid = -1;
    int64_t id = m.spawn(spawn_options(opts), &pid);
    if (id_out) *id_out = id;
    if (pid_out) *pid_out = pid;
    return FLEMMA_OK;
  });
}

// Borrows opts for the duration of the call; everything is copied.
FLEMMA_API int flemma_procmgr_spawn_async(flemma_procmgr* mgr, const flemma_spawn_opts* opts,
                                          int64_t* id_out) {
  return flemma::guard([&] {
    auto& m = need(mgr);
    int64_t id = m.spawn_async(spawn_options(opts));
    if (id_out) *id_out = id;
    return FLEMMA_OK;
  });
}

// data is copied.
FLEMMA_API int flemma_procmgr_write(flemma_procmgr* mgr, int64_t id, const char* data, size_t len) {
  return flemma::guard([&] {
    if (!data && len > 0) throw flemma::Error(FLEMMA_E_INVALID, "write: data is NULL");
    need(mgr).write_stdin(id, std::string(data ? data : "", len));
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_procmgr_close_stdin(flemma_procmgr* mgr, int64_t id) {
  return flemma::guard([&] {
    need(mgr).close_stdin(id);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_procmgr_cancel(flemma_procmgr* mgr, int64_t id) {
  return flemma::guard([&] {
    need(mgr).cancel(id);
    return FLEMMA_OK;
  });
}

// A request to the worker; the manager keeps ownership of everything.
FLEMMA_API int flemma_procmgr_release_cpu(flemma_procmgr* mgr, int64_t id) {
  return flemma::guard([&] {
    need(mgr).release_cpu(id);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_procmgr_pause(flemma_procmgr* mgr, int64_t id, int paused) {
  return flemma::guard([&] {
    need(mgr).pause(id, paused != 0);
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_procmgr_kill_all(flemma_procmgr* mgr) {
  return flemma::guard([&] {
    if (mgr)
      mgr->mgr.kill_all();
    else
      flemma::process::kill_all_groups();
    return FLEMMA_OK;
  });
}

FLEMMA_API int flemma_procmgr_ack(flemma_procmgr* mgr) {
  return flemma::guard([&] {
    need(mgr).ack();
    return FLEMMA_OK;
  });
}

// Caller owns the event: flemma_proc_event_free.
FLEMMA_API flemma_proc_event* flemma_procmgr_next_event(flemma_procmgr* mgr) {
  return flemma::guard_ptr([&]() -> flemma_proc_event* {
    auto ev = need(mgr).next_event();
    if (!ev) return nullptr;
    return make_event(std::move(ev));
  });
}

// Takes ownership of event. NULL is a no-op.
FLEMMA_API void flemma_proc_event_free(flemma_proc_event* event) {
  delete reinterpret_cast<EventBox*>(event);
}

FLEMMA_API int flemma_procmgr_running(const flemma_procmgr* mgr) {
  return flemma::guard([&] { return need(const_cast<flemma_procmgr*>(mgr)).running(); });
}

// Borrows opts for the duration of the call; everything is copied.
FLEMMA_API int flemma_procmgr_search(flemma_procmgr* mgr, const flemma_search_opts* opts,
                                     int64_t* id_out) {
  return flemma::guard([&] {
    auto& m = need(mgr);
    if (!opts || !opts->root || opts->root[0] != '/')
      throw flemma::Error(FLEMMA_E_INVALID, "search: `root` should be an absolute path");
    flemma::search::Options o;
    o.root = opts->root;
    if (opts->pattern) o.pattern = opts->pattern;
    o.files_mode = opts->files_mode != 0;
    o.fixed = opts->fixed_strings != 0;
    o.ignore_case = opts->ignore_case != 0;
    o.hidden = opts->hidden != 0;
    o.no_ignore = opts->no_ignore != 0;
    o.name_only = opts->name_only != 0;
    o.want_type = opts->want_type;
    o.context = opts->context;
    if (opts->include) o.include = opts->include;
    o.max_results = opts->max_results;
    if (opts->skip_dirs)
      for (const char* const* d = opts->skip_dirs; *d; ++d) o.skip_dirs.emplace_back(*d);
    if (!o.files_mode && o.pattern.empty())
      throw flemma::Error(FLEMMA_E_INVALID, "search: the pattern is empty");
    int64_t id = m.search(std::move(o));
    if (id_out) *id_out = id;
    return FLEMMA_OK;
  });
}

// Borrows path and the values for the call; both are copied (the copies of
// the values are wiped when the job ends).
FLEMMA_API int flemma_procmgr_redact_file(flemma_procmgr* mgr, const char* path,
                                          const char* const* values, const size_t* lens, size_t n,
                                          int64_t* id_out) {
  return flemma::guard([&] {
    auto& m = need(mgr);
    if (!path || path[0] == '\0' || !id_out)
      throw flemma::Error(FLEMMA_E_INVALID, "redact_file: path and id_out are needed");
    if (n > 0 && (!values || !lens))
      throw flemma::Error(FLEMMA_E_INVALID, "redact_file: values and lens are needed");
    flemma::redact::Secrets secrets;
    secrets.values.reserve(n);
    for (size_t i = 0; i < n; i++) {
      if (!values[i] && lens[i] > 0)
        throw flemma::Error(FLEMMA_E_INVALID, "redact_file: a value is NULL");
      secrets.values.emplace_back(values[i] ? values[i] : "", lens[i]);
    }
    *id_out = m.redact_file(path, std::move(secrets));
    return FLEMMA_OK;
  });
}

// Borrows pattern.
FLEMMA_API int flemma_search_check(const char* pattern, size_t len, int fixed_strings) {
  return flemma::guard([&] {
    if (!pattern && len > 0) throw flemma::Error(FLEMMA_E_INVALID, "search: the pattern is NULL");
    std::string why = flemma::search::check_pattern(std::string_view(pattern ? pattern : "", len),
                                                    fixed_strings != 0);
    if (!why.empty()) throw flemma::Error(FLEMMA_E_INVALID, why);
    return FLEMMA_OK;
  });
}

}  // extern "C"
