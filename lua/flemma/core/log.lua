--- The debug log: requests, responses and tool runs appended to
--- stdpath("log")/flemma.log while enabled (`:Flemma logging:enable [level]`). Off by
--- default. Every line passes through M.redact, so API keys never reach the file.
local util = require("flemma.core.util")

local M = {}
local H = {}

M.LEVELS = { "trace", "debug", "info", "warn", "error" }
H.rank = { trace = 1, debug = 2, info = 3, warn = 4, error = 5 }

H.level = nil -- nil: disabled
H.group = nil

--- The log file's path.
---@return string
function M.path()
  return vim.fs.joinpath(vim.fn.stdpath("log"), "flemma.log")
end

---@return string|nil level the active level, nil when logging is off
function M.level()
  return H.level
end

--- Removes secrets from a text (util.redact: every key Flemma resolved, the values of
--- `*_API_KEY`, `*_TOKEN`, `*_SECRET` variables of the environment, and the values of
--- authentication headers).
---@param text string
---@return string
M.redact = util.redact

function H.write(level, msg)
  local f = io.open(M.path(), "a")
  if not f then
    return
  end
  f:write(("%s [%s] %s\n"):format(os.date("%Y-%m-%d %H:%M:%S"), level:upper(), M.redact(msg)))
  f:close()
end

--- Appends a line when logging is on at `level` or below. Extra arguments format
--- `msg` (string.format); tables are shown with vim.inspect.
---@param level "trace"|"debug"|"info"|"warn"|"error"
---@param msg string
function M.log(level, msg, ...)
  if not H.level or H.rank[level] < H.rank[H.level] then
    return
  end
  if select("#", ...) > 0 then
    local args = { ... }
    for i = 1, select("#", ...) do
      if type(args[i]) == "table" then
        args[i] = vim.inspect(args[i], { newline = " ", indent = "" })
      elseif args[i] == nil then
        args[i] = "nil"
      end
    end
    msg = msg:format(unpack(args, 1, select("#", ...)))
  end
  H.write(level, msg)
end

for _, level in ipairs(M.LEVELS) do
  M[level] = function(msg, ...)
    M.log(level, msg, ...)
  end
end

--- Whether a line at `level` would be written (to skip building costly messages).
---@param level string
---@return boolean
function M.enabled(level)
  return H.level ~= nil and H.rank[level or "info"] >= H.rank[H.level]
end

-- What happens in every buffer comes from the User events: requests and tool runs.
function H.subscribe()
  H.group = vim.api.nvim_create_augroup("flemma.core.log", { clear = true })
  local function summary(data)
    if type(data) ~= "table" then
      return tostring(data)
    end
    local copy = {}
    for k, v in pairs(data) do
      if type(v) ~= "function" and type(v) ~= "userdata" then
        copy[k] = v
      end
    end
    return vim.inspect(copy, { newline = " ", indent = "" })
  end
  for _, ev in ipairs({ "FlemmaRequestSending", "FlemmaRequestFinished", "FlemmaToolExecuting", "FlemmaToolFinished" }) do
    vim.api.nvim_create_autocmd("User", {
      group = H.group,
      pattern = ev,
      callback = function(args)
        M.info("%s %s", ev, summary(args.data))
      end,
    })
  end
end

--- Turns logging on at `level` (default "info").
---@param level? string
function M.enable(level)
  level = level or "info"
  if not H.rank[level] then
    util.error(("logging level should be one of %s, not `%s`"):format(table.concat(M.LEVELS, ", "), level))
  end
  vim.fn.mkdir(vim.fs.dirname(M.path()), "p")
  H.level = level
  H.subscribe()
  M.info("logging enabled at level %s (Neovim %s)", level, tostring(vim.version()))
end

function M.disable()
  if H.level then
    M.info("logging disabled")
  end
  H.level = nil
  if H.group then
    pcall(vim.api.nvim_del_augroup_by_id, H.group)
    H.group = nil
  end
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["logging:enable"] = {
  desc = "log requests, responses (without keys) and tool runs to stdpath('log')/flemma.log",
  run = function(args)
    M.enable(args[1])
    util.notify(("logging at level %s to %s"):format(H.level, M.path()))
  end,
  complete = function(arglead)
    return vim.tbl_filter(function(l)
      return l:sub(1, #arglead) == arglead
    end, M.LEVELS)
  end,
}

M.commands["logging:disable"] = {
  desc = "stop logging",
  run = function()
    M.disable()
    util.notify("logging disabled")
  end,
}

M.commands["logging:open"] = {
  desc = "open the log file in a split",
  run = function()
    local path = M.path()
    if vim.uv.fs_stat(path) == nil then
      util.notify(("no log yet at %s: `:Flemma logging:enable` starts one"):format(path), vim.log.levels.WARN)
      return
    end
    vim.cmd("split " .. vim.fn.fnameescape(path))
  end,
}

return M
