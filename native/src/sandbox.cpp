#include "sandbox.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "guard.hpp"
#include "reaper.hpp"

namespace flemma::sandbox {

namespace {

constexpr int kSeccompFd = 3;

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += "/" + parts[i];
  return out.empty() ? "/" : out;
}

std::string lexical_absolute(const std::string& path, const std::string& cwd) {
  std::string full = (!path.empty() && path[0] == '/') ? path : cwd + "/" + path;
  std::vector<std::string> out;
  for (auto& part : split(full)) {
    if (part == ".") continue;
    if (part == "..") {
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(part);
  }
  return join(out, out.size());
}

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

bool inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& dir, size_t cap) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      names.push_back(std::move(n));
      if (names.size() >= cap) break;
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Whether a directory holds a Unix socket within `depth` levels (bounded).
bool holds_socket(const std::string& dir, int depth, size_t& budget) {
  for (const auto& n : list_dir(dir, 256)) {
    if (budget == 0) return true;  // too big to tell: hide it
    --budget;
    std::string p = dir + "/" + n;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISSOCK(st.st_mode)) return true;
    if (S_ISDIR(st.st_mode) && depth > 1 && holds_socket(p, depth - 1, budget)) return true;
  }
  return false;
}

// Names of the usual socket directories of /tmp and the runtime directory.
bool socket_dir_name(const std::string& n) {
  static const char* const prefixes[] = {
      "nvim.",     "tmux-",     "ssh-",      "dbus-",      "systemd-private-", "pulse",
      ".X11-unix", ".ICE-unix", ".XIM-unix", ".font-unix", "screen",           "gnupg",
      "keyring",   "bus",       "wayland",   "podman",     "docker",           "emacs"};
  for (const char* pre : prefixes)
    if (n.rfind(pre, 0) == 0) return true;
  return false;
}

// The host directories that hold sockets (Neovim's RPC socket among them):
// /tmp, $XDG_RUNTIME_DIR and /run/user.
std::vector<std::string> socket_dirs() {
  std::vector<std::string> out;
  auto add = [&](const std::string& p) {
    if (p.empty() || p[0] != '/' || !is_dir(p)) return;
    std::string r = resolve(p, "/");
    for (const auto& o : out)
      if (inside(r, o)) return;
    out.erase(
        std::remove_if(out.begin(), out.end(), [&](const std::string& o) { return inside(o, r); }),
        out.end());
    out.push_back(r);
  };
  add("/tmp");
  if (const char* x = std::getenv("XDG_RUNTIME_DIR")) add(x);
  add("/run/user");
  return out;
}

struct GitScan {
  std::vector<std::string> git_dirs;       // .git directories and submodules' git directories
  std::vector<std::string> pointer_files;  // .git files ("gitdir: ...")
  std::vector<std::string> secret_files;   // regular files named as secrets (secret_name)
};

