-- Frontmatter that selects the provider, model and parameters of one buffer
-- (`flemma.opt.provider`, `flemma.opt.model`, `$presets`): real chat buffers, <C-]>,
-- real curl against two loopback servers (one per provider), assertions on the
-- requests each server received, the buffer text, diagnostics, the statusline,
-- :Flemma status, :Flemma switch, :Flemma usage:estimate and :checkhealth.
local helpers = require("spec.support.helpers")
local server_mod = require("spec.support.llm_server")
local frontmatter = require("flemma.chat.frontmatter")

local KEY = "sk-fm-provider-" .. tostring(math.random(1e9))

local press, text = helpers.press, helpers.text

local function chat(name, lines)
  return helpers.edit(helpers.tmpdir() .. "/" .. name .. ".chat", lines)
end

-- A chat whose frontmatter is `code` (lines of Lua).
local function lua_chat(name, code, question)
  local lines = { "```lua" }
  vim.list_extend(lines, code)
  vim.list_extend(lines, { "```", "@You:", question or "Hello" })
  return chat(name, lines)
end

describe("frontmatter selecting the provider", function()
  local hosted, loc, h, notes

  local function configure(extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "ant",
      providers = {
        ant = { kind = "anthropic", endpoint = hosted:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        ant2 = { kind = "anthropic", endpoint = loc:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        ["local"] = { kind = "openai_chat", endpoint = loc:url("/v1/chat/completions") },
      },
      presets = {
        ["$coder"] = "local qwen3-coder temperature=0.2",
        ["$deep"] = {
          provider = "ant",
          model = "claude-opus-4-6",
          parameters = { thinking = "high", max_tokens = 30000 },
        },
        ["$plain"] = "ant thinking=",
        ["$patient"] = "ant2 claude-haiku-4-5 max_retries=1",
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30, thinking = "low" },
      tools = { autopilot = { enabled = false } },
    }, extra or {}))
  end

  local function messages(level)
    local out = {}
    for _, n in ipairs(notes) do
      if level == nil or n.level == level then
        out[#out + 1] = n.msg
      end
    end
    return table.concat(out, "\n")
  end

  -- One pair of servers for the file (a python start each test is slow on a
  -- loaded machine); each test starts with empty scripts and no requests.
  setup(function()
    hosted = server_mod.start()
    loc = server_mod.start()
  end)
  teardown(function()
    hosted:stop()
    loc:stop()
  end)

  before_each(function()
    hosted:script({})
    loc:script({})
    h = helpers.send_harness({ key = KEY, server = false, timeout = 15000 })
    notes = h.notes
    require("flemma.provider.usage")._reset()
    configure()
  end)

  after_each(function()
    h.teardown()
  end)

  it("sends a buffer to the provider and model its frontmatter names; another buffer keeps the global one", function()
    hosted:script({ { fixture = "anthropic_text.sse", chunk_seed = 3, max_chunk = 11 } })
    loc:script({ { fixture = "openai_chat_text.sse", chunk_seed = 5, max_chunk = 7 } })

    local a = lua_chat(
      "a",
      { 'flemma.opt.provider = "local"', 'flemma.opt.model = "qwen3"', "flemma.opt.max_tokens = 321" },
      "Hi local"
    )
    local b = chat("b", { "@You:", "Hi hosted" })

    vim.api.nvim_set_current_buf(a)
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    vim.api.nvim_set_current_buf(b)
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)

    local got_loc, got_hosted = loc:requests(), hosted:requests()
    assert.equals(1, #got_loc)
    assert.equals(1, #got_hosted)
    -- Buffer a: the OpenAI-compatible server, its model, its parameters, no key.
    assert.equals("/v1/chat/completions", got_loc[1].path)
    assert.equals("qwen3", got_loc[1].json.model)
    assert.equals(321, got_loc[1].json.max_tokens)
    assert.equals("Hi local", got_loc[1].json.messages[#got_loc[1].json.messages].content)
    assert.is_nil(got_loc[1].headers.authorization)
    assert.is_nil(got_loc[1].headers["x-api-key"])
    -- Buffer b: the global provider with its default model and the key.
    assert.equals("/v1/messages", got_hosted[1].path)
    assert.equals("claude-sonnet-4-6", got_hosted[1].json.model)
    assert.equals(KEY, got_hosted[1].headers["x-api-key"])
    assert.are_not.equal(321, got_hosted[1].json.max_tokens)
    assert.is_nil(got_hosted[1].body:find("Hi local", 1, true))

    assert.truthy(text(a):find("Hi! How can I help?", 1, true))
    assert.truthy(text(b):find("Second line ends here.", 1, true))
    assert.is_nil(text(b):find("How can I help?", 1, true))

    -- The usage line after each answer names the provider that answered.
    local info = messages(vim.log.levels.INFO)
    assert.matches("local qwen3", info, 1, true)
    assert.matches("ant claude%-sonnet%-4%-6", info)
  end)

  it("takes a $preset in flemma.opt.provider: its provider, model and parameters, the buffer's own on top", function()
    loc:script({ { fixture = "openai_chat_text.sse" } })
    local a = lua_chat("preset", {
      'flemma.opt.provider = "$coder"',
      'assert(flemma.opt.model == "qwen3-coder" and flemma.opt.temperature == 0.2)',
      "flemma.opt.max_tokens = 77",
    })
    assert.same({ provider = "local", model = "qwen3-coder", preset = "$coder" }, frontmatter.selection(a))
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    local req = loc:requests()[1]
    assert.equals("/v1/chat/completions", req.path)
    assert.equals("qwen3-coder", req.json.model)
    assert.equals(0.2, req.json.temperature)
    assert.equals(77, req.json.max_tokens)
    assert.equals(0, #hosted:requests())
  end)

  it("takes provider, model and a $preset from JSON frontmatter (model after the preset wins)", function()
    loc:script({ { fixture = "openai_chat_text.sse" } })
    local a = chat("json", { "```json", '{ "model": "qwen3-small", "provider": "$coder" }', "```", "@You:", "Hi" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    local req = loc:requests()[1]
    assert.equals("qwen3-small", req.json.model)
    assert.equals(0.2, req.json.temperature)
    assert.same({ provider = "local", model = "qwen3-small", preset = "$coder" }, frontmatter.selection(a))
  end)

  it("applies a table preset to the request and a preset's `key=` clears the parameter", function()
    hosted:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
    local a = lua_chat("deep", { 'flemma.opt.provider = "$deep"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    local req = hosted:requests()[1]
    assert.equals("claude-opus-4-6", req.json.model)
    assert.equals(30000, req.json.max_tokens)
    assert.same({ type = "enabled", budget_tokens = 20000 }, req.json.thinking) -- "high"

    -- "$plain" clears the configured thinking = "low": no thinking in the request.
    vim.cmd("silent! %bwipeout!")
    hosted:script({ { fixture = "anthropic_text.sse" } })
    local b = lua_chat("plain", { 'flemma.opt.provider = "$plain"', "assert(flemma.opt.thinking == nil)" })
    assert.is_nil(frontmatter.parameters(b, "anthropic").thinking)
    assert.equals("low", require("flemma.core.config").get().parameters.thinking)
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    assert.is_nil(hosted:requests()[1].json.thinking)
    assert.is_true(vim.api.nvim_buf_is_valid(b) and a ~= b)
  end)

  it("gives a model set without a provider to the active provider", function()
    hosted:script({ { fixture = "anthropic_text.sse" } })
    lua_chat("model_only", { 'flemma.opt.model = "claude-haiku-4-5"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.equals("claude-haiku-4-5", hosted:requests()[1].json.model)
  end)

  describe("names that do not exist", function()
    local cases = {
      {
        { 'flemma.opt.provider = "locl"' },
        2,
        "frontmatter line 2: `flemma.opt.provider`: unknown provider `locl`; did you mean `local`? (providers: ant, ant2, ",
      },
      {
        { "local x = 1", 'flemma.opt.provider = "$codr"' },
        3,
        "frontmatter line 3: `flemma.opt.provider`: unknown preset `$codr`; did you mean `$coder`? (presets: $coder, $deep, $patient, $plain)",
      },
      {
        { 'flemma.opt.model = "claude-sonet-4-6"' },
        2,
        "frontmatter line 2: `flemma.opt.model`: unknown model `claude-sonet-4-6` for ant; did you mean `claude-sonnet-4-6`?",
      },
      -- The model is checked against the provider set after it.
      {
        { 'flemma.opt.model = "qwen3"', 'flemma.opt.provider = "ant2"' },
        2,
        "frontmatter line 2: `flemma.opt.model`: unknown model `qwen3` for ant2",
      },
      {
        { 'flemma.opt.provider = "local"' },
        2,
        "frontmatter line 2: `flemma.opt.provider`: local has no default model: set `flemma.opt.model` too",
      },
      {
        { "flemma.opt.provider = 42" },
        2,
        "frontmatter line 2: `flemma.opt.provider` should be a provider name or a $preset, not number",
      },
    }
    for _, case in ipairs(cases) do
      it("stops the send with a diagnostic: " .. table.concat(case[1], "; "), function()
        local buf = lua_chat("bad", case[1])
        press("<C-]>")
        helpers.wait_for(function()
          return #vim.diagnostic.get(buf) > 0
        end, 5000, "no diagnostic")
        local d = vim.diagnostic.get(buf)[1]
        assert.equals(case[2] - 1, d.lnum)
        assert.equals(vim.diagnostic.severity.ERROR, d.severity)
        assert.equals(case[3], d.message:sub(1, #case[3]))
        assert.matches(vim.pesc(case[3]), messages(vim.log.levels.ERROR))
        -- Nothing went anywhere, and the buffer is as it was.
        vim.wait(200)
        assert.equals(0, #hosted:requests())
        assert.equals(0, #loc:requests())
        assert.is_nil(text(buf):find("@Assistant:", 1, true))
        -- The statusline does not pretend the global provider would answer.
        assert.equals(("frontmatter error (line %d) · $0.0000"):format(case[2]), require("flemma").statusline(buf))
        -- Nor does the send path, called directly.
        local spec, err = require("flemma.provider").resolve_buffer(buf)
        assert.is_nil(spec)
        assert.equals(case[3], err:sub(1, #case[3]))
      end)
    end
  end)

  describe("transport settings", function()
    local cases = {
      { 'flemma.opt.providers = { ["local"] = { endpoint = "http://evil.example" } }', "`flemma.opt.providers`" },
      { 'flemma.opt.endpoint = "http://evil.example"', "`flemma.opt.endpoint`" },
      { 'flemma.opt.headers = { ["x-api-key"] = "stolen" }', "`flemma.opt.headers`" },
      { 'flemma.opt.api_key_env = "OTHER"', "`flemma.opt.api_key_env`" },
      { 'flemma.opt.anthropic.endpoint = "http://evil.example"', "`flemma.opt.anthropic.endpoint`" },
      { 'flemma.opt.vertex.location = "evil.example/#"', "`flemma.opt.vertex.location`" },
      { 'flemma.opt.vertex = { project_id = "someone-elses" }', "`flemma.opt.vertex.project_id`" },
    }
    for _, case in ipairs(cases) do
      it("refuses " .. case[1] .. " and sends nothing", function()
        local buf = lua_chat("transport", { 'flemma.opt.provider = "ant2"', case[1] })
        local _, err = frontmatter.get(buf)
        assert.is_string(err)
        assert.equals("frontmatter line 3: " .. case[2], err:sub(1, #("frontmatter line 3: " .. case[2])))
        assert.matches(
          "cannot be set from frontmatter: a chat file must not choose where the conversation and your keys are sent",
          err,
          1,
          true
        )
        press("<C-]>")
        vim.wait(300)
        assert.equals(0, #hosted:requests())
        assert.equals(0, #loc:requests())
        assert.equals(2, vim.diagnostic.get(buf)[1].lnum)
      end)
    end

    it("refuses API keys with the credentials message", function()
      local buf = lua_chat("key", { 'flemma.opt.anthropic.api_key = "sk-x"' })
      local _, err = frontmatter.get(buf)
      assert.matches("^frontmatter line 2: ", err)
      assert.matches("api_key", err, 1, true)
    end)
  end)

  it("keeps the frontmatter's provider after :Flemma switch, and says so; other buffers switch", function()
    local a = lua_chat("pinned", { 'flemma.opt.provider = "local"', 'flemma.opt.model = "qwen3"' })
    local b = chat("free", { "@You:", "Hi" })
    vim.api.nvim_set_current_buf(a)
    vim.cmd("Flemma switch ant2 claude-haiku-4-5")
    local warned = messages(vim.log.levels.WARN)
    assert.matches(
      "this buffer's frontmatter selects local qwen3, and the frontmatter wins: this buffer keeps it, other buffers switch; edit `flemma.opt.provider`",
      warned,
      1,
      true
    )
    assert.equals("local", require("flemma.provider").resolve_buffer(a).name)
    local spec_b = require("flemma.provider").resolve_buffer(b)
    assert.equals("ant2", spec_b.name)
    assert.equals("claude-haiku-4-5", spec_b.model)

    loc:script({ { fixture = "openai_chat_text.sse" }, { fixture = "anthropic_text.sse" } })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    vim.api.nvim_set_current_buf(b)
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    local reqs = loc:requests()
    assert.equals("/v1/chat/completions", reqs[1].path)
    assert.equals("qwen3", reqs[1].json.model)
    assert.equals("/v1/messages", reqs[2].path)
    assert.equals("claude-haiku-4-5", reqs[2].json.model)
    assert.equals(0, #hosted:requests())

    -- Switching from a buffer without a selection says nothing of frontmatter.
    h.forget_notes()
    vim.cmd("Flemma switch ant")
    assert.is_nil(messages():find("frontmatter", 1, true))
  end)

  it("warns when a switch makes a model-only frontmatter fail", function()
    lua_chat("model_only", { 'flemma.opt.model = "claude-haiku-4-5"' })
    vim.cmd("Flemma switch local qwen3")
    -- claude-haiku-4-5 goes to whatever the active provider is: local accepts any name.
    assert.is_nil(messages(vim.log.levels.WARN):find("fails", 1, true))
    lua_chat("model_only2", { "", 'flemma.opt.model = "qwen3"' })
    vim.cmd("Flemma switch ant")
    assert.matches(
      "this buffer sends nothing while its frontmatter fails: frontmatter line 3: `flemma.opt.model`: unknown model `qwen3` for ant",
      messages(vim.log.levels.WARN),
      1,
      true
    )
  end)

  it("names the buffer's provider in b:flemma_status and retries with its preset's max_retries", function()
    loc:script({
      {
        status = 429,
        headers = { ["retry-after-ms"] = "400" },
        body = '{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}',
      },
      { fixture = "anthropic_text.sse" },
    })
    local a = lua_chat("retry", { 'flemma.opt.provider = "$patient"' })
    press("<C-]>")
    local seen
    helpers.wait_for(function()
      seen = vim.b[a].flemma_status
      return seen ~= nil and seen:find("retry", 1, true) ~= nil
    end, 5000, "no retry status")
    assert.matches("^ant2: HTTP 429, retry 1/1 in 0%.4s$", seen)
    assert.equals("completed", h.wait_finished(1).status)
    local reqs = loc:requests()
    assert.equals(2, #reqs)
    assert.equals("claude-haiku-4-5", reqs[2].json.model)
    assert.equals(0, #hosted:requests())
  end)

  it("shows the buffer's provider in the statusline and the lualine component", function()
    local a = lua_chat("sl", { 'flemma.opt.provider = "$deep"' })
    local b = chat("sl2", { "@You:", "Hi" })
    local c =
      lua_chat("sl3", { 'flemma.opt.provider = "local"', 'flemma.opt.model = "qwen3"', "flemma.opt.thinking = false" })
    assert.equals("ant claude-opus-4-6 · thinking high · $0.0000", require("flemma").statusline(a))
    assert.equals("ant claude-sonnet-4-6 · thinking low · $0.0000", require("flemma").statusline(b))
    assert.equals("local qwen3 · $0.0000", require("flemma").statusline(c))
    local lualine = require("lualine.components.flemma")
    vim.api.nvim_set_current_buf(c)
    assert.equals("local qwen3 · $0.0000", lualine.update_status({ options = {} }))

    -- While the request waits for the server, b:flemma_status and the statusline are the buffer's.
    loc:script({ { fixture = "openai_chat_text.sse", delay_ms = 150, max_chunk = 400, chunk_seed = 1 } })
    press("<C-]>")
    helpers.wait_for(function()
      return require("flemma").statusline(c):find("sending", 1, true) ~= nil
    end, 5000, "never sending")
    assert.matches("^local qwen3 · sending", require("flemma").statusline(c))
    assert.equals("completed", h.wait_finished(1).status)
    -- qwen3 has no price in the model table: the session's cost is a lower bound now.
    assert.equals("local qwen3 · $0.0000+", require("flemma").statusline(c))
  end)

  it("marks the selection [frontmatter] in :Flemma status", function()
    local a = lua_chat("st", { 'flemma.opt.provider = "$deep"', "flemma.opt.temperature = 0.5" })
    local lines = table.concat(require("flemma.ui.status").lines(a), "\n")
    assert.matches("provider: ant %(preset %$deep%)%s+%[frontmatter%]", lines)
    assert.matches("\n  model: claude%-opus%-4%-6%s+%[frontmatter%]", lines)
    assert.matches("\n  endpoint: " .. vim.pesc(hosted:url("/v1/messages")) .. "%s+%[setup%]", lines)
    assert.matches("\n  thinking: high%s+%[frontmatter%]", lines)
    assert.matches("\n  max_tokens: 30000%s+%[frontmatter%]", lines)
    assert.matches("\n  temperature: 0.5%s+%[frontmatter%]", lines)

    local b = lua_chat("st2", { 'flemma.opt.provider = "local"', 'flemma.opt.model = "qwen3"' })
    lines = table.concat(require("flemma.ui.status").lines(b), "\n")
    assert.matches("provider: local; ant elsewhere%s+%[frontmatter%]", lines)
    assert.matches("\n  endpoint: " .. vim.pesc(loc:url("/v1/chat/completions")), lines)
    assert.matches("\n  key: none needed", lines)

    local c = lua_chat("st3", { 'flemma.opt.provider = "$plain"' })
    lines = table.concat(require("flemma.ui.status").lines(c), "\n")
    assert.matches("\n  thinking: not set %(cleared by %$plain%)%s+%[frontmatter%]", lines)
  end)

  it(":Flemma usage:estimate counts with the buffer's provider and model", function()
    loc:script({ { body = '{"input_tokens": 1234}' } })
    local a = lua_chat("est", { 'flemma.opt.provider = "ant2"', 'flemma.opt.model = "claude-haiku-4-5"' })
    local result
    require("flemma.provider.estimate").estimate(a, function(r)
      result = r
    end)
    helpers.wait_for(function()
      return result ~= nil
    end, 10000, "no estimate")
    assert.is_nil(result.error)
    assert.equals(1234, result.tokens)
    assert.matches("^ant2 claude%-haiku%-4%-5: 1,234 input tokens", result.message)
    local req = loc:requests()[1]
    assert.equals("/v1/messages/count_tokens", req.path)
    assert.equals("claude-haiku-4-5", req.json.model)
    assert.equals(0, #hosted:requests())

    local bad = lua_chat("est_bad", { 'flemma.opt.provider = "nope"' })
    result = nil
    require("flemma.provider.estimate").estimate(bad, function(r)
      result = r
    end)
    assert.matches("^nothing counted: frontmatter line 2: `flemma.opt.provider`: unknown provider `nope`", result.error)
  end)

  it(":checkhealth lists the buffers that select their own provider", function()
    lua_chat("h1", { 'flemma.opt.provider = "local"', 'flemma.opt.model = "qwen3"' })
    lua_chat("h2", { 'flemma.opt.provider = "nope"' })
    chat("h3", { "@You:", "Hi" })
    vim.cmd("checkhealth flemma")
    local report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    vim.cmd("bwipeout!")
    assert.matches("flemma: chat buffers with their own provider", report, 1, true)
    assert.matches("h1%.chat%): its frontmatter selects `local` qwen3", report)
    assert.matches(
      "h2%.chat%): nothing is sent while its frontmatter fails: frontmatter line 2: `flemma.opt.provider`: unknown provider `nope`",
      report
    )
    assert.is_nil(report:find("h3.chat", 1, true))
    assert.matches("`local` %(openai_chat, [^)]*%) %(selected by a buffer's frontmatter%): no key needed", report)
  end)
end)
