--- Tool previews: a virtual line inside each empty pending placeholder showing
--- `name: summary`, so the user sees what a tool will do without scrolling up.
local session = require("flemma.core.session")
local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.preview")

--- The character that stands for a newline in a preview: 'listchars' eol, else ↵.
---@param win? integer
---@return string
function H.eol_char(win)
  local ok, lcs = pcall(function()
    return vim.api.nvim_get_option_value("listchars", { win = win or 0 })
  end)
  if ok and type(lcs) == "string" then
    for item in vim.gsplit(lcs, ",", { plain = true }) do
      local v = item:match("^eol:(.+)$")
      if v and v ~= "" then
        return v
      end
    end
  end
  return "↵"
end

--- Text width of the window showing bufnr (width minus sign/number columns).
---@param bufnr integer
---@return integer
function M.text_width(bufnr)
  local win = vim.fn.bufwinid(bufnr)
  if win == -1 then
    return vim.o.columns
  end
  local info = vim.fn.getwininfo(win)[1]
  return math.max(10, info.width - (info.textoff or 0))
end

--- Cuts s to at most width display cells, ending with … when cut.
---@param s string
---@param width integer
---@return string
function M.fit(s, width)
  if vim.fn.strdisplaywidth(s) <= width then
    return s
  end
  if width <= 1 then
    return "…"
  end
  local chars = vim.fn.strchars(s)
  -- Binary search for the longest prefix that fits in width - 1 cells.
  local lo, hi = 0, chars
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if vim.fn.strdisplaywidth(vim.fn.strcharpart(s, 0, mid)) <= width - 1 then
      lo = mid
    else
      hi = mid - 1
    end
  end
  return vim.fn.strcharpart(s, 0, lo) .. "…"
end

--- The one-line preview text for a tool call, fitted to width.
---@param name string
---@param input table|nil
---@param width integer
---@param eol? string
---@param bufnr? integer the chat buffer (marks paths outside its project)
---@return string
function M.text(name, input, width, eol, bufnr)
  local prefix = name .. ": "
  local max_length = math.max(1, width - vim.fn.strdisplaywidth(prefix))
  local ok, summary = pcall(require("flemma.tools").preview, name, input or {}, max_length, bufnr)
  if not ok or type(summary) ~= "string" then
    summary = "(preview failed: " .. require("flemma.core.util").message(summary) .. ")"
  end
  summary = summary:gsub("\r\n", "\n"):gsub("\n", eol or "↵")
  return M.fit(prefix .. summary, width)
end

-- Incremental previews: per buffer, the document version and the width the
-- shown previews were drawn for. An update redraws only the messages that
-- changed since (and the one after them, whose placeholders may answer a
-- changed tool use); a large change draws the visible ones at once and the
-- rest a moment later, off the keystroke.
-- H.state: the `preview` field of each buffer's session record (flemma.core.session).
H.SPAN_NOW = 32 -- changed messages drawn at once; beyond, only the visible ones
H.DEFER_MS = 20
H.SLICE_MS = 0.4 -- the longest slice of drawing done later, off the keystroke
H.TAIL = 2 -- the last segments drawn at once with the visible ones

function H.find_use(L, id)
  local native = require("flemma.core.native")
  local seg = native.idoc_find_tool_use(L.idoc, id)
  if not seg then
    return nil
  end
  local e = require("flemma.chat.document").entry(L, seg)
  local parts = e.message and e.message.parts or {}
  for k = #parts, 1, -1 do
    local p = parts[k]
    if p.kind == "tool_use" and p.id == id then
      return p
    end
  end
end

-- Redraws the previews of segment i (0-based) of the live state L (`cleared`:
-- its lines hold no preview), and the counts of its `todo` lists (flemma.ui.todo).
function H.draw_segment(bufnr, L, i, width, eol, cleared)
  local native = require("flemma.core.native")
  require("flemma.ui.todo").draw_segment(bufnr, L, i)
  if not cleared then
    local raw = native.idoc_segment_raw(L.idoc, i)
    local first, count = raw.first_line, raw.line_count
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, first - 1, first - 1 + count)
  end
  if not native.idoc_has_empty_pending(L.idoc, i) then
    return
  end
  local e = require("flemma.chat.document").entry(L, i)
  for _, part in ipairs(e.message and e.message.parts or {}) do
    if part.kind == "tool_result" and part.status == "pending" and (part.content or "") == "" then
      local use = H.find_use(L, part.id)
      if use then
        local risk = require("flemma.tools").risk(use.name)
        local tag = risk and ("  [" .. risk .. "]") or ""
        local chunks = { { M.text(use.name, use.input, width, eol, bufnr), "FlemmaToolPreview" } }
        if risk then
          chunks[2] = { tag, risk == "safe" and "FlemmaToolPreview" or "FlemmaToolRisk" }
        end
        vim.api.nvim_buf_set_extmark(bufnr, M.ns, (part.fence_line or part.first_line) - 1, 0, {
          virt_lines = { chunks },
          virt_lines_above = false,
          -- Gone with its placeholder line (a whole buffer replaced keeps no stale preview).
          invalidate = true,
          undo_restore = false,
        })
      end
    end
  end
