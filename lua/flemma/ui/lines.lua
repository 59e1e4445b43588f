--- What each line of a chat buffer is, read from the live document (folds and
--- highlights ask line by line). A segment's outline (its items without their
--- texts) is built once per segment id and kept while the segment is unchanged,
--- and the segment of the last question is remembered: asking for the lines of
--- a window in order costs O(1) per line, whatever the size of the chat.
local session = require("flemma.core.session")
local document = require("flemma.chat.document")
local native = require("flemma.core.native")

local M = {}
local H = {}

-- H.state: the `lines` field of each buffer's session record (flemma.core.session).
-- Outlines kept per buffer before the cache starts over (a long session of edits
-- leaves the outlines of replaced segments behind).
H.MAX_OUTLINES = 4096

H.BLOCKS = { thinking = true, tool_use = true, tool_result = true }
M.BLOCKS = H.BLOCKS

function H.state_of(bufnr)
  local st = session.field(bufnr, "lines")
  if not st then
    st = { outlines = {}, count = 0 }
    session.get(bufnr).lines = st
  end
  return st
end

--- Drops what is known about a buffer (it was wiped).
function M.forget(bufnr)
  session.set(bufnr, "lines", nil)
end

--- The live document of a buffer, or nil while it lags behind the buffer (a
--- change whose on_lines has not arrived yet: Neovim updates folds before it
--- calls on_lines); with `loose`, the lagging document as well (then the third
--- value is true). Checked once per changedtick: M.invalidate (called from
--- on_lines) makes the next call check again.
---@return table|nil idoc, integer version, boolean|nil stale
function M.idoc(bufnr, loose)
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local st = session.field(bufnr, "lines")
  if not (st and st.tick == tick) then
    st = H.state_of(bufnr)
    local ok, idoc = pcall(document.idoc, bufnr)
    if not ok or not idoc then
      return nil, 0
    end
    local version, nlines = native.idoc_info(idoc)
    local count = vim.api.nvim_buf_line_count(bufnr)
    st.tick, st.live, st.live_version, st.nlines = tick, idoc, version, nlines
    st.stale = nlines ~= count and not (nlines == 0 and count == 1)
  end
  if st.stale and not loose then
    return nil, st.live_version
  end
  return st.live, st.live_version, st.stale
end

--- The buffer changed: the next M.idoc checks the document again.
function M.invalidate(bufnr)
  local st = session.field(bufnr, "lines")
  if st then
    st.tick = nil
  end
end

