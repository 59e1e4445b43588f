--- Backups of what the delete and move tools remove or replace: a copy of the file
--- in `stdpath("state")/flemma/backups/<the path, encoded>/<time>-<n>`, at most
--- MAX per file (the oldest go first). The tool's result names the copy.
local M = {}

M.MAX = 10

--- The folder holding the backups of `path` (absolute).
---@param path string
---@return string
function M.dir(path)
  local encoded = path:gsub("%%", "%%25"):gsub("/", "%%2F")
  return vim.fs.normalize(vim.fn.stdpath("state")) .. "/flemma/backups/" .. encoded
end

--- Copies the regular file at `path` into its backup folder and keeps the newest
--- MAX copies. Returns the copy's path, or nil and why.
---@param path string absolute
---@return string|nil copy
---@return string|nil err
function M.save(path)
  local dir = M.dir(path)
  local ok, err = require("flemma.tools.builtin.fs").mkdir_p(dir)
  if not ok then
    return nil, err
  end
  local sec, usec = vim.uv.gettimeofday()
  local copy = ("%s/%d%06d"):format(dir, sec, usec)
  local n = 0
  while vim.uv.fs_stat(copy .. "-" .. n) do
    n = n + 1
  end
  copy = copy .. "-" .. n
  local copied, cerr = vim.uv.fs_copyfile(path, copy, { excl = true })
  if not copied then
    return nil, ("cannot back up %s: %s"):format(path, cerr)
  end
  local names = {}
  for name in vim.fs.dir(dir) do
    names[#names + 1] = name
  end
  table.sort(names, function(a, b)
    local sa, na = a:match("^(%d+)%-(%d+)$")
    local sb, nb = b:match("^(%d+)%-(%d+)$")
    if sa and sb and sa ~= sb then
      return tonumber(sa) < tonumber(sb)
    end
    if sa and sb then
      return tonumber(na) < tonumber(nb)
    end
    return a < b
  end)
  for i = 1, #names - M.MAX do
    vim.uv.fs_unlink(dir .. "/" .. names[i])
  end
  return copy
end

return M
