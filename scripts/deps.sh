#!/usr/bin/env bash
# Installs what Flemma needs to build and test, without touching the system's own
# Neovim: build/test packages through apt-get, Neovim 0.10.4 (trixie) and 0.12.4 (sid)
# unpacked into .deps/, and a position-independent static libuv built from Debian's
# source package. Idempotent: every step is skipped when its result is already there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPS="$ROOT/.deps"
mkdir -p "$DEPS"
log() { printf '[deps] %s\n' "$*"; }

PKGS=(g++ cmake make libuv1-dev nlohmann-json3-dev doctest-dev libluajit-5.1-dev luajit
      lua-busted bubblewrap curl clang-14 libclang-rt-14-dev tmux dpkg-dev patchelf python3)

LIBUV_ONLY=0
[ "${1:-}" = "--libuv-only" ] && LIBUV_ONLY=1

if ! command -v apt-get >/dev/null 2>&1; then
  cat <<MSG
[deps] This system has no apt-get. Install these yourself, then run 'make':
  a C++20 compiler, CMake >= 3.16, nlohmann/json, doctest, libuv sources (a static PIC
  build), LuaJIT, busted for Lua 5.1, Neovim >= 0.10, bubblewrap (Linux), curl.
MSG
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if [ "$LIBUV_ONLY" = 0 ]; then
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
  log "system packages present"
fi
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
  log "fetching neovim $version from $suite"
  local opts; opts=$(apt_private "$suite" "deb [signed-by=$KEYRING] $MIRROR $suite main")
  # shellcheck disable=SC2086
  apt-get $opts update -qq
  local ts
  # shellcheck disable=SC2086
  ts=$(apt-cache $opts depends neovim 2>/dev/null | awk '/Depends: libtree-sitter/{print $2; exit}')
  local work="$DEPS/dl-$suite"
  rm -rf "$work"; mkdir -p "$work"
  # shellcheck disable=SC2086
  (cd "$work" && apt-get $opts download -qq neovim neovim-runtime libluajit-5.1-2 libuv1t64 \
      lua-luv lua-lpeg libunibilium4 libutf8proc3 "$ts" libmsgpack-c2 libvterm0 libc6 libgcc-s1 >/dev/null)
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

if [ "$LIBUV_ONLY" = 0 ]; then
  fetch_nvim 0.10.4 trixie
  fetch_nvim 0.12.4 sid
fi

UVDIR="$DEPS/libuv"
if [ -f "$UVDIR/build/libuv_a.a" ] && [ -f "$UVDIR/src/include/uv.h" ]; then
  log "PIC libuv present"
else
  log "building a position-independent static libuv from Debian's source package"
  opts=$(apt_private src "deb-src [signed-by=$KEYRING] $MIRROR bookworm main")
  # shellcheck disable=SC2086
  apt-get $opts update -qq
  work="$DEPS/dl-libuv"; rm -rf "$work"; mkdir -p "$work"
  # shellcheck disable=SC2086
  (cd "$work" && apt-get $opts source --download-only -qq libuv1 >/dev/null)
  orig=$(ls "$work"/libuv1_*.orig.tar.gz | head -n 1)
  rm -rf "$UVDIR"; mkdir -p "$UVDIR/src"
  tar -xzf "$orig" -C "$UVDIR/src" --strip-components=1
  cmake -S "$UVDIR/src" -B "$UVDIR/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_TESTING=OFF -DLIBUV_BUILD_TESTS=OFF \
    -DCMAKE_C_FLAGS="-fvisibility=hidden -w" >/dev/null
  cmake --build "$UVDIR/build" --target uv_a -j"$(nproc)" >/dev/null
  rm -rf "$work"
fi
# Lua 5.1 for the frontmatter's isolated interpreter: the sources of Debian's package
# (with its patches that fix bugs), compiled by CMake into the library as C++ with
# hidden symbols, so nothing clashes with Neovim's LuaJIT.
LUADIR="$DEPS/lua5.1"
if [ -f "$LUADIR/src/lua.h" ]; then
  log "Lua 5.1 sources present"
else
  log "fetching Lua 5.1 from Debian's source package"
  opts=$(apt_private src "deb-src [signed-by=$KEYRING] $MIRROR bookworm main")
  # shellcheck disable=SC2086
  apt-get $opts update -qq
  work="$DEPS/dl-lua5.1"; rm -rf "$work"; mkdir -p "$work"
  # shellcheck disable=SC2086
  (cd "$work" && apt-get $opts source --download-only -qq lua5.1 >/dev/null)
  rm -rf "$LUADIR.tmp"; mkdir -p "$LUADIR.tmp"
  tar -xzf "$(ls "$work"/lua5.1_*.orig.tar.gz | head -n 1)" -C "$LUADIR.tmp" --strip-components=1
  tar -xJf "$(ls "$work"/lua5.1_*.debian.tar.xz | head -n 1)" -C "$work"
  # Debian's bug fixes (not its build and packaging changes).
  for p in "$work"/debian/patches/*[Ff]ix*.patch; do
    [ -f "$p" ] && patch -d "$LUADIR.tmp" -p1 -s < "$p"
  done
  rm -rf "$LUADIR"; mv "$LUADIR.tmp" "$LUADIR"
  rm -rf "$work"
fi
log "done"
