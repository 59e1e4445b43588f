-- Request building of the `openai` (Responses) and `vertex` (Gemini) kinds, key for
-- key, and one conversation switched anthropic -> openai -> vertex -> anthropic: each
-- provider gets its own thinking back signed, the others' as text (never with a
-- foreign signature), and every tool use keeps its result.
local document = require("flemma.chat.document")
local provider = require("flemma.provider")

-- anthropic answered first, then openai, then vertex.
local CHAT = {
  "@System:",
  "You are terse.",
  "",
  "@You:",
  "List the files and read the README.",
  "",
  "@Assistant:",
  '<thinking anthropic:signature="ANTH-SIG==">',
  "Two calls at once.",
  "</thinking>",
  "",
  "Both.",
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
  "```",
  "",
  "**Tool Result:** `toolu_02` (error)",
  "",
  "```",
  "no such file",
  "```",
  "",
  "@Assistant:",
  '<thinking openai:signature="gAAAA-ENCRYPTED">',
  "Look at a.txt.",
  "</thinking>",
  "",
  "**Tool Use:** `read` (`call_A1`)",
  "",
  "```json",
  '{ "path": "a.txt" }',
  "```",
  "",
  "@You:",
  "**Tool Result:** `call_A1`",
  "",
  "```",
  "hello",
  "```",
  "",
  "@Assistant:",
  '<thinking vertex:signature="GEMINI-SIG">',
  "Nothing more to read.",
  "</thinking>",
  "",
  "**Tool Use:** `bash` (`gemini_1`)",
  "",
  "```json",
  "{}",
  "```",
  "",
  "@You:",
  "**Tool Result:** `gemini_1`",
  "",
  "```",
  "done",
  "```",
  "",
  "Summarize.",
}

local TOOLS = {
  {
    name = "bash",
    description = "Runs a command.",
    input_schema = { type = "object", properties = { command = { type = "string" } } },
  },
  {
    name = "read",
    description = "Reads a file.",
    input_schema = { type = "object", properties = { path = { type = "string" } }, required = { "path" } },
    strict = true,
  },
}

local SPECS = {
  anthropic = {
    name = "anthropic",
    kind = "anthropic",
    endpoint = "http://127.0.0.1:1/v1/messages",
    model = "claude-sonnet-4-6",
  },
  openai = { name = "openai", kind = "openai", endpoint = "http://127.0.0.1:1/v1/responses", model = "gpt-5.4" },
  vertex = { name = "vertex", kind = "vertex", endpoint = "http://127.0.0.1:1/v", model = "gemini-3.1-pro-preview" },
}

local function build(kind, params, o)
  o = o or {}
  local request = document.to_messages(document.parse(o.chat or CHAT))
  local ctx = provider.context(SPECS[kind], request, {
    parameters = vim.tbl_extend("force", { cache_retention = "none" }, params or {}),
    tools = o.tools or TOOLS,
    key = o.key,
    bufnr = o.bufnr,
  })
  local body, headers = provider.build(ctx)
  local wire = vim.json.encode(body)
  return vim.json.decode(wire), headers, wire
end

