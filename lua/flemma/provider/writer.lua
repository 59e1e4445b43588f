--- Writes a streamed response into the chat buffer: `@Assistant:` at once with a
--- spinner, text as it arrives (at most one buffer change per `interval` ms, the whole
--- response one undo step), thinking in `<thinking>` blocks with the provider's
--- signature, each tool use as a complete block once its input is complete, and a
--- fresh `@You:` at the end. The buffer is non-modifiable meanwhile; `finish`
--- restores it on every exit path.
---
--- Text and thinking the provider streams never become structure: they pass a
--- streaming escaper (`:help flemma-escaping`), and a code fence the model's text
--- leaves open is closed before the writer's own structure (a tool use, a thinking
--- block, `@You:`) follows, so that structure is never read as text.
local document = require("flemma.chat.document")
local native = require("flemma.core.native")

local M = {}

M.ns = vim.api.nvim_create_namespace("flemma.response")
M.interval = 16
M.max_flush = 128 * 1024
-- Tool inputs up to this size are decoded and written as compact JSON; longer ones
-- as they came.
M.max_input_normalized = 64 * 1024
--- At most this many lines per change as well: each line costs the buffer's
--- listeners (the document, folds, decorations) some microseconds, and 128 KB of
--- short lines (tool uses) held the loop 40-50 ms.
M.max_flush_lines = 1000
--- Pending text above this many bytes makes `over_limit()` true: the request holds
--- the stream back until a flush brings it down to `max_flush` (`on_low`).
M.max_pending = 256 * 1024
M.frames = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }
M.cancelled_line = "<!-- flemma: cancelled -->"

---@class flemma.provider.Writer
---@field bufnr integer
---@field provider string the label written on signatures ("anthropic")
---@field pending string[] text not yet in the buffer: entries head .. tail (a queue)
---@field head integer
---@field tail integer
---@field pending_nl integer newlines in the pending text
---@field block? { index: integer, kind: string } the open text/thinking block
---@field tools table<integer, { id: string, name: string, json: string[] }> open tool uses by index
---@field wrote boolean content was written (or is pending)
---@field pending_bytes integer bytes of the pending text
---@field on_low? fun() called (once, then cleared) when a flush leaves at most `max_flush` bytes pending
---@field max_tool_calls? integer tool uses beyond this many get an error result at the end
---@field over_cap string[] ids of the tool uses beyond `max_tool_calls`
local Writer = {}
Writer.__index = Writer

