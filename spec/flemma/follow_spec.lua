-- Issue 24 §8: the answer arrived out of sight. A window that showed the end of the
-- chat when the request started follows the streamed text; one scrolled away stays
-- and a message says where the answer is. The statusline shows a request or a tool
-- starting and ending at once, not on the next cursor move. Neovim in tmux (80x24),
-- the loopback server streaming slowly, the screen read back.
local helpers = require("spec.support.helpers")

--- An Anthropic text stream of `n` lines "answer line i", then "THE END".
local function lines_stream(n)
  local ev = {}
  local function add(name, data)
    ev[#ev + 1] = "event: " .. name .. "\ndata: " .. vim.json.encode(data) .. "\n\n"
  end
  add("message_start", {
    type = "message_start",
    message = {
      id = "msg_1",
      type = "message",
      role = "assistant",
      model = "claude-sonnet-4-6",
      content = {},
      usage = { input_tokens = 10, output_tokens = 1 },
    },
  })
  add("content_block_start", { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } })
  for i = 1, n do
    add("content_block_delta", {
      type = "content_block_delta",
      index = 0,
      delta = { type = "text_delta", text = ("answer line %d\n"):format(i) },
    })
  end
  add(
    "content_block_delta",
    { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = "THE END" } }
  )
  add("content_block_stop", { type = "content_block_stop", index = 0 })
  add("message_delta", { type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 20 } })
  add("message_stop", { type = "message_stop" })
  return table.concat(ev)
end

describe("the answer", function()
  local child, server
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    if server then
      server:stop()
      server = nil
    end
    helpers.cleanup()
  end)

  local function start(cursor_keys, question_lines)
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    server = require("spec.support.llm_server").start()
    local dir = helpers.tmpdir()
    local file = dir .. "/follow.chat"
    local text = { "@You:", "Tell me a long story." }
    for i = 1, question_lines or 50 do
      text[#text + 1] = ("question line %d"):format(i)
    end
    helpers.write_file(file, table.concat(text, "\n") .. "\n")
    local init = dir .. "/init.lua"
    helpers.write_file(
      init,
      ([[
        vim.opt.rtp:prepend(%q)
        vim.cmd("runtime! plugin/flemma.lua")
        vim.env.FLEMMA_SPEC_KEY = "sk-follow-spec"
        require("flemma").setup({
          provider = "test",
          providers = { test = { kind = "anthropic", endpoint = %q, api_key_env = "FLEMMA_SPEC_KEY" } },
          parameters = { max_retries = 0, cache_retention = "none" },
          tools = { autopilot = { enabled = false }, auto_approve = { "bash" } },
        })
        vim.o.laststatus = 2
        vim.o.statusline = "[%%{get(b:,'flemma_status','-')}] %%{v:lua.require'flemma'.statusline()}"
      ]]):format(helpers.root, server:url("/v1/messages"))
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-follow-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 80,
      height = 24,
    })
    child.wait_screen("question line 1")
    child.tmux({ "send-keys", "-t", "flemma", cursor_keys })
  end

  it("is followed by a window that showed the end of the chat", function()
    start("G")
    child.wait_screen("question line 50")
    server:script({
      { body = lines_stream(60), content_type = "text/event-stream", chunk_seed = 1, max_chunk = 200, delay_ms = 20 },
    })
    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    -- Midway, the latest text is in view.
    child.wait_screen("answer line 30", 8000)
    local s = child.wait_screen("THE END", 8000)
    assert.is_nil(s:find("question line 50", 1, true), s)
    -- The request ended: the statusline says so without a key pressed.
    local ok = vim.wait(3000, function()
      s = child.screen()
      return s:find("[-] test", 1, true) ~= nil and not s:find("sending", 1, true)
    end, 50)
    assert.is_true(ok, "the statusline still shows the request:\n" .. s)
  end)

  it("leaves a window scrolled away where it is, and says where the answer is", function()
    start("gg")
    server:script({
      { body = lines_stream(60), content_type = "text/event-stream", chunk_seed = 1, max_chunk = 200, delay_ms = 20 },
    })
    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    local s = child.wait_screen("(flemma) the answer streams in below line 52: G goes there")
    -- Wait until the request is over (the statusline), then check the view stayed.
    local ok = vim.wait(10000, function()
      s = child.screen()
      return s:find("[-] test", 1, true) ~= nil and not s:find("sending", 1, true)
    end, 50)
    assert.is_true(ok, "the request never ended on screen:\n" .. s)
    assert.truthy(s:find("Tell me a long story.", 1, true), s)
    assert.is_nil(s:find("answer line", 1, true), s)
    child.tmux({ "send-keys", "-t", "flemma", "G" })
    child.wait_screen("THE END")
  end)

  it("shows in the statusline a request and a tool starting and ending, without a key pressed", function()
    start("G", 2) -- a short chat: everything stays in view
    server:script({
      { body = lines_stream(3), content_type = "text/event-stream" },
      {
        body = table.concat({
          'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}\n\n',
          'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_s","name":"bash","input":{}}}\n\n',
          'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"command\\": \\"sleep 1.5\\"}"}}\n\n',
          'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
          'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}\n\n',
          'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        }),
        content_type = "text/event-stream",
      },
    })
    local function statusline_settles(gone, what)
      local s
      local ok = vim.wait(6000, function()
        s = child.screen()
        return s:find("[-] test", 1, true) ~= nil and not s:find(gone, 1, true)
      end, 50)
      assert.is_true(ok, "the statusline still shows " .. what .. ":\n" .. tostring(s))
    end
    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    child.wait_screen("THE END", 8000)
    statusline_settles("sending", "the request")
    child.tmux({ "send-keys", "-t", "flemma", "o", "Run it.", "Escape", "C-]" })
    child.wait_screen("**Tool Use:** `bash`", 8000)
    statusline_settles("sending", "the request")
    child.tmux({ "send-keys", "-t", "flemma", "C-]" }) -- phase 1; the approved call runs
    child.wait_screen("[running bash]", 8000)
    -- The result is written (and folded: `Tool Result: bash (toolu_s): ...`).
    child.wait_screen("toolu_s): (no output)", 8000)
    statusline_settles("running bash", "the tool")
  end)
end)
