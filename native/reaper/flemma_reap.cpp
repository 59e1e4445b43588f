// flemma-reap: the intermediate every tool command runs under on Linux, so that
// background jobs cannot outlive a cancel, a timeout or Neovim itself.
//
//   flemma-reap [--grace-ms MS] [--seccomp-fd N] [--exec PATH] [--] program [args...]
//
// The process manager starts this program (R) in a new session. R forks a
// keeper (K) that becomes a child subreaper in a process group of its own, and
// K forks the command (C) back into R's group. Every orphan below C, even one
// that called setsid or double-forked, is re-parented to K, so K can always
// find and kill the whole tree (walking /proc/<pid>/task/*/children).
//
//  - C exits: K passes its wait status to R, which exits the same way (the
//    manager sees the command's own status); K stays while background jobs
//    remain, reaping them.
//  - cancel or timeout: the manager signals R's group (SIGTERM, SIGKILL after
//    the grace period). R forwards SIGTERM to K, which sends SIGTERM to the
//    tree and SIGKILL after --grace-ms; R killed before C's status was passed
//    makes K kill the tree at once.
//  - Neovim exits, however it ends: K watches it through a pidfd and kills the
//    tree.
//
// --exec PATH is the file to run for `program` (the manager already searched
// PATH for it): argv[0] stays `program`, and no PATH search is repeated.
//
// --seccomp-fd N hands bwrap (`--seccomp N`) the filter that refuses Unix
// sockets, on descriptor N of the command. The command gets descriptors 0-2
// (and N) only.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "seccomp.hpp"

namespace {

[[noreturn]] void die(int code, const char* what, int err) {
  dprintf(2, "flemma-reap: %s: %s\n", what, strerror(err));
  _exit(code);
}

int64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string read_small(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// Every descendant of pid: the children of each of its threads, recursively.
void collect(pid_t root, std::vector<pid_t>& out) {
  std::vector<pid_t> stack{root};
  while (!stack.empty()) {
    pid_t p = stack.back();
    stack.pop_back();
    std::string tasks = "/proc/" + std::to_string(p) + "/task";
    std::vector<std::string> tids;
    if (DIR* d = opendir(tasks.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.emplace_back(e->d_name);
      }
      closedir(d);
    }
    for (const auto& tid : tids) {
      std::string children = read_small(tasks + "/" + tid + "/children");
      const char* s = children.c_str();
      while (*s) {
        char* end = nullptr;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        if (v > 0) {
          out.push_back(static_cast<pid_t>(v));
          stack.push_back(static_cast<pid_t>(v));
        }
        s = end;
        while (*s == ' ' || *s == '\n') ++s;
      }
    }
  }
}

// Signals every descendant of this process. With SIGKILL, walks again until a
// walk finds nobody new (what was forked meanwhile is found the next time).
void kill_tree(int sig) {
  std::set<pid_t> done;
  for (int round = 0; round < 100; ++round) {
    std::vector<pid_t> found;
    collect(getpid(), found);
    bool fresh = false;
    for (pid_t p : found) {
      if (done.insert(p).second) {
        fresh = true;
        kill(p, sig);
      }
    }
    if (sig != SIGKILL || !fresh) break;
  }
}

// Closes every descriptor from 3 up, except keep (-1: none).
void close_from_3(int keep) {
  auto range = [](unsigned lo, unsigned hi) {
    if (lo > hi) return;
#if defined(SYS_close_range)
    if (syscall(SYS_close_range, lo, hi, 0) == 0) return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536) max = 65536;
    for (unsigned fd = lo; fd <= hi && fd < static_cast<unsigned>(max); ++fd) close(static_cast<int>(fd));
  };
  if (keep < 3) {
    range(3, ~0u);
  } else {
    range(3, static_cast<unsigned>(keep) - 1);
    range(static_cast<unsigned>(keep) + 1, ~0u);
  }
}

struct Options {
  int64_t grace_ms = 2000;
  int seccomp_fd = -1;
  const char* exec_path = nullptr;  // --exec: the file to run (else argv[0], searched in PATH)
  char** argv = nullptr;
};

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--grace-ms" && i + 1 < argc) {
      o.grace_ms = strtoll(argv[++i], nullptr, 10);
    } else if (a == "--exec" && i + 1 < argc) {
      o.exec_path = argv[++i];
      if (o.exec_path[0] != '/') {
        dprintf(2, "flemma-reap: --exec takes an absolute path\n");
        _exit(125);
      }
    } else if (a == "--seccomp-fd" && i + 1 < argc) {
      o.seccomp_fd = atoi(argv[++i]);
      if (o.seccomp_fd < 3) {
        dprintf(2, "flemma-reap: --seccomp-fd should be 3 or more\n");
        _exit(125);
      }
    } else if (a.rfind("--", 0) == 0) {
      dprintf(2, "flemma-reap: unknown option %s\n", a.c_str());
      _exit(125);
    } else {
      break;
    }
  }
  if (i >= argc) {
    dprintf(2, "usage: flemma-reap [--grace-ms MS] [--seccomp-fd N] [--exec PATH] [--] program [args...]\n");
    _exit(125);
  }
  o.argv = argv + i;
  return o;
}

