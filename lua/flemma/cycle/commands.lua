--- :Flemma subcommands of the tool cycle.
local util = require("flemma.core.util")

local M = {}
local H = {}

local function cycle()
  return require("flemma.cycle")
end

--- The placeholder under the cursor, else the first pending one.
local function target_placeholder(bufnr)
  local line = vim.api.nvim_win_get_cursor(0)[1]
  local first_pending
  for _, part in ipairs(cycle()._placeholders(bufnr)) do
    if line >= part.first_line and line <= part.last_line then
      return part
    end
    if part.status == "pending" and not first_pending then
      first_pending = part
    end
  end
  return first_pending
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["send"] = {
  chat = true,
  desc = "next step of the tool cycle, or send",
  run = function()
    cycle().advance(0)
  end,
}

M.commands["cancel"] = {
  chat = true,
  desc = "cancel the request or the running tools",
  run = function()
    if require("flemma.cycle.send").cancel(0) then
      util.notify("request cancelled")
      return
    end
    local n = cycle().cancel(0)
    util.notify(n > 0 and ("cancelled %d tool(s)"):format(n) or "nothing is running")
  end,
}

M.commands["usage"] = {
  desc = "tokens and cost of the last response, the buffer and the session",
  run = function()
    util.notify(table.concat(require("flemma.provider.usage").report(0), "\n"))
  end,
}

M.commands["tool:execute"] = {
  chat = true,
  desc = "execute or resolve the tool block under the cursor",
  run = function()
    cycle().execute_at_cursor(0)
  end,
}

--- The chat and the call a command decides: in the buffer of a diff review, its chat
--- and call; in a chat, the placeholder under the cursor, else the first pending one
--- (nil when there is none).
---@return integer bufnr
---@return string|nil id
local function target_call()
  local bufnr = vim.api.nvim_get_current_buf()
  local r = vim.b[bufnr].flemma_review
  if type(r) == "table" and type(r.chat) == "number" and type(r.id) == "string" then
    -- Only the buffers of a review that is open for that chat's call.
    local rec = vim.api.nvim_buf_is_valid(r.chat) and require("flemma.tools.review").get(r.chat, r.id)
    if not (rec and rec.buf and vim.bo[r.chat].filetype == "chat") then
      util.error("this diff review is closed")
    end
    return r.chat, r.id
  end
  local part = target_placeholder(bufnr)
  return bufnr, part and part.id
end

