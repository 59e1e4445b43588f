// flemma-reap: the intermediate every tool command runs under on Linux, so that
// background jobs cannot outlive a cancel, a timeout or Neovim itself.
//
//   flemma-reap [--grace-ms MS] [--seccomp-fd N] [--exec PATH]
//               [--spare-cpu CPU --spare-ms MS] [--] program [args...]
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
// --spare-cpu CPU keeps the command, every thread and process it starts, off
// that CPU (the one the editor's main thread ran on when it asked for the
// command) while it starts: until R gets SIGURG (forwarded to K), or --spare-ms
// MS have passed, after which K gives every task of the tree K's own CPUs back.
// On a machine with two CPUs a starting Node server's threads otherwise take
// both, and the editor waits milliseconds for a CPU. With one CPU allowed, or a
// CPU not in K's set, nothing changes. SIGURG is ignored by default, so one
// that comes before R watches it is lost, not fatal (then MS decides).
//
// --seccomp-fd N hands bwrap (`--seccomp N`) the filter that refuses Unix
// sockets, on descriptor N of the command. The command gets descriptors 0-2
// (and N) only.
//
// Starting this program is part of starting every command, so on x86_64 it is
// built without a C library (FLEMMA_REAP_FREESTANDING: its own _start and
// system calls): a static glibc's start-up alone cost more page faults and
// CPU-identification instructions than the rest of the helper. Elsewhere, and
// under the sanitizers, the same code runs on glibc's syscall().
#include <asm/signal.h>
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/memfd.h>
#include <linux/poll.h>
#include <linux/prctl.h>
#include <linux/resource.h>
#include <linux/sched.h>
#include <linux/signalfd.h>
#include <linux/time_types.h>
#include <linux/wait.h>

#include <stddef.h>
#include <stdint.h>

#include "seccomp_filter.hpp"

#if !defined(FLEMMA_REAP_FREESTANDING)
extern "C" long syscall(long number, ...) noexcept;
extern "C" int* __errno_location() noexcept;
extern "C" int fork() noexcept;
extern "C" int clone(int (*fn)(void*), void* stack, int flags, void* arg, ...) noexcept;
extern "C" char** environ;
#endif

