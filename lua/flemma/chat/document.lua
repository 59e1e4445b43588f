--- The .chat document model: parsing (in the native core), a per-buffer cache,
--- writers for tool blocks, the provider-neutral conversation, and the checks
--- run before a buffer is sent. See `:help flemma-format`.
local events = require("flemma.core.events")
local session = require("flemma.core.session")
local native = require("flemma.core.native")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.document.Diagnostic
---@field line integer 1-based
---@field severity "error"|"warning"|"info"
---@field message string

---@class flemma.document.Part
---@field kind "text"|"tool_use"|"tool_result"|"thinking"|"file" ("file": attached at send time, flemma.attachments)
---@field first_line integer
---@field last_line integer
---@field text? string text, thinking
---@field id? string tool_use, tool_result
---@field name? string tool_use
---@field input? table tool_use: the decoded input object, nil when invalid
---@field input_error? string tool_use: why `input` is nil
---@field status? string tool_result: nil for a real result, else the placeholder status
---@field is_error? boolean tool_result
---@field content? string tool_result: the text between the fences
---@field fence_line? integer tool_use, tool_result: the opening fence line
---@field info? string tool_result: the fence's info string
---@field legacy? boolean tool_result: status given as a `(status)` header suffix
---@field signature? string thinking
---@field provider? string thinking
---@field redacted? boolean thinking

---@class flemma.document.Message
---@field role "system"|"user"|"assistant"
---@field first_line integer
---@field last_line integer
---@field parts flemma.document.Part[]

---@class flemma.document.Doc
---@field frontmatter? { lang: string, code: string, first_line: integer, last_line: integer }
---@field messages flemma.document.Message[]
---@field diagnostics flemma.document.Diagnostic[]

--- Statuses a placeholder may have.
M.STATUSES = { "approved", "pending", "denied", "rejected" }
H.status_set = { approved = true, pending = true, denied = true, rejected = true }

H.decode_opts = { luanil = { object = true } }

--- Decodes the tool inputs of a raw model in place: all valid inputs in one
--- vim.json.decode call (they were validated natively), one by one if that fails.
function H.decode_inputs(raw)
  local decode, opts = vim.json.decode, H.decode_opts
  local uses, batch, spans = raw.tool_uses, raw.inputs_json, raw.input_spans
  raw.tool_uses, raw.inputs_json, raw.input_spans = nil, nil, nil
  local n = #uses
  if n == 0 then
    return raw
  end
  local ok_all, values = pcall(decode, batch, opts)
  if ok_all and type(values) == "table" and #values == n then
    for i = 1, n do
      uses[i].input = values[i]
    end
    return raw
  end
  for i, p in ipairs(uses) do
    local ok, value = pcall(decode, batch:sub(spans[2 * i - 1], spans[2 * i]), opts)
    if ok and type(value) == "table" then
      p.input = value
    else
      p.input_error = "the input cannot be decoded: " .. util.message(value)
      table.insert(raw.diagnostics, {
        line = p.fence_line or p.first_line,
        severity = "error",
        message = ("the input of tool use `%s` (%s) cannot be decoded (%s): fix the JSON between the fences"):format(
          p.id,
          p.name,
          util.message(value)
        ),
      })
    end
  end
  return raw
end

--- Parses a document given as its text (lines joined by "\n").
---@param text string
---@return flemma.document.Doc
function M.parse_text(text)
  if type(text) ~= "string" then
    util.error("document.parse_text: `text` should be a string, not " .. type(text))
  end
  return H.decode_inputs(native.parse_document(text))
end

--- Parses a document given as a list of lines (as from nvim_buf_get_lines).
--- The lines are handed to the native parser as they are, without building
--- the joined text in Lua.
---@param lines string[]
---@return flemma.document.Doc
function M.parse(lines)
  if type(lines) ~= "table" then
    util.error("document.parse: `lines` should be a list of strings, not " .. type(lines))
  end
  return H.decode_inputs(native.parse_document(lines))
end

-- ---------------------------------------------------------------------------
-- The live model of a buffer
-- ---------------------------------------------------------------------------
--
-- Each buffer asked for gets a native incremental document fed from
-- nvim_buf_attach's on_lines (only the changed lines cross to C++). The Lua
-- side keeps one entry per native segment (a message, or the frontmatter and
-- what precedes the first marker) holding its tables; an entry is built again
-- only when its segment changed, otherwise only its line numbers move. Tool
-- inputs are decoded when `input` (or `input_error`) is first read.

---@class flemma.document.Live
---@field idoc ffi.cdata*
---@field version integer native version the entries reflect
---@field nlines integer line count at that version
---@field entries (table|false)[] one per native segment, in order (false: not built yet)
---@field doc? flemma.document.Doc the assembled model of `doc_version`
---@field doc_version? integer
---@field broken? boolean an edit failed: rebuild before use

