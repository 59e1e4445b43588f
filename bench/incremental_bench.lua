-- Long chats stay instant: the cost of editing a chat buffer on the main loop.
-- Blocking time = the longest interval between ticks of a 1 ms vim.uv timer,
-- minus its 1 ms period, over an edit, its TextChanged and everything deferred
-- within 400 ms of it. The chats come from bench/chat_gen.lua.
local gen = dofile(_G.FLEMMA_ROOT .. "/bench/chat_gen.lua")
local ffi = require("ffi")

local H = {}

ffi.cdef([[
  struct flemma_bench_timespec { long tv_sec; long tv_nsec; };
  int clock_gettime(int clk, struct flemma_bench_timespec *ts);
]])
local CLOCK_THREAD_CPUTIME_ID = 3
local ts = ffi.new("struct flemma_bench_timespec")

-- CPU time of the calling (main) thread, in ms: what the main loop spent,
-- whatever else the machine's other processes did meanwhile.
function H.thread_cpu()
  assert(ffi.C.clock_gettime(CLOCK_THREAD_CPUTIME_ID, ts) == 0)
  return tonumber(ts.tv_sec) * 1e3 + tonumber(ts.tv_nsec) / 1e6
end

-- Runs `action` on the main loop while a 1 ms timer ticks, for window_ms.
-- Returns the longest blocking (gap - 1 ms), the sum of all blocking (which
-- counts the timer's own lateness: most of a second over 5 s of an idle
-- Neovim here), the main thread's CPU time and the wall time from the action's
-- start to the end of the window (ms), and the most CPU time the main thread
-- used between two ticks (what the work itself held the loop, without the
-- machine's scheduling: a late wake-up uses none).
function H.measure(action, window_ms, settle)
  local timer = vim.uv.new_timer()
  local last, last_cpu = vim.uv.hrtime(), H.thread_cpu()
  local max_gap, busy, max_cpu = 0, 0, 0
  timer:start(1, 1, function()
    local now, cpu_now = vim.uv.hrtime(), H.thread_cpu()
    local gap = (now - last) / 1e6
    last = now
    if gap > max_gap then
      max_gap = gap
      H.max_at = H.progress
    end
    if gap > 1 then
      busy = busy + gap - 1
    end
    if cpu_now - last_cpu > max_cpu then
      max_cpu = cpu_now - last_cpu
    end
    last_cpu = cpu_now
  end)
  vim.wait(settle or 30)
  max_gap, busy, max_cpu, last, last_cpu = 0, 0, 0, vim.uv.hrtime(), H.thread_cpu()
  local cpu0, wall0 = H.thread_cpu(), last
  local done = false
  vim.schedule(function()
    local ok, err = xpcall(action, debug.traceback, function()
      done = true
    end)
    if not ok then
      done = true
      error(err, 0)
    end
  end)
  vim.wait(60000, function()
    return done
  end, 1)
  vim.wait(window_ms)
  local cpu, wall = H.thread_cpu() - cpu0, (vim.uv.hrtime() - wall0) / 1e6
  timer:stop()
  timer:close()
  return math.max(0, max_gap - 1), busy, cpu, wall, max_cpu
end

-- The same measurement with nothing to do (median of 5): what the machine's
-- own scheduling adds to every blocking time (large on a shared VM).
function H.idle_blocking()
  local xs = {}
  for i = 1, 5 do
    xs[i] = H.measure(function(done)
      done()
    end, 400)
  end
  table.sort(xs)
  return xs[3]
end

-- The middle value of xs (the lower of the two middle ones), 0 for none.
function H.median(xs)
  local s = vim.deepcopy(xs)
  table.sort(s)
  return s[math.ceil(#s / 2)] or 0
end

-- Wall time of fn, in ms.
function H.time(fn)
  local t0 = vim.uv.hrtime()
  fn()
  return (vim.uv.hrtime() - t0) / 1e6
end

function H.chat_buffer(lines)
  require("flemma").setup({})
  local buf = vim.api.nvim_create_buf(true, false)
  vim.bo[buf].undolevels = -1 -- loading is not an undoable change
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].undolevels = 1000
  vim.bo[buf].modified = false
  vim.api.nvim_set_current_buf(buf)
  vim.bo[buf].filetype = "chat"
  require("flemma.ui.keymaps").attach(buf)
  vim.wait(500) -- first parse and previews, off the measurement
  return buf
end

function H.wipe(buf)
  if buf and vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_delete(buf, { force = true })
  end
  collectgarbage()
end

-- 11 normal-mode edits (x, dd, p, u) at different places in the middle third
-- of the chat, on prose, tool input and result lines.
function H.edit_case(name, bytes, target, worst)
  local st = {}
  local kinds = { "x", "dd", "p", "u" }
  local case = {
    name = name,
    unit = "ms",
    target = target,
    op = "<=",
    runs = worst and 1 or 11,
    warmup = worst and 0 or 4, -- one of each edit: JIT traces of each path recorded before the measured runs
    setup = function()
      local lines, info = gen.generate(bytes)
      st.info, st.n = info, #lines
      st.buf = H.chat_buffer(lines)
      st.treesitter = vim.treesitter.highlighter.active[st.buf] ~= nil
      st.targets = {}
      local lo, hi = math.floor(#lines * 0.35), math.floor(#lines * 0.65)
      local step = math.floor((hi - lo) / 13)
      for k = 1, 12 do
        local l = lo + k * step
        while not lines[l]:match("^Turn ") and not lines[l]:match("^{") and not lines[l]:match("^src/") do
          l = l + 1
        end
        st.targets[k] = l
      end
      st.i = 0
      -- The generated lines (300,000 Lua strings for 10 MB) are this bench's own
      -- garbage, which a chat read from a file never makes: collected before the
      -- measurements, so that no edit pays for sweeping them.
      lines = nil -- luacheck: ignore 311
      collectgarbage()
      st.idle = H.idle_blocking()
      st.work, st.cpu = {}, {}
    end,
    teardown = function()
      H.wipe(st.buf)
    end,
    run = function()
      if worst then
        -- Four edits to warm up, then the longest blocking of sixteen.
        local most = 0
        for k = 1, 20 do
          local b = st.edit()
          most = k > 4 and math.max(most, b) or most
        end
        return most
      end
      return st.edit()
    end,
    note = function()
      local size = st.info.bytes >= 1e6 and ("%.1f MB"):format(st.info.bytes / 1e6)
        or ("%.0f KB"):format(st.info.bytes / 1e3)
      return ("%s, %d lines, %d tool uses%s; edits x, dd, p, u in the middle third; the edit and its TextChanged take %.2f ms (median, deferred work not included); the most main-thread CPU time between two ticks %.2f ms (median: the work, without the machine's late wake-ups); idle blocking on this machine %.2f ms"):format(
        size,
        st.n,
        st.info.tools,
        st.treesitter and ", highlighted by tree-sitter" or ", Vim's syntax",
        H.median(st.work),
        H.median(st.cpu),
        st.idle or 0
      )
    end,
  }
  function st.edit()
    st.i = st.i + 1
    local line = st.targets[(st.i - 1) % #st.targets + 1]
    local kind = kinds[(st.i - 1) % #kinds + 1]
    local blocking, _, _, _, max_cpu = H.measure(function(done)
      -- Each edit is its own undo step, as when typed (edits made from Lua
      -- callbacks would otherwise join one undo block, and `u` would undo
      -- every edit since the last one, far apart).
      vim.bo[st.buf].undolevels = vim.bo[st.buf].undolevels
      st.work[#st.work + 1] = H.time(function()
        vim.api.nvim_win_set_cursor(0, { line, 3 })
        vim.cmd("silent normal! " .. kind)
        vim.api.nvim_exec_autocmds("TextChanged", { buffer = st.buf, modeline = false })
      end)
      done()
    end, 400)
    st.cpu[#st.cpu + 1] = max_cpu
    return blocking
  end
  return case
end

-- Streaming: small chunks appended at the end of the chat, one per 1 ms tick,
-- each followed by TextChanged: prose with a code block now and then.
function H.chunks(n)
  local out = {}
  local words = { "the ", "model ", "writes ", "a ", "long ", "answer ", "about ", "fences ", "and ", "tools. " }
  local in_code = false
  for i = 1, n do
    if i % 250 == 0 then
      in_code = not in_code
      out[i] = in_code and "\n\n```lua\n" or "\n```\n\n"
    elseif i % 7 == 0 then
      out[i] = in_code and ("\nlocal x_%d = %d"):format(i, i) or ("\n%d "):format(i)
    else
      out[i] = words[i % #words + 1]
    end
  end
  return out
end

local append = { totals = {}, blockings = {} }
local APPEND_N = tonumber(os.getenv("APPEND_CHUNKS") or "") or 5000

function H.append_once(buf)
  vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "", "@Assistant:", "" })
  vim.api.nvim_exec_autocmds("TextChanged", { buffer = buf, modeline = false })
  vim.wait(100)
  local chunks = H.chunks(APPEND_N)
  local edit_ms = 0
  local blocking, busy, cpu, wall = H.measure(function(done)
    local i = 0
    local feeder = vim.uv.new_timer()
    feeder:start(1, 1, function()
      vim.schedule(function()
        i = i + 1
        if i > #chunks then
          if not feeder:is_closing() then
            feeder:stop()
            feeder:close()
            done()
          end
          return
        end
        H.progress = i
        local t0 = vim.uv.hrtime()
        local last = vim.api.nvim_buf_line_count(buf)
        local col = #vim.api.nvim_buf_get_lines(buf, last - 1, last, false)[1]
        vim.api.nvim_buf_set_text(buf, last - 1, col, last - 1, col, vim.split(chunks[i], "\n", { plain = true }))
        vim.api.nvim_exec_autocmds("TextChanged", { buffer = buf, modeline = false })
        edit_ms = edit_ms + (vim.uv.hrtime() - t0) / 1e6
      end)
    end)
  end, 400)
  H.progress = nil
  local stats = { edit_ms = edit_ms, max_at = H.max_at, busy = busy, cpu = cpu, wall = wall }
  return blocking, cpu - append.idle_rate * wall, stats
end

-- The same stream into the same text in a buffer that is not a chat (no Flemma):
-- what Neovim itself (set_text, TextChanged, matchparen) and this bench's driving
-- cost, for the note.
function H.plain_floor(lines)
  local chat = vim.api.nvim_get_current_buf()
  local buf = vim.api.nvim_create_buf(true, false)
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].undolevels = 1000
  vim.api.nvim_set_current_buf(buf)
  vim.wait(100)
  local blocking, total = H.append_once(buf)
  vim.api.nvim_set_current_buf(chat)
  H.wipe(buf)
  return total * (5000 / APPEND_N), blocking
end

-- The main thread's CPU time per ms of an idle Neovim with the 1 ms timer
-- ticking (median of 3 seconds): subtracted from the stream's, so that the
-- total counts what the chunks cost, not the measuring timer.
function H.idle_cpu_rate()
  local xs = {}
  for i = 1, 3 do
    local _, busy, cpu, wall = H.measure(function(done)
      done()
    end, 1000)
    xs[i] = { cpu / wall, busy / wall }
  end
  table.sort(xs, function(a, b)
    return a[1] < b[1]
  end)
  return xs[2][1], xs[2][2]
end

local cases = {
  H.edit_case("edit_10mb_blocking", 10 * 1000 * 1000, 2),
  H.edit_case("edit_1mb_blocking", 1000 * 1000, 1),
  -- The longest of sixteen edits, not their median: one edit in four (a line deleted
  -- or put) made tree-sitter parse a 1 MB chat again, 250-370 ms each.
  H.edit_case("edit_1mb_worst_blocking", 1000 * 1000, 16, true),
  -- The largest chat tree-sitter highlights by default (ui.treesitter_max_bytes): its
  -- longest edit within two frames. What an edit costs depends on where it is (0.6 to
  -- 18.5 ms over runs at 31 KB, 13 to 18 ms at 22 KB): tree-sitter's markdown parser
  -- reads again all that the edit may change.
  H.edit_case("edit_treesitter_max_worst_blocking", 30 * 1000, 33, true),
  {
    name = "append_10mb_total",
    unit = "ms",
    target = 500,
    op = "<=",
    runs = 5, -- medians of 5 streams: their CPU time varies by a third from run to run here
    warmup = 0,
    setup = function()
      local lines, info = gen.generate(10 * 1000 * 1000)
      append.info = info
      append.buf = H.chat_buffer(lines)
      append.i = 0
      append.idle = H.idle_blocking()
      append.idle_rate, append.idle_busy_rate = H.idle_cpu_rate()
      append.floor, append.floor_blocking = H.plain_floor(lines)
      lines = nil -- luacheck: ignore 311 (the bench's own garbage: see H.edit_case)
      collectgarbage()
    end,
    run = function()
      local n0 = vim.api.nvim_buf_line_count(append.buf)
      local blocking, total, stats = H.append_once(append.buf)
      append.stats = stats
      append.blockings[#append.blockings + 1] = blocking
      append.totals[#append.totals + 1] = total
      -- Back to the generated chat for the next run.
      vim.api.nvim_buf_set_lines(append.buf, n0, -1, false, {})
      vim.api.nvim_exec_autocmds("TextChanged", { buffer = append.buf, modeline = false })
      vim.wait(100)
      return total * (5000 / APPEND_N)
    end,
    note = function()
      local st = append.stats or {}
      return ("%d chunks at 1 ms; main-thread CPU time over the stream and 400 ms after, less an idle Neovim's (%.0f ms of CPU in %.0f ms, idle %.3f ms/ms; last run); the same stream into a buffer that is not a chat %.0f ms; in the edit callbacks (set_text, on_lines, TextChanged) %.0f ms; timer lateness summed %.0f ms (idle: %.0f ms over as long); longest blocking %.1f ms (median; last run after chunk %s); idle blocking on this machine %.2f ms"):format(
        APPEND_N,
        st.cpu or 0,
        st.wall or 0,
        append.idle_rate or 0,
        append.floor or 0,
        st.edit_ms or 0,
        st.busy or 0,
        (append.idle_busy_rate or 0) * (st.wall or 0),
        H.median(append.blockings),
        tostring(st.max_at),
        append.idle or 0
      )
    end,
  },
  {
    name = "append_10mb_blocking",
    unit = "ms",
    target = 8,
    op = "<=",
    runs = 5,
    warmup = 0,
    run = function()
      append.i = (append.i or 0) + 1
      return assert(
        append.blockings[append.i],
        "append_10mb_total runs first: run `make bench` or BENCH='append_10mb_total append_10mb_blocking'"
      )
    end,
    teardown = function()
      H.wipe(append.buf)
    end,
    note = function()
      return ("longest blocking during the runs of append_10mb_total; the same stream into a buffer that is not a chat: %.1f ms (one run: what this machine and Neovim alone give over as long)"):format(
        append.floor_blocking or 0
      )
    end,
  },
}

-- document.get() after one edit in the middle third of the 10 MB chat (what a
-- send, the cycle or the validation shown after a refused send reads): the
-- messages the edit touched are built again, the others kept. `x` leaves the
-- line count as it was; `dd` moves the line numbers of every message below
-- (plain fields of the model, CONTRACT §3), so its cost grows with them.
function H.get_case(name, kind, target)
  local st = {}
  return {
    name = name,
    unit = "ms",
    target = target,
    op = "<=",
    runs = 11,
    warmup = 2,
    setup = function()
      local lines, info = gen.generate(10 * 1000 * 1000)
      st.info, st.n = info, #lines
      st.buf = H.chat_buffer(lines)
      lines = nil -- luacheck: ignore 311 (the bench's own garbage: see H.edit_case)
      collectgarbage()
      require("flemma.chat.document").get(st.buf)
      st.i, st.below = 0, {}
    end,
    teardown = function()
      H.wipe(st.buf)
    end,
    run = function()
      st.i = st.i + 1
      local row = math.floor(st.n * (0.35 + 0.3 * ((st.i * 7) % 13) / 13))
      vim.bo[st.buf].undolevels = vim.bo[st.buf].undolevels
      vim.api.nvim_win_set_cursor(0, { row, 0 })
      vim.cmd("silent normal! " .. kind)
      local document = require("flemma.chat.document")
      local doc
      local ms = H.time(function()
        doc = document.get(st.buf)
      end)
      local below = 0
      for k = #doc.messages, 1, -1 do
        if doc.messages[k].first_line <= row then
          break
        end
        below = below + 1
      end
      st.below[#st.below + 1] = below
      vim.cmd("silent normal! u") -- the chat as generated for the next run
      document.get(st.buf)
      return ms
    end,
    note = function()
      return ("%.1f MB, %d lines; `%s` in the middle third, then document.get(); messages below the edit: %d (median)"):format(
        st.info.bytes / 1e6,
        st.n,
        kind,
        H.median(st.below)
      )
    end,
  }
end

cases[#cases + 1] = H.get_case("get_10mb_after_x", "x", 0.5)
cases[#cases + 1] = H.get_case("get_10mb_after_dd", "dd", 5)

-- Opening the 10 MB chat from disk: from BufReadPre to the first tool preview.
local open = {}
cases[#cases + 1] = {
  name = "open_10mb_first_preview",
  unit = "ms",
  target = 100,
  op = "<=",
  runs = 5,
  warmup = 1,
  setup = function()
    require("flemma").setup({})
    local lines = gen.generate(10 * 1000 * 1000)
    open.path = vim.fn.tempname() .. ".chat"
    gen.write(open.path, lines)
  end,
  teardown = function()
    os.remove(open.path)
  end,
  run = function()
    local t0
    local au = vim.api.nvim_create_autocmd("BufReadPre", {
      pattern = "*.chat",
      once = true,
      callback = function()
        t0 = vim.uv.hrtime()
      end,
    })
    vim.cmd("edit " .. vim.fn.fnameescape(open.path))
    local buf = vim.api.nvim_get_current_buf()
    local preview = require("flemma.ui.preview")
    local ok = vim.wait(5000, function()
      return #preview.shown(buf) > 0
    end, 1)
    local ms = (vim.uv.hrtime() - t0) / 1e6
    pcall(vim.api.nvim_del_autocmd, au)
    assert(ok, "no preview after opening the chat")
    vim.cmd("enew")
    H.wipe(buf)
    return ms
  end,
}

return cases
