local helpers = require("spec.support.helpers")
local config = require("flemma.core.config")
require("flemma.provider.switch") -- registers :Flemma switch
local provider = require("flemma.provider")

local notes, orig_notify, orig_select

local function errors()
  return vim.tbl_filter(function(n)
    return n.level == vim.log.levels.ERROR
  end, notes)
end

local function complete(line)
  return vim.fn.getcompletion("Flemma " .. line, "cmdline")
end

describe(":Flemma switch", function()
  before_each(function()
    notes = {}
    orig_notify = vim.notify
    orig_select = vim.ui.select
    vim.notify = function(msg, level)
      notes[#notes + 1] = { msg = msg, level = level or vim.log.levels.INFO }
    end
    require("flemma").setup({
      parameters = { vertex = { project_id = "proj-1" } },
      presets = {
        ["$fast"] = "vertex gemini-2.5-flash thinking=minimal",
        ["$review"] = {
          provider = "anthropic",
          model = "claude-opus-4-1",
          parameters = { thinking = "high", anthropic = { thinking_budget = 9000 } },
        },
      },
    })
  end)
  after_each(function()
    vim.notify = orig_notify
    vim.ui.select = orig_select
    require("flemma").setup({})
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("switches provider, model and parameters for the session, above setup()", function()
    vim.cmd("Flemma switch openai gpt-5.4-mini thinking=high temperature=0.3")
    assert.same({}, errors())
    local spec = provider.resolve()
    assert.equals("openai", spec.name)
    assert.equals("gpt-5.4-mini", spec.model)
    assert.equals("high", config.get().parameters.thinking)
    assert.equals(0.3, config.get().parameters.temperature)
    assert.equals("anthropic", config.get_setup().provider)
    assert.equals(
      "(flemma) switched to openai gpt-5.4-mini (temperature=0.3 thinking=high) · $0.75 in / $4.5 out per million tokens",
      notes[#notes].msg
    )
    -- the parameters reach the request context
    local ctx = provider.context(spec, { messages = {} }, { tools = {} })
    assert.equals("high", ctx.parameters.thinking)
  end)

  it("uses the provider's default model when none is named, and key= clears a parameter", function()
    require("flemma").setup({
      parameters = {
        temperature = 0.7,
        max_tokens = 2000,
        vertex = { project_id = "proj-1", location = "europe-west4" },
      },
    })
    vim.cmd("Flemma switch vertex temperature=")
    assert.same({}, errors())
    local spec = provider.resolve()
    assert.equals("gemini-3.1-pro-preview", spec.model)
    assert.equals(
      "https://europe-west4-aiplatform.googleapis.com/v1/projects/proj-1/locations/europe-west4/publishers/google/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
      spec.endpoint
    )
    assert.is_nil(config.get().parameters.temperature)
    assert.equals(2000, config.get().parameters.max_tokens)
    assert.equals(0.7, config.get_setup().parameters.temperature)
  end)

  it("applies a string preset and a table preset, with values after the preset on top", function()
    vim.cmd("Flemma switch $fast max_tokens=500")
    assert.same({}, errors())
    assert.equals("vertex", config.get().provider)
    assert.equals("gemini-2.5-flash", config.get().model)
    assert.equals("minimal", config.get().parameters.thinking)
    assert.equals(500, config.get().parameters.max_tokens)
    assert.truthy(notes[#notes].msg:find("[$fast]", 1, true), notes[#notes].msg)
    vim.cmd("Flemma switch $review")
    assert.equals("anthropic", config.get().provider)
    assert.equals("claude-opus-4-1", config.get().model)
    assert.equals(9000, config.get().parameters.anthropic.thinking_budget)
    assert.is_nil(config.get().parameters.max_tokens)
  end)

  it("warns when the model's price is above ui.high_cost_threshold", function()
    vim.cmd("Flemma switch anthropic claude-opus-4-1")
    local warn = notes[#notes]
    assert.equals(vim.log.levels.WARN, warn.level)
    assert.equals(
      "(flemma) claude-opus-4-1 costs $75 per million output tokens, above ui.high_cost_threshold ($30)",
      warn.msg
    )
    notes = {}
    vim.cmd("Flemma switch anthropic claude-haiku-4-5")
    assert.equals(1, #notes)
    assert.equals(vim.log.levels.INFO, notes[1].level)
    require("flemma").setup({ ui = { high_cost_threshold = 4 } })
    notes = {}
    vim.cmd("Flemma switch anthropic claude-haiku-4-5")
    assert.equals(2, #notes)
    assert.equals(vim.log.levels.WARN, notes[2].level)
  end)

  it("keeps a switch that cannot send yet and says what is missing", function()
    require("flemma").setup({})
    vim.cmd("Flemma switch vertex")
    assert.equals("vertex", config.get().provider)
    assert.equals(
      "(flemma) switched to vertex, but it cannot send yet: vertex: `parameters.vertex.project_id` is not set (the Google Cloud project to bill), e.g. :Flemma switch vertex vertex.project_id=my-project",
      notes[#notes].msg
    )
    vim.cmd("Flemma switch vertex vertex.project_id=p2")
    assert.equals(
      "https://aiplatform.googleapis.com/v1/projects/p2/locations/global/publishers/google/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
      provider.resolve().endpoint
    )
  end)

  it("names a model the table does not know as of unknown cost", function()
    vim.cmd("Flemma switch ollama qwen3:8b")
    assert.same({}, errors())
    assert.equals("(flemma) switched to ollama qwen3:8b · not in the model table: cost unknown", notes[#notes].msg)
  end)

  it("refuses unknown providers, presets, parameters and bad values, changing nothing", function()
    vim.cmd("Flemma switch openai")
    for _, case in ipairs({
      { "Flemma switch antropic", "unknown provider `antropic`; did you mean `anthropic`?" },
      { "Flemma switch $fsat", "unknown preset `$fsat`; did you mean `$fast`?" },
      { "Flemma switch vertex temprature=1", "unknown parameter `temprature`; did you mean `temperature`?" },
      { "Flemma switch vertex max_tokens=lots", '`parameters.max_tokens` should be a whole number >= 1, not "lots"' },
      {
        "Flemma switch vertex cache_retention=forever",
        "`parameters.cache_retention` should be one of none, short, long",
      },
      { "Flemma switch vertex api_key=sk-1", "API keys are never accepted" },
      { "Flemma switch thinking=high", "name a provider or a $preset first" },
    }) do
      notes = {}
      vim.cmd(case[1])
      assert.equals(1, #errors(), case[1])
      assert.truthy(errors()[1].msg:find(case[2], 1, true), errors()[1].msg)
      assert.is_nil(errors()[1].msg:find("sk-1", 1, true))
      assert.equals("openai", config.get().provider, case[1])
    end
  end)

  it("without arguments picks a provider, then a model, with vim.ui.select", function()
    local asked = {}
    vim.ui.select = function(items, opts, cb)
      asked[#asked + 1] = { items = items, prompt = opts.prompt, first = opts.format_item(items[1]) }
      if opts.prompt == "Provider" then
        cb("vertex")
      else
        cb("gemini-2.5-flash")
      end
    end
    vim.cmd("Flemma switch")
    assert.equals(2, #asked)
    assert.truthy(vim.tbl_contains(asked[1].items, "openai"))
    assert.truthy(vim.tbl_contains(asked[1].items, "ollama"))
    assert.equals("anthropic (anthropic)", asked[1].first)
    assert.equals("Model of vertex", asked[2].prompt)
    assert.equals("gemini-3.1-pro-preview", asked[2].items[1])
    assert.equals("gemini-3.1-pro-preview  ($2 in / $12 out per Mtok)", asked[2].first)
    assert.equals("vertex", config.get().provider)
    assert.equals("gemini-2.5-flash", config.get().model)
    -- cancelling the model list changes nothing
    vim.ui.select = function(_items, opts, cb)
      cb(opts.prompt == "Provider" and "openai" or nil)
    end
    vim.cmd("Flemma switch")
    assert.equals("vertex", config.get().provider)
  end)

  it("completes providers, presets, models and parameter names", function()
    local c = complete("switch ")
    assert.truthy(vim.tbl_contains(c, "anthropic"))
    assert.truthy(vim.tbl_contains(c, "$fast"))
    assert.same({ "$fast" }, complete("switch $f"))
    c = complete("switch vertex ")
    assert.truthy(vim.tbl_contains(c, "gemini-2.5-flash"))
    assert.truthy(vim.tbl_contains(c, "thinking="))
    assert.truthy(vim.tbl_contains(c, "vertex.project_id="))
    assert.same({ "gpt-5.4", "gpt-5.4-mini", "gpt-5.4-nano", "gpt-5.4-pro" }, complete("switch openai gpt-5.4"))
    assert.same({ "temperature=" }, complete("switch openai gpt-5.4 temp"))
    assert.same({ "thinking=high" }, complete("switch $fast thinking=h"))
    -- the allowed values are the option schema's
    local schema = require("flemma.isolated.schema")
    for _, key in ipairs({ "thinking", "cache_retention", "thinking_foreign", "openai.reasoning" }) do
      local want = vim.tbl_map(function(v)
        return key .. "=" .. v
      end, schema.values("parameters." .. key))
      table.sort(want)
      assert.same(want, complete("switch openai " .. key .. "="))
    end
  end)

  it("is a layer of :Flemma status", function()
    vim.cmd("Flemma switch openai gpt-5.4 thinking=low")
    local lines = require("flemma.ui.status").lines(vim.api.nvim_get_current_buf())
    local function row(prefix)
      for _, l in ipairs(lines) do
        if vim.trim(l):sub(1, #prefix) == prefix then
          return vim.trim(l)
        end
      end
      error("no row " .. prefix .. " in:\n" .. table.concat(lines, "\n"))
    end
    assert.matches("%[switch%]$", row("provider: openai"))
    assert.matches("%[switch%]$", row("model: gpt-5.4"))
    assert.matches("%[switch%]$", row("thinking: low"))
    assert.matches("%[default%]$", row("cache_retention: short"))
  end)
end)

describe(":Flemma switch with an OpenAI-compatible server", function()
  local server
  local served = require("flemma.provider.served")
  local LIST = vim.json.encode({
    object = "list",
    data = {
      { id = "qwen2.5-coder:7b", object = "model" },
      { id = "llama3.1:8b", object = "model" },
      { id = "bad id with spaces", object = "model" },
    },
  })
  local orig, saved_openai
  before_each(function()
    orig = vim.notify
    vim.notify = function() end
    served.clear()
    server = require("spec.support.llm_server").start()
    server:script({ { body = LIST } })
    vim.env.FLEMMA_SPEC_MODELS_KEY = "sk-served-spec-1234567890"
    saved_openai = vim.env.OPENAI_API_KEY
    vim.env.OPENAI_API_KEY = "sk-openai-spec-1234567890"
    require("flemma").setup({
      providers = {
        mine = {
          kind = "openai_chat",
          endpoint = server:url("/v1/chat/completions"),
          api_key_env = "FLEMMA_SPEC_MODELS_KEY",
        },
        local_one = { kind = "openai_chat", endpoint = server:url("/v2/chat/completions") },
        elsewhere = { kind = "openai_chat", endpoint = "http://127.0.0.1:9/v1/chat/completions" },
        -- The built-in entry moved to this server: its variable ($OPENAI_API_KEY)
        -- goes to api.openai.com only.
        openai_chat = { endpoint = server:url("/v3/chat/completions") },
      },
    })
  end)
  after_each(function()
    vim.notify = orig
    server:stop()
    vim.env.FLEMMA_SPEC_MODELS_KEY = nil
    vim.env.OPENAI_API_KEY = saved_openai
    served.clear()
  end)

  local function models_of(c)
    return vim.tbl_filter(function(m)
      return not m:find("=", 1, true)
    end, c)
  end

  it("offers the models the server lists at /v1/models, sending the entry's key to it", function()
    -- Nothing known yet: no other vendor's models, and the fetch starts.
    assert.same({}, models_of(complete("switch mine ")))
    helpers.wait_for(function()
      return #server:requests() == 1 and #models_of(complete("switch mine ")) > 0
    end, 15000, "the model list was not fetched")
    assert.same({ "llama3.1:8b", "qwen2.5-coder:7b" }, models_of(complete("switch mine ")))
    assert.same({ "qwen2.5-coder:7b" }, complete("switch mine qw"))
    local r = server:requests()
    assert.equals(1, #r)
    assert.equals("GET", r[1].method)
    assert.equals("/v1/models", r[1].path)
    assert.equals("Bearer sk-served-spec-1234567890", r[1].headers.authorization)
    -- Kept for the session: asked again, the server is not.
    complete("switch mine ")
    helpers.settle()
    assert.equals(1, #server:requests())
  end)

  it("sends no key for an entry without one, and offers nothing after a failure until :Flemma switch", function()
    assert.same({}, models_of(complete("switch local_one ")))
    helpers.wait_for(function()
      return #models_of(complete("switch local_one ")) > 0
    end, 15000, "the model list was not fetched")
    local r = server:requests()
    assert.equals(1, #r)
    assert.equals("/v2/models", r[1].path)
    assert.is_nil(r[1].headers.authorization)
    -- A variable that is not the entry's own to send here: no key either.
    assert.equals("OPENAI_API_KEY", config.get_setup().providers.openai_chat.api_key_env)
    assert.same({}, models_of(complete("switch openai_chat ")))
    helpers.wait_for(function()
      return served.state("openai_chat") == "ok"
    end, 15000, "the model list was not fetched")
    assert.same({ "llama3.1:8b", "qwen2.5-coder:7b" }, models_of(complete("switch openai_chat ")))
    r = server:requests()
    assert.equals(2, #r)
    assert.equals("/v3/models", r[2].path)
    assert.is_nil(r[2].headers.authorization)
    -- A server that is not there: nothing offered, not another vendor's models.
    assert.same({}, models_of(complete("switch elsewhere ")))
    helpers.wait_for(function()
      return served.state("elsewhere") == "failed"
    end, 15000, "the fetch did not fail")
    assert.same({}, models_of(complete("switch elsewhere ")))
    assert.falsy(vim.tbl_contains(complete("switch elsewhere "), "deepseek-chat"))
  end)

  it("picks a model from the server's list without arguments", function()
    local saved_select = vim.ui.select
    local asked = {}
    vim.ui.select = function(items, opts, cb)
      asked[#asked + 1] = { items = items, prompt = opts.prompt }
      cb(opts.prompt == "Provider" and "mine" or "qwen2.5-coder:7b")
    end
    vim.cmd("Flemma switch")
    helpers.wait_for(function()
      return #asked == 2
    end, 15000, "no model list was offered")
    vim.ui.select = saved_select
    assert.equals("Model of mine", asked[2].prompt)
    assert.same({ "llama3.1:8b", "qwen2.5-coder:7b" }, asked[2].items)
    assert.equals("mine", config.get().provider)
    assert.equals("qwen2.5-coder:7b", config.get().model)
  end)

  it("fetches a failed list again on :Flemma switch, and bounds the answer", function()
    server:script({ { status = 500, body = "{}" }, { body = LIST } })
    assert.same({}, models_of(complete("switch mine ")))
    helpers.wait_for(function()
      return served.state("mine") == "failed"
    end, 15000, "the fetch did not fail")
    assert.matches("500", select(2, served.state("mine")))
    assert.same({}, models_of(complete("switch mine ")))
    helpers.settle()
    assert.equals(1, #server:requests())
    vim.cmd("Flemma switch mine llama3.1:8b")
    helpers.wait_for(function()
      return #models_of(complete("switch mine ")) == 2
    end, 15000, "the list was not fetched again")
    -- An answer past the size bound is not taken.
    served.clear()
    server:script({ { gen = { head = '{"data":[', piece = '{"id":"m{n}"},', tail = '{"id":"z"}]}', count = 40000 } } })
    complete("switch mine ")
    helpers.wait_for(function()
      return served.state("mine") == "failed"
    end, 15000, "the fetch did not fail")
    assert.matches("larger than", select(2, served.state("mine")))
    assert.same({}, models_of(complete("switch mine ")))
  end)
end)

describe("presets in setup()", function()
  after_each(function()
    require("flemma").setup({})
  end)

  it("are validated: name, provider, model and parameters", function()
    for _, case in ipairs({
      { { fast = "vertex" }, 'the name "fast" should start with $' },
      { { ["$x"] = "nowhere model" }, "preset `$x`: unknown provider `nowhere`" },
      { { ["$x"] = "vertex m temprature=1" }, "preset `$x`: unknown parameter `temprature`" },
      { { ["$x"] = { provider = "vertex", extra = 1 } }, "unknown option `presets.$x.extra`" },
      {
        { ["$x"] = { provider = "vertex", parameters = { max_tokens = "many" } } },
        'preset `$x`: `parameters.max_tokens` should be a whole number >= 1, not "many"',
      },
      { { ["$x"] = 42 }, "`presets.$x` should be a string" },
    }) do
      local ok, err = pcall(require("flemma").setup, { presets = case[1] })
      assert.is_false(ok)
      assert.truthy(err:find(case[2], 1, true), err)
    end
  end)

  it("ui.high_cost_threshold must be a number >= 0", function()
    local ok, err = pcall(require("flemma").setup, { ui = { high_cost_threshold = -1 } })
    assert.is_false(ok)
    assert.truthy(err:find("`ui.high_cost_threshold` should be a number >= 0", 1, true), err)
    ok, err = pcall(require("flemma").setup, { ui = { high_cost_threshold = "cheap" } })
    assert.is_false(ok)
    assert.truthy(
      err:find('`ui.high_cost_threshold` should be a number >= 0 (dollars per million tokens), not "cheap"', 1, true),
      err
    )
  end)
end)