// The seccomp filter in a memfd (close-on-exec; the command gets a copy on
// --seccomp-fd), made before the command is started.
int seccomp_memfd() {
  std::string prog = flemma::seccomp::deny_unix_sockets_program();
  if (prog.empty()) {
    dprintf(2, "flemma-reap: no seccomp filter for this architecture: refusing to run the sandbox without it\n");
    _exit(126);
  }
  int fd = static_cast<int>(syscall(SYS_memfd_create, "flemma-seccomp", MFD_CLOEXEC));
  if (fd < 0) die(126, "memfd_create", errno);
  if (write(fd, prog.data(), prog.size()) != static_cast<ssize_t>(prog.size())) die(126, "write", errno);
  lseek(fd, 0, SEEK_SET);
  return fd;
}

struct CommandArgs {
  const Options* o;
  pid_t group;
  int filter_fd;
};

// The command's side of the vfork-style clone: it shares the keeper's memory
// until execve, so it only makes system calls (no allocation, no stdio) and
// never returns. Not instrumented by AddressSanitizer, which takes the
// switch to that stack for a stack overflow.
__attribute__((no_sanitize("address"))) int run_command(void* arg) {
  const CommandArgs& a = *static_cast<const CommandArgs*>(arg);
  const Options& o = *a.o;
  pid_t group = a.group;
  int filter_fd = a.filter_fd;
  setpgid(0, group);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (filter_fd >= 0) {
    // dup2 onto itself would keep close-on-exec: clear it then.
    if (filter_fd == o.seccomp_fd ? fcntl(filter_fd, F_SETFD, 0) < 0 : dup2(filter_fd, o.seccomp_fd) < 0)
      _exit(126);
  }
  close_from_3(o.seccomp_fd);
  execvp(o.exec_path ? o.exec_path : o.argv[0], o.argv);
  int err = errno;
  const char* why = strerror(err);
  const char* parts[] = {"flemma: cannot run `", o.argv[0], "`: ", why, "\n"};
  for (const char* part : parts) {
    ssize_t ignored = write(2, part, strlen(part));
    (void)ignored;
  }
  _exit(err == ENOENT ? 127 : 126);
}