namespace {

// ---------------------------------------------------------------------------
// System calls: each returns the result, or -errno.
// ---------------------------------------------------------------------------
namespace sys {

#if defined(FLEMMA_REAP_FREESTANDING)
long call(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}
#else
long call(long n, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long r = ::syscall(n, a, b, c, d, e, f);
  return r == -1 ? -*__errno_location() : r;
}
#endif

long L(long v) { return v; }
long L(const volatile void* p) { return reinterpret_cast<long>(p); }

constexpr int kAtFdcwd = -100;

long read(int fd, void* buf, size_t n) { return call(__NR_read, fd, L(buf), L(n)); }
long write(int fd, const void* buf, size_t n) { return call(__NR_write, fd, L(buf), L(n)); }
long close(int fd) { return call(__NR_close, fd); }
long open(const char* path, int flags) { return call(__NR_openat, kAtFdcwd, L(path), flags, 0); }
long dup_to(int fd, int to) { return call(__NR_dup3, fd, to, 0); }
long fcntl(int fd, int cmd, long arg) { return call(__NR_fcntl, fd, cmd, arg); }
long pipe2(int* fds, int flags) { return call(__NR_pipe2, L(fds), flags); }
long getpid() { return call(__NR_getpid); }
long getppid() { return call(__NR_getppid); }
long getpgrp() { return call(__NR_getpgid, 0); }
long setpgid(int pid, int pgid) { return call(__NR_setpgid, pid, pgid); }
long prctl(int op, long arg) { return call(__NR_prctl, op, arg, 0, 0, 0); }
long kill(int pid, int sig) { return call(__NR_kill, pid, sig); }
long wait_any(int* status) { return call(__NR_wait4, -1, L(status), WNOHANG, 0); }
long sigmask(int how, const uint64_t* set) { return call(__NR_rt_sigprocmask, how, L(set), 0, 8); }
long signalfd(const uint64_t* set, int flags) { return call(__NR_signalfd4, -1, L(set), 8, flags); }
long pidfd_open(int pid) {
#if defined(__NR_pidfd_open)
  return call(__NR_pidfd_open, pid, 0);
#else
  (void)pid;
  return -ENOSYS;
#endif
}
long poll(pollfd* fds, int n, int timeout_ms) {
  __kernel_timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  return call(__NR_ppoll, L(fds), n, timeout_ms < 0 ? 0 : L(&ts), 0, 8);
}
long execve(const char* path, char* const* argv, char* const* envp) {
  return call(__NR_execve, L(path), L(argv), L(envp));
}
long lseek0(int fd) { return call(__NR_lseek, fd, 0, 0 /* SEEK_SET */); }
long memfd(const char* name, unsigned flags) { return call(__NR_memfd_create, L(name), flags); }
long getdents(int fd, void* buf, size_t n) { return call(__NR_getdents64, fd, L(buf), L(n)); }
// The CPU sets of sched_{get,set}affinity: 1024 CPUs (as glibc's cpu_set_t).
struct CpuSet {
  uint64_t bits[16];
};
long getaffinity(CpuSet* set) {
  return call(__NR_sched_getaffinity, 0, sizeof set->bits, L(set->bits));
}
long setaffinity(int tid, const CpuSet* set) {
  return call(__NR_sched_setaffinity, tid, sizeof set->bits, L(set->bits));
}
long close_range(unsigned lo, unsigned hi) {
#if defined(__NR_close_range)
  return call(__NR_close_range, lo, hi, 0);
#else
  (void)lo, (void)hi;
  return -ENOSYS;
#endif
}
long no_core() {
  rlimit64 zero{0, 0};
  return call(__NR_prlimit64, 0, RLIMIT_CORE, L(&zero), 0);
}
void* map(size_t n) {
  long r = call(__NR_mmap, 0, L(n), 0x3 /* PROT_READ|PROT_WRITE */,
                0x22 /* MAP_PRIVATE|MAP_ANONYMOUS */, -1, 0);
  return (r < 0 && r > -4096) ? nullptr : reinterpret_cast<void*>(r);
}
int64_t now_ms() {
  __kernel_timespec ts{};
  call(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, L(&ts));
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}
[[noreturn]] void exit(int code) {
  for (;;) call(__NR_exit_group, code);
}

// The signal's default action (a signal ignored by whoever started us would
// otherwise stay ignored).
long default_action(int sig) {
  // The kernel's struct sigaction on x86_64 and aarch64.
  struct {
    void* handler;
    unsigned long flags;
    void* restorer;
    uint64_t mask;
  } act{nullptr /* SIG_DFL */, 0, nullptr, 0};
  return call(__NR_rt_sigaction, sig, L(&act), 0, 8);
}

// fork(): a copy of this process.
long fork() {
#if defined(FLEMMA_REAP_FREESTANDING)
  return call(__NR_clone, SIGCHLD, 0, 0, 0, 0);
#else
  long r = ::fork();
  return r < 0 ? -*__errno_location() : r;
#endif
}

// A child that shares this process's memory and runs fn(arg) on `stack_top`
// while this process waits, until the child's execve or exit (vfork).
long clone_vfork(int (*fn)(void*), void* stack_top, void* arg) {
  constexpr long kFlags = CLONE_VM | CLONE_VFORK | SIGCHLD;
#if defined(FLEMMA_REAP_FREESTANDING)
  long ret;
  register long r10 asm("r10") = 0;
  register long r8 asm("r8") = 0;
  register void* r12 asm("r12") = reinterpret_cast<void*>(fn);
  register void* r13 asm("r13") = arg;
  // The child starts on the new stack (16-byte aligned: the call leaves it as
  // a function expects) with this thread's registers, calls fn and exits.
  asm volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xor %%ebp, %%ebp\n\t"
      "mov %%r13, %%rdi\n\t"
      "call *%%r12\n\t"
      "mov %%eax, %%edi\n\t"
      "mov %[nr_exit], %%eax\n\t"
      "syscall\n\t"
      "hlt\n"
      "1:"
      : "=a"(ret)
      : "a"(static_cast<long>(__NR_clone)), "D"(kFlags), "S"(stack_top), "d"(0L), "r"(r10), "r"(r8),
        "r"(r12), "r"(r13), [nr_exit] "i"(__NR_exit)
      : "rcx", "r11", "memory");
  return ret;
#else
  int r = ::clone(fn, stack_top, static_cast<int>(kFlags), arg);
  return r < 0 ? -*__errno_location() : r;
#endif
}

}  // namespace sys

char** g_envp = nullptr;

