// The process manager: children spawned in their own session and process group,
// watched by a libuv loop on one native worker thread. The worker never calls
// into Lua: it queues events and signals a file descriptor (eventfd on Linux, a
// pipe elsewhere) that the host polls; the host then takes the events on its own
// thread with next_event().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "redact.hpp"
#include "search.hpp"
#include "stream.hpp"

namespace flemma::process {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::string cwd;                // "" = the current directory
  std::vector<std::string> env;   // extra "NAME=value", override the inherited ones
  enum class Stdin { Closed, Data, Open } stdin_mode = Stdin::Closed;
  std::string stdin_data;        // written first (Data, Open)
  bool merge_output = true;      // stderr into the same pipe as stdout
  int64_t timeout_ms = 0;        // <= 0: none
  int64_t kill_grace_ms = 2000;  // SIGTERM -> SIGKILL delay
  int64_t max_lines = 2000;      // tail window kept in memory
  int64_t max_bytes = 51200;
  bool progress = false;  // emit progress events (at most every 100 ms)
  std::string decoder;    // a stream kind: stdout goes to a decoder (Stream events);
                          // or a JSON object {"kind": "rg_json"|"paths", "max": n,
                          // "glob", "name_only", "skip": [...]}: a search output decoder;
                          // or {"kind": "fetch", "format", "max"}: html::FetchDecoder
  int64_t max_stdout_bytes =
      0;  // with a stream decoder: past this many stdout bytes the
          // stream fails (kResponseTooLarge) and the child is stopped; <= 0: none
  int64_t max_file_bytes = 0;  // each spill file ends with a note past this size; <= 0: none
  std::string spill_dir;       // where spill files are made; empty: $TMPDIR, else /tmp
  // Linux, under the reaper: the child (its threads and processes) runs on every
  // allowed CPU but this one until release_cpu(id) or spare_ms; < 0: no such CPU.
  int spare_cpu = -1;
  int64_t spare_ms = 0;
};

// The error type of the Error event that ends a stream longer than max_stdout_bytes.
inline constexpr const char* kResponseTooLarge = "response_too_large";
// Decoded events of one child waiting for the host, in bytes: past this the
// worker stops reading the child's stdout until the host has taken them (the
// child then blocks on a full pipe).
constexpr int64_t kMaxQueuedStreamBytes = 1 << 20;

struct StreamResult {
  std::string tail;        // the kept tail (truncate_tail of the output by the limits)
  bool truncated = false;  // the output was over the limits
  int64_t total_bytes = 0;
  int64_t total_lines = 0;
  std::string path;     // temp file holding the whole output ("" if never needed)
  bool binary = false;  // a NUL byte was seen
};

struct Event {
  enum class Kind { Progress = 1, Exit = 2, Stream = 3, Started = 4 } kind = Kind::Progress;
  int64_t id = 0;
  // Started (spawn_async): the child's pid.
  pid_t pid = -1;
  // Exit of a spawn_async child that could not be started: why, in one line
  // (nothing ran; the other fields are empty).
  std::string error;
  // Progress (also filled for Exit): both streams together.
  int64_t bytes = 0;
  int64_t lines = 0;
  std::string last_line;  // the last complete line (at most 512 bytes)
  // Exit.
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  bool cancelled = false;
  StreamResult out;  // merged output, or stdout
  StreamResult err;  // stderr when not merged
  // Stream: decoded events of stdout, consecutive deltas of one block coalesced.
  std::vector<stream::Event> stream;
  int64_t queued_bytes = 0;  // what `stream` counts against kMaxQueuedStreamBytes
};

// Whether a process group is in the registry that kill_all_groups() kills (tests).
bool is_registered(pid_t pgid);

// The non-interactive variables added to every child's environment.
const std::vector<std::string>& noninteractive_env();

// Whether an inherited variable's name looks like a secret's: it holds KEY,
// TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, SERVICE_ACCOUNT, PRIVATE, AUTH
// (not the word AUTHOR), COOKIE or SESSION, or ends in _PAT; any case. Such a
// variable never reaches a child.
bool is_secret_name(const std::string& name);

// Whether an inherited variable's value is a secret whatever its name: a PEM
// private key block (-----BEGIN ... PRIVATE KEY-----) or JSON with a
// "private_key" (a service account).
bool is_secret_value(const char* value, size_t len);

// The environment of a child: `base` (NAME=value strings) without the secret
// ones (by name or value), then the non-interactive variables, then `extra`; a later NAME replaces
// an earlier one, and a bare NAME in `extra` (no `=`) takes NAME out.
std::vector<std::string> build_env(const char* const* base, const std::vector<std::string>& extra);

class Manager {
 public:
  Manager();   // starts the worker thread; throws flemma::Error on failure
  ~Manager();  // kills every running group, stops and joins the worker

  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // The descriptor that becomes readable when events are waiting.
  int fd() const;
  // Spawns at once on the calling thread (errors are thrown); returns the id.
  int64_t spawn(SpawnOptions opts, pid_t* pid_out);
  // Spawns on the worker thread: the options are checked and the environment is
  // taken here (bad options are thrown); the working directory, the program and
  // the spawn itself are the worker's. Then a Started event with the pid, or an
  // Exit event whose `error` says why nothing was started. A cancel() or
  // kill_all() that comes first means nothing is started (an Exit event,
  // cancelled). Returns the id.
  int64_t spawn_async(SpawnOptions opts);
  void write_stdin(int64_t id, std::string data);
  void close_stdin(int64_t id);
  void cancel(int64_t id);
  // A child spawned with a spare_cpu gets that CPU back (the reaper's SIGURG).
  void release_cpu(int64_t id);
  // Stops (true) or resumes reading the child's stdout: a host that cannot keep
  // up holds the child back (it blocks on the full pipe) instead of queueing.
  void pause(int64_t id, bool paused);
  // SIGKILL to every group this manager started that may still be alive, at once.
  void kill_all();
  // Resets the descriptor (call before taking events).
  void ack();
  // The next event, or nullptr when none is waiting.
  std::unique_ptr<Event> next_event();
  // Children whose result was not delivered yet (and searches still running).
  int running() const;
  // Starts a search on a worker thread of its own; its results come as Stream
  // events (search::kMatch, kFile, kSummary), then an Exit event (exit_code 0,
  // or 2 when the search failed; cancelled after cancel(id)). The pattern is
  // checked here (flemma::Error when it cannot be used). Returns the id.
  int64_t search(search::Options opts);
  // Redacts a kept file (redact::redact_file) on a worker thread of its own:
  // then an Exit event (exit_code 0 when `path` holds the redacted text, 2 when
  // it failed, with `error`; cancelled after cancel(id)), the file removed on
  // failure. Takes the values (wiped when the job ends). Returns the id.
  int64_t redact_file(std::string path, redact::Secrets values);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// SIGKILL to every group started by any manager that may still be alive
// (also run when the library is unloaded or the process exits). A spawn_async
// child being started now is waited for and killed; one not started yet is not
// started.
void kill_all_groups();

namespace testing {
// Held by the worker from its last check of cancel and kill_all through the
// spawn and the group's registration (tests hold it to stop a spawn there).
std::mutex& launch_mutex();
// How many times kill_all_groups() has run.
uint64_t kill_generation();
}  // namespace testing

}  // namespace flemma::process
