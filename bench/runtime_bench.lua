-- The native runtime: streaming a large output through a child, truncation speed,
-- spawn cost and cancel of a group. Outputs are numbered distinct lines (seq).
local process = require("flemma.core.process")
local truncate = require("flemma.core.truncate")

-- seq 1 24000000 writes about 200 MB (208,888,897 bytes).
local STREAM_N = 24000000

local function wait(pred, ms)
  assert(vim.wait(ms or 60000, pred, 1), "benchmark timed out")
end

local function rss_kb()
  local f = assert(io.open("/proc/self/status"))
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

-- One streaming run: wall time from spawn to the result in Lua, the longest gap
-- of a 5 ms timer meanwhile, and the peak growth of resident memory.
local function stream_once()
  local timer = vim.uv.new_timer()
  local last = vim.uv.hrtime()
  local max_gap = 0
  local base = rss_kb()
  local peak = base
  timer:start(5, 5, function()
    local now = vim.uv.hrtime()
    local gap = (now - last) / 1e6
    if gap > max_gap then
      max_gap = gap
    end
    last = now
    local r = rss_kb()
    if r > peak then
      peak = r
    end
  end)
  local t0 = vim.uv.hrtime()
  local result
  process.spawn({ cmd = { "seq", "1", tostring(STREAM_N) } }, function(r)
    result = r
  end)
  wait(function()
    return result ~= nil
  end)
  local elapsed = (vim.uv.hrtime() - t0) / 1e6
  timer:stop()
  timer:close()
  assert(result.code == 0 and result.total_lines == STREAM_N, "stream run failed")
  assert(result.output:sub(-9) == tostring(STREAM_N) .. "\n")
  os.remove(result.full_output_path)
  return { ms = elapsed, gap = max_gap, rss_mb = (peak - base) / 1024 }
end

local function devnull_ms()
  local t0 = vim.uv.hrtime()
  local r = vim.system({ "bash", "-c", "seq 1 " .. STREAM_N .. " > /dev/null" }):wait()
  assert(r.code == 0)
  return (vim.uv.hrtime() - t0) / 1e6
end

local big -- 100 MB of numbered lines for truncate_tail
local SPAWNS = 60

local function alive_in_group(pgid)
  local n = 0
  for _, name in ipairs(vim.fn.readdir("/proc")) do
    if name:match("^%d+$") then
      local f = io.open("/proc/" .. name .. "/stat")
      if f then
        local stat = f:read("*a") or ""
        f:close()
        local state, pgrp = stat:match("%) (%S) %d+ (%d+)")
        if tonumber(pgrp) == pgid and state ~= "Z" then
          n = n + 1
        end
      end
    end
  end
  return n
end

return {
  {
    name = "stream_200mb_loop_gap",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    warmup = 1,
    run = function()
      return stream_once().gap
    end,
  },
  {
    name = "stream_200mb_rss_growth",
    unit = "MB",
    target = 64,
    op = "<=",
    runs = 3,
    -- No warm-up: the first stream of a fresh Neovim (library load, worker thread,
    -- buffers) counts too.
    warmup = 0,
    run = function()
      return stream_once().rss_mb
    end,
  },
  {
    name = "stream_200mb_vs_devnull",
    unit = "x",
    target = 3,
    op = "<=",
    runs = 3,
    warmup = 1,
    run = function()
      local base = devnull_ms()
      return stream_once().ms / base
    end,
  },
  {
    name = "truncate_tail_100mb",
    unit = "GB/s",
    target = 2,
    op = ">=",
    runs = 7,
    setup = function()
      local p = assert(io.popen("seq 1 12500000"))
      local s = p:read("*a")
      p:close()
      -- about 101 MB; cut to 100 MB at a line end
      big = s:sub(1, s:sub(1, 100 * 1000 * 1000):match(".*()\n"))
      assert(#big > 99 * 1000 * 1000 and #big <= 100 * 1000 * 1000)
    end,
    teardown = function()
      big = nil
      collectgarbage()
    end,
    run = function()
      local t0 = vim.uv.hrtime()
      local r = truncate.truncate_tail(big)
      local s = (vim.uv.hrtime() - t0) / 1e9
      assert(r.truncated and r.output_lines == 2000)
      return #big / s / 1e9
    end,
  },
  {
    name = "spawn_true_vs_vim_system",
    unit = "x",
    target = 1.5,
    op = "<=",
    runs = 5,
    run = function()
      local t0 = vim.uv.hrtime()
      for _ = 1, SPAWNS do
        local done = false
        process.spawn({ cmd = { "true" } }, function()
          done = true
        end)
        wait(function()
          return done
        end)
      end
      local ours = vim.uv.hrtime() - t0
      t0 = vim.uv.hrtime()
      for _ = 1, SPAWNS do
        local done = false
        vim.system({ "true" }, {}, function()
          done = true
        end)
        wait(function()
          return done
        end)
      end
      local theirs = vim.uv.hrtime() - t0
      return ours / theirs
    end,
  },
  {
    name = "cancel_background_children",
    unit = "ms",
    target = 3000,
    op = "<=",
    runs = 5,
    run = function()
      local done = false
      local h = process.spawn({ cmd = { "bash", "-c", "sleep 100 & sleep 100 & wait" } }, function()
        done = true
      end)
      wait(function()
        return alive_in_group(h.pid) == 4 -- the reaper, bash and two sleeps
      end, 5000)
      local t0 = vim.uv.hrtime()
      h:cancel()
      wait(function()
        return alive_in_group(h.pid) == 0
      end, 10000)
      local ms = (vim.uv.hrtime() - t0) / 1e6
      wait(function()
        return done
      end)
      return ms
    end,
  },
}
