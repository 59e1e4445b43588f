// The OS sandbox: a policy (writable roots, network on or off) turned into a
// wrapped command line for bubblewrap (Linux) or sandbox-exec (macOS), and the
// same policy answered for one path (is_path_writable).
#pragma once

#include <string>
#include <vector>

namespace flemma::sandbox {

struct Policy {
  std::vector<std::string> rw_paths;  // writable roots (absolute, or relative to cwd)
  bool network = true;
  // Paths hidden from the command (a directory shows empty, a file reads as
  // empty): absolute, or relative to cwd; missing ones are skipped.
  std::vector<std::string> deny_read;
};

enum class Backend { Bwrap = 1, SandboxExec = 2 };

// Paths, relative to a writable root, that stay read-only inside it.
const std::vector<std::string>& protected_names();

// Paths relative to $HOME that run code later (~/.ssh, ~/.gitconfig,
// ~/.config/nvim, ...): never writable, even inside a root.
struct HomePath {
  std::string rel;
  bool dir;
};
const std::vector<HomePath>& home_protected();

// $HOME resolved ("" when unset or "/"). It is never a writable root: a root
// that contains it is dropped, and $HOME itself stands for its entries that
// are not hidden.
std::string home_dir();

// Whether a path relative to a root ("/a/.git/hooks/x") is a repository's hooks,
// config (its submodules' too) or .git entry.
bool git_protected(const std::string& rel);

// Absolute form of path (relative to cwd), `.` and `..` folded lexically, and
// symlinks resolved in the longest prefix that exists. Never fails: a path that
// does not exist keeps its missing tail as written.
std::string resolve(const std::string& path, const std::string& cwd);

// The roots of the policy that exist, resolved, deduplicated, shortest first.
std::vector<std::string> existing_roots(const Policy& policy, const std::string& cwd);

// A path of the policy's deny_read list that exists, resolved (symlinks
// followed, so the link and its target are both hidden).
struct Hidden {
  std::string path;
  bool dir;
};

// The existing deny_read entries, resolved and deduplicated, shortest first.
// Never "/", nor an entry equal to a writable root (a root stays visible:
// see visible_rule).
std::vector<Hidden> existing_hidden(const Policy& policy, const std::string& cwd);

// Whether path (absolute, resolved) is hidden: its deepest ancestor among the
// writable roots and the hidden entries is a hidden entry. A root below a
// hidden directory stays visible and writable; a hidden entry below a root
// is hidden all the same.
bool is_hidden(const std::string& path, const std::vector<std::string>& roots,
               const std::vector<Hidden>& hidden);

// Whether a write to path is allowed: inside a root, not inside a protected
// path of that root (nor anything named .git/hooks or .git/config below it),
// and not hidden (deny_read).
bool is_path_writable(const std::string& path, const Policy& policy, const std::string& cwd);

// Writes data to path atomically and beneath the policy's writable roots, even
// while another process swaps symlinks in the path: the path is checked
// (is_path_writable), its parent opened from the root's directory descriptor
// with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) (a component-by-component
// O_NOFOLLOW walk where the kernel lacks it, or when directories are missing:
// they are created, 0755), the directory actually opened checked again, then
// a temporary file in it is renamed over the name. An existing file keeps its
// permission bits; a new one gets 0644. Throws flemma::Error.
void write_file(const std::string& path, const Policy& policy, const std::string& cwd,
                const std::string& data);

// bwrap arguments (without the program name) that run cmd under the policy.
std::vector<std::string> bwrap_args(const Policy& policy, const std::string& cwd);

// The sandbox-exec (Seatbelt) profile text for the policy.
std::string seatbelt_profile(const Policy& policy, const std::string& cwd);

// The whole wrapped argv: program, its arguments, then cmd.
std::vector<std::string> wrap(Backend backend, const Policy& policy,
                              const std::vector<std::string>& cmd, const std::string& cwd,
                              const std::string& program);

}  // namespace flemma::sandbox
