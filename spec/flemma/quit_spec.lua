-- Issue 24 §11: `:wq` while an answer streamed quit silently and saved the half
-- answer with no cancelled marker and no `@You:`; the next send then added a second
-- `@Assistant:`. Now `:wq` is refused while a request runs (as `:q` is for a modified
-- buffer) and `:wq!` cancels it and writes the marker before quitting; a chat whose
-- last message is an unfinished answer is continued, not doubled. Neovim in tmux,
-- keys as typed, the loopback server streaming slowly; the file read back.
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

local function count(s, needle)
  local n, at = 0, 1
  while true do
    local i = s:find(needle, at, true)
    if not i then
      return n
    end
    n, at = n + 1, i + #needle
  end
end

describe("quitting while an answer streams", function()
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

  --- Neovim in tmux on a chat streaming a six-second answer.
  local function start_streaming(tag)
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    server = require("spec.support.llm_server").start()
    local dir = helpers.tmpdir()
    local file = dir .. "/quit.chat"
    helpers.write_file(file, "@You:\nTell me a long story.\n")
    local init = dir .. "/init.lua"
    helpers.write_file(
      init,
      ([[
        vim.opt.rtp:prepend(%q)
        vim.cmd("runtime! plugin/flemma.lua")
        vim.env.FLEMMA_SPEC_KEY = "sk-quit-spec"
        require("flemma").setup({
          provider = "test",
          providers = { test = { kind = "anthropic", endpoint = %q, api_key_env = "FLEMMA_SPEC_KEY" } },
          parameters = { max_retries = 0, cache_retention = "none" },
          tools = { autopilot = { enabled = false } },
        })
      ]]):format(helpers.root, server:url("/v1/messages"))
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-quit-" .. tag .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 100,
      height = 30,
    })
    child.wait_screen("Tell me a long story.")
    -- 200 lines, 30 ms apart: six seconds of streaming.
    server:script({
      { body = lines_stream(200), content_type = "text/event-stream", chunk_seed = 1, max_chunk = 40, delay_ms = 30 },
    })
    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    child.wait_screen("answer line 2", 8000)
    return file
  end

  --- The file as quitting with `cmd!` saved it (Neovim exited 0 by itself).
  local function quit_saved(file, cmd)
    child.tmux({ "send-keys", "-t", "flemma", ":" .. cmd .. "!", "Enter" })
    -- Neovim exits by itself: stop() finds it ended and checks it exited 0.
    local c = child
    child = nil
    c.stop()
    local saved = assert(helpers.read_file(file))
    assert.equals(1, count(saved, "@Assistant:"), saved)
    assert.is_nil(saved:find("THE END", 1, true), saved)
    assert.truthy(saved:find("answer line 2", 1, true), saved)
    assert.truthy(saved:find("\n<!-- flemma: cancelled -->\n\n@You:\n", 1, true), saved)
    assert.truthy(saved:find("@You:\n*$"), saved)
    return saved
  end

  it("refuses :wq without writing anything, and :wq! cancels the request and saves the marker and @You:", function()
    local file = start_streaming("wq")
    child.tmux({ "send-keys", "-t", "flemma", ":wq", "Enter" })
    local s = child.wait_screen("E37: quit.chat still receiving, not written (<C-c> stops it, :wq! quits)", 5000)
    -- Nothing was written: the file holds the question only.
    assert.equals("@You:\nTell me a long story.\n", helpers.read_file(file))
    -- Neovim is still there, and the request goes on.
    child.wait_screen("answer line 12", 8000)
    assert.equals("@You:\nTell me a long story.\n", helpers.read_file(file))
    quit_saved(file, "wq")
    assert.is_nil(s:find("THE END", 1, true))
  end)

  it("refuses ZZ (:x from Normal mode) without writing", function()
    local file = start_streaming("zz")
    child.tmux({ "send-keys", "-t", "flemma", "Z", "Z" })
    child.wait_screen("E37: quit.chat still receiving, not written (<C-c> stops it, :x! quits)", 5000)
    assert.equals("@You:\nTell me a long story.\n", helpers.read_file(file))
    child.wait_screen("answer line 12", 8000)
    quit_saved(file, "x")
  end)

  it("refuses :x and :wqa without writing, and :xa! saves the marker", function()
    local file = start_streaming("xa")
    child.tmux({ "send-keys", "-t", "flemma", ":x", "Enter" })
    child.wait_screen("E37: quit.chat still receiving, not written (<C-c> stops it, :x! quits)", 5000)
    child.tmux({ "send-keys", "-t", "flemma", ":wqa", "Enter" })
    child.wait_screen("E37: quit.chat still receiving, not written (<C-c> stops it, :wqa! quits)", 5000)
    assert.equals("@You:\nTell me a long story.\n", helpers.read_file(file))
    child.wait_screen("answer line 12", 8000)
    quit_saved(file, "xa")
  end)
end)

describe("a chat that ends with an unfinished answer", function()
  local h
  before_each(function()
    h = helpers.send_harness({ key = "sk-flemma-spec-continue" })
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { autopilot = { enabled = false } },
    })
  end)
  after_each(function()
    h.teardown()
  end)

  local CHAT = { "@You:", "Tell me a story.", "", "@Assistant:", "Once upon a time", "there was", "", "" }

  it("is continued in the same message, not answered under a second @Assistant:", function()
    h.server:script({ { fixture = "anthropic_text.sse" } })
    local buf = helpers.open_chat(CHAT)
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished().status)
    assert.equals(
      "@You:\nTell me a story.\n\n@Assistant:\nOnce upon a time\nthere was\n\nHello there, wörld ✓.\nSecond line ends here.\n\n@You:\n",
      helpers.text(buf)
    )
    local msgs = h.server:requests()[1].json.messages
    assert.equals("assistant", msgs[#msgs].role)
    assert.equals("Once upon a time\nthere was", msgs[#msgs].content[1].text)
  end)

  it("is left as it was when the continuation fails", function()
    h.server:script({ { status = 500, body = '{"type":"error","error":{"type":"api_error","message":"boom"}}' } })
    local buf = helpers.open_chat(CHAT)
    local before = helpers.text(buf)
    helpers.press("<C-]>")
    assert.equals("error", h.wait_finished().status)
    assert.equals(before, helpers.text(buf))
  end)
end)

describe("closing a split while an answer streams elsewhere", function()
  local h
  after_each(function()
    h.teardown()
  end)

  it("says nothing and leaves the request running", function()
    h = helpers.send_harness({ key = "sk-flemma-spec-split" })
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { autopilot = { enabled = false } },
    })
    h.server:script({
      { body = lines_stream(100), content_type = "text/event-stream", chunk_seed = 2, max_chunk = 40, delay_ms = 20 },
    })
    local buf = helpers.open_chat({ "@You:", "Go." })
    helpers.press("<C-]>")
    helpers.wait_for(function()
      return helpers.text(buf):find("answer line 2", 1, true) ~= nil
    end, 8000, "no answer")
    vim.cmd("split " .. vim.fn.fnameescape(helpers.tmpdir() .. "/other.txt"))
    vim.cmd("quit")
    assert.is_true(require("flemma.cycle.send").is_active(buf))
    for _, n in ipairs(h.notes) do
      assert.is_nil(n.msg:find("still receiving", 1, true), n.msg)
    end
    assert.equals("completed", h.wait_finished(1, 20000).status)
    assert.truthy(helpers.text(buf):find("THE END", 1, true))
  end)
end)