// ---------------------------------------------------------------------------
// Strings and numbers, without a C library.
// ---------------------------------------------------------------------------
size_t len(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

bool eq(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

// strtoll(s, nullptr, 10) as far as the helper needs it: 0 when no digits.
int64_t to_int(const char* s) {
  while (*s == ' ' || (*s >= '\t' && *s <= '\r')) ++s;
  bool neg = *s == '-';
  if (*s == '-' || *s == '+') ++s;
  int64_t v = 0;
  for (; *s >= '0' && *s <= '9'; ++s) {
    if (v > (INT64_MAX - 9) / 10) {
      v = INT64_MAX;
      while (*s >= '0' && *s <= '9') ++s;
      break;
    }
    v = v * 10 + (*s - '0');
  }
  return neg ? -v : v;
}

// Appends the decimal digits of v (>= 0) at p; returns the end.
char* put_int(char* p, int64_t v) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = static_cast<char>('0' + v % 10), v /= 10;
  while (v > 0);
  while (n > 0) *p++ = tmp[--n];
  return p;
}

char* put_str(char* p, const char* s) {
  while (*s) *p++ = *s++;
  return p;
}

// The C library's wording for the errors a start can meet.
const char* error_text(int err, char* buf) {
  switch (err) {
    case EPERM:
      return "Operation not permitted";
    case ENOENT:
      return "No such file or directory";
    case ESRCH:
      return "No such process";
    case EINTR:
      return "Interrupted system call";
    case EIO:
      return "Input/output error";
    case E2BIG:
      return "Argument list too long";
    case ENOEXEC:
      return "Exec format error";
    case EBADF:
      return "Bad file descriptor";
    case ECHILD:
      return "No child processes";
    case EAGAIN:
      return "Resource temporarily unavailable";
    case ENOMEM:
      return "Cannot allocate memory";
    case EACCES:
      return "Permission denied";
    case EFAULT:
      return "Bad address";
    case ENOTDIR:
      return "Not a directory";
    case EISDIR:
      return "Is a directory";
    case EINVAL:
      return "Invalid argument";
    case ENFILE:
      return "Too many open files in system";
    case EMFILE:
      return "Too many open files";
    case ETXTBSY:
      return "Text file busy";
    case ENAMETOOLONG:
      return "File name too long";
    case ENOSYS:
      return "Function not implemented";
    case ELOOP:
      return "Too many levels of symbolic links";
    case ELIBBAD:
      return "Accessing a corrupted shared library";
    default:
      break;
  }
  *put_int(put_str(buf, "Unknown error "), err) = '\0';
  return buf;
}

// Writes the pieces to stderr (a null ends the list).
void say(const char* a, const char* b = nullptr, const char* c = nullptr, const char* d = nullptr,
         const char* e = nullptr) {
  const char* parts[] = {a, b, c, d, e};
  for (const char* s : parts) {
    if (!s) break;
    sys::write(2, s, len(s));
  }
}

[[noreturn]] void die(int code, const char* what, long err) {
  char buf[40];
  say("flemma-reap: ", what, ": ", error_text(static_cast<int>(-err), buf), "\n");
  sys::exit(code);
}

// ---------------------------------------------------------------------------
// The tree below this process
// ---------------------------------------------------------------------------

// A set of pids (open addressing, cleared by clear()). Full: insert says the
// pid is new and forgets it, so kill_tree keeps signalling rather than stop.
// Only ever a global: zero at start without a constructor (nothing runs
// constructors here).
struct PidSet {
  static constexpr int kCap = 1 << 16;
  int32_t slot[kCap];
  int32_t used[kCap];
  int n;
  bool insert(int32_t pid) {
    if (n >= kCap / 2) return true;
    uint32_t h = static_cast<uint32_t>(pid) * 2654435761u;
    for (uint32_t i = h >> 16;; i = (i + 1) & (kCap - 1)) {
      if (slot[i] == pid) return false;
      if (slot[i] == 0) {
        slot[i] = pid;
        used[n++] = static_cast<int32_t>(i);
        return true;
      }
    }
  }
  void clear() {
    while (n > 0) slot[used[--n]] = 0;
  }
};

PidSet g_done;
int32_t g_stack[1 << 16];
int32_t g_found[1 << 16];
char g_dirbuf[8192];
char g_readbuf[4096];

// Every descendant of root (the children of each of its threads,
// recursively), at most max of them; returns how many.
int collect(int32_t root, int32_t* found, int max) {
  int n_found = 0, top = 0;
  g_stack[top++] = root;
  char path[64];
  while (top > 0) {
    int32_t p = g_stack[--top];
    char* tasks_end = put_str(put_int(put_str(path, "/proc/"), p), "/task");
    *tasks_end = '\0';
    long dir = sys::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) continue;
    long got;
    while ((got = sys::getdents(static_cast<int>(dir), g_dirbuf, sizeof g_dirbuf)) > 0) {
      for (long off = 0; off < got;) {
        // struct linux_dirent64: ino, off, reclen, type, name.
        const char* rec = g_dirbuf + off;
        uint16_t reclen;
        __builtin_memcpy(&reclen, rec + 16, sizeof reclen);
        const char* name = rec + 19;
        off += reclen;
        if (name[0] < '0' || name[0] > '9') continue;
        char* e = put_str(put_str(put_str(tasks_end, "/"), name), "/children");
        *e = '\0';
        long f = sys::open(path, O_RDONLY | O_CLOEXEC);
        *tasks_end = '\0';
        if (f < 0) continue;
        // Space-separated pids, read in pieces (a number may span two).
        int64_t v = 0;
        bool in_num = false;
        long r;
        while ((r = sys::read(static_cast<int>(f), g_readbuf, sizeof g_readbuf)) > 0) {
          for (long i = 0; i < r; ++i) {
            char ch = g_readbuf[i];
            if (ch >= '0' && ch <= '9') {
              v = v * 10 + (ch - '0');
              in_num = true;
            } else if (in_num) {
              if (v > 0 && n_found < max) found[n_found++] = static_cast<int32_t>(v);
              if (v > 0 && top < static_cast<int>(sizeof g_stack / sizeof g_stack[0]))
                g_stack[top++] = static_cast<int32_t>(v);
              v = 0;
              in_num = false;
            }
          }
        }
        if (in_num && v > 0) {
          if (n_found < max) found[n_found++] = static_cast<int32_t>(v);
          if (top < static_cast<int>(sizeof g_stack / sizeof g_stack[0]))
            g_stack[top++] = static_cast<int32_t>(v);
        }
        sys::close(static_cast<int>(f));
      }
    }
    sys::close(static_cast<int>(dir));
  }
  return n_found;
}

