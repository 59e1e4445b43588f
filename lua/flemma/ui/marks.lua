--- Marks on the role marker lines of a chat buffer: a ruler (a virtual line
--- above each marker, `ui.ruler`) and a sign for a message still streaming or
--- an @Assistant: message with tool uses that have no result yet (`ui.signs`).
--- Kept as extmarks (they move with the text), placed when a window first
--- draws their message (highlight's decoration provider asks M.missing); after
--- a change the marks of the segments that changed, and of their neighbours,
--- are taken away and placed again when drawn.
local session = require("flemma.core.session")
local lines = require("flemma.ui.lines")
local native = require("flemma.core.native")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.marks")

function H.config()
  return require("flemma.core.config").get().ui
end

function H.streaming(buf)
  local ok, active = pcall(function()
    return require("flemma.cycle.send").is_active(buf)
  end)
  return ok and active
end

-- Whether the @Assistant: message of segment seg has a tool use without a real
-- result in the message of segment nxt.
function H.pending_tools(seg, nxt)
  local uses = {}
  local any = false
  for _, it in ipairs(seg.outline.items) do
    if it.kind == "tool_use" then
      uses[it.tool_id] = true
      any = true
    end
  end
  if not any then
    return false
  end
  if nxt and nxt.outline.msg and nxt.outline.msg.role == "user" then
    for _, it in ipairs(nxt.outline.items) do
      if it.kind == "tool_result" and it.status == nil then
        uses[it.tool_id] = nil
      end
    end
  end
  return next(uses) ~= nil
end

--- What segment i gets: the line of its marker (1-based) and the sign ("streaming",
--- "pending" or nil); nil when it has no message.
function M.state(buf, i, count)
  local seg = lines.segment_index(buf, i)
  local msg = seg and seg.outline.msg
  if not msg then
    return nil
  end
  local sign
  if msg.role == "assistant" then
    if i == count - 1 and H.streaming(buf) then
      sign = "streaming"
    elseif H.pending_tools(seg, i + 1 < count and lines.segment_index(buf, i + 1) or nil) then
      sign = "pending"
    end
  end
  return msg.first + seg.first - 1, sign
end

function H.place(buf, lnum, sign, cfg)
  local ruler, signs = cfg.ruler, cfg.signs
  local opts = nil
  if ruler.enabled and lnum > 1 then
    local width = vim.o.columns
    opts = {
      virt_lines = { { { string.rep(ruler.char, width), "FlemmaRuler" } } },
      virt_lines_above = true,
    }
  end
  if sign and signs.enabled then
    opts = opts or {}
    opts.sign_text = signs[sign]
    opts.sign_hl_group = sign == "streaming" and "FlemmaSignStreaming" or "FlemmaSignPending"
  end
  if opts then
    vim.api.nvim_buf_set_extmark(buf, M.ns, lnum - 1, 0, opts)
  end
end

-- Per buffer: ids of the segments whose marks are placed, and the document
-- version the placed marks reflect.
-- H.placed: the `marks` field of each buffer's session record (flemma.core.session).

function H.placed_of(buf, version)
  local p = session.field(buf, "marks")
  if not p or p.count > 65536 then
    p = { ids = {}, count = 0, version = version }
    session.get(buf).marks = p
  end
  return p
end

-- The lines (0-based, end exclusive) of segments lo .. hi - 1, as the range of
-- nvim_buf_clear_namespace: to the end (-1) for the last segment, so that a mark
-- left past the last line (its line deleted at the end of the buffer: a failed
-- send's empty `@Assistant:`) goes too.
function H.span(buf, idoc, lo, hi)
  local first = native.idoc_segment_raw(idoc, lo).first_line - 1
  local last = native.idoc_segment_raw(idoc, hi - 1)
  local stop = last.first_line - 1 + last.line_count
  if stop >= vim.api.nvim_buf_line_count(buf) then
    stop = -1
  end
  return first, stop
end

--- Takes the marks of segments lo .. hi - 1 (0-based) away; they are placed
--- again when they are next drawn (M.ensure).
function M.invalidate(buf, lo, hi)
  local idoc, version = lines.idoc(buf)
  if not idoc then
    return
  end
  local _, _, count = native.idoc_info(idoc)
  local p = H.placed_of(buf, version)
  lo, hi = math.max(lo or 0, 0), math.min(hi or count, count)
  if lo < hi then
    local first, stop = H.span(buf, idoc, lo, hi)
    vim.api.nvim_buf_clear_namespace(buf, M.ns, first, stop)
    for i = lo, hi - 1 do
      p.ids[tonumber(native.idoc_segment_raw(idoc, i).id)] = nil
    end
  end
  p.version = version
end

--- The segments (0-based [lo, hi)) holding lines top .. bot (1-based) whose
--- marks are not placed: nil when all are.
function M.missing(buf, top, bot)
  local idoc, version = lines.idoc(buf)
  if not idoc then
    return nil
  end
  local p = session.field(buf, "marks")
  if p and p.version ~= version then
    return nil -- a change is being taken in: M.update comes first
  end
  local lo = native.idoc_segment_at(idoc, top)
  if not lo then
    return nil
  end
  local hi = native.idoc_segment_at(idoc, math.max(top, bot))
  if not hi then
    local _, _, count = native.idoc_info(idoc)
    hi = count - 1
  end
  local ids = p and p.ids or {}
  for i = lo, hi do
    if not ids[tonumber(native.idoc_segment_raw(idoc, i).id)] then
      return lo, hi + 1
    end
  end
  return nil
end

--- Places the marks of the segments holding lines top .. bot (1-based) that
--- do not have them yet.
function M.ensure(buf, top, bot)
  local lo, hi = M.missing(buf, top, bot)
  if not lo then
    return
  end
  local idoc, version = lines.idoc(buf)
  local _, _, count = native.idoc_info(idoc)
  local p = H.placed_of(buf, version)
  local cfg = H.config()
  for i = lo, hi - 1 do
    local raw = native.idoc_segment_raw(idoc, i)
    local id = tonumber(raw.id)
    if not p.ids[id] then
      local first, stop = H.span(buf, idoc, i, i + 1)
      vim.api.nvim_buf_clear_namespace(buf, M.ns, first, stop)
      if cfg.ruler.enabled or cfg.signs.enabled then
        local lnum, sign = M.state(buf, i, count)
        if lnum then
          H.place(buf, lnum, sign, cfg)
        end
      end
      p.ids[id] = true
      p.count = p.count + 1
    end
  end
end

--- Takes in what changed since the last call: the marks of the segments that
--- changed, and of one segment around them (a result written into the next
--- message changes the sign of the one above), are placed again when drawn.
function M.update(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local idoc, version = lines.idoc(buf)
  if not idoc then
    return
  end
  local p = session.field(buf, "marks")
  if not p then
    return
  end
  if p.version == version then
    return
  end
  local exact, lo, hi = native.idoc_changes(idoc, p.version)
  if not exact then
    vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
    session.get(buf).marks = { ids = {}, count = 0, version = version }
    return
  end
  M.invalidate(buf, lo - 1, hi + 1)
end

--- The last two segments are marked again (a request started or ended: the streaming sign).
function M.refresh_tail(buf)
  M.update(buf)
  local idoc = lines.idoc(buf)
  if not idoc then
    return
  end
  local _, _, count = native.idoc_info(idoc)
  M.invalidate(buf, count - 2, count)
  M.redraw(buf)
end

--- The windows showing buf get the missing marks of what they show now, or will
--- show at the next redraw: the lines around the cursor, two window heights either
--- side (Neovim keeps the cursor in view). Read without making Neovim validate the
--- window (line("w0"), line("w$") and getwininfo() do): that measures the screen
--- rows of the lines around the cursor, and a 10 MB line among them took 30-90 ms.
--- Lines a redraw shows beyond these (closed folds hide many) get their marks from
--- the decoration provider (flemma.ui.highlight).
function M.redraw(buf)
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local span = 2 * math.max(vim.api.nvim_win_get_height(win), 1)
    local cur = vim.api.nvim_win_get_cursor(win)[1]
    M.ensure(buf, math.max(cur - span, 1), cur + span)
  end
end

function M.forget(buf)
  session.set(buf, "marks", nil)
end

return M
