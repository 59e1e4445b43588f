local document = require("flemma.chat.document")
local provider = require("flemma.provider")

-- A conversation with system text, parallel tool uses and results (one an error),
-- thinking with a signature, redacted thinking and a closing user message.
local CHAT = {
  "@System:",
  "You are terse.",
  "",
  "@You:",
  "List the files and read the README.",
  "",
  "@Assistant:",
  '<thinking anthropic:signature="EqQBCkYIBxgCKkBsig+/==">',
  "The user wants two things.",
  "</thinking>",
  "",
  "<thinking redacted>",
  "RkxFTU1BLXJlZGFjdGVkLWRhdGE=",
  "</thinking>",
  "",
  "Both at once.",
  "",
  "**Tool Use:** `bash` (`toolu_01`)",
  "",
  "```json",
  '{ "command": "ls" }',
  "```",
  "",
  "**Tool Use:** `read` (`toolu_02`)",
  "",
  "```json",
  '{ "path": "README.md" }',
  "```",
  "",
  "@You:",
  "**Tool Result:** `toolu_01`",
  "",
  "```",
  "a.txt",
  "b.txt",
  "```",
  "",
  "**Tool Result:** `toolu_02` (error)",
  "",
  "```",
  "no such file",
  "```",
  "",
  "Thanks.",
}

local TOOLS = {
  {
    name = "bash",
    description = "Runs a command.",
    input_schema = { type = "object", properties = { command = { type = "string" } }, required = { "command" } },
  },
  { name = "now", description = "The time.", input_schema = { type = "object", properties = {} } },
}

local function build(params, chat, tools)
  local spec =
    { name = "anthropic", kind = "anthropic", endpoint = "http://127.0.0.1:1/v1/messages", model = "claude-sonnet-4-6" }
  local request = document.to_messages(document.parse(chat or CHAT))
  local base = { cache_retention = "none" }
  local ctx = provider.context(spec, request, {
    parameters = vim.tbl_extend("force", base, params or {}),
    tools = tools or TOOLS,
    key = "sk-test-key",
  })
  local body, headers = provider.build(ctx)
  -- What goes on the wire, decoded again: the comparison is key for key.
  local wire = vim.json.encode(body)
  return vim.json.decode(wire), headers, wire
end

