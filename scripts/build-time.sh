#!/usr/bin/env bash
# The clean build a new user runs: `make` in a fresh clone of this checkout's HEAD,
# timed, with its compiler warnings counted. One line in the benchmarks' format:
#   bench build_clean: <seconds> s (target <= 60 s) PASS|MISS (<n> compiler warnings, ...)
# PASS needs the time within the target and no warning. Before it, `#` lines say what
# the machine was doing (a build's time is only as good as the load around it).
#
# The build runs as on a system that is not Debian: no .deps/ (a clone has none), and,
# where bubblewrap can, the system's nlohmann/json, doctest and libuv headers and
# pkg-config files hidden (FLEMMA_BUILD_BARE=0 builds with them in sight). Afterwards
# the compiler's dependency files must name no system copy of them, and the plain build
# must not have built the doctest suite.
#   FLEMMA_BUILD_KEEP=1  keep the clone (its path is printed)
#
# --demo: instead, `make demo` in the fresh clone (in tmux), timed until the tour is on
# screen: `bench demo_clean: <seconds> s (target <= 90 s) PASS|MISS`. Without a Neovim
# 0.10 or later on PATH this includes fetching one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=60
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flemma-build.XXXXXX")
[ "${FLEMMA_BUILD_KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp" 2>/dev/null || { sleep 1; rm -rf "$tmp"; }' EXIT
fail() { echo "build-time: $*" >&2; exit 1; }

git -c gc.auto=0 clone --quiet --no-hardlinks "$ROOT" "$tmp/flemma"
cd "$tmp/flemma"
[ ! -e .deps ] || fail "the clone has a .deps"
(cd third_party && sha256sum -c --quiet SHA256SUMS) || fail "third_party/ differs from third_party/SHA256SUMS"

if [ "${1:-}" = "--demo" ]; then
  command -v tmux >/dev/null 2>&1 || fail "--demo needs tmux"
  sock="flemma-demo-time-$$"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"
  echo "# Neovim on PATH: $(command -v nvim >/dev/null 2>&1 && nvim --version | head -n 1 || echo none)"
  start=$(date +%s.%N)
  tmux -L "$sock" new-session -d -x 100 -y 30 \
    "cd '$tmp/flemma' && script -q -e -c 'FLEMMA_DEMO_DIR=$tmp/tour make demo' '$tmp/demo.log'"
  shown=0
  for _ in $(seq 1 6000); do
    if tmux -L "$sock" capture-pane -p -t 0 2>/dev/null | grep -q 'Show me how tools work in Flemma'; then
      shown=1
      break
    fi
    sleep 0.1
  done
  end=$(date +%s.%N)
  tmux -L "$sock" kill-server 2>/dev/null || true
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)"
  [ "$shown" = 1 ] || { tail -n 30 "$tmp/demo.log" >&2; fail "the tour never showed"; }
  grep -a '^\[demo\]\|^\[deps\]' "$tmp/demo.log" | sed 's/^/# /' | tr -d '\r'
  warnings=$(grep -ac 'warning:' "$tmp/demo.log" || true)
  secs=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", e - s }')
  verdict=$(awk -v t="$secs" -v w="$warnings" 'BEGIN { print (t <= 90 && w == 0) ? "PASS" : "MISS" }')
  echo "bench demo_clean: $secs s (target <= 90 s) $verdict ($warnings compiler warnings)"
  exit 0
fi

run=(make)
bare="no (bubblewrap missing or FLEMMA_BUILD_BARE=0)"
if [ "${FLEMMA_BUILD_BARE:-1}" = 1 ] && n=$(bash "$ROOT/scripts/bare.sh" --check 2>/dev/null); then
  run=(bash "$ROOT/scripts/bare.sh" make)
  bare="yes (scripts/bare.sh hid $n system paths of nlohmann/json, doctest, libuv)"
fi

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.brand_string 2>/dev/null || echo unknown)
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime | sed 's/.*averages*: //')
echo "# machine: $cpu; cores: $(nproc); $(cmake --version | head -n 1); $(c++ --version | head -n 1)"
echo "# no Debian system copies in sight: $bare"
echo "# load average before: $load_before"

TIMEFORMAT='%R %U %S'
status=0
{ time "${run[@]}" > "$tmp/build.log" 2>&1 || status=$?; } 2> "$tmp/time"
if [ "$status" != 0 ]; then
  tail -n 40 "$tmp/build.log" >&2
  fail "make failed (log above)"
fi
read -r secs user sys < "$tmp/time"
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime | sed 's/.*averages*: //')
echo "# load average after: $load_after"

[ -f build/libflemma_core.so ] || [ -f build/libflemma_core.dylib ] || fail "make built no library"
[ ! -e build/flemma_tests ] || fail "the plain make built the doctest suite"
if grep -rlE '/usr/(local/)?include/(nlohmann|doctest|uv\.h|uv/)' build --include='*.d' --include='depend.make' --include='compiler_depend.make' >/dev/null 2>&1; then
  fail "the build read a system copy of nlohmann/json, doctest or libuv"
fi
warnings=$(grep -c 'warning:' "$tmp/build.log" || true)
if [ "$warnings" -gt 0 ]; then grep -A3 'warning:' "$tmp/build.log" | head -n 40 >&2; fi
# The CPU time does not depend on the load around the build: divided by the cores, it
# is about what the build takes on an idle machine.
cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
idle=$(awk -v c="$cpu" -v n="$(nproc)" 'BEGIN { printf "%.1f", c / n }')
secs=$(awk -v t="$secs" 'BEGIN { printf "%.1f", t }')
verdict=$(awk -v t="$secs" -v m="$TARGET" -v w="$warnings" 'BEGIN { print (t <= m && w == 0) ? "PASS" : "MISS" }')
echo "bench build_clean: $secs s (target <= $TARGET s) $verdict ($warnings compiler warnings; $cpu s of CPU, $idle s on $(nproc) idle cores)"
