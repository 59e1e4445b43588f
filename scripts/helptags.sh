#!/usr/bin/env bash
# Regenerates doc/tags from doc/flemma.txt (`make helptags`) with :helptags of a Neovim
# 0.10 or later: FLEMMA_NVIM, else `nvim` on PATH, else the one `make deps` unpacked.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${FLEMMA_NVIM:-}" ]; then
  nvim=("$FLEMMA_NVIM")
elif command -v nvim >/dev/null 2>&1; then
  nvim=(nvim)
else
  nvim=("$ROOT/scripts/nvim" 0.12.4)
fi
"${nvim[@]}" --headless --clean -c "helptags $ROOT/doc" -c 'qa!'
echo "[flemma] wrote doc/tags ($(wc -l < "$ROOT/doc/tags") tags)"