--- Appends `@Assistant:` to the buffer and locks it.
---@param bufnr integer
---@param opts? { provider?: string, label?: string, max_tool_calls?: integer }
---@return flemma.provider.Writer
function M.new(bufnr, opts)
  opts = opts or {}
  local self = setmetatable({
    bufnr = bufnr,
    provider = opts.provider or "anthropic",
    label = opts.label or "",
    max_tool_calls = opts.max_tool_calls,
    over_cap = {},
    pending = {},
    head = 1,
    tail = 0,
    pending_nl = 0,
    pending_bytes = 0,
    tools = {},
    wrote = false,
    esc = native.escaper_new(),
    last_flush = 0,
    started = vim.uv.now(),
    frame = 1,
  }, Writer)
  local bo = vim.bo[bufnr]
  self.saved_modifiable = bo.modifiable
  local count = vim.api.nvim_buf_line_count(bufnr)
  local last = vim.api.nvim_buf_get_lines(bufnr, count - 1, count, false)[1] or ""
  local lines = { "@Assistant:", "" }
  local first = count -- 0-based row where "@Assistant:" goes
  local doc = document.get(bufnr)
  local last_msg = doc.messages[#doc.messages]
  if last_msg and last_msg.role == "assistant" then
    -- An unfinished answer (the chat ends with an @Assistant: message, e.g. saved
    -- while it streamed): the response continues it after a blank line below its
    -- last line, with no second marker.
    local stop = count
    while
      stop > last_msg.first_line and not (vim.api.nvim_buf_get_lines(bufnr, stop - 1, stop, false)[1] or ""):find("%S")
    do
      stop = stop - 1
    end
    self.continued = { row = stop, lines = vim.api.nvim_buf_get_lines(bufnr, stop, -1, false) }
    self.start_row = last_msg.first_line - 1
    self.start_count = count
    bo.modifiable = true
    vim.api.nvim_buf_set_lines(bufnr, stop, -1, false, { "", "" })
    bo.modifiable = false
  end
  if self.continued then
    -- Placed above.
  elseif count == 1 and last == "" then
    first = 0
    lines = { "@Assistant:", "" }
    self.replaced_empty = true
  elseif last ~= "" then
    table.insert(lines, 1, "")
    first = count + 1
  else
    -- The buffer ends with an empty line: a blank line before the marker. When it
    -- ends with two, reuse the last one.
    local prev = count >= 2 and vim.api.nvim_buf_get_lines(bufnr, count - 2, count - 1, false)[1] or nil
    if prev == "" then
      first = count - 1
      self.reused_last = true
    end
  end
  if not self.continued then
    self.start_row = first -- 0-based row of "@Assistant:"
    self.start_count = count
  end
  bo.modifiable = true
  if self.continued then
    -- Nothing more to write.
  elseif self.replaced_empty then
    vim.api.nvim_buf_set_lines(bufnr, 0, 1, false, lines)
  elseif self.reused_last then
    vim.api.nvim_buf_set_lines(bufnr, count - 1, count, false, lines)
  else
    vim.api.nvim_buf_set_lines(bufnr, count, count, false, lines)
  end
  bo.modifiable = false
  self.row = vim.api.nvim_buf_line_count(bufnr) - 1 -- 0-based row of the write position
  self.col = 0
  self.mark = vim.api.nvim_buf_set_extmark(bufnr, M.ns, self.start_row, 0, {})
  self:render_spinner()
  self.spin_timer = vim.uv.new_timer()
  self.spin_timer:start(
    100,
    100,
    vim.schedule_wrap(function()
      if self.spin_timer then
        self.frame = self.frame % #M.frames + 1
        self:render_spinner()
      end
    end)
  )
  return self
end

function Writer:render_spinner(status)
  if not vim.api.nvim_buf_is_valid(self.bufnr) then
    return
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(self.bufnr, M.ns, self.mark, {})
  if not pos or pos[1] == nil then
    return
  end
  local elapsed = math.floor((vim.uv.now() - self.started) / 1000)
  local text = status or self.status or (self.wrote and "streaming" or "waiting")
  vim.api.nvim_buf_set_extmark(self.bufnr, M.ns, pos[1], 0, {
    id = self.mark,
    virt_text = {
      {
        (" %s %s%s (%ds)"):format(M.frames[self.frame], self.label ~= "" and (self.label .. " ") or "", text, elapsed),
        "FlemmaToolSpinner",
      },
    },
    virt_text_pos = "eol",
  })
end

--- Sets the short status shown next to the spinner (e.g. a retry countdown).
function Writer:set_status(text)
  self.status = text
  self:render_spinner()
end

-- ---------------------------------------------------------------------------
-- Pending text and flushing
-- ---------------------------------------------------------------------------

--- Queues text to write. A line longer than `max_flush` becomes a queue entry of its
--- own (split off here, where the text arrives), so that `take` hands it to Neovim
--- as it is.
function Writer:push(s)
  if s == "" then
    return
  end
  local limit = M.max_flush
  if #s > limit then
    local find, sub = string.find, string.sub
    local at, from, parts = 1, 1, nil
    while true do
      local nl = find(s, "\n", at, true)
      local stop = nl or (#s + 1)
      if stop - at > limit and (at > 1 or nl) then
        parts = parts or {}
        if at > from then
          parts[#parts + 1] = sub(s, from, at - 1)
        end
        parts[#parts + 1] = sub(s, at, stop - 1)
        from = stop
      end
      if not nl then
        break
      end
      at = nl + 1
    end
    if parts then
      if from <= #s then
        parts[#parts + 1] = sub(s, from)
      end
      for _, part in ipairs(parts) do
        self:queue(part)
      end
      return
    end
  end
  self:queue(s)
end

function Writer:queue(s)
  self.tail = self.tail + 1
  self.pending[self.tail] = s
  self.pending_bytes = self.pending_bytes + #s
  -- Counted with plain finds: gsub tried its pattern at every byte of a long text.
  local find, at = string.find, 1
  while true do
    local nl = find(s, "\n", at, true)
    if not nl then
      break
    end
    self.pending_nl = self.pending_nl + 1
    at = nl + 1
  end
  self.wrote = true
  self:schedule()
end

--- Whether text waits to be written.
function Writer:has_pending()
  return self.head <= self.tail
end

--- Whether more text waits than the writer should be given before it wrote some
--- (`max_pending`); `on_low` says when it can take more.
function Writer:over_limit()
  return self.pending_bytes > M.max_pending
end

--- The 0-based row the next pushed text starts on.
function Writer:next_row()
  return self.row + self.pending_nl
end

function Writer:schedule()
  if self.flush_timer or self.closed then
    return
  end
  local wait = math.max(0, M.interval - (vim.uv.now() - self.last_flush))
  self.flush_timer = vim.uv.new_timer()
  self.flush_timer:start(
    wait,
    0,
    vim.schedule_wrap(function()
      if self.flush_timer then
        self.flush_timer:close()
        self.flush_timer = nil
      end
      if not self.closed then
        self:flush()
      end
    end)
  )
end

--- Runs fn with the buffer modifiable, joined to the response's undo step.
function Writer:edit(fn)
  local bufnr = self.bufnr
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  vim.api.nvim_buf_call(bufnr, function()
    local bo = vim.bo[bufnr]
    bo.modifiable = true
    pcall(vim.cmd, "silent! undojoin")
    local ok, err = pcall(fn)
    bo.modifiable = false
    if not ok then
      error(err, 0)
    end
  end)
end

--- Takes the text to write now from the front of the queue, as the lines of one
--- nvim_buf_set_text (the first continues the current line, the last is the start
--- of an unfinished line, "" after a newline): whole lines of at most `limit` bytes,
--- else all of it. A line longer than the limit is taken whole, to its newline (or
--- the end of the queue), and alone: Neovim copies a line on each change to it, so
--- writing a long line in pieces cost its length again for every piece, and what
--- follows it waits for the next flush, so that one turn of the loop holds only the
--- long line's change. A line that is one queue entry (a tool input, see `push`) is
--- handed on as that same string, never joined or copied in Lua: each copy of a
--- 10 MB line cost a few milliseconds of new memory. At most `max_flush_lines` lines
--- are taken.
---@return string[] lines, integer bytes
function Writer:take(limit)
  local q, tail = self.pending, self.tail
  local max_lines = limit ~= math.huge and M.max_flush_lines or math.huge
  local find, sub = string.find, string.sub
  local lines, n, bytes = {}, 0, 0
  local acc, accn = {}, 0 -- the pieces of the line being gathered
  local function gathered(last)
    if last then
      acc[#acc + 1] = last
    end
    local k = #acc
    local line = k == 0 and "" or k == 1 and acc[1] or table.concat(acc)
    acc, accn = {}, 0
    return line
  end
  -- Where the line being gathered starts (entry, byte): what is not taken goes
  -- back from there; entries are removed only once taken.
  local li, lpos = self.head, 1
  local stopped = false
  local i = self.head
  while i <= tail and not stopped do
    local s = q[i]
    local pos = 1
    while true do
      local nl = find(s, "\n", pos, true)
      if not nl then
        break
      end
      local len = accn + (nl - pos)
      if n > 0 and (bytes + len + 1 > limit or n >= max_lines) then
        stopped = true
        break
      end
      n = n + 1
      lines[n] = gathered(nl > pos and sub(s, pos, nl - 1) or nil)
      bytes = bytes + len + 1
      pos = nl + 1
      li, lpos = i, pos
    end
    if not stopped and pos <= #s then
      local rest = pos == 1 and s or sub(s, pos)
      if n > 0 and bytes + accn + #rest > limit then
        -- An unfinished line going past the limit waits for the next flush.
        stopped = true
      else
        acc[#acc + 1] = rest
        accn = accn + #rest
      end
    end
    i = i + 1
  end
  if stopped then
    if lpos > #q[li] then
      li, lpos = li + 1, 1
    end
    for k = self.head, li - 1 do
      q[k] = nil
    end
    if lpos > 1 then
      q[li] = sub(q[li], lpos)
    end
    self.head = li
    lines[n + 1] = ""
  else
    bytes = bytes + accn
    lines[n + 1] = gathered()
    self.pending, self.head, self.tail = {}, 1, 0
  end
  if self.head > self.tail then
    self.pending, self.head, self.tail = {}, 1, 0
  end
  self.pending_bytes = math.max(0, self.pending_bytes - bytes)
  return lines, bytes
end

--- Writes the pending text into the buffer (one change). With `all` unset, at most
--- `max_flush` bytes go in now and the rest at the next tick, so no single change
--- holds the main loop long however fast the answer arrives.
function Writer:flush(all)
  if not self:has_pending() or not vim.api.nvim_buf_is_valid(self.bufnr) then
    return
  end
  local lines = self:take(all and math.huge or M.max_flush)
  self.pending_nl = self.pending_nl - (#lines - 1)
  local row, col = self.row, self.col
  document.api_change(self.bufnr, { row = row, col = col, lines = lines })
  local ok, err = pcall(self.edit, self, function()
    vim.api.nvim_buf_set_text(self.bufnr, row, col, row, col, lines)
  end)
  document.api_change(self.bufnr, false)
  if not ok then
    error(err, 0)
  end
  if #lines == 1 then
    self.col = col + #lines[1]
  else
    self.row = row + #lines - 1
    self.col = #lines[#lines]
  end
  self.last_flush = vim.uv.now()
  if self.on_low and self.pending_bytes <= M.max_flush then
    local cb = self.on_low
    self.on_low = nil
    cb()
  end
  if self:has_pending() then
    self:schedule()
  elseif self.drained then
    local cb = self.drained
    self.drained = nil
    vim.schedule(cb)
  end
end

--- Calls cb once every pending text is in the buffer (written at the usual pace,
--- never in one large change).
---@param cb fun()
function Writer:when_drained(cb)
  if not self:has_pending() then
    cb()
  else
    self.drained = cb
    self:schedule()
  end
end

-- ---------------------------------------------------------------------------
-- Blocks
-- ---------------------------------------------------------------------------

--- Text separating a new block from what was written before it.
function Writer:separate()
  if self.wrote then
    self:push("\n\n")
  end
end

--- Pushes text the provider streamed, escaped (the start of a line that may still
--- become a marker waits for the rest of its line, or for `final`).
function Writer:push_model(text, final)
  local out = self.esc:feed(text, final)
  if out ~= "" then
    self.at_bol = out:byte(-1) == 10
    self:push(out)
  end
end

function Writer:close_block()
  local b = self.block
  if not b then
    return
  end
  self.block = nil
  self:push_model("", true)
  if b.kind == "thinking" then
    self:push("\n</thinking>")
  else
    -- A fence the model's text left open would swallow what the writer adds next.
    local fence = self.esc:open_fence()
    if fence then
      self:push((self.at_bol and "" or "\n") .. fence)
    end
  end
  self.esc:reset()
end

function Writer:open_block(index, kind)
  local b = self.block
  if b and b.index == index and b.kind == kind then
    return b
  end
  self:close_block()
  self:separate()
  b = { index = index, kind = kind }
  if kind == "thinking" then
    b.tag_row = self:next_row()
    self:push("<thinking>\n")
  end
  self.block = b
  return b
end

--- Applies one decoded stream event (the shapes of flemma_stream_event in flemma.h).
---@param ev table
function Writer:apply(ev)
  local t = ev.type
  if self.held then
    -- Something came after the tool use with invalid input: it was not cut, write it.
    self:release_held()
  end
  if t == "text" then
    if ev.text ~= "" then
      self:open_block(ev.index or 0, "text")
      self:push_model(ev.text)
    end
  elseif t == "thinking" then
    if ev.text ~= "" then
      self:open_block(ev.index or 0, "thinking")
      self:push_model(ev.text)
    end
  elseif t == "thinking_signature" then
    local b = self.block
    if not (b and b.kind == "thinking" and b.index == (ev.index or b.index)) then
      b = self:open_block(ev.index or 0, "thinking")
    end
    b.signature = ev.signature
    self:flush(true)
    if ev.signature and ev.signature ~= "" and not ev.signature:find('[\n"]') then
      local line = ('<thinking %s:signature="%s">'):format(self.provider, ev.signature)
      self:edit(function()
        vim.api.nvim_buf_set_lines(self.bufnr, b.tag_row, b.tag_row + 1, false, { line })
      end)
      if b.tag_row == self.row then
        self.col = #line
      end
    end
  elseif t == "redacted_thinking" then
    self:close_block()
    self:separate()
    local data = self.esc:feed(ev.data or "", true)
    self.esc:reset()
    self:push("<thinking redacted>\n" .. data .. "\n</thinking>")
  elseif t == "tool_use_start" then
    self:close_block()
    self.tools[ev.index or 0] = { id = ev.id, name = require("flemma.provider.common").local_name(ev.name), json = {} }
  elseif t == "tool_input_delta" then
    local tool = self.tools[ev.index or 0]
    if tool then
      tool.json[#tool.json + 1] = ev.json
    end
  elseif t == "tool_use_stop" then
    local tool = self.tools[ev.index or 0]
    if tool then
      self.tools[ev.index or 0] = nil
      self:write_tool(tool)
    end
  end
end

--- Writes a tool use held back because its input is not valid JSON.
function Writer:release_held()
  local tool = self.held
  self.held = nil
  if tool then
    self:write_tool(tool, true)
  end
end

--- Whether the answer ends in a tool use whose input is incomplete: one still open or
--- one held back (invalid JSON, the stream's last event), e.g. cut by the output limit.
function Writer:cut_tool()
  return self.held ~= nil or next(self.tools) ~= nil
end

--- Writes a complete tool use block. One whose input is not valid JSON is held back
--- (unless `now`) until the next event: a stream cut by the output limit ends with it,
--- and it is then dropped as a cancel drops an open one.
function Writer:write_tool(tool, now)
  local json = table.concat(tool.json)
  local input
  if not json:find("%S") then
    input = vim.empty_dict()
  elseif #json <= M.max_input_normalized then
    local ok, value = pcall(vim.json.decode, json, { luanil = { object = true } })
    input = ok and type(value) == "table" and value or nil
    if not input and not now then
      self.held = tool
      return
    end
  end
  local id = tostring(tool.id or ""):gsub("[`\n]", "_")
  local name = tostring(tool.name or ""):gsub("[`\n]", "_")
  if id == "" then
    id = ("tool_%d"):format(vim.uv.now())
  end
  if name == "" then
    name = "unknown"
  end
  self:close_block()
  local lines
  if input then
    lines = document.render_tool_use(id, name, input)
  else
    -- Invalid or long JSON: written as it came (the parser checks it natively; the
    -- cycle denies an invalid one with the reason). Decoding and encoding a long
    -- input here held the main loop in one piece.
    -- The input is queued as its own string (never joined with the lines around it:
    -- a 10 MB input was copied twice more here).
    local fence = document.fence_for(json)
    self:separate()
    self:push(("**Tool Use:** `%s` (`%s`)\n\n%sjson\n"):format(name, id, fence))
    self:push(json)
    self:push("\n" .. fence)
  end
  if input then
    self:separate()
    self:push(table.concat(lines, "\n"))
  end
  self.tool_count = (self.tool_count or 0) + 1
  if self.max_tool_calls and self.tool_count > self.max_tool_calls then
    self.over_cap[#self.over_cap + 1] = id
  end
end

--- The error results of the tool uses beyond `max_tool_calls` (lines, or nil).
function Writer:over_cap_results()
  if #self.over_cap == 0 then
    return nil
  end
  local message = ("not run: this answer holds %d tool calls and at most %d run per answer (tools.max_calls_per_answer); ask for fewer at a time"):format(
    self.tool_count,
    self.max_tool_calls
  )
  local lines = {}
  for i, id in ipairs(self.over_cap) do
    if i > 1 then
      lines[#lines + 1] = ""
    end
    vim.list_extend(lines, document.render_error(id, message))
  end
  return lines
end

-- ---------------------------------------------------------------------------
-- The end
-- ---------------------------------------------------------------------------

function Writer:stop_timers()
  if self.flush_timer then
    self.flush_timer:stop()
    self.flush_timer:close()
    self.flush_timer = nil
  end
  if self.spin_timer then
    self.spin_timer:stop()
    self.spin_timer:close()
    self.spin_timer = nil
  end
end

--- Queues the end of a complete answer when tool uses beyond `max_tool_calls` need
--- their error results (thousands of them): `@You:` and the results go in at the
--- writer's pace, and `finish` then only closes the response. A no-op otherwise.
function Writer:push_tail()
  self:release_held()
  local results = not self.closed and not self.tail_row and self:over_cap_results() or nil
  if not results then
    return
  end
  self:close_block()
  self:push("\n\n")
  self.tail_row = self:next_row() + 1
  self:push("\n@You:\n" .. table.concat(results, "\n"))
  self.over_cap = {}
end

--- Ends the response. `status`: "completed" (a fresh `@You:` follows), "cancelled"
--- (an incomplete tool use is dropped, a cancelled line is left: `note` when given,
--- e.g. why the request was stopped) or "error" (an empty `@Assistant:` is removed).
--- Tool uses beyond `max_tool_calls` get their error results under the `@You:`.
--- Restores the buffer's `modifiable`.
---@param status "completed"|"cancelled"|"error"
---@param note? string the line left instead of the cancelled line
---@return { row: integer }|nil where `@You:` was written (0-based), nil when removed
function Writer:finish(status, note)
  if self.closed then
    return nil
  end
  if status == "cancelled" then
    self.held = nil
  else
    self:release_held()
  end
  self.tools = {}
  self:close_block()
  self:stop_timers()
  self.closed = true
  local bufnr = self.bufnr
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return nil
  end
  self:flush(true)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  local result
  local ok, err = pcall(function()
    local count = vim.api.nvim_buf_line_count(bufnr)
    -- The response's last non-blank line (never above the marker).
    local last = count - 1
    while last > self.start_row do
      local l = vim.api.nvim_buf_get_lines(bufnr, last, last + 1, false)[1]
      if l:find("%S") then
        break
      end
      last = last - 1
    end
    local empty = last == self.start_row
    if status == "error" and self.continued and not self.wrote then
      -- Nothing arrived to continue the answer: put its end back as it was.
      self:edit(function()
        vim.api.nvim_buf_set_lines(bufnr, self.continued.row, -1, false, self.continued.lines)
      end)
      return
    end
    if status == "error" and empty then
      -- Nothing arrived: put the buffer back as it was.
      self:edit(function()
        if self.replaced_empty then
          vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { "" })
        elseif self.reused_last then
          vim.api.nvim_buf_set_lines(bufnr, self.start_row, -1, false, { "" })
        else
          vim.api.nvim_buf_set_lines(bufnr, self.start_count, -1, false, {})
        end
      end)
      return
    end
    if self.tail_row then
      -- push_tail wrote `@You:` and the results.
      self:edit(function()
        vim.api.nvim_buf_set_lines(bufnr, last + 1, -1, false, { "" })
      end)
      result = { row = self.tail_row }
      return
    end
    local tail = {}
    if status == "cancelled" then
      if not empty then
        tail[#tail + 1] = ""
      end
      tail[#tail + 1] = note or M.cancelled_line
    end
    vim.list_extend(tail, { "", "@You:" })
    local you = #tail
    local results = self:over_cap_results()
    if results then
      vim.list_extend(tail, results)
    end
    tail[#tail + 1] = ""
    self:edit(function()
      vim.api.nvim_buf_set_lines(bufnr, last + 1, -1, false, tail)
    end)
    result = { row = last + you }
  end)
  vim.bo[bufnr].modifiable = self.saved_modifiable
  if not ok then
    error(err, 0)
  end
  return result
end

--- Whether anything of the response reached the writer (text, thinking, tool uses).
function Writer:has_content()
  return self.wrote or self.held ~= nil or next(self.tools) ~= nil
end

return M
