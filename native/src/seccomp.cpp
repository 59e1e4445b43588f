#include "seccomp.hpp"

#include "seccomp_filter.hpp"

namespace flemma::seccomp {

#if defined(FLEMMA_SECCOMP_FILTER)

std::string deny_unix_sockets_program() {
  sock_filter prog[kMaxFilter];
  size_t n = build_filter(prog);
  return std::string(reinterpret_cast<const char*>(prog), n * sizeof(sock_filter));
}

#else

std::string deny_unix_sockets_program() { return {}; }

#endif

}  // namespace flemma::seccomp
