--- The three-phase cycle driven by one key (<C-]>):
---   1. categorize: every tool use without a result gets a placeholder whose status
---      the approval chain decides (approved, pending, denied);
---   2. execute: approved placeholders run, denied/rejected ones become error results,
---      pending ones block;
---   3. send: once every tool use has its result, the conversation is sent.
--- Results are written where their placeholder is found again by tool id at the time
--- they arrive, never at a line number remembered from before.
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.cycle.BufState
---@field running table<string, { name: string, handle: table|nil }>
---@field queue { id: string, name: string, input: table }[]
---@field locked boolean
---@field saved_modifiable boolean
---@field turns integer automatic sends since the user last pressed the key
---@field autopilot boolean|nil per-buffer override

-- Each buffer's state is the `cycle` field of its session record (flemma.core.session);
-- unloading or wiping the buffer detaches it (M.detach).

---@param bufnr integer
---@return flemma.cycle.BufState
function H.get_state(bufnr)
  local r = session.get(bufnr)
  if not r.cycle then
    r.cycle = { running = {}, queue = {}, locked = false, saved_modifiable = true, turns = 0 }
  end
  return r.cycle
end

---@param bufnr integer
---@return flemma.cycle.BufState|nil
function H.state_of(bufnr)
  return session.field(bufnr, "cycle")
end

function H.doc(bufnr)
  return require("flemma.chat.document").get(bufnr)
end

function H.config()
  return require("flemma.core.config").get()
end

--- The autopilot setting of a buffer (per-buffer toggle, else config).
function M.autopilot_enabled(bufnr)
  local s = H.state_of(bufnr)
  if s and s.autopilot ~= nil then
    return s.autopilot
  end
  return H.config().tools.autopilot.enabled
end

function M.set_autopilot(bufnr, enabled)
  H.get_state(bufnr).autopilot = enabled
end