-- H.live: the `live` field of each buffer's session record (flemma.core.session).

-- Lazy tool inputs: the raw JSON sits in the part's own metatable (so copies
-- made by vim.deepcopy keep it); the first read of `input` or `input_error`
-- decodes it into plain fields and drops the metatable.
function H.lazy_index(t, k)
  if k ~= "input" and k ~= "input_error" then
    return nil
  end
  local mt = getmetatable(t)
  local json = mt and mt.json
  if not json then
    return nil
  end
  setmetatable(t, nil)
  local ok, value = pcall(vim.json.decode, json, H.decode_opts)
  if ok and type(value) == "table" then
    rawset(t, "input", value)
  else
    rawset(t, "input_error", "the input cannot be decoded: " .. util.message(value))
  end
  return rawget(t, k)
end

function H.lazy(part, json)
  return setmetatable(part, { __index = H.lazy_index, json = json })
end

function H.build_entry(idoc, i)
  local seg = native.idoc_segment(idoc, i)
  for part, json in pairs(seg.inputs) do
    H.lazy(part, json)
  end
  seg.inputs = nil
  return seg
end

function H.shift_entry(e, d)
  e.first_line = e.first_line + d
  local m = e.message
  if m then
    m.first_line, m.last_line = m.first_line + d, m.last_line + d
    for _, p in ipairs(m.parts) do
      p.first_line, p.last_line = p.first_line + d, p.last_line + d
      local f = rawget(p, "fence_line")
      if f then
        p.fence_line = f + d
      end
    end
  end
  local fm = e.frontmatter
  if fm then
    fm.first_line, fm.last_line = fm.first_line + d, fm.last_line + d
  end
end

--- Gives entry i (0-based) its current line numbers (it may have moved since it was built).
function H.place(L, i)
  local e = L.entries[i + 1]
  if not e then
    e = H.build_entry(L.idoc, i)
    L.entries[i + 1] = e
    return e
  end
  local first = native.idoc_segment_raw(L.idoc, i).first_line
  if e.first_line ~= first then
    H.shift_entry(e, first - e.first_line)
    L.moved = true -- the next assembly checks the lines of every entry after its change
  end
  return e
end

