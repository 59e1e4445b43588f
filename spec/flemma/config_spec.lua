local config = require("flemma.core.config")

describe("flemma.core.config", function()
  after_each(function()
    config.setup({})
  end)

  it("has the contract's defaults", function()
    local c = config.setup({})
    assert.equals("anthropic", c.provider)
    assert.same({ "$default" }, c.tools.auto_approve)
    assert.equals(30, c.tools.default_timeout)
    assert.same({ max_lines = 2000, max_bytes = 51200 }, c.tools.truncate)
    assert.is_false(c.sandbox.enabled)
    assert.equals("<C-]>", c.keymaps.send)
    assert.equals(10 * 1024 * 1024, c.attachments.max_bytes)
  end)

  it("merges user options, lists replacing lists", function()
    local c = config.setup({ tools = { auto_approve = { "$readonly" }, default_timeout = 5 } })
    assert.same({ "$readonly" }, c.tools.auto_approve)
    assert.equals(5, c.tools.default_timeout)
    assert.equals(4, c.tools.max_concurrent)
    c = config.setup({ tools = { auto_approve = {} } })
    assert.same({}, c.tools.auto_approve)
  end)

  it("starts from the defaults on each setup", function()
    config.setup({ tools = { default_timeout = 5 } })
    assert.equals(30, config.setup({}).tools.default_timeout)
  end)

  local bad = {
    { { tools = { default_timeout = "30" } }, "`tools.default_timeout` should be a number, not string" },
    {
      { provider = "nope" },
      '`provider` should be one of anthropic, deepseek, llamacpp, lmstudio, moonshot, ollama, openai, openai_chat, openrouter, vertex, vllm, not "nope"',
    },
    { { providers = { mine = { endpoint = "http://x" } } }, "`providers.mine.kind` is missing" },
    { { providers = { mine = { kind = "soap", endpoint = "http://x" } } }, "`providers.mine.kind` should be one of" },
    { { providers = { ollama = { port = 1 } } }, "unknown option `providers.ollama.port`" },
    {
      { providers = { ollama = { headers = { ["X-A"] = 1 } } } },
      "`providers.ollama.headers` should map header names to strings",
    },
    { { sandbox = { enabled = 1 } }, "`sandbox.enabled` should be a boolean, not number" },
    { { sandbox = { polcy = {} } }, "unknown option `sandbox.polcy`" },
    { { bogus = true }, "unknown option `bogus`" },
    { { tools = { cursor_after_result = "top" } }, "`tools.cursor_after_result` should be one of result, stay, next" },
    { { tools = { auto_approve = 3 } }, "`tools.auto_approve` should be a table or function or string, not number" },
    { { parameters = { temperature = 0 / 0 } }, "`parameters.temperature` should be a finite number, not nan" },
    { { parameters = { max_tokens = math.huge } }, "`parameters.max_tokens` should be a finite number, not inf" },
    { { parameters = { timeout = -math.huge } }, "`parameters.timeout` should be a finite number, not -inf" },
    {
      { parameters = { vertex = { thinking_budget = 1 / 0 } } },
      "`parameters.vertex.thinking_budget` should be a finite number, not inf",
    },
    { { tools = { default_timeout = 0 / 0 } }, "`tools.default_timeout` should be a finite number, not nan" },
    { { attachments = { max_bytes = 0 } }, "`attachments.max_bytes` should be a whole number of bytes >= 1, not 0" },
    {
      { attachments = { max_bytes = 1.5 } },
      "`attachments.max_bytes` should be a whole number of bytes >= 1, not 1.5",
    },
    {
      { attachments = { max_bytes = "1MB" } },
      '`attachments.max_bytes` should be a whole number of bytes >= 1, not "1MB"',
    },
  }
  for _, case in ipairs(bad) do
    it("refuses " .. case[2], function()
      local ok, err = pcall(config.setup, case[1])
      assert.is_false(ok)
      assert.matches("(flemma) " .. case[2], err, 1, true)
    end)
  end

  it("has the built-in named providers and accepts new ones", function()
    local c = config.setup({
      provider = "mine",
      providers = { mine = { kind = "openai_chat", endpoint = "http://h/v1/chat/completions", model = "m" } },
    })
    assert.equals("mine", c.provider)
    assert.equals("openai_chat", c.providers.ollama.kind)
    assert.equals("http://127.0.0.1:11434/v1/chat/completions", c.providers.ollama.endpoint)
    assert.is_nil(c.providers.ollama.api_key_env)
    assert.equals("DEEPSEEK_API_KEY", c.providers.deepseek.api_key_env)
    assert.equals(3, c.parameters.max_retries)
    assert.equals("ollama", config.setup({ provider = "ollama" }).provider)
  end)

  it("accepts per-tool subtrees under tools", function()
    local c = config.setup({ tools = { export = { max_size = 10 } } })
    assert.same({ max_size = 10 }, c.tools.export)
  end)
end)