// Signals every descendant of this process. With SIGKILL, walks again until a
// walk finds nobody new (what was forked meanwhile is found the next time).
void kill_tree(int sig) {
  g_done.clear();
  int32_t self = static_cast<int32_t>(sys::getpid());
  for (int round = 0; round < 100; ++round) {
    int n = collect(self, g_found, static_cast<int>(sizeof g_found / sizeof g_found[0]));
    bool fresh = false;
    for (int i = 0; i < n; ++i) {
      if (g_done.insert(g_found[i])) {
        fresh = true;
        sys::kill(g_found[i], sig);
      }
    }
    if (sig != SIGKILL || !fresh) break;
  }
}

// Closes every descriptor from 3 up, except keep (-1: none).
void close_from_3(int keep) {
  auto range = [](unsigned lo, unsigned hi) {
    if (lo > hi) return;
    if (sys::close_range(lo, hi) == 0) return;
    for (unsigned fd = lo; fd <= hi && fd < 65536; ++fd) sys::close(static_cast<int>(fd));
  };
  if (keep < 3) {
    range(3, ~0u);
  } else {
    range(3, static_cast<unsigned>(keep) - 1);
    range(static_cast<unsigned>(keep) + 1, ~0u);
  }
}

uint64_t sig_bit(int sig) { return uint64_t{1} << (sig - 1); }

// The signals the helper takes through a signalfd.
constexpr uint64_t kWatched = (uint64_t{1} << (SIGCHLD - 1)) | (uint64_t{1} << (SIGTERM - 1)) |
                              (uint64_t{1} << (SIGINT - 1)) | (uint64_t{1} << (SIGHUP - 1)) |
                              (uint64_t{1} << (SIGQUIT - 1)) | (uint64_t{1} << (SIGURG - 1));

