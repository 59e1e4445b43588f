#include "seccomp.hpp"

#if defined(__linux__)
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <vector>
#endif

namespace flemma::seccomp {

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))

namespace {

// Offsets into struct seccomp_data.
constexpr uint32_t kNr = offsetof(struct seccomp_data, nr);
constexpr uint32_t kArch = offsetof(struct seccomp_data, arch);
// The low 32 bits of args[0] (little-endian machines only: both arches here).
constexpr uint32_t kArg0 = offsetof(struct seccomp_data, args);

constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
// A system call of an architecture the filter does not describe: refused.
constexpr uint32_t kUnknownArch = SECCOMP_RET_KILL_PROCESS;

// io_uring_setup, io_uring_enter, io_uring_register: the same numbers on
// every architecture (they came after the tables were unified).
constexpr uint32_t kIoUring[] = {425, 426, 427};

struct Builder {
  std::vector<sock_filter> prog;
  void stmt(uint16_t code, uint32_t k) { prog.push_back(sock_filter{code, 0, 0, k}); }
  // Jump targets are filled in by the caller (offsets relative to the next instruction).
  size_t jeq(uint32_t k) {
    prog.push_back(sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0, 0, k});
    return prog.size() - 1;
  }
  void target_true(size_t at, size_t dest) { prog[at].jt = static_cast<uint8_t>(dest - at - 1); }
  void target_false(size_t at, size_t dest) { prog[at].jf = static_cast<uint8_t>(dest - at - 1); }
};

// One architecture's block: the socket numbers whose domain is checked and
// the socketcall number whose SYS_SOCKET call is refused (0: none).
struct ArchSpec {
  uint32_t audit_arch;
  std::vector<uint32_t> socket_nrs;
  uint32_t socketcall_nr;  // 0: not on this architecture
};

}  // namespace

std::string deny_unix_sockets_program() {
  std::vector<ArchSpec> arches;
#if defined(__x86_64__)
  // x32 calls carry bit 30 in the number; 32-bit programs use the i386 table.
  arches.push_back({AUDIT_ARCH_X86_64, {static_cast<uint32_t>(__NR_socket), 0x40000000u | 41u}, 0});
  arches.push_back({AUDIT_ARCH_I386, {359}, 102});
#elif defined(__aarch64__)
  arches.push_back({AUDIT_ARCH_AARCH64, {static_cast<uint32_t>(__NR_socket)}, 0});
  arches.push_back({AUDIT_ARCH_ARM, {281}, 0});
#endif
  Builder b;
  std::vector<size_t> to_deny, to_checkdomain, arch_miss;
  for (size_t i = 0; i < arches.size(); ++i) {
    const auto& a = arches[i];
    size_t start = b.prog.size();
    for (size_t m : arch_miss) b.target_false(m, start);
    arch_miss.clear();
    b.stmt(BPF_LD | BPF_W | BPF_ABS, kArch);
    arch_miss.push_back(b.jeq(a.audit_arch));
    b.stmt(BPF_LD | BPF_W | BPF_ABS, kNr);
    for (uint32_t nr : a.socket_nrs) to_checkdomain.push_back(b.jeq(nr));
    for (uint32_t nr : kIoUring) to_deny.push_back(b.jeq(nr));
    if (a.socketcall_nr != 0) {
      size_t sc = b.jeq(a.socketcall_nr);
      // Not socketcall: allow.
      b.stmt(BPF_RET | BPF_K, kAllow);
      b.target_true(sc, b.prog.size());
      // socketcall(SYS_SOCKET, args): the domain is behind a pointer, so every
      // SYS_SOCKET call of a 32-bit program that still uses socketcall is refused.
      b.stmt(BPF_LD | BPF_W | BPF_ABS, kArg0);
      to_deny.push_back(b.jeq(1 /* SYS_SOCKET */));
      b.stmt(BPF_RET | BPF_K, kAllow);
    } else {
      b.stmt(BPF_RET | BPF_K, kAllow);
    }
  }
  // No architecture matched.
  size_t unknown = b.prog.size();
  for (size_t m : arch_miss) b.target_false(m, unknown);
  b.stmt(BPF_RET | BPF_K, kUnknownArch);
  // socket(domain, ...): refuse AF_UNIX.
  size_t check = b.prog.size();
  b.stmt(BPF_LD | BPF_W | BPF_ABS, kArg0);
  size_t is_unix = b.jeq(AF_UNIX);
  b.stmt(BPF_RET | BPF_K, kAllow);
  size_t deny = b.prog.size();
  b.stmt(BPF_RET | BPF_K, kDeny);
  b.target_true(is_unix, deny);
  for (size_t j : to_checkdomain) b.target_true(j, check);
  for (size_t j : to_deny) b.target_true(j, deny);
  // Every conditional jump whose false branch was left at 0 falls through, as meant.
  return std::string(reinterpret_cast<const char*>(b.prog.data()), b.prog.size() * sizeof(sock_filter));
}

#else

std::string deny_unix_sockets_program() { return {}; }

#endif

}  // namespace flemma::seccomp
