--- Moving around a chat buffer: ]m [m between messages, the im am text objects,
--- gf on a file reference, gd between a tool use and its result, and the
--- `@You:` an empty chat starts with. See `:help flemma-moving`.
---
--- Motions read the live document (flemma.document.live): the segment under
--- the cursor is found natively and only the segments passed over are read,
--- without building their tables, so a motion costs the same in a 10 MB chat.
local M = {}
local H = {}

local api = vim.api

-- ---------------------------------------------------------------------------
-- Messages
-- ---------------------------------------------------------------------------

--- The live state of bufnr, or nil when the native library is not usable.
function H.live(bufnr)
  if not require("flemma.core.native").usable() then
    return nil
  end
  return require("flemma.chat.document").live(bufnr)
end

function H.segments(L)
  local _, _, count = require("flemma.core.native").idoc_info(L.idoc)
  return count
end

function H.message(L, i)
  return require("flemma.core.native").idoc_message(L.idoc, i)
end

--- The segment (0-based) holding line, clamped to the document.
function H.segment_at(L, line, count)
  local i = require("flemma.core.native").idoc_segment_at(L.idoc, line)
  if i then
    return i
  end
  return line < 1 and 0 or count - 1
end

--- The marker line `count` messages after (dir 1) or before (dir -1) line;
--- nil when there are fewer.
function H.find_marker(L, line, dir, count)
  local n = H.segments(L)
  if n == 0 then
    return nil
  end
  local i = H.segment_at(L, line, n)
  while count > 0 and i >= 0 and i < n do
    local m = H.message(L, i)
    if m.role and ((dir > 0 and m.first > line) or (dir < 0 and m.first < line)) then
      line = m.first
      count = count - 1
    end
    i = i + dir
  end
  if count > 0 then
    return nil
  end
  return line
end

function H.mode()
  return api.nvim_get_mode().mode
end

--- Puts the pending operator on a visual selection from the cursor to
--- (line, col), linewise when the cursor is at or before its line's first
--- non-blank (as an exclusive motion ending in column 1 would be).
function H.operator_to(line, col)
  local cur = api.nvim_win_get_cursor(0)
  local text = api.nvim_get_current_line()
  local indent = #(text:match("^%s*"))
  vim.cmd("normal! " .. (cur[2] <= indent and "V" or "v"))
  api.nvim_win_set_cursor(0, { line, col })
end

--- `]m` (dir 1) and `[m` (dir -1): to the role marker of the v:count1-th next
--- or previous message; past the last one, to the end (start) of the buffer,
--- as `]]` and `[[` do. Normal, Visual and Operator-pending mode.
---@param dir 1|-1
function M.message_motion(dir)
  local bufnr = api.nvim_get_current_buf()
  local L = H.live(bufnr)
  if not L then
    return
  end
  local count = vim.v.count1
  local cur = api.nvim_win_get_cursor(0)
  local target = H.find_marker(L, cur[1], dir, count)
  local mode = H.mode()
  local pending = mode:sub(1, 2) == "no"
  if not target then
    if dir > 0 then
      local last = api.nvim_buf_line_count(bufnr)
      if pending then
        -- To the end: the last character is included (as with `]]`).
        local len = #(api.nvim_buf_get_lines(bufnr, last - 1, last, false)[1] or "")
        return H.operator_to(last, math.max(0, len - 1))
      end
      target = last
    else
      target = 1
    end
  end
  if mode == "n" then
    vim.cmd("normal! m'") -- the jump list
  end
  api.nvim_win_set_cursor(0, { target, 0 })
end

-- ---------------------------------------------------------------------------
-- Text objects
-- ---------------------------------------------------------------------------

function H.blank(bufnr, line)
  local text = api.nvim_buf_get_lines(bufnr, line - 1, line, false)[1]
  return text ~= nil and text:match("^%s*$") ~= nil
end

--- The lines of the `am` (around) or `im` (inner) object at line with count
--- messages; nil when there is none.
function H.object(bufnr, L, line, around, count)
  local n = H.segments(L)
  if n == 0 then
    return nil
  end
  local i = H.segment_at(L, line, n)
  local m = H.message(L, i)
  if not m.role or line < m.first then
    return nil -- the frontmatter, or text before the first marker
  end
  local j = math.min(n - 1, i + count - 1)
  local last_m = j == i and m or H.message(L, j)
  if around then
    local first, last = m.first, last_m.seg_last
    -- As with `ap`: without blank lines after the message, those before it
    -- are taken instead (dam on the last message leaves no blank tail).
    if last_m.last >= last and i > 0 then
      local prev = H.message(L, i - 1)
      local prev_end = prev.last or prev.seg_last
      if prev_end < prev.seg_last then
        first = prev_end + 1
      end
    end
    return first, last
  end
  if m.content then
    local last = last_m.content and last_m.last or m.last
    if j ~= i and not last_m.content then
      -- An empty message at the end of the count: up to the last with content.
      for k = j - 1, i, -1 do
        local mk = H.message(L, k)
        if mk.content then
          last = mk.last
          break
        end
      end
    end
    return m.content, last
  end
  -- An empty message: its blank lines, if any (as `ip` on blank lines).
  if m.seg_last > m.first and H.blank(bufnr, m.first + 1) then
    return m.first + 1, m.seg_last
  end
  return nil
end

--- The lines the `am` (around) or `im` object selects now, or nil.
function H.region(around)
  local bufnr = api.nvim_get_current_buf()
  local L = H.live(bufnr)
  if not L then
    return nil
  end
  local line = api.nvim_win_get_cursor(0)[1]
  local keep
  if H.mode():sub(1, 1) ~= "n" and vim.fn.line("v") < line then
    -- Visual mode over several lines already: grown by the next message(s).
    keep, line = vim.fn.line("v"), H.find_marker(L, line, 1, 1)
    if not line then
      return nil
    end
  end
  local first, last = H.object(bufnr, L, line, around, vim.v.count1)
  if not first then
    return nil
  end
  return keep or first, last
end

--- `am` (around = true): the whole message, its role marker and the blank
--- lines after it; `im`: its text without the marker and the blank lines
--- around it. A count takes that many messages; in Visual mode over several
--- lines, the selection grows by the next message(s). For an expression
--- mapping in Visual and Operator-pending mode: returns the keys that select
--- the lines (computed again when they run, so that `.` repeats on the
--- message under the cursor then), or <Esc> (the operator is cancelled) when
--- there is no message.
---@param around boolean
---@return string
function M.message_object(around)
  local ok, first = xpcall(H.region, debug.traceback, around)
  if not ok then
    require("flemma.core.util").notify(
      (around and "am" or "im") .. " failed: " .. tostring(first),
      vim.log.levels.ERROR
    )
    return "<Esc>"
  end
  if not first then
    return H.mode():sub(1, 2) == "no" and "<Esc>" or ""
  end
  return ('<Cmd>lua require("flemma.ui.nav").select_object(%s)<CR>'):format(tostring(around))
end

--- Selects the `am` or `im` object under the cursor (see M.message_object).
---@param around boolean
function M.select_object(around)
  local first, last = H.region(around)
  if first then
    H.select_lines(first, last)
  end
end

--- Selects lines first..last linewise (Visual mode, or for the pending operator).
function H.select_lines(first, last)
  if H.mode() ~= "V" then
    vim.cmd("normal! V")
  end
  api.nvim_win_set_cursor(0, { first, 0 })
  vim.cmd("normal! o")
  api.nvim_win_set_cursor(0, { last, 0 })
end

-- ---------------------------------------------------------------------------
-- gf: file references
-- ---------------------------------------------------------------------------

--- Runs a built-in Normal mode command, reporting its error as Vim would.
function H.builtin(keys)
  local ok, err = pcall(vim.cmd, "normal! " .. keys)
  if not ok then
    api.nvim_echo({ { (tostring(err):gsub("^.-(E%d+:)", "%1")), "ErrorMsg" } }, true, {})
  end
end

--- `gf`: on a file reference, edits the file it names; elsewhere Vim's own gf.
--- References are read as flemma.attachments reads them for the model.
function M.goto_file()
  local bufnr = api.nvim_get_current_buf()
  local cur = api.nvim_win_get_cursor(0)
  local attachments = require("flemma.chat.attachments")
  local ref = attachments.reference_at(api.nvim_get_current_line(), cur[2])
  if not ref then
    local count = vim.v.count > 0 and tostring(vim.v.count) or ""
    return H.builtin(count .. "gf")
  end
  local path = attachments.resolve(bufnr, ref.path)
  if not vim.uv.fs_stat(path) then
    require("flemma.core.util").warn(("no file %s (the reference @%s): check the path"):format(path, ref.path))
    return
  end
  require("flemma.core.util").open("edit " .. vim.fn.fnameescape(path))
end

-- ---------------------------------------------------------------------------
-- gd: tool use <-> tool result
-- ---------------------------------------------------------------------------

--- The tool use or tool result part at line, with its segment index.
function H.tool_part_at(L, line)
  local n = H.segments(L)
  local i = n > 0 and require("flemma.core.native").idoc_segment_at(L.idoc, line)
  if not i then
    return nil
  end
  local e = require("flemma.chat.document").entry(L, i)
  for _, p in ipairs(e.message and e.message.parts or {}) do
    if p.first_line > line then
      break
    end
    if (p.kind == "tool_use" or p.kind == "tool_result") and line <= p.last_line then
      return p, i
    end
  end
end

--- The first tool result of id in segment i, if i is a message.
function H.result_in(L, i, id)
  local e = require("flemma.chat.document").entry(L, i)
  for _, p in ipairs(e.message and e.message.parts or {}) do
    if p.kind == "tool_result" and p.id == id then
      return p
    end
  end
end

--- The part that pairs with p (in segment i): the result of a tool use in the
--- next message, the tool use a result answers.
function H.pair(L, p, i)
  if p.kind == "tool_use" then
    if i + 1 < H.segments(L) then
      return H.result_in(L, i + 1, p.id)
    end
    return nil
  end
  local seg = require("flemma.core.native").idoc_find_tool_use(L.idoc, p.id)
  if not seg then
    return nil
  end
  local e = require("flemma.chat.document").entry(L, seg)
  local parts = e.message and e.message.parts or {}
  for k = #parts, 1, -1 do
    if parts[k].kind == "tool_use" and parts[k].id == p.id then
      return parts[k]
    end
  end
end

--- `gd`: on a tool use, to its result (or placeholder) in the next message;
--- on a tool result, to the tool use it answers; elsewhere Vim's own gd.
function M.goto_pair()
  local bufnr = api.nvim_get_current_buf()
  local L = H.live(bufnr)
  local line = api.nvim_win_get_cursor(0)[1]
  local p, i
  if L then
    p, i = H.tool_part_at(L, line)
  end
  if not p then
    return H.builtin("gd")
  end
  local other = H.pair(L, p, i)
  if not other then
    if p.kind == "tool_use" then
      require("flemma.core.util").warn(
        ("tool use `%s` (%s) has no result in the next @You: message"):format(p.id, p.name)
      )
    else
      require("flemma.core.util").warn(("tool result `%s` answers no tool use in this chat"):format(p.id))
    end
    return
  end
  vim.cmd("normal! m'")
  api.nvim_win_set_cursor(0, { other.first_line, 0 })
end

-- ---------------------------------------------------------------------------
-- A new chat
-- ---------------------------------------------------------------------------

M.TEMPLATE = { "@You:", "" }

function H.empty(bufnr)
  return api.nvim_buf_line_count(bufnr) == 1 and api.nvim_buf_get_lines(bufnr, 0, 1, false)[1] == ""
end

--- Gives an empty chat buffer (a new file, an empty file, an empty buffer
--- set to filetype chat) its first `@You:` line with the cursor on the line
--- after it, a moment later: only if it is still empty then and shown in
--- the current window, so a script that sets the lines of a buffer it just
--- opened keeps them. The template is not a change of the
--- user's: no undo step, and 'modified' stays as it was.
---@param bufnr integer
function M.start_empty(bufnr)
  if vim.bo[bufnr].buftype ~= "" or not H.empty(bufnr) then
    return
  end
  vim.schedule(function()
    if
      not api.nvim_buf_is_valid(bufnr)
      or api.nvim_get_current_buf() ~= bufnr
      or not vim.bo[bufnr].modifiable
      or vim.bo[bufnr].filetype ~= "chat"
      or not H.empty(bufnr)
    then
      return
    end
    local bo = vim.bo[bufnr]
    local modified, undolevels = bo.modified, bo.undolevels
    bo.undolevels = -1
    api.nvim_buf_set_lines(bufnr, 0, -1, false, M.TEMPLATE)
    bo.undolevels = undolevels
    bo.modified = modified
    api.nvim_win_set_cursor(0, { #M.TEMPLATE, 0 })
  end)
end

return M
