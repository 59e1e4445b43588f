#!/usr/bin/env bash
# `make lint`: every check of the code's form, without writing a file. Each check prints
# one line, ok or what to fix; the script fails when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
STYLUA=${STYLUA:-$(ls .deps/npm/node_modules/.bin/stylua 2>/dev/null || command -v stylua)}
CLANG_FORMAT=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format)}
LUACHECK=${LUACHECK:-$(command -v luacheck)}
CLANG_TIDY=${CLANG_TIDY:-$(command -v clang-tidy-14 || command -v clang-tidy)}
RUN_CLANG_TIDY=${RUN_CLANG_TIDY:-$(command -v run-clang-tidy-14 || command -v run-clang-tidy)}
TIDY_DIR=${TIDY_DIR:-build-tidy}
LUA_DIRS=(lua plugin ftplugin ftdetect spec bench scripts)
NATIVE=(native/src/*.cpp native/src/*.hpp native/include/flemma/*.h native/reaper/*.cpp tests/*.cpp fuzz/*.cpp)
failed=0
check() {
  local name=$1; shift
  local out hint=${HINT:-}
  if out=$("$@" 2>&1); then
    echo "[lint] $name: ok"
  else
    echo "$out" | tail -n 40
    echo "[lint] $name: FAILED${hint:+ ($hint)}"
    failed=1
  fi
}
if [ -z "$STYLUA" ]; then echo "[lint] stylua: not found (make deps installs it)"; failed=1
else HINT="make format fixes layout" check "stylua (Lua layout)" "$STYLUA" --check "${LUA_DIRS[@]}"; fi
if [ -z "$CLANG_FORMAT" ]; then echo "[lint] clang-format: not found (make deps installs it)"; failed=1
else HINT="make format fixes layout" check "clang-format (native layout)" "$CLANG_FORMAT" --dry-run -Werror "${NATIVE[@]}"; fi
# luacheck reads .luacheckrc (globals, the busted specs, the isolate's runtime files).
if [ -z "$LUACHECK" ]; then echo "[lint] luacheck: not found (make deps installs it)"; failed=1
else check "luacheck (Lua)" "$LUACHECK" --quiet --formatter plain --codes "${LUA_DIRS[@]}"; fi
# clang-tidy reads .clang-tidy; CMake writes the compile commands (configure only, into
# build-tidy/, so no build is needed). Two jobs, as for every build here.
tidy() {
  cmake -S . -B "$TIDY_DIR" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null &&
    "$RUN_CLANG_TIDY" -clang-tidy-binary "$CLANG_TIDY" -p "$TIDY_DIR" -j 2 -quiet "$PWD/native/src/.*\.cpp$" \
      >"$TIDY_DIR/clang-tidy.log" 2>&1 ||
    { sed 's/\x1b\[[0-9;]*m//g' "$TIDY_DIR/clang-tidy.log" | grep -E ': (warning|error): |lines including whitespace' | sort -u; return 1; }
}
if [ -z "$CLANG_TIDY" ] || [ -z "$RUN_CLANG_TIDY" ]; then
  echo "[lint] clang-tidy: not found (make deps installs clang-tidy-14)"; failed=1
else HINT="the whole output: $TIDY_DIR/clang-tidy.log" check "clang-tidy (native/src)" tidy; fi
exit $failed
