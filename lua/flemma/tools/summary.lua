--- The one-line summary of a tool call's arguments that tools without their own
--- preview get (`:help flemma-tools-api`): the first field that says what the call
--- is about, or "" when none does.
local M = {}
local H = {}

-- The fields tried after `questions` and `pattern`, in this order.
H.FIELDS = { "command", "file_path", "notebook_path", "path", "url", "query", "name", "id" }

function H.text(v)
  if type(v) == "string" then
    return v ~= "" and v or nil
  elseif type(v) == "number" then
    return tostring(v)
  end
  return nil
end

--- A path as it is shown: relative to the working directory when inside it, `~/` for
--- the home directory, else as given.
---@param path string
---@return string
function M.display_path(path)
  local cwd = vim.fs.normalize(vim.fn.getcwd())
  local p = vim.fs.normalize(path)
  if p == cwd then
    return "."
  end
  if p:sub(1, #cwd + 1) == cwd .. "/" then
    return p:sub(#cwd + 2)
  end
  local home = vim.uv.os_homedir()
  if home and home ~= "" and p:sub(1, #home + 1) == home .. "/" then
    return "~/" .. p:sub(#home + 2)
  end
  return path
end

--- The default summary of a call's arguments and the fields it used.
---@param args table|nil
---@return string summary
---@return string[] fields
function M.pick(args)
  if type(args) ~= "table" then
    return "", {}
  end
  local q = args.questions
  if type(q) == "table" and #q > 0 then
    return ("%d question%s"):format(#q, #q == 1 and "" or "s"), { "questions" }
  end
  local pattern = H.text(args.pattern)
  if pattern then
    local path = H.text(args.path)
    if path then
      return pattern .. " in " .. M.display_path(path), { "pattern", "path" }
    end
    return pattern, { "pattern" }
  end
  for _, field in ipairs(H.FIELDS) do
    local v = H.text(args[field])
    if v then
      return v, { field }
    end
  end
  return "", {}
end

--- The default summary of a call's arguments.
---@param args table|nil
---@return string
function M.default_summary(args)
  return (M.pick(args))
end

--- The generic preview of a call: its default summary first, then the other fields as
--- `key="value"` (flemma.tools.preview.generic), so that nothing of the call is hidden.
---@param args table
---@return string
function M.generic_preview(args)
  local summary, used = M.pick(args)
  if summary == "" then
    return require("flemma.tools.preview").generic(args)
  end
  local rest = {}
  for k, v in pairs(args) do
    if not vim.tbl_contains(used, k) then
      rest[k] = v
    end
  end
  local others = require("flemma.tools.preview").generic(rest)
  return others == "" and summary or (summary .. ", " .. others)
end

return M
