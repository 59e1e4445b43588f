--- Running-tool indicators: a spinner on each running placeholder and the last line of
--- its live output, as extmarks (never buffer text). One timer per buffer.
local session = require("flemma.core.session")
local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.spinner")
M.frames = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }
M.interval = 100

---@type table<integer, { timer: uv.uv_timer_t, frame: integer, items: table<string, table> }>
-- H.buffers: the `spinner` field of each buffer's session record (flemma.core.session).

function H.render(bufnr, item, frame)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(bufnr, M.ns, item.mark, {})
  if not pos or pos[1] == nil then
    return
  end
  local elapsed = math.floor((vim.uv.now() - item.started) / 1000)
  local opts = {
    id = item.mark,
    virt_text = { { (" %s running %s (%ds)"):format(M.frames[frame], item.name, elapsed), "FlemmaToolSpinner" } },
    virt_text_pos = "eol",
  }
  if item.last_line and item.last_line ~= "" then
    opts.virt_lines = { { { "  " .. item.last_line, "FlemmaToolOutput" } } }
  end
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, pos[1], 0, opts)
end

function H.tick(bufnr)
  local b = session.field(bufnr, "spinner")
  if not b then
    return
  end
  if not vim.api.nvim_buf_is_valid(bufnr) then
    M.stop_all(bufnr)
    return
  end
  b.frame = b.frame % #M.frames + 1
  for _, item in pairs(b.items) do
    H.render(bufnr, item, b.frame)
  end
end

--- Starts a spinner for tool `id` on (0-based) `row` of bufnr.
---@param bufnr integer
---@param id string
---@param name string
---@param row integer 0-based line of the placeholder's fence
function M.start(bufnr, id, name, row)
  local b = session.field(bufnr, "spinner")
  if not b then
    b = { timer = vim.uv.new_timer(), frame = 1, items = {} }
    session.get(bufnr).spinner = b
    b.timer:start(
      M.interval,
      M.interval,
      vim.schedule_wrap(function()
        H.tick(bufnr)
      end)
    )
  end
  local mark = vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, 0, {})
  local item = { mark = mark, name = name, started = vim.uv.now() }
  b.items[id] = item
  H.render(bufnr, item, b.frame)
end

--- Current 0-based row of tool id's spinner, or nil.
function M.row(bufnr, id)
  local b = session.field(bufnr, "spinner")
  local item = b and b.items[id]
  if not item or not vim.api.nvim_buf_is_valid(bufnr) then
    return nil
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(bufnr, M.ns, item.mark, {})
  return pos and pos[1]
end

--- Shows the last line of live output under the spinner of tool id.
function M.progress(bufnr, id, last_line)
  local b = session.field(bufnr, "spinner")
  local item = b and b.items[id]
  if item then
    item.last_line = last_line
    H.render(bufnr, item, b.frame)
  end
end

function M.stop(bufnr, id)
  local b = session.field(bufnr, "spinner")
  if not b then
    return
  end
  local item = b.items[id]
  if item and vim.api.nvim_buf_is_valid(bufnr) then
    pcall(vim.api.nvim_buf_del_extmark, bufnr, M.ns, item.mark)
  end
  b.items[id] = nil
  if next(b.items) == nil then
    M.stop_all(bufnr)
  end
end

function M.stop_all(bufnr)
  local b = session.field(bufnr, "spinner")
  if not b then
    return
  end
  session.set(bufnr, "spinner", nil)
  b.timer:stop()
  b.timer:close()
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

return M
