#!/usr/bin/env bash
# `make demo`: a guided tour of the tool cycle, offline. Starts Neovim (the system's
# when it is 0.10 or later, else the one `make deps` unpacked) with only this plugin,
# on a scratch copy of demo/tour.chat.
#   FLEMMA_DEMO_DIR=<dir>  where the scratch copy goes (default: a new temp directory)
#   FLEMMA_DEMO_NVIM=<cmd> which Neovim to run
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

pick_nvim() {
  if [ -n "${FLEMMA_DEMO_NVIM:-}" ]; then
    echo "$FLEMMA_DEMO_NVIM"
    return
  fi
  if command -v nvim >/dev/null 2>&1; then
    local v
    v=$(nvim --version 2>/dev/null | head -n 1 | sed -E 's/^NVIM v([0-9]+)\.([0-9]+).*/\1 \2/')
    read -r major minor <<<"$v"
    if [ "${major:-0}" -gt 0 ] || [ "${minor:-0}" -ge 10 ]; then
      echo nvim
      return
    fi
  fi
  echo "$ROOT/scripts/nvim 0.12.4"
}

dir=${FLEMMA_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/flemma-tour.XXXXXX")}
mkdir -p "$dir"
cp "$ROOT/demo/tour.chat" "$ROOT/demo/notes.txt" "$dir/"
cd "$dir"
echo "Flemma tour in $dir (a scratch copy: edit freely)"
# shellcheck disable=SC2046
exec $(pick_nvim) --clean -n \
  --cmd "lua vim.opt.rtp:prepend([[$ROOT]]); require('flemma').setup({})" \
  tour.chat
