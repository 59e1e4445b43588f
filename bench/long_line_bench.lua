-- A 10 MB line in an answer: one `write` tool use whose JSON input is a single
-- 10 MB line, streamed from the loopback server (as fast as it can send) with real
-- curl into a small chat. Measured: the longest main-loop gap while it streams and
-- is written (a 1 ms timer's late ticks), until the request has finished.
local server_mod = require("spec.support.llm_server")

local BYTES = 10 * 1024 * 1024
local server, buf
local last = {}

local function setup()
  server = server_mod.start()
  require("flemma").setup({
    provider = "bench",
    providers = { bench = { kind = "anthropic", endpoint = server:url("/v1/messages") } },
    parameters = { max_retries = 0, timeout = 120 },
    tools = { autopilot = { enabled = false } },
  })
  vim.notify = function() end
  buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_buf_set_name(buf, vim.fn.tempname() .. ".chat")
  vim.api.nvim_set_current_buf(buf)
  vim.bo[buf].filetype = "chat"
end

local function teardown()
  if server then
    server:stop()
    server = nil
  end
  if buf and vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_delete(buf, { force = true })
  end
end

local function stream_once()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "Write the big file." })
  collectgarbage()
  server:script({ { synth = { kind = "anthropic_tool", bytes = BYTES, delta = 4000 } } })
  local done
  local group = vim.api.nvim_create_augroup("long_line_bench", { clear = true })
  vim.api.nvim_create_autocmd("User", {
    pattern = "FlemmaRequestFinished",
    group = group,
    callback = function(ev)
      done = ev.data
    end,
  })
  local t0 = vim.uv.hrtime()
  require("flemma.cycle").advance(buf)
  local gap, prev = 0, vim.uv.hrtime()
  local timer = vim.uv.new_timer()
  timer:start(1, 1, function()
    local now = vim.uv.hrtime()
    gap = math.max(gap, (now - prev) / 1e6)
    prev = now
  end)
  vim.wait(120000, function()
    return done ~= nil
  end, 1)
  timer:stop()
  timer:close()
  local total = (vim.uv.hrtime() - t0) / 1e6
  assert(done and done.status == "completed", "the stream did not complete: " .. vim.inspect(done))
  local longest = 0
  for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    longest = math.max(longest, #l)
  end
  assert(longest >= BYTES - 100, "the input is not in the buffer on one line: " .. longest)
  last = { total = total, gap = gap }
  return gap
end

return {
  {
    name = "send_tool_input_10mb_line_gap",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    warmup = 1,
    setup = setup,
    teardown = teardown,
    run = stream_once,
    note = function()
      return ("last total %.0f ms"):format(last.total or -1)
    end,
  },
}