end

--- Brings the previews of bufnr up to date with its text, redrawing only what
--- changed since the last update (everything when the window width changed).
--- With `opts.visible_only`, a large change is drawn only inside the window
--- now and entirely a moment later. With `opts.budget_ms`, drawing stops after
--- that long and goes on a moment later where it stopped (unless the text changed
--- meanwhile).
---@param bufnr integer
---@param opts? { visible_only?: boolean, budget_ms?: number }
function M.update(bufnr, opts)
  if not vim.api.nvim_buf_is_valid(bufnr) or not vim.api.nvim_buf_is_loaded(bufnr) then
    return
  end
  local document = require("flemma.chat.document")
  local L = document.live(bufnr)
  local count = #L.entries
  local win = vim.fn.bufwinid(bufnr)
  -- What the previews were drawn for, cheap to read: the window's width and 'listchars'.
  local win_width = win ~= -1 and vim.api.nvim_win_get_width(win) or vim.o.columns
  local lcs = vim.api.nvim_get_option_value("listchars", { win = win ~= -1 and win or 0 })
  local st0 = session.field(bufnr, "preview")
  if
    st0
    and st0.version >= 0
    and not st0.partial
    and st0.win_width == win_width
    and st0.lcs == lcs
    and H.nothing_to_draw(bufnr, L, st0.version)
  then
    st0.version = L.version -- an answer streaming in, prose typed: no preview involved
    return
  end
  local width = M.text_width(bufnr)
  local eol = H.eol_char(win ~= -1 and win or nil)
  local st = session.field(bufnr, "preview")
  local lo, hi
  local full = not st or st.width ~= width or st.eol ~= eol
  if full then
    lo, hi = 0, count
  else
    local _
    _, lo, hi = document.changed_since(L, st.version)
    if lo >= hi then
      st.version = L.version
      return
    end
    hi = math.min(hi + 1, count)
  end
  if opts and opts.visible_only and hi - lo > H.SPAN_NOW and win ~= -1 then
    local top, bot = vim.fn.line("w0", win), vim.fn.line("w$", win)
    local native = require("flemma.core.native")
    local a = math.max(lo, native.idoc_segment_at(L.idoc, top) or lo)
    local b = math.min(hi, (native.idoc_segment_at(L.idoc, bot) or hi - 1) + 1)
    for i = a, b - 1 do
      H.draw_segment(bufnr, L, i, width, eol)
    end
    -- And the last messages, where the tool cycle's placeholders are (a chat
    -- opened at its start shows its pending tools' previews without waiting for
    -- the slices to get there).
    for i = math.max(lo, b, count - H.TAIL), hi - 1 do
      H.draw_segment(bufnr, L, i, width, eol)
    end
    M.schedule(bufnr)
    if not st then
      session.get(bufnr).preview = { version = -1, width = -1, eol = eol }
    end
    return
  end
  local start = lo
  local p = st and st.partial
  if p and p.version == L.version and p.width == width and p.eol == eol and p.lo == lo and p.hi == hi then
    start = p.next -- the segments before it were drawn at this version by an earlier slice
  end
  -- Drawing everything: the previews shown meanwhile (few) stay until their
  -- segment is drawn again, so none disappears while the slices go on.
  local rows, r = full and H.preview_rows(bufnr, start, hi, L) or nil, 1
  local deadline = opts and opts.budget_ms and vim.uv.hrtime() + opts.budget_ms * 1e6
  for i = start, hi - 1 do
    local cleared = full
    if rows and rows[r] then
      local raw = require("flemma.core.native").idoc_segment_raw(L.idoc, i)
      local stop = raw.first_line - 1 + raw.line_count
      cleared = rows[r] >= stop
      while rows[r] and rows[r] < stop do
        r = r + 1
      end
    end
    H.draw_segment(bufnr, L, i, width, eol, cleared)
    if deadline and i + 1 < hi and vim.uv.hrtime() >= deadline then
      if not st then
        st = { version = -1, width = -1, eol = eol }
        session.get(bufnr).preview = st
      end
      st.partial = { version = L.version, width = width, eol = eol, lo = lo, hi = hi, next = i + 1 }
      M.schedule(bufnr, 1)
      return
    end
  end
  session.get(bufnr).preview =
    { version = L.version, width = width, eol = eol, timer = st and st.timer, win_width = win_width, lcs = lcs }
end

--- The rows (0-based, ascending) of the previews shown in segments lo .. hi - 1.
function H.preview_rows(bufnr, lo, hi, L)
  if lo >= hi then
    return nil
  end
  local native = require("flemma.core.native")
  local first = native.idoc_segment_raw(L.idoc, lo).first_line - 1
  local last = native.idoc_segment_raw(L.idoc, hi - 1)
  local stop = last.first_line - 1 + last.line_count
  local rows = {}
  for k, m in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, M.ns, { first, 0 }, { stop - 1, -1 }, {})) do
    rows[k] = m[2]
  end
  return rows
