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
  if [ -n "$line" ]; then
    read -r p f e <<<"$(echo "$line" | sed -E 's/^busted: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) errors.*/\1 \2 \3/')"
    passed=$((passed + p))
    failed=$((failed + f + e))
    if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then
      echo "Neovim $v exited with status $rc after the specs"
      failed=$((failed + 1))
    fi
  else
    echo "Lua specs under Neovim $v produced no summary (exit $rc)"
    failed=$((failed + 1))
  fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