[[noreturn]] void keeper(const Options& o, pid_t group, pid_t host, int status_fd) {
  setpgid(0, 0);  // out of R's group: the manager's SIGKILL to it must not end us first
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int host_fd = -1;
#if defined(SYS_pidfd_open)
  host_fd = static_cast<int>(syscall(SYS_pidfd_open, host, 0));
#endif
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&set, s);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die(125, "signalfd", errno);
  CommandArgs args{&o, group, o.seccomp_fd >= 0 ? seccomp_memfd() : -1};
  // Like vfork (the keeper waits until the command's execve): no copy of the
  // keeper's page tables and no copy-on-write faults, the costly part of
  // starting a command. The command runs on a stack of its own.
  static char stack[64 * 1024] __attribute__((aligned(16)));
  pid_t c = clone(run_command, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  if (c < 0) die(125, "clone", errno);
  if (args.filter_fd >= 0) close(args.filter_fd);
  // Hold none of the command's pipes: the manager sees EOF when the command's
  // own processes close them.
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  bool c_done = false, killed = false, terminating = false;
  int64_t deadline = 0;
  auto kill_now = [&] {
    if (!killed) {
      killed = true;
      kill_tree(SIGKILL);
    }
  };
  for (;;) {
    pollfd fds[3];
    int n = 0;
    fds[n++] = {sfd, POLLIN, 0};
    int status_i = -1, host_i = -1;
    if (status_fd >= 0) {
      status_i = n;
      fds[n++] = {status_fd, 0, 0};  // POLLERR once R is gone
    }
    if (host_fd >= 0 && !killed) {
      host_i = n;
      fds[n++] = {host_fd, POLLIN, 0};
    }
    int timeout = -1;
    if (terminating && !killed) timeout = static_cast<int>(std::max<int64_t>(0, deadline - now_ms()));
    if (host_fd < 0 && !killed) timeout = timeout < 0 ? 500 : std::min(timeout, 500);
    int r = poll(fds, static_cast<nfds_t>(n), timeout);
    if (r < 0 && errno != EINTR) die(125, "poll", errno);
    signalfd_siginfo si;
    bool chld = false;
    while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGCHLD) {
        chld = true;
      } else if (!terminating) {
        terminating = true;
        // The manager's own SIGKILL (which ends R, so we kill the tree) comes
        // after the grace period; this is the backstop.
        deadline = now_ms() + o.grace_ms + 500;
        kill_tree(SIGTERM);
      }
    }
    if (status_i >= 0 && (fds[status_i].revents & (POLLERR | POLLHUP))) {
      // R ended before the command's status was passed on: killed by the manager.
      close(status_fd);
      status_fd = -1;
      kill_now();
    }
    if (host_i >= 0 && (fds[host_i].revents & POLLIN)) kill_now();
    if (host_fd < 0 && kill(host, 0) < 0 && errno == ESRCH) kill_now();
    if (terminating && now_ms() >= deadline) kill_now();
    if (chld || r == 0) {
      for (;;) {
        int st = 0;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
          if (w == c) {
            c_done = true;
            if (status_fd >= 0) {
              int32_t v = st;
              ssize_t wr;
              do wr = write(status_fd, &v, sizeof v);
              while (wr < 0 && errno == EINTR);
              close(status_fd);
              status_fd = -1;
            }
          }
          continue;
        }
        if (w < 0 && errno == ECHILD && c_done) _exit(0);
        break;
      }
    }
  }
}

// Ends this process the way the command ended.
[[noreturn]] void mirror(int status) {
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, nullptr);
    raise(sig);
    _exit(128 + sig);
  }
  _exit(125);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  pid_t host = getppid();
  // Neovim gone before we even started (or killed later): R goes too, and K
  // sees it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != host) _exit(125);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  int st[2];
  if (pipe2(st, O_CLOEXEC) < 0) die(125, "pipe", errno);
  pid_t group = getpgrp();
  pid_t k = fork();
  if (k < 0) die(125, "fork", errno);
  if (k == 0) {
    close(st[0]);
    keeper(o, group, host, st[1]);
  }
  close(st[1]);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die(125, "signalfd", errno);
  for (;;) {
    pollfd fds[2] = {{st[0], POLLIN, 0}, {sfd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) die(125, "poll", errno);
    signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo != SIGCHLD) kill(k, SIGTERM);
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      int32_t v = 0;
      ssize_t r;
      do r = read(st[0], &v, sizeof v);
      while (r < 0 && errno == EINTR);
      if (r == static_cast<ssize_t>(sizeof v)) mirror(v);
      dprintf(2, "flemma-reap: the keeper process ended before the command\n");
      _exit(125);
    }
  }
}
