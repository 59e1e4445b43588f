#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <string>

#include "flemma/flemma.h"
#include "process.hpp"

namespace {

// Polls the manager's descriptor and returns the exit event of id (owned).
flemma_proc_event* wait_exit(flemma_procmgr* m, int64_t id, int timeout_ms = 10000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{flemma_procmgr_fd(m), POLLIN, 0};
    ::poll(&p, 1, 100);
    flemma_procmgr_ack(m);
    while (flemma_proc_event* e = flemma_procmgr_next_event(m)) {
      if (e->id == id && e->kind == 2) return e;
      flemma_proc_event_free(e);
    }
  }
  return nullptr;
}

int64_t spawn(flemma_procmgr* m, const char* script, int64_t timeout_ms = 0, int merge = 1) {
  const char* argv[] = {"bash", "-c", script, nullptr};
  flemma_spawn_opts o{};
  o.argv = argv;
  o.merge_output = merge;
  o.timeout_ms = timeout_ms;
  int64_t id = 0, pid = 0;
  REQUIRE(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_OK);
  CHECK(pid > 0);
  return id;
}

// Open descriptors of this process.
int count_fds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;  // the directory itself
}

}  // namespace

TEST_CASE("process") {
  signal(SIGPIPE, SIG_IGN);
  flemma_procmgr* m = flemma_procmgr_new();
  REQUIRE(m != nullptr);

  SUBCASE("an exit event reports the code and the merged output") {
    int64_t id = spawn(m, "echo a; echo b >&2; exit 4");
    flemma_proc_event* e = wait_exit(m, id);
    REQUIRE(e != nullptr);
    CHECK(e->exit_code == 4);
    CHECK(e->signal == 0);
    CHECK(std::string(e->out_tail, e->out_tail_len) == "a\nb\n");
    CHECK(e->out_path == nullptr);
    flemma_proc_event_free(e);
    CHECK(flemma_procmgr_running(m) == 0);
  }
  SUBCASE("stdout and stderr stay apart when not merged") {
    int64_t id = spawn(m, "echo a; echo b >&2", 0, 0);
    flemma_proc_event* e = wait_exit(m, id);
    REQUIRE(e != nullptr);
    CHECK(std::string(e->out_tail, e->out_tail_len) == "a\n");
    CHECK(std::string(e->err_tail, e->err_tail_len) == "b\n");
    flemma_proc_event_free(e);
  }
  SUBCASE("a timeout ends the child with SIGTERM") {
    int64_t id = spawn(m, "sleep 100 & wait", 100);
    flemma_proc_event* e = wait_exit(m, id, 5000);
    REQUIRE(e != nullptr);
    CHECK(e->timed_out == 1);
    CHECK(e->signal == SIGTERM);
    flemma_proc_event_free(e);
  }
  SUBCASE("a child sees only descriptors 0, 1 and 2, even those the host left inheritable") {
    int leaky = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC
    REQUIRE(leaky >= 0);
    int64_t id = spawn(m, "ls /proc/$$/fd; true");
    flemma_proc_event* e = wait_exit(m, id);
    ::close(leaky);
    REQUIRE(e != nullptr);
    CHECK(std::string(e->out_tail, e->out_tail_len) == "0\n1\n2\n");
    flemma_proc_event_free(e);
  }
  SUBCASE("a finished child leaves no descriptor open in the host") {
    int64_t warm = spawn(m, "true");
    flemma_proc_event_free(wait_exit(m, warm));
    ::usleep(100 * 1000);
    int before = count_fds();
    for (int i = 0; i < 20; ++i) {
      int64_t id = spawn(m, "true");
      flemma_proc_event* e = wait_exit(m, id);
      REQUIRE(e != nullptr);
      flemma_proc_event_free(e);
    }
    int after = count_fds();
    for (int i = 0; i < 50 && after != before; ++i) {  // handles close just after the event
      ::usleep(20 * 1000);
      after = count_fds();
    }
    CHECK(after == before);
  }
  SUBCASE("a missing program is an error at spawn time") {
    const char* argv[] = {"flemma-no-such-program", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    int64_t id = 0;
    CHECK(flemma_procmgr_spawn(m, &o, &id, nullptr) == FLEMMA_E_INVALID);
    CHECK(std::string(flemma_last_error()).find("cannot run `flemma-no-such-program`") != std::string::npos);
  }
  SUBCASE("the environment gets the non-interactive variables and the extra ones last") {
    const char* base[] = {"PATH=/bin", "CI=false", "FOO=1", nullptr};
    auto env = flemma::process::build_env(base, {"FOO=2"});
    CHECK(std::find(env.begin(), env.end(), "CI=true") != env.end());
    CHECK(std::find(env.begin(), env.end(), "CI=false") == env.end());
    CHECK(std::find(env.begin(), env.end(), "FOO=2") != env.end());
    CHECK(std::find(env.begin(), env.end(), "GIT_TERMINAL_PROMPT=0") != env.end());
  }
  flemma_procmgr_free(m);
  flemma_procmgr_free(nullptr);
  flemma_proc_event_free(nullptr);
}
