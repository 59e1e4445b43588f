-- Reading a 10 MB chat (bench/chat_gen.lua) in a window: what folds and
-- highlights cost. The fold expression over every line in order (what Neovim
-- asks when it computes the folds; its own cost of calling into Lua comes on
-- top), the highlights of one screen, and the work one edit in the middle
-- leaves for the next tick (folds of the changed segments, rulers and signs);
-- `u`, <C-r> and J in the middle of a 1 MB chat (Neovim folds those before the
-- document hears of them). Folding is turned on for these sizes
-- (ui.fold_max_bytes raised): the default folds chats up to 1 MB.
local gen = dofile(_G.FLEMMA_ROOT .. "/bench/chat_gen.lua")

local st = {}

local function setup()
  if st.buf then
    return
  end
  require("flemma").setup({ ui = { fold_max_bytes = 64 * 1024 * 1024 } }) -- folded (the default folds chats up to 1 MB)
  local lines, info = gen.generate(10 * 1024 * 1024)
  st.n, st.info = #lines, info
  local buf = vim.api.nvim_create_buf(true, false)
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].undolevels = 1000
  vim.api.nvim_set_current_buf(buf)
  local t0 = vim.uv.hrtime()
  vim.bo[buf].filetype = "chat" -- ftplugin: folds computed for every line once
  vim.fn.foldlevel(1)
  st.open_ms = (vim.uv.hrtime() - t0) / 1e6
  vim.wait(200)
  st.buf = buf
  st.mid = math.floor(#lines / 2)
  while not lines[st.mid]:match("^Turn ") do
    st.mid = st.mid + 1
  end
  st.k = 0
end

local function teardown()
  if st.buf and vim.api.nvim_buf_is_valid(st.buf) then
    vim.api.nvim_buf_delete(st.buf, { force = true })
  end
  st = {}
  collectgarbage()
end

-- A 1 MB chat for the undo benchmarks (undo, redo and J in the middle).
local u = {}

local function setup_1mb()
  if u.buf then
    return
  end
  require("flemma").setup({ ui = { fold_max_bytes = 64 * 1024 * 1024 } }) -- folded (the default folds chats up to 1 MB)
  local lines = gen.generate(1024 * 1024)
  local buf = vim.api.nvim_create_buf(true, false)
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].undolevels = 1000
  vim.api.nvim_set_current_buf(buf)
  vim.bo[buf].filetype = "chat"
  vim.fn.foldlevel(1)
  vim.wait(200)
  u.buf, u.n = buf, #lines
  u.mid = math.floor(#lines / 2)
  while not lines[u.mid]:match("^Turn ") do
    u.mid = u.mid + 1
  end
  u.k = 0
end

local function teardown_1mb()
  if u.buf and vim.api.nvim_buf_is_valid(u.buf) then
    vim.api.nvim_buf_delete(u.buf, { force = true })
  end
  u = {}
  collectgarbage()
end

-- Keys typed in the middle of the 1 MB chat, timed with what the view does on
-- the next tick (folds of the changed segments, rulers and signs).
local function keys_ms(keys)
  local t0 = vim.uv.hrtime()
  vim.cmd("silent normal! " .. vim.keycode(keys))
  require("flemma.ui.fold").flush(u.buf)
  require("flemma.ui.marks").update(u.buf)
  require("flemma.ui.marks").redraw(u.buf)
  return (vim.uv.hrtime() - t0) / 1e6
end

return {
  {
    name = "view_undo_1mb",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 11,
    setup = setup_1mb,
    run = function()
      -- `u` of a dd in the middle (Neovim folds the undo before on_lines).
      vim.api.nvim_win_set_cursor(0, { u.mid, 0 })
      vim.cmd("silent normal! dd")
      vim.wait(20)
      local ms = keys_ms("u")
      vim.wait(20)
      return ms
    end,
  },
  {
    name = "view_redo_1mb",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 11,
    setup = setup_1mb,
    run = function()
      -- <C-r> of that dd, then `u` again (untimed).
      vim.api.nvim_win_set_cursor(0, { u.mid, 0 })
      local ms = keys_ms("<C-r>")
      vim.wait(20)
      vim.cmd("silent normal! u")
      vim.wait(20)
      return ms
    end,
  },
  {
    name = "view_join_1mb",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 11,
    setup = setup_1mb,
    teardown = teardown_1mb,
    run = function()
      -- J on the line of the middle turn, then `u` (untimed).
      vim.api.nvim_win_set_cursor(0, { u.mid, 0 })
      local ms = keys_ms("J")
      vim.wait(20)
      vim.cmd("silent normal! u")
      vim.wait(20)
      return ms
    end,
  },
  {
    name = "fold_expr_10mb",
    unit = "us/line",
    target = 1.5,
    op = "<=",
    runs = 5,
    setup = setup,
    run = function()
      local fold = require("flemma.ui.fold")
      local n = st.n
      local t0 = vim.uv.hrtime()
      for l = 1, n do
        fold.expr(l)
      end
      return (vim.uv.hrtime() - t0) / 1e3 / n
    end,
    note = function()
      return ("%.1f MB, %d lines; opening it (filetype chat, folds of every line computed by Neovim) took %.0f ms"):format(
        st.info.bytes / 1e6,
        st.n,
        st.open_ms or 0
      )
    end,
  },
  {
    name = "view_screen_10mb",
    unit = "ms",
    target = 1,
    op = "<=",
    runs = 7,
    setup = setup,
    run = function()
      -- 60 lines around the middle, as the decoration provider draws them.
      local hl = require("flemma.ui.highlight")
      st.k = st.k + 1
      local top = st.mid + (st.k % 5) * 300
      local t0 = vim.uv.hrtime()
      for l = top, top + 59 do
        hl.spans(st.buf, l)
      end
      return (vim.uv.hrtime() - t0) / 1e6
    end,
  },
  {
    name = "view_edit_10mb",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 11,
    setup = setup,
    teardown = teardown,
    run = function()
      -- One changed line in the middle and what the view does on the next tick.
      st.k = st.k + 1
      local row = st.mid - 1
      local text = vim.api.nvim_buf_get_lines(st.buf, row, row + 1, false)[1]
      text = st.k % 2 == 0 and text:gsub(" x$", "") or (text .. " x")
      local t0 = vim.uv.hrtime()
      -- The edit itself (Neovim folds the changed line, on_lines feeds the document).
      vim.api.nvim_buf_set_lines(st.buf, row, row + 1, false, { text })
      require("flemma.ui.fold").flush(st.buf)
      require("flemma.ui.marks").update(st.buf)
      require("flemma.ui.marks").redraw(st.buf)
      return (vim.uv.hrtime() - t0) / 1e6
    end,
  },
}
