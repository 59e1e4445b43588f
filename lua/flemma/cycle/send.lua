--- The send path (phase 3): validates the conversation, waits for tool definitions,
--- fires FlemmaRequestSending and hands the conversation to the provider.
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.cycle.send")

---@alias flemma.send.Handler fun(bufnr: integer, request: table, done: fun(result: flemma.provider.Result))

---@type flemma.send.Handler|nil
H.handler = nil

--- Replaces the function that talks to the provider (default: `flemma.provider`,
--- which streams the answer into the buffer). nil restores the default.
---@param handler flemma.send.Handler|nil
function M.set_handler(handler)
  H.handler = handler
end

-- H.pending_ready: the `send_pending_ready` field of each buffer's session record (flemma.core.session).

function H.diagnostics(problems)
  local diags = {}
  for _, p in ipairs(problems) do
    diags[#diags + 1] = {
      lnum = math.max(0, (p.line or 1) - 1),
      col = 0,
      severity = vim.diagnostic.severity.ERROR,
      message = util.redact(p.message),
      source = "flemma",
    }
  end
  return diags
end

--- Shows validation problems as diagnostics on their lines and in a message.
function M.show_problems(bufnr, problems)
  local msgs = {}
  for _, p in ipairs(problems) do
    msgs[#msgs + 1] = ("line %d: %s"):format(p.line or 0, p.message)
  end
  vim.diagnostic.set(M.ns, bufnr, H.diagnostics(problems))
  util.notify("not sent:\n" .. table.concat(msgs, "\n"), vim.log.levels.ERROR)
end

-- While the problems of a refused send are shown, every change of the buffer
-- checks the conversation again a moment later as the send would (only what changed
-- is checked: see document.validate_for_send; the templates and files of unchanged
-- messages are cached), so the diagnostics follow the text: fixed problems go, new
-- ones appear, none stays stale. A file outside the project is not asked for here.
-- H.watching: the `send_watching` field of each buffer's session record (flemma.core.session).
H.RECHECK_MS = 30

function H.watch(bufnr)
  if session.field(bufnr, "send_watching") then
    return
  end
  local w = { pending = false }
  session.get(bufnr).send_watching = w
  vim.api.nvim_buf_attach(bufnr, false, {
    on_lines = function(_, buf)
      if session.field(buf, "send_watching") ~= w then
        return true -- detach
      end
      if not w.pending then
        w.pending = true
        vim.defer_fn(function()
          w.pending = false
          if session.field(buf, "send_watching") == w then
            H.recheck(buf)
          end
        end, H.RECHECK_MS)
      end
    end,
    on_detach = function(_, buf)
      if session.field(buf, "send_watching") == w then
        session.set(buf, "send_watching", nil)
      end
    end,
  })
end

--- What a send would refuse: the document's problems, else its templates', else
--- its files' (without asking about files outside the project).
function H.check(bufnr)
  local document = require("flemma.chat.document")
  local doc = document.get(bufnr)
  local ok, problems = document.validate_for_send(doc)
  if not ok then
    return false, problems
  end
  local reach = require("flemma.policy.reach")
  local expanded
  expanded, problems = require("flemma.chat.templates").expand(bufnr, doc)
  if expanded then
    expanded, problems = require("flemma.chat.attachments").expand(bufnr, expanded)
  end
  reach.take_wanted(bufnr)
  return expanded ~= nil, problems
end

function H.recheck(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    session.set(bufnr, "send_watching", nil)
    return
  end
  local ok_run, ok, problems = pcall(H.check, bufnr)
  if not ok_run then
    return
  end
  if ok then
    M.clear_problems(bufnr)
    return
  end
  -- Set only when they differ: every DiagnosticChanged updates the screen (issue 10).
  local shown = vim.diagnostic.get(bufnr, { namespace = M.ns })
  local same = #shown == #problems
  for i = 1, same and #problems or 0 do
    if shown[i].lnum ~= problems[i].line - 1 or shown[i].message ~= problems[i].message then
      same = false
      break
    end
  end
  if not same then
    vim.diagnostic.set(M.ns, bufnr, H.diagnostics(problems))
  end
end

--- Removes the validation diagnostics of bufnr, if it has any. Resetting a namespace
--- that holds nothing still fires DiagnosticChanged, and Neovim 0.12 answers that
--- with a synchronous screen update (nvim__redraw); under `nvim -l` after 'lines' or
--- 'columns' was set, that update writes outside the screen grid and crashes Neovim
--- (issue 10). So only a buffer that shows problems is touched.
---@param bufnr integer
function M.clear_problems(bufnr)
  session.set(bufnr, "send_watching", nil)
  if #vim.diagnostic.get(bufnr, { namespace = M.ns }) > 0 then
    vim.diagnostic.reset(M.ns, bufnr)
  end
end

function H.event(name, data)
  vim.api.nvim_exec_autocmds("User", { pattern = name, modeline = false, data = data })
end

--- Shows why the text could not be expanded. When files outside the project are the
--- reason, asks first whether to send them (flemma.reach) and sends again if so.
function H.refused(bufnr, problems, opts)
  local reach = require("flemma.policy.reach")
  local wanted = reach.take_wanted(bufnr)
  if #wanted == 0 then
    M.show_problems(bufnr, problems)
    H.watch(bufnr)
    return
  end
  reach.confirm(bufnr, wanted, function(yes, why)
    if not vim.api.nvim_buf_is_valid(bufnr) then
      return
    end
    if yes then
      M.send(bufnr, opts)
    elseif why == "no_ui" then
      -- reach said in one line what to do; the problems stay on their lines.
      vim.diagnostic.set(M.ns, bufnr, H.diagnostics(problems))
      H.watch(bufnr)
    else
      M.show_problems(bufnr, problems)
      H.watch(bufnr)
    end
  end)
end

--- A conversation estimated above ui.warn_tokens input tokens (its text's bytes / 4)
--- is sent with one line saying how large it is and, when the model's price is
--- known, about what its input costs.
function H.warn_size(bufnr)
  local limit = require("flemma.core.config").get().ui.warn_tokens
  if type(limit) ~= "number" or limit <= 0 then
    return
  end
  local bytes = vim.api.nvim_buf_get_offset(bufnr, vim.api.nvim_buf_line_count(bufnr))
  local tokens = math.floor(bytes / 4)
  if tokens <= limit then
    return
  end
  local cost
  local ok, cfg = pcall(require("flemma.chat.frontmatter").config, bufnr)
  local okp, spec = pcall(require("flemma.provider").resolve, ok and cfg or require("flemma.core.config").get())
  if okp and spec then
    local info = require("flemma.core.models").get(spec.kind, spec.model)
    cost = info and info.input and tokens * info.input / 1e6 or nil
  end
  local function short(n, units)
    for _, u in ipairs(units) do
      if n >= u[1] then
        return ("%.1f%s"):format(n / u[1], u[2]):gsub("%.0([%a ])", "%1")
      end
    end
    return tostring(n)
  end
  util.warn(
    ("large request: ~%s tokens (%s)%s"):format(
      short(tokens, { { 1e6, "M" }, { 1e3, "k" } }),
      short(bytes, { { 1024 * 1024, " MB" }, { 1024, " KB" } }),
      cost and (", ~$%.2f input"):format(cost) or ""
    )
  )
end

--- Sends the buffer's conversation. Returns true when a request was started. Three
--- steps: the tool definitions are there, the conversation may go (checked, asked
--- about, expanded), and it is handed to the provider.
---@param bufnr integer
---@param opts? { on_response?: fun() }
function M.send(bufnr, opts)
  opts = opts or {}
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not H.tools_ready(bufnr, opts) then
    return false
  end
  local doc = H.sendable(bufnr, opts)
  if not doc then
    return false
  end
  return H.hand_over(bufnr, doc, opts)
end

--- Whether the tool definitions are loaded; if not, the send waits for them (once per
--- buffer) and happens when they are.
function H.tools_ready(bufnr, opts)
  local tools = require("flemma.tools")
  if tools.is_ready() then
    return true
  end
  vim.b[bufnr].flemma_status = "Waiting for tool definitions to load..."
  util.notify("Waiting for tool definitions to load...")
  if not session.field(bufnr, "send_pending_ready") then
    session.get(bufnr).send_pending_ready = true
    tools.on_ready(function()
      session.set(bufnr, "send_pending_ready", nil)
      if vim.api.nvim_buf_is_valid(bufnr) then
        vim.b[bufnr].flemma_status = nil
        M.send(bufnr, opts)
      end
    end)
  end
  return false
end

--- The document as it is sent (templates expanded, files attached), or nil when it
--- may not go (yet): its problems are shown, or a question is asked and the send
--- happens again after a yes.
function H.sendable(bufnr, opts)
  local document = require("flemma.chat.document")
  local doc = document.get(bufnr)
  local valid, problems = document.validate_for_send(doc)
  if not valid then
    M.show_problems(bufnr, problems)
    H.watch(bufnr)
    return nil
  end
  M.clear_problems(bufnr)

  local fm = package.loaded["flemma.chat.frontmatter"] or select(2, pcall(require, "flemma.chat.frontmatter"))
  if type(fm) == "table" and fm.get then
    local _, err = fm.get(bufnr)
    if err then
      util.notify("not sent: " .. err, vim.log.levels.ERROR)
      return nil
    end
  end

  local function again()
    M.send(bufnr, opts)
  end
  -- A provider and model chosen by the frontmatter that cost more than
  -- ui.high_cost_threshold: the first send asks (flemma.cost), and sends after a yes.
  -- A provider chosen by the frontmatter that would send a key to a host neither its
  -- own service nor the user's own choice sends it to: the first send asks
  -- (flemma.keyhost), and sends after a yes.
  if not require("flemma.provider.cost").settle(bufnr, again) then
    return nil
  end
  if not require("flemma.provider.keyhost").settle(bufnr, again) then
    return nil
  end

  -- Templates ({{ }}, {% %}, include()) are expanded in what is sent, never in the buffer.
  require("flemma.policy.reach").take_wanted(bufnr)
  local expanded, template_problems = require("flemma.chat.templates").expand(bufnr, doc)
  if not expanded then
    H.refused(bufnr, template_problems, opts)
    return nil
  end
  -- File references (@./path) attached to what is sent, never written into the buffer.
  local attached, attach_problems = require("flemma.chat.attachments").expand(bufnr, expanded)
  if not attached then
    H.refused(bufnr, attach_problems, opts)
    return nil
  end
  return attached
end

--- Hands the document to the provider (or the handler set in its place), which
--- reports once: FlemmaRequestFinished fires, previews refresh, an error not shown yet
--- is, and opts.on_response runs after a completed answer.
function H.hand_over(bufnr, doc, opts)
  H.warn_size(bufnr)
  H.event("FlemmaRequestSending", { bufnr = bufnr })
  local handler = H.handler or require("flemma.provider").send
  local finished = false
  -- The providers read the document itself (and encode only what changed); other
  -- handlers get the provider-neutral conversation.
  local request = H.handler and require("flemma.chat.document").to_messages(doc) or nil
  local ok, err = pcall(handler, bufnr, request, function(result)
    if finished then
      return
    end
    finished = true
    local function report()
      H.event("FlemmaRequestFinished", {
        bufnr = bufnr,
        status = result.status,
        usage = result.usage,
        error = result.error,
      })
      if vim.api.nvim_buf_is_valid(bufnr) then
        require("flemma.core.events").emit("previews", bufnr)
      end
      if result.status == "error" and result.error and not result.notified then
        util.notify(result.error, vim.log.levels.ERROR)
      elseif result.status == "completed" and opts.on_response then
        opts.on_response()
      end
    end
    if vim.in_fast_event() then
      vim.schedule(report)
    else
      report()
    end
  end, { doc = doc })
  if not ok then
    util.notify("the request could not start: " .. util.message(err), vim.log.levels.ERROR)
    if not finished then
      finished = true
      H.event("FlemmaRequestFinished", { bufnr = bufnr, status = "error", error = util.message(err) })
    end
    return false
  end
  return true
end

--- Cancels the buffer's request (curl stopped at once, the text that arrived kept).
---@param bufnr? integer
---@return boolean true when a request was running
function M.cancel(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if H.handler then
    return false
  end
  return require("flemma.provider").cancel(bufnr)
end

--- Whether a request of the buffer is running.
---@param bufnr? integer
function M.is_active(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local p = package.loaded["flemma.provider"]
  return p ~= nil and p.is_active(bufnr)
end

--- Shows the conversation as it would be sent (templates expanded) in a scratch
--- buffer in a split; template errors are diagnostics on their lines, as for a send.
---@param bufnr? integer
function M.preview(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local lines, problems = require("flemma.chat.templates").preview_lines(bufnr)
  if not lines then
    local diags, msgs = {}, {}
    for _, p in ipairs(problems) do
      diags[#diags + 1] = {
        lnum = math.max(0, p.line - 1),
        col = 0,
        severity = vim.diagnostic.severity.ERROR,
        message = util.redact(p.message),
        source = "flemma",
      }
      msgs[#msgs + 1] = ("line %d: %s"):format(p.line, p.message)
    end
    vim.diagnostic.set(M.ns, bufnr, diags)
    util.notify(
      "no preview: the conversation cannot be sent as it is:\n" .. table.concat(msgs, "\n"),
      vim.log.levels.ERROR
    )
    return
  end
  M.clear_problems(bufnr)
  local name = ("flemma://preview/%d"):format(bufnr)
  local pbuf = vim.fn.bufnr(name)
  if pbuf == -1 then
    pbuf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(pbuf, name)
    vim.bo[pbuf].bufhidden = "wipe"
    if util.has_parser("markdown") then
      vim.bo[pbuf].filetype = "markdown"
    else
      -- Neovim 0.12's markdown ftplugin raises without the parser: Vim's syntax only.
      vim.bo[pbuf].syntax = "markdown"
    end
  end
  vim.bo[pbuf].modifiable = true
  vim.api.nvim_buf_set_lines(pbuf, 0, -1, false, lines)
  vim.bo[pbuf].modifiable = false
  vim.bo[pbuf].modified = false
  local win = vim.fn.bufwinid(pbuf)
  if win == -1 then
    vim.cmd("belowright split")
    vim.api.nvim_win_set_buf(0, pbuf)
  else
    vim.api.nvim_set_current_win(win)
  end
end

return M