describe("flemma.provider.anthropic", function()
  it("builds the exact request of a conversation with tools, parallel calls, an error result and thinking", function()
    local body, headers, wire = build()
    assert.same({
      model = "claude-sonnet-4-6",
      max_tokens = 64000,
      stream = true,
      system = { { type = "text", text = "You are terse." } },
      tools = {
        {
          name = "bash",
          description = "Runs a command.",
          input_schema = { type = "object", properties = { command = { type = "string" } }, required = { "command" } },
        },
        { name = "now", description = "The time.", input_schema = { type = "object", properties = vim.empty_dict() } },
      },
      messages = {
        { role = "user", content = { { type = "text", text = "List the files and read the README." } } },
        {
          role = "assistant",
          content = {
            { type = "thinking", thinking = "The user wants two things.", signature = "EqQBCkYIBxgCKkBsig+/==" },
            { type = "redacted_thinking", data = "RkxFTU1BLXJlZGFjdGVkLWRhdGE=" },
            { type = "text", text = "Both at once." },
            { type = "tool_use", id = "toolu_01", name = "bash", input = { command = "ls" } },
            { type = "tool_use", id = "toolu_02", name = "read", input = { path = "README.md" } },
          },
        },
        {
          role = "user",
          content = {
            { type = "tool_result", tool_use_id = "toolu_01", content = "a.txt\nb.txt" },
            { type = "tool_result", tool_use_id = "toolu_02", content = "no such file", is_error = true },
            { type = "text", text = "Thanks." },
          },
        },
      },
    }, body)
    -- An empty schema's properties stay an object on the wire.
    assert.truthy(wire:find('"properties":{}', 1, true), wire)
    assert.same({
      ["content-type"] = "application/json",
      ["accept"] = "text/event-stream",
      ["anthropic-version"] = "2023-06-01",
      ["x-api-key"] = "sk-test-key",
    }, headers)
  end)

  it("puts cache breakpoints on the last tool, the system text and the conversation tail", function()
    local body = build({ cache_retention = "short" })
    local eph = { type = "ephemeral" }
    assert.same(eph, body.tools[2].cache_control)
    assert.is_nil(body.tools[1].cache_control)
    assert.same(eph, body.system[1].cache_control)
    local tail = body.messages[3].content
    assert.same(eph, tail[3].cache_control)
    assert.is_nil(tail[1].cache_control)
    assert.is_nil(body.messages[1].content[1].cache_control)
    -- long: the same places with a one-hour TTL
    body = build({ cache_retention = "long" })
    local long = { type = "ephemeral", ttl = "1h" }
    assert.same(long, body.tools[2].cache_control)
    assert.same(long, body.system[1].cache_control)
    assert.same(long, body.messages[3].content[3].cache_control)
    -- none: no cache_control anywhere
    local _, _, wire = build({ cache_retention = "none" })
    assert.is_nil(wire:find("cache_control", 1, true))
  end)

  it("encodes the same request from the document's messages, reusing unchanged ones", function()
    local spec = {
      name = "anthropic",
      kind = "anthropic",
      endpoint = "http://127.0.0.1:1/v1/messages",
      model = "claude-sonnet-4-6",
    }
    local doc = document.parse(CHAT)
    for _, retention in ipairs({ "none", "short", "long" }) do
      local params = { cache_retention = retention, thinking = "low" }
      local full = provider.context(spec, document.to_messages(doc), { parameters = params, tools = TOOLS, key = "k" })
      local expected = provider.build(full)
      local ctx = provider.context(
        spec,
        { system = "You are terse.", messages = {} },
        { parameters = params, tools = TOOLS, key = "k" }
      )
      ctx.doc_messages = doc.messages
      local wire, headers = provider.encode(ctx)
      assert.same(vim.json.decode(vim.json.encode(expected)), vim.json.decode(wire), retention)
      assert.equals("k", headers["x-api-key"])
      -- Again with the same message tables: encoded per message, then from the cache.
      for _ = 1, 2 do
        assert.same(vim.json.decode(vim.json.encode(expected)), vim.json.decode((provider.encode(ctx))), retention)
      end
      -- The pieces the send path writes make up the same text.
      local pieces = require("flemma.provider.encode").pieces(ctx)
      assert.is_true(#pieces > 3)
      assert.equals(provider.encode(ctx), table.concat(pieces))
    end
  end)

  it("encodes a changed conversation exactly, reusing the pieces of the messages before the first change", function()
    local spec = {
      name = "anthropic",
      kind = "anthropic",
      endpoint = "http://127.0.0.1:1/v1/messages",
      model = "claude-sonnet-4-6",
    }
    local base = document.parse(CHAT).messages
    -- A pool of message tables: the chat's own and some more of each role.
    local extra = document.parse({
      "@You:",
      "one",
      "@You:",
      "two",
      "@Assistant:",
      "three",
      "@Assistant:",
      "",
      "@You:",
      "four",
      "@System:",
      "sys",
    }).messages
    local pool = vim.list_extend(vim.list_extend({}, base), extra)
    math.randomseed(3)
    local msgs = vim.list_extend({}, base)
    for step = 1, 120 do
      local r = math.random(4)
      local at = math.random(1, #msgs + 1)
      if r == 1 and #msgs > 1 then
        table.remove(msgs, math.min(at, #msgs))
      elseif r == 2 then
        table.insert(msgs, at, pool[math.random(#pool)])
      elseif r == 3 and #msgs > 0 then
        msgs[math.min(at, #msgs)] = pool[math.random(#pool)]
      end -- else: the same messages again
      local retention = ({ "none", "short" })[step % 2 + 1]
      local params = { cache_retention = retention }
      local doc = { messages = msgs }
      local full = provider.context(spec, document.to_messages(doc), { parameters = params, tools = TOOLS, key = "k" })
      local expected = vim.json.decode(vim.json.encode((provider.build(full))))
      local ctx = provider.context(
        spec,
        { system = full.request.system, messages = {} },
        { parameters = params, tools = TOOLS, key = "k" }
      )
      ctx.doc_messages = vim.list_extend({}, msgs)
      assert.same(expected, vim.json.decode((provider.encode(ctx))), "step " .. step)
    end
  end)

  it("maps parameters.thinking to a budget; a number is the budget; temperature only when set", function()
    local cases = {
      { "minimal", 1024 },
      { "low", 4096 },
      { "medium", 10000 },
      { "high", 20000 },
      { "max", 32000 },
      { 5000, 5000 },
    }
    for _, c in ipairs(cases) do
      local body = build({ thinking = c[1] })
      assert.same({ type = "enabled", budget_tokens = c[2] }, body.thinking, tostring(c[1]))
      assert.is_nil(body.temperature)
    end
    local body = build({ thinking = false })
    assert.is_nil(body.thinking)
    assert.is_nil(body.temperature)
    body = build({ temperature = 0.3 })
    assert.equals(0.3, body.temperature)
    -- max_tokens stays above the budget
    body = build({ thinking = 20000, max_tokens = 1000 })
    assert.is_true(body.max_tokens > 20000)
    assert.has_error(function()
      build({ thinking = "huge" })
    end)
  end)

  it("takes parameters.anthropic.thinking_budget over parameters.thinking (through the buffer's parameters)", function()
    require("flemma.core.config").setup({ parameters = { thinking = "low", anthropic = { thinking_budget = 12345 } } })
    local buf = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "Hi" })
    local spec = assert(provider.resolve())
    local ctx = provider.context(spec, document.to_messages(document.get(buf)), { bufnr = buf, tools = {} })
    local body = provider.build(ctx)
    assert.same({ type = "enabled", budget_tokens = 12345 }, body.thinking)
    assert.equals("claude-sonnet-4-6", body.model)
    require("flemma.core.config").setup({})
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("sends thinking without a signature as text, and no empty tool inputs as arrays", function()
    local body, _, wire = build({}, {
      "@You:",
      "Hi",
      "",
      "@Assistant:",
      "<thinking>",
      "from another provider",
      "</thinking>",
      "",
      "**Tool Use:** `now` (`toolu_9`)",
      "",
      "```json",
      "{}",
      "```",
      "",
      "@You:",
      "**Tool Result:** `toolu_9`",
      "",
      "```",
      "```",
    }, {})
    assert.same({
      { type = "text", text = "<thinking>\nfrom another provider\n</thinking>" },
      { type = "tool_use", id = "toolu_9", name = "now", input = vim.empty_dict() },
    }, body.messages[2].content)
    assert.truthy(wire:find('"input":{}', 1, true), wire)
    assert.same({ { type = "tool_result", tool_use_id = "toolu_9" } }, body.messages[3].content)
    assert.is_nil(body.tools)
  end)
end)
