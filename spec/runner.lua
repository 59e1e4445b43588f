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

-- Exit status: 0 when every spec passed, 1 when some failed (after the summary line),
-- 2 when busted itself failed (no summary). scripts/test.sh counts anything else, a
-- signal above all, as a failure of its own.
local _, err = pcall(require("busted.runner"), { standalone = false })
local summary = _G.FLEMMA_SPEC_SUMMARY
if not summary then
  io.stderr:write("busted failed: " .. tostring(err) .. "\n")
  os.exit(2)
end
os.exit((summary.failed + summary.errors) > 0 and 1 or 0)
