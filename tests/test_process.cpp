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
  // The command's own status (SIGTERM) reaches the manager through the reaper
  // within the grace period; 0 would mean SIGKILL at once.
  o.kill_grace_ms = 2000;
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
