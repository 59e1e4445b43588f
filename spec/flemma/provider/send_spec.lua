-- End-to-end: <C-]> in a real chat buffer, real curl, the loopback server replaying
-- provider streams chunked at random boundaries, assertions on the buffer, the
-- requests the server received, notifications, events and processes.
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local provider = require("flemma.provider")
local transport = require("flemma.provider.transport")

local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

local press, text = helpers.press, helpers.text

local function chat(lines)
  return helpers.edit(helpers.tmpdir() .. "/test.chat", lines)
end

local h, server, notes, finished

local function setup(opts)
  opts = opts or {}
  require("flemma").setup(vim.tbl_deep_extend("force", {
    provider = "test",
    providers = {
      test = {
        kind = opts.kind or "anthropic",
        endpoint = server:url(opts.path or "/v1/messages"),
        api_key_env = "FLEMMA_SPEC_KEY",
      },
    },
    model = opts.model,
    parameters = { max_retries = 2, cache_retention = "none", connect_timeout = 5, timeout = 30 },
    tools = { autopilot = { enabled = opts.autopilot or false }, auto_approve = { "echo" } },
  }, opts.config or {}))
  tools.register("echo", {
    name = "echo",
    description = "returns its text",
    input_schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    execute = function(input)
      return { success = true, output = "echo: " .. input.text }
    end,
  })
end

local function errors()
  return vim.tbl_filter(function(n)
    return n.level == vim.log.levels.ERROR
  end, notes)
end

