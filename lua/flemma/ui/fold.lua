--- Folding of chat buffers (`foldmethod=expr`): a fold of level 1 per message
--- (and one around the frontmatter and what precedes the first role marker),
--- level 2 for the frontmatter, thinking, tool use and tool result blocks. The
--- fold expression reads the live document through flemma.ui.lines (O(1) per
--- line when Neovim asks in order); after a change the folds of the segments it
--- touched are computed again once the document has caught up. Completed tool
--- results and thinking blocks start closed (`ui.fold_completed`).
local session = require("flemma.core.session")
local lines = require("flemma.ui.lines")

local M = {}
local H = {}

-- 'foldexpr' is evaluated for every line Neovim folds: through a global
-- function it costs about 0.5 us less per line than through require() (every
-- line of a 2 MB chat, 63k lines: 169 -> 139 ms). It calls M.expr as found at
-- each call.
M.EXPR = "v:lua._flemma_fold_expr(v:lnum)"
function _G._flemma_fold_expr(lnum)
  return M.expr(lnum)
end
M.TEXT = "v:lua.require'flemma.ui.fold'.text()"

H.ROLE_MARKERS = { system = "@System:", user = "@You:", assistant = "@Assistant:" }

--- The fold level of line lnum of the current buffer (as 'foldexpr' wants it).
---@param lnum integer
---@return string
function M.expr(lnum)
  local ok, what, item, seg, base = pcall(lines.at, vim.api.nvim_get_current_buf(), lnum)
  if not ok or not what then
    return "="
  end
  if what == "marker" then
    return ">1"
  elseif what == "frontmatter" or (what == "part" and lines.BLOCKS[item.kind]) then
    local first, last = item.first + base, item.last + base
    if first == last then
      return what == "frontmatter" and ">2" or "1"
    elseif lnum == first then
      return ">2"
    elseif lnum == last then
      return "<2"
    end
    return "2"
  elseif what == "preamble" then
    return seg.outline.fm and "1" or "0"
  end
  return "1"
end

-- ---------------------------------------------------------------------------
-- Fold text
-- ---------------------------------------------------------------------------

H.PREVIEW_WIDTH = 60

-- Bytes of a line a preview reads: enough for PREVIEW_WIDTH characters after some
-- indentation; a 10 MB line (a tool input) is never copied whole for a fold's text.
H.PREVIEW_BYTES = 4 * H.PREVIEW_WIDTH + 256

function H.preview(bufnr, from, to)
  to = math.min(to, from + 50, vim.api.nvim_buf_line_count(bufnr)) -- never more than a few lines
  for row = from - 1, to - 1 do
    local l = vim.api.nvim_buf_get_text(bufnr, row, 0, row, H.PREVIEW_BYTES, {})[1] or ""
    local t = vim.trim(l)
    if #l == H.PREVIEW_BYTES and t ~= "" then
      -- cut: drop the last character, which the cut may have split
      t = vim.fn.strcharpart(t, 0, vim.fn.strchars(t) - 1) .. "…"
    end
    if t ~= "" and not t:match("^```") and not t:match("^~~~") then
      if vim.fn.strchars(t) > H.PREVIEW_WIDTH then
        t = vim.fn.strcharpart(t, 0, H.PREVIEW_WIDTH - 1) .. "…"
      end
      return t
    end
  end
  return nil
end

function H.count(n)
  return n == 1 and "1 line" or (n .. " lines")
end

-- The name of the tool that a result answers (nil when the use is not found).
function H.tool_name(bufnr, id)
  local idoc = lines.idoc(bufnr)
  if not idoc then
    return nil
  end
  local si, ii = require("flemma.core.native").idoc_find_tool_use(idoc, id)
  if not si then
    return nil
  end
  local seg = lines.segment_index(bufnr, si)
  local it = seg and seg.outline.items[ii + 1]
  return it and it.name or nil
end

