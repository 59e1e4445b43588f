--- :Flemma {subcommand} [args]: the whole table of subcommands, with completion,
--- gathered from the `commands` tables of the modules that implement them.
local util = require("flemma.core.util")

local M = {}

---@class flemma.Subcommand
---@field run fun(args: string[], opts: table)
---@field complete? fun(arglead: string, args: string[]): string[]
---@field desc? string
---@field chat? boolean it reads or writes the conversation of the current buffer: refused unless that buffer's filetype is `chat`
---@field review? boolean it also runs in the buffers of a diff review (b:flemma_review names their chat and call)

---@type table<string, flemma.Subcommand>
local subcommands = {}

-- The modules that implement subcommands: each has a `commands` table (name -> spec),
-- gathered here on the first :Flemma. This module owns the whole table: no module below
-- registers itself (dependencies point down: see doc/architecture.md).
local modules = {
  "flemma.cycle.commands",
  "flemma.policy.sandbox",
  "flemma.core.log",
  "flemma.chat.trust",
  "flemma.provider.switch",
  "flemma.provider.estimate",
  "flemma.core.build",
  "flemma.tools.mcp",
  "flemma.policy.audit",
  "flemma.policy.remembered",
  "flemma.ui.review",
}
local loaded = false

local function load_modules()
  if loaded then
    return
  end
  loaded = true
  for _, name in ipairs(modules) do
    for sub, spec in pairs(require(name).commands) do
      subcommands[sub] = spec
    end
  end
end

--- Adds a subcommand (for plugins built on Flemma); one of Flemma's own keeps its name.
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
  if sub.chat and vim.bo.filetype ~= "chat" and not (sub.review and vim.b.flemma_review) then
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
