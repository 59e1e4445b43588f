--- Highlighting of chat buffers: a decoration provider that, for the lines a
--- window draws, asks flemma.ui.lines what each line is and sets ephemeral
--- highlights (role markers, tool headers, placeholders by status, error
--- results, thinking, frontmatter fences, file references, template tags).
--- Only drawn lines cost anything: nothing is computed for the rest of the chat,
--- and nothing is stored. Markdown underneath comes from tree-sitter (the
--- `markdown` parser, when Neovim has it) or from syntax/chat.vim.
local session = require("flemma.core.session")
local lines = require("flemma.ui.lines")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.highlight")
-- Above tree-sitter (100) and semantic tokens (125), below diagnostics (150).
M.PRIORITY = 130

M.ROLE_GROUPS = { system = "FlemmaRoleSystem", user = "FlemmaRoleUser", assistant = "FlemmaRoleAssistant" }
M.STATUS_GROUPS = {
  approved = "FlemmaPlaceholderApproved",
  pending = "FlemmaPlaceholderPending",
  denied = "FlemmaPlaceholderDenied",
  rejected = "FlemmaPlaceholderRejected",
}

-- H.enabled: the `highlight_enabled` field of each buffer's session record (flemma.core.session).

function H.mark(buf, row, col, end_col, group)
  vim.api.nvim_buf_set_extmark(buf, M.ns, row, col, {
    end_row = row,
    end_col = end_col,
    hl_group = group,
    ephemeral = true,
    priority = M.PRIORITY,
  })
end

function H.text(buf, row)
  return vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
end

-- `**Tool Use:** `NAME` (`ID`)` and `**Tool Result:** `ID` (error)`: the label,
-- then each backtick span.
function H.header(out, line, label_group, span_groups)
  local s, e = line:find("^%*%*Tool %a+:%*%*")
  if not s then
    return
  end
  out[#out + 1] = { 0, e, label_group }
  local pos, k = e + 1, 1
  while span_groups[k] do
    local a, b = line:find("`[^`]*`", pos)
    if not a then
      break
    end
    out[#out + 1] = { a - 1, b, span_groups[k] }
    pos, k = b + 1, k + 1
  end
  return pos
end

-- File references (the ones attachments reads: @./p, @../p, @~/p, @/p, an
-- optional ;type=mime) and template tags ({{ }}, {% %}) in a line of text.
function H.text_spans(out, line)
  for _, ref in ipairs(require("flemma.chat.attachments").line_references(line)) do
    out[#out + 1] = { ref.first - 1, ref.last, "FlemmaFileReference" }
  end
  for open, close, group in H.tag_kinds() do
    local pos = 1
    while true do
      local a = line:find(open, pos, true)
      if not a then
        break
      end
      local _, b = line:find(close, a + 2, true)
      b = b or #line -- a tag going on past this line
      out[#out + 1] = { a - 1, b, group }
      pos = b + 1
    end
  end
end

H.TAGS = { { "{{", "}}", "FlemmaTemplateExpression" }, { "{%", "%}", "FlemmaTemplateCode" } }
function H.tag_kinds()
  local i = 0
  return function()
    i = i + 1
    local t = H.TAGS[i]
    if t then
      return t[1], t[2], t[3]
    end
  end
end

--- The highlights of line lnum (1-based) of a buffer: a list of { start_col,
--- end_col, group } (0-based, end exclusive), as drawn.
---@return { [1]: integer, [2]: integer, [3]: string }[]
function M.spans(buf, lnum)
  local out = {}
  local what, item, seg, base = lines.at(buf, lnum)
  if not what then
    return out
  end
  local row = lnum - 1
  if what == "marker" then
    local line = H.text(buf, row)
    out[1] = { 0, #line, M.ROLE_GROUPS[item.role] or "FlemmaRoleUser" }
  elseif what == "frontmatter" then
    if lnum == item.first + base or lnum == item.last + base then
      out[1] = { 0, #H.text(buf, row), "FlemmaFrontmatter" }
    end
  elseif what == "part" then
    local kind, first = item.kind, item.first + base
    if kind == "tool_use" then
      if lnum == first then
        H.header(out, H.text(buf, row), "FlemmaToolUse", { "FlemmaToolName", "FlemmaToolId" })
      end
    elseif kind == "tool_result" then
      local line = lnum == first or (item.fence and lnum == item.fence + base) or lnum == item.last + base
      if line then
        line = H.text(buf, row)
      end
      if lnum == first then
        local pos =
          H.header(out, line, item.error and "FlemmaToolResultError" or "FlemmaToolResult", { "FlemmaToolId" })
        if pos then
          local a, b = line:find("%(%a+%)", pos)
          if a then
            local group = item.error and "FlemmaToolResultError" or M.STATUS_GROUPS[item.status]
            if group then
              out[#out + 1] = { a - 1, b, group }
            end
          end
        end
      elseif item.status and item.fence and lnum == item.fence + base then
        local a = line:find("flemma:tool", 1, true)
        local group = M.STATUS_GROUPS[item.status] or "FlemmaPlaceholderPending"
        if a then
          out[#out + 1] = { a - 1, #line, group }
        end
      elseif item.error and item.fence and lnum > item.fence + base and lnum < item.last + base then
        out[#out + 1] = { 0, #H.text(buf, row), "FlemmaToolResultErrorBody" }
      end
    elseif kind == "thinking" then
      local line = H.text(buf, row)
      if lnum == first or (lnum == item.last + base and not item.unclosed) then
        out[1] = { 0, #line, "FlemmaThinkingTag" }
      else
        out[1] = { 0, #line, "FlemmaThinking" }
      end
    elseif kind == "text" then
      local role = seg.outline.msg and seg.outline.msg.role
      if role == "user" or role == "system" then
        H.text_spans(out, H.text(buf, row))
      end
    end
  end
  return out
end

-- H.ensure_scheduled: the `highlight_scheduled` field of each buffer's session record (flemma.core.session).

function H.on_win(_, win, buf, toprow, botrow)
  if session.field(buf, "highlight_enabled") ~= true then
    return false
  end
  -- Rulers and signs of the messages in view are placed when first drawn (after
  -- this redraw: extmarks set now would not be drawn by it).
  local ok, lo = pcall(require("flemma.ui.marks").missing, buf, toprow + 1, botrow + 1)
  if ok and lo and not session.field(buf, "highlight_scheduled") then
    session.get(buf).highlight_scheduled = true
    vim.schedule(function()
      session.set(buf, "highlight_scheduled", nil)
      if
        session.field(buf, "highlight_enabled")
        and vim.api.nvim_win_is_valid(win)
        and vim.api.nvim_win_get_buf(win) == buf
      then
        pcall(require("flemma.ui.marks").ensure, buf, toprow + 1, botrow + 1)
      end
    end)
  end
  return true
end

function H.on_line(_, _, buf, row)
  local ok, spans = pcall(M.spans, buf, row + 1)
  if not ok then
    return
  end
  for _, s in ipairs(spans) do
    if s[2] > s[1] then
      pcall(H.mark, buf, row, s[1], s[2], s[3])
    end
  end
end

--- Highlights buffer buf in every window that shows it.
function M.attach(buf)
  session.get(buf).highlight_enabled = true
  if not H.provider then
    H.provider = true
    vim.api.nvim_set_decoration_provider(M.ns, { on_win = H.on_win, on_line = H.on_line })
  end
end

function M.detach(buf)
  session.set(buf, "highlight_enabled", nil)
end

return M
