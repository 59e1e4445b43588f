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
# An idle CPU of a virtual machine can wake up milliseconds late (on the 2-core
# VM these benchmarks were written on, a 1 ms timer of an idle process fired 2 ms
# late in the median 400 ms window and up to 15 ms late), which the blocking
# benchmarks would count as Flemma's work. When it may (root), the run holds
# the kernel's PM QoS request /dev/cpu_dma_latency at 0 until it ends: idle
# CPUs poll instead of halting, as on a machine set up for benchmarks (the work
# measured is the same; only waking up is faster). BENCH_IDLE=normal keeps the
# machine's own setting; the header says which was used.
wake="the machine's own (BENCH_IDLE=normal or /dev/cpu_dma_latency not writable)"
if [ "${BENCH_IDLE:-low}" != normal ] && [ -w /dev/cpu_dma_latency ] && { exec 3>/dev/cpu_dma_latency; } 2>/dev/null; then
  if printf '\0\0\0\0' >&3 2>/dev/null; then
    wake="lowest: /dev/cpu_dma_latency held at 0 for the run (BENCH_IDLE=normal: the machine's own)"
  fi
fi
echo "# idle wake-up latency: $wake"
BENCH="${BENCH:-}" exec "$ROOT/scripts/nvim" "$NVIM_VERSION" --headless --clean -l bench/runner.lua
