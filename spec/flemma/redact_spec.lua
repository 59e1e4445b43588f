-- A server that echoes the API key (issue 23 §10): real chat buffers, <C-]>, real curl
-- against the loopback server, the real notification path (vim.notify as Neovim
-- has it) and :messages, the log file, diagnostics, the buffer, the
-- FlemmaRequestFinished data: the key appears in none of them, `[redacted]` does.
local helpers = require("spec.support.helpers")
local server_mod = require("spec.support.llm_server")

local press, text = helpers.press, helpers.text

-- 32 random hex digits: no part of it occurs by chance in a message.
local function random_key(prefix)
  local t = {}
  for i = 1, 32 do
    t[i] = ("%x"):format(math.random(0, 15))
  end
  return prefix .. table.concat(t)
end

describe("a key echoed by the server", function()
  local server, key, state, saved_state, finished, group

  -- Every place the user (or a plugin) reads what happened.
  local function everything(buf)
    local diags = {}
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      diags[#diags + 1] = d.message
    end
    local events = {}
    for _, e in ipairs(finished) do
      events[#events + 1] = vim.inspect(e)
    end
    return {
      messages = vim.api.nvim_exec2("messages", { output = true }).output,
      log = helpers.read_file(require("flemma.core.log").path()) or "",
      buffer = text(buf),
      diagnostics = table.concat(diags, "\n"),
      events = table.concat(events, "\n"),
      status = tostring(vim.b[buf].flemma_status),
    }
  end

  local function assert_clean(buf)
    for where, s in pairs(everything(buf)) do
      assert.is_nil(s:find(key, 1, true), ("the key is in the %s:\n%s"):format(where, s))
      -- Not even a part of it (a message cut short must not cut the key).
      assert.is_nil(s:find(key:sub(1, 20), 1, true), ("a part of the key is in the %s:\n%s"):format(where, s))
      assert.is_nil(s:find(key:sub(-16), 1, true), ("a part of the key is in the %s:\n%s"):format(where, s))
    end
  end

  setup(function()
    server = server_mod.start()
  end)
  teardown(function()
    server:stop()
  end)

  before_each(function()
    key = random_key("sk-echo-")
    vim.env.FLEMMA_SPEC_ECHO_KEY = key
    saved_state = vim.env.XDG_STATE_HOME
    state = helpers.tmpdir()
    vim.env.XDG_STATE_HOME = state
    finished = {}
    group = vim.api.nvim_create_augroup("spec_redact", { clear = true })
    vim.api.nvim_create_autocmd("User", {
      group = group,
      pattern = "FlemmaRequestFinished",
      callback = function(ev)
        finished[#finished + 1] = ev.data
      end,
    })
    require("flemma").setup({
      provider = "echo",
      providers = {
        echo = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_ECHO_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false } },
    })
    vim.cmd("messages clear")
    vim.cmd("Flemma logging:enable debug")
  end)

  after_each(function()
    require("flemma.core.log").disable()
    pcall(vim.api.nvim_del_augroup_by_id, group)
    vim.cmd("silent! %bwipeout!")
    vim.env.FLEMMA_SPEC_ECHO_KEY = nil
    vim.env.XDG_STATE_HOME = saved_state
    require("flemma").setup({})
    helpers.cleanup()
  end)

  local function send_and_wait(name)
    local buf = helpers.edit(helpers.tmpdir() .. "/" .. name .. ".chat", { "@You:", "Hello" })
    press("<C-]>")
    helpers.wait_for(function()
      return #finished >= 1
    end, 15000, "the request never finished")
    vim.wait(100) -- scheduled notifications
    return buf
  end

  it("a 401 whose JSON error repeats the key: shown and logged redacted", function()
    server:script({
      {
        status = 401,
        body = vim.json.encode({
          type = "error",
          error = { type = "authentication_error", message = "invalid x-api-key: " .. key .. " (key " .. key .. ")" },
        }),
      },
    })
    local buf = send_and_wait("json401")
    -- The key did go to the server, as a header: the request was real.
    assert.equals(key, server:requests()[1].headers["x-api-key"])
    assert.equals("error", finished[1].status)
    local seen = everything(buf)
    assert.truthy(seen.messages:find("HTTP 401", 1, true), seen.messages)
    assert.truthy(seen.messages:find("invalid x-api-key: [redacted]", 1, true), seen.messages)
    assert.truthy(seen.events:find("[redacted]", 1, true), seen.events)
    assert_clean(buf)
  end)

  it("a 401 as plain text, the key where the message is cut short", function()
    server:script({
      { status = 401, body = ("x"):rep(290) .. key .. " and " .. key },
    })
    local buf = send_and_wait("text401")
    assert.equals("error", finished[1].status)
    local seen = everything(buf)
    assert.truthy(seen.messages:find("HTTP 401", 1, true), seen.messages)
    assert.truthy(seen.messages:find("[redacted]", 1, true), seen.messages)
    assert_clean(buf)
  end)

  it("an error event in the stream that repeats the key", function()
    server:script({
      {
        status = 200,
        content_type = "text/event-stream",
        body = "event: error\ndata: "
          .. vim.json.encode({ type = "error", error = { type = "invalid_request_error", message = "bad key " .. key } })
          .. "\n\n",
      },
    })
    local buf = send_and_wait("event")
    assert.equals("error", finished[1].status)
    local seen = everything(buf)
    assert.truthy(seen.messages:find("bad key [redacted]", 1, true), seen.messages)
    assert_clean(buf)
  end)

  it("a key echoed split between two text deltas, at every offset: the trace log has no part of it", function()
    vim.cmd("Flemma logging:enable trace")
    local function data(t)
      return "event: " .. t.type .. "\ndata: " .. vim.json.encode(t) .. "\n\n"
    end
    local function delta(piece)
      return data({ type = "content_block_delta", index = 0, delta = { type = "text_delta", text = piece } })
    end
    local out = {
      data({
        type = "message_start",
        message = {
          id = "msg_s",
          type = "message",
          role = "assistant",
          model = "m",
          content = {},
          usage = { input_tokens = 1, output_tokens = 1 },
        },
      }),
      data({ type = "content_block_start", index = 0, content_block = { type = "text", text = "" } }),
    }
    for i = 1, #key - 1 do
      out[#out + 1] = delta(("offset %d: "):format(i))
      out[#out + 1] = delta(key:sub(1, i))
      out[#out + 1] = delta(key:sub(i + 1))
      out[#out + 1] = delta("\n")
    end
    vim.list_extend(out, {
      data({ type = "content_block_stop", index = 0 }),
      data({ type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 9 } }),
      data({ type = "message_stop" }),
    })
    -- Each event its own chunk, 5 ms apart: each delta reaches Neovim as an event of
    -- its own (deltas read together are joined before they are logged).
    server:script({ { status = 200, content_type = "text/event-stream", pieces = out, delay_ms = 5 } })
    send_and_wait("split")
    assert.equals("completed", finished[1].status)
    local log = helpers.read_file(require("flemma.core.log").path()) or ""
    -- The deltas were logged (the trace level was on) ...
    assert.truthy(log:find("offset 17: ", 1, true), log)
    -- ... and no 12 bytes in a row of the key are in it (its 8-byte prefix is not
    -- random: every window reaches into the random part).
    for i = 1, #key - 11 do
      local part = key:sub(i, i + 11)
      assert.is_nil(log:find(part, 1, true), ("a part of the key (%q) is in the log:\n%s"):format(part, log))
    end
    assert.truthy(log:find("[redacted]", 1, true), log)
  end)
end)

describe("util.redact and the environment", function()
  local util = require("flemma.core.util")

  it("follows the environment as it changes (vim.env, setenv(), a second variable)", function()
    local a = "flemma-env-secret-" .. tostring(math.random(1e9))
    local b = "flemma-env-other-" .. tostring(math.random(1e9))
    vim.env.FLEMMA_SPEC_API_KEY = nil
    -- Read (and kept) before the variable exists.
    for _ = 1, 3 do
      assert.equals("x " .. a, util.redact("x " .. a))
    end
    vim.env.FLEMMA_SPEC_API_KEY = a
    assert.equals("x [redacted]", util.redact("x " .. a))
    -- A new value for the same name.
    vim.fn.setenv("FLEMMA_SPEC_API_KEY", b)
    assert.equals("x [redacted] " .. a, util.redact("x " .. b .. " " .. a))
    -- Another name, set by C code as a plugin's library might.
    local ffi = require("ffi")
    pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
    ffi.C.setenv("FLEMMA_SPEC_TOKEN", a, 1)
    assert.equals("[redacted] [redacted]", util.redact(a .. " " .. b))
    -- Gone again: kept as it is.
    vim.env.FLEMMA_SPEC_API_KEY = nil
    vim.env.FLEMMA_SPEC_TOKEN = nil
    assert.equals(a .. " " .. b, util.redact(a .. " " .. b))
    -- An exception by name.
    vim.env.FLEMMA_SPEC_API_KEY = a
    assert.equals(a, util.redact(a, { FLEMMA_SPEC_API_KEY = true }))
    assert.equals("[redacted]", util.redact(a))
    vim.env.FLEMMA_SPEC_API_KEY = nil
  end)
end)
