#!/usr/bin/env bash
# Benchmark runner: a header describing the machine, then one line per benchmark:
#   bench <name>: <median> <unit> (target <= <value> <unit>) PASS|MISS
# BENCH=<name> runs one. Benchmarks run inside Neovim (the newest unpacked build).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
NVIM_VERSION=${BENCH_NVIM:-0.12.4}
cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.brand_string 2>/dev/null || echo unknown)
nv=$("$ROOT/scripts/nvim" "$NVIM_VERSION" --version | head -n 1)
echo "# machine: $cpu; cores: $(nproc); memory: $(awk '/MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo 2>/dev/null)"
echo "# neovim: $nv; os: $(uname -sr); date: $(date -u +%Y-%m-%dT%H:%MZ)"
BENCH="${BENCH:-}" exec "$ROOT/scripts/nvim" "$NVIM_VERSION" --headless --clean -l bench/runner.lua
