// C ABI of the sandbox.
#include <cstring>
#include <string>
#include <vector>

#include "flemma/flemma.h"
#include "guard.hpp"
#include "sandbox.hpp"

struct flemma_sandbox_policy {
  flemma::sandbox::Policy policy;
};

namespace {

struct StrvBox {
  flemma_strv pub{};
  std::vector<std::string> strings;
  std::vector<const char*> ptrs;
};

std::string need_cwd(const char* cwd) {
  if (!cwd || cwd[0] != '/')
    throw flemma::Error(FLEMMA_E_INVALID, "sandbox: cwd should be an absolute path");
  return cwd;
}

const flemma::sandbox::Policy& need(const flemma_sandbox_policy* p) {
  if (!p) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: policy is NULL");
  return p->policy;
}

}  // namespace

extern "C" {

// Caller owns the policy: flemma_sandbox_policy_free.
FLEMMA_API flemma_sandbox_policy* flemma_sandbox_policy_new(int network) {
  return flemma::guard_ptr([&] {
    auto* p = new flemma_sandbox_policy();
    p->policy.network = network != 0;
    return p;
  });
}

// Takes ownership of policy. NULL is a no-op.
FLEMMA_API void flemma_sandbox_policy_free(flemma_sandbox_policy* policy) { delete policy; }

// path is copied.
FLEMMA_API int flemma_sandbox_policy_add_root(flemma_sandbox_policy* policy, const char* path) {
  return flemma::guard([&] {
    if (!policy) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: policy is NULL");
    if (!path || !*path)
      throw flemma::Error(FLEMMA_E_INVALID, "sandbox: a writable root should be a non-empty path");
    policy->policy.rw_paths.emplace_back(path);
    return FLEMMA_OK;
  });
}

// path is copied.
FLEMMA_API int flemma_sandbox_policy_deny_read(flemma_sandbox_policy* policy, const char* path) {
  return flemma::guard([&] {
    if (!policy) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: policy is NULL");
    if (!path || !*path)
      throw flemma::Error(FLEMMA_E_INVALID, "sandbox: a path to hide should be a non-empty path");
    policy->policy.deny_read.emplace_back(path);
    return FLEMMA_OK;
  });
}

// Borrows everything for the duration of the call.
FLEMMA_API int flemma_sandbox_is_path_writable(const flemma_sandbox_policy* policy,
                                               const char* path, const char* cwd) {
  return flemma::guard([&] {
    const auto& p = need(policy);
    if (!path) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: path is NULL");
    return flemma::sandbox::is_path_writable(path, p, need_cwd(cwd)) ? 1 : 0;
  });
}

// Borrows everything for the duration of the call.
FLEMMA_API int flemma_sandbox_write_file(const flemma_sandbox_policy* policy, const char* path,
                                         const char* cwd, const char* data, size_t len) {
  return flemma::guard([&] {
    const auto& p = need(policy);
    if (!path) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: path is NULL");
    if (!data && len > 0) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: data is NULL");
    flemma::sandbox::write_file(path, p, need_cwd(cwd), std::string(data ? data : "", len));
    return FLEMMA_OK;
  });
}

// Caller owns the result: flemma_strv_free.
FLEMMA_API flemma_strv* flemma_sandbox_wrap(const flemma_sandbox_policy* policy, int backend,
                                            const char* const* argv, const char* cwd,
                                            const char* program) {
  return flemma::guard_ptr([&]() -> flemma_strv* {
    const auto& p = need(policy);
    if (backend != 1 && backend != 2)
      throw flemma::Error(FLEMMA_E_INVALID,
                          "sandbox: backend should be 1 (bwrap) or 2 (sandbox-exec)");
    std::vector<std::string> cmd;
    if (argv)
      for (const char* const* a = argv; *a; ++a) cmd.emplace_back(*a);
    auto* box = new StrvBox();
    try {
      box->strings = flemma::sandbox::wrap(static_cast<flemma::sandbox::Backend>(backend), p, cmd,
                                           need_cwd(cwd), program ? program : "");
    } catch (...) {
      delete box;
      throw;
    }
    for (auto& s : box->strings) box->ptrs.push_back(s.c_str());
    box->pub.items = box->ptrs.data();
    box->pub.count = box->ptrs.size();
    static_assert(offsetof(StrvBox, pub) == 0);
    return &box->pub;
  });
}

// The caller owns buf.
FLEMMA_API int flemma_sandbox_resolve(const char* path, const char* cwd, char* buf, size_t cap) {
  return flemma::guard([&] {
    if (!path) throw flemma::Error(FLEMMA_E_INVALID, "sandbox: path is NULL");
    std::string s = flemma::sandbox::resolve(path, need_cwd(cwd));
    if (buf && cap > 0) {
      size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
      std::memcpy(buf, s.data(), n);
      buf[n] = '\0';
    }
    return static_cast<int>(s.size());
  });
}

// Takes ownership of list. NULL is a no-op.
FLEMMA_API void flemma_strv_free(flemma_strv* list) { delete reinterpret_cast<StrvBox*>(list); }

}  // extern "C"
