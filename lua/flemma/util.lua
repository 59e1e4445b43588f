--- Small helpers shared by every module: errors, notifications, safe callbacks.
local M = {}

local PREFIX = "(flemma) "

--- Raises an error meant for the user: no file and line noise.
---@param msg string
function M.error(msg)
  error(PREFIX .. msg, 0)
end

--- Notifies the user with the plugin's prefix. Safe to call from fast callbacks.
---@param msg string
---@param level? integer vim.log.levels.*
function M.notify(msg, level)
  level = level or vim.log.levels.INFO
  if vim.in_fast_event() then
    vim.schedule(function()
      vim.notify(PREFIX .. msg, level)
    end)
  else
    vim.notify(PREFIX .. msg, level)
  end
end

function M.warn(msg)
  M.notify(msg, vim.log.levels.WARN)
end

--- Strips the plugin prefix from an error value, for messages that get wrapped again.
---@param err any
---@return string
function M.message(err)
  local s = type(err) == "string" and err or vim.inspect(err)
  if s:sub(1, #PREFIX) == PREFIX then
    s = s:sub(#PREFIX + 1)
  end
  return s
end

--- Wraps fn so that an error inside it (e.g. in an event-loop callback) is reported
--- with a traceback instead of breaking the editor.
---@param fn function
---@param what string what was running, for the message
---@return function
function M.safe(fn, what)
  return function(...)
    local ok, err = xpcall(fn, debug.traceback, ...)
    if not ok then
      M.notify(what .. " failed: " .. tostring(err), vim.log.levels.ERROR)
    end
    return ok
  end
end

--- How a buffer is named in messages: its file relative to the cwd (or ~), else
--- "buffer N".
---@param bufnr integer
---@return string
function M.buffer_name(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  return name ~= "" and vim.fn.fnamemodify(name, ":~:.") or ("buffer " .. bufnr)
end

--- Whether vim.ui.select can ask someone: a UI is attached, or a plugin (or a
--- spec) replaced the built-in one, which would block on inputlist() without a UI.
---@return boolean
function M.can_ask()
  if #vim.api.nvim_list_uis() > 0 then
    return true
  end
  local info = debug.getinfo(vim.ui.select, "S")
  return not (info and info.source and info.source:match("[/\\]vim[/\\]ui%.lua$"))
end

--- The plugin's root directory (the folder holding lua/, plugin/ and build/).
---@return string
function M.root()
  local src = debug.getinfo(1, "S").source
  src = src:sub(1, 1) == "@" and src:sub(2) or src
  local dir = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(src, ":p")))
  return vim.fs.dirname(vim.fs.dirname(dir))
end

--- A shallow copy of a table.
---@generic T: table
---@param t T
---@return T
function M.copy(t)
  local c = {}
  for k, v in pairs(t) do
    c[k] = v
  end
  return c
end

local sources_cache = {}

--- Lua files of this plugin as the JSON text an isolated interpreter loads
--- (`{ [module] = source }`), read once per set of modules.
---@param modules table<string, string> module name -> path below lua/flemma/
---@return string
function M.module_sources_json(modules)
  local names = vim.tbl_keys(modules)
  table.sort(names)
  local key = table.concat(names, "\0")
  if not sources_cache[key] then
    local dir = M.root() .. "/lua/flemma/"
    local sources = {}
    for name, file in pairs(modules) do
      local f = assert(io.open(dir .. file, "rb"))
      sources[name] = f:read("*a")
      f:close()
    end
    sources_cache[key] = vim.json.encode(sources)
  end
  return sources_cache[key]
end

return M
