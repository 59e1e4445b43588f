#!/usr/bin/env bash
# `make demo`: a guided tour of the tool cycle, offline. Builds the library (`make`),
# then starts Neovim with only this plugin on a scratch copy of demo/tour.chat. The
# Neovim is the system's when it is 0.10 or later, else one `make deps` unpacked, else
# one Neovim fetched now into .deps/ (and only that: no test packages), while the
# library builds. Progress goes to the terminal, one line per step.
#   FLEMMA_DEMO_DIR=<dir>  where the scratch copy goes (default: a new temp directory)
#   FLEMMA_DEMO_NVIM=<cmd> which Neovim to run
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { printf '[demo] %s\n' "$*"; }

# A Neovim command that is 0.10 or later, or nothing.
pick_nvim() {
  if [ -n "${FLEMMA_DEMO_NVIM:-}" ]; then
    echo "$FLEMMA_DEMO_NVIM"
    return
  fi
  if command -v nvim >/dev/null 2>&1; then
    local v major minor
    v=$(nvim --version 2>/dev/null | head -n 1 | sed -E 's/^NVIM v([0-9]+)\.([0-9]+).*/\1 \2/')
    read -r major minor <<<"$v"
    if [ "${major:-0}" -gt 0 ] || [ "${minor:-0}" -ge 10 ]; then
      echo nvim
      return
    fi
  fi
  for version in 0.12.4 0.10.4; do
    if [ -x "$ROOT/.deps/nvim-$version/usr/bin/nvim" ]; then
      echo "$ROOT/scripts/nvim $version"
      return
    fi
  done
}

nvim=$(pick_nvim)
fetch_pid=""
if [ -z "$nvim" ]; then
  log "no Neovim 0.10 or later on PATH: fetching Neovim 0.12.4 into .deps/ while the library builds"
  bash "$ROOT/scripts/deps.sh" --nvim 0.12.4 &
  fetch_pid=$!
else
  log "Neovim: $($nvim --version | head -n 1) ($nvim)"
fi

log "building the library (make)"
if ! make --no-print-directory build; then
  [ -z "$fetch_pid" ] || wait "$fetch_pid" || true
  log "the build failed (above)"
  exit 1
fi
if [ -n "$fetch_pid" ]; then
  if ! wait "$fetch_pid"; then
    log "could not fetch a Neovim: install Neovim 0.10 or later and run make demo again"
    exit 1
  fi
  nvim="$ROOT/scripts/nvim 0.12.4"
fi

dir=${FLEMMA_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/flemma-tour.XXXXXX")}
mkdir -p "$dir"
cp "$ROOT/demo/tour.chat" "$ROOT/demo/notes.txt" "$dir/"
cd "$dir"
log "starting the tour in $dir (a scratch copy: edit freely)"
# shellcheck disable=SC2086
exec $nvim --clean -n \
  --cmd "lua vim.opt.rtp:prepend([[$ROOT]]); require('flemma').setup({})" \
  tour.chat
