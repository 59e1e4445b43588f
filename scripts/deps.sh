#!/usr/bin/env bash
# Installs what Flemma's tests need, without touching the system's own Neovim: test
# packages through apt-get, and Neovim 0.10.4 (trixie) and 0.12.4 (sid) unpacked into
# .deps/. The library's build needs none of it (libuv, Lua 5.1 and nlohmann/json are in
# third_party/). Idempotent: every step is skipped when its result is already there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS="$ROOT/.deps"
mkdir -p "$DEPS"
log() { printf '[deps] %s\n' "$*"; }

PKGS=(g++ cmake make libluajit-5.1-dev luajit lua-busted bubblewrap curl clang-14
      libclang-rt-14-dev tmux dpkg-dev patchelf python3 clang-format-14 clang-tidy-14 lua-check)
# Node and npm for the MCP specs: from apt only when the system has none (a Node from
# elsewhere, e.g. NodeSource's, conflicts with Debian's npm package: apt refuses).
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
# The search tools' backends (grep runs rg, glob and find run fdfind); both are optional.
PKGS+=(ripgrep fd-find)

# --nvim VERSION: only that Neovim (what `make demo` needs when the system has none).
ONLY_NVIM=""
if [ "${1:-}" = "--nvim" ]; then
  ONLY_NVIM=${2:?--nvim needs a version: 0.10.4 or 0.12.4}
  PKGS=(patchelf)
fi

if ! command -v apt-get >/dev/null 2>&1; then
  cat <<MSG
[deps] This system has no apt-get. 'make' needs only CMake and a C++20 compiler; for
  the tests install yourself: LuaJIT, busted for Lua 5.1, Neovim >= 0.10, bubblewrap
  (Linux), curl, tmux, python3, clang with libFuzzer (make fuzz).
MSG
  [ -z "$ONLY_NVIM" ] || { echo "[deps] install Neovim 0.10 or later and put it on PATH" >&2; exit 1; }
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
  log "packages present: ${PKGS[*]}"
fi

KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$MIRROR" ] || { echo "[deps] cannot find the Debian mirror in /etc/apt" >&2; exit 1; }

# apt_private NAME LINE: a private apt configuration under .deps/apt-NAME with one
# sources line; prints the options to pass to apt-get.
apt_private() {
  local name=$1 line=$2
  local dir="$DEPS/apt-$name"
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  : > "$dir/status"
  echo "$line" > "$dir/sources.list"
  echo "-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$dir/lists -o Dir::State::status=$dir/status -o Dir::Cache=$dir/cache -o APT::Sandbox::User=root"
}

fetch_nvim() {
  local version=$1 suite=$2
  local dest="$DEPS/nvim-$version"
  if [ -x "$dest/usr/bin/nvim" ]; then log "neovim $version present"; return; fi
  log "fetching neovim $version from Debian $suite: the package lists"
  local opts; opts=$(apt_private "$suite" "deb [signed-by=$KEYRING] $MIRROR $suite main")
  # shellcheck disable=SC2086
  apt-get $opts update -qq
  local ts
  # shellcheck disable=SC2086
  ts=$(apt-cache $opts depends neovim 2>/dev/null | awk '/Depends: libtree-sitter/{print $2; exit}')
  local work="$DEPS/dl-$suite"
  rm -rf "$work"; mkdir -p "$work"
  log "fetching neovim $version: its packages"
  # shellcheck disable=SC2086
  (cd "$work" && apt-get $opts download -qq neovim neovim-runtime libluajit-5.1-2 libuv1t64 \
      lua-luv lua-lpeg libunibilium4 libutf8proc3 "$ts" libmsgpack-c2 libvterm0 libc6 libgcc-s1 >/dev/null)
  log "fetching neovim $version: unpacking into .deps/nvim-$version"
  rm -rf "$dest.tmp"; mkdir -p "$dest.tmp"
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest.tmp"; done
  # Point the binary at its own loader and libraries, so that it runs directly and
  # the processes it starts from its own path (the TUI's --embed server) work too.
  local lib="$dest/usr/lib/x86_64-linux-gnu"
  patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib" "$dest.tmp/usr/bin/nvim"
  mv "$dest.tmp" "$dest"
  rm -rf "$work"
  "$ROOT/scripts/nvim" "$version" --version | head -n 1
}

case "$ONLY_NVIM" in
  "") fetch_nvim 0.10.4 trixie; fetch_nvim 0.12.4 sid ;;
  0.10.4) fetch_nvim 0.10.4 trixie ;;
  0.12.4) fetch_nvim 0.12.4 sid ;;
  *) echo "[deps] unknown Neovim version $ONLY_NVIM (0.10.4 or 0.12.4)" >&2; exit 1 ;;
esac

# The reference MCP servers the MCP specs run (spec/flemma/mcp_spec.lua), with Node,
# pinned; skipped when these versions are there.
MCP_PKGS=(@modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31)
# And the Lua formatter `make lint` and `make format` run (StyLua, a prebuilt binary on npm).
MCP_PKGS+=(@johnnymorganz/stylua-bin@2.5.2)
mcp_present() {
  local p name version
  for p in "${MCP_PKGS[@]}"; do
    name=${p%@*}; version=${p##*@}
    grep -q "\"version\": \"$version\"" "$DEPS/npm/node_modules/$name/package.json" 2>/dev/null || return 1
  done
}
if mcp_present; then
  log "MCP reference servers present"
else
  log "installing ${MCP_PKGS[*]} into .deps/npm"
  mkdir -p "$DEPS/npm"
  npm install --prefix "$DEPS/npm" --no-audit --no-fund --loglevel=error "${MCP_PKGS[@]}" >/dev/null
fi

log "done"