struct Options {
  int64_t grace_ms = 2000;
  int seccomp_fd = -1;
  const char* exec_path = nullptr;  // --exec: the file to run (else argv[0], searched in PATH)
  int spare_cpu = -1;               // --spare-cpu: the CPU the command starts without
  int64_t spare_ms = 10000;         // --spare-ms: at the latest then it gets it back
  char** argv = nullptr;
};

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (eq(a, "--")) {
      ++i;
      break;
    }
    if (eq(a, "--grace-ms") && i + 1 < argc) {
      o.grace_ms = to_int(argv[++i]);
    } else if (eq(a, "--exec") && i + 1 < argc) {
      o.exec_path = argv[++i];
      if (o.exec_path[0] != '/') {
        say("flemma-reap: --exec takes an absolute path\n");
        sys::exit(125);
      }
    } else if (eq(a, "--seccomp-fd") && i + 1 < argc) {
      int64_t fd = to_int(argv[++i]);
      if (fd < 3 || fd > 65535) {
        say("flemma-reap: --seccomp-fd should be 3 or more\n");
        sys::exit(125);
      }
      o.seccomp_fd = static_cast<int>(fd);
    } else if (eq(a, "--spare-cpu") && i + 1 < argc) {
      int64_t cpu = to_int(argv[++i]);
      o.spare_cpu = cpu >= 0 && cpu < 1024 ? static_cast<int>(cpu) : -1;
    } else if (eq(a, "--spare-ms") && i + 1 < argc) {
      o.spare_ms = to_int(argv[++i]);
    } else if (a[0] == '-' && a[1] == '-') {
      say("flemma-reap: unknown option ", a, "\n");
      sys::exit(125);
    } else {
      break;
    }
  }
  if (i >= argc) {
    say("usage: flemma-reap [--grace-ms MS] [--seccomp-fd N] [--exec PATH] [--spare-cpu CPU "
        "--spare-ms MS] [--] program [args...]\n");
    sys::exit(125);
  }
  o.argv = argv + i;
  return o;
}

// The seccomp filter in a memfd (close-on-exec; the command gets a copy on
// --seccomp-fd), made before the command is started.
int seccomp_memfd() {
#if defined(FLEMMA_SECCOMP_FILTER)
  sock_filter prog[flemma::seccomp::kMaxFilter];
  size_t bytes = flemma::seccomp::build_filter(prog) * sizeof(sock_filter);
  long fd = sys::memfd("flemma-seccomp", MFD_CLOEXEC);
  if (fd < 0) die(126, "memfd_create", fd);
  long w = sys::write(static_cast<int>(fd), prog, bytes);
  if (w != static_cast<long>(bytes)) die(126, "write", w < 0 ? w : -EIO);
  sys::lseek0(static_cast<int>(fd));
  return static_cast<int>(fd);
#else
  say("flemma-reap: no seccomp filter for this architecture: refusing to run the sandbox without "
      "it\n");
  sys::exit(126);
#endif
}

const char* env_value(char* const* envp, const char* name) {
  size_t n = len(name);
  for (; envp && *envp; ++envp) {
    const char* kv = *envp;
    size_t i = 0;
    while (i < n && kv[i] == name[i]) ++i;
    if (i == n && kv[n] == '=') return kv + n + 1;
  }
  return nullptr;
}

// A file without #! that the kernel will not run (ENOEXEC) runs under /bin/sh,
// as execvp does. Returns the error.
long exec_script(const char* file, char* const* argv, char* const* envp) {
  size_t argc = 0;
  while (argv[argc]) ++argc;
  auto** sh_argv = static_cast<char**>(sys::map((argc + 2) * sizeof(char*)));
  if (!sh_argv) return -ENOMEM;
  sh_argv[0] = const_cast<char*>("/bin/sh");
  sh_argv[1] = const_cast<char*>(file);
  for (size_t i = 1; i <= argc; ++i) sh_argv[i + 1] = argv[i];
  return sys::execve("/bin/sh", sh_argv, envp);
}

// execvp's search: a name with a slash is run as it is; else each entry of
// PATH (unset: /bin:/usr/bin; an empty entry: the working directory) in
// turn. Returns the error.
long exec_search(const char* file, char* const* argv, char* const* envp) {
  auto run = [&](const char* path) {
    long r = sys::execve(path, argv, envp);
    return r == -ENOEXEC ? exec_script(path, argv, envp) : r;
  };
  for (const char* s = file; *s; ++s)
    if (*s == '/') return run(file);
  const char* path = env_value(envp, "PATH");
  if (!path) path = "/bin:/usr/bin";
  size_t flen = len(file);
  bool eacces = false;
  long err = -ENOENT;
  char buf[8192];
  for (const char* p = path;;) {
    const char* end = p;
    while (*end && *end != ':') ++end;
    size_t dlen = static_cast<size_t>(end - p);
    if (dlen + flen + 2 <= sizeof buf) {
      char* q = buf;
      for (const char* d = p; d < end; ++d) *q++ = *d;
      if (dlen > 0) *q++ = '/';
      for (size_t i = 0; i <= flen; ++i) *q++ = file[i];
      long r = run(buf);
      switch (-r) {
        case EACCES:
          eacces = true;
          [[fallthrough]];
        case ENOENT:
        case ESTALE:
        case ENOTDIR:
        case ENODEV:
        case ETIMEDOUT:
          err = r;
          break;
        default:
          return r;
      }
    }
    if (!*end) break;
    p = end + 1;
  }
  return eacces ? -EACCES : err;
}

