--- The counts of the `todo` tool's task lists (`:help flemma-tools-todo`): at the end of
--- the opening fence line of each list block, virtual text "3 pending · 1 in progress ·
--- 2 done", or why the block cannot be read. Drawn with the tool previews
--- (flemma.ui.preview), segment by segment, for the messages that changed.
local list = require("flemma.tools.builtin.todo_list")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.todo")

-- The virtual text of one list block's content.
function H.chunks(content)
  local items, err = list.parse(content)
  if not items then
    return { { "todo: " .. err, "DiagnosticWarn" } }
  end
  return { { list.summary(items), "FlemmaTodoCounts" } }
end

function H.place(bufnr, part)
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, (part.fence_line or part.first_line) - 1, 0, {
    virt_text = H.chunks(part.content or ""),
    virt_text_pos = "eol",
    invalidate = true,
    undo_restore = false,
  })
end

-- The name of the tool that made the use `id` of live state L, or nil.
function H.use_name(L, id)
  local native = require("flemma.core.native")
  local seg = native.idoc_find_tool_use(L.idoc, id)
  if not seg then
    return nil
  end
  local message = require("flemma.chat.document").entry(L, seg).message
  for _, p in ipairs(message and message.parts or {}) do
    if p.kind == "tool_use" and p.id == id then
      return p.name
    end
  end
end

--- Whether segment i (0-based) of live state L holds a list block or shows counts
--- (then it must be drawn again when it changed).
---@return boolean
function M.involved(bufnr, L, i)
  local native = require("flemma.core.native")
  if native.idoc_has_result_info(L.idoc, i, list.INFO) then
    return true
  end
  local raw = native.idoc_segment_raw(L.idoc, i)
  local from = math.max(raw.first_line - 2, 0)
  local to = math.min(raw.first_line - 1 + raw.line_count, vim.api.nvim_buf_line_count(bufnr) - 1)
  return #vim.api.nvim_buf_get_extmarks(bufnr, M.ns, { from, 0 }, { to, -1 }, { limit = 1 }) > 0
end

--- Draws the counts of the list blocks of segment i (0-based) of live state L.
function M.draw_segment(bufnr, L, i)
  local native = require("flemma.core.native")
  local raw = native.idoc_segment_raw(L.idoc, i)
  local first, count = raw.first_line, raw.line_count
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, first - 1, first - 1 + count)
  if not native.idoc_has_result_info(L.idoc, i, list.INFO) then
    return
  end
  local e = require("flemma.chat.document").entry(L, i)
  for _, part in ipairs(e.message and e.message.parts or {}) do
    if
      part.kind == "tool_result"
      and part.info == list.INFO
      and part.status == nil
      and not part.is_error
      and H.use_name(L, part.id) == list.TOOL
    then
      H.place(bufnr, part)
    end
  end
end

--- Draws the counts of every list block of a parsed document of bufnr.
---@param doc flemma.document.Doc
function M.draw_doc(bufnr, doc)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  local uses = {}
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_use" then
        uses[part.id] = part
      end
    end
  end
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if list.is_list(part, uses) then
        H.place(bufnr, part)
      end
    end
  end
end

--- The counts shown in bufnr: list of { line (1-based), text, hl }.
---@param bufnr integer
function M.shown(bufnr)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })) do
    local vt = m[4].virt_text
    if vt and not m[4].invalid then
      out[#out + 1] = { line = m[2] + 1, text = vt[1][1], hl = vt[1][2] }
    end
  end
  return out
end

return M