--- The text of a closed fold: what it holds and how many lines.
---@param bufnr integer
---@param foldstart integer
---@param foldend integer
---@return string
function M.describe(bufnr, foldstart, foldend)
  local n = foldend - foldstart + 1
  local what, item, _, base = lines.at(bufnr, foldstart)
  local head, preview
  if what == "marker" then
    head = H.ROLE_MARKERS[item.role] or "@?:"
    -- The message's first text, else its first line.
    local seg = lines.segment(bufnr, foldstart)
    for _, it in ipairs(seg and seg.outline.items or {}) do
      if it.kind == "text" then
        preview = H.preview(bufnr, it.first + base, math.min(it.last + base, foldend))
        break
      end
    end
    preview = preview or H.preview(bufnr, foldstart + 1, foldend)
  elseif what == "frontmatter" then
    head = "frontmatter (" .. (item.lang ~= "" and item.lang or "?") .. ")"
    preview = H.preview(bufnr, foldstart + 1, foldend)
  elseif what == "part" and item.kind == "tool_use" then
    head = ("Tool Use: %s (%s)"):format(item.name, item.tool_id)
    preview = H.preview(bufnr, (item.fence or item.first) + base + 1, item.last + base)
  elseif what == "part" and item.kind == "tool_result" then
    local name = H.tool_name(bufnr, item.tool_id)
    head = ("Tool Result: %s%s"):format(name and (name .. " ") or "", "(" .. item.tool_id .. ")")
    if item.status then
      head = head .. " [" .. item.status .. "]"
    elseif item.error then
      head = head .. " [error]"
    end
    preview = H.preview(bufnr, (item.fence or item.first) + base + 1, item.last + base)
  elseif what == "part" and item.kind == "thinking" then
    head = "thinking"
    preview = H.preview(bufnr, foldstart + 1, foldend)
  else
    head = vim.trim(vim.api.nvim_buf_get_lines(bufnr, foldstart - 1, foldstart, false)[1] or "")
  end
  local sep = what == "marker" and " " or ": "
  local text = head .. (preview and (sep .. preview) or "") .. " · " .. H.count(n)
  return text
end

--- 'foldtext': see M.describe.
function M.text()
  local foldstart, foldend = vim.v.foldstart, vim.v.foldend
  local ok, text = pcall(M.describe, vim.api.nvim_get_current_buf(), foldstart, foldend)
  if not ok then
    return vim.fn.foldtext()
  end
  return string.rep("  ", math.max(0, vim.v.foldlevel - 1)) .. text
end

-- ---------------------------------------------------------------------------
-- Windows, updates after changes, closing completed blocks
-- ---------------------------------------------------------------------------

--- Makes window `win` fold the chat buffer it shows (window-local options).
function M.setup_window(win)
  local wo = vim.wo[win][0]
  local buf = vim.api.nvim_win_get_buf(win)
  if wo.foldmethod == "expr" and wo.foldexpr == M.EXPR then
    session.get(buf).fold_folding = true
    return
  end
  -- Neovim computes the fold level of every line when 'foldmethod' becomes "expr"
  -- (about 75 ms per MB here): larger chats are not folded, so they open at once.
  local max = require("flemma.core.config").get().ui.fold_max_bytes
  if vim.api.nvim_buf_get_offset(buf, vim.api.nvim_buf_line_count(buf)) > max then
    return
  end
  -- The method last: each of these set on an expr-folded window computes the
  -- folds of the whole buffer again.
  wo.foldmethod = "manual"
  wo.foldexpr = M.EXPR
  wo.foldtext = M.TEXT
  wo.foldlevel = 99
  wo.foldmethod = "expr"
  session.get(buf).fold_folding = true
end

-- Buffers a window was set up to fold: changes of the others (a chat too large
-- to fold, written to chunk after chunk) cost nothing here.
-- H.folding: the `fold_folding` field of each buffer's session record (flemma.core.session).

-- Per buffer: the pending range of lines to fold again (0-based [top, bot)) and
-- the document version the last update saw.
-- H.pending: the `fold_pending` field of each buffer's session record (flemma.core.session).