function H.load(bufnr, L)
  L.idoc = native.idoc_new()
  L.source = "buffer"
  if H.load_file(bufnr, L.idoc) then
    L.source = "file"
  else
    native.idoc_edit(L.idoc, 0, 0, vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
  end
  L.version, L.nlines, L.entries, L.doc, L.broken = 0, 0, {}, nil, nil
  L.problems = nil
end

-- Chats from this size on are first read from their file when they can be.
H.FILE_MIN_BYTES = 64 * 1024
H.SAMPLES = 64

--- Builds the document of a long chat just read from its file from the file,
--- read and split natively, instead of a string per buffer line (a 10 MB chat
--- has 300,000 lines). Only when the buffer surely holds that text: not changed since
--- it was read (flemma.read), the file not changed since (size, modification
--- time), read without conversion (unix line ends, UTF-8, no BOM, a final
--- newline); then the buffer's line count and size must be the text's, and
--- sample lines equal at the same offsets. Otherwise false, and the buffer's
--- lines are read.
function H.load_file(bufnr, idoc)
  local read = require("flemma.core.read").take(bufnr)
  if not read or read.size < H.FILE_MIN_BYTES then
    return false
  end
  local bo = vim.bo[bufnr]
  if
    bo.modified
    or bo.buftype ~= ""
    or bo.binary
    or bo.bomb
    or bo.fileformat ~= "unix"
    or not (bo.fileencoding == "" or bo.fileencoding == "utf-8")
    or vim.o.encoding ~= "utf-8"
  then
    return false
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  local st = vim.uv.fs_stat(name)
  if not st or st.type ~= "file" or st.size ~= read.size or st.mtime.sec ~= read.sec or st.mtime.nsec ~= read.nsec then
    return false
  end
  local count = vim.api.nvim_buf_line_count(bufnr)
  if vim.api.nvim_buf_get_offset(bufnr, count) ~= st.size then
    return false
  end
  -- Lines spread over the buffer, the first and last ones among them: the file
  -- must hold the same text at the same offset, followed by a line end.
  local samples = {}
  for k = 0, H.SAMPLES do
    local row = math.floor((count - 1) * k / H.SAMPLES)
    local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1]
    samples[#samples + 1] = { vim.api.nvim_buf_get_offset(bufnr, row), line }
  end
  return native.idoc_edit_file(idoc, 0, 0, name, st.size, count, samples)
end

function H.forget(bufnr)
  session.set(bufnr, "live", nil)
end

--- Whether the rows on_bytes applied still hold the text it read for them, where
--- on_lines reports rows [first, last) (on_lines counts whole lines, so it may name
--- a row more than on_bytes, whose splice is exact). Proportional to the change:
--- only those rows are read.
function H.same_rows(L, buf, first, last)
  local row, lines = L.bytes_row, L.bytes_lines
  if not lines then
    return false
  end
  local a, b = math.max(first, row), math.min(last, row + #lines)
  if b <= a then
    return #lines == 0 -- a deletion: nothing was read
  end
  local now = vim.api.nvim_buf_get_lines(buf, a, b, false)
  for i = 1, #now do
    if now[i] ~= lines[a - row + i] then
      return false
    end
  end
  return true
end

--- Whether the document lagged behind the buffer when Neovim updated folds for a
--- change made after `version` (a change that only on_lines applied: undo, J, :s
--- under 0.10; or a document built again). Changes that on_bytes applied (typing,
--- dd, p, streamed chunks) were current when Neovim evaluated the fold expression.
---@param bufnr integer
---@param version integer
---@return boolean
function M.lagged_since(bufnr, version)
  local L = session.field(bufnr, "live")
  if not L or L.broken or not L.idoc then
    return true
  end
  return L.lag_version ~= nil and L.lag_version > version
end

--- The rows [row, last_new) a change told of by M.api_change wrote, without reading
--- them from the buffer (a 10 MB line: 1-10 ms): only for lines inserted at the start
--- of a row, on at most three rows, when each row is as long as its line (then it
--- holds just that line: nothing was before the insertion, nothing after it). Nil
--- otherwise.
function H.api_lines(a, buf, row, col, old_rows, old_col, new_rows, last_new)
  if type(a) ~= "table" or a.row ~= row or a.col ~= 0 or col ~= 0 or old_rows ~= 0 or old_col ~= 0 then
    return nil
  end
  local n = last_new - row
  if new_rows ~= #a.lines - 1 or n > 3 or n > #a.lines then
    return nil
  end
  local offset = vim.api.nvim_buf_get_offset
  local at = offset(buf, row)
  for k = 1, n do
    local nxt = offset(buf, row + k)
    if nxt - at - 1 ~= #a.lines[k] then
      return nil
    end
    at = nxt
  end
  return { unpack(a.lines, 1, n) }
end

--- Says that the caller changes bufnr through nvim_buf_set_text or
--- nvim_buf_set_lines until it calls again with `on` false: Neovim calls on_bytes
--- after such a change (only `:s` under Neovim 0.10 calls it before), so on_lines
--- need not read the changed rows again to check what on_bytes read (a 10 MB line
--- written by the response writer: a millisecond or more each time).
--- `on` may be the change itself, { row, col, lines } as given to nvim_buf_set_text
--- (0-based, inserting at row, col): then on_bytes may take the lines from it.
---@param bufnr integer
---@param on boolean|{ row: integer, col: integer, lines: string[] }
function M.api_change(bufnr, on)
  local L = session.field(bufnr, "live")
  if L then
    L.api_change = on or nil
  end
end

--- The live state of a buffer, attached on first use.
---@return flemma.document.Live
function H.live_of(bufnr)
  local L = session.field(bufnr, "live")
  if L and not L.broken then
    return L
  end
  L = L or {}
  H.load(bufnr, L)
  if not session.field(bufnr, "live") then
    session.get(bufnr).live = L
    local attached = vim.api.nvim_buf_attach(bufnr, false, {
      -- A change reaches on_bytes before Neovim updates the folds of the windows
      -- (whose expression reads this document), on_lines only after: the document
      -- follows on_bytes, so it never lags behind the folds; on_lines applies what
      -- no on_bytes did.
      on_bytes = function(_, buf, tick, row, col, _, old_rows, old_col, _, new_rows, new_col)
        return H.on_bytes(L, buf, tick, row, col, old_rows, old_col, new_rows, new_col)
      end,
      on_lines = function(_, buf, tick, first, last_old, last_new)
        return H.on_lines(L, buf, tick, first, last_old, last_new)
      end,
      on_reload = function(_, buf)
        if session.field(buf, "live") == L then
          L.broken = true
        end
      end,
      on_detach = function(_, buf)
        if session.field(buf, "live") == L then
          H.forget(buf)
        end
      end,
    })
    if not attached then
      session.set(bufnr, "live", nil)
      L.detached = true
    end
  end
  return L
end

--- on_bytes of the live state L of buf: applies the change to the native document
--- (the rows it touched, read now). Returns true to detach (a new state took over).
---@param L flemma.document.Live
function H.on_bytes(L, buf, tick, row, col, old_rows, old_col, new_rows, new_col)
  if session.field(buf, "live") ~= L then
    return true
  end
  if L.broken then
    return
  end
  local _, nlines = native.idoc_info(L.idoc)
  local count = vim.api.nvim_buf_line_count(buf)
  L.bytes_tick = nil
  if new_rows ~= old_rows and count == nlines then
    return -- applied already: an undo calls on_lines first, then on_bytes
  end
  -- The rows touched: the end rows too, unless both ends are at a line start
  -- (end columns are relative to the start column on the start row).
  local touched = ((old_rows == 0 and col + old_col or old_col) > 0 or (new_rows == 0 and col + new_col or new_col) > 0)
      and 1
    or 0
  local last_old = math.min(row + old_rows + touched, nlines)
  local last_new = math.min(row + new_rows + touched, count)
  if row > nlines or last_new - last_old ~= count - nlines then
    L.broken = true -- cannot tell which lines: built again when next read
    return
  end
  local lines = H.api_lines(L.api_change, buf, row, col, old_rows, old_col, new_rows, last_new)
    or vim.api.nvim_buf_get_lines(buf, row, last_new, false)
  local ok = pcall(native.idoc_edit, L.idoc, row, last_old, lines)
  if not ok then
    L.broken = true
  end
  L.bytes_tick = tick -- the change's on_lines comes with the next tick
  L.bytes_row, L.bytes_lines = row, lines
  L.bytes_api = L.api_change
end

--- on_lines of the live state L of buf: applies what no on_bytes did, then tells
--- the listeners. Returns true to detach (a new state took over).
---@param L flemma.document.Live
function H.on_lines(L, buf, tick, first, last_old, last_new)
  local cur = session.field(buf, "live")
  if cur ~= L then
    return true -- detach: a new state took over
  end
  if not L.broken then
    local _, nlines = native.idoc_info(L.idoc)
    local count = vim.api.nvim_buf_line_count(buf)
    local edit_last
    -- on_bytes saw the same changedtick step (normal-mode edits) or the same
    -- tick (nvim_buf_set_text of several lines).
    if L.bytes_tick and (L.bytes_tick == tick - 1 or L.bytes_tick == tick) and nlines == count then
      -- on_bytes applied this very change (a streamed chunk, x, dd), unless it
      -- read the lines before Neovim replaced them (:s under Neovim 0.10 calls
      -- on_bytes first): then the rows are applied again with their text now.
      -- A change through the API (M.api_change) had its lines read after it.
      if not L.bytes_api and not H.same_rows(L, buf, first, last_new) then
        edit_last = last_new
      end
    elseif nlines == count - (last_new - last_old) then
      edit_last = last_old -- no on_bytes applied this change
    elseif nlines == count then
      -- on_bytes applied it (maybe from a state in between): the same rows again
      edit_last = last_new
    else
      L.broken = true
    end
    L.bytes_tick, L.bytes_lines, L.bytes_api = nil, nil, nil
    if edit_last and (edit_last > first or last_new > first) then
      local ok =
        pcall(native.idoc_edit, L.idoc, first, edit_last, vim.api.nvim_buf_get_lines(buf, first, last_new, false))
      if not ok then
        L.broken = true
      end
      -- Neovim computed folds before this (the document lagged): see M.lagged_since.
      L.lag_version = (native.idoc_info(L.idoc))
    end
  end
  events.emit("changed", buf)
end

--- Brings the entries up to the native version: those of the segments that
--- changed are dropped (built again when first needed), the others kept. Returns the span of entries that
--- may have changed (0-based [lo, hi)).
function H.sync(L)
  local version, nlines, count = native.idoc_info(L.idoc)
  if version == L.version then
    return 0, 0
  end
  local _, lo, hi = native.idoc_changes(L.idoc, L.version)
  local old = L.entries
  local by_id = {}
  local tail = count - hi -- unchanged entries at the end
  local old_hi = #old - tail
  for k = lo + 1, old_hi do
    if old[k] then
      by_id[old[k].id] = old[k]
    end
  end
  -- Spliced in place: the unchanged entries before lo stay where they are,
  -- the tail moves only when the number of segments changed.
  local entries = old
  local old_n = #old
  if hi ~= old_hi then
    table.move(old, old_hi + 1, old_n, hi + 1)
    for k = count + 1, old_n do
      old[k] = nil
    end
  end
  for i = lo, hi - 1 do
    local s = native.idoc_segment_raw(L.idoc, i)
    local id = tonumber(s.id)
    local e = by_id[id]
    if e then
      by_id[id] = nil
      if e.first_line ~= s.first_line then
        H.shift_entry(e, s.first_line - e.first_line)
      end
    end
    entries[i + 1] = e or false -- built when first needed (H.place)
  end
  local problems = L.problems
  if problems then
    for _, e in pairs(by_id) do
      problems.with[e] = nil -- dropped: its problems are no longer the document's
    end
  end
  L.entries, L.version, L.nlines = entries, version, nlines
  return lo, hi
end

--- The live state of a buffer brought up to date (for tool previews): read
--- segment i with M.entry(state, i); see also M.changed_since.
---@param bufnr integer
function M.live(bufnr)
  local L = H.live_of(bufnr)
  H.sync(L)
  return L
end

--- The native document of a buffer (attached on first use), without bringing
--- the Lua entries up to date: for what reads the native document only (folds,
--- highlights), on the path of every change.
---@param bufnr integer
function M.idoc(bufnr)
  return H.live_of(bufnr).idoc
end

--- Entry i (0-based segment index) of a live state, with current line numbers.
function M.entry(L, i)
  return H.place(L, i)
end

--- The segments that changed since a version of the live state: exact, lo, hi (0-based, end exclusive).
function M.changed_since(L, version)
  return native.idoc_changes(L.idoc, version)
end

--- The parsed model of a buffer, kept up to date incrementally: messages whose
--- text did not change since the last call keep their tables (and move to
--- their new lines); tool inputs are decoded when first read. The returned
--- tables are shared: treat them as read-only, valid until the buffer changes.
---@param bufnr? integer 0 or nil for the current buffer
---@return flemma.document.Doc
function M.get(bufnr)
  if bufnr == nil or bufnr == 0 then
    bufnr = vim.api.nvim_get_current_buf()
  end
  if not vim.api.nvim_buf_is_valid(bufnr) then
    util.error("document.get: buffer " .. tostring(bufnr) .. " is not valid")
  end
  if not vim.api.nvim_buf_is_loaded(bufnr) then
    return M.parse(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false))
  end
  local L = H.live_of(bufnr)
  if L.doc and L.doc_version == L.version and native.idoc_info(L.idoc) == L.version then
    return L.doc
  end
  H.sync(L)
  -- A safety net: the native lines must be the buffer's.
  if
    L.nlines ~= vim.api.nvim_buf_line_count(bufnr) and not (L.nlines == 0 and vim.api.nvim_buf_line_count(bufnr) == 1)
  then
    L.broken = true
    L = H.live_of(bufnr)
    H.sync(L)
  end
  if L.doc and L.doc_version == L.version then
    return L.doc
  end
  return H.assemble(L)
end

-- Model -> the live state it was assembled from. Weak values too: the live
-- state holds its model (L.doc), and LuaJIT's weak keys are not ephemerons, so
-- with weak keys alone the entry kept both (and the native document) alive
-- after the buffer was wiped. The live state itself lives in the buffer's session record (`live`).
H.owner = setmetatable({}, { __mode = "kv" })

--- Assembles the model of the live state's version from the previous one: the
--- entries of the segments changed since are placed (built when new), those
--- before them kept as they are, those after them moved only when lines were
--- inserted or deleted above them.
function H.assemble(L)
  local entries, old = L.entries, L.doc
  local count = #entries
  local lo, hi = 0, count
  if old then
    local exact
    exact, lo, hi = native.idoc_changes(L.idoc, L.doc_version)
    if not exact then
      lo, hi, old = 0, count, nil
    end
  end
  local frontmatter = old and old.frontmatter
  local tail = count - hi -- unchanged segments at the end
  local mid, m = {}, 0 -- the messages of the changed segments
  for i = lo, (old and hi or count) - 1 do
    local e = H.place(L, i)
    if i == 0 then
      frontmatter = e.frontmatter
    end
    if e.message then
      m = m + 1
      mid[m] = e.message
    end
  end
  local messages
  if not old then
    messages = mid
  else
    -- The messages array is spliced in place: the unchanged messages before the
    -- change stay where they are, those after it move only when the number of
    -- messages changed.
    messages = old.messages
    local old_n = #messages
    local first = lo > 0 and lo - L.doc_off or 0 -- messages before the change
    local tail_n = tail
    if tail > 0 and L.doc_count - tail == 0 and L.doc_off == 1 then
      tail_n = tail - 1 -- the first segment, without a message, is in the tail
    end
    local from, to = old_n - tail_n + 1, first + m + 1
    if from ~= to and tail_n > 0 then
      table.move(messages, from, old_n, to)
    end
    for i = to + tail_n, old_n do
      messages[i] = nil
    end
    for i = 1, m do
      messages[first + i] = mid[i]
    end
  end
  if old and tail > 0 then
    -- Their lines: moved by the lines inserted or deleted above them (or by a reader
    -- that placed some of them meanwhile).
    if old and (L.nlines ~= L.doc_nlines or L.moved) then
      local line = native.idoc_segment_raw(L.idoc, hi).first_line
      for k = hi + 1, count do
        local e = entries[k] or H.place(L, k - 1)
        if e.first_line ~= line then
          H.shift_entry(e, line - e.first_line)
        end
        line = line + e.line_count
      end
    end
  end
  local doc = { frontmatter = frontmatter, messages = messages, diagnostics = native.idoc_diagnostics(L.idoc) }
  local first = entries[1]
  L.doc, L.doc_version, L.doc_count, L.doc_nlines = doc, L.version, count, L.nlines
  L.doc_off = (first and not first.message) and 1 or 0
  L.moved = false
  H.owner[doc] = L
  return doc
end

-- ---------------------------------------------------------------------------
-- Writers
-- ---------------------------------------------------------------------------

--- A fence of backticks longer than any backtick run in text (at least 3).
---@param text string
---@return string
function M.fence_for(text)
  if not text:find("`", 1, true) then
    return "```"
  end
  local longest = 0
  for run in text:gmatch("`+") do
    if #run > longest then
      longest = #run
    end
  end
  return string.rep("`", math.max(3, longest + 1))
end

function H.encode(value)
  if type(value) == "table" and next(value) == nil then
    return "{}"
  end
  return vim.json.encode(value)
end

function H.check_id(id, what)
  if type(id) ~= "string" or id == "" or id:find("[`\n]") then
    util.error(
      ("%s: `id` should be a non-empty string without backticks or newlines, not %s"):format(what, vim.inspect(id))
    )
  end
end

-- A block's lines. Content lines are cut with string.find, not vim.split: results
-- are written by the thousand in one key press.
function H.block(header, info, content)
  local fence = M.fence_for(content)
  local lines = { header, "", fence .. info }
  local n = 3
  if content ~= "" then
    local start = 1
    while true do
      local nl = content:find("\n", start, true)
      n = n + 1
      if not nl then
        lines[n] = content:sub(start)
        break
      end
      lines[n] = content:sub(start, nl - 1)
      start = nl + 1
    end
  end
  lines[n + 1] = fence
  return lines
end

--- Lines of a tool use block: header, blank line, ```json fence with the input.
---@param id string
---@param name string
---@param input table
---@return string[]
function M.render_tool_use(id, name, input)
  H.check_id(id, "render_tool_use")
  if type(name) ~= "string" or name == "" or name:find("[`\n]") then
    util.error("render_tool_use: `name` should be a non-empty string without backticks, not " .. vim.inspect(name))
  end
  if type(input) ~= "table" then
    util.error("render_tool_use: `input` should be a table, not " .. type(input))
  end
  return H.block(("**Tool Use:** `%s` (`%s`)"):format(name, id), "json", H.encode(input))
