#!/usr/bin/env bash
# Runs a command as on a system that is not Debian's build machine: the system's
# nlohmann/json, doctest and libuv headers, CMake packages, pkg-config files and static
# archives hidden (empty), through bubblewrap; everything else as it is.
#   scripts/bare.sh make          scripts/bare.sh --check  (exit 0 when it can hide them)
# Not hidden: the shared libuv (CMake itself may be linked with it). Symlinks are left
# alone too, as binding over one binds over its target.
set -euo pipefail
command -v bwrap >/dev/null 2>&1 || { echo "bare: bubblewrap (bwrap) is needed" >&2; exit 127; }
hide=()
for d in /usr/include/nlohmann /usr/include/doctest /usr/include/uv /usr/share/doctest \
  /usr/lib/cmake/doctest /usr/share/cmake/nlohmann_json /usr/lib/cmake/nlohmann_json; do
  [ -d "$d" ] && hide+=(--tmpfs "$d")
done
for f in /usr/include/uv.h /usr/lib/*/pkgconfig/libuv*.pc /usr/share/pkgconfig/nlohmann_json.pc \
  /usr/lib/*/libuv.a /usr/lib/*/libuv_a.a; do
  [ -e "$f" ] && [ ! -L "$f" ] && hide+=(--ro-bind /dev/null "$f")
done
if [ "${1:-}" = "--check" ]; then
  bwrap --dev-bind / / "${hide[@]}" true
  echo "${#hide[@]}"
  exit 0
fi
exec bwrap --dev-bind / / "${hide[@]}" --chdir "$PWD" "$@"
