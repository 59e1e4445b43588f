-- Seeing cost: :Flemma usage per provider and model, :Flemma usage:estimate against
-- the loopback server (real curl), the statusline and its lualine component.
local helpers = require("spec.support.helpers")
local usage = require("flemma.provider.usage")

local KEY = "sk-estimate-" .. tostring(math.random(1e9))
local h, notes

local function record(provider, kind, model, raw)
  return usage.record(raw, { kind = kind, provider = provider, model = model })
end

local function chat(lines)
  return helpers.edit(helpers.tmpdir() .. "/usage.chat", lines)
end

describe("usage", function()
  before_each(function()
    usage._reset()
    h = helpers.send_harness({ server = false })
    notes = h.notes
  end)
  after_each(function()
    usage._reset()
    h.teardown()
  end)

  it(":Flemma usage shows the last request, the buffer and the session per provider and model", function()
    local a = chat({ "@You:", "hi" })
    usage.add(
      a,
      record(
        "anthropic",
        "anthropic",
        "claude-sonnet-4-6",
        { input_tokens = 1000, output_tokens = 200, cache_read_tokens = 3000 }
      )
    )
    usage.add(
      a,
      record(
        "anthropic",
        "anthropic",
        "claude-sonnet-4-6",
        { input_tokens = 500, output_tokens = 100, cache_read_tokens = 3500, cache_write_tokens = 0 }
      )
    )
    local b = vim.api.nvim_create_buf(true, false)
    usage.add(b, record("ollama", "openai_chat", "qwen3", { input_tokens = 50, output_tokens = 10 }))
    vim.api.nvim_set_current_buf(a)
    vim.cmd("Flemma usage")
    local msg = notes[#notes].msg
    assert.equals(
      table.concat({
        "(flemma) last: anthropic claude-sonnet-4-6: 500 in · 100 out · cache 3,500 read, 0 written · $0.0040 · cache hit 88%",
        "buffer: 2 requests · 1,500 in · 300 out · cache 6,500 read, 0 written · $0.01 · cache hit 81%",
        "session: 3 requests · 1,550 in · 310 out · cache 6,500 read, 0 written · $0.01 (some prices unknown) · cache hit 81%",
        "  anthropic claude-sonnet-4-6: 2 requests · 1,500 in · 300 out · cache 6,500 read, 0 written · $0.01 · cache hit 81%",
        "  ollama qwen3: 1 request · 50 in · 10 out · cost unknown",
      }, "\n"),
      msg
    )
    assert.equals(0.8125, usage.cache_hit_ratio(usage.get(a).buffer))
    assert.equals(0, usage.cache_hit_ratio(usage.get(b).last))
  end)

  describe("statusline", function()
    it("gives provider, model, thinking level, running tools and the session cost", function()
      require("flemma").setup({ parameters = { thinking = "high" } })
      local buf = chat({ "@You:", "hi" })
      assert.equals("anthropic claude-sonnet-4-6 · thinking high · $0.0000", require("flemma").statusline())
      usage.add(
        buf,
        record("anthropic", "anthropic", "claude-sonnet-4-6", { input_tokens = 12000, output_tokens = 1000 })
      )
      vim.cmd("Flemma switch openai gpt-5.4 thinking=")
      assert.equals("openai gpt-5.4 · $0.05", require("flemma").statusline())
      local data = require("flemma.ui.statusline").data(buf)
      assert.same({ provider = "openai", model = "gpt-5.4", tools = {}, sending = false, cost = 0.051 }, data)
    end)

    it("names tools running in the buffer", function()
      local tools = require("flemma.tools")
      local release
      tools.register("spec_wait", {
        name = "spec_wait",
        description = "waits",
        input_schema = { type = "object", properties = {} },
        async = true,
        execute = function(_, _, cb)
          release = cb
          return function() end
        end,
      })
      require("flemma").setup({ tools = { auto_approve = { "spec_wait" }, autopilot = { enabled = false } } })
      local buf = chat({
        "@You:",
        "go",
        "",
        "@Assistant:",
        "**Tool Use:** `spec_wait` (`toolu_w1`)",
        "```json",
        "{}",
        "```",
      })
      require("flemma.cycle").advance(buf)
      helpers.wait_for(function()
        return #require("flemma.cycle").running(buf) > 0
      end, 3000, "the tool never ran")
      assert.truthy(
        require("flemma").statusline(buf):find("running spec_wait", 1, true),
        require("flemma").statusline(buf)
      )
      require("flemma.cycle").cancel(buf)
      tools.unregister("spec_wait")
      assert.is_not_nil(release)
    end)

    it("is wrapped by the lualine component, empty outside chat buffers", function()
      package.loaded["lualine.components.flemma"] = nil
      local component = require("lualine.components.flemma")
      chat({ "@You:", "hi" })
      assert.equals(require("flemma").statusline(), component.update_status({ options = {} }))
      vim.cmd("enew")
      assert.equals("", component.update_status({ options = {} }))
      assert.equals(require("flemma").statusline(), component.update_status({ options = { all_buffers = true } }))
    end)
  end)
end)

describe(":Flemma usage:estimate", function()
  local server
  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server, notes = h.server, h.notes
    require("flemma").setup({
      provider = "test",
      model = "claude-sonnet-4-6",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { cache_retention = "none", max_tokens = 1000, temperature = 0.5 },
    })
  end)
  after_each(function()
    h.teardown()
  end)

  local function wait_note(pattern)
    helpers.wait_for(function()
      for _, n in ipairs(notes) do
        if n.msg:find(pattern, 1, true) then
          return true
        end
      end
    end, 10000, "no notification with " .. pattern .. "; got:\n" .. table.concat(
      vim.tbl_map(function(n)
        return n.msg
      end, notes),
      "\n"
    ))
  end

  it("counts the buffer's input tokens with count_tokens and prices them", function()
    server:script({ { status = 200, body = '{"input_tokens":123456}', content_type = "application/json" } })
    chat({ "@System:", "Be brief.", "", "@You:", "Hello" })
    vim.cmd("Flemma usage:estimate")
    wait_note("input tokens")
    assert.equals(
      "(flemma) test claude-sonnet-4-6: 123,456 input tokens · about $0.37 to send (at $3 per million input tokens, before output and caching)",
      notes[#notes].msg
    )
    local reqs = server:requests()
    assert.equals(1, #reqs)
    assert.equals("/v1/messages/count_tokens", reqs[1].path)
    assert.equals(KEY, reqs[1].headers["x-api-key"])
    assert.equals("2023-06-01", reqs[1].headers["anthropic-version"])
    local body = reqs[1].json
    assert.equals("claude-sonnet-4-6", body.model)
    assert.same({ { type = "text", text = "Be brief." } }, body.system)
    assert.same({ { role = "user", content = { { type = "text", text = "Hello" } } } }, body.messages)
    assert.is_nil(body.stream)
    assert.is_nil(body.max_tokens)
    assert.is_nil(body.temperature)
    -- nothing was added to the usage
    assert.equals(0, usage.get().session.requests)
  end)

  it("counts the conversation as it would be sent: templates expanded, or nothing on a template error", function()
    server:script({ { status = 200, body = '{"input_tokens":7}', content_type = "application/json" } })
    chat({ "```lua", 'return { who = "Ada" }', "```", "@You:", "Hello {{ who }}{% for i = 1, 2 do %}!{% end %}" })
    vim.cmd("Flemma usage:estimate")
    wait_note("input tokens")
    local body = server:requests()[1].json
    assert.same({ { role = "user", content = { { type = "text", text = "Hello Ada!!" } } } }, body.messages)

    server:script({ { status = 200, body = '{"input_tokens":7}', content_type = "application/json" } })
    chat({ "@You:", "Hello {{ nobody }}" })
    vim.cmd("Flemma usage:estimate")
    wait_note("nothing counted")
    assert.matches("line 2: template: the value of this {{ }} is nil", notes[#notes].msg)
    assert.equals(0, #server:requests())
  end)

  it("counts the files a message references, or nothing when one is missing", function()
    server:script({ { status = 200, body = '{"input_tokens":9}', content_type = "application/json" } })
    local buf = chat({ "@You:", "Read @./notes.txt" })
    local dir = vim.fs.dirname(vim.api.nvim_buf_get_name(buf))
    helpers.write_file(dir .. "/notes.txt", "some notes\n")
    vim.cmd("Flemma usage:estimate")
    wait_note("input tokens")
    local body = server:requests()[1].json
    assert.same({
      { type = "text", text = "Read @./notes.txt" },
      { type = "text", text = "File: ./notes.txt\n```\nsome notes\n```" },
    }, body.messages[1].content)

    server:script({ { status = 200, body = '{"input_tokens":9}', content_type = "application/json" } })
    chat({ "@You:", "Read @./gone.txt" })
    vim.cmd("Flemma usage:estimate")
    wait_note("nothing counted")
    assert.matches("line 2: file @./gone.txt not found", notes[#notes].msg)
    assert.equals(0, #server:requests())
  end)

  it("reports the provider's error", function()
    server:script({
      {
        status = 400,
        body = '{"type":"error","error":{"type":"invalid_request_error","message":"messages: empty"}}',
        content_type = "application/json",
      },
    })
    chat({ "@You:", "Hello" })
    vim.cmd("Flemma usage:estimate")
    wait_note("counting tokens failed")
    assert.equals('(flemma) test: counting tokens failed: HTTP 400: "messages: empty"', notes[#notes].msg)
    assert.equals(vim.log.levels.ERROR, notes[#notes].level)
  end)

  it("uses OpenAI's responses/input_tokens and Gemini's countTokens", function()
    require("flemma").setup({
      provider = "oai",
      model = "gpt-5.4",
      providers = {
        oai = { kind = "openai", endpoint = server:url("/v1/responses"), api_key_env = "FLEMMA_SPEC_KEY" },
        gem = {
          kind = "vertex",
          endpoint = server:url("/v1/models/{model}:streamGenerateContent?alt=sse"),
          api_key_env = "FLEMMA_SPEC_KEY",
        },
      },
      parameters = { cache_retention = "none" },
    })
    server:script({
      {
        status = 200,
        body = '{"object":"response.input_tokens","input_tokens":2000}',
        content_type = "application/json",
      },
    })
    chat({ "@System:", "Be brief.", "", "@You:", "Hello" })
    vim.cmd("Flemma usage:estimate")
    wait_note("input tokens")
    assert.equals(
      "(flemma) oai gpt-5.4: 2,000 input tokens · about $0.0050 to send (at $2.5 per million input tokens, before output and caching)",
      notes[#notes].msg
    )
    local req = server:requests()[1]
    assert.equals("/v1/responses/input_tokens", req.path)
    assert.equals("Bearer " .. KEY, req.headers["authorization"])
    assert.same({ "input", "instructions", "model", "tools" }, vim.fn.sort(vim.tbl_keys(req.json)))
    assert.equals("gpt-5.4", req.json.model)
    assert.equals("Be brief.", req.json.instructions)
    assert.same({ { role = "user", content = "Hello" } }, req.json.input)
    -- the buffer's tools, in the registry's order (`ask` and `bash` first)
    local sent = vim.tbl_map(function(t)
      return t.name
    end, req.json.tools)
    assert.same(require("flemma.tools").list(), sent)
    assert.is_true(vim.tbl_contains(sent, "bash"))

    h.forget_notes()
    vim.cmd("Flemma switch gem gemini-2.5-flash")
    server:script({
      { status = 200, body = '{"totalTokens":31,"totalBillableCharacters":90}', content_type = "application/json" },
    })
    vim.cmd("Flemma usage:estimate")
    wait_note("input tokens")
    assert.truthy(notes[#notes].msg:find("gem gemini-2.5-flash: 31 input tokens", 1, true), notes[#notes].msg)
    req = server:requests()[1]
    assert.equals("/v1/models/gemini-2.5-flash:countTokens", req.path)
    assert.same({ parts = { { text = "Be brief." } } }, req.json.systemInstruction)
    assert.same({ { role = "user", parts = { { text = "Hello" } } } }, req.json.contents)
    assert.same(
      require("flemma.tools").list(),
      vim.tbl_map(function(t)
        return t.name
      end, req.json.tools[1].functionDeclarations)
    )
    assert.is_nil(req.json.generationConfig)
  end)

  it("says when the provider's API has no counting endpoint", function()
    require("flemma").setup({ provider = "ollama", model = "qwen3" })
    chat({ "@You:", "Hello" })
    vim.cmd("Flemma usage:estimate")
    wait_note("no token-counting endpoint")
    assert.equals(0, #server:requests())
  end)
end)

describe("usage.format_fit", function()
  local u = require("flemma.provider.usage")
  local rec = u.record({ input_tokens = 1200, output_tokens = 42, cache_read_tokens = 900, cache_write_tokens = 300 }, {
    kind = "anthropic",
    provider = "anthropic",
    model = "claude-sonnet-4-6",
  })
  local labels = { "anthropic claude-sonnet-4-6", "claude-sonnet-4-6" }

  it("gives the whole line when it fits", function()
    assert.equals("anthropic claude-sonnet-4-6: " .. u.format(rec), u.format_fit(rec, labels, 200))
  end)

  it("drops details, then the label, then cuts, so the line always fits the width", function()
    for width = 10, 120 do
      local line = u.format_fit(rec, labels, width)
      assert.is_true(vim.fn.strdisplaywidth(line) <= width, ("%d: %s"):format(width, line))
    end
    assert.matches("^claude%-sonnet%-4%-6: 1,200 in · 42 out · %$", u.format_fit(rec, labels, 50))
    assert.matches("^1,200 in · 42 out · %$", u.format_fit(rec, labels, 30))
  end)
end)