bool ends_with_ci(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    char c = s[s.size() - n + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

// Whether a file's name makes it a secret wherever it lies: the by-name rule of
// flemma.secret_paths (lua/flemma/secret_paths.lua H.by_name; sandbox_spec checks
// that the two agree), but for .npmrc / .pypirc, which are secrets there only when
// their content holds a token and which package managers in the sandbox read.
bool secret_name(const std::string& name) {
  std::string lower = name;
  for (auto& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  if (lower.compare(0, 4, ".env") == 0) return true;
  for (const char* ext : {".pem", ".key", ".ppk", ".p12", ".pfx", ".jks", ".keystore", ".kdbx"})
    if (ends_with_ci(lower, ext)) return true;
  if (lower == ".netrc" || lower == "_netrc" || lower == ".git-credentials" || lower == ".pgpass")
    return true;
  if (lower.compare(0, 6, "krb5cc") == 0) return true;  // Kerberos tickets (/tmp/krb5cc_UID)
  // id_rsa, id_ed25519...: id_ and then [A-Za-z0-9_-]+, alone or with a backup
  // suffix (~, .bak, .old, .orig, .backup); not id_rsa.pub.
  if (lower.compare(0, 3, "id_") != 0) return false;
  std::string stem = lower;
  for (const char* suf : {"~", ".bak", ".old", ".orig", ".backup"}) {
    if (ends_with_ci(stem, suf)) {
      stem.resize(stem.size() - std::strlen(suf));
      break;
    }
  }
  if (stem.size() <= 3) return false;
  for (size_t i = 3; i < stem.size(); ++i) {
    const char c = stem[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

// A git directory's submodules live in modules/<name>/ (names may hold slashes).
void scan_modules(const std::string& gitdir, GitScan& out, int depth, size_t& budget) {
  if (depth <= 0) return;
  std::string mods = gitdir + "/modules";
  if (!is_dir(mods)) return;
  std::vector<std::string> stack{mods};
  while (!stack.empty() && budget > 0) {
    std::string d = stack.back();
    stack.pop_back();
    for (const auto& n : list_dir(d, 1024)) {
      if (budget == 0) break;
      --budget;
      std::string p = d + "/" + n;
      if (!is_dir(p)) continue;
      if (exists(p + "/HEAD") || exists(p + "/objects")) {
        out.git_dirs.push_back(p);
        scan_modules(p, out, depth - 1, budget);
      } else {
        stack.push_back(p);
      }
    }
  }
}

// The repositories of a root, bounded: at most 8 levels deep and 20,000
// entries looked at (a huge tree keeps the ones found so far).
GitScan scan_git(const std::string& root) {
  GitScan out;
  size_t budget = 20000;
  std::vector<std::pair<std::string, int>> stack{{root == "/" ? "" : root, 0}};
  while (!stack.empty() && budget > 0) {
    auto [d, depth] = stack.back();
    stack.pop_back();
    for (const auto& n : list_dir(d.empty() ? "/" : d, 4096)) {
      if (budget == 0) break;
      --budget;
      std::string p = d + "/" + n;
      struct stat st;
      if (::lstat(p.c_str(), &st) != 0) continue;
      if (S_ISREG(st.st_mode) && secret_name(n)) out.secret_files.push_back(p);
      if (n == ".git") {
        if (S_ISDIR(st.st_mode)) {
          out.git_dirs.push_back(p);
          scan_modules(p, out, 4, budget);
        } else if (S_ISREG(st.st_mode)) {
          out.pointer_files.push_back(p);
        }
        continue;
      }
      if (S_ISDIR(st.st_mode) && depth < 8 && n != "node_modules" && n != "__pycache__")
        stack.push_back({p, depth + 1});
    }
  }
  return out;
}

std::string quote_sb(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

const std::vector<std::string>& protected_names() {
  static const std::vector<std::string> names = {
      ".git/hooks",
      ".git/config",
      ".bashrc",
      ".bash_profile",
      ".bash_login",
      ".bash_logout",
      ".profile",
      ".zshrc",
      ".zshenv",
      ".zprofile",
      ".zlogin",
      ".zlogout",
      ".config/fish/config.fish",
  };
  return names;
}

std::string resolve(const std::string& path, const std::string& cwd) {
  // Walk the existing prefix component by component, following symlinks by
  // hand (lstat + readlink) so that a `..` after a symlink means what the
  // kernel would make of it, and a dangling symlink leads to its target (a
  // write through it creates the target, wherever that is).
  std::string full = (!path.empty() && path[0] == '/') ? path : cwd + "/" + path;
  std::vector<std::string> parts = split(full);
  std::reverse(parts.begin(), parts.end());  // a stack: the next component is at the back
  std::string cur = "/";
  int hops = 0;
  constexpr int kMaxHops = 40;  // the kernel's limit (ELOOP)
  while (!parts.empty()) {
    std::string part = std::move(parts.back());
    parts.pop_back();
    if (part == ".") continue;
    if (part == "..") {
      cur = lexical_absolute(cur + "/..", "/");
      continue;
    }
    std::string next = cur == "/" ? "/" + part : cur + "/" + part;
    struct stat st;
    if (::lstat(next.c_str(), &st) != 0) {
      parts.push_back(std::move(part));
      break;  // missing: the rest is folded lexically below
    }
    if (S_ISLNK(st.st_mode) && hops < kMaxHops) {
      ++hops;
      char buf[PATH_MAX];
      ssize_t n = ::readlink(next.c_str(), buf, sizeof buf);
      if (n > 0) {
        std::string target(buf, static_cast<size_t>(n));
        if (target[0] == '/') cur = "/";
        auto tparts = split(target);
        for (auto it = tparts.rbegin(); it != tparts.rend(); ++it) parts.push_back(*it);
        continue;
      }
    }
    cur = std::move(next);
  }
  // The missing tail is folded lexically onto the resolved prefix.
  std::string rest;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) rest += "/" + *it;
  if (rest.empty()) return cur;
  return lexical_absolute(cur + rest, "/");
}

std::string home_dir() {
  const char* h = std::getenv("HOME");
  if (!h || h[0] != '/') return {};
  std::string r = resolve(h, "/");
  return r == "/" ? std::string() : r;
}

const std::vector<HomePath>& home_protected() {
  static const std::vector<HomePath> paths = {
      {".ssh", true},
      {".gnupg", true},
      {".gitconfig", false},
      {".config/git", true},
      {".config/nvim", true},
      {".config/autostart", true},
      {".config/systemd", true},
      {".config/environment.d", true},
      {".local/bin", true},
      {".local/share/nvim", true},
      {".cache/nvim", true},
      {".pam_environment", false},
      {".xprofile", false},
      {".xsessionrc", false},
      {".xinitrc", false},
  };
  return paths;
}

std::vector<std::string> existing_roots(const Policy& policy, const std::string& cwd) {
  std::vector<std::string> roots;
  const std::string home = home_dir();
  auto add = [&](const std::string& abs) {
    struct stat st;
    if (::stat(abs.c_str(), &st) != 0) return;  // a missing root is skipped
    if (std::find(roots.begin(), roots.end(), abs) == roots.end()) roots.push_back(abs);
  };
  for (const auto& r : policy.rw_paths) {
    if (r.empty()) continue;
    std::string abs = resolve(r, cwd);
    if (!home.empty() && inside(home, abs)) {
      // $HOME is never a writable root (its dotfiles run code later): a root
      // that contains it is dropped, $HOME itself stands for its entries that
      // are not hidden.
      if (abs != home) continue;
      for (const auto& n : list_dir(home, 1024)) {
        if (n[0] == '.') continue;
        std::string child = resolve(home + "/" + n, "/");
        if (!inside(home, child)) add(child);
      }
      continue;
    }
    add(abs);
  }
  std::stable_sort(roots.begin(), roots.end(),
                   [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  return roots;
}

std::vector<Hidden> existing_hidden(const Policy& policy, const std::string& cwd) {
  std::vector<Hidden> out;
  if (policy.deny_read.empty()) return out;
  auto roots = existing_roots(policy, cwd);
  for (const auto& e : policy.deny_read) {
    if (e.empty()) continue;
    // Symlinks followed: hiding the target hides the link too, and a link
    // elsewhere to the same place.
    std::string abs = resolve(e, cwd);
    if (abs == "/") continue;
    struct stat st;
    if (::stat(abs.c_str(), &st) != 0) continue;  // missing: nothing to hide
    if (std::find(roots.begin(), roots.end(), abs) != roots.end()) continue;
    if (std::any_of(out.begin(), out.end(), [&](const Hidden& h) { return h.path == abs; }))
      continue;
    out.push_back({abs, S_ISDIR(st.st_mode)});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Hidden& a, const Hidden& b) { return a.path.size() < b.path.size(); });
  return out;
}

bool is_hidden(const std::string& path, const std::vector<std::string>& roots,
               const std::vector<Hidden>& hidden) {
  size_t root_depth = 0, hidden_depth = 0;
  bool in_root = false, in_hidden = false;
  for (const auto& r : roots)
    if (inside(path, r) && (!in_root || r.size() > root_depth)) {
      in_root = true;
      root_depth = r.size();
    }
  for (const auto& h : hidden)
    if (inside(path, h.path) && (!in_hidden || h.path.size() > hidden_depth)) {
      in_hidden = true;
      hidden_depth = h.path.size();
    }
  return in_hidden && (!in_root || hidden_depth > root_depth);
}

bool git_protected(const std::string& rel) {
  // rel starts with '/'. Everything after the first /.git/ component.
  size_t at = rel.find("/.git/");
  if (at == std::string::npos) {
    return rel.size() >= 5 &&
           rel.compare(rel.size() - 5, 5, "/.git") == 0;  // the .git entry itself
  }
  std::string tail = rel.substr(at + 6);
  auto parts = split(tail);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "hooks") return true;
    if (i + 1 == parts.size() && (parts[i] == "config" || parts[i] == "config.worktree"))
      return true;
  }
  return false;
}

bool is_path_writable(const std::string& path, const Policy& policy, const std::string& cwd) {
  if (path.empty()) return false;
  std::string p = resolve(path, cwd);
  const std::string home = home_dir();
  const auto roots = existing_roots(policy, cwd);
  if (is_hidden(p, roots, existing_hidden(policy, cwd))) return false;
  for (const auto& root : roots) {
    if (!inside(p, root)) continue;
    bool blocked = false;
    for (const auto& name : protected_names()) {
      if (inside(p, root == "/" ? "/" + name : root + "/" + name)) blocked = true;
    }
    // Any repository below the root keeps its hooks and config, those of its
    // submodules (.git/modules/**) too, and its .git pointer file.
    std::string rel = root == "/" ? p : p.substr(root.size());
    if (git_protected(rel)) blocked = true;
    if (!home.empty()) {
      for (const auto& hp : home_protected())
        if (inside(p, home + "/" + hp.rel)) blocked = true;
    }
    if (!blocked) return true;
  }
  return false;
}

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = o.fd;
      o.fd = -1;
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

[[noreturn]] void io_error(const std::string& what, int err) {
  throw Error(FLEMMA_E_IO, "sandbox: " + what + ": " + std::strerror(err));
}

[[noreturn]] void changed(const std::string& path) {
  throw Error(FLEMMA_E_IO,
              "sandbox: " + path +
                  " changed while it was being written (a symlink or a file appeared in its path): "
                  "nothing was written");
}

#if defined(__linux__) && defined(SYS_openat2)
// openat2(2) without needing <linux/openat2.h>.
struct OpenHow {
  uint64_t flags;
  uint64_t mode;
  uint64_t resolve;
};
constexpr uint64_t kResolveNoMagiclinks = 0x02;
constexpr uint64_t kResolveBeneath = 0x08;
#endif

// The parent directory of root/rel (rel's components but the last), opened
// beneath root. Missing directories are created by the walk.
Fd open_parent(int rootfd, const std::vector<std::string>& parents, const std::string& shown) {
#if defined(__linux__) && defined(SYS_openat2)
  {
    std::string rel;
    for (const auto& c : parents) rel += (rel.empty() ? "" : "/") + c;
    if (rel.empty()) rel = ".";
    OpenHow how{static_cast<uint64_t>(O_PATH | O_DIRECTORY | O_CLOEXEC), 0,
                kResolveBeneath | kResolveNoMagiclinks};
    long fd = ::syscall(SYS_openat2, rootfd, rel.c_str(), &how, sizeof how);
    if (fd >= 0) return Fd(static_cast<int>(fd));
    int err = errno;
    if (err == EXDEV || err == ELOOP || err == ENOTDIR) changed(shown);
    // ENOSYS (an older kernel), EPERM (a seccomp filter), ENOENT (directories to
    // create): the walk below.
    if (err != ENOSYS && err != EPERM && err != ENOENT && err != EINVAL && err != E2BIG)
      io_error("cannot open the directory of " + shown, err);
  }
#endif
  Fd cur(::fcntl(rootfd, F_DUPFD_CLOEXEC, 0));
  if (cur.fd < 0) io_error("dup", errno);
  for (const auto& c : parents) {
    int fd = ::openat(cur.fd, c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      if (::mkdirat(cur.fd, c.c_str(), 0755) < 0 && errno != EEXIST)
        io_error("cannot create a directory for " + shown, errno);
      fd = ::openat(cur.fd, c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      if (errno == ELOOP || errno == ENOTDIR) changed(shown);
      io_error("cannot open the directory of " + shown, errno);
    }
    cur = Fd(fd);
  }
  return cur;
}

// Where a directory descriptor really is ("" where /proc cannot tell).
std::string fd_path(int fd) {
#if defined(__linux__)
  char buf[PATH_MAX];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
#endif
  (void)fd;
  return {};
}

}  // namespace

void write_file(const std::string& path, const Policy& policy, const std::string& cwd,
                const std::string& data) {
  if (path.empty()) throw Error(FLEMMA_E_INVALID, "sandbox: the path to write is empty");
  std::string p = resolve(path, cwd);
  if (!is_path_writable(p, policy, cwd))
    throw Error(FLEMMA_E_INVALID, "sandbox: " + p + " is outside the writable paths");
  std::string root;
  for (const auto& r : existing_roots(policy, cwd))
    if (inside(p, r) && r.size() >= root.size()) root = r;
  if (root.empty() || p == root) throw Error(FLEMMA_E_INVALID, "sandbox: " + p + " is a directory");
  auto parts = split(root == "/" ? p : p.substr(root.size()));
  std::string name = parts.back();
  parts.pop_back();
  Fd rootfd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (rootfd.fd < 0) io_error("cannot open " + root, errno);
  Fd dir = open_parent(rootfd.fd, parts, p);
  // Check again where the directory really is: a rename may have moved it.
  if (std::string actual = fd_path(dir.fd); !actual.empty()) {
    std::string target = actual == "/" ? "/" + name : actual + "/" + name;
    if (!is_path_writable(target, policy, "/")) changed(p);
  }
  struct stat st {};
  mode_t mode = 0644;
  if (::fstatat(dir.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(FLEMMA_E_INVALID, "sandbox: " + p + " is a directory");
    if (S_ISREG(st.st_mode)) mode = st.st_mode & 07777;
  }
  static std::atomic<unsigned> counter{0};
  std::string tmp = "." + name.substr(0, 200) + ".flemma-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter.fetch_add(1)) + ".tmp";
  Fd out(::openat(dir.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (out.fd < 0) io_error("cannot write " + p, errno);
  auto fail = [&](const std::string& what, int err) {
    out.reset();
    ::unlinkat(dir.fd, tmp.c_str(), 0);
    io_error(what + " " + p, err);
  };
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = ::write(out.fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    off += static_cast<size_t>(w);
  }
  if (::fchmod(out.fd, mode) < 0) fail("cannot set the permissions of", errno);
  if (::fsync(out.fd) < 0) fail("cannot write", errno);
  out.reset();
  if (::renameat(dir.fd, tmp.c_str(), dir.fd, name.c_str()) < 0) {
    int err = errno;
    ::unlinkat(dir.fd, tmp.c_str(), 0);
    io_error("cannot replace " + p, err);
  }
}

namespace {

// The mounts of a bwrap sandbox. Every mount is an operation at a path; they
// are applied shortest path first, so the most specific rule wins: a root
// below a hidden directory is bound back into its empty tmpfs, a hidden entry
// below a root is hidden. What lies in a hidden entry (a repository's git
// directory, say) gets no mount of its own, which would show it again.
class Mounts {
 public:
  Mounts(const Policy& policy, const std::string& cwd)
      : policy_(policy),
        roots_(existing_roots(policy, cwd)),
        hidden_(existing_hidden(policy, cwd)) {}

  // bwrap's arguments for them, in order.
  std::vector<std::string> args() {
    sockets();
    roots();
    home();
    hidden();
    std::stable_sort(ops_.begin(), ops_.end(),
                     [](const Op& x, const Op& y) { return x.path.size() < y.path.size(); });
    std::vector<std::string> a;
    for (const auto& o : ops_) a.insert(a.end(), o.args.begin(), o.args.end());
    return a;
  }

 private:
  struct Op {
    std::string path;
    std::vector<std::string> args;
  };
  const Policy& policy_;
  const std::vector<std::string> roots_;
  const std::vector<Hidden> hidden_;
  const std::vector<std::string> socket_dirs_ = socket_dirs();
  std::vector<Op> ops_;

  void op(const std::string& p, std::vector<std::string> args) {
    if (!is_hidden(p, roots_, hidden_)) ops_.push_back({p, std::move(args)});
  }
  void ro_dir(const std::string& p) {
    if (exists(p))
      op(p, {"--ro-bind", p, p});
    else
      op(p, {"--tmpfs", p, "--remount-ro", p});
  }
  void ro_file(const std::string& p) {
    if (exists(p))
      op(p, {"--ro-bind", p, p});
    else
      op(p, {"--ro-bind", "/dev/null", p});
  }

  // No Unix socket of the host may be reachable (Neovim's own RPC socket runs
  // anything in the unsandboxed editor): the socket directories get a fresh
  // tmpfs, and the writable roots inside them are bound back.
  void sockets() {
    for (const auto& d : socket_dirs_) {
      bool covered = std::any_of(roots_.begin(), roots_.end(),
                                 [&](const std::string& r) { return inside(d, r); });
      if (!covered) op(d, {"--tmpfs", d});
    }
    for (const auto& r : roots_) {
      op(r, {"--bind", r, r});
      // A root that holds a socket directory (/tmp is a default root) shows its
      // entries, except those holding sockets: each gets an empty tmpfs.
      for (const auto& d : socket_dirs_) {
        if (!inside(d, r)) continue;
        for (const auto& n : list_dir(d, 4096)) {
          std::string p = d + "/" + n;
          struct stat st;
          if (::lstat(p.c_str(), &st) != 0) continue;
          size_t budget = 512;
          if (S_ISSOCK(st.st_mode)) {
            op(p, {"--ro-bind", "/dev/null", p});
          } else if (S_ISDIR(st.st_mode) && (socket_dir_name(n) || holds_socket(p, 2, budget))) {
            op(p, {"--tmpfs", p});
          }
        }
      }
    }
  }

  // What runs code later, in every root: the protected names, and every
  // repository's hooks and config.
  void roots() {
    for (const auto& r : roots_) {
      const std::string base = r == "/" ? "" : r;
      for (const auto& name : protected_names()) {
        std::string p = base + "/" + name;
        if (exists(p)) op(p, {"--ro-bind", p, p});
      }
      // Every repository in the root (nested ones and submodules' git
      // directories too) keeps its hooks and config: a new hook or
      // core.hooksPath / core.fsmonitor runs code outside the sandbox on the
      // next git command. Missing ones become read-only empty ones (bwrap leaves
      // the mount points behind: an empty directory and an empty file, as git
      // itself would create). The git directory is bound onto itself so that it
      // cannot be renamed away and replaced; a .git pointer file is read-only.
      GitScan scan = scan_git(r);
      for (const auto& f : scan.pointer_files) op(f, {"--ro-bind", f, f});
      // Secret files in the root (.env, *.pem, id_rsa...: secret_name) read as
      // empty while secrets are hidden at all (deny_read not emptied): an
      // auto-approved `grep -r KEY .` does not send them.
      if (!policy_.deny_read.empty())
        for (const auto& f : scan.secret_files) op(f, {"--ro-bind", "/dev/null", f});
      for (const auto& g : scan.git_dirs) {
        op(g, {"--bind", g, g});
        ro_dir(g + "/hooks");
        ro_file(g + "/config");
      }
    }
  }

  // Places in $HOME that run code later, when a root holds them (a root inside
  // ~/.config, say): read-only, or empty read-only ones where missing.
  void home() {
    const std::string home = home_dir();
    if (home.empty()) return;
    for (const auto& hp : home_protected()) {
      std::string p = home + "/" + hp.rel;
      bool in_root = false;
      for (const auto& r : roots_) in_root = in_root || inside(p, r);
      if (!in_root) continue;
      // Only where the parent exists (bwrap would create missing parents).
      if (!exists(p.substr(0, p.rfind('/')))) continue;
      if (hp.dir)
        ro_dir(p);
      else
        ro_file(p);
    }
  }

  // The hidden entries (deny_read): an empty tmpfs over a directory (read-only
  // unless a root is bound back inside it), the empty /dev/null over a file.
  // One inside another hidden one with no root between them is covered.
  void hidden() {
    for (size_t i = 0; i < hidden_.size(); ++i) {
      const auto& h = hidden_[i];
      std::vector<Hidden> others = hidden_;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      std::string parent = h.path.substr(0, h.path.rfind('/'));
      if (!parent.empty() && is_hidden(parent, roots_, others)) continue;
      if (!h.dir) {
        ops_.push_back({h.path, {"--ro-bind", "/dev/null", h.path}});
        continue;
      }
      bool holds_root = std::any_of(roots_.begin(), roots_.end(), [&](const std::string& r) {
        return r != h.path && inside(r, h.path);
      });
      if (holds_root)
        ops_.push_back({h.path, {"--tmpfs", h.path}});
      else
        ops_.push_back({h.path, {"--tmpfs", h.path, "--remount-ro", h.path}});
    }
  }
};

}  // namespace

std::vector<std::string> bwrap_args(const Policy& policy, const std::string& cwd) {
  std::vector<std::string> a = {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"};
  std::vector<std::string> mounts = Mounts(policy, cwd).args();
  a.insert(a.end(), mounts.begin(), mounts.end());
  // A user namespace and no capability at all: root inside cannot remount
  // anything writable. The filter (handed over on fd 3 by flemma-reap) refuses
  // socket(AF_UNIX), so a socket elsewhere (inside a root, an abstract one) is
  // out of reach as well.
  a.insert(a.end(), {"--unshare-user", "--cap-drop", "ALL", "--unshare-pid", "--die-with-parent",
                     "--new-session", "--seccomp", std::to_string(kSeccompFd)});
  if (!policy.network) a.push_back("--unshare-net");
  // No --chdir: bwrap keeps the working directory the command was started in.
  a.push_back("--");
  return a;
}

std::string seatbelt_profile(const Policy& policy, const std::string& cwd) {
  std::string s = "(version 1)\n(allow default)\n(deny file-write*)\n";
  s += "(allow file-write*\n  (literal \"/dev/null\")\n  (literal \"/dev/tty\")\n  (literal "
       "\"/dev/zero\")\n"
       "  (regex #\"^/dev/fd/\")";
  auto roots = existing_roots(policy, cwd);
  for (const auto& r : roots) s += "\n  (subpath " + quote_sb(r) + ")";
  s += ")\n";
  if (!roots.empty()) {
    s += "(deny file-write*";
    for (const auto& r : roots) {
      for (const auto& name : protected_names()) {
        std::string p = (r == "/" ? "" : r) + "/" + name;
        s += "\n  " + std::string(name == ".git/hooks" ? "(subpath " : "(literal ") + quote_sb(p) +
             ")";
      }
    }
    s += ")\n";
  }
  // The hidden entries (deny_read) cannot be read; a root below one of them
  // can, and a hidden entry below such a root cannot again: the rules are
  // written shortest path first, and the last rule that matches wins.
  auto hidden = existing_hidden(policy, cwd);
  if (!hidden.empty()) {
    std::vector<std::pair<std::string, std::string>> rules;  // path, rule
    rules.reserve(hidden.size() + roots.size());
    for (const auto& h : hidden)
      rules.push_back({h.path, "(deny file-read* " +
                                   std::string(h.dir ? "(subpath " : "(literal ") +
                                   quote_sb(h.path) + "))\n"});
    for (const auto& r : roots) {
      bool below = std::any_of(hidden.begin(), hidden.end(),
                               [&](const Hidden& h) { return inside(r, h.path); });
      if (below) rules.push_back({r, "(allow file-read* (subpath " + quote_sb(r) + "))\n"});
    }
    std::stable_sort(rules.begin(), rules.end(),
                     [](const auto& x, const auto& y) { return x.first.size() < y.first.size(); });
    for (const auto& r : rules) s += r.second;
  }
  // Secret files in the roots (secret_name), as bwrap_args hides them; last, so
  // that no root's allow rule shows them again.
  if (!policy.deny_read.empty()) {
    for (const auto& r : roots)
      for (const auto& f : scan_git(r).secret_files)
        s += "(deny file-read* (literal " + quote_sb(f) + "))\n";
  }
  // Off means off: Unix sockets too (Neovim's RPC socket would run anything
  // outside the sandbox).
  if (!policy.network) s += "(deny network*)\n(deny network* (remote unix-socket))\n";
  return s;
}

std::vector<std::string> wrap(Backend backend, const Policy& policy,
                              const std::vector<std::string>& cmd, const std::string& cwd,
                              const std::string& program) {
  if (cmd.empty()) throw Error(FLEMMA_E_INVALID, "sandbox: the command to wrap is empty");
  std::vector<std::string> out;
  if (backend == Backend::Bwrap) {
    // flemma-reap hands bwrap the seccomp filter on kSeccompFd.
    if (!reaper::available())
      throw Error(FLEMMA_E_IO,
                  "sandbox: the helper `" + reaper::path() +
                      "` is missing: rebuild Flemma (`make` in the plugin's directory)");
    out.insert(out.end(), {reaper::path(), "--seccomp-fd", std::to_string(kSeccompFd), "--"});
    out.push_back(program.empty() ? "bwrap" : program);
    auto a = bwrap_args(policy, cwd);
    out.insert(out.end(), a.begin(), a.end());
  } else if (backend == Backend::SandboxExec) {
    out.push_back(program.empty() ? "sandbox-exec" : program);
    out.push_back("-p");
    out.push_back(seatbelt_profile(policy, cwd));
  } else {
    throw Error(FLEMMA_E_INVALID, "sandbox: unknown backend");
  }
  out.insert(out.end(), cmd.begin(), cmd.end());
  return out;
}

}  // namespace flemma::sandbox