describe("flemma.provider.openai", function()
  it(
    "builds the exact Responses request: items, function calls and outputs, own reasoning, foreign thinking as text",
    function()
      local body, headers = build(
        "openai",
        { thinking = "high", max_tokens = 2000, temperature = 0.5 },
        { key = "sk-o" }
      )
      assert.same({
        model = "gpt-5.4",
        instructions = "You are terse.",
        stream = true,
        store = false,
        max_output_tokens = 2000,
        reasoning = { effort = "high", summary = "auto" },
        include = { "reasoning.encrypted_content" },
        tools = {
          {
            type = "function",
            name = "bash",
            description = "Runs a command.",
            parameters = { type = "object", properties = { command = { type = "string" } } },
          },
          {
            type = "function",
            name = "read",
            description = "Reads a file.",
            parameters = { type = "object", properties = { path = { type = "string" } }, required = { "path" } },
            strict = true,
          },
        },
        input = {
          { role = "user", content = "List the files and read the README." },
          { role = "assistant", content = "<thinking>\nTwo calls at once.\n</thinking>\n\nBoth." },
          { type = "function_call", call_id = "toolu_01", name = "bash", arguments = '{"command":"ls"}' },
          { type = "function_call", call_id = "toolu_02", name = "read", arguments = '{"path":"README.md"}' },
          { type = "function_call_output", call_id = "toolu_01", output = "a.txt" },
          { type = "function_call_output", call_id = "toolu_02", output = "Error: no such file" },
          {
            type = "reasoning",
            summary = { { type = "summary_text", text = "Look at a.txt." } },
            encrypted_content = "gAAAA-ENCRYPTED",
          },
          { type = "function_call", call_id = "call_A1", name = "read", arguments = '{"path":"a.txt"}' },
          { type = "function_call_output", call_id = "call_A1", output = "hello" },
          { role = "assistant", content = "<thinking>\nNothing more to read.\n</thinking>" },
          { type = "function_call", call_id = "gemini_1", name = "bash", arguments = "{}" },
          { type = "function_call_output", call_id = "gemini_1", output = "done" },
          { role = "user", content = "Summarize." },
        },
      }, body)
      assert.same(
        { ["content-type"] = "application/json", accept = "text/event-stream", authorization = "Bearer sk-o" },
        headers
      )
    end
  )

  it("takes the effort from parameters.openai.reasoning first; temperature only without reasoning", function()
    local body = build("openai", { thinking = "low", openai = { reasoning = "minimal" }, temperature = 0.2 })
    assert.same({ effort = "minimal", summary = "auto" }, body.reasoning)
    assert.is_nil(body.temperature)
    body = build("openai", { thinking = false, temperature = 0.2 })
    assert.same({ effort = "none" }, body.reasoning)
    assert.is_nil(body.include)
    assert.equals(0.2, body.temperature)
    body = build("openai", { thinking = "max" })
    assert.equals("xhigh", body.reasoning.effort)
    body = build("openai", {})
    assert.is_nil(body.reasoning)
    local ok, err = pcall(build, "openai", { thinking = "huge" })
    assert.is_false(ok)
    assert.truthy(err:find("`parameters.thinking` should be", 1, true), err)
  end)

  it("sets prompt_cache_key from the buffer's path while caching is on", function()
    local buf = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_buf_set_name(buf, "/tmp/flemma-cache-key.chat")
    local body = build("openai", { cache_retention = "short" }, { bufnr = buf })
    assert.equals("flemma-" .. vim.fn.sha256("/tmp/flemma-cache-key.chat"):sub(1, 32), body.prompt_cache_key)
    assert.is_nil(body.prompt_cache_retention)
    body = build("openai", { cache_retention = "long" }, { bufnr = buf })
    assert.equals("24h", body.prompt_cache_retention)
    body = build("openai", { cache_retention = "none" }, { bufnr = buf })
    assert.is_nil(body.prompt_cache_key)
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("reads error bodies", function()
    local openai = require("flemma.provider.openai")
    assert.same({ "Incorrect API key provided", "invalid_request_error" }, {
      openai.error_message({
        error = { message = "Incorrect API key provided", type = "invalid_request_error", code = "invalid_api_key" },
      }),
    })
  end)
end)

describe("flemma.provider.vertex", function()
  it("builds the exact Gemini request: functionCall / functionResponse parts, own signatures on their parts", function()
    local body, headers = build("vertex", { thinking = "high", max_tokens = 4000, temperature = 1 }, { key = "ya29.t" })
    assert.same({
      systemInstruction = { parts = { { text = "You are terse." } } },
      tools = {
        {
          functionDeclarations = {
            {
              name = "bash",
              description = "Runs a command.",
              parametersJsonSchema = { type = "object", properties = { command = { type = "string" } } },
            },
            {
              name = "read",
              description = "Reads a file.",
              parametersJsonSchema = {
                type = "object",
                properties = { path = { type = "string" } },
                required = { "path" },
              },
            },
          },
        },
      },
      generationConfig = {
        maxOutputTokens = 4000,
        temperature = 1,
        thinkingConfig = { thinkingLevel = "high", includeThoughts = true },
      },
      contents = {
        { role = "user", parts = { { text = "List the files and read the README." } } },
        {
          role = "model",
          parts = {
            { text = "<thinking>\nTwo calls at once.\n</thinking>" },
            { text = "Both." },
            { functionCall = { id = "toolu_01", name = "bash", args = { command = "ls" } } },
            { functionCall = { id = "toolu_02", name = "read", args = { path = "README.md" } } },
          },
        },
        {
          role = "user",
          parts = {
            { functionResponse = { id = "toolu_01", name = "bash", response = { output = "a.txt" } } },
            { functionResponse = { id = "toolu_02", name = "read", response = { error = "no such file" } } },
          },
        },
        {
          role = "model",
          parts = {
            { text = "<thinking>\nLook at a.txt.\n</thinking>" },
            { functionCall = { id = "call_A1", name = "read", args = { path = "a.txt" } } },
          },
        },
        {
          role = "user",
          parts = { { functionResponse = { id = "call_A1", name = "read", response = { output = "hello" } } } },
        },
        {
          role = "model",
          parts = { { functionCall = { id = "gemini_1", name = "bash", args = {} }, thoughtSignature = "GEMINI-SIG" } },
        },
        {
          role = "user",
          parts = {
            { functionResponse = { id = "gemini_1", name = "bash", response = { output = "done" } } },
            { text = "Summarize." },
          },
        },
      },
    }, body)
    assert.same(
      { ["content-type"] = "application/json", accept = "text/event-stream", authorization = "Bearer ya29.t" },
      headers
    )
  end)

  it("maps thinking to a budget on Gemini 2.5 and a level on Gemini 3; vertex.thinking_budget wins", function()
    local vertex = require("flemma.provider.vertex")
    assert.same({ thinkingBudget = 24576, includeThoughts = true }, vertex.thinking_config("high", "gemini-2.5-pro"))
    assert.same({ thinkingBudget = 128 }, vertex.thinking_config(false, "gemini-2.5-pro"))
    assert.same({ thinkingBudget = 0 }, vertex.thinking_config(false, "gemini-2.5-flash"))
    assert.same(
      { thinkingLevel = "low", includeThoughts = true },
      vertex.thinking_config("minimal", "gemini-3.1-pro-preview")
    )
    assert.same(
      { thinkingBudget = 5000, includeThoughts = true },
      vertex.thinking_config(5000, "gemini-3.1-pro-preview")
    )
    assert.is_nil(vertex.thinking_config(nil, "gemini-2.5-pro"))
    local body = build("vertex", { thinking = "low", vertex = { thinking_budget = 777 } })
    assert.same({ thinkingBudget = 777, includeThoughts = true }, body.generationConfig.thinkingConfig)
  end)

  it("reads error bodies, also as a list", function()
    local vertex = require("flemma.provider.vertex")
    local e =
      { error = { code = 403, message = "Permission denied on resource project p.", status = "PERMISSION_DENIED" } }
    assert.same({ "Permission denied on resource project p.", "PERMISSION_DENIED" }, { vertex.error_message(e) })
    assert.same({ "Permission denied on resource project p.", "PERMISSION_DENIED" }, { vertex.error_message({ e }) })
  end)
end)

describe("a conversation switched between providers", function()
  it("keeps every tool pair and sends no foreign signature to anyone", function()
    for kind in pairs(SPECS) do
      local _, _, wire = build(kind, { thinking = "low" })
      for _, sig in ipairs({ "ANTH-SIG==", "gAAAA-ENCRYPTED", "GEMINI-SIG" }) do
        local own = (kind == "anthropic" and sig == "ANTH-SIG==")
          or (kind == "openai" and sig == "gAAAA-ENCRYPTED")
          or (kind == "vertex" and sig == "GEMINI-SIG")
        assert.equals(own, wire:find(sig, 1, true) ~= nil, kind .. " and " .. sig)
      end
      for _, id in ipairs({ "toolu_01", "toolu_02", "call_A1", "gemini_1" }) do
        local _, uses = wire:gsub(vim.pesc('"' .. id .. '"'), "")
        assert.equals(2, uses, kind .. ": the use and the result of " .. id)
      end
    end
  end)

  it("anthropic gets its own signed thinking back and the others' as text", function()
    local body = build("anthropic", {})
    assert.same(
      { type = "thinking", thinking = "Two calls at once.", signature = "ANTH-SIG==" },
      body.messages[2].content[1]
    )
    assert.same({ type = "text", text = "<thinking>\nLook at a.txt.\n</thinking>" }, body.messages[4].content[1])
    assert.same({ type = "text", text = "<thinking>\nNothing more to read.\n</thinking>" }, body.messages[6].content[1])
  end)

  it("thinking_foreign = drop leaves foreign thinking out; preserve uses the unsigned reasoning fields", function()
    local body = build("anthropic", { thinking_foreign = "drop" })
    assert.equals("tool_use", body.messages[4].content[1].type)
    body = build("vertex", { thinking_foreign = "preserve" })
    assert.same({ text = "Two calls at once.", thought = true }, body.contents[2].parts[1])
    body = build("openai", { thinking_foreign = "drop" })
    assert.same({ role = "assistant", content = "Both." }, body.input[2])
    local chat_spec =
      { name = "ollama", kind = "openai_chat", endpoint = "http://127.0.0.1:1/v1/chat/completions", model = "q" }
    local request = document.to_messages(document.parse(CHAT))
    for _, case in ipairs({
      { "text", "<thinking>\nTwo calls at once.\n</thinking>\n\nBoth.", nil },
      { "preserve", "Both.", "Two calls at once." },
    }) do
      local ctx = provider.context(chat_spec, request, { parameters = { thinking_foreign = case[1] }, tools = {} })
      local b = vim.json.decode(vim.json.encode((provider.build(ctx))))
      assert.equals(case[2], b.messages[3].content, case[1])
      assert.equals(case[3], b.messages[3].reasoning_content, case[1])
      assert.is_nil(vim.json.encode(b):find("ANTH-SIG", 1, true))
    end
  end)
end)