-- The outline of segment i (with where the message item and the parts start).
function H.outline(st, idoc, i)
  local raw = native.idoc_segment_raw(idoc, i)
  local id, first, count = tonumber(raw.id), raw.first_line, raw.line_count
  local o = st.outlines[id]
  if not o then
    if st.count >= H.MAX_OUTLINES then
      st.outlines, st.count = {}, 0
    end
    o = native.idoc_outline(idoc, i)
    for k, it in ipairs(o.items) do
      if it.kind == "frontmatter" then
        o.fm = it
      elseif it.kind == "message" then
        o.msg = it
        o.parts_from = k + 1
      end
    end
    o.parts_from = o.parts_from or (#o.items + 1)
    st.outlines[id] = o
    st.count = st.count + 1
  end
  return { index = i, first = first, last = first + count - 1, outline = o }
end

--- The segment holding line `lnum` (1-based): { index, first, last, outline }
--- with absolute first/last lines, or nil (no such line, or the document lags).
function M.segment(bufnr, lnum)
  -- A lagging document still answers (by line number) while Neovim folds a
  -- change before on_lines: its structure, shifted by the change, keeps the
  -- folds below it in place instead of merging them; the folds of what changed
  -- are computed again once the document caught up (flemma.ui.fold).
  local idoc, version = M.idoc(bufnr, true)
  if not idoc then
    return nil
  end
  return H.segment(bufnr, idoc, version, lnum)
end

-- M.segment with the document M.idoc(bufnr, true) gave.
function H.segment(bufnr, idoc, version, lnum)
  local st = H.state_of(bufnr)
  if st.version ~= version or st.idoc ~= idoc then
    st.version, st.idoc, st.last = version, idoc, nil
  end
  local seg = st.last
  if seg and lnum >= seg.first and lnum <= seg.last then
    return seg
  end
  if lnum < 1 or lnum > st.nlines then
    return nil
  end
  local i
  if seg and lnum == seg.last + 1 then
    i = seg.index + 1 -- the next segment: lines asked in order
  else
    i = native.idoc_segment_at(idoc, lnum)
  end
  if not i then
    return nil
  end
  seg = H.outline(st, idoc, i)
  st.last = seg
  return seg
end

--- Segment i (0-based) of a buffer's live document, like M.segment.
function M.segment_index(bufnr, i)
  local idoc, version = M.idoc(bufnr)
  if not idoc then
    return nil
  end
  local st = H.state_of(bufnr)
  if st.version ~= version or st.idoc ~= idoc then
    st.version, st.idoc, st.last = version, idoc, nil
  end
  return H.outline(st, idoc, i)
end

--- How many lines buffer line lnum lies below the line of the lagging document
--- that holds the same text: 0, or the buffer's line count minus the
--- document's (delta) once past the change. Neovim folds an undo, a redo or a
--- J before on_lines tells of it (on_bytes too comes late, or too early to read
--- the new lines); read unshifted, the lines below the change would all answer
--- for another line and Neovim would fold again down to the end of the buffer.
--- Lines are compared with the document's text (Neovim asks in order, from
--- above the change: a line equal both ways keeps the side of the lines before
--- it); the changed lines answer shifted, and are folded again once the
--- document caught up (flemma.ui.fold).
function H.shift(bufnr, lnum, idoc, stale)
  if not stale then
    return 0
  end
  local st = session.field(bufnr, "lines")
  local delta = vim.api.nvim_buf_line_count(bufnr) - st.nlines
  local m = st.map
  if not m or m.tick ~= st.tick or m.delta ~= delta then
    m = { tick = st.tick, delta = delta }
    st.map = m
  end
  local prefer = (m.lo and lnum >= m.lo) and delta or 0
  local other = delta - prefer
  local text = vim.api.nvim_buf_get_lines(bufnr, lnum - 1, lnum, false)[1]
  local s
  if text == nil then
    s = prefer
  elseif native.idoc_line_is(idoc, lnum - prefer, text) then
    s = prefer
  elseif native.idoc_line_is(idoc, lnum - other, text) then
    s = other
  else
    s = delta
  end
  if s ~= 0 and (not m.lo or lnum < m.lo) then
    m.lo = lnum
  end
  return s
end

--- What line `lnum` is: one of
---   "frontmatter" (item: the frontmatter), "marker" (item: the message),
---   "part" (item: the text, tool_use, tool_result or thinking part holding it),
---   "message" (a line of the message between parts: item is the message),
---   "preamble" (before the first role marker, outside the frontmatter),
--- then the item, the segment and the base to add to the item's relative lines.
--- nil when the document cannot tell yet.
---@return string|nil what, table|nil item, table|nil seg, integer base
function M.at(bufnr, lnum)
  -- Asked for every line Neovim folds or draws: the document is looked up once.
  local idoc, version, stale = M.idoc(bufnr, true)
  if not idoc then
    return nil, nil, nil, 0
  end
  local shift = H.shift(bufnr, lnum, idoc, stale)
  local seg = H.segment(bufnr, idoc, version, lnum - shift)
  if not seg then
    return nil, nil, nil, 0
  end
  local o, base = seg.outline, seg.first - 1 + shift
  local rel = lnum - base
  local fm = o.fm
  if fm and rel >= fm.first and rel <= fm.last then
    return "frontmatter", fm, seg, base
  end
  local msg = o.msg
  if not msg or rel < msg.first then
    return "preamble", nil, seg, base
  end
  if rel == msg.first then
    return "marker", msg, seg, base
  end
  -- The last part starting at or before rel (parts are in order, disjoint);
  -- lines asked in order mostly fall in the part of the previous question.
  local items = o.items
  local h = seg.hint
  if h then
    local p = items[h]
    if rel >= p.first then
      if rel <= p.last then
        return "part", p, seg, base
      end
      local q = items[h + 1]
      if not q or rel < q.first then
        return "message", msg, seg, base
      end
    end
  end
  local lo, hi = o.parts_from, #items
  local found
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if items[mid].first <= rel then
      found, lo = mid, mid + 1
    else
      hi = mid - 1
    end
  end
  seg.hint = found
  local p = found and items[found]
  if p and rel <= p.last then
    return "part", p, seg, base
  end
  return "message", msg, seg, base
end

return M
