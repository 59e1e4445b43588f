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

-- The text of the closed fold of a tool use whose input is one 10 MB line (what
-- Neovim asks for on every redraw of that fold): read from a prefix of the line. It
-- took 331 ms when the preview trimmed the whole line; what is left is mostly
-- Neovim's own nvim_buf_get_text of a prefix of that line (2-4 ms at load 10).
local fold_buf, fold_line
local function fold_setup()
  require("flemma").setup({ tools = { autopilot = { enabled = false } } })
  fold_buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_buf_set_name(fold_buf, vim.fn.tempname() .. ".chat")
  vim.api.nvim_set_current_buf(fold_buf)
  vim.bo[fold_buf].filetype = "chat"
  local input = '{"path":"big.txt","content":"' .. string.rep("x", BYTES) .. '"}'
  vim.api.nvim_buf_set_lines(fold_buf, 0, -1, false, {
    "@You:",
    "Write it.",
    "",
    "@Assistant:",
    "**Tool Use:** `write` (`toolu_big`)",
    "",
    "```json",
    input,
    "```",
  })
  fold_line = 5
  vim.wait(200)
  local text = require("flemma.ui.fold").describe(fold_buf, fold_line, 9)
  assert(text:find("Tool Use: write", 1, true), "no fold text of the tool use: " .. tostring(text))
end

local function fold_text_once()
  local fold = require("flemma.ui.fold")
  local t0 = vim.uv.hrtime()
  for _ = 1, 10 do
    fold.describe(fold_buf, fold_line, 9)
  end
  return (vim.uv.hrtime() - t0) / 1e6 / 10
end

local function fold_teardown()
  if fold_buf and vim.api.nvim_buf_is_valid(fold_buf) then
    vim.api.nvim_buf_delete(fold_buf, { force = true })
  end
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
  {
    name = "fold_text_10mb_line",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 5,
    warmup = 1,
    setup = fold_setup,
    teardown = fold_teardown,
    run = fold_text_once,
  },
}
