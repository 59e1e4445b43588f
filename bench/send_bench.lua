-- The streaming send on a large chat: a 5 MB answer streamed from the loopback
-- server (as fast as it can send) into a 10 MB chat, with real curl. Measured: the
-- longest main-loop gap while it streams (a 1 ms timer's late ticks), the total time,
-- and the time from <C-]> to curl started.
local server_mod = require("spec.support.llm_server")

local CHAT_BYTES = 10 * 1024 * 1024
local ANSWER_BYTES = 5 * 1024 * 1024

--- A chat of about `bytes` bytes: turns of prose with tool uses and their results.
local function big_chat(bytes)
  local ok, gen = pcall(require, "bench.support.chat_generator")
  if ok and type(gen) == "table" and type(gen.lines) == "function" then
    return gen.lines(bytes)
  end
  local lines, size, turn = {}, 0, 0
  local prose = "The quick brown fox jumps over the lazy dog while the model explains what it did. "
  while size < bytes do
    turn = turn + 1
    local block = {
      "@You:",
      ("Question %d: %s"):format(turn, prose),
      "",
      "@Assistant:",
    }
    for _ = 1, 40 do
      block[#block + 1] = prose
    end
    vim.list_extend(block, {
      "",
      ("**Tool Use:** `bash` (`toolu_%06d`)"):format(turn),
      "",
      "```json",
      ('{ "command": "ls -la /tmp/dir%d" }'):format(turn),
      "```",
      "",
      "@You:",
      ("**Tool Result:** `toolu_%06d`"):format(turn),
      "",
      "```",
      "total 0",
      "```",
      "",
      "@Assistant:",
      "Done with that step.",
      "",
    })
    for _, l in ipairs(block) do
      size = size + #l + 1
      lines[#lines + 1] = l
    end
  end
  vim.list_extend(lines, { "@You:", "Now write the long answer." })
  return lines
end

-- The chat is kept as its line count and last line once it is in the buffer: its
-- 300,000 line strings held by the bench would make every garbage collection
-- during the stream longer than Flemma's own data does.
local server, buf, base_count, base_last
local loaded = false -- the 10 MB chat is in buf
local last = {}

local function setup()
  server = server_mod.start()
  require("flemma").setup({
    provider = "bench",
    providers = { bench = { kind = "anthropic", endpoint = server:url("/v1/messages") } },
    parameters = { max_retries = 0 },
    tools = { autopilot = { enabled = false } },
  })
  vim.notify = function() end
  loaded = false
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

--- Back to the 10 MB chat: loaded once, later runs remove only what a run added
--- (an edit at the end, as after a real answer), so unchanged messages stay unchanged.
local function reset_buffer(edit)
  if not loaded or vim.api.nvim_buf_line_count(buf) < base_count then
    local lines = big_chat(CHAT_BYTES)
    base_count, base_last = #lines, lines[#lines]
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    lines = nil -- luacheck: ignore
    collectgarbage()
    loaded = true
  else
    vim.api.nvim_buf_set_lines(buf, base_count - 1, -1, false, { edit or base_last })
  end
end

--- One streamed answer; returns total ms and the longest gap in ms.
local function stream_once()
  reset_buffer()
  server:script({ { synth = { kind = "anthropic", bytes = ANSWER_BYTES, delta = 200 } } })
  local done
  local group = vim.api.nvim_create_augroup("send_bench", { clear = true })
  vim.api.nvim_create_autocmd("User", {
    pattern = "FlemmaRequestFinished",
    group = group,
    callback = function(ev)
      done = ev.data
    end,
  })
  local t0 = vim.uv.hrtime()
  require("flemma.cycle").advance(buf)
  -- The gap is measured while the answer streams (the start is send_start_10mb's).
  local gap, prev = 0, vim.uv.hrtime()
  local timer = vim.uv.new_timer()
  timer:start(1, 1, function()
    local now = vim.uv.hrtime()
    gap = math.max(gap, (now - prev) / 1e6)
    prev = now
  end)
  vim.wait(30000, function()
    return done ~= nil
  end, 1)
  local total = (vim.uv.hrtime() - t0) / 1e6
  timer:stop()
  timer:close()
  assert(done and done.status == "completed", "the stream did not complete: " .. vim.inspect(done))
  local n = vim.api.nvim_buf_line_count(buf)
  assert(n > base_count + ANSWER_BYTES / 200 * 0.9, "the answer is not in the buffer")
  last = { total = total, gap = gap }
  return total, gap
end

-- An endless stream (a hostile or broken server sending as fast as it can):
-- the longest main-loop gap from <C-c> until the request finished.
local ENDLESS = {
  gen = {
    head = 'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","model":"claude-sonnet-4-6",'
      .. '"usage":{"input_tokens":10}}}\n\nevent: content_block_start\ndata: {"type":"content_block_start","index":0,'
      .. '"content_block":{"type":"text","text":""}}\n\n',
    piece = 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
      .. '"text":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor\\n"}}\n\n',
  },
}

local function cancel_endless_once()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "Go on forever." })
  server:script({ ENDLESS })
  local done
  local group = vim.api.nvim_create_augroup("send_bench", { clear = true })
  vim.api.nvim_create_autocmd("User", {
    pattern = "FlemmaRequestFinished",
    group = group,
    callback = function(ev)
      done = ev.data
    end,
  })
  require("flemma.cycle").advance(buf)
  -- Two seconds of the stream first.
  vim.wait(2000, function()
    return done ~= nil
  end, 5)
  assert(done == nil, "the endless stream ended: " .. vim.inspect(done))
  local gap, prev = 0, vim.uv.hrtime()
  local timer = vim.uv.new_timer()
  timer:start(1, 1, function()
    local now = vim.uv.hrtime()
    gap = math.max(gap, (now - prev) / 1e6)
    prev = now
  end)
  require("flemma.cycle.send").cancel(buf)
  vim.wait(5000, function()
    return done ~= nil
  end, 1)
  timer:stop()
  timer:close()
  assert(done and done.status == "cancelled", "the cancel did not end the request: " .. vim.inspect(done))
  return gap
end

return {
  {
    name = "send_cancel_endless_gap",
    unit = "ms",
    target = 50,
    op = "<=",
    runs = 5,
    warmup = 1,
    setup = function()
      setup()
      require("flemma").setup({
        provider = "bench",
        providers = { bench = { kind = "anthropic", endpoint = server:url("/v1/messages") } },
        parameters = { max_retries = 0, max_response_bytes = 1024 * 1024 * 1024 },
        tools = { autopilot = { enabled = false } },
      })
    end,
    teardown = teardown,
    run = cancel_endless_once,
  },
  {
    name = "send_stream_5mb_into_10mb_gap",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    warmup = 1,
    setup = setup,
    teardown = teardown,
    run = function()
      local _, gap = stream_once()
      return gap
    end,
    note = function()
      return ("last total %.0f ms"):format(last.total or -1)
    end,
  },
  {
    name = "send_stream_5mb_into_10mb_total",
    unit = "ms",
    target = 1500,
    op = "<=",
    runs = 3,
    warmup = 0,
    setup = setup,
    teardown = teardown,
    run = function()
      local total = stream_once()
      return total
    end,
  },
  {
    name = "send_start_10mb",
    unit = "ms",
    target = 100,
    op = "<=",
    runs = 5,
    warmup = 1,
    setup = setup,
    teardown = teardown,
    run = function()
      -- The user typed under the last @You: (a real edit at the end of the chat).
      reset_buffer("Now write the long answer, edit " .. tostring(vim.uv.hrtime()))
      server:script({ { fixture = "anthropic_text.sse", delay_ms = 50 } })
      local t0 = vim.uv.hrtime()
      require("flemma.cycle").advance(buf)
      local ms = (vim.uv.hrtime() - t0) / 1e6
      local active = require("flemma.provider").active(buf)
      assert(active and active.pid, "curl was not started")
      require("flemma.cycle.send").cancel(buf)
      vim.wait(2000, function()
        return not require("flemma.provider").is_active(buf)
      end, 5)
      return ms
    end,
  },
}
