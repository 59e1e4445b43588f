--- The generic preview of a tool call, for tools without a `format_preview`:
--- `key1="val1", key2=5, opts={a, b}, files=[3 items]`. Scalars come first, sorted
--- by key; table values follow, sorted by key, as their sorted keys or their length.
local M = {}
local H = {}

function H.scalar(value)
  if type(value) == "string" then
    return '"' .. value .. '"'
  end
  return tostring(value)
end

function H.table_summary(value)
  if vim.islist(value) then
    local n = #value
    return ("[%d %s]"):format(n, n == 1 and "item" or "items")
  end
  local keys = {}
  for k in pairs(value) do
    keys[#keys + 1] = tostring(k)
  end
  table.sort(keys)
  return "{" .. table.concat(keys, ", ") .. "}"
end

--- The generic one-line summary of a tool's input (JSON nulls are left out).
---@param input table|nil
---@return string
function M.generic(input)
  if type(input) ~= "table" then
    return input == nil and "" or H.scalar(input)
  end
  local scalars, tables = {}, {}
  for k, v in pairs(input) do
    if v ~= vim.NIL and type(v) ~= "function" then
      local list = type(v) == "table" and tables or scalars
      list[#list + 1] = tostring(k)
    end
  end
  table.sort(scalars)
  table.sort(tables)
  local parts = {}
  for _, k in ipairs(scalars) do
    parts[#parts + 1] = k .. "=" .. H.scalar(input[k])
  end
  for _, k in ipairs(tables) do
    parts[#parts + 1] = k .. "=" .. H.table_summary(input[k])
  end
  return table.concat(parts, ", ")
end

--- Joins a preview's main part with an optional `# comment` (label, delay...).
---@param main string
---@param comment string|nil
---@return string
function M.with_comment(main, comment)
  if comment == nil or comment == "" or comment == vim.NIL then
    return main
  end
  return main .. " # " .. comment
end

--- Collapses a multi-line preview into one line, newlines shown as the `eol`
--- character of 'listchars' (or ↵).
---@param text string
---@return string
function M.one_line(text)
  if not text:find("[\r\n]") then
    return text
  end
  local ok, lcs = pcall(function()
    return vim.opt.listchars:get()
  end)
  local eol = ok and lcs and lcs.eol or "↵"
  text = text:gsub("\r\n", "\n"):gsub("[\r\n]", eol)
  return text
end

return M
