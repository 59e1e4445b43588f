#!/usr/bin/env bash
# `make lint`: every check of the code's form, without writing a file. Each check prints
# one line, ok or what to fix; the script fails when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
STYLUA=${STYLUA:-$(ls .deps/npm/node_modules/.bin/stylua 2>/dev/null || command -v stylua)}
CLANG_FORMAT=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format)}
LUA_DIRS=(lua plugin ftplugin ftdetect spec bench scripts)
NATIVE=(native/src/*.cpp native/src/*.hpp native/include/flemma/*.h native/reaper/*.cpp tests/*.cpp fuzz/*.cpp)
failed=0
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    echo "[lint] $name: ok"
  else
    echo "$out" | tail -n 40
    echo "[lint] $name: FAILED (make format fixes layout)"
    failed=1
  fi
}
if [ -z "$STYLUA" ]; then echo "[lint] stylua: not found (make deps installs it)"; failed=1
else check "stylua (Lua layout)" "$STYLUA" --check "${LUA_DIRS[@]}"; fi
if [ -z "$CLANG_FORMAT" ]; then echo "[lint] clang-format: not found (make deps installs it)"; failed=1
else check "clang-format (native layout)" "$CLANG_FORMAT" --dry-run -Werror "${NATIVE[@]}"; fi
exit $failed
