--- :Flemma {subcommand} [args]: a table of subcommands, each registered by the
--- module that implements it, with completion.
local util = require("flemma.core.util")

local M = {}

---@class flemma.Subcommand
---@field run fun(args: string[], opts: table)
---@field complete? fun(arglead: string, args: string[]): string[]
---@field desc? string
---@field chat? boolean it reads or writes the conversation of the current buffer: refused unless that buffer's filetype is `chat`

---@type table<string, flemma.Subcommand>
local subcommands = {}

-- Modules that register subcommands when loaded; loaded on the first :Flemma.
local modules = {
  "flemma.cycle_commands",
  "flemma.policy.sandbox",
  "flemma.core.log",
  "flemma.policy.trust",
  "flemma.provider.switch",
  "flemma.provider.estimate",
  "flemma.chat.templates",
  "flemma.core.build",
  "flemma.tools.mcp",
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

--- One line per subcommand: its name and what it does.
---@return string
function M.summary()
  local names = M.names()
  local width = 0
  for _, n in ipairs(names) do
    width = math.max(width, #n)
  end
  local lines = { "usage: :Flemma {subcommand} [args]" }
  for _, n in ipairs(names) do
    lines[#lines + 1] = ("  %-" .. width .. "s  %s"):format(n, subcommands[n].desc or "")
  end
  return table.concat(lines, "\n")
end

function M.run(opts)
  local args = vim.deepcopy(opts.fargs)
  local name = table.remove(args, 1)
  if not name then
    util.notify(M.summary())
    return
  end
  load_modules()
  local sub = subcommands[name]
  if not sub then
    local guess = require("flemma.isolated.presets").suggest(name, M.names())
    util.notify(
      ("unknown subcommand `%s`%s; `:Flemma` lists them all"):format(
        name,
        guess and ("; did you mean `%s`?"):format(guess) or ""
      ),
      vim.log.levels.ERROR
    )
    return
  end
  if sub.chat and vim.bo.filetype ~= "chat" then
    -- One short line (it fits the message area of an 80-column Neovim).
    util.notify(
      (":Flemma %s: not a chat (filetype %s)"):format(name, vim.bo.filetype == "" and "none" or vim.bo.filetype),
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
  chat = true,
  desc = "show the buffer's effective provider, model, parameters, sandbox, tools, approval and autopilot, and where each came from",
  run = function()
    require("flemma.ui.status").show(vim.api.nvim_get_current_buf())
  end,
})

return M