struct CommandArgs {
  const Options* o;
  int group;
  int filter_fd;
  const sys::CpuSet* start_cpus;  // the command's CPUs until K gives its own back; null: K's
};

// K's CPUs and the command's while it starts (K's less --spare-cpu).
sys::CpuSet g_own_cpus, g_start_cpus;

// The CPUs the command starts on: K's less `cpu`; false (no change) when K
// cannot say, `cpu` is not among them or it is the only one.
bool start_cpus_without(int cpu) {
  if (cpu < 0 || sys::getaffinity(&g_own_cpus) <= 0) return false;
  uint64_t bit = uint64_t{1} << (cpu % 64);
  if (!(g_own_cpus.bits[cpu / 64] & bit)) return false;
  g_start_cpus = g_own_cpus;
  g_start_cpus.bits[cpu / 64] &= ~bit;
  for (uint64_t w : g_start_cpus.bits)
    if (w) return true;
  return false;
}

// Every thread of every process below K gets K's CPUs back. Twice: a thread
// started by one not yet given them back could be missed by the first walk.
void give_cpus_back() {
  int32_t self = static_cast<int32_t>(sys::getpid());
  char path[64];
  for (int round = 0; round < 2; ++round) {
    int n = collect(self, g_found, static_cast<int>(sizeof g_found / sizeof g_found[0]));
    for (int i = 0; i < n; ++i) {
      char* e = put_str(put_int(put_str(path, "/proc/"), g_found[i]), "/task");
      *e = '\0';
      long dir = sys::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir < 0) continue;
      long got;
      while ((got = sys::getdents(static_cast<int>(dir), g_dirbuf, sizeof g_dirbuf)) > 0) {
        for (long off = 0; off < got;) {
          const char* rec = g_dirbuf + off;  // struct linux_dirent64, as in collect()
          uint16_t reclen;
          __builtin_memcpy(&reclen, rec + 16, sizeof reclen);
          off += reclen;
          if (rec[19] >= '0' && rec[19] <= '9')
            sys::setaffinity(static_cast<int>(to_int(rec + 19)), &g_own_cpus);
        }
      }
      sys::close(static_cast<int>(dir));
    }
  }
}

// The command's side of the vfork-style clone: it shares the keeper's memory
// until execve, so it only makes system calls and never returns. Not
// instrumented by AddressSanitizer, which takes the switch to that stack for a
// stack overflow.
__attribute__((no_sanitize("address"))) int run_command(void* arg) {
  const CommandArgs& a = *static_cast<const CommandArgs*>(arg);
  const Options& o = *a.o;
  sys::setpgid(0, a.group);
  uint64_t none = 0;
  sys::sigmask(SIG_SETMASK, &none);
  if (a.start_cpus) sys::setaffinity(0, a.start_cpus);  // best effort: it only spares a CPU
  if (a.filter_fd >= 0) {
    // dup3 onto itself fails: then clear close-on-exec.
    long r = a.filter_fd == o.seccomp_fd ? sys::fcntl(a.filter_fd, F_SETFD, 0)
                                         : sys::dup_to(a.filter_fd, o.seccomp_fd);
    if (r < 0) sys::exit(126);
  }
  close_from_3(o.seccomp_fd);
  long err = exec_search(o.exec_path ? o.exec_path : o.argv[0], o.argv, g_envp);
  char buf[40];
  say("flemma: cannot run `", o.argv[0], "`: ", error_text(static_cast<int>(-err), buf), "\n");
  sys::exit(err == -ENOENT ? 127 : 126);
}

alignas(16) char g_command_stack[64 * 1024];

