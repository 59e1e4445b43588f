// flemma-reap run directly: how it starts the command (argv, the file run,
// descriptors) and how it reports the command's end.
#include <doctest/doctest.h>

#if defined(__linux__)
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reaper.hpp"

extern char** environ;

namespace {

struct Run {
  int status = -1;
  std::string out;  // stdout and stderr
};

// Runs `flemma-reap args...` with stdout and stderr on one pipe (and env
// instead of this process's environment when given); waits for it.
Run reap(std::vector<std::string> args, std::vector<std::string> env = {}) {
  Run r;
  args.insert(args.begin(), flemma::reaper::path());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid = -1;
  std::vector<char*> envp;
  for (auto& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  int rc =
      ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  REQUIRE(rc == 0);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  REQUIRE(::waitpid(pid, &r.status, 0) == pid);
  return r;
}

// The CPUs of a "Cpus_allowed_list:\t0-3,5" line of the text, from the line
// after `skip` such lines.
std::set<int> cpu_list(const std::string& text, int skip = 0) {
  size_t at = 0;
  for (int i = 0; i <= skip; ++i) {
    at = text.find("Cpus_allowed_list:", i == 0 ? 0 : at + 1);
    REQUIRE(at != std::string::npos);
  }
  std::set<int> cpus;
  std::istringstream in(text.substr(at + 18, text.find('\n', at) - at - 18));
  std::string part;
  while (std::getline(in, part, ',')) {
    int a = std::stoi(part);
    size_t dash = part.find('-');
    int b = dash == std::string::npos ? a : std::stoi(part.substr(dash + 1));
    for (int c = a; c <= b; ++c) cpus.insert(c);
  }
  return cpus;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/flemma-reap-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

}  // namespace

TEST_CASE("flemma-reap") {
  REQUIRE(flemma::reaper::available());

  SUBCASE("--exec runs the given file with the command's own argv[0]") {
    Run r = reap({"--exec", "/bin/cat", "--", "my-cat", "/proc/self/cmdline"});
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.out == std::string("my-cat\0/proc/self/cmdline\0", 26));
  }
  SUBCASE("--exec takes an absolute path only") {
    Run r = reap({"--exec", "bin/cat", "--", "cat", "/dev/null"});
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 125);
    CHECK(r.out.find("--exec takes an absolute path") != std::string::npos);
  }
  SUBCASE("an executable file without #! given to --exec runs under /bin/sh, as execvp does") {
    std::string dir = temp_dir();
    std::string script = dir + "/plain";
    std::ofstream(script) << "echo \"ran $1\"\nexit 3\n";
    ::chmod(script.c_str(), 0755);
    Run r = reap({"--exec", script, "--", "plain", "x"});
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 3);
    CHECK(r.out == "ran x\n");
    ::unlink(script.c_str());
    ::rmdir(dir.c_str());
  }
  SUBCASE("the command's exit code and signal are the reaper's") {
    Run a = reap({"--", "sh", "-c", "exit 7"});
    CHECK(WIFEXITED(a.status));
    CHECK(WEXITSTATUS(a.status) == 7);
    Run b = reap({"--", "sh", "-c", "kill -USR1 $$"});
    CHECK(WIFSIGNALED(b.status));
    CHECK(WTERMSIG(b.status) == SIGUSR1);
  }
  SUBCASE("a signal ignored where the reaper was started still ends it as it ended the command") {
    // The reaper inherits SIGUSR1 ignored; the command restores the default.
    struct sigaction ign {
    }, old{};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGUSR1, &ign, &old);
    Run r = reap({"--", "perl", "-e", "$SIG{USR1} = 'DEFAULT'; kill 'USR1', $$; sleep 5"});
    ::sigaction(SIGUSR1, &old, nullptr);
    CHECK(WIFSIGNALED(r.status));
    CHECK(WTERMSIG(r.status) == SIGUSR1);
  }
  SUBCASE("without --exec, PATH is searched as execvp does") {
    std::string dir = temp_dir();
    ::mkdir((dir + "/a").c_str(), 0755);
    ::mkdir((dir + "/b").c_str(), 0755);
    std::ofstream(dir + "/a/tool") << "#!/bin/sh\necho a\n";
    ::chmod((dir + "/a/tool").c_str(), 0644);             // not executable: skipped
    std::ofstream(dir + "/b/tool") << "echo \"b $1\"\n";  // no #!: run by /bin/sh
    ::chmod((dir + "/b/tool").c_str(), 0755);
    Run r = reap({"--", "tool", "x"}, {"PATH=" + dir + "/nowhere:" + dir + "/a:" + dir + "/b"});
    CHECK(WIFEXITED(r.status));
    CHECK(WEXITSTATUS(r.status) == 0);
    CHECK(r.out == "b x\n");
    // Only a file that is not executable: permission denied, 126.
    Run d = reap({"--", "tool"}, {"PATH=" + dir + "/a"});
    CHECK(WIFEXITED(d.status));
    CHECK(WEXITSTATUS(d.status) == 126);
    CHECK(d.out == "flemma: cannot run `tool`: Permission denied\n");
    // An empty entry is the working directory: there is no `tool` here.
    Run e = reap({"--", "tool"}, {"PATH=:" + dir + "/nowhere"});
    CHECK(WIFEXITED(e.status));
    CHECK(WEXITSTATUS(e.status) == 127);
    std::filesystem::remove_all(dir);
  }
  SUBCASE("a program that cannot run: 127 when missing, 126 when not executable, with the reason") {
    Run a = reap({"--", "flemma-no-such-program"});
    CHECK(WIFEXITED(a.status));
    CHECK(WEXITSTATUS(a.status) == 127);
    CHECK(a.out == "flemma: cannot run `flemma-no-such-program`: No such file or directory\n");
    std::string dir = temp_dir();
    std::string file = dir + "/not-exec";
    std::ofstream(file) << "echo no\n";
    ::chmod(file.c_str(), 0644);
    Run b = reap({"--exec", file, "--", "not-exec"});
    CHECK(WIFEXITED(b.status));
    CHECK(WEXITSTATUS(b.status) == 126);
    CHECK(b.out == "flemma: cannot run `not-exec`: Permission denied\n");
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
  }
  SUBCASE("the command gets descriptors 0-2 and the seccomp filter on --seccomp-fd only") {
    for (int n : {3, 4, 9}) {
      CAPTURE(n);
      std::string fd = std::to_string(n);
      std::string script =
          "ls /proc/$$/fd; readlink /proc/$$/fd/" + fd + "; wc -c < /proc/$$/fd/" + fd;
      Run r = reap({"--seccomp-fd", fd, "--", "bash", "-c", script});
      CHECK(WIFEXITED(r.status));
      CHECK(WEXITSTATUS(r.status) == 0);
      std::string fds = "0\n1\n2\n" + fd + "\n";
      REQUIRE(r.out.rfind(fds, 0) == 0);
      CHECK(r.out.find("/memfd:flemma-seccomp") == fds.size());
      CHECK(std::atoi(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1).c_str()) > 0);
    }
  }
  SUBCASE("--spare-cpu keeps the command's tree off a CPU until the reaper gets SIGURG") {
    std::string show = "grep Cpus_allowed_list /proc/self/status";
    std::set<int> all = cpu_list(reap({"--", "sh", "-c", show}).out);
    if (all.size() < 2) return;  // one CPU: nothing to spare
    std::string cpu = std::to_string(*all.begin());
    std::set<int> rest = all;
    rest.erase(rest.begin());
    // The command and what it starts, then (SIGURG to the reaper, the parent of
    // the command's parent, which passes it on to that) all of them again.
    Run r = reap({"--spare-cpu", cpu, "--spare-ms", "60000", "--", "sh", "-c",
                  show +
                      "; grep Cpus_allowed_list /proc/$$/status; kill -URG $(cut -d' ' -f4 "
                      "/proc/$PPID/stat); sleep 0.5; " +
                      show + "; grep Cpus_allowed_list /proc/$$/status"});
    CHECK(WIFEXITED(r.status));
    CHECK(cpu_list(r.out, 0) == rest);
    CHECK(cpu_list(r.out, 1) == rest);
    CHECK(cpu_list(r.out, 2) == all);
    CHECK(cpu_list(r.out, 3) == all);
    // Without SIGURG: back after --spare-ms.
    Run t = reap(
        {"--spare-cpu", cpu, "--spare-ms", "300", "--", "sh", "-c", show + "; sleep 1; " + show});
    CHECK(cpu_list(t.out, 0) == rest);
    CHECK(cpu_list(t.out, 1) == all);
    // A CPU outside the set changes nothing.
    Run o = reap({"--spare-cpu", "1023", "--spare-ms", "60000", "--", "sh", "-c", show});
    CHECK(cpu_list(o.out) == all);
  }
}
#endif