end

--- True when the messages changed since `version` (and the one after them)
--- hold no preview, no empty pending placeholder and no `todo` list or its
--- counts: then nothing is redrawn, and the window's text width (costly to read)
--- is not needed.
function H.nothing_to_draw(bufnr, L, version)
  local document = require("flemma.chat.document")
  local native = require("flemma.core.native")
  local _, lo, hi = document.changed_since(L, version)
  if lo >= hi then
    return true
  end
  hi = math.min(hi + 1, #L.entries)
  if hi - lo > H.SPAN_NOW then
    return false
  end
  local todo = require("flemma.ui.todo")
  for i = lo, hi - 1 do
    if native.idoc_has_empty_pending(L.idoc, i) or todo.involved(bufnr, L, i) then
      return false
    end
    local raw = native.idoc_segment_raw(L.idoc, i)
    local first, count = raw.first_line, raw.line_count
    -- A preview drawn before the edit sits where its placeholder was (or next to it).
    local from = math.max(first - 2, 0)
    local to = math.min(first - 1 + count, vim.api.nvim_buf_line_count(bufnr) - 1)
    if #vim.api.nvim_buf_get_extmarks(bufnr, M.ns, { from, 0 }, { to, -1 }, { limit = 1 }) > 0 then
      return false
    end
  end
  return true
end

--- Runs M.update for bufnr a moment later (once for any number of calls meanwhile),
--- in slices of at most H.SLICE_MS.
---@param bufnr integer
---@param delay? integer ms (default 20)
function M.schedule(bufnr, delay)
  local st = session.field(bufnr, "preview")
  if not st then
    st = { version = -1, width = -1, eol = "" }
    session.get(bufnr).preview = st
  end
  if st.timer then
    return
  end
  st.timer = true
  vim.defer_fn(function()
    local cur = session.field(bufnr, "preview")
    if cur then
      cur.timer = false
    end
    if vim.api.nvim_buf_is_valid(bufnr) then
      local ok, err = pcall(M.update, bufnr, { budget_ms = H.SLICE_MS })
      if not ok then
        require("flemma.core.util").warn("tool previews failed: " .. require("flemma.core.util").message(err))
      end
    else
      session.set(bufnr, "preview", nil)
    end
  end, delay or H.DEFER_MS)
end

--- Forgets the preview state of a buffer (its next update draws everything).
function M.forget(bufnr)
  session.set(bufnr, "preview", nil)
end

--- Redraws the previews of every empty pending placeholder of bufnr. Without
--- `doc`, only what changed since the last drawing (see M.update).
---@param bufnr integer
---@param doc? table a parsed document of the buffer's current text
function M.refresh(bufnr, doc)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  if doc == nil and vim.api.nvim_buf_is_loaded(bufnr) then
    return M.update(bufnr)
  end
  session.set(bufnr, "preview", nil)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  doc = doc or require("flemma.chat.document").get(bufnr)
  require("flemma.ui.todo").draw_doc(bufnr, doc)
  local uses = {}
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_use" then
        uses[part.id] = part
      end
    end
  end
  local width = M.text_width(bufnr)
  local win = vim.fn.bufwinid(bufnr)
  local eol = H.eol_char(win ~= -1 and win or nil)
  local hl = "FlemmaToolPreview"
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_result" and part.status == "pending" and (part.content or "") == "" then
        local use = uses[part.id]
        if use then
          local text = M.text(use.name, use.input, width, eol, bufnr)
          vim.api.nvim_buf_set_extmark(bufnr, M.ns, (part.fence_line or part.first_line) - 1, 0, {
            virt_lines = { { { text, hl } } },
            virt_lines_above = false,
          })
        end
      end
    end
  end
end

--- The risk levels shown after the previews of bufnr (`:help flemma-risk`): list of
--- { line (1-based), risk, hl }.
---@param bufnr integer
function M.shown_risks(bufnr)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })) do
    local vl = m[4].virt_lines
    if vl and not m[4].invalid and vl[1][2] then
      out[#out + 1] = { line = m[2] + 1, risk = vim.trim(vl[1][2][1]):match("^%[(%a+)%]$"), hl = vl[1][2][2] }
    end
  end
  return out
end

--- Previews currently shown in bufnr: list of { line (1-based), text }.
---@param bufnr integer
function M.shown(bufnr)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })) do
    local vl = m[4].virt_lines
    if vl and not m[4].invalid then
      out[#out + 1] = { line = m[2] + 1, text = vl[1][1][1], hl = vl[1][1][2] }
    end
  end
  return out
end

-- The cycle and the send path (below this layer) say when previews may have changed.
require("flemma.core.events").on("previews", function(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    M.refresh(bufnr)
  end
end)

return M