--- Windows of bufnr that fold with our expression.
function H.windows(bufnr)
  local out = {}
  for _, win in ipairs(vim.fn.win_findbuf(bufnr)) do
    local wo = vim.wo[win]
    if wo.foldmethod == "expr" and wo.foldexpr == M.EXPR then
      out[#out + 1] = win
    end
  end
  return out
end

--- Recomputes the folds of lines top .. bot - 1 (0-based) and of the places
--- that changed since the last update, in every window folding the buffer: at
--- most `budget` lines now (all without), the rest on the next turns of the loop.
function M.update(bufnr, top, bot, budget)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  local wins = H.windows(bufnr)
  if #wins == 0 then
    return
  end
  local idoc, version = lines.idoc(bufnr)
  if not idoc then
    return
  end
  local native = require("flemma.core.native")
  local p = session.field(bufnr, "fold_pending") or {}
  session.get(bufnr).fold_pending = p
  local _, _, count = native.idoc_info(idoc)
  local ranges = { { top, bot } }
  local verify = false
  if p.version and p.version ~= version and p.idoc == idoc then
    -- Place by place (an undo of edits far apart refolds each, not every line
    -- between them): the lines each edit replaced and the document parsed again
    -- (from a checkpoint or the message's start a few lines above the change
    -- to where its scan matched the old one), in today's line numbers.
    ranges = {}
    for k, r in ipairs(native.idoc_touched(idoc, p.version)) do
      ranges[k] = { r[1] - 1, r[2] }
    end
    if require("flemma.chat.document").lagged_since(bufnr, p.version) then
      -- Neovim folded the change with the lagging document (an undo, a redo,
      -- a J: lines.at answers each line for the old line with its text): the
      -- changed messages are folded again in full, and the message after each
      -- (Neovim's update went on into it, and with an undo of edits in several
      -- places the lines between them answered for the wrong old lines).
      for _, r in ipairs(ranges) do
        H.whole_messages(idoc, r)
        H.next_message(idoc, r)
      end
    else
      -- Neovim's own update can leave a nested fold of the message as it was
      -- (a tool block that a changed fence or tag ended or extended, below the
      -- lines it evaluated): a message of up to H.WHOLE_LINES lines is folded
      -- again in full, within one slice, and its levels checked (H.repair).
      verify = true
      for _, r in ipairs(ranges) do
        local w = { r[1], r[2] }
        H.whole_messages(idoc, w)
        if w[2] - w[1] <= H.WHOLE_LINES then
          r[1], r[2] = w[1], w[2]
          -- And the messages around it while short: Neovim's update also drops
          -- the one-line fold of an empty message next to the change, and can
          -- start the frontmatter's fold a line late.
          H.prev_message(idoc, w)
          H.next_message(idoc, w)
          if w[2] - w[1] <= H.WHOLE_LINES then
            r[1], r[2] = w[1], w[2]
          end
        end
      end
    end
    -- Otherwise the document followed the change before Neovim's own fold update
    -- (typing, dd, p, a streamed chunk, a marker written at the end): Neovim
    -- folded the changed lines with the current document, from the line above
    -- them, but stopped below them where a level matched the old folds. The
    -- lines the document parsed again may read otherwise: a tool header above
    -- whose fence was deleted, a header written above a fence, a block that
    -- lost its end. Those are folded again with the changed lines; the lines
    -- above and below read the same and keep their levels: a long answer is not
    -- folded again in full when the next @You: is appended.
  elseif p.version and p.version ~= version then
    -- The document was built again (Neovim folded the change with the old one):
    -- the lines of the changes seen, in full messages, with the messages around them.
    H.whole_messages(idoc, ranges[1])
    H.prev_message(idoc, ranges[1])
    H.next_message(idoc, ranges[1])
    H.small_chat(idoc, ranges)
  end
  p.rest = nil
  H.fold_ranges(
    bufnr,
    wins,
    p,
    { version = version, idoc = idoc, count = count, ranges = H.merge(ranges), verify = verify },
    budget
  )
end

-- Folds the ranges of `job` ({ version, idoc, count, ranges }) again, at most
-- `budget` lines (all without one); what is left is done on the next turns of
-- the loop, and meanwhile p.version stays that of the last complete update: a
-- change before the end computes everything again from there.
function H.fold_ranges(bufnr, wins, p, job, budget)
  local nlines = vim.api.nvim_buf_line_count(bufnr)
  local left = budget or math.huge
  local ranges = job.ranges
  while #ranges > 0 and left > 0 do
    local r = ranges[1]
    local a, b = r[1], math.min(r[2], nlines)
    if b - a > left then
      b = a + left
      r[1] = b
    else
      table.remove(ranges, 1)
    end
    if b > a then
      for _, win in ipairs(wins) do
        vim._foldupdate(win, a, b)
        if job.verify and b - a <= H.WHOLE_LINES then
          H.repair(win, a, b)
        end
      end
      left = left - (b - a)
    end
  end
  if #ranges > 0 then
    p.rest = job
    require("flemma.ui.after").run("fold slice " .. bufnr, function()
      H.resume(bufnr)
    end)
    return
  end
  p.version, p.idoc, p.count = job.version, job.idoc, job.count
end

-- The level a line has by the fold expression's answer `s` (nil for "=": the
-- level of the line above, whatever it is).
function H.level_of(s)
  local c = s:sub(1, 1)
  if c == ">" or c == "<" then
    return tonumber(s:sub(2))
  end
  return tonumber(s)
