#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

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
  // The command's own status (SIGTERM) reaches the manager through the reaper
  // within the grace period; 0 would mean SIGKILL at once.
  o.kill_grace_ms = 2000;
  int64_t id = 0, pid = 0;
  REQUIRE(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_OK);
  CHECK(pid > 0);
  return id;
}

// The events of a spawn_async child up to its exit: the pid of its started
// event (0: none came, -1: it came after another event) and its exit event (owned).
struct AsyncRun {
  int64_t pid = 0;
  bool other = false;
  flemma_proc_event* exit = nullptr;
};
// Waits for the exit events of every child in `runs`.
void wait_async_all(flemma_procmgr* m, std::map<int64_t, AsyncRun>& runs, int timeout_ms = 10000) {
  size_t done = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (done < runs.size() && std::chrono::steady_clock::now() < deadline) {
    pollfd p{flemma_procmgr_fd(m), POLLIN, 0};
    ::poll(&p, 1, 100);
    flemma_procmgr_ack(m);
    while (flemma_proc_event* e = flemma_procmgr_next_event(m)) {
      auto it = runs.find(e->id);
      if (it != runs.end() && e->kind == FLEMMA_PROC_STARTED) {
        it->second.pid = it->second.other ? -1 : e->pid;
      } else if (it != runs.end() && e->kind == FLEMMA_PROC_EXIT) {
        it->second.exit = e;
        ++done;
        continue;
      } else if (it != runs.end()) {
        it->second.other = true;
      }
      flemma_proc_event_free(e);
    }
  }
}
AsyncRun wait_async(flemma_procmgr* m, int64_t id, int timeout_ms = 10000) {
  std::map<int64_t, AsyncRun> runs{{id, AsyncRun{}}};
  wait_async_all(m, runs, timeout_ms);
  return runs[id];
}

int64_t spawn_async(flemma_procmgr* m, const char* script, int stdin_mode = 0,
                    const char* stdin_data = nullptr, int64_t timeout_ms = 0) {
  const char* argv[] = {"bash", "-c", script, nullptr};
  flemma_spawn_opts o{};
  o.argv = argv;
  o.merge_output = 1;
  o.stdin_mode = stdin_mode;
  o.stdin_data = stdin_data;
  o.stdin_len = stdin_data ? std::strlen(stdin_data) : 0;
  o.timeout_ms = timeout_ms;
  o.kill_grace_ms = 2000;
  int64_t id = 0;
  REQUIRE(flemma_procmgr_spawn_async(m, &o, &id) == FLEMMA_OK);
  CHECK(id > 0);
  return id;
}