end

--- Lines of a placeholder: `flemma:tool status=STATUS` fence, optional content.
---@param id string
---@param status "approved"|"pending"|"denied"|"rejected"
---@param content? string
---@return string[]
function M.render_placeholder(id, status, content)
  H.check_id(id, "render_placeholder")
  if not H.status_set[status] then
    util.error(
      "render_placeholder: `status` should be one of approved, pending, denied, rejected, not " .. vim.inspect(status)
    )
  end
  if content ~= nil and type(content) ~= "string" then
    util.error("render_placeholder: `content` should be a string or nil, not " .. type(content))
  end
  return H.block(("**Tool Result:** `%s`"):format(id), "flemma:tool status=" .. status, content or "")
end

--- The info strings a real result's block may have besides `json` (a tool's
--- result says it with `info`): `flemma:todo`, the list of the `todo` tool
--- (`:help flemma-tools-todo`). No other: a `flemma:tool` one would make a
--- placeholder of a result.
M.RESULT_INFOS = { ["flemma:todo"] = true }

--- The info string of a result that carries files: `flemma:attach` and one
--- `@path;type=mime` per file (spaces in a path escaped with a backslash), as
--- flemma.attachments reads it back at send time.
---@param files { path: string, mime: string }[] paths as the chat names them (./, ~/, /)
---@return string
function M.attach_info(files)
  local refs = {}
  for i, f in ipairs(files) do
    if
      type(f.path) ~= "string"
      or not (f.path:match("^%.%.?/.") or f.path:match("^~/.") or f.path:match("^/."))
      or f.path:find("[`\n\r\t]")
      or type(f.mime) ~= "string"
      or not f.mime:match("^[%w.+-]+/[%w.+-]+$")
    then
      util.error(
        ("render_result: attachment %d should be { path = ./, ~/ or / path, mime }, not %s"):format(i, vim.inspect(f))
      )
    end
    refs[i] = "@" .. f.path:gsub("\\", "\\\\"):gsub(" ", "\\ ") .. ";type=" .. f.mime
  end
  return M.ATTACH_TAG .. " " .. table.concat(refs, " ")
