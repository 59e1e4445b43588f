// The seccomp program of seccomp.hpp built into a fixed array, with no
// allocation and no standard library: flemma-reap, which hands it to bwrap,
// is built without a C library on x86_64 (native/reaper/).
#pragma once

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <asm/unistd.h>

#include <stddef.h>
#include <stdint.h>

#define FLEMMA_SECCOMP_FILTER 1

namespace flemma::seccomp {

constexpr size_t kMaxFilter = 64;

// Writes the program into out; returns its length in records.
inline size_t build_filter(sock_filter (&out)[kMaxFilter]) {
  // Offsets into struct seccomp_data (args[0]: its low 32 bits on these
  // little-endian machines).
  constexpr uint32_t kNr = offsetof(struct seccomp_data, nr);
  constexpr uint32_t kArch = offsetof(struct seccomp_data, arch);
  constexpr uint32_t kArg0 = offsetof(struct seccomp_data, args);
  constexpr uint32_t kAllow = SECCOMP_RET_ALLOW;
  constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | (1 /* EPERM */ & SECCOMP_RET_DATA);
  // A system call of an architecture the filter does not describe: refused.
  constexpr uint32_t kUnknownArch = SECCOMP_RET_KILL_PROCESS;
  constexpr uint32_t kAfUnix = 1;
  // io_uring_setup, io_uring_enter, io_uring_register: the same numbers on
  // every architecture (they came after the tables were unified).
  constexpr uint32_t kIoUring[] = {425, 426, 427};

  // One architecture's block: the socket numbers whose domain is checked and
  // the socketcall number whose SYS_SOCKET call is refused (0: none).
  struct Arch {
    uint32_t audit_arch;
    uint32_t socket_nrs[2];
    size_t n_socket_nrs;
    uint32_t socketcall_nr;
  };
#if defined(__x86_64__)
  // x32 calls carry bit 30 in the number; 32-bit programs use the i386 table.
  const Arch arches[] = {
      {AUDIT_ARCH_X86_64, {static_cast<uint32_t>(__NR_socket), 0x40000000u | 41u}, 2, 0},
      {AUDIT_ARCH_I386, {359, 0}, 1, 102}};
#else
  const Arch arches[] = {{AUDIT_ARCH_AARCH64, {static_cast<uint32_t>(__NR_socket), 0}, 1, 0},
                         {AUDIT_ARCH_ARM, {281, 0}, 1, 0}};
#endif
  size_t n = 0;
  auto stmt = [&](uint16_t code, uint32_t k) { out[n++] = sock_filter{code, 0, 0, k}; };
  // Jump targets are filled in later (offsets relative to the next instruction).
  auto jeq = [&](uint32_t k) {
    out[n] = sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0, 0, k};
    return n++;
  };
  auto target_true = [&](size_t at, size_t dest) {
    out[at].jt = static_cast<uint8_t>(dest - at - 1);
  };
  auto target_false = [&](size_t at, size_t dest) {
    out[at].jf = static_cast<uint8_t>(dest - at - 1);
  };
  size_t to_deny[8], to_check[4];
  size_t n_deny = 0, n_check = 0;
  size_t arch_miss = 0;
  bool has_miss = false;
  for (const Arch& a : arches) {
    if (has_miss) target_false(arch_miss, n);
    stmt(BPF_LD | BPF_W | BPF_ABS, kArch);
    arch_miss = jeq(a.audit_arch);
    has_miss = true;
    stmt(BPF_LD | BPF_W | BPF_ABS, kNr);
    for (size_t i = 0; i < a.n_socket_nrs; ++i) to_check[n_check++] = jeq(a.socket_nrs[i]);
    for (uint32_t nr : kIoUring) to_deny[n_deny++] = jeq(nr);
    if (a.socketcall_nr != 0) {
      size_t sc = jeq(a.socketcall_nr);
      // Not socketcall: allow.
      stmt(BPF_RET | BPF_K, kAllow);
      target_true(sc, n);
      // socketcall(SYS_SOCKET, args): the domain is behind a pointer, so every
      // SYS_SOCKET call of a 32-bit program that still uses socketcall is refused.
      stmt(BPF_LD | BPF_W | BPF_ABS, kArg0);
      to_deny[n_deny++] = jeq(1 /* SYS_SOCKET */);
    }
    stmt(BPF_RET | BPF_K, kAllow);
  }
  // No architecture matched.
  target_false(arch_miss, n);
  stmt(BPF_RET | BPF_K, kUnknownArch);
  // socket(domain, ...): refuse AF_UNIX.
  size_t check = n;
  stmt(BPF_LD | BPF_W | BPF_ABS, kArg0);
  size_t is_unix = jeq(kAfUnix);
  stmt(BPF_RET | BPF_K, kAllow);
  size_t deny = n;
  stmt(BPF_RET | BPF_K, kDeny);
  target_true(is_unix, deny);
  for (size_t i = 0; i < n_check; ++i) target_true(to_check[i], check);
  for (size_t i = 0; i < n_deny; ++i) target_true(to_deny[i], deny);
  // Every conditional jump whose false branch was left at 0 falls through, as meant.
  return n;
}

}  // namespace flemma::seccomp
#endif