M.commands["tool:approve"] = {
  chat = true,
  review = true,
  desc = "approve the placeholder under the cursor (or the first pending one); in a diff review, what it shows; `always`: and remember a rule for it",
  complete = function(arglead, args)
    if #args > 1 then
      return {}
    end
    return vim.tbl_filter(function(x)
      return x:sub(1, #arglead) == arglead
    end, { "always" })
  end,
  run = function(args)
    local bufnr, id = target_call()
    if args and args[1] == "always" then
      return M.approve_always(bufnr, id)
    elseif args and args[1] ~= nil then
      util.error(("tool:approve takes `always` or nothing, not %q"):format(args[1]))
    end
    if not require("flemma.chat.gate").check(bufnr) then
      return
    end
    if not id then
      util.error("no tool placeholder to approve")
    end
    -- An open diff review of the call: what its proposed side shows is what runs.
    require("flemma.tools.review").accept(bufnr, id)
    cycle().set_status(bufnr, id, "approved", "")
  end,
}

M.REMEMBER_CHOICES = { frontmatter = "this chat's frontmatter", config = "my configuration (all chats, kept)" }

-- The tool and input of call `id`: its tool use, or for a nested call (tools.call)
-- waiting under its parent, what the chat's session record keeps of it.
function H.call_of(bufnr, id)
  for _, msg in ipairs(require("flemma.chat.document").get(bufnr).messages) do
    for _, p in ipairs(msg.parts) do
      if p.kind == "tool_use" and p.id == id then
        return { name = p.name, input = p.input }
      end
    end
  end
  local nested = require("flemma.core.session").field(bufnr, "nested_calls")
  local entry = nested and nested[id]
  if not entry then
    util.error(("`%s` has no tool use"):format(id))
  end
  return { name = entry.name, input = entry.args }
end

-- Where the rules may go (the vim.ui.select items); raises when nowhere.
function H.remember_items(bufnr, shown)
  local items, problems = {}, {}
  local fm_problem = require("flemma.tools.remember").frontmatter_problem(bufnr)
  if fm_problem then
    problems[#problems + 1] = fm_problem
  else
    items[#items + 1] = M.REMEMBER_CHOICES.frontmatter
  end
  if type(require("flemma.core.config").get_setup().tools.auto_approve) == "table" then
    items[#items + 1] = M.REMEMBER_CHOICES.config
  else
    problems[#problems + 1] = "tools.auto_approve is a function or module"
  end
  if #items == 0 then
    util.error(("nowhere to remember %s: %s"):format(shown, table.concat(problems, "; ")))
  end
  return items
end

-- The user's pick: approves call `id` (still pending) and adds the rules there.
function H.remember_chosen(bufnr, id, rules, choice)
  local remember = require("flemma.tools.remember")
  local shown = table.concat(rules, ", ")
  local now
  for _, p in ipairs(cycle()._placeholders(bufnr)) do
    if p.id == id then
      now = p
    end
  end
  if not now or now.status ~= "pending" then
    util.error(("`%s` is no longer pending; nothing approved or added"):format(id))
  end
  if choice == M.REMEMBER_CHOICES.frontmatter then
    remember.add_to_frontmatter(bufnr, rules)
    -- The frontmatter's edit and the approval are two undo steps: `u` takes the
    -- rule out again and leaves the call approved.
    vim.api.nvim_buf_call(bufnr, function()
      vim.cmd("let &l:undolevels = &l:undolevels")
    end)
    require("flemma.tools.review").accept(bufnr, id)
    cycle().set_status(bufnr, id, "approved", "")
    util.notify(
      ("approved `%s`; added %s to this chat's frontmatter (flemma.opt.tools.auto_approve)"):format(id, shown)
    )
    return
  end
  local path = remember.add_to_config(rules)
  require("flemma.tools.review").accept(bufnr, id)
  cycle().set_status(bufnr, id, "approved", "")
  util.notify(
    ("approved `%s`; added %s to your configuration's rules in %s (:Flemma tool:rules)"):format(
      id,
      shown,
      vim.fn.fnamemodify(path, ":~")
    )
  )
end

--- "Approve and remember": approves the pending placeholder under the cursor (or the
--- first pending one) and adds the narrowest allow rule for its call
--- (flemma.tools.remember) where the user picks with vim.ui.select: this chat's
--- frontmatter or the user's configuration (a file read at every setup()). One line says
--- what was added and where.
--- Nothing changes when the user picks nothing or no rule can be made.
--- With a diff review of the call open, what the review shows is what runs.
---@param bufnr integer the chat
---@param id? string the call (default: the placeholder under the cursor, else the first pending one)
function M.approve_always(bufnr, id)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not require("flemma.chat.gate").check(bufnr) then
    return
  end
  if id == nil and bufnr == vim.api.nvim_get_current_buf() then
    local part = target_placeholder(bufnr)
    id = part and part.id
  end
  local pending = false
  for _, p in ipairs(cycle()._placeholders(bufnr)) do
    pending = pending or (p.id == id and p.status == "pending")
  end
  if not pending then
    util.error("no pending tool call to approve and remember")
  end
  local call = H.call_of(bufnr, id)
  local rules, why = require("flemma.tools.remember").rules(bufnr, call.name, call.input)
  if not rules then
    util.error(("no rule to remember for `%s`: %s; approve it once with :Flemma tool:approve"):format(id, why))
  end
  local shown = table.concat(rules, ", ")
  local items = H.remember_items(bufnr, shown)
  vim.ui.select(items, { prompt = ("Approve `%s` and always allow %s; add it to"):format(id, shown) }, function(choice)
    if not choice or not vim.api.nvim_buf_is_valid(bufnr) then
      return
    end
    local ok, err = pcall(H.remember_chosen, bufnr, id, rules, choice)
    if not ok then
      util.notify(util.message(err), vim.log.levels.ERROR)
    end
  end)
end

M.commands["tool:reject"] = {
  chat = true,
  review = true,
  desc = "reject the placeholder under the cursor (or the first pending one), with an optional message",
  run = function(args)
    local bufnr, id = target_call()
    if not require("flemma.chat.gate").check(bufnr) then
      return
    end
    if not id then
      util.error("no tool placeholder to reject")
    end
    require("flemma.tools.review").discard(bufnr, id)
    local msg = table.concat(args, " ")
    cycle().set_status(bufnr, id, "rejected", msg ~= "" and msg or nil)
  end,
}

M.commands["tool:cancel"] = {
  chat = true,
  desc = "cancel the running tool under the cursor (or all when not on one)",
  run = function()
    local bufnr = vim.api.nvim_get_current_buf()
    local line = vim.api.nvim_win_get_cursor(0)[1]
    local id
    local doc = require("flemma.chat.document").get(bufnr)
    for _, msg in ipairs(doc.messages) do
      for _, part in ipairs(msg.parts) do
        if part.id and line >= part.first_line and line <= part.last_line then
          id = part.id
        end
      end
    end
    local n = cycle().cancel(bufnr, id)
    util.notify(n > 0 and ("cancelled %d tool(s)"):format(n) or "no running tool to cancel")
  end,
}

M.commands["tool:cancel-all"] = {
  chat = true,
  desc = "cancel every running tool of the buffer",
  run = function()
    local n = cycle().cancel(0)
    util.notify(n > 0 and ("cancelled %d tool(s)"):format(n) or "no running tool to cancel")
  end,
}

M.commands["tool:list"] = {
  desc = "list the registered tools and the running ones",
  run = function()
    local bufnr = vim.api.nvim_get_current_buf()
    local lines = { "tools: " .. table.concat(require("flemma.tools").list(), ", ") }
    local running = cycle().running(bufnr)
    if #running == 0 then
      lines[#lines + 1] = "running: none"
    else
      for _, r in ipairs(running) do
        lines[#lines + 1] = ("running: %s (%s)"):format(r.name, r.id)
      end
    end
    util.notify(table.concat(lines, "\n"))
  end,
}

M.commands["tool:undo"] = {
  desc = "undo the files changed by one tool call (write, edit, delete, move): pick it, newest first",
  run = function()
    local backup = require("flemma.tools.builtin.backup")
    local entries = backup.entries()
    if #entries == 0 then
      util.notify("no tool change to undo")
      return
    end
    vim.ui.select(entries, {
      prompt = "Undo which tool change (newest first)?",
      format_item = function(e)
        return ("%s  %s: %s"):format(os.date("%Y-%m-%d %H:%M:%S", e.time), e.tool, e.summary)
      end,
    }, function(entry)
      if not entry then
        return
      end
      local done, err = backup.undo(entry)
      if not done then
        util.notify("undo failed: " .. err, vim.log.levels.ERROR)
        return
      end
      util.notify("undone: " .. done)
    end)
  end,
}

M.commands["preview"] = {
  chat = true,
  desc = "show the conversation as it would be sent, templates expanded, in a scratch split",
  run = function()
    require("flemma.cycle.send").preview(vim.api.nvim_get_current_buf())
  end,
}

for _, verb in ipairs({ "enable", "disable", "status" }) do
  M.commands["autopilot:" .. verb] = {
    chat = true,
    desc = verb .. " autopilot for this buffer",
    run = function()
      local bufnr = vim.api.nvim_get_current_buf()
      if verb ~= "status" then
        cycle().set_autopilot(bufnr, verb == "enable")
      end
      local max = require("flemma.core.config").get().tools.autopilot.max_turns
      util.notify(("autopilot is %s (max %d turns)"):format(cycle().autopilot_enabled(bufnr) and "on" or "off", max))
    end,
  }
end

return M
