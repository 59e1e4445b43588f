--- Trusting a chat file's frontmatter, in the spirit of vim.secure.trust: a chat file
--- must not approve its own tool calls. Frontmatter may narrow the approval policy
--- freely; what widens it (approves a call the global policy would not, or any
--- auto_approve function) holds only once the user trusts that frontmatter in that
--- file. An answer is remembered for the chat file's real path (symlinks resolved)
--- together with the SHA-256 of its frontmatter text, in stdpath("state")/flemma/trust:
--- editing the conversation keeps it; editing the frontmatter, or the same text in
--- another file (a copy, a stranger's chat, the file moved or renamed), asks again.
--- A buffer without a file (unnamed) is answered for that buffer only, until Neovim
--- exits: nothing is written, and nothing carries over to a file it is saved as.
--- Entries of the older store, keyed by the text alone, no longer grant trust and are
--- dropped at the next write. flemma.consent asks, and keeps the answers.
local consent = require("flemma.policy.consent")
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@alias flemma.trust.State "trusted"|"denied"

-- Answers are kept by flemma.consent under this topic: for a chat file in its store,
-- by the file's real path and the frontmatter's hash; for a buffer without a file for
-- that buffer, by the hash.
H.TOPIC = "trust"
H.KIND = "flemma.trust"
H.STATE = { yes = "trusted", no = "denied" }
H.ANSWER = { trusted = "yes", denied = "no" }
-- Per buffer: the frontmatter hash whose ignored widenings were reported, and which.
-- H.noticed: the `trust_noticed` field of each buffer's session record (flemma.core.session).

function H.bufnr(bufnr)
  if type(bufnr) ~= "number" or bufnr == 0 then
    return vim.api.nvim_get_current_buf()
  end
  return bufnr
end

--- The SHA-256 of the buffer's frontmatter (its language and code), or nil when it
--- has none.
---@param bufnr? integer
---@return string|nil
function M.hash(bufnr)
  bufnr = H.bufnr(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return nil
  end
  local ok, doc = pcall(require("flemma.chat.document").get, bufnr)
  local fm = ok and type(doc) == "table" and doc.frontmatter or nil
  if not fm or type(fm.code) ~= "string" then
    return nil
  end
  return vim.fn.sha256(tostring(fm.lang) .. "\n" .. fm.code)
end

--- The real path of the buffer's file (symlinks resolved; for a file not written yet,
--- its directory's real path and its name), or nil for a buffer without a file.
---@param bufnr? integer
---@return string|nil
function M.path(bufnr)
  bufnr = H.bufnr(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= "" then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == "" or name:find("^%a[%w+.-]*://") then
    return nil
  end
  local abs = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local real = vim.uv.fs_realpath(abs)
  if not real then
    local dir = vim.uv.fs_realpath(vim.fs.dirname(abs))
    real = dir and vim.fs.joinpath(dir, vim.fs.basename(abs)) or abs
  end
  return real
end

--- What an answer about the buffer is kept under: { hash, path?, id }, or nil when
--- the buffer has no frontmatter. `id` names the pair in this session.
function H.key(bufnr)
  local hash = M.hash(bufnr)
  if not hash then
    return nil
  end
  local path = M.path(bufnr)
  if path and path:find("[\r\n]") then
    path = nil -- cannot be written on one line: answered for this buffer only
  end
  local id = path and ("file\0" .. path .. "\0" .. hash) or ("buffer\0" .. bufnr .. "\0" .. hash)
  return { hash = hash, path = path, id = id }
end

-- The remembered answer about the frontmatter of key (H.key): "yes", "no" or nil.
function H.answer(bufnr, key)
  if key.path then
    return consent.answer(nil, H.TOPIC, key.path, key.hash)
  end
  return consent.answer(bufnr, H.TOPIC, key.hash)
end

--- The answer for the buffer's frontmatter: "trusted", "denied", or nil (not asked).
---@param bufnr? integer
---@return flemma.trust.State|nil
function M.state(bufnr)
  bufnr = H.bufnr(bufnr)
  local key = H.key(bufnr)
  local answer = key and H.answer(bufnr, key)
  return answer and H.STATE[answer] or nil
end

--- Whether the buffer's frontmatter is trusted to widen the approval policy.
---@param bufnr? integer
---@return boolean
function M.is_trusted(bufnr)
  return M.state(bufnr) == "trusted"
end

--- Remembers an answer for the buffer's frontmatter; nil forgets it (ask again).
---@param bufnr? integer
---@param state flemma.trust.State|nil
---@return string|nil hash nil when the buffer has no frontmatter
function M.set(bufnr, state)
  bufnr = H.bufnr(bufnr)
  local key = H.key(bufnr)
  if not key then
    return nil
  end
  if key.path then
    consent.set(nil, H.TOPIC, key.path, state and H.ANSWER[state], key.hash)
  else
    consent.set(bufnr, H.TOPIC, key.hash, state and H.ANSWER[state]) -- this buffer, this session
  end
  session.set(bufnr, "trust_noticed", nil)
  consent.close(bufnr, H.KIND) -- an answer given by command ends a prompt left open
  return key.hash
end

---------------------------------------------------------------------------------------
-- What a frontmatter widens
---------------------------------------------------------------------------------------

---@class flemma.trust.Widening
---@field fn boolean the frontmatter approves with its own function
---@field tools string[] tools its list approves that the configuration's does not

--- What the frontmatter options would approve beyond the configuration: nil when
--- they only narrow it.
---@param opts flemma.frontmatter.Options|nil
---@param config? flemma.Config
---@return flemma.trust.Widening|nil
function M.widening(opts, config)
  if type(opts) ~= "table" or opts.auto_approve == nil then
    return nil
  end
  if type(opts.auto_approve) == "function" then
    return { fn = true, tools = {} }
  end
  if type(opts.auto_approve) ~= "table" then
    return nil
  end
  config = config or require("flemma.core.config").get()
  local tools_cfg = config.tools or {}
  local presets = require("flemma.isolated.presets")
  local ok, mine = pcall(presets.expand, opts.auto_approve, {
    presets = tools_cfg.presets,
    excluded = opts.auto_approve_excluded,
  })
  if not ok then
    return nil -- an unknown preset approves nothing (the frontmatter reports it)
  end
  local global
  if tools_cfg.require_approval == false then
    return nil -- the configuration approves every call already
  elseif type(tools_cfg.auto_approve) == "table" then
    global = presets.expand(tools_cfg.auto_approve, { presets = tools_cfg.presets })
  end
  local out = {}
  for tool in pairs(mine.approve) do
    if not mine.deny[tool] and (not global or presets.decide(global, tool) ~= "approve") then
      out[#out + 1] = tool
    end
  end
  -- Per-command and per-path rules (`bash(git status)`) the configuration has not.
  for tool, rules in pairs(mine.approve_rules or {}) do
    if not mine.deny[tool] and not (global and presets.decide(global, tool) == "approve") then
      local have = global and global.approve_rules and global.approve_rules[tool] or {}
      for _, rule in ipairs(rules) do
        if not vim.tbl_contains(have, rule) then
          out[#out + 1] = ("%s(%s)"):format(tool, rule)
        end
      end
    end
  end
  -- Risk levels and MCP entries (`risk:medium`, `$mcp`, `github:*`) the configuration
  -- has not: they approve tools of their own.
  for level in pairs(mine.approve_risks or {}) do
    if not (global and (global.approve_risks or {})[level]) then
      out[#out + 1] = "risk:" .. level
    end
  end
  for _, prefix in ipairs(mine.approve_prefixes or {}) do
    if not (global and vim.tbl_contains(global.approve_prefixes or {}, prefix)) then
      out[#out + 1] = prefix == "" and "$mcp" or (prefix .. "*")
    end
  end
  if #out == 0 then
    return nil
  end
  table.sort(out)
  out = vim.fn.uniq(out)
  return { fn = false, tools = out }
end

function H.describe(w)
  if w.fn then
    return "approves tool calls with its own function (any call it answers true for, outside the project too)"
  end
  return ("auto-approves %s, which your configuration does not"):format(table.concat(
    vim.tbl_map(function(t)
      return "`" .. t .. "`"
    end, w.tools),
    ", "
  ))
end

--- Says once per frontmatter text and file that an approval it gave was ignored (not trusted).
---@param bufnr integer|nil
---@param tool_name string
function M.ignored(bufnr, tool_name)
  bufnr = H.bufnr(bufnr)
  local key = H.key(bufnr)
  local id = key and key.id or ""
  local n = session.field(bufnr, "trust_noticed")
  if not n or n.id ~= id then
    n = { id = id, tools = {} }
    session.get(bufnr).trust_noticed = n
  end
  if n.tools[tool_name] then
    return
  end
  n.tools[tool_name] = true
  local why = M.state(bufnr) == "denied" and "you did not trust it" or "it is not trusted"
  util.warn(
    ("the frontmatter of %s approves `%s`, but %s, so the call waits for you (:Flemma trust to let it approve)"):format(
      util.buffer_name(bufnr),
      tool_name,
      why
    )
  )
end

---------------------------------------------------------------------------------------
-- Asking
---------------------------------------------------------------------------------------

M.CHOICES = { "Trust this frontmatter", "Do not trust it" }

--- Called before the cycle acts on a buffer whose frontmatter evaluated: when the
--- frontmatter widens the policy and was never answered, asks once (vim.ui.select)
--- and calls `resume` after the answer. Returns whether the cycle may go on now.
---@param bufnr integer
---@param opts flemma.frontmatter.Options
---@param resume? fun()
---@return boolean
function M.settle(bufnr, opts, resume)
  local w = M.widening(opts)
  if not w or M.state(bufnr) ~= nil then
    return true
  end
  local function busy()
    util.notify("answer whether to trust this frontmatter first (or use :Flemma trust / :Flemma untrust)")
    return false
  end
  if not resume then
    return not consent.waiting(bufnr, H.KIND) or busy()
  end
  local key = H.key(bufnr)
  if not key then
    return true -- no frontmatter text to trust: the widening is ignored
  end
  local asked, err = consent.ask(bufnr, {
    topic = H.TOPIC,
    key = key.path or key.hash,
    hash = key.path and key.hash or nil,
    keep = "all", -- a dismissal: not asked again in this session
    prompt = ("The frontmatter of %s %s. Trust it?"):format(util.buffer_name(bufnr), H.describe(w)),
    choices = M.CHOICES,
    kind = H.KIND,
    still = function()
      local now = H.key(bufnr)
      return now ~= nil and now.id == key.id -- else the answer was about another frontmatter or file
    end,
    answered = function(answer)
      if answer then
        session.set(bufnr, "trust_noticed", nil) -- the answer changed what is ignored
      end
      if answer == "yes" then
        util.notify("trusted the frontmatter of " .. util.buffer_name(bufnr))
      elseif answer == "no" then
        util.notify(
          ("not trusted: the frontmatter of %s approves nothing beyond your configuration (its narrowing still applies; :Flemma trust to change it)"):format(
            util.buffer_name(bufnr)
          )
        )
      end
      resume()
    end,
  })
  if asked == "busy" then
    return busy()
  elseif asked == "failed" then
    util.warn("cannot ask whether to trust the frontmatter: " .. tostring(err))
    return true
  end
  return asked ~= "asked" -- no UI: not asked, the widening is ignored (M.ignored says so)
end

---------------------------------------------------------------------------------------
-- :Flemma trust / untrust
---------------------------------------------------------------------------------------

function H.command(state)
  local bufnr = vim.api.nvim_get_current_buf()
  local opts, err = require("flemma.chat.frontmatter").get(bufnr)
  if not opts then
    util.error(("the frontmatter fails, so there is nothing to trust: %s"):format(err))
  end
  if not M.hash(bufnr) then
    util.error("this buffer has no frontmatter")
  end
  M.set(bufnr, state)
  local w = M.widening(opts)
  if state == "trusted" then
    util.notify(
      ("trusted the frontmatter of %s%s"):format(
        util.buffer_name(bufnr),
        w and (": it " .. H.describe(w)) or " (it only narrows the policy)"
      )
    )
  else
    util.notify(
      ("the frontmatter of %s is not trusted: it approves nothing beyond your configuration"):format(
        util.buffer_name(bufnr)
      )
    )
  end
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["trust"] = {
  chat = true,
  desc = "let this buffer's frontmatter approve tool calls beyond your configuration",
  run = function()
    H.command("trusted")
  end,
}
M.commands["untrust"] = {
  chat = true,
  desc = "stop trusting this buffer's frontmatter (its approvals beyond your configuration are ignored)",
  run = function()
    H.command("denied")
  end,
}

return M