end

--- Neovim's update can keep a nested fold that no line asks for any more (a
--- tool block's fold inside a message whose lines are all of level 1 again,
--- after a fence closed further down), even through a refold of every line or
--- 'foldmethod' set again; only deleting that fold clears it. So after an edit
--- the document followed (typing, a streamed chunk: not an undo, whose messages
--- may be long), the levels of lines a .. b - 1 (0-based, at most
--- H.WHOLE_LINES) just folded again in window win are compared with the
--- expression's: where a line lies deeper than it says, the extra folds
--- holding it are deleted (with |zd| in manual folding, which keeps the other
--- folds and whether they are open), and the window folds with the expression
--- again (every line: seldom needed). Only in Normal mode (|zd| acts on a
--- Visual area).
function H.repair(win, a, b)
  local bad = vim.api.nvim_win_call(win, function()
    local out
    for l = a + 1, b do
      local want = H.level_of(M.expr(l))
      if want and vim.fn.foldlevel(l) > want then
        out = out or {}
        out[#out + 1] = { l, want }
      end
    end
    return out
  end)
  if not bad or vim.api.nvim_get_mode().mode ~= "n" or H.no_repair[win] then
    return
  end
  local wo = vim.wo[win][0]
  wo.foldmethod = "manual"
  vim.api.nvim_win_call(win, function()
    local view = vim.fn.winsaveview()
    for _, x in ipairs(bad) do
      local l, want = x[1], x[2]
      -- On a line in a closed fold, |zd| deletes that fold: the closed folds
      -- holding it are opened for the deletion and closed again after it.
      local reopened = {}
      for _ = 1, 20 do
        local c = vim.fn.foldclosed(l)
        if c == -1 then
          break
        end
        reopened[#reopened + 1] = c
        vim.cmd(c .. "foldopen")
      end
      for _ = 1, 20 do
        if vim.fn.foldlevel(l) <= want then
          break
        end
        vim.api.nvim_win_set_cursor(0, { l, 0 })
        vim.cmd("silent! normal! zd")
      end
      for k = #reopened, 1, -1 do
        pcall(vim.cmd, reopened[k] .. "foldclose")
      end
    end
    vim.fn.winrestview(view)
  end)
  wo.foldmethod = "expr"
  -- Setting the method folded every line again: should a line still lie too
  -- deep, this window is not repaired again (each repair would cost that).
  local still = vim.api.nvim_win_call(win, function()
    for _, x in ipairs(bad) do
      if vim.fn.foldlevel(x[1]) > x[2] then
        return true
      end
    end
    return false
  end)
  if still then
    H.no_repair[win] = true
  end
end

-- Windows not repaired again (H.repair), forgotten with the window (M.forget_window).
H.no_repair = {}

-- The next slice of an update spread over turns of the loop (H.fold_ranges),
-- unless the buffer changed meanwhile (then the flush of that change computes
-- it all again from the last complete update).
function H.resume(bufnr, budget)
  local p = session.field(bufnr, "fold_pending")
  local job = p and p.rest
  if not job or not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  p.rest = nil
  local idoc, version = lines.idoc(bufnr)
  if idoc ~= job.idoc or version ~= job.version then
    return
  end
  if vim.api.nvim_get_mode().mode:match("^i") then
    -- Once Insert mode is left, with the changes made in it.
    p.top, p.bot = job.ranges[1][1], job.ranges[1][1] + 1
    H.flush(bufnr)
    return
  end
  local wins = H.windows(bufnr)
  if #wins > 0 then
    H.fold_ranges(bufnr, wins, p, job, budget or H.SLICE_LINES)
  end
end

-- Lines folded again per turn of the loop after a change (about 1 ms): an undo
-- in a message of thousands of lines does not hold the loop for all of them.
H.SLICE_LINES = 400
-- Messages up to this long are folded again in full after a change in them.
H.WHOLE_LINES = 400
-- Chats up to this long are folded again in full after the document was built
-- again (which read all of it already).
H.WHOLE_BUFFER_LINES = 1200

-- Widens range r (0-based lines [r[1], r[2])) to the messages holding its ends.
function H.whole_messages(idoc, r)
  local native = require("flemma.core.native")
  local _, nlines = native.idoc_info(idoc)
  if nlines == 0 then
    return
  end
  local lo = native.idoc_segment_at(idoc, math.min(r[1] + 1, nlines))
  local hi = native.idoc_segment_at(idoc, math.min(math.max(r[2], r[1] + 1), nlines))
  if lo then
    r[1] = math.min(r[1], native.idoc_segment_raw(idoc, lo).first_line - 1)
  end
  if hi then
    local seg = native.idoc_segment_raw(idoc, hi)
    r[2] = math.max(r[2], seg.first_line - 1 + seg.line_count)
  end
end

-- After a change that Neovim folded with a document built again since (an
-- undo of several changes the document could not follow: Neovim folds them
-- change by change, each with the document of another moment, and its fold
-- tree can keep a stale nested fold even above them): a chat of up to
-- H.WHOLE_BUFFER_LINES lines is folded again in full (in slices); `ranges`
-- becomes the whole document.
function H.small_chat(idoc, ranges)
  local _, nlines = require("flemma.core.native").idoc_info(idoc)
  if nlines <= H.WHOLE_BUFFER_LINES then
    for k = #ranges, 2, -1 do
      ranges[k] = nil
    end
    ranges[1] = { 0, nlines }
  end
end

-- Extends range r (0-based lines [r[1], r[2])) to the start of the message
-- before it.
function H.prev_message(idoc, r)
  if r[1] <= 0 then
    return
  end
  local native = require("flemma.core.native")
  local i = native.idoc_segment_at(idoc, r[1])
  if i then
    r[1] = math.min(r[1], native.idoc_segment_raw(idoc, i).first_line - 1)
  end
end

-- Extends range r (0-based lines [r[1], r[2])) to the end of the message
-- after it.
function H.next_message(idoc, r)
  local native = require("flemma.core.native")
  local _, nlines = native.idoc_info(idoc)
  if r[2] >= nlines then
    return
  end
  local i = native.idoc_segment_at(idoc, r[2] + 1)
  if i then
    local seg = native.idoc_segment_raw(idoc, i)
    r[2] = math.max(r[2], seg.first_line - 1 + seg.line_count)
  end
end

-- Ranges sorted by their first line, overlapping or adjacent ones joined.
function H.merge(ranges)
  table.sort(ranges, function(x, y)
    return x[1] < y[1]
  end)
  local out = {}
  for _, r in ipairs(ranges) do
    local last = out[#out]
    if last and r[1] <= last[2] then
      last[2] = math.max(last[2], r[2])
    else
      out[#out + 1] = { r[1], r[2] }
    end
  end
  return out
end

function H.flush(bufnr, budget)
  local p = session.field(bufnr, "fold_pending")
  if not p or not p.top then
    return
  end
  if vim.api.nvim_get_mode().mode:match("^i") then
    -- Neovim does not update expr folds in Insert mode: once it is left.
    if not p.insert_wait then
      p.insert_wait = true
      vim.api.nvim_create_autocmd("InsertLeave", {
        buffer = bufnr,
        once = true,
        callback = function()
          p.insert_wait = nil
          H.flush(bufnr, H.SLICE_LINES)
        end,
      })
    end
    return
  end
  local top, bot = p.top, p.bot
  p.top, p.bot = nil, nil
  M.update(bufnr, top, bot, budget)
end

--- Computes the folds of pending changes now, all of them (they are otherwise
--- computed on the next turns of the loop).
function M.flush(bufnr)
  H.flush(bufnr)
  H.resume(bufnr, math.huge)
end

--- Records a change of lines first .. last_new - 1 (0-based) and schedules the
--- update of their folds.
function M.changed(bufnr, first, last_new)
  if not session.field(bufnr, "fold_folding") then
    return
  end
  local p = session.field(bufnr, "fold_pending")
  if not p then
    p = {}
    session.get(bufnr).fold_pending = p
  end
  if p.top then
    p.top, p.bot = math.min(p.top, first), math.max(p.bot, last_new)
    return
  end
  p.top, p.bot = first, math.max(last_new, first + 1)
  -- On a later turn of the loop than the change (flemma.ui.after): the edit and
  -- this work block the loop apart.
  require("flemma.ui.after").run("fold " .. bufnr, function()
    H.flush(bufnr, H.SLICE_LINES)
  end)
end

--- Remembers the document version folds reflect now (after a full computation).
function M.mark_current(bufnr)
  local idoc, version = lines.idoc(bufnr)
  local p = session.field(bufnr, "fold_pending") or {}
  p.version, p.idoc = version, idoc
  p.count = idoc and select(3, require("flemma.core.native").idoc_info(idoc)) or nil
  session.get(bufnr).fold_pending = p
end

function M.forget(bufnr)
  session.set(bufnr, "fold_pending", nil)
  session.set(bufnr, "fold_folding", nil)
  for _, per_buf in pairs(H.folded) do
    per_buf[bufnr] = nil -- the blocks closed once in each window
  end
end

-- Whether a block is "completed": a thinking block closed by its tag, a tool
-- result that is a real result (not a placeholder).
function H.completed(it)
  if it.unclosed then
    return false
  end
  if it.kind == "thinking" then
    return true
  end
  return it.kind == "tool_result" and it.status == nil
end

--- Closes, in window win, the folds of the completed blocks of segments lo .. hi - 1
--- (0-based; all segments by default): thinking blocks and real tool results, or
--- only the kinds in `kinds` ({ thinking = true }). Blocks closed once in a
--- window are not closed again (the user may have opened them).
function M.close_completed(win, lo, hi, kinds)
  kinds = kinds or H.BLOCK_KINDS
  if not vim.api.nvim_win_is_valid(win) then
    return
  end
  local bufnr = vim.api.nvim_win_get_buf(win)
  if not vim.wo[win].foldenable or vim.wo[win].foldexpr ~= M.EXPR then
    return
  end
  local idoc = lines.idoc(bufnr)
  if not idoc then
    return
  end
  local _, _, count = require("flemma.core.native").idoc_info(idoc)
  lo, hi = lo or 0, math.min(hi or count, count)
  H.folded[win] = H.folded[win] or {}
  local seen = H.folded[win][bufnr] or {}
  H.folded[win][bufnr] = seen
  local targets = {}
  for i = lo, hi - 1 do
    local seg = lines.segment_index(bufnr, i)
    if not seg then
      return
    end
    local base = seg.first - 1
    for _, it in ipairs(seg.outline.items) do
      if kinds[it.kind] and it.last > it.first and H.completed(it) then
        local key = it.kind == "tool_result" and ("r" .. it.tool_id) or ("t" .. seg.outline.id .. ":" .. it.first)
        if not seen[key] then
          seen[key] = true
          targets[#targets + 1] = it.first + base
        end
      end
    end
  end
  if #targets == 0 then
    return
  end
  vim.api.nvim_win_call(win, function()
    for _, lnum in ipairs(targets) do
      -- The block's own fold (level 2) starts on its first line.
      if vim.fn.foldlevel(lnum) >= 2 and vim.fn.foldclosed(lnum) == -1 then
        pcall(vim.cmd, lnum .. "foldclose")
      end
    end
  end)
end

H.BLOCK_KINDS = { thinking = true, tool_result = true }
-- Per window and buffer: the blocks closed once (keys: "r" .. tool id, "t" .. segment id:line).
H.folded = {}

--- Forgets what was closed in a window (it was closed).
function M.forget_window(win)
  H.folded[win] = nil
  H.no_repair[win] = nil
end

return M
