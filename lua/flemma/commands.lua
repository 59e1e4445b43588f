--- :Flemma {subcommand} [args]: a table of subcommands, each registered by the
--- module that implements it, with completion.
local util = require("flemma.util")

local M = {}

---@class flemma.Subcommand
---@field run fun(args: string[], opts: table)
---@field complete? fun(arglead: string, args: string[]): string[]
---@field desc? string

---@type table<string, flemma.Subcommand>
local subcommands = {}

-- Modules that register subcommands when loaded; loaded on the first :Flemma.
local modules = {
  "flemma.cycle_commands",
  "flemma.sandbox",
}
local loaded = false

local function load_modules()
  if loaded then
    return
  end
  loaded = true
  for _, name in ipairs(modules) do
    require(name)
  end
end

---@param name string
---@param spec flemma.Subcommand
function M.register(name, spec)
  subcommands[name] = spec
end

---@return string[]
function M.names()
  load_modules()
  local names = vim.tbl_keys(subcommands)
  table.sort(names)
  return names
end

function M.run(opts)
  local args = vim.deepcopy(opts.fargs)
  local name = table.remove(args, 1)
  if not name then
    util.notify("usage: :Flemma {subcommand}; one of: " .. table.concat(M.names(), ", "), vim.log.levels.WARN)
    return
  end
  load_modules()
  local sub = subcommands[name]
  if not sub then
    util.notify(
      ("unknown subcommand `%s`; one of: %s"):format(name, table.concat(M.names(), ", ")),
      vim.log.levels.ERROR
    )
    return
  end
  local ok, err = pcall(sub.run, args, opts)
  if not ok then
    util.notify(util.message(err), vim.log.levels.ERROR)
  end
end

function M.complete(arglead, cmdline, _)
  local words = vim.split(cmdline:gsub("^%s*%S+%s*", ""), "%s+", { trimempty = false })
  if #words <= 1 then
    return vim.tbl_filter(function(n)
      return n:sub(1, #arglead) == arglead
    end, M.names())
  end
  local sub = subcommands[words[1]]
  if sub and sub.complete then
    return sub.complete(arglead, vim.list_slice(words, 2))
  end
  return {}
end

M.register("status", {
  desc = "show the state of the native core and the buffer",
  run = function()
    local native = require("flemma.native")
    native.reset()
    local ok, err = native.available()
    local lines = {}
    if ok then
      lines[#lines + 1] = ("native core %s (ABI %d) at %s"):format(native.version(), native.abi_version(), native.library_path())
    else
      lines[#lines + 1] = "native core unavailable: " .. err
    end
    local config = require("flemma.config").get()
    lines[#lines + 1] = ("provider: %s%s"):format(config.provider, config.model and (" / " .. config.model) or "")
    util.notify(table.concat(lines, "\n"))
  end,
})

return M