describe("sending to a provider", function()
  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server, notes, finished = h.server, h.notes, h.finished
    require("flemma.provider.usage")._reset()
    setup()
  end)
  after_each(function()
    h.teardown()
  end)

  it("writes the request, the response and curl's exit to the log when logging is on, never the key", function()
    local log = require("flemma.core.log")
    local saved_state = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    log.enable("trace")
    server:script({ { fixture = "anthropic_text.sse", chunk_seed = 2, max_chunk = 9 } })
    local buf = chat({ "@You:", "Hello log" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished().status)
    log.disable()
    local logged = assert(helpers.read_file(log.path()))
    vim.env.XDG_STATE_HOME = saved_state
    assert.truthy(text(buf):find("Second line ends here.", 1, true))
    assert.matches(
      "%[INFO%] request POST "
        .. vim.pesc(server:url("/v1/messages"))
        .. " %(%d+ bytes, decoder anthropic, headers: [^)]*x%-api%-key",
      logged
    )
    assert.matches('%[DEBUG%] request body: {.*"Hello log"', logged)
    assert.matches("%[DEBUG%] response {[^\n]*status = 200", logged)
    assert.matches('%[TRACE%] response {[^\n]*text = "Hello', logged)
    assert.matches('%[DEBUG%] response {[^\n]*reason = "end_turn"', logged)
    assert.matches("%[INFO%] curl for [^\n]* exited with 0", logged)
    assert.matches("%[INFO%] FlemmaRequestFinished", logged)
    assert.is_nil(logged:find(KEY, 1, true), "the key is in the log")
  end)

  it("streams a plain answer into the buffer and reports usage", function()
    server:script({ { fixture = "anthropic_text.sse", chunk_seed = 1, max_chunk = 7 } })
    local buf = chat({ "@System:", "Be brief.", "", "@You:", "Hello" })
    press("<C-]>")
    assert.truthy(text(buf):find("@Assistant:", 1, true))
    assert.is_false(vim.bo[buf].modifiable)
    local fin = h.wait_finished()
    assert.equals("completed", fin.status)
    assert.equals(
      "@System:\nBe brief.\n\n@You:\nHello\n\n@Assistant:\nHello there, wörld ✓.\nSecond line ends here.\n\n@You:\n",
      text(buf)
    )
    assert.is_true(vim.bo[buf].modifiable)
    local reqs = server:requests()
    assert.equals(1, #reqs)
    assert.equals(KEY, reqs[1].headers["x-api-key"])
    assert.equals("2023-06-01", reqs[1].headers["anthropic-version"])
    assert.equals("/v1/messages", reqs[1].path)
    assert.same(
      {
        model = "claude-sonnet-4-6",
        max_tokens = 64000,
        stream = true,
        system = { { type = "text", text = "Be brief." } },
        tools = {
          {
            name = "echo",
            description = "returns its text",
            input_schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
          },
        },
        messages = { { role = "user", content = { { type = "text", text = "Hello" } } } },
      },
      (function()
        local j = reqs[1].json
        -- Only the tool registered here (the built-ins are checked by the builder specs).
        j.tools = vim.tbl_filter(function(t)
          return t.name == "echo"
        end, j.tools or {})
        return j
      end)()
    )
    local usage = fin.usage
    assert.equals(1200, usage.input_tokens)
    assert.equals(42, usage.output_tokens)
    assert.equals(900, usage.cache_read_tokens)
    assert.equals(300, usage.cache_write_tokens)
    -- 1200*3 + 42*15 + 900*0.3 + 300*3.75 per million
    assert.is_true(math.abs(usage.cost - (1200 * 3 + 42 * 15 + 900 * 0.3 + 300 * 3.75) / 1e6) < 1e-9)
    local u = require("flemma").usage(buf)
    assert.equals(1200, u.last.input_tokens)
    assert.equals(1, u.buffer.requests)
    assert.equals(1, u.session.requests)
    local last = notes[#notes].msg
    assert.truthy(last:find("1,200 in", 1, true), last)
    assert.truthy(last:find("42 out", 1, true), last)
    assert.same({}, errors())
  end)

  it("writes thinking with its signature and redacted thinking, and sends them back exactly", function()
    server:script({ { fixture = "anthropic_thinking.sse", chunk_seed = 2 }, { fixture = "anthropic_text.sse" } })
    local buf = chat({ "@You:", "2+2?" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished().status)
    assert.truthy(
      text(buf):find(
        table.concat({
          "@Assistant:",
          '<thinking anthropic:signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Sig==">',
          "Let me think about 2+2.",
          "It is 4.",
          "</thinking>",
          "",
          "<thinking redacted>",
          "RWFzdGVyIGVnZzogcmVkYWN0ZWQ=",
          "</thinking>",
          "",
          "The answer is 4.",
          "",
          "@You:",
        }, "\n"),
        1,
        true
      ),
      text(buf)
    )
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "And 3+3?" })
    press("<C-]>")
    h.wait_finished(2)
    local body = server:requests()[2].json
    assert.same({
      {
        type = "thinking",
        thinking = "Let me think about 2+2.\nIt is 4.",
        signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Sig==",
      },
      { type = "redacted_thinking", data = "RWFzdGVyIGVnZzogcmVkYWN0ZWQ=" },
      { type = "text", text = "The answer is 4." },
    }, body.messages[2].content)
  end)

  it("runs an autopilot round trip: parallel tool uses, tools run, the second request carries the results", function()
    setup({ autopilot = true })
    server:script({
      { fixture = "anthropic_tools_parallel.sse", chunk_seed = 3 },
      { fixture = "anthropic_text.sse", chunk_seed = 4 },
    })
    local buf = chat({ "@You:", "Echo twice." })
    press("<C-]>")
    h.wait_finished(2, 15000)
    assert.equals("completed", finished[1].status)
    assert.equals("completed", finished[2].status)
    local doc = require("flemma.chat.document").parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    local roles = vim.tbl_map(function(m)
      return m.role
    end, doc.messages)
    assert.same({ "user", "assistant", "user", "assistant", "user" }, roles)
    local results = vim.tbl_filter(function(p)
      return p.kind == "tool_result"
    end, doc.messages[3].parts)
    assert.same({ "toolu_01A", "toolu_01B" }, { results[1].id, results[2].id })
    assert.equals("echo: first ```", results[1].content)
    local second = server:requests()[2].json
    assert.same({
      { type = "tool_result", tool_use_id = "toolu_01A", content = "echo: first ```" },
      { type = "tool_result", tool_use_id = "toolu_01B", content = "echo: second" },
    }, second.messages[3].content)
    assert.same(
      { type = "tool_use", id = "toolu_01A", name = "echo", input = { text = "first ```" } },
      second.messages[2].content[2]
    )
    assert.truthy(text(buf):find("Hello there", 1, true))
  end)

  it("speaks openai_chat: reasoning as thinking, text, parallel tool calls, usage", function()
    setup({ kind = "openai_chat", path = "/v1/chat/completions", model = "qwen3" })
    server:script({
      { fixture = "openai_chat_text.sse", chunk_seed = 5 },
      { fixture = "openai_chat_tools.sse", chunk_seed = 6 },
    })
    local buf = chat({ "@You:", "Hi" })
    press("<C-]>")
    local fin = h.wait_finished()
    assert.equals(
      "@You:\nHi\n\n@Assistant:\n<thinking>\nGreeting back.\n</thinking>\n\nHi! How can I help?\n\n@You:\n",
      text(buf)
    )
    assert.equals(20, fin.usage.input_tokens)
    assert.equals(10, fin.usage.cache_read_tokens)
    assert.equals(12, fin.usage.output_tokens)
    assert.equals(4, fin.usage.thinking_tokens)
    local req = server:requests()[1]
    assert.equals("Bearer " .. KEY, req.headers["authorization"])
    assert.same({ include_usage = true }, req.json.stream_options)
    assert.equals("qwen3", req.json.model)
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "Echo a and b." })
    press("<C-]>")
    h.wait_finished(2)
    local doc = require("flemma.chat.document").parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    local uses = vim.tbl_filter(function(p)
      return p.kind == "tool_use"
    end, doc.messages[4].parts)
    assert.same({ "call_a", "call_b" }, { uses[1].id, uses[2].id })
    assert.same({ text = "a" }, uses[1].input)
    assert.same({ text = "b" }, uses[2].input)
    -- The second request sent the thinking back as reasoning_content.
    assert.equals("Greeting back.", server:requests()[2].json.messages[2].reasoning_content)
  end)

  local function error_case(name, entries, expect, opts)
    it("reports " .. name .. " once, naming the provider, and keeps the buffer", function()
      if opts and opts.setup then
        opts.setup()
      end
      server:script(entries)
      local lines = { "@You:", "Hello" }
      local buf = chat(lines)
      press("<C-]>")
      local fin = h.wait_finished(1, 20000)
      if opts and opts.teardown then
        opts.teardown()
      end
      assert.equals("error", fin.status)
      local errs = errors()
      assert.equals(1, #errs, vim.inspect(notes))
      local msg = errs[1].msg
      assert.truthy(msg:find("(flemma) test: ", 1, true), msg)
      for _, e in ipairs(expect) do
        assert.truthy(msg:find(e, 1, true), ("%q not in %q"):format(e, msg))
      end
      if not (opts and opts.partial) then
        assert.same(lines, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
      end
      assert.is_true(vim.bo[buf].modifiable)
      if opts and opts.requests then
        assert.equals(opts.requests, #server:requests())
      end
    end)
  end

  local function json_error(t, m)
    return vim.json.encode({ type = "error", error = { type = t, message = m } })
  end

  error_case("401", { { status = 401, body = json_error("authentication_error", "invalid x-api-key") } }, {
    "HTTP 401",
    '"invalid x-api-key"',
    "FLEMMA_SPEC_KEY",
  })
  error_case("403", { { status = 403, body = json_error("permission_error", "not allowed") } }, {
    "HTTP 403",
    '"not allowed"',
    "FLEMMA_SPEC_KEY",
  })
  error_case("400 with the provider's message", {
    { status = 400, body = json_error("invalid_request_error", "messages.0: text content blocks must be non-empty") },
  }, { "HTTP 400", "text content blocks must be non-empty" }, { requests = 1 })
  error_case("404 model", { { status = 404, body = json_error("not_found_error", "model: claude-nope") } }, {
    "HTTP 404",
    "model: claude-nope",
    "check `model`",
  })
  error_case(
    "413 and context overflow",
    { { status = 413, body = json_error("request_too_large", "Request exceeds the maximum size") } },
    {
      "HTTP 413",
      "too long for the model",
    }
  )
  error_case("a context window overflow (400)", {
    { status = 400, body = json_error("invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum") },
  }, { "prompt is too long", "too long for the model" })
  error_case("429 after the retries", {
    { status = 429, headers = { ["retry-after"] = "0" }, body = json_error("rate_limit_error", "slow down") },
  }, { "HTTP 429", '"slow down"', "after 2 retries" }, { requests = 3 })
  error_case("a 5xx", { { status = 500, body = json_error("api_error", "Internal server error") } }, {
    "HTTP 500",
    "Internal server error",
    "try again later",
  }, { requests = 1 })
  error_case("an HTML error page", {
    {
      status = 502,
      content_type = "text/html",
      body = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
    },
  }, { "HTTP 502", "HTML page", "502 Bad Gateway" })
  error_case("a truncated stream, keeping what arrived", {
    { fixture = "anthropic_text.sse", truncate_at = 900 },
  }, { "ended before the response was complete" }, { partial = true, requests = 1 })
  error_case(
    "a timeout",
    { { fixture = "anthropic_text.sse", truncate_at = 10, hang_ms = 4000 } },
    { "timed out", "parameters.timeout" },
    {
      setup = function()
        setup({ config = { parameters = { timeout = 1 } } })
      end,
    }
  )
  error_case("a server that is not running", {}, { "could not connect", "is the test server running" }, {
    setup = function()
      require("flemma").setup({
        provider = "test",
        providers = { test = { kind = "anthropic", endpoint = "http://127.0.0.1:9/v1/messages" } },
        parameters = { max_retries = 0 },
      })
    end,
  })
  error_case("a missing API key before anything starts", {}, { "no API key", "set $FLEMMA_SPEC_MISSING" }, {
    setup = function()
      require("flemma").setup({
        provider = "test",
        providers = {
          test = {
            kind = "anthropic",
            endpoint = "https://api.example.invalid/v1/messages",
            api_key_env = "FLEMMA_SPEC_MISSING",
          },
        },
      })
    end,
    requests = 0,
  })
  error_case("curl missing", {}, { "`curl-missing-here` is not installed" }, {
    setup = function()
      transport.program = "curl-missing-here"
    end,
    teardown = function()
      transport.program = "curl"
    end,
    requests = 0,
  })

  it("retries a 429 after the server's retry-after, showing it in b:flemma_status", function()
    server:script({
      { status = 429, headers = { ["retry-after"] = "1" }, body = json_error("rate_limit_error", "slow down") },
      { status = 529, headers = { ["retry-after"] = "0" }, body = json_error("overloaded_error", "Overloaded") },
      { fixture = "anthropic_text.sse" },
    })
    local buf = chat({ "@You:", "Hello" })
    local t0 = vim.uv.hrtime()
    press("<C-]>")
    helpers.wait_for(function()
      return (vim.b[buf].flemma_status or ""):find("retry 1/2", 1, true) ~= nil
    end, 5000, "no retry status")
    assert.truthy(vim.b[buf].flemma_status:find("HTTP 429", 1, true), vim.b[buf].flemma_status)
    local fin = h.wait_finished()
    assert.equals("completed", fin.status)
    assert.is_true((vim.uv.hrtime() - t0) / 1e6 >= 950)
    assert.equals(3, #server:requests())
    assert.is_nil(vim.b[buf].flemma_status)
    assert.truthy(text(buf):find("Hello there", 1, true))
  end)

  it("retries an overloaded error event that came before any content", function()
    server:script({ { fixture = "anthropic_overloaded.sse" }, { fixture = "anthropic_text.sse" } })
    chat({ "@You:", "Hello" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished().status)
    assert.equals(2, #server:requests())
  end)

  it("keeps nothing of a finished request: no autocmd per send is left on the buffer", function()
    local function unload_autocmds(buf)
      return #vim.api.nvim_get_autocmds({ buffer = buf, event = { "BufUnload", "BufWipeout" } })
    end
    local buf = chat({ "@You:", "Hello" })
    local before -- after the first send: the buffer's own (the cycle's state) are set up once
    for round = 1, 4 do
      server:script({ { fixture = "anthropic_text.sse" } })
      if round > 1 then
        local n = vim.api.nvim_buf_line_count(buf)
        vim.api.nvim_buf_set_lines(buf, n - 1, n, false, { "@You:", "Again " .. round })
      end
      press("<C-]>")
      assert.equals("completed", h.wait_finished(round).status)
      -- Each send left one, holding the request (its body is the whole conversation).
      before = before or unload_autocmds(buf)
      assert.equals(before, unload_autocmds(buf), "after send " .. round)
      assert.equals(1, #server:requests()) -- this round's (a script starts a new log)
    end
    assert.same({}, errors())
  end)

  it("cancels a running request when its buffer is wiped", function()
    server:script({ { fixture = "anthropic_text.sse", chunk_seed = 1, max_chunk = 7, delay_ms = 100 } })
    local buf = chat({ "@You:", "Hello" })
    press("<C-]>")
    assert.is_truthy(provider.active(buf))
    vim.api.nvim_buf_delete(buf, { force = true })
    assert.equals("cancelled", h.wait_finished().status)
    assert.is_nil(provider.active(buf))
  end)

  it("cancels mid-stream with <C-c>: curl stops at once, the text stays, a cancelled line is left", function()
    server:script({ { fixture = "anthropic_tools_parallel.sse", chunk_seed = 7, max_chunk = 40, delay_ms = 30 } })
    local buf = chat({ "@You:", "Go" })
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("Running both.", 1, true) ~= nil
    end, 10000, "no text arrived")
    local pid = provider.active(buf).pid
    local cmdline = helpers.read_file("/proc/" .. pid .. "/cmdline")
    assert.truthy(cmdline and cmdline:find("curl", 1, true))
    assert.is_nil(cmdline:find(KEY, 1, true), "the key is in curl's argv")
    -- Other buffers stay usable meanwhile.
    local other = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_buf_set_lines(other, 0, -1, false, { "still editable" })
    assert.is_false(vim.bo[buf].modifiable)
    press("<C-c>")
    local fin = h.wait_finished()
    assert.equals("cancelled", fin.status)
    helpers.wait_for(function()
      return vim.uv.kill(pid, 0) ~= 0
    end, 2000, "curl still runs after the cancel")
    local t = text(buf)
    assert.truthy(t:find("Running both.\n\n<!-- flemma: cancelled -->\n\n@You:\n", 1, true), t)
    assert.is_nil(t:find("toolu_01B", 1, true))
    assert.is_true(vim.bo[buf].modifiable)
  end)

  it(":Flemma cancel stops a request that is waiting for a retry", function()
    server:script({
      { status = 503, headers = { ["retry-after"] = "30" }, body = json_error("api_error", "unavailable") },
    })
    local buf = chat({ "@You:", "Hello" })
    press("<C-]>")
    helpers.wait_for(function()
      return vim.b[buf].flemma_status ~= nil
    end, 5000)
    vim.cmd("Flemma cancel")
    assert.equals("cancelled", h.wait_finished().status)
    assert.equals(1, #server:requests())
    assert.truthy(text(buf):find("<!-- flemma: cancelled -->", 1, true))
  end)
end)