end

--- The info-string tag of a result that carries files.
M.ATTACH_TAG = "flemma:attach"

--- Lines of a real result. A table output is written as JSON with a `json`
--- info string; a string is written as is (one trailing newline dropped), with
--- the info string `info` when given (one of M.RESULT_INFOS, not for an error). A
--- result with files (images, PDFs a tool handed over) names them on its fence
--- line instead (M.attach_info); the text holds what the tool said about them.
---@param id string
---@param output string|table
---@param is_error? boolean writes ` (error)` after the id
---@param info? string
---@param files? { path: string, mime: string }[]
---@return string[]
function M.render_result(id, output, is_error, info, files)
  H.check_id(id, "render_result")
  if info ~= nil and (is_error or type(output) ~= "string" or not M.RESULT_INFOS[info]) then
    util.error(("render_result: `info` %s is only for a string result that is no error"):format(vim.inspect(info)))
  end
  local content -- every branch below sets it
  info = info or ""
  if type(output) == "table" then
    info, content = "json", H.encode(output)
  elseif type(output) == "string" then
    content = output:gsub("\r\n", "\n"):gsub("\n$", "")
  elseif output == nil then
    content = ""
  else
    content = tostring(output)
  end
  if files and #files > 0 then
    info = M.attach_info(files)
  end
  local header = ("**Tool Result:** `%s`"):format(id) .. (is_error and " (error)" or "")
  return H.block(header, info, content)
