-- Shared helpers for specs: temporary directories, child Neovim processes, buffers.
local M = {}

M.root = FLEMMA_ROOT

--- The command that starts a Neovim of the same version as the one running the specs.
---@return string[]
function M.nvim_cmd()
  local prog = vim.v.progpath
  local version = prog:match("/%.deps/nvim%-([%d%.]+)/")
  if version then
    return { M.root .. "/scripts/nvim", version }
  end
  return { prog }
end

--- A fresh temporary directory, removed by M.cleanup().
local tmpdirs = {}
function M.tmpdir()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  tmpdirs[#tmpdirs + 1] = dir
  return vim.uv.fs_realpath(dir)
end

function M.cleanup()
  for _, d in ipairs(tmpdirs) do
    vim.fn.delete(d, "rf")
  end
  tmpdirs = {}
end

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, content)
  vim.fn.mkdir(vim.fs.dirname(path), "p")
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
end

--- Runs a child Neovim (headless, clean) with `rtp` prepended and the given Lua code
--- (a string run with -c "lua ..."); returns the vim.system result.
---@param opts { rtp?: string, lua: string, timeout?: integer, cwd?: string, env?: table }
function M.run_nvim(opts)
  local cmd = M.nvim_cmd()
  vim.list_extend(cmd, { "--headless", "--clean" })
  if opts.rtp then
    vim.list_extend(cmd, { "--cmd", "set rtp^=" .. vim.fn.fnameescape(opts.rtp) })
    vim.list_extend(cmd, { "--cmd", "runtime! plugin/flemma.lua" })
  end
  local script = vim.fn.tempname() .. ".lua"
  M.write_file(script, opts.lua)
  vim.list_extend(cmd, { "-c", "luafile " .. vim.fn.fnameescape(script), "-c", "qa!" })
  local res = vim.system(cmd, { text = true, cwd = opts.cwd, env = opts.env }):wait(opts.timeout or 30000)
  os.remove(script)
  return res
end

--- A scratch buffer with the given lines, in the current window.
function M.buffer(lines, name)
  local buf = vim.api.nvim_create_buf(true, false)
  if name then
    vim.api.nvim_buf_set_name(buf, name)
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines or {})
  vim.api.nvim_set_current_buf(buf)
  return buf
end

function M.lines(buf)
  return vim.api.nvim_buf_get_lines(buf or 0, 0, -1, false)
end

--- Waits (running the event loop) until fn() is truthy; fails with msg after timeout ms.
function M.wait_for(fn, timeout, msg)
  local ok = vim.wait(timeout or 5000, fn, 10)
  assert(ok, msg or "timed out waiting for a condition")
end

return M
