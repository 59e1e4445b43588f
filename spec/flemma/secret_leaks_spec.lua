-- Secrets that left through side doors (issue 23, red-team leftovers): passwords in
-- URL-valued variables of tool environments, the file holding a truncated tool's whole
-- output, and the trace log of a stream whose deltas cut a key in two. Real <C-]>,
-- real bash, a loopback server.
local helpers = require("spec.support.helpers")

local KEY = "sk-secret-leaks-spec-" .. tostring(math.random(1e9)) .. "-tail"

local press, text = helpers.press, helpers.text

local function call(name, id, input)
  return {
    "@You:",
    "Go.",
    "",
    "@Assistant:",
    ("**Tool Use:** `%s` (`%s`)"):format(name, id),
    "",
    "```json",
    vim.json.encode(input),
    "```",
  }
end

local function sse(event)
  return "event: " .. event.type .. "\ndata: " .. vim.json.encode(event) .. "\n\n"
end

describe("secrets through side doors", function()
  local h, server, project, saved

  local function setup(tools)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = vim.tbl_extend("force", { autopilot = { enabled = false }, auto_approve = { "bash" } }, tools or {}),
    })
  end

  before_each(function()
    h = helpers.send_harness({ key = KEY, timeout = 15000 })
    server = h.server
    project = helpers.tmpdir()
    saved = {
      cwd = vim.fn.getcwd(),
      state = vim.env.XDG_STATE_HOME,
      DATABASE_URL = vim.env.DATABASE_URL,
      REDIS_URL = vim.env.REDIS_URL,
      AMQP_URL = vim.env.AMQP_URL,
    }
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    setup()
  end)

  after_each(function()
    require("flemma.core.log").disable()
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    vim.env.XDG_STATE_HOME = saved.state
    vim.env.DATABASE_URL = saved.DATABASE_URL
    vim.env.REDIS_URL = saved.REDIS_URL
    vim.env.AMQP_URL = saved.AMQP_URL
    h.teardown()
  end)

  it("gives tools URL variables without their password, unless passed through", function()
    vim.env.DATABASE_URL = "postgres://flemma:hunter2-db-spec@db.example:5432/app?sslmode=require"
    vim.env.REDIS_URL = "redis://:r3dis-pw-spec@127.0.0.1:6379/0"
    vim.env.AMQP_URL = "amqp://guest:p@ss:w0rd-spec@rabbit.local/vhost"
    local cmd = 'echo "DB=$DATABASE_URL"; echo "REDIS=$REDIS_URL"; echo "AMQP=$AMQP_URL"; echo END-$((40+2))'
    local function run(file)
      local buf = helpers.edit(project .. "/" .. file, call("bash", "toolu_u1", { command = cmd, label = "urls" }))
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("END-42", 1, true) ~= nil
      end, 10000, "the command did not run: " .. text(buf))
      return text(buf)
    end
    local out = run("urls.chat")
    -- The host stays, the password goes (an empty user goes with it; a raw `@` or `:`
    -- in the password does not leave a part of it behind).
    assert.is_truthy(out:find("\nDB=postgres://flemma@db.example:5432/app?sslmode=require\n", 1, true), out)
    assert.is_truthy(out:find("\nREDIS=redis://127.0.0.1:6379/0\n", 1, true), out)
    assert.is_truthy(out:find("\nAMQP=amqp://guest@rabbit.local/vhost\n", 1, true), out)
    for _, pw in ipairs({ "hunter2-db-spec", "r3dis-pw-spec", "w0rd-spec" }) do
      assert.is_nil(out:find(pw, 1, true), out)
    end
    setup({ env_passthrough = { "DATABASE_URL" } })
    out = run("urls2.chat")
    assert.is_truthy(out:find("DB=" .. vim.env.DATABASE_URL, 1, true), out)
    assert.is_truthy(out:find("\nREDIS=redis://127.0.0.1:6379/0\n", 1, true), out)
  end)

  it("redacts the key in the file that keeps a truncated output", function()
    -- The key is one Flemma resolved: a send registers it.
    server:script({ { fixture = "anthropic_text.sse" } })
    local first = helpers.edit(project .. "/hello.chat", { "@You:", "Hello." })
    press("<C-]>")
    h.wait_finished(1)
    assert.is_truthy(vim.tbl_contains(require("flemma.core.util").secret_values(), KEY))
    vim.api.nvim_buf_delete(first, { force = true })
    -- Over tools.truncate's 2000 lines; the key in the middle and, cut by nothing, at
    -- the very end too.
    local hex = KEY:gsub(".", function(c)
      return ("\\x%02x"):format(c:byte())
    end)
    local cmd = ("seq 1 3000; printf '%s\\n'; seq 1 3000; printf 'last %s'"):format(hex, hex)
    local buf = helpers.edit(project .. "/long.chat", call("bash", "toolu_t1", { command = cmd, label = "long" }))
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("Full output: ", 1, true) ~= nil and text(buf):find("last ", 1, true) ~= nil
    end, 10000, "no truncated result: " .. text(buf))
    local path = text(buf):match("Full output: (%S+)%]")
    assert.is_truthy(path, text(buf))
    local saved_text = assert(helpers.read_file(path))
    os.remove(path)
    assert.is_nil(saved_text:find(KEY, 1, true), "the key is in " .. path)
    assert.is_truthy(saved_text:find("\n[redacted]\n1\n", 1, true), saved_text:sub(1, 200))
    assert.equals("\n3000\nlast [redacted]", saved_text:sub(-21))
    assert.is_nil(text(buf):find(KEY, 1, true))
  end)

  it("keeps a key out of the trace log when a stream cuts it between two deltas, at every offset", function()
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    local log = require("flemma.core.log")
    os.remove(log.path())
    log.enable("trace")
    local body = {
      sse({
        type = "message_start",
        message = { id = "msg_leak", type = "message", role = "assistant", model = "m", content = {}, usage = {} },
      }),
      sse({ type = "content_block_start", index = 0, content_block = { type = "text", text = "" } }),
    }
    local function delta(s)
      body[#body + 1] = sse({ type = "content_block_delta", index = 0, delta = { type = "text_delta", text = s } })
    end
    for i = 1, #KEY - 1 do
      delta(("cut%d:%s"):format(i, KEY:sub(1, i)))
      delta(KEY:sub(i + 1) .. "\n")
    end
    -- The last delta ends in the start of the key: it is logged at the end.
    delta("end:" .. KEY:sub(1, 8))
    body[#body + 1] = sse({ type = "content_block_stop", index = 0 })
    body[#body + 1] =
      sse({ type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 1 } })
    body[#body + 1] = sse({ type = "message_stop" })
    -- One write per event, apart in time: each delta reaches the decoder on its own
    -- (deltas read together are joined before Lua sees them).
    server:script({ { pieces = body, content_type = "text/event-stream", delay_ms = 15 } })
    helpers.edit(project .. "/log.chat", { "@You:", "Echo it." })
    press("<C-]>")
    h.wait_finished(1)
    log.disable()
    local logged = assert(helpers.read_file(log.path()))
    assert.is_nil(logged:find(KEY, 1, true), "the key is in the log")
    -- The text the log shows, joined in order, is the stream's text with the key
    -- redacted wherever it was cut (before: one piece per line, the key readable
    -- across two).
    local shown = {}
    for line in logged:gmatch("[^\n]+") do
      local piece = line:match('%] response { index = 0, text = "(.-)", type = "text" }$')
        or line:match('%] response text%.text %(held back%) "(.*)"$')
      if piece then
        shown[#shown + 1] = piece:gsub("\\n", "\n")
      end
    end
    local expected = {}
    for i = 1, #KEY - 1 do
      expected[#expected + 1] = ("cut%d:[redacted]\n"):format(i)
    end
    expected[#expected + 1] = "end:" .. KEY:sub(1, 8)
    assert.equals(table.concat(expected), table.concat(shown), logged:sub(-1500))
  end)
end)
