local document = require("flemma.chat.document")
local provider = require("flemma.provider")

local CHAT = {
  "@System:",
  "You are terse.",
  "",
  "@You:",
  "List the files and read the README.",
  "",
  "@Assistant:",
  "<thinking>",
  "Two calls.",
  "</thinking>",
  "",
  "Both at once.",
  "",
  "**Tool Use:** `bash` (`call_1`)",
  "",
  "```json",
  '{ "command": "ls" }',
  "```",
  "",
  "**Tool Use:** `read` (`call_2`)",
  "",
  "```json",
  '{ "path": "README.md" }',
  "```",
  "",
  "@You:",
  "**Tool Result:** `call_1`",
  "",
  "```",
  "a.txt",
  "```",
  "",
  "**Tool Result:** `call_2` (error)",
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
}

local function build(params, key)
  local spec =
    { name = "ollama", kind = "openai_chat", endpoint = "http://127.0.0.1:11434/v1/chat/completions", model = "qwen3" }
  local request = document.to_messages(document.parse(CHAT))
  local ctx = provider.context(spec, request, { parameters = params or {}, tools = TOOLS, key = key })
  local body, headers = provider.build(ctx)
  return vim.json.decode(vim.json.encode(body)), headers
end

describe("flemma.provider.openai_chat", function()
  it("builds the exact request: tool_calls, tool messages, reasoning_content, include_usage", function()
    local body, headers = build()
    assert.same({
      model = "qwen3",
      stream = true,
      stream_options = { include_usage = true },
      tools = {
        {
          type = "function",
          ["function"] = {
            name = "bash",
            description = "Runs a command.",
            parameters = { type = "object", properties = { command = { type = "string" } }, required = { "command" } },
          },
        },
      },
      messages = {
        { role = "system", content = "You are terse." },
        { role = "user", content = "List the files and read the README." },
        {
          role = "assistant",
          content = "Both at once.",
          reasoning_content = "Two calls.",
          tool_calls = {
            { id = "call_1", type = "function", ["function"] = { name = "bash", arguments = '{"command":"ls"}' } },
            { id = "call_2", type = "function", ["function"] = { name = "read", arguments = '{"path":"README.md"}' } },
          },
        },
        { role = "tool", tool_call_id = "call_1", content = "a.txt" },
        { role = "tool", tool_call_id = "call_2", content = "Error: no such file" },
        { role = "user", content = "Thanks." },
      },
    }, body)
    assert.same({ ["content-type"] = "application/json", accept = "text/event-stream" }, headers)
  end)

  it("sends the key as a bearer token, and max_tokens, temperature, reasoning_effort only when set", function()
    local body, headers = build({ max_tokens = 100, temperature = 0.5, thinking = "high" }, "sk-x")
    assert.equals("Bearer sk-x", headers.authorization)
    assert.equals(100, body.max_tokens)
    assert.equals(0.5, body.temperature)
    assert.equals("high", body.reasoning_effort)
    body = build({ thinking = false })
    assert.is_nil(body.max_tokens)
    assert.is_nil(body.temperature)
    assert.is_nil(body.reasoning_effort)
  end)

  it('resolves the built-in named providers: provider = "ollama" just works', function()
    local config = require("flemma.core.config")
    config.setup({ provider = "ollama", model = "qwen3" })
    local spec = assert(provider.resolve())
    assert.same({
      name = "ollama",
      kind = "openai_chat",
      endpoint = "http://127.0.0.1:11434/v1/chat/completions",
      model = "qwen3",
    }, spec)
    assert.is_nil(provider.key(spec))
    config.setup({ provider = "deepseek" })
    spec = assert(provider.resolve())
    assert.equals("deepseek-chat", spec.model)
    local saved = vim.env.DEEPSEEK_API_KEY
    vim.env.DEEPSEEK_API_KEY = nil
    local ok, err = pcall(provider.key, spec)
    assert.is_false(ok)
    assert.truthy(err:find("set the environment variable DEEPSEEK_API_KEY", 1, true), err)
    vim.env.DEEPSEEK_API_KEY = saved
    -- A local server without a model says which option to set.
    config.setup({ provider = "llamacpp" })
    local none, why = provider.resolve()
    assert.is_nil(none)
    assert.truthy(why:find("set `model`", 1, true), why)
    config.setup({})
  end)
end)