--- The tool uses of the last assistant message and the results that follow it.
---@return { assistant: table|nil, index: integer|nil, uses: table[], results: table<string, table>, after: table|nil }
function H.scan(doc)
  local idx
  for i = #doc.messages, 1, -1 do
    if doc.messages[i].role == "assistant" then
      idx = i
      break
    end
  end
  local out = { uses = {}, results = {}, index = idx }
  if not idx then
    return out
  end
  out.assistant = doc.messages[idx]
  for _, part in ipairs(out.assistant.parts) do
    if part.kind == "tool_use" then
      out.uses[#out.uses + 1] = part
    end
  end
  for i = idx + 1, #doc.messages do
    local msg = doc.messages[i]
    if msg.role == "user" and not out.after then
      out.after = msg
    end
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_result" and out.results[part.id] == nil then
        out.results[part.id] = part
      end
    end
  end
  return out
end

--- Finds the tool_use and tool_result parts of a tool id in the current document.
function H.find(doc, id)
  local use, result
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.id == id then
        if part.kind == "tool_use" then
          use = part
        elseif part.kind == "tool_result" then
          result = part
        end
      end
    end
  end
  return use, result
end

--- Sets lines while the buffer may be locked by running tools.
function H.set_lines(bufnr, first, last, lines)
  local bo = vim.bo[bufnr]
  local was = bo.modifiable
  bo.modifiable = true
  local ok, err = pcall(vim.api.nvim_buf_set_lines, bufnr, first, last, false, lines)
  bo.modifiable = was
  if not ok then
    error(err, 0)
  end
end

function H.lock(bufnr)
  local s = H.get_state(bufnr)
  if not s.locked then
    s.locked = true
    s.saved_modifiable = vim.bo[bufnr].modifiable
    vim.bo[bufnr].modifiable = false
  end
end

function H.unlock(bufnr)
  local s = H.state_of(bufnr)
  if s and s.locked then
    s.locked = false
    if vim.api.nvim_buf_is_valid(bufnr) then
      vim.bo[bufnr].modifiable = s.saved_modifiable
    end
  end
end

--- b:flemma_status while tools run: "running bash, read"; cleared when the last one
--- ended (a request's own status is left alone).
function H.tool_status(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  local s = H.state_of(bufnr)
  local names = {}
  for _, r in pairs(s and s.running or {}) do
    names[#names + 1] = r.name
  end
  table.sort(names)
  local current = vim.b[bufnr].flemma_status
  if #names > 0 then
    vim.b[bufnr].flemma_status = "running " .. table.concat(names, ", ")
  elseif type(current) == "string" and current:find("^running ") then
    vim.b[bufnr].flemma_status = nil
  end
end

function H.event(name, data)
  vim.api.nvim_exec_autocmds("User", { pattern = name, modeline = false, data = data })
end

function H.refresh_previews(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    require("flemma.core.events").emit("previews", bufnr)
  end
end

function H.set_cursor(bufnr, line)
  local win = vim.fn.bufwinid(bufnr)
  if win ~= -1 and line then
    local count = vim.api.nvim_buf_line_count(bufnr)
    pcall(vim.api.nvim_win_set_cursor, win, { math.min(line, count), 0 })
  end
end

--- Scrolls the buffer's window so that `line` (and the preview's virtual line above
--- it) is on screen: a placeholder focused at the window's last row hides its preview.
function H.reveal(bufnr, line)
  local win = vim.fn.bufwinid(bufnr)
  if win == -1 then
    return
  end
  vim.api.nvim_win_call(win, function()
    if line >= vim.fn.line("w$") then
      vim.cmd("normal! zz")
    end
  end)
end

-- ---------------------------------------------------------------------------
-- Phase 1: categorize
-- ---------------------------------------------------------------------------

--- Asks the approval chain about one tool call; a broken chain requires approval.
function H.decide(bufnr, use)
  if use.input == nil then
    return "denied"
  end
  local approval = require("flemma.tools.approval")
  local ok, decision = pcall(approval.resolve, use.name, use.input, {
    bufnr = bufnr,
    tool_id = use.id,
  })
  local by = ok and approval.last_decider() or {}
  require("flemma.policy.audit").record({
    event = "decision",
    tool = use.name,
    id = use.id,
    decision = ok and decision or "error",
    resolver = by.resolver or "none",
    rule = by.rule,
    input = use.input,
  })
  if not ok then
    util.warn("approval failed for `" .. use.id .. "`: " .. util.message(decision))
    return "pending"
  end
  if decision == "approve" then
    return "approved"
  elseif decision == "deny" then
    return "denied"
  end
  return "pending"
end

--- Why a tool call cannot run in this buffer, as its error result: a name no tool has
--- (`bsh` for `bash`), or a tool this buffer does not have (disabled, or left out by
--- the frontmatter's selection). nil when the tool is there, and while async tool
--- sources are still loading (the name may yet appear) or the frontmatter fails (the
--- gate says so).
---@return string|nil
function H.unavailable(bufnr, name)
  local tools = require("flemma.tools")
  if not tools.is_ready() then
    return nil
  end
  local available, err = tools.for_buffer(bufnr)
  if err or vim.tbl_contains(available, name) then
    return nil
  end
  local list = #available > 0 and table.concat(available, ", ") or "none"
  if vim.tbl_contains(tools.list(), name) then
    -- The words of tools.execute, which says the same when such a call is run.
    return ("tool `%s` is not enabled in this buffer (flemma.opt.tools selects: %s)"):format(name, list)
  elseif tools.get(name) then
    return ('tool "%s" is disabled; available: %s'):format(name, list)
  end
  return ('unknown tool "%s"; available: %s'):format(name, list)
end

--- Injects placeholders for every tool use without a result (an error result at once
--- for a tool the buffer does not have). Returns the counts.
---@return { approved: integer, pending: integer, denied: integer }|nil
function M.categorize(bufnr)
  local document = require("flemma.chat.document")
  local doc = H.doc(bufnr)
  local scan = H.scan(doc)
  local missing = {}
  for _, use in ipairs(scan.uses) do
    if not scan.results[use.id] then
      missing[#missing + 1] = use
    end
  end
  if #missing == 0 then
    return nil
  end
  local counts = { approved = 0, pending = 0, denied = 0 }
  local block = {}
  local statuses = {}
  local state = H.get_state(bufnr)
  state.auto = state.auto or {}
  for i, use in ipairs(missing) do
    local unavailable = H.unavailable(bufnr, use.name)
    local status = unavailable and "denied" or H.decide(bufnr, use)
    statuses[use.id] = status
    -- Approved without the user: decided again when it runs (H.run).
    state.auto[use.id] = status == "approved" or nil
    -- Denied by the policy (already in the audit log): a denied placeholder not in
    -- this set is the user's denial (H.audit_static).
    state.policy_denied = state.policy_denied or {}
    state.policy_denied[use.id] = status == "denied" or nil
    counts[status] = counts[status] + 1
    if i > 1 then
      block[#block + 1] = ""
    end
    if unavailable then
      vim.list_extend(block, document.render_result(use.id, unavailable, true))
    else
      vim.list_extend(block, document.render_placeholder(use.id, status))
    end
  end

  -- The 1-based line i (nil past the end): only the lines looked at are read (a
  -- chat of an answer with 10,000 tool calls has over 100,000 lines).
  local function line(i)
    if i < 1 then
      return nil
    end
    return vim.api.nvim_buf_get_lines(bufnr, i - 1, i, false)[1]
  end
  local at -- 0-based index before which the block goes
  local after = scan.after
  if after then
    local last_result
    for _, part in ipairs(after.parts) do
      if part.kind == "tool_result" then
        last_result = part
      end
    end
    if last_result then
      at = last_result.last_line
      table.insert(block, 1, "")
    else
      at = after.first_line
    end
    local next_line = line(at + 1)
    if next_line ~= nil and next_line ~= "" then
      block[#block + 1] = ""
    end
  else
    at = scan.assistant.last_line
    local prefix = { "@You:" }
    if line(at) ~= "" then
      table.insert(prefix, 1, "")
    end
    for i = #prefix, 1, -1 do
      table.insert(block, 1, prefix[i])
    end
  end
  H.set_lines(bufnr, at, at, block)

  doc = H.doc(bufnr)
  local first_pending
  for _, use in ipairs(missing) do
    if statuses[use.id] == "pending" then
      local _, result = H.find(doc, use.id)
      first_pending = result and (result.fence_line or result.first_line)
      break
    end
  end
  if first_pending then
    H.set_cursor(bufnr, first_pending)
  end
  -- What the files of each pending call are as its preview is shown: they must be
  -- the same when the user approves it (H.may_run).
  for _, use in ipairs(missing) do
    if statuses[use.id] == "pending" then
      require("flemma.tools.previewed").take(bufnr, use)
    end
  end
  H.refresh_previews(bufnr)
  return counts
end

-- ---------------------------------------------------------------------------
-- Phase 2: execute
-- ---------------------------------------------------------------------------

--- Replaces the placeholder of `id` (found again now, by id) with a result.
---@return integer|nil line the 1-based header line of the written result
---@param info? string the block's info string (document.RESULT_INFOS)
---@param attachments? flemma.tools.Attachment[] files the result carries (named on its fence line)
function H.write_result(bufnr, id, output, is_error, info, attachments)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return nil
  end
  local doc = H.doc(bufnr)
  local _, part = H.find(doc, id)
  if not part or part.status == nil then
    util.warn(("the placeholder of `%s` is gone; its result was not written"):format(id))
    return nil
  end
  local files
  if attachments and #attachments > 0 then
    local written = require("flemma.chat.attachments").written
    files = {}
    for i, a in ipairs(attachments) do
      files[i] = { path = written(bufnr, a.path), mime = a.mime }
    end
  end
  local lines = require("flemma.chat.document").render_result(id, output, is_error, info, files)
  H.set_lines(bufnr, part.first_line - 1, part.last_line, lines)
  return part.first_line
end

function H.place_cursor_after(bufnr, line)
  local mode = H.config().tools.cursor_after_result
  if mode == "stay" or not line then
    return
  elseif mode == "result" then
    H.set_cursor(bufnr, line)
  elseif mode == "next" then
    H.set_cursor(bufnr, vim.api.nvim_buf_line_count(bufnr))
  end
end

--- The result a placeholder gets without running anything (denied, rejected, pending
--- with the user's own content): output and is_error, or nil when it needs a run or
--- a decision. `uses` maps tool ids to their tool_use parts.
---@return string|nil output
---@return boolean is_error
function H.static_result(part, uses)
  local content = part.content or ""
  if part.status == "denied" then
    local use = uses[part.id]
    if use and use.input == nil then
      return ("The tool input is not a valid JSON object (%s), so the call was not run."):format(
        use.input_error or "invalid JSON"
      ),
        true
    end
    return "The tool call was denied by the approval policy.", true
  elseif part.status == "rejected" then
    if vim.trim(content) == "" then
      -- A tool may say what a rejection tells the model (on_rejected).
      local use = uses[part.id]
      local def = use and require("flemma.tools").get(use.name)
      if def and type(def.on_rejected) == "function" and use.input ~= nil then
        local ok, text = pcall(def.on_rejected, use.input)
        if ok and type(text) == "string" and text ~= "" then
          return text, true
        end
      end
    end
    return vim.trim(content) ~= "" and content or "The user rejected this tool call.", true
  elseif part.status == "pending" and vim.trim(content) ~= "" then
    -- Content-overwrite protection: the user's text is the result.
    return content, false
  end
  return nil, false
end

--- The tool_use parts of a document by id.
function H.uses_by_id(doc)
  local uses = {}
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_use" then
        uses[part.id] = part
      end
    end
  end
  return uses
end

--- Records in the audit log the user's decision a placeholder resolved without a run
--- holds: a rejection (`tool:reject`, status=rejected) or a denial the policy did not
--- make (status=denied written by the user).
function H.audit_static(bufnr, part, uses)
  local s = H.state_of(bufnr)
  local by_policy = s and s.policy_denied and s.policy_denied[part.id]
  if s and s.policy_denied then
    s.policy_denied[part.id] = nil
  end
  if part.status ~= "rejected" and not (part.status == "denied" and not by_policy) then
    return
  end
  local use = uses[part.id]
  require("flemma.policy.audit").record({
    event = "decision",
    tool = use and use.name or nil,
    id = part.id,
    decision = part.status == "rejected" and "reject" or "deny",
    resolver = "user",
    input = use and use.input or nil,
  })
end

--- Resolves one placeholder without running anything. Returns true when it wrote a
--- result.
function H.resolve_static(bufnr, part)
  local uses = H.uses_by_id(H.doc(bufnr))
  local output, is_error = H.static_result(part, uses)
  if output == nil then
    return false
  end
  H.audit_static(bufnr, part, uses)
  H.place_cursor_after(bufnr, H.write_result(bufnr, part.id, output, is_error))
  return true
end

--- Resolves every placeholder (parts of one parse of the buffer, in buffer order) that
--- needs no run, in one buffer edit: the lines from the first to the last of them are
--- replaced once, results spliced in between the untouched lines. One edit, not one
--- per placeholder: the live document re-parses what an edit touches, and all of
--- them sit in the same message. Returns how many it wrote.
---@param parts flemma.document.Part[]
---@return integer
function H.resolve_static_all(bufnr, parts)
  local document = require("flemma.chat.document")
  local uses = H.uses_by_id(H.doc(bufnr))
  local writes = {}
  for _, part in ipairs(parts) do
    if part.status ~= "approved" then
      local output, is_error = H.static_result(part, uses)
      if output ~= nil then
        H.audit_static(bufnr, part, uses)
        writes[#writes + 1] = { part = part, lines = document.render_result(part.id, output, is_error) }
      end
    end
  end
  if #writes == 0 then
    return 0
  end
  local first, last = writes[1].part.first_line, writes[#writes].part.last_line
  local old = vim.api.nvim_buf_get_lines(bufnr, first - 1, last, false)
  local out, n = {}, 0
  local next_line = first -- the next untouched line to copy (1-based)
  local last_header
  for _, w in ipairs(writes) do
    for l = next_line, w.part.first_line - 1 do
      n = n + 1
      out[n] = old[l - first + 1]
    end
    last_header = n + first -- where this result's header lands
    for _, l in ipairs(w.lines) do
      n = n + 1
      out[n] = l
    end
    next_line = w.part.last_line + 1
  end
  H.set_lines(bufnr, first - 1, last, out)
  H.place_cursor_after(bufnr, last_header)
  return #writes
end

function H.all_done(bufnr)
  local s = H.state_of(bufnr)
  return not s or (next(s.running) == nil and #s.queue == 0)
end

--- Called when the last running tool of a buffer finished.
function H.on_idle(bufnr)
  H.unlock(bufnr)
  require("flemma.cycle.spinner").stop_all(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  H.refresh_previews(bufnr)
  local s = H.get_state(bufnr)
  if s.paused or s.single then
    s.single = false
    return
  end
  local doc = H.doc(bufnr)
  local scan = H.scan(doc)
  local remaining = false
  for _, use in ipairs(scan.uses) do
    local r = scan.results[use.id]
    if not r or r.status ~= nil then
      remaining = true
    end
  end
  if not remaining and M.autopilot_enabled(bufnr) then
    vim.schedule(function()
      M.send(bufnr, { auto = true })
    end)
  elseif remaining then
    M.focus_pending(bufnr)
  end
end

-- Whether a tool names the files it touches (flemma.tools.scope): such a call is
-- approved for where its paths lead, so it runs alone (H.start_next).
function H.has_paths(name)
  local def = require("flemma.tools").get(name)
  return type(def) == "table" and type(def.paths) == "function"
end

--- Starts queued jobs, in order, up to tools.max_concurrent. A call of a file tool
--- (one with `paths`) runs alone: no command may change where its paths lead (swap a
--- link for one to ~/.ssh) between the check that approved it (decided again as it
--- starts, H.run) and its reads and writes.
function H.start_next(bufnr)
  local s = H.state_of(bufnr)
  if not s then
    return
  end
  local limit = math.max(1, H.config().tools.max_concurrent or 4)
  while #s.queue > 0 and vim.tbl_count(s.running) < limit do
    local alone = H.has_paths(s.queue[1].name)
    local busy = next(s.running) ~= nil
    if busy and alone then
      break
    end
    local exclusive = false
    for _, r in pairs(s.running) do
      exclusive = exclusive or r.alone == true
    end
    if exclusive then
      break
    end
    local job = table.remove(s.queue, 1)
    job.alone = alone
    if H.run(bufnr, job) and alone then
      break
    end
  end
end

function H.finish(bufnr, job, result)
  local s = H.state_of(bufnr)
  if not s or not s.running[job.id] then
    return -- already finished (e.g. a tool calling back twice) or buffer gone
  end
  local started = s.running[job.id].started
  s.running[job.id] = nil
  require("flemma.policy.audit").record({
    event = "run",
    tool = job.name,
    id = job.id,
    status = result.success and "success" or "error",
    duration_ms = started and math.floor(((vim.uv or vim.loop).hrtime() - started) / 1e6 + 0.5) or nil,
    input = job.input,
  })
  require("flemma.cycle.spinner").stop(bufnr, job.id)
  H.tool_status(bufnr)
  if result.rate_limited and not s.paused then
    -- Over tools.rate_limit: no automatic send with these error results.
    s.paused = true
    util.warn("autopilot stopped: tool calls over tools.rate_limit; <C-]> goes on")
  end
  if vim.api.nvim_buf_is_valid(bufnr) then
    local line
    if result.success then
      local output = result.output == nil and "" or result.output
      line = H.write_result(
        bufnr,
        job.id,
        output,
        false,
        type(output) == "string" and result.info or nil,
        result.attachments
      )
    else
      local msg = result.error or "the tool failed"
      if result.output ~= nil and result.output ~= "" then
        local out = type(result.output) == "table" and vim.json.encode(result.output) or tostring(result.output)
        msg = msg .. "\n\n" .. out
      end
      line = H.write_result(bufnr, job.id, msg, true)
    end
    H.place_cursor_after(bufnr, line)
    H.event("FlemmaToolFinished", {
      bufnr = bufnr,
      tool_id = job.id,
      tool_name = job.name,
      success = result.success and true or false,
      line = line, -- the result's header line
    })
  end
  H.start_next(bufnr)
  if H.all_done(bufnr) then
    H.on_idle(bufnr)
  end
end

-- Whether an approved call runs now: false when it does not (approved without the
-- user and no longer approved where its paths lead now: it waits for the user
-- again); true and, for a call the user approved whose files changed since its
-- preview (flemma.tools.previewed), the refusal that is its result.
function H.may_run(bufnr, s, job, part)
  local previewed = require("flemma.tools.previewed")
  -- An automatic approval holds for what the call touches now: the calls that ran
  -- before it may have changed where its paths lead (a link made to a secret file).
  if not (s.auto and s.auto[job.id]) then
    -- Approved in a diff review (flemma.tools.review): whether the user changed it.
    local reviewed = require("flemma.tools.review").get(bufnr, job.id)
    reviewed = reviewed and reviewed.accepted and (reviewed.accepted == reviewed.asked and "as asked" or "changed")
    require("flemma.policy.audit").record({
      event = "decision",
      tool = job.name,
      id = job.id,
      decision = "approve",
      resolver = "user",
      review = reviewed or nil,
      input = job.input,
    })
  end
  if s.auto and s.auto[job.id] then
    s.auto[job.id] = nil
    if H.has_paths(job.name) then
      local status = H.decide(bufnr, { id = job.id, name = job.name, input = job.input })
      if status ~= "approved" then
        previewed.take(bufnr, job)
        local lines = require("flemma.chat.document").render_placeholder(job.id, status)
        H.set_lines(bufnr, part.first_line - 1, part.last_line, lines)
        H.refresh_previews(bufnr)
        util.warn(
          ("`%s` was not run: where its path leads changed since it was approved; it waits for you"):format(job.id)
        )
        return false
      end
    end
    return true
  end
  -- Approved by the user: the files it changes must be as its preview was shown
  -- (a diff review compares them itself, with what it showed).
  local reviewed = require("flemma.tools.review").get(bufnr, job.id)
  if reviewed and reviewed.accepted then
    previewed.forget(bufnr, job.id)
    return true
  end
  local refusal, note = previewed.check(bufnr, job.id, job.input)
  if refusal then
    util.warn(note)
  end
  return true, refusal
end

function H.run(bufnr, job)
  if not require("flemma.chat.gate").check(bufnr) then
    return -- the frontmatter broke meanwhile: nothing runs
  end
  local s = H.get_state(bufnr)
  local doc = H.doc(bufnr)
  local _, part = H.find(doc, job.id)
  if not part or part.status ~= "approved" then
    return
  end
  local go, refusal = H.may_run(bufnr, s, job, part)
  if not go then
    return
  end
  H.lock(bufnr)
  s.running[job.id] = { name = job.name, alone = job.alone, started = (vim.uv or vim.loop).hrtime() }
  if refusal then
    -- Its files changed since its preview: the refusal is its result (as a tool's
    -- result, on a later turn of the loop).
    vim.schedule(function()
      H.finish(bufnr, job, { success = false, error = refusal })
    end)
    return true
  end
  H.tool_status(bufnr)
  require("flemma.cycle.spinner").start(bufnr, job.id, job.name, (part.fence_line or part.first_line) - 1)
  H.event("FlemmaToolExecuting", { bufnr = bufnr, tool_id = job.id, tool_name = job.name })
  local done = function(result)
    local ok, err = xpcall(H.finish, debug.traceback, bufnr, job, result or { success = false, error = "no result" })
    if not ok then
      util.notify("writing the result of `" .. job.id .. "` failed: " .. tostring(err), vim.log.levels.ERROR)
      local st = H.state_of(bufnr)
      if st then
        st.running[job.id] = nil
        H.start_next(bufnr)
        if H.all_done(bufnr) then
          H.on_idle(bufnr)
        end
      end
    end
  end
  local on_done = function(result)
    if vim.in_fast_event() then
      vim.schedule(function()
        done(result)
      end)
    else
      done(result)
    end
  end
  local ok, handle = pcall(
    require("flemma.tools").execute,
    bufnr,
    {
      id = job.id,
      name = job.name,
      input = job.input,
    },
    on_done,
    {
      on_progress = function(p)
        if p and p.last_line then
          require("flemma.cycle.spinner").progress(bufnr, job.id, p.last_line)
        end
      end,
    }
  )
  if not ok then
    on_done({ success = false, error = util.message(handle) })
  elseif s.running[job.id] then
    s.running[job.id].handle = handle
  end
  return true
end

--- Queues approved placeholders (a list of parts) for execution.
function H.enqueue(bufnr, parts)
  local s = H.get_state(bufnr)
  local uses = H.uses_by_id(H.doc(bufnr))
  local queued = {}
  for _, j in ipairs(s.queue) do
    queued[j.id] = true
  end
  for _, part in ipairs(parts) do
    local use = uses[part.id]
    if use and not s.running[part.id] and not queued[part.id] then
      queued[part.id] = true
      s.queue[#s.queue + 1] = { id = part.id, name = use.name, input = use.input }
    end
  end
  H.start_next(bufnr)
  if H.all_done(bufnr) then
    H.on_idle(bufnr)
  end
end

--- The placeholders following the last assistant message, in buffer order.
function H.placeholders(bufnr)
  local doc = H.doc(bufnr)
  local scan = H.scan(doc)
  local out = {}
  if not scan.index then
    return out
  end
  for i = scan.index + 1, #doc.messages do
    for _, part in ipairs(doc.messages[i].parts) do
      if part.kind == "tool_result" and part.status ~= nil then
        out[#out + 1] = part
      end
    end
  end
  return out
end

--- Moves the cursor to the first empty pending placeholder and says so.
---@return boolean true if one was found
function M.focus_pending(bufnr)
  for _, part in ipairs(H.placeholders(bufnr)) do
    if part.status == "pending" and vim.trim(part.content or "") == "" then
      H.set_cursor(bufnr, part.fence_line or part.first_line)
      H.reveal(bufnr, (part.fence_line or part.first_line) + 1)
      return true
    end
  end
  return false
end

--- Phase 2 over every placeholder. `only_approved` runs approved tools and leaves
--- everything else (autopilot's early start while others are pending).
function M.execute(bufnr, opts)
  opts = opts or {}
  if not require("flemma.chat.gate").check(bufnr) then
    return
  end
  local s = H.get_state(bufnr)
  s.paused = false
  s.single = false
  local to_run = {}
  local edited = {}
  local blocked = false
  -- Resolve the static ones first, all in one pass over one parse.
  if not opts.only_approved then
    H.resolve_static_all(bufnr, H.placeholders(bufnr))
  end
  for _, part in ipairs(H.placeholders(bufnr)) do
    if part.status == "approved" then
      if vim.trim(part.content or "") ~= "" then
        edited[#edited + 1] = part
      elseif not s.running[part.id] then
        to_run[#to_run + 1] = part
      end
    elseif part.status == "pending" then
      blocked = true
    elseif not ({ approved = true, pending = true, denied = true, rejected = true })[part.status] then
      util.warn(
        ("`%s` has an unknown status `%s`: use approved, pending, rejected or denied"):format(part.id, part.status)
      )
      blocked = true
    end
  end
  if #edited > 0 then
    s.paused = true
    H.set_cursor(bufnr, edited[1].fence_line or edited[1].first_line)
    -- One line that fits the message area (the cursor is on the block; what to do
    -- is in :help flemma-cycle).
    util.warn("not executed: your text is in the approved block")
  end
  if blocked and #to_run == 0 and next(s.running) == nil then
    M.focus_pending(bufnr)
    H.refresh_previews(bufnr)
    if not opts.quiet then
      util.notify("pending tool call: set status=approved or rejected, <C-]>")
    end
    return
  end
  if #to_run > 0 then
    H.enqueue(bufnr, to_run)
  elseif next(s.running) == nil and not s.paused then
    H.on_idle(bufnr)
  end
end

-- ---------------------------------------------------------------------------
-- Phase 3 and the key
-- ---------------------------------------------------------------------------

--- Sends the conversation (phase 3). `opts.auto` marks an automatic (autopilot) send.
function M.send(bufnr, opts)
  opts = opts or {}
  if not require("flemma.chat.gate").check(bufnr) then
    return false
  end
  local s = H.get_state(bufnr)
  if opts.auto then
    local max = H.config().tools.autopilot.max_turns
    if s.turns >= max then
      util.warn(("autopilot stopped after %d turns: <C-]> goes on"):format(max))
      return false
    end
    s.turns = s.turns + 1
  end
  return require("flemma.cycle.send").send(bufnr, {
    on_response = function()
      M.on_response(bufnr)
    end,
  })
end

--- Called by the send path once a response was written into the buffer.
function M.on_response(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or not M.autopilot_enabled(bufnr) then
    return
  end
  vim.schedule(function()
    M.advance(bufnr, { auto = true })
  end)
end

--- One press of <C-]>: the next phase of the cycle.
---@param bufnr? integer
---@param opts? { auto?: boolean }
function M.advance(bufnr, opts)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  opts = opts or {}
  if not require("flemma.chat.gate").allow(bufnr, function()
    M.advance(bufnr, opts)
  end) then
    return
  end
  local s = H.get_state(bufnr)
  if not opts.auto then
    s.turns = 0
  end
  if next(s.running) ~= nil and next(H.nested(bufnr) or {}) ~= nil then
    M.focus_pending(bufnr)
    util.notify("a running tool waits for its nested call: :Flemma tool:approve or tool:reject")
    return
  end
  if next(s.running) ~= nil or #s.queue > 0 then
    util.notify(("%d tool(s) still running; <C-c> cancels them"):format(vim.tbl_count(s.running) + #s.queue))
    return
  end
  local counts = M.categorize(bufnr)
  if counts then
    if counts.pending == 0 then
      vim.schedule(function()
        M.execute(bufnr)
      end)
    elseif counts.approved > 0 and M.autopilot_enabled(bufnr) then
      vim.schedule(function()
        M.execute(bufnr, { only_approved = true, quiet = true })
      end)
    end
    return
  end
  if #H.placeholders(bufnr) > 0 then
    M.execute(bufnr)
    return
  end
  if opts.auto then
    -- A response without tool calls ends the autopilot chain.
    return
  end
  M.send(bufnr)
end

--- <M-CR>: executes or resolves just the tool block under the cursor.
function M.execute_at_cursor(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not require("flemma.chat.gate").allow(bufnr, function()
    M.execute_at_cursor(bufnr)
  end) then
    return
  end
  local line = vim.api.nvim_win_get_cursor(0)[1]
  local doc = H.doc(bufnr)
  local target
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if
        (part.kind == "tool_use" or part.kind == "tool_result")
        and line >= part.first_line
        and line <= part.last_line
      then
        target = part
      end
    end
  end
  if not target then
    util.warn("the cursor is not on a tool block")
    return
  end
  local use, result = H.find(doc, target.id)
  if not use and H.is_nested_pending(bufnr, target.id) then
    M.set_status(bufnr, target.id, "approved")
    return
  end
  if not use then
    util.warn(("no **Tool Use:** block has the id `%s`"):format(target.id))
    return
  end
  if result and result.status == nil then
    util.notify(("`%s` already has a result"):format(target.id))
    return
  end
  if not result then
    -- Give it a placeholder first, approved by the user's explicit action.
    local scan = H.scan(doc)
    if scan.assistant ~= nil and vim.tbl_contains(scan.uses, use) then
      M.categorize(bufnr)
      doc = H.doc(bufnr)
      result = select(2, H.find(doc, target.id))
    end
    if not result then
      util.warn(("`%s` is not part of the last assistant message"):format(target.id))
      return
    end
  end
  if result.status == "denied" or result.status == "rejected" then
    H.resolve_static(bufnr, result)
    H.refresh_previews(bufnr)
    return
  end
  if result.status == "pending" and vim.trim(result.content or "") ~= "" then
    H.resolve_static(bufnr, result)
    H.refresh_previews(bufnr)
    return
  end
  if result.status == "approved" and vim.trim(result.content or "") ~= "" then
    util.warn(("the approved placeholder of `%s` has content you edited, so it was not executed"):format(target.id))
    return
  end
  if result.status == "pending" then
    M.set_status(bufnr, target.id, "approved")
    doc = H.doc(bufnr)
    result = select(2, H.find(doc, target.id))
  end
  if result and result.status == "approved" then
    H.get_state(bufnr).single = true -- a single tool: do not chain into a send
    H.enqueue(bufnr, { result })
  end
end

--- Rewrites the status of a placeholder in the buffer.
function M.set_status(bufnr, id, status, content)
  local doc = H.doc(bufnr)
  local _, part = H.find(doc, id)
  if not part or part.status == nil then
    util.error(("`%s` has no placeholder"):format(id))
  end
  if content == nil then
    content = part.content ~= "" and part.content or nil
  end
  local lines = require("flemma.chat.document").render_placeholder(id, status, content)
  H.set_lines(bufnr, part.first_line - 1, part.last_line, lines)
  H.refresh_previews(bufnr)
  if status ~= "pending" and H.is_nested_pending(bufnr, id) then
    H.nested_decided(bufnr, id)
  end
end

--- Cancels the running (and queued) tools of a buffer, or just tool `id`.
---@return integer how many were cancelled
function M.cancel(bufnr, id)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local s = H.state_of(bufnr)
  if not s then
    return 0
  end
  local n = 0
  local kept, dropped = {}, {}
  for _, job in ipairs(s.queue) do
    if id == nil or job.id == id then
      dropped[#dropped + 1] = job
    else
      kept[#kept + 1] = job
    end
  end
  s.queue = kept
  local hits = #dropped
  for rid in pairs(s.running) do
    hits = hits + ((id == nil or rid == id) and 1 or 0)
  end
  if hits > 0 then
    s.paused = true -- no automatic send after a cancel
  end
  for _, job in ipairs(dropped) do
    n = n + 1
    s.running[job.id] = { name = job.name }
    H.finish(bufnr, job, { success = false, error = "The tool call was cancelled by the user before it started." })
  end
  for rid, run in pairs(vim.deepcopy(s.running, true)) do
    if id == nil or rid == id then
      n = n + 1
      local handle = s.running[rid] and s.running[rid].handle
      if handle and handle.cancel then
        pcall(handle.cancel)
      end
      -- Tools that do not call back after cancel still end here.
      H.finish(
        bufnr,
        { id = rid, name = run.name },
        { success = false, error = "The tool call was cancelled by the user." }
      )
    end
  end
  return n
end

--- Running tools of a buffer: list of { id, name }.
function M.running(bufnr)
  local s = H.state_of(bufnr)
  local out = {}
  for id, run in pairs(s and s.running or {}) do
    out[#out + 1] = { id = id, name = run.name }
  end
  table.sort(out, function(a, b)
    return a.id < b.id
  end)
  return out
end

--- Forgets a buffer that is being closed: cancels its tools without writing.
function M.detach(bufnr)
  local s = H.state_of(bufnr)
  if not s then
    return
  end
  session.peek(bufnr).cycle = nil
  s.queue = {}
  -- An unloaded (:bunload, :bdelete) buffer keeps its options: unlock it, or it comes
  -- back non-modifiable when it is loaded again.
  if s.locked and vim.api.nvim_buf_is_valid(bufnr) then
    pcall(function()
      vim.bo[bufnr].modifiable = s.saved_modifiable
    end)
  end
  for _, run in pairs(s.running) do
    if run.handle and run.handle.cancel then
      pcall(run.handle.cancel)
    end
  end
  require("flemma.cycle.spinner").stop_all(bufnr)
end

-- ---------------------------------------------------------------------------
-- Nested calls (tools.call from a running tool) that wait for the user
-- ---------------------------------------------------------------------------

-- The `nested_calls` field of a buffer's session record: id -> { parent, name, decide },
-- the nested calls whose placeholder is pending.
function H.nested(bufnr)
  return session.field(bufnr, "nested_calls")
end

--- Puts the pending placeholder of a nested call right below its parent's block
--- (after the blocks of earlier nested calls of that parent); the user decides it
--- with :Flemma tool:approve / tool:reject (or <M-CR>) while the parent waits.
function H.nested_pending(bufnr, parent_id, id, name, args, decide)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    decide("rejected", "the chat buffer is gone")
    return
  end
  local doc = H.doc(bufnr)
  local _, parent = H.find(doc, parent_id)
  if not parent then
    decide("rejected", ("the placeholder of `%s` is gone"):format(parent_id))
    return
  end
  local last = parent.last_line
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if
        part.kind == "tool_result"
        and type(part.id) == "string"
        and part.id:sub(1, #parent_id + 1) == parent_id .. "."
      then
        last = math.max(last, part.last_line)
      end
    end
  end
  local rec = session.get(bufnr)
  rec.nested_calls = rec.nested_calls or {}
  rec.nested_calls[id] = { parent = parent_id, name = name, args = args, decide = decide }
  local block = { "" }
  vim.list_extend(block, require("flemma.chat.document").render_placeholder(id, "pending"))
  H.set_lines(bufnr, last, last, block)
  require("flemma.tools.previewed").take(bufnr, { id = id, name = name, input = args })
  local preview = require("flemma.tools").preview(name, args, 60, bufnr)
  util.notify(
    ("`%s` asks to run %s: %s (%s): :Flemma tool:approve or tool:reject"):format(parent_id, name, preview, id)
  )
  M.focus_pending(bufnr)
end

--- Decides a pending nested call from the status of its placeholder.
function H.nested_decided(bufnr, id)
  local nested = H.nested(bufnr)
  local entry = nested and nested[id]
  if not entry then
    return false
  end
  local _, part = H.find(H.doc(bufnr), id)
  if not part or part.status == "pending" then
    return true
  end
  nested[id] = nil
  -- The user decided it (tool:approve, tool:reject, the status edited).
  require("flemma.policy.audit").record({
    event = "decision",
    tool = entry.name,
    id = id,
    decision = part.status == "approved" and "approve" or (part.status == "denied" and "deny" or "reject"),
    resolver = "user",
    input = entry.args,
  })
  -- Approved: the files it changes must be as its preview was shown.
  local previewed = require("flemma.tools.previewed")
  local refusal, note
  if part.status == "approved" then
    refusal, note = previewed.check(bufnr, id, entry.args)
  else
    previewed.forget(bufnr, id)
  end
  if refusal then
    util.warn(note)
    entry.decide("rejected", refusal)
  elseif part.status == "approved" then
    entry.decide("approved")
  else
    entry.decide("rejected", part.content)
  end
  return true
end

--- Writes the result of a nested call the user decided into its placeholder.
function H.nested_done(bufnr, id, pair)
  if vim.api.nvim_buf_is_valid(bufnr) then
    local _, part = H.find(H.doc(bufnr), id)
    if part and part.status ~= nil then
      H.write_result(bufnr, id, pair.content, pair.is_error)
    end
  end
end

--- The parent finished: the blocks of its nested calls go (their results are
--- grouped into the parent's result); one still pending is rejected.
function H.nested_settle(bufnr, parent_id)
  local prefix = parent_id .. "."
  local nested = H.nested(bufnr) or {}
  for id, entry in pairs(nested) do
    if id:sub(1, #prefix) == prefix then
      nested[id] = nil
      pcall(entry.decide, "rejected", ("`%s` ended before this call was decided"):format(parent_id))
    end
  end
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  local doc = H.doc(bufnr)
  local ranges = {}
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_result" and type(part.id) == "string" and part.id:sub(1, #prefix) == prefix then
        ranges[#ranges + 1] = { part.first_line, part.last_line }
      end
    end
  end
  table.sort(ranges, function(a, b)
    return a[1] > b[1]
  end)
  for _, r in ipairs(ranges) do
    local first = r[1]
    local above = vim.api.nvim_buf_get_lines(bufnr, first - 2, first - 1, false)[1]
    if above == "" then
      first = first - 1
    end
    H.set_lines(bufnr, first - 1, r[2], {})
  end
end

--- Whether `id` is a nested call waiting for the user.
function H.is_nested_pending(bufnr, id)
  local nested = H.nested(bufnr)
  return nested ~= nil and nested[id] ~= nil
end

require("flemma.tools").set_call_host({
  pending = H.nested_pending,
  done = H.nested_done,
  settle = function(bufnr, parent_id)
    -- After the result of the parent is recorded and before it is written.
    H.nested_settle(bufnr, parent_id)
  end,
})

M._scan = H.scan
M._placeholders = H.placeholders

-- Unloading (:bunload, :bdelete, :e) or wiping a buffer stops its tools.
session.on("unload", "cycle", function(bufnr)
  M.detach(bufnr)
end)
session.on("wipe", "cycle", function(bufnr)
  M.detach(bufnr)
end)

return M
