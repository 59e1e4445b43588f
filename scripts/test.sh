#!/usr/bin/env bash
# Runs the native doctest suite (through ctest) and the busted specs inside headless
# Neovim, once under each Neovim version, and prints one final line:
#   N passed, N failed
# Usage: scripts/test.sh [spec file or directory]   (SPEC=... from make)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SPEC_ARG=${1:-${SPEC:-}}
NVIM_VERSIONS=${NVIM_VERSIONS:-"0.10.4 0.12.4"}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-1200}

passed=0
failed=0

if [ -z "$SPEC_ARG" ]; then
  echo "== native suite (ctest)"
  out=$(cd build && timeout "$SUITE_TIMEOUT" ctest --output-on-failure -j2 2>&1)
  rc=$?
  echo "$out" | tail -n 40
  line=$(echo "$out" | grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' | tail -n 1)
  if [ -n "$line" ]; then
    nf=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/')
    nt=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/')
    passed=$((passed + nt - nf))
    failed=$((failed + nf))
  else
    echo "native suite produced no summary (exit $rc)"
    failed=$((failed + 1))
  fi
fi

for v in $NVIM_VERSIONS; do
  echo "== Lua specs under Neovim $v"
  log=$(mktemp)
  if [ -n "$SPEC_ARG" ]; then
    timeout "$SUITE_TIMEOUT" "$ROOT/scripts/nvim" "$v" --headless --clean -l spec/runner.lua "$SPEC_ARG" 2>&1 | tee "$log"
  else
    timeout "$SUITE_TIMEOUT" "$ROOT/scripts/nvim" "$v" --headless --clean -l spec/runner.lua 2>&1 | tee "$log"
  fi
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^busted: [0-9]+ passed, [0-9]+ failed, [0-9]+ errors, [0-9]+ pending' "$log" | tail -n 1)
  rm -f "$log"
  how="status $rc"
  [ "$rc" -eq 124 ] && how="status 124 (killed by the ${SUITE_TIMEOUT}s timeout)"
  [ "$rc" -gt 128 ] && how="status $rc (signal $((rc - 128)): Neovim crashed or was killed)"
  if [ -n "$line" ]; then
    read -r p f e <<<"$(echo "$line" | sed -E 's/^busted: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) errors.*/\1 \2 \3/')"
    passed=$((passed + p))
    failed=$((failed + f + e))
    # spec/runner.lua exits 0 when all passed and 1 when some failed; any other status
    # (a crash at exit after the summary, a timeout) is a failure of its own.
    expected=0
    [ $((f + e)) -gt 0 ] && expected=1
    if [ "$rc" -ne "$expected" ]; then
      echo "FAILED: Neovim $v exited with $how after the specs (expected $expected)"
      failed=$((failed + 1))
    fi
  else
    echo "FAILED: Lua specs under Neovim $v produced no summary (exited with $how)"
    failed=$((failed + 1))
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