end

--- Lines of an error result holding message.
---@param id string
---@param message string
---@return string[]
function M.render_error(id, message)
  return M.render_result(id, message, true)
end

-- ---------------------------------------------------------------------------
-- The conversation sent to a provider
-- ---------------------------------------------------------------------------

--- The provider-neutral conversation: system text and user/assistant messages
--- as ordered parts. Consecutive messages of the same role are merged; empty
--- messages are dropped.
---@param doc flemma.document.Doc
---@return { system: string|nil, messages: { role: "user"|"assistant", parts: table[] }[] }
function M.to_messages(doc)
  local system = {}
  local out = {}
  for _, msg in ipairs(doc.messages) do
    if msg.role == "system" then
      for _, p in ipairs(msg.parts) do
        if p.kind == "text" then
          system[#system + 1] = p.text
        end
      end
    else
      local parts = {}
      for _, p in ipairs(msg.parts) do
        if p.kind == "text" then
          parts[#parts + 1] = { kind = "text", text = p.text }
        elseif p.kind == "tool_use" then
          parts[#parts + 1] = { kind = "tool_use", id = p.id, name = p.name, input = p.input or {} }
        elseif p.kind == "tool_result" then
          -- files: the images and PDFs the result carries (flemma.attachments)
          parts[#parts + 1] =
            { kind = "tool_result", id = p.id, content = p.content, is_error = p.is_error, files = p.files }
        elseif p.kind == "file" then
          -- an image or PDF a file reference attached (flemma.attachments)
          parts[#parts + 1] = { kind = "file", path = p.path, mime = p.mime, data = p.data, size = p.size }
        elseif p.kind == "thinking" then
          parts[#parts + 1] = {
            kind = "thinking",
            text = p.text,
            signature = p.signature,
            provider = p.provider,
            redacted = p.redacted,
          }
        end
      end
      if #parts > 0 then
        local last = out[#out]
        if last and last.role == msg.role then
          vim.list_extend(last.parts, parts)
        else
          out[#out + 1] = { role = msg.role, parts = parts }
        end
      end
    end
  end
  return { system = #system > 0 and table.concat(system, "\n\n") or nil, messages = out }
end

H.marker_roles = { ["@You:"] = "user", ["@Assistant:"] = "assistant", ["@System:"] = "system" }

--- Whether d is the parser's warning about a fence that reads a role marker as text
--- (`this fence is not closed: the @Assistant: below it ...`) where that marker's role
--- differs from the message the fence is in: sending would change the roles sent.
function H.swallows_role(doc, d)
  local marker = d.message:match("^this fence is not closed: the (@%a+:) below it")
  if not marker then
    return false
  end
  for _, msg in ipairs(doc.messages) do
    if msg.first_line <= d.line and d.line <= msg.last_line then
      return msg.role ~= H.marker_roles[marker]
    end
  end
  return false
end

--- The pairing problems of one message given its neighbours, in the order they are
--- reported: { part, text } where the problem's line is the part's first line.
function H.message_problems(prev, msg, next_msg)
  local out
  local function add(part, text)
    out = out or {}
    out[#out + 1] = { part = part, text = text }
  end
  if msg.role == "assistant" then
    local uses
    for _, p in ipairs(msg.parts) do
      if p.kind == "tool_use" then
        uses = uses or {}
        uses[#uses + 1] = p
      end
    end
    if uses then
      local results = {}
      if next_msg and next_msg.role == "user" then
        for _, p in ipairs(next_msg.parts) do
          if p.kind == "tool_result" then
            results[p.id] = (results[p.id] or 0) + 1
          end
        end
      end
      for _, u in ipairs(uses) do
        local count = results[u.id] or 0
        if count == 0 then
          add(
            u,
            ("tool use `%s` (%s) has no result in the next @You: message: run it with <M-CR> or :Flemma tool:execute, or write a **Tool Result:** `%s` block"):format(
              u.id,
              u.name,
              u.id
            )
          )
        elseif count > 1 then
          add(
            u,
            ("tool use `%s` (%s) has %d results in the next @You: message: keep exactly one"):format(
              u.id,
              u.name,
              count
            )
          )
        end
      end
    end
  elseif msg.role == "user" then
    local ids
    for _, p in ipairs(msg.parts) do
      if p.kind == "tool_result" then
        if not ids then
          ids = {}
          if prev and prev.role == "assistant" then
            for _, q in ipairs(prev.parts) do
              if q.kind == "tool_use" then
                ids[q.id] = true
              end
            end
          end
        end
        if p.status ~= nil then
          add(
            p,
            ("tool result `%s` is still a %s placeholder: resolve it with <C-]> or <M-CR> (or replace it with a real result)"):format(
              p.id,
              p.status
            )
          )
        end
        if not ids[p.id] then
          add(
            p,
            ("tool result `%s` does not answer a tool use of the @Assistant: message just above it: move it below that message or delete it"):format(
              p.id
            )
          )
        end
      end
    end
  end
  return out
end

--- The problems of a model assembled from a live state, kept per entry: only the
--- entries changed since the last validation (and their neighbours, whose pairing
--- they take part in) are checked again. nil when the model is not the live one.
---@return { part: table, text: string }[][]|nil
function H.live_problems(doc)
  local L = H.owner[doc]
  if not L or L.doc ~= doc or L.doc_version ~= L.version or native.idoc_info(L.idoc) ~= L.version then
    return nil
  end
  local P = L.problems
  local entries = L.entries
  local count = #entries
  local lo, hi = 0, count
  if P then
    local exact
    exact, lo, hi = native.idoc_changes(L.idoc, P.version)
    if not exact then
      P = nil
      lo, hi = 0, count
    end
  end
  if not P then
    P = { with = {} }
    L.problems = P
  end
  local function message(k) -- entry k's message (1-based), nil outside
    local e = entries[k]
    return e and e.message or nil
  end
  -- Entries lo - 1 .. hi (0-based): the changed ones and their two neighbours.
  for k = math.max(lo, 1), math.min(hi + 1, count) do
    local e = entries[k]
    local msg = e.message
    local list = msg and H.message_problems(message(k - 1), msg, message(k + 1)) or nil
    P.with[e] = list
  end
  P.version = L.version
  local out = {}
  for _, list in pairs(P.with) do
    out[#out + 1] = list
  end
  return out
end

--- Checks that a document can be sent: no error diagnostics, every tool use has
--- exactly one result in the next @You: message, and no placeholder remains. On
--- the model document.get returns, only what changed since the last check is
--- checked again.
---@param doc flemma.document.Doc
---@return boolean ok
---@return { line: integer, message: string }[] problems ordered by line
--- Whether diagnostic `d` only says a tool use's input is not valid JSON, and that
--- tool use has an error result (so it is sent with `{}` and the error).
function H.bad_input_sent(doc, d)
  if d.severity ~= "error" or not (d.message or ""):find("^the input of tool use `") then
    return false
  end
  local results = {}
  local hit
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_result" then
        results[part.id] = part.is_error == true
      elseif
        part.kind == "tool_use"
        and not hit
        and d.line >= part.first_line
        and d.line <= (part.last_line or part.first_line)
      then
        hit = part
      end
    end
  end
  return hit ~= nil and hit.input == nil and results[hit.id] == true
end

function M.validate_for_send(doc)
  local problems = {}
  for i, d in ipairs(doc.diagnostics) do
    if H.bad_input_sent(doc, d) then
      -- A tool use whose (closed) input is not valid JSON goes as `{}` with its error
      -- result (phase 1 gives one): a cut or broken call never blocks the chat.
      d = { severity = "ignored" }
    end
    if d.severity == "error" or (d.severity == "warning" and H.swallows_role(doc, d)) then
      problems[#problems + 1] = { line = d.line, message = d.message, group = 0, order = i }
    end
  end
  local lists = H.live_problems(doc)
  if not lists then
    lists = {}
    local msgs = doc.messages
    for i, msg in ipairs(msgs) do
      lists[#lists + 1] = H.message_problems(msgs[i - 1], msg, msgs[i + 1])
    end
  end
  for _, list in pairs(lists) do
    for k, p in ipairs(list) do
      -- A line belongs to one message: problems on one line keep their order in it.
      problems[#problems + 1] = { line = p.part.first_line, message = p.text, group = 1, order = k }
    end
  end
  table.sort(problems, function(a, b)
    if a.line ~= b.line then
      return a.line < b.line
    end
    if a.group ~= b.group then
      return a.group < b.group
    end
    return a.order < b.order
  end)
  -- Drop exact duplicates (the parser and the pairing check may see the same problem).
  local out, seen = {}, {}
  for _, p in ipairs(problems) do
    local key = p.line .. "\0" .. p.message
    if not seen[key] then
      seen[key] = true
      out[#out + 1] = { line = p.line, message = p.message }
    end
  end
  return #out == 0, out
end

return M
