// A classic BPF seccomp program for the sandbox: socket(AF_UNIX, ...) fails
// with EPERM (no Unix socket of the host can be reached by path or abstract
// name), and io_uring, which could create sockets without the socket syscall,
// is refused too. socketpair stays allowed (libuv and Node use it for stdio).
#pragma once

#include <cstdint>
#include <string>

namespace flemma::seccomp {

// The program as raw `struct sock_filter` records, in the byte order of this
// machine (what bwrap --seccomp FD reads). Empty on an architecture the
// filter does not know: the caller then runs without it.
std::string deny_unix_sockets_program();

}  // namespace flemma::seccomp
