--- Tool previews: a virtual line inside each empty pending placeholder showing
--- `name: summary`, so the user sees what a tool will do without scrolling up.
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
    summary = "(preview failed: " .. require("flemma.util").message(summary) .. ")"
  end
  summary = summary:gsub("\r\n", "\n"):gsub("\n", eol or "↵")
  return M.fit(prefix .. summary, width)
end

--- Redraws the previews of every empty pending placeholder of bufnr.
---@param bufnr integer
---@param doc? table a parsed document of the buffer's current text
function M.refresh(bufnr, doc)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  doc = doc or require("flemma.document").get(bufnr)
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

--- Previews currently shown in bufnr: list of { line (1-based), text }.
---@param bufnr integer
function M.shown(bufnr)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })) do
    local vl = m[4].virt_lines
    if vl then
      out[#out + 1] = { line = m[2] + 1, text = vl[1][1][1], hl = vl[1][1][2] }
    end
  end
  return out
end

return M
