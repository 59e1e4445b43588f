-- Runs busted inside a real headless Neovim:
--   nvim --headless --clean -l spec/runner.lua [busted options] [spec files or dirs]
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")

package.path = table.concat({
  root .. "/lua/?.lua",
  root .. "/lua/?/init.lua",
  root .. "/?.lua",
  "/usr/share/lua/5.1/?.lua",
  "/usr/share/lua/5.1/?/init.lua",
  package.path,
}, ";")
package.cpath = "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;" .. package.cpath

vim.opt.runtimepath:prepend(root)
vim.opt.shadafile = "NONE"
vim.opt.swapfile = false
vim.cmd("runtime! plugin/flemma.lua")

_G.FLEMMA_ROOT = root
-- FLEMMA_LIBRARY=<path> tests a library built elsewhere (e.g. build-asan/).
if os.getenv("FLEMMA_LIBRARY") and os.getenv("FLEMMA_LIBRARY") ~= "" then
  vim.g.flemma_library_path = os.getenv("FLEMMA_LIBRARY")
end
if #arg == 0 then
  arg[1] = root .. "/spec"
end
table.insert(arg, 1, "--output=spec.support.output")
table.insert(arg, 1, "--pattern=_spec")

local ok, err = pcall(require("busted.runner"), { standalone = false })
if not ok then
  io.stderr:write("busted failed: " .. tostring(err) .. "\n")
  os.exit(2)
end
