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
local document = require("flemma.document")
local native = require("flemma.native")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.response")
M.interval = 16
M.max_flush = 128 * 1024
-- Tool inputs up to this size are decoded and written as compact JSON; longer ones
-- as they came.
M.max_input_normalized = 64 * 1024
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
local Writer = {}
Writer.__index = Writer

--- Appends `@Assistant:` to the buffer and locks it.
---@param bufnr integer
---@param opts? { provider?: string, label?: string }
---@return flemma.provider.Writer
function M.new(bufnr, opts)
  opts = opts or {}
  local self = setmetatable({
    bufnr = bufnr,
    provider = opts.provider or "anthropic",
    label = opts.label or "",
    pending = {},
    head = 1,
    tail = 0,
    pending_nl = 0,
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
    while stop > last_msg.first_line and not (vim.api.nvim_buf_get_lines(bufnr, stop - 1, stop, false)[1] or ""):find("%S") do
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
      { (" %s %s%s (%ds)"):format(M.frames[self.frame], self.label ~= "" and (self.label .. " ") or "", text, elapsed), "FlemmaToolSpinner" },
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

function Writer:push(s)
  if s == "" then
    return
  end
  self.tail = self.tail + 1
  self.pending[self.tail] = s
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

--- The last newline of text within its first `limit` bytes, or nil. Linear in
--- `limit` (a scan back from it); a pattern that looked for the last newline was
--- quadratic in the length of a line, and a line over the limit held Neovim for
--- minutes.
function H.cut(text, limit)
  local byte = string.byte
  for i = math.min(limit, #text), 1, -1 do
    if byte(text, i) == 10 then
      return i
    end
  end
  return nil
end

--- Takes the text to write now from the front of the queue: whole lines of at most
--- `limit` bytes (up to the last newline within the limit), else all of it. A line
--- longer than the limit is taken whole, to its newline (or the end of the queue):
--- Neovim copies a line on each change to it, so writing a long line in pieces cost
--- its length again for every piece. Only what is taken is joined and copied,
--- however much waits behind it.
function Writer:take(limit)
  local q, i, n = self.pending, self.head, 0
  local parts = {}
  while i <= self.tail and n < limit do
    parts[#parts + 1] = q[i]
    n = n + #q[i]
    q[i] = nil
    i = i + 1
  end
  local text = table.concat(parts)
  if n > limit then
    local at = H.cut(text, limit) or text:find("\n", limit + 1, true)
    if not at then
      -- The rest of the long line, from the parts behind it.
      local more, len = { text }, #text
      while i <= self.tail do
        local s = q[i]
        q[i] = nil
        i = i + 1
        more[#more + 1] = s
        local nl = s:find("\n", 1, true)
        if nl then
          at = len + nl
          break
        end
        len = len + #s
      end
      text = table.concat(more)
      at = at or #text
    end
    if at < #text then
      -- What follows goes back to the front of the queue.
      i = i - 1
      q[i] = text:sub(at + 1)
      text = text:sub(1, at)
    end
  end
  self.head = i
  if i > self.tail then
    self.pending, self.head, self.tail = {}, 1, 0
  end
  return text
end

--- Writes the pending text into the buffer (one change). With `all` unset, at most
--- `max_flush` bytes go in now and the rest at the next tick, so no single change
--- holds the main loop long however fast the answer arrives.
function Writer:flush(all)
  if not self:has_pending() or not vim.api.nvim_buf_is_valid(self.bufnr) then
    return
  end
  local text = self:take(all and math.huge or M.max_flush)
  local lines = vim.split(text, "\n", { plain = true })
  self.pending_nl = self.pending_nl - (#lines - 1)
  local row, col = self.row, self.col
  self:edit(function()
    vim.api.nvim_buf_set_text(self.bufnr, row, col, row, col, lines)
  end)
  if #lines == 1 then
    self.col = col + #lines[1]
  else
    self.row = row + #lines - 1
    self.col = #lines[#lines]
  end
  self.last_flush = vim.uv.now()
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

--- Applies one decoded stream event (see STREAM_API.md).
---@param ev table
function Writer:apply(ev)
  local t = ev.type
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
      local line = ("<thinking %s:signature=\"%s\">"):format(self.provider, ev.signature)
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

--- Writes a complete tool use block.
function Writer:write_tool(tool)
  local json = table.concat(tool.json)
  local input
  if not json:find("%S") then
    input = vim.empty_dict()
  elseif #json <= M.max_input_normalized then
    local ok, value = pcall(vim.json.decode, json, { luanil = { object = true } })
    input = ok and type(value) == "table" and value or nil
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
    local fence = document.fence_for(json)
    lines = { ("**Tool Use:** `%s` (`%s`)"):format(name, id), "", fence .. "json", json, fence }
  end
  self:separate()
  self:push(table.concat(lines, "\n"))
  self.tool_count = (self.tool_count or 0) + 1
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

--- Ends the response. `status`: "completed" (a fresh `@You:` follows), "cancelled"
--- (an incomplete tool use is dropped, a cancelled line is left) or "error" (an empty
--- `@Assistant:` is removed). Restores the buffer's `modifiable`.
---@param status "completed"|"cancelled"|"error"
---@return { row: integer }|nil where `@You:` was written (0-based), nil when removed
function Writer:finish(status)
  if self.closed then
    return nil
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
    local tail = {}
    if status == "cancelled" then
      if not empty then
        tail[#tail + 1] = ""
      end
      tail[#tail + 1] = M.cancelled_line
    end
    vim.list_extend(tail, { "", "@You:", "" })
    self:edit(function()
      vim.api.nvim_buf_set_lines(bufnr, last + 1, -1, false, tail)
    end)
    result = { row = last + 1 + #tail - 2 }
  end)
  vim.bo[bufnr].modifiable = self.saved_modifiable
  if not ok then
    error(err, 0)
  end
  return result
end

--- Whether anything of the response reached the writer (text, thinking, tool uses).
function Writer:has_content()
  return self.wrote or next(self.tools) ~= nil
end

return M
