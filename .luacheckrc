-- luacheck (make lint, scripts/lint.sh): the Lua of the plugin, its specs, benchmarks and
-- scripts. Neovim's Lua is LuaJIT with the global `vim` (its fields are set: vim.bo[buf],
-- vim.g, vim.notify in specs). The layout (line length included) is stylua.toml's.
std = "luajit"
globals = { "vim" }
max_line_length = false
codes = true
ignore = {
  "542", -- an empty branch whose comment names a case that needs nothing is this code's idiom
}

-- Specs and their support run under busted (spec/runner.lua); the runners set FLEMMA_ROOT.
files["spec/**/*.lua"] = { std = "+busted", read_globals = { "FLEMMA_ROOT" } }
files["spec/runner.lua"] = { globals = { "arg" } } -- hands busted its arguments

-- Code for the isolated Lua 5.1 interpreter (native/src/isolate.cpp): plain Lua 5.1, no
-- Neovim; `isolate` is the interpreter's own library, and the runtime defines the small
-- `vim` and wraps `require` for the modules it shares with Neovim's side.
files["lua/flemma/isolated/**/*.lua"] = {
  std = "lua51",
  globals = { "vim", "require" },
  read_globals = { "isolate" },
}