// --spare-cpu in K: until when the command is kept off the CPU.
struct Spare {
  bool on = false;
  int64_t until = 0;
  // A poll timeout (-1: none) that ends no later than the spare does.
  int timeout(int t) const {
    if (!on) return t;
    int64_t left = until - sys::now_ms();
    int spare = static_cast<int>(left < 0 ? 0 : left > 3600000 ? 3600000 : left);
    return (t < 0 || t > spare) ? spare : t;
  }
  // After the poll: over (SIGURG set until to 0, or the time passed)?
  void check() {
    if (on && sys::now_ms() >= until) {
      on = false;
      give_cpus_back();
    }
  }
};

[[noreturn]] void keeper(const Options& o, int group, int host, int status_fd) {
  sys::setpgid(0, 0);  // out of R's group: the manager's SIGKILL to it must not end us first
  sys::prctl(PR_SET_CHILD_SUBREAPER, 1);
  long host_fd = sys::pidfd_open(host);
  long sfd = sys::signalfd(&kWatched, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die(125, "signalfd", sfd);
  Spare spare{start_cpus_without(o.spare_cpu), sys::now_ms() + o.spare_ms};
  CommandArgs args{&o, group, o.seccomp_fd >= 0 ? seccomp_memfd() : -1,
                   spare.on ? &g_start_cpus : nullptr};
  // Like vfork (the keeper waits until the command's execve): no copy of the
  // keeper's page tables and no copy-on-write faults, the costly part of
  // starting a command. The command runs on a stack of its own.
  long c = sys::clone_vfork(run_command, g_command_stack + sizeof g_command_stack, &args);
  if (c < 0) die(125, "clone", c);
  if (args.filter_fd >= 0) sys::close(args.filter_fd);
  // Hold none of the command's pipes: the manager sees EOF when the command's
  // own processes close them.
  long null = sys::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; ++fd)
      if (fd != null) sys::dup_to(static_cast<int>(null), fd);
    if (null > 2) sys::close(static_cast<int>(null));
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
    fds[n++] = {static_cast<int>(sfd), POLLIN, 0};
    int status_i = -1, host_i = -1;
    if (status_fd >= 0) {
      status_i = n;
      fds[n++] = {status_fd, 0, 0};  // POLLERR once R is gone
    }
    if (host_fd >= 0 && !killed) {
      host_i = n;
      fds[n++] = {static_cast<int>(host_fd), POLLIN, 0};
    }
    int timeout = -1;
    if (terminating && !killed) {
      int64_t left = deadline - sys::now_ms();
      timeout = static_cast<int>(left < 0 ? 0 : left);
    }
    if (host_fd < 0 && !killed) timeout = (timeout < 0 || timeout > 500) ? 500 : timeout;
    long r = sys::poll(fds, n, spare.timeout(timeout));
    if (r < 0 && r != -EINTR) die(125, "poll", r);
    signalfd_siginfo si;
    bool chld = false;
    while (sys::read(static_cast<int>(sfd), &si, sizeof si) == static_cast<long>(sizeof si)) {
      if (si.ssi_signo == SIGCHLD) {
        chld = true;
      } else if (si.ssi_signo == SIGURG) {
        spare.until = 0;  // the command has started: its CPUs back, below
      } else if (!terminating) {
        terminating = true;
        // The manager's own SIGKILL (which ends R, so we kill the tree) comes
        // after the grace period; this is the backstop.
        deadline = sys::now_ms() + o.grace_ms + 500;
        kill_tree(SIGTERM);
      }
    }
    if (status_i >= 0 && (fds[status_i].revents & (POLLERR | POLLHUP))) {
      // R ended before the command's status was passed on: killed by the manager.
      sys::close(status_fd);
      status_fd = -1;
      kill_now();
    }
    if (host_i >= 0 && (fds[host_i].revents & POLLIN)) kill_now();
    if (host_fd < 0 && sys::kill(host, 0) == -ESRCH) kill_now();
    if (terminating && sys::now_ms() >= deadline) kill_now();
    spare.check();
    if (chld || r == 0) {
      for (;;) {
        int st = 0;
        long w = sys::wait_any(&st);
        if (w > 0) {
          if (w == c) {
            c_done = true;
            if (status_fd >= 0) {
              int32_t v = st;
              long wr;
              do wr = sys::write(status_fd, &v, sizeof v);
              while (wr == -EINTR);
              sys::close(status_fd);
              status_fd = -1;
            }
          }
          continue;
        }
        if (w == -ECHILD && c_done) sys::exit(0);
        break;
      }
    }
  }
}