bool group_alive(int64_t pid) { return ::kill(-static_cast<pid_t>(pid), 0) == 0; }

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
  SUBCASE("the last line is cut at 512 bytes on a code point boundary") {
    // "a" then 300 two-byte characters: byte 512 is the second half of one.
    int64_t id = spawn(m, "printf 'a'; for i in $(seq 300); do printf '\xc3\xa9'; done; echo");
    flemma_proc_event* e = wait_exit(m, id);
    REQUIRE(e != nullptr);
    std::string expected = "a";
    for (int i = 0; i < 255; ++i) expected += "\xc3\xa9";
    CHECK(std::string(e->last_line, e->last_line_len) == expected);
    flemma_proc_event_free(e);
  }
  SUBCASE("the spill file goes to the TMPDIR of spawn time") {
    std::string dir_a = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    std::string old_tmpdir = dir_a;
    bool had_tmpdir = std::getenv("TMPDIR") != nullptr;
    char tmpl_a[] = "/tmp/flemma-test-a-XXXXXX";
    char tmpl_b[] = "/tmp/flemma-test-b-XXXXXX";
    REQUIRE(::mkdtemp(tmpl_a) != nullptr);
    REQUIRE(::mkdtemp(tmpl_b) != nullptr);
    ::setenv("TMPDIR", tmpl_a, 1);
    int64_t id = spawn(m, "sleep 0.3; seq 1 100000");
    ::setenv("TMPDIR", tmpl_b, 1);  // too late for that child
    flemma_proc_event* e = wait_exit(m, id);
    if (had_tmpdir)
      ::setenv("TMPDIR", old_tmpdir.c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    REQUIRE(e != nullptr);
    REQUIRE(e->out_path != nullptr);
    std::string path = e->out_path;
    CHECK(path.rfind(std::string(tmpl_a) + "/flemma-output-", 0) == 0);
    ::unlink(path.c_str());
    ::rmdir(tmpl_a);
    ::rmdir(tmpl_b);
    flemma_proc_event_free(e);
  }
  SUBCASE("spill_dir puts the spill files of stdout and stderr in that directory") {
    char dir[] = "/tmp/flemma-test-spill-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    const char* argv[] = {"bash", "-c", "seq 1 100000; seq 1 100000 >&2", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    o.merge_output = 0;
    o.spill_dir = dir;
    int64_t id = 0;
    REQUIRE(flemma_procmgr_spawn(m, &o, &id, nullptr) == FLEMMA_OK);
    flemma_proc_event* e = wait_exit(m, id);
    REQUIRE(e != nullptr);
    REQUIRE(e->out_path != nullptr);
    REQUIRE(e->err_path != nullptr);
    CHECK(std::string(e->out_path).rfind(std::string(dir) + "/flemma-output-", 0) == 0);
    CHECK(std::string(e->err_path).rfind(std::string(dir) + "/flemma-stderr-", 0) == 0);
    ::unlink(e->out_path);
    ::unlink(e->err_path);
    CHECK(::rmdir(dir) == 0);  // nothing else was made there
    flemma_proc_event_free(e);
  }
  SUBCASE("a huge byte limit still keeps the tail by lines") {
    const char* argv[] = {"printf", "a\\nb\\n", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    o.merge_output = 1;
    o.max_lines = 1;
    o.max_bytes = INT64_MAX;
    int64_t id = 0;
    REQUIRE(flemma_procmgr_spawn(m, &o, &id, nullptr) == FLEMMA_OK);
    flemma_proc_event* e = wait_exit(m, id);
    REQUIRE(e != nullptr);
    CHECK(std::string(e->out_tail, e->out_tail_len) == "b\n");
    CHECK(e->out_truncated == 1);
    CHECK(e->out_total_lines == 2);
    if (e->out_path) ::unlink(e->out_path);
    flemma_proc_event_free(e);
  }
  SUBCASE("a group that emptied after its leader exited is forgotten at the next spawn") {
    // The background sleep does not hold the output pipe: the exit event comes at once.
    const char* argv[] = {"bash", "-c", "sleep 1 >/dev/null 2>&1 & exit 0", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    o.merge_output = 1;
    int64_t id = 0, pid = 0;
    REQUIRE(flemma_procmgr_spawn(m, &o, &id, &pid) == FLEMMA_OK);
    flemma_proc_event* e = wait_exit(m, id);
    REQUIRE(e != nullptr);
    flemma_proc_event_free(e);
    // The background sleep keeps the group alive for a while: still registered.
    CHECK(::kill(-static_cast<pid_t>(pid), 0) == 0);
    CHECK(flemma::process::is_registered(static_cast<pid_t>(pid)));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (::kill(-static_cast<pid_t>(pid), 0) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      ::usleep(20000);
    }
    REQUIRE(::kill(-static_cast<pid_t>(pid), 0) != 0);
    int64_t id2 = spawn(m, "true");
    e = wait_exit(m, id2);
    REQUIRE(e != nullptr);
    flemma_proc_event_free(e);
    CHECK_FALSE(flemma::process::is_registered(static_cast<pid_t>(pid)));
  }
  SUBCASE("a missing program is an error at spawn time") {
    const char* argv[] = {"flemma-no-such-program", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    int64_t id = 0;
    CHECK(flemma_procmgr_spawn(m, &o, &id, nullptr) == FLEMMA_E_INVALID);
    CHECK(std::string(flemma_last_error()).find("cannot run `flemma-no-such-program`") !=
          std::string::npos);
  }
  SUBCASE(
      "spawn_async: a started event with the pid comes first; stdin and the timeout follow it") {
    int64_t id = spawn_async(m, "cat; exit 3", 1, "given\n");
    AsyncRun r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    REQUIRE(r.pid > 0);
    CHECK(r.exit->exit_code == 3);
    CHECK(r.exit->error == nullptr);
    CHECK(std::string(r.exit->out_tail, r.exit->out_tail_len) == "given\n");
    flemma_proc_event_free(r.exit);
    // Writes right after the call wait for the spawn; the timeout counts from it.
    id = spawn_async(m, "cat; sleep 100", 2, nullptr, 300);
    REQUIRE(flemma_procmgr_write(m, id, "one\n", 4) == FLEMMA_OK);
    REQUIRE(flemma_procmgr_close_stdin(m, id) == FLEMMA_OK);
    r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    CHECK(r.pid > 0);
    CHECK(r.exit->timed_out == 1);
    CHECK(std::string(r.exit->out_tail, r.exit->out_tail_len) == "one\n");
    flemma_proc_event_free(r.exit);
    CHECK_FALSE(group_alive(r.pid));
    CHECK(flemma_procmgr_running(m) == 0);
  }
  SUBCASE("spawn_async: a missing program or working directory is an exit event with the error") {
    const char* argv[] = {"flemma-no-such-program", nullptr};
    flemma_spawn_opts o{};
    o.argv = argv;
    int64_t id = 0;
    REQUIRE(flemma_procmgr_spawn_async(m, &o, &id) == FLEMMA_OK);
    AsyncRun r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    CHECK(r.pid == 0);
    REQUIRE(r.exit->error != nullptr);
    CHECK(std::string(r.exit->error, r.exit->error_len) ==
          "spawn: cannot run `flemma-no-such-program`: No such file or directory (is it "
          "installed and on PATH?)");
    CHECK(r.exit->cancelled == 0);
    flemma_proc_event_free(r.exit);

    const char* sh[] = {"true", nullptr};
    o.argv = sh;
    o.cwd = "/nonexistent/flemma-dir";
    REQUIRE(flemma_procmgr_spawn_async(m, &o, &id) == FLEMMA_OK);
    r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    CHECK(r.pid == 0);
    REQUIRE(r.exit->error != nullptr);
    CHECK(std::string(r.exit->error) ==
          "spawn: the working directory `/nonexistent/flemma-dir` does not exist");
    flemma_proc_event_free(r.exit);
    CHECK(flemma_procmgr_running(m) == 0);
    // Options that cannot be used are still the call's error.
    o.cwd = nullptr;
    o.stdin_mode = 7;
    CHECK(flemma_procmgr_spawn_async(m, &o, &id) == FLEMMA_E_INVALID);
  }
  SUBCASE("spawn_async: a cancel before the spawn starts nothing; one just after kills it") {
    char dir[] = "/tmp/flemma-test-async-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    std::string mark = std::string(dir) + "/ran";
    std::string script = "echo > " + mark + "; sleep 100";
    int64_t id = 0;
    {
      // The worker waits at the spawn while the test holds the lock.
      std::lock_guard<std::mutex> hold(flemma::process::testing::launch_mutex());
      id = spawn_async(m, script.c_str());
      ::usleep(50 * 1000);
      REQUIRE(flemma_procmgr_cancel(m, id) == FLEMMA_OK);
    }
    AsyncRun r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    CHECK(r.pid == 0);
    CHECK(r.exit->cancelled == 1);
    CHECK(r.exit->error == nullptr);
    flemma_proc_event_free(r.exit);
    ::usleep(200 * 1000);
    CHECK(::access(mark.c_str(), F_OK) != 0);

    // No waiting: whether the cancel came before the spawn or after it, nothing
    // stays alive.
    id = spawn_async(m, script.c_str());
    REQUIRE(flemma_procmgr_cancel(m, id) == FLEMMA_OK);
    r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    CHECK(r.exit->cancelled == 1);
    if (r.pid > 0) CHECK_FALSE(group_alive(r.pid));
    flemma_proc_event_free(r.exit);
    ::unlink(mark.c_str());
    ::rmdir(dir);
    CHECK(flemma_procmgr_running(m) == 0);
  }
  SUBCASE("spawn_async: kill_all before the spawn starts nothing; during it, kills it") {
    char dir[] = "/tmp/flemma-test-async-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    std::string mark = std::string(dir) + "/ran";
    std::string script = "echo > " + mark + "; sleep 100";
    int64_t id = 0;
    std::thread killer;
    {
      std::lock_guard<std::mutex> hold(flemma::process::testing::launch_mutex());
      id = spawn_async(m, script.c_str());
      ::usleep(50 * 1000);
      uint64_t gen = flemma::process::testing::kill_generation();
      killer = std::thread([m] { flemma_procmgr_kill_all(m); });
      while (flemma::process::testing::kill_generation() == gen) ::usleep(1000);
    }
    killer.join();
    AsyncRun r = wait_async(m, id);
    REQUIRE(r.exit != nullptr);
    CHECK(r.pid == 0);
    CHECK(r.exit->cancelled == 1);
    flemma_proc_event_free(r.exit);
    ::usleep(200 * 1000);
    CHECK(::access(mark.c_str(), F_OK) != 0);

    // A kill_all while the worker spawns (or before, or after): none stays alive.
    std::map<int64_t, AsyncRun> runs;
    for (int i = 0; i < 5; ++i) runs[spawn_async(m, "sleep 100")] = AsyncRun{};
    flemma_procmgr_kill_all(m);
    wait_async_all(m, runs);
    for (auto& [each, run] : runs) {
      REQUIRE(run.exit != nullptr);
      CHECK(run.exit->cancelled == 1);
      if (run.pid > 0) CHECK_FALSE(group_alive(run.pid));
      flemma_proc_event_free(run.exit);
    }
    ::rmdir(dir);
    CHECK(flemma_procmgr_running(m) == 0);
  }
  SUBCASE("the environment gets the non-interactive variables and the extra ones last") {
    const char* base[] = {"PATH=/bin", "CI=false", "FOO=1", nullptr};
    auto env = flemma::process::build_env(base, {"FOO=2"});
    CHECK(std::find(env.begin(), env.end(), "CI=true") != env.end());
    CHECK(std::find(env.begin(), env.end(), "CI=false") == env.end());
    CHECK(std::find(env.begin(), env.end(), "FOO=2") != env.end());
    CHECK(std::find(env.begin(), env.end(), "GIT_TERMINAL_PROMPT=0") != env.end());
  }
  SUBCASE("inherited secrets are dropped; extra ones stay, a bare name removes one") {
    const char* base[] = {"PATH=/bin",          "ANTHROPIC_API_KEY=sk-1",
                          "GITHUB_TOKEN=t",     "AWS_SECRET_ACCESS_KEY=a",
                          "my_secret=x",        "DB_PASSWORD=p",
                          "TOKENIZER=ok",       "KEYBOARD=ok",
                          "MY_PROVIDER_CRED=c", nullptr};
    auto env = flemma::process::build_env(base, {"OPENAI_API_KEY=given", "MY_PROVIDER_CRED"});
    auto has = [&](const char* kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
    CHECK_FALSE(has("ANTHROPIC_API_KEY=sk-1"));
    CHECK_FALSE(has("GITHUB_TOKEN=t"));
    CHECK_FALSE(has("AWS_SECRET_ACCESS_KEY=a"));
    CHECK_FALSE(has("my_secret=x"));
    CHECK_FALSE(has("DB_PASSWORD=p"));
    CHECK_FALSE(has("MY_PROVIDER_CRED=c"));
    // Any name holding KEY or TOKEN counts now (tools.env_passthrough lets one through).
    CHECK_FALSE(has("TOKENIZER=ok"));
    CHECK_FALSE(has("KEYBOARD=ok"));
    CHECK(has("PATH=/bin"));
    CHECK(has("OPENAI_API_KEY=given"));
  }
  SUBCASE("secrets by other names and by value are dropped; the usual variables stay") {
    const char* base[] = {
        "PATH=/bin",
        "HOME=/home/u",
        "TERM=xterm",
        "LANG=C.UTF-8",
        "LC_ALL=C",
        "SHELL=/bin/bash",
        "USER=u",
        "EDITOR=vi",
        "TMPDIR=/tmp",
        "XDG_CONFIG_HOME=/c",
        "GIT_AUTHOR_NAME=Me",
        "GIT_AUTHOR_EMAIL=me@x",
        "VERTEX_SERVICE_ACCOUNT=sa",
        "GITHUB_PAT=ghp",
        "SSH_AUTH_SOCK=/s",
        "XDG_SESSION_ID=3",
        "HTTP_AUTHORIZATION=b",
        "XAUTHORITY=/x",
        "MY_COOKIE_JAR=c",
        "gpg_private=p",
        "DB_PASSWD=p",
        "GOOGLE_APPLICATION_CREDENTIALS=/c.json",
        "SIGNING=-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
        "GCP_JSON={\"type\": \"service_account\", \"private_key\": \"x\"}",
        "PUBLIC=-----BEGIN PUBLIC KEY-----",
        nullptr};
    auto env = flemma::process::build_env(base, {});
    auto has_name = [&](const std::string& n) {
      return std::any_of(env.begin(), env.end(),
                         [&](const std::string& kv) { return kv.rfind(n + "=", 0) == 0; });
    };
    for (const char* keep :
         {"PATH", "HOME", "TERM", "LANG", "LC_ALL", "SHELL", "USER", "EDITOR", "TMPDIR",
          "XDG_CONFIG_HOME", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "PUBLIC"})
      CHECK_MESSAGE(has_name(keep), keep);
    for (const char* drop :
         {"VERTEX_SERVICE_ACCOUNT", "GITHUB_PAT", "SSH_AUTH_SOCK", "XDG_SESSION_ID",
          "HTTP_AUTHORIZATION", "XAUTHORITY", "MY_COOKIE_JAR", "gpg_private", "DB_PASSWD",
          "GOOGLE_APPLICATION_CREDENTIALS", "SIGNING", "GCP_JSON"})
      CHECK_MESSAGE(!has_name(drop), drop);
  }
  flemma_procmgr_free(m);
  flemma_procmgr_free(nullptr);
  flemma_proc_event_free(nullptr);
}
