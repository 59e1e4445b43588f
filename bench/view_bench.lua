-- Reading a 10 MB chat (bench/chat_gen.lua) in a window: what folds and
-- highlights cost. The fold expression over every line in order (what Neovim
-- asks when it computes the folds; its own cost of calling into Lua comes on
-- top), the highlights of one screen, and the work one edit in the middle
-- leaves for the next tick (folds of the changed segments, rulers and signs);
-- `u`, <C-r> and J in the middle of a 1 MB chat (Neovim folds those before the
-- document hears of them). Folding is turned on for these sizes
-- (ui.fold_max_bytes raised): the default folds chats up to 1 MB.
local gen = dofile(_G.FLEMMA_ROOT .. "/bench/chat_gen.lua")

-- A generated chat of `bytes` in a new buffer, the current one, with filetype chat
-- (folded: ui.fold_max_bytes raised) and the folds of every line computed: its
-- buffer, line count, generator info, the line of the first turn from the middle on,
-- and how long opening it took.
local function open_chat(bytes)
  require("flemma").setup({ ui = { fold_max_bytes = 64 * 1024 * 1024 } }) -- folded (the default folds chats up to 1 MB)
  local lines, info = gen.generate(bytes)
  local buf = vim.api.nvim_create_buf(true, false)
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].undolevels = 1000
  vim.api.nvim_set_current_buf(buf)
  local t0 = vim.uv.hrtime()
  vim.bo[buf].filetype = "chat" -- ftplugin: folds computed for every line once
  vim.fn.foldlevel(1)
  local open_ms = (vim.uv.hrtime() - t0) / 1e6
  vim.wait(200)
  local mid = math.floor(#lines / 2)
  while not lines[mid]:match("^Turn ") do
    mid = mid + 1
  end
  return { buf = buf, n = #lines, info = info, mid = mid, open_ms = open_ms, k = 0 }
end

local function close_chat(chat)
  if chat.buf and vim.api.nvim_buf_is_valid(chat.buf) then
    vim.api.nvim_buf_delete(chat.buf, { force = true })
  end
  collectgarbage()
end

-- The 10 MB chat.
local st = {}

local function setup()
  if not st.buf then
    st = open_chat(10 * 1024 * 1024)
  end
end

local function teardown()
  close_chat(st)
  st = {}
end

-- A 1 MB chat for the undo benchmarks (undo, redo and J in the middle).
local u = {}

local function setup_1mb()
  if not u.buf then
    u = open_chat(1024 * 1024)
  end
end

local function teardown_1mb()
  close_chat(u)
  u = {}
end

-- What the view does on the next tick after a change: folds of the changed
-- segments, rulers and signs.
local function next_tick(buf)
  require("flemma.ui.fold").flush(buf)
  require("flemma.ui.marks").update(buf)
  require("flemma.ui.marks").redraw(buf)
end

-- A benchmark of keys typed on the middle turn's line of the 1 MB chat, timed with
-- the view's next-tick work: `before` untimed ahead of them, `after` untimed behind
-- them (to undo them), each followed by 20 ms of the event loop.
local function keys_case(name, before, keys, after, teardown_fn)
  return {
    name = name,
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 11,
    setup = setup_1mb,
    teardown = teardown_fn,
    run = function()
      vim.api.nvim_win_set_cursor(0, { u.mid, 0 })
      if before then
        vim.cmd("silent normal! " .. before)
        vim.wait(20)
      end
      local t0 = vim.uv.hrtime()
      vim.cmd("silent normal! " .. vim.keycode(keys))
      next_tick(u.buf)
      local ms = (vim.uv.hrtime() - t0) / 1e6
      vim.wait(20)
      if after then
        vim.cmd("silent normal! " .. after)
        vim.wait(20)
      end
      return ms
    end,
  }
end

return {
  -- `u` of a dd in the middle (Neovim folds the undo before on_lines).
  keys_case("view_undo_1mb", "dd", "u"),
  -- <C-r> of that dd, then `u` again.
  keys_case("view_redo_1mb", nil, "<C-r>", "u"),
  -- J on the line of the middle turn, then `u`.
  keys_case("view_join_1mb", nil, "J", "u", teardown_1mb),
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
      next_tick(st.buf)
      return (vim.uv.hrtime() - t0) / 1e6
    end,
  },
}
