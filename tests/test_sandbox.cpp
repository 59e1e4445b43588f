#include <doctest/doctest.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#endif

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <string>

#include "flemma/flemma.h"
#include "reaper.hpp"
#include "sandbox.hpp"
#include "seccomp.hpp"

namespace sb = flemma::sandbox;
namespace fs = std::filesystem;

TEST_CASE("sandbox") {
  char tmpl[] = "/tmp/flemma-sandbox-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  std::string dir = fs::canonical(tmpl).string();
  fs::create_directories(dir + "/root/.git/hooks");
  std::ofstream(dir + "/root/.git/config") << "[core]\n";
  fs::create_directories(dir + "/outside");
  fs::create_directory_symlink(dir + "/outside", dir + "/root/link");
  sb::Policy policy{{dir + "/root", dir + "/missing"}, false, {}};

  SUBCASE("resolve folds `..` and follows symlinks of the existing prefix") {
    CHECK(sb::resolve("a/../b", dir) == dir + "/b");
    CHECK(sb::resolve(dir + "/root/link/new/file", "/") == dir + "/outside/new/file");
    CHECK(sb::resolve(dir + "/root/link/../x", "/") == dir + "/x");
    CHECK(sb::resolve("/", "/") == "/");
  }
  SUBCASE("resolve follows a dangling symlink to where a write through it would land") {
    fs::create_symlink("/etc/flemma-no-such-file", dir + "/root/dangling");
    fs::create_symlink("dangling", dir + "/root/chain");
    fs::create_symlink("../outside/new", dir + "/root/relative");
    CHECK(sb::resolve(dir + "/root/dangling", "/") == "/etc/flemma-no-such-file");
    CHECK(sb::resolve(dir + "/root/chain", "/") == "/etc/flemma-no-such-file");
    CHECK(sb::resolve(dir + "/root/relative", "/") == dir + "/outside/new");
    CHECK_FALSE(sb::is_path_writable(dir + "/root/dangling", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/chain", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/relative", policy, "/"));
    fs::create_symlink(".git/hooks/pre-commit", dir + "/root/to-hook");
    CHECK_FALSE(sb::is_path_writable(dir + "/root/to-hook", policy, "/"));
    fs::create_symlink("loop-b", dir + "/root/loop-a");
    fs::create_symlink("loop-a", dir + "/root/loop-b");
    CHECK(sb::resolve(dir + "/root/loop-a", "/").rfind(dir + "/root/loop-", 0) == 0);  // terminates
  }
  SUBCASE("is_path_writable keeps writes inside the roots and out of protected paths") {
    CHECK(sb::is_path_writable("root/file", policy, dir));
    CHECK(sb::is_path_writable(dir + "/root/new/deep/file", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/link/file", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/../outside/file", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/.git/hooks/pre-push", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/.git/config", policy, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/root/.zshrc", policy, "/"));
    CHECK_FALSE(sb::is_path_writable("/etc/hosts", policy, "/"));
    CHECK_FALSE(sb::is_path_writable("", policy, "/"));
  }
  SUBCASE("bwrap arguments bind the existing roots and protect their hooks and config") {
    auto a = sb::wrap(sb::Backend::Bwrap, policy, {"echo", "hi"}, dir, "");
    std::string joined;
    for (auto& s : a) joined += s + " ";
    // flemma-reap hands bwrap its seccomp filter on fd 3.
    CHECK(a.front() == flemma::reaper::path());
    CHECK(joined.rfind(flemma::reaper::path() +
                           " --seccomp-fd 3 -- bwrap --ro-bind / / --dev /dev --proc /proc ",
                       0) == 0);
    // The root is in /tmp: /tmp gets a fresh tmpfs, the root is bound back.
    CHECK(joined.find("--tmpfs /tmp ") != std::string::npos);
    CHECK(joined.find("--tmpfs /tmp ") < joined.find("--bind " + dir + "/root " + dir + "/root "));
    CHECK(joined.find("--ro-bind " + dir + "/root/.git/hooks ") != std::string::npos);
    CHECK(joined.find("--ro-bind " + dir + "/root/.git/config ") != std::string::npos);
    CHECK(joined.find("missing") == std::string::npos);
    CHECK(joined.find("--tmpfs " + dir) == std::string::npos);  // hooks exist: a plain ro-bind
    CHECK(joined.find("--unshare-user --cap-drop ALL --unshare-pid --die-with-parent --new-session "
                      "--seccomp 3 "
                      "--unshare-net -- echo hi") != std::string::npos);
    policy.network = true;
    auto b = sb::wrap(sb::Backend::Bwrap, policy, {"true"}, dir, "/usr/bin/bwrap");
    CHECK(b[4] == "/usr/bin/bwrap");
    CHECK(std::find(b.begin(), b.end(), "--unshare-net") == b.end());
  }
  SUBCASE("a repository's hooks and config are protected, its submodules' and nested ones' too") {
    CHECK(sb::git_protected("/.git/hooks/pre-commit"));
    CHECK(sb::git_protected("/.git/config"));
    CHECK(sb::git_protected("/.git/modules/a/b/hooks/x"));
    CHECK(sb::git_protected("/.git/modules/a/config"));
    CHECK(sb::git_protected("/vendor/x/.git/config"));
    CHECK(sb::git_protected("/lib/.git"));
    CHECK_FALSE(sb::git_protected("/.git/HEAD"));
    CHECK_FALSE(sb::git_protected("/.git/modules/a/HEAD"));
    CHECK_FALSE(sb::git_protected("/src/config"));
    fs::create_directories(dir + "/root/.git/modules/sub/hooks");
    std::ofstream(dir + "/root/.git/modules/sub/HEAD") << "ref: x\n";
    fs::create_directories(dir + "/root/deep/er/.git");
    auto a = sb::bwrap_args(policy, dir);
    std::string joined;
    for (auto& x : a) joined += x + " ";
    CHECK(joined.find("--ro-bind " + dir + "/root/.git/modules/sub/hooks ") != std::string::npos);
    CHECK(joined.find("--ro-bind /dev/null " + dir + "/root/.git/modules/sub/config ") !=
          std::string::npos);
    CHECK(joined.find("--tmpfs " + dir + "/root/deep/er/.git/hooks --remount-ro") !=
          std::string::npos);
    CHECK(joined.find("--bind " + dir + "/root/deep/er/.git " + dir + "/root/deep/er/.git ") !=
          std::string::npos);
  }
  SUBCASE("$HOME is never a root: it stands for its entries that are not hidden") {
    std::string saved = std::getenv("HOME") ? std::getenv("HOME") : "";
    fs::create_directories(dir + "/home/.ssh");
    fs::create_directories(dir + "/home/work");
    ::setenv("HOME", (dir + "/home").c_str(), 1);
    sb::Policy h{{dir + "/home"}, true, {}};
    auto roots = sb::existing_roots(h, "/");
    CHECK(roots == std::vector<std::string>{dir + "/home/work"});
    CHECK(sb::existing_roots(sb::Policy{{dir}, true, {}}, "/").empty());  // contains $HOME: dropped
    CHECK_FALSE(sb::is_path_writable(dir + "/home/.ssh/authorized_keys", h, "/"));
    CHECK_FALSE(sb::is_path_writable(dir + "/home/.bashrc", h, "/"));
    CHECK(sb::is_path_writable(dir + "/home/work/x", h, "/"));
    sb::Policy cfg{{dir + "/home/.config"}, true, {}};
    fs::create_directories(dir + "/home/.config");
    CHECK_FALSE(sb::is_path_writable(dir + "/home/.config/nvim/init.lua", cfg, "/"));
    CHECK(sb::is_path_writable(dir + "/home/.config/other", cfg, "/"));
    if (saved.empty())
      ::unsetenv("HOME");
    else
      ::setenv("HOME", saved.c_str(), 1);
  }
  SUBCASE("write_file writes beneath the roots, with openat2 and without it") {
    auto read = [](const std::string& p) {
      std::ifstream f(p);
      return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    };
    sb::write_file(dir + "/root/a/b/new.txt", policy, "/", "one");
    CHECK(read(dir + "/root/a/b/new.txt") == "one");
    CHECK((fs::status(dir + "/root/a/b/new.txt").permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
           fs::perms::others_read));
    fs::permissions(dir + "/root/a/b/new.txt", fs::perms::owner_read | fs::perms::owner_write);
    sb::write_file("root/a/b/new.txt", policy, dir, "two");
    CHECK(read(dir + "/root/a/b/new.txt") == "two");
    CHECK((fs::status(dir + "/root/a/b/new.txt").permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
    CHECK_THROWS(sb::write_file(dir + "/outside/x", policy, "/", "x"));
    CHECK_THROWS(
        sb::write_file(dir + "/root/link/x", policy, "/", "x"));  // a symlink out of the root
    CHECK_THROWS(sb::write_file(dir + "/root/.git/config", policy, "/", "x"));
    CHECK_THROWS(sb::write_file(dir + "/root/a", policy, "/", "x"));  // a directory
    CHECK_FALSE(fs::exists(dir + "/outside/x"));
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
    // A kernel without openat2 (ENOSYS): the O_NOFOLLOW walk does the same.
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      sock_filter prog[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 437 /* openat2 */, 0, 1),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      };
      sock_fprog fprog{static_cast<unsigned short>(sizeof prog / sizeof prog[0]), prog};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)
        ::_exit(2);
      try {
        sb::write_file(dir + "/root/c/d/walked.txt", policy, "/", "walked");
        sb::write_file(dir + "/root/c/d/walked.txt", policy, "/", "again");
      } catch (...) {
        ::_exit(3);
      }
      try {
        sb::write_file(dir + "/root/link/y", policy, "/", "x");
        ::_exit(4);
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(read(dir + "/root/c/d/walked.txt") == "again");
    CHECK_FALSE(fs::exists(dir + "/outside/y"));
#endif
  }
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
  SUBCASE("the seccomp program refuses socket(AF_UNIX) only") {
    std::string prog = flemma::seccomp::deny_unix_sockets_program();
    REQUIRE(prog.size() % sizeof(sock_filter) == 0);
    REQUIRE_FALSE(prog.empty());
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      sock_fprog fprog{static_cast<unsigned short>(prog.size() / sizeof(sock_filter)),
                       reinterpret_cast<sock_filter*>(prog.data())};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)
        ::_exit(2);
      errno = 0;
      if (::socket(AF_UNIX, SOCK_STREAM, 0) >= 0 || errno != EPERM) ::_exit(3);
      if (::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0) >= 0) ::_exit(4);
      int inet = ::socket(AF_INET, SOCK_STREAM, 0);
      if (inet < 0) ::_exit(5);
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) ::_exit(6);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
#endif
  SUBCASE("the sandbox-exec profile denies writes except in the roots") {
    std::string p = sb::seatbelt_profile(policy, dir);
    CHECK(p.rfind("(version 1)\n(allow default)\n(deny file-write*)\n", 0) == 0);
    CHECK(p.find("(subpath \"" + dir + "/root\")") != std::string::npos);
    CHECK(p.find("(subpath \"" + dir + "/root/.git/hooks\")") != std::string::npos);
    CHECK(p.find("(literal \"" + dir + "/root/.git/config\")") != std::string::npos);
    CHECK(p.find("(deny network*)") != std::string::npos);
    CHECK(p.find("(deny network* (remote unix-socket))") != std::string::npos);
    CHECK(p.find("(allow network") == std::string::npos);
    sb::Policy q{{"/tmp/we\"ird"}, true, {}};
    fs::create_directories("/tmp/we\"ird");
    CHECK(sb::seatbelt_profile(q, "/").find("(subpath \"/tmp/we\\\"ird\")") != std::string::npos);
    CHECK(sb::seatbelt_profile(q, "/").find("network") == std::string::npos);
    fs::remove("/tmp/we\"ird");
  }
  SUBCASE("deny_read hides entries, follows symlinks and keeps a root below one visible") {
    fs::create_directories(dir + "/home/.ssh");
    std::ofstream(dir + "/home/.netrc") << "machine x password y\n";
    fs::create_directories(dir + "/real-aws");
    fs::create_directory_symlink(dir + "/real-aws", dir + "/home/.aws");
    fs::create_directories(dir + "/home/.config/gh/project/.git/hooks");
    fs::create_directories(
        dir + "/home/.local/share/keyrings/.git");  // a repository inside a hidden entry
    sb::Policy h{{dir + "/home/.config/gh/project", dir + "/home/.local"},
                 true,
                 {dir + "/home/.ssh", dir + "/home/.netrc", dir + "/home/.aws",
                  dir + "/home/.config/gh", dir + "/home/.local/share/keyrings",
                  dir + "/home/missing", dir + "/home/.ssh/inner", "/"}};
    auto hidden = sb::existing_hidden(h, "/");
    std::vector<std::string> paths;
    for (auto& x : hidden) paths.push_back(x.path);
    CHECK(paths == std::vector<std::string>{dir + "/real-aws", dir + "/home/.ssh",
                                            dir + "/home/.netrc", dir + "/home/.config/gh",
                                            dir + "/home/.local/share/keyrings"});
    auto a = sb::bwrap_args(h, "/");
    std::string joined;
    for (auto& x : a) joined += x + " ";
    CHECK(joined.find("--tmpfs " + dir + "/home/.ssh --remount-ro " + dir + "/home/.ssh ") !=
          std::string::npos);
    CHECK(joined.find("--ro-bind /dev/null " + dir + "/home/.netrc ") != std::string::npos);
    CHECK(joined.find("--tmpfs " + dir + "/real-aws --remount-ro") != std::string::npos);
    // A root below a hidden directory: the tmpfs (writable, to hold the mount
    // point) first, then the root bound back.
    size_t gh = joined.find("--tmpfs " + dir + "/home/.config/gh ");
    size_t proj = joined.find("--bind " + dir + "/home/.config/gh/project ");
    REQUIRE(gh != std::string::npos);
    REQUIRE(proj != std::string::npos);
    CHECK(gh < proj);
    CHECK(joined.find("--tmpfs " + dir + "/home/.config/gh --remount-ro") == std::string::npos);
    CHECK(joined.find(dir + "/home/.config/gh/project/.git/hooks") !=
          std::string::npos);  // still protected
    // A hidden entry below a root comes after the root; what lies in it gets no mount.
    size_t local = joined.find("--bind " + dir + "/home/.local ");
    size_t keyrings = joined.find("--tmpfs " + dir + "/home/.local/share/keyrings ");
    REQUIRE(local != std::string::npos);
    REQUIRE(keyrings != std::string::npos);
    CHECK(local < keyrings);
    CHECK(joined.find("--bind " + dir + "/home/.local/share/keyrings/.git") == std::string::npos);
    CHECK(joined.find("missing") == std::string::npos);
    CHECK(joined.find(dir + "/home/.ssh/inner") == std::string::npos);
    // Writes: the hidden entry inside a root is refused, the root below one allowed.
    CHECK_FALSE(sb::is_path_writable(dir + "/home/.local/share/keyrings/x", h, "/"));
    CHECK(sb::is_path_writable(dir + "/home/.local/other", h, "/"));
    CHECK(sb::is_path_writable(dir + "/home/.config/gh/project/x", h, "/"));
    // The same rules in the sandbox-exec profile, shortest path first.
    std::string p = sb::seatbelt_profile(h, "/");
    size_t deny_gh = p.find("(deny file-read* (subpath \"" + dir + "/home/.config/gh\"))");
    size_t allow_proj =
        p.find("(allow file-read* (subpath \"" + dir + "/home/.config/gh/project\"))");
    CHECK(deny_gh != std::string::npos);
    CHECK(allow_proj != std::string::npos);
    CHECK(deny_gh < allow_proj);
    CHECK(p.find("(deny file-read* (literal \"" + dir + "/home/.netrc\"))") != std::string::npos);
    CHECK(p.find("(deny file-read* (subpath \"" + dir + "/real-aws\"))") != std::string::npos);
    // A root equal to a hidden entry stays visible.
    sb::Policy same{{dir + "/home/.ssh"}, true, {dir + "/home/.ssh"}};
    CHECK(sb::existing_hidden(same, "/").empty());
    flemma_sandbox_policy* c = flemma_sandbox_policy_new(1);
    CHECK(flemma_sandbox_policy_deny_read(c, "") == FLEMMA_E_INVALID);
    CHECK(flemma_sandbox_policy_deny_read(nullptr, "/x") == FLEMMA_E_INVALID);
    REQUIRE(flemma_sandbox_policy_deny_read(c, (dir + "/home/.netrc").c_str()) == FLEMMA_OK);
    const char* argv[] = {"true", nullptr};
    flemma_strv* v = flemma_sandbox_wrap(c, 1, argv, dir.c_str(), nullptr);
    REQUIRE(v != nullptr);
    std::string all;
    for (size_t i = 0; i < v->count; ++i) all += std::string(v->items[i]) + " ";
    CHECK(all.find("--ro-bind /dev/null " + dir + "/home/.netrc ") != std::string::npos);
    flemma_strv_free(v);
    flemma_sandbox_policy_free(c);
  }
  SUBCASE("the C ABI wraps an argv and frees what it returns") {
    flemma_sandbox_policy* p = flemma_sandbox_policy_new(1);
    REQUIRE(flemma_sandbox_policy_add_root(p, (dir + "/root").c_str()) == FLEMMA_OK);
    CHECK(flemma_sandbox_policy_add_root(p, "") == FLEMMA_E_INVALID);
    const char* argv[] = {"ls", nullptr};
    flemma_strv* v = flemma_sandbox_wrap(p, 1, argv, dir.c_str(), nullptr);
    REQUIRE(v != nullptr);
    CHECK(std::string(v->items[4]) == "bwrap");
    CHECK(std::string(v->items[v->count - 1]) == "ls");
    flemma_strv_free(v);
    CHECK(flemma_sandbox_wrap(p, 7, argv, dir.c_str(), nullptr) == nullptr);
    CHECK(flemma_sandbox_is_path_writable(p, "root/x", dir.c_str()) == 1);
    CHECK(flemma_sandbox_is_path_writable(p, "x", "relative") == FLEMMA_E_INVALID);
    flemma_sandbox_policy_free(p);
    flemma_sandbox_policy_free(nullptr);
    flemma_strv_free(nullptr);
  }
  fs::remove_all(dir);
}