// Ends this process the way the command ended.
[[noreturn]] void mirror(int status) {
  int low = status & 0x7f;
  if (low == 0) sys::exit((status >> 8) & 0xff);  // exited
  if (low != 0x7f) {                              // killed by signal `low`
    sys::no_core();
    sys::default_action(low);
    uint64_t s = sig_bit(low);
    sys::sigmask(SIG_UNBLOCK, &s);
    sys::kill(static_cast<int>(sys::getpid()), low);
    sys::exit(128 + low);
  }
  sys::exit(125);
}

int reap_main(int argc, char** argv) {
  Options o = parse(argc, argv);
  int host = static_cast<int>(sys::getppid());
  // Neovim gone before we even started (or killed later): R goes too, and K
  // sees it.
  sys::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (sys::getppid() != host) sys::exit(125);
  sys::sigmask(SIG_BLOCK, &kWatched);
  int st[2];
  if (long e = sys::pipe2(st, O_CLOEXEC); e < 0) die(125, "pipe", e);
  int group = static_cast<int>(sys::getpgrp());
  long k = sys::fork();
  if (k < 0) die(125, "fork", k);
  if (k == 0) {
    sys::close(st[0]);
    keeper(o, group, host, st[1]);
  }
  sys::close(st[1]);
  long sfd = sys::signalfd(&kWatched, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die(125, "signalfd", sfd);
  for (;;) {
    pollfd fds[2] = {{st[0], POLLIN, 0}, {static_cast<int>(sfd), POLLIN, 0}};
    long r = sys::poll(fds, 2, -1);
    if (r < 0 && r != -EINTR) die(125, "poll", r);
    signalfd_siginfo si;
    while (sys::read(static_cast<int>(sfd), &si, sizeof si) == static_cast<long>(sizeof si)) {
      if (si.ssi_signo == SIGURG) {
        sys::kill(static_cast<int>(k), SIGURG);  // the command has started (--spare-cpu)
      } else if (si.ssi_signo != SIGCHLD) {
        sys::kill(static_cast<int>(k), SIGTERM);
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      int32_t v = 0;
      long n;
      do n = sys::read(st[0], &v, sizeof v);
      while (n == -EINTR);
      if (n == static_cast<long>(sizeof v)) mirror(v);
      say("flemma-reap: the keeper process ended before the command\n");
      sys::exit(125);
    }
  }
}

}  // namespace

#if defined(FLEMMA_REAP_FREESTANDING)
// What the compiler may call for copies and zeroing.
extern "C" {
__attribute__((used)) void* memcpy(void* d, const void* s, size_t n) {
  auto* dp = static_cast<unsigned char*>(d);
  auto* sp = static_cast<const unsigned char*>(s);
  while (n--) *dp++ = *sp++;
  return d;
}
__attribute__((used)) void* memmove(void* d, const void* s, size_t n) {
  auto* dp = static_cast<unsigned char*>(d);
  auto* sp = static_cast<const unsigned char*>(s);
  if (dp < sp) {
    while (n--) *dp++ = *sp++;
  } else {
    while (n--) dp[n] = sp[n];
  }
  return d;
}
__attribute__((used)) void* memset(void* d, int c, size_t n) {
  auto* dp = static_cast<unsigned char*>(d);
  while (n--) *dp++ = static_cast<unsigned char>(c);
  return d;
}
__attribute__((used)) int memcmp(const void* a, const void* b, size_t n) {
  auto* ap = static_cast<const unsigned char*>(a);
  auto* bp = static_cast<const unsigned char*>(b);
  for (; n--; ++ap, ++bp)
    if (*ap != *bp) return *ap < *bp ? -1 : 1;
  return 0;
}

// The entry point: the stack holds argc, argv..., 0, envp..., 0.
__attribute__((used, noreturn)) void flemma_reap_start(long* sp) {
  int argc = static_cast<int>(sp[0]);
  char** argv = reinterpret_cast<char**>(sp + 1);
  g_envp = argv + argc + 1;
  sys::exit(reap_main(argc, argv));
}
}
asm(".text\n"
    ".global _start\n"
    ".type _start, @function\n"
    "_start:\n\t"
    "xor %ebp, %ebp\n\t"
    "mov %rsp, %rdi\n\t"
    "and $-16, %rsp\n\t"
    "call flemma_reap_start\n\t"
    "hlt\n");
#else
int main(int argc, char** argv) {
  g_envp = environ;
  return reap_main(argc, argv);
}
#endif
