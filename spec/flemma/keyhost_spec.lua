-- Keys go only to the hosts they are meant for (issue 23 §7): real chat buffers, <C-]>,
-- real curl against loopback servers (and one on this machine's non-loopback
-- address) that record every request's headers; vim.ui.select replaced by a stub that
-- answers and records what it was asked (the user-facing extension point).
local helpers = require("spec.support.helpers")
local server_mod = require("spec.support.llm_server")

local KEY = "sk-spec-keyhost-" .. tostring(math.random(1e9))
local OPENAI = "sk-spec-openai-" .. tostring(math.random(1e9))
local ANTHROPIC = "sk-spec-anthropic-" .. tostring(math.random(1e9))

local press, text = helpers.press, helpers.text

local function chat(name, lines)
  return helpers.edit(helpers.tmpdir() .. "/" .. name .. ".chat", lines)
end

local function lua_chat(name, code)
  local lines = { "```lua" }
  vim.list_extend(lines, code)
  vim.list_extend(lines, { "```", "@You:", "Hello" })
  return chat(name, lines)
end

-- Every header of a request that could carry a key.
local function key_headers(req)
  local h = req.headers
  return { authorization = h.authorization, ["x-api-key"] = h["x-api-key"], ["x-goog-api-key"] = h["x-goog-api-key"] }
end

-- A non-loopback IPv4 address of this machine, if it has one.
local function outside_address()
  for _, addrs in pairs(vim.uv.interface_addresses()) do
    for _, a in ipairs(addrs) do
      if a.family == "inet" and not a.internal and not a.ip:match("^127%.") then
        return a.ip
      end
    end
  end
end

describe("where a key goes", function()
  local a, b, h, asked, answer, orig_select, saved

  local function configure(providers, extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "ant",
      model = "claude-haiku-4-5",
      providers = vim.tbl_extend("force", {
        ant = { kind = "anthropic", endpoint = a:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      }, providers or {}),
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false } },
    }, extra or {}))
  end

  local function warnings()
    local out = {}
    for _, n in ipairs(h.notes) do
      if n.level == vim.log.levels.WARN then
        out[#out + 1] = n.msg
      end
    end
    return out
  end

  setup(function()
    a = server_mod.start()
    b = server_mod.start()
  end)
  teardown(function()
    a:stop()
    b:stop()
  end)

  before_each(function()
    a:script({})
    b:script({})
    h = helpers.send_harness({ key = KEY, server = false, timeout = 15000, secrets = { OPENAI, ANTHROPIC } })
    saved = { openai = vim.env.OPENAI_API_KEY, anthropic = vim.env.ANTHROPIC_API_KEY }
    vim.env.OPENAI_API_KEY = OPENAI
    vim.env.ANTHROPIC_API_KEY = ANTHROPIC
    local ok, keyhost = pcall(require, "flemma.provider.keyhost")
    if ok then
      keyhost.reset() -- answers of earlier tests
    end
    require("flemma.provider.cost").reset()
    orig_select = vim.ui.select
    asked = {}
    answer = "Do not send"
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = { items = items, prompt = opts.prompt, kind = opts.kind }
      on_choice(answer)
    end
  end)

  after_each(function()
    vim.ui.select = orig_select
    vim.env.OPENAI_API_KEY = saved.openai
    vim.env.ANTHROPIC_API_KEY = saved.anthropic
    require("flemma.core.config").set_session(nil)
    h.teardown()
  end)

  it("the built-in openai_chat entry sends no $OPENAI_API_KEY to a server that is not api.openai.com", function()
    -- The default entry: OPENAI_API_KEY belongs to api.openai.com, its endpoint is 127.0.0.1.
    local provider = require("flemma.provider")
    configure()
    local spec = assert(provider.resolve({
      provider = "openai_chat",
      model = "qwen3",
      providers = require("flemma.core.config").get().providers,
      parameters = {},
    }))
    assert.equals("http://127.0.0.1:11434/v1/chat/completions", spec.endpoint)
    assert.is_nil(provider.key(spec))
    local host, why = provider.key_destination(spec)
    assert.is_nil(host)
    assert.matches("the key in $OPENAI_API_KEY is not sent to 127.0.0.1: it is the key of api.openai.com", why, 1, true)

    -- Pointed at a server of this machine (endpoint only): a real request, no key.
    a:script({ { fixture = "openai_chat_text.sse" }, { fixture = "openai_chat_text.sse" } })
    configure(
      { openai_chat = { endpoint = a:url("/v1/chat/completions") } },
      { provider = "openai_chat", model = "qwen3" }
    )
    chat("builtin", { "@You:", "Hello" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.same({}, key_headers(a:requests()[1]))

    -- Selected by a chat's frontmatter while the user's own provider is `ant`: no key,
    -- and no question (no key goes anywhere).
    configure({ openai_chat = { endpoint = a:url("/v1/chat/completions") } })
    lua_chat("fm_builtin", { 'flemma.opt.provider = "openai_chat"', 'flemma.opt.model = "qwen3"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    local reqs = a:requests()
    assert.equals(2, #reqs)
    assert.equals("qwen3", reqs[2].json.model)
    assert.same({}, key_headers(reqs[2]))
    assert.equals(0, #asked)
  end)

  it("the built-in anthropic entry keeps its key from another endpoint; a 401 there says why", function()
    a:script({
      {
        status = 401,
        body = '{"type":"error","error":{"type":"authentication_error","message":"x-api-key header is required"}}',
      },
    })
    configure({ anthropic = { endpoint = a:url("/v1/messages") } }, { provider = "anthropic" })
    chat("ant_builtin", { "@You:", "Hello" })
    press("<C-]>")
    local res = h.wait_finished(1)
    assert.equals("error", res.status)
    assert.same({}, key_headers(a:requests()[1]))
    assert.matches(
      'the key in $ANTHROPIC_API_KEY is not sent to 127.0.0.1: it is the key of api.anthropic.com and goes only there; to send it there, name it for this entry in setup(): providers.anthropic.api_key_env = "ANTHROPIC_API_KEY"',
      res.error,
      1,
      true
    )
  end)

  it("local entries send no key unless you configure one for them", function()
    a:script({ { fixture = "openai_chat_text.sse" }, { fixture = "openai_chat_text.sse" } })
    configure({ ollama = { endpoint = a:url("/v1/chat/completions") } }, { provider = "ollama", model = "qwen3" })
    chat("ollama", { "@You:", "Hello" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.same({}, key_headers(a:requests()[1]))

    configure(
      { ollama = { endpoint = a:url("/v1/chat/completions"), api_key_env = "FLEMMA_SPEC_KEY" } },
      { provider = "ollama", model = "qwen3" }
    )
    chat("ollama_key", { "@You:", "Hello" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    assert.equals("Bearer " .. KEY, a:requests()[2].headers.authorization)
  end)

  it(
    "an entry of your own sends its own key to its own endpoint (also a built-in you named the variable for)",
    function()
      a:script({ { fixture = "openai_chat_text.sse" }, { fixture = "openai_chat_text.sse" } })
      configure(
        { mine = { kind = "openai_chat", endpoint = a:url("/v1/chat/completions"), api_key_env = "FLEMMA_SPEC_KEY" } },
        { provider = "mine", model = "qwen3" }
      )
      chat("mine", { "@You:", "Hello" })
      press("<C-]>")
      assert.equals("completed", h.wait_finished(1).status)
      assert.equals("Bearer " .. KEY, a:requests()[1].headers.authorization)

      configure(
        { openai_chat = { endpoint = a:url("/v1/chat/completions"), api_key_env = "OPENAI_API_KEY" } },
        { provider = "openai_chat", model = "qwen3" }
      )
      chat("named", { "@You:", "Hello" })
      press("<C-]>")
      assert.equals("completed", h.wait_finished(2).status)
      assert.equals("Bearer " .. OPENAI, a:requests()[2].headers.authorization)
      assert.equals(0, #asked)
    end
  )

  it("never sends a key over http:// to another machine", function()
    local ip = outside_address()
    local provider = require("flemma.provider")
    configure({
      lan = {
        kind = "openai_chat",
        endpoint = "http://10.0.0.5:8000/v1/chat/completions",
        api_key_env = "FLEMMA_SPEC_KEY",
      },
    })
    local spec = assert(
      provider.resolve(vim.tbl_extend("force", require("flemma.core.config").get(), { provider = "lan", model = "m" }))
    )
    assert.is_nil(provider.key(spec))
    if not ip then
      pending("this machine has no non-loopback address for a real request")
      return
    end
    local remote = server_mod.start({ host = ip })
    local ok, err = pcall(function()
      remote:script({ { fixture = "openai_chat_text.sse" } })
      configure({
        lan = { kind = "openai_chat", endpoint = remote:url("/v1/chat/completions"), api_key_env = "FLEMMA_SPEC_KEY" },
      }, { provider = "lan", model = "qwen3" })
      chat("lan", { "@You:", "Hello" })
      press("<C-]>")
      local fin = h.wait_finished(1)
      assert.equals("completed", fin.status, vim.inspect(fin))
      assert.equals(1, #remote:requests())
      assert.same({}, key_headers(remote:requests()[1]))
      local host, why = provider.key_destination(spec)
      assert.is_nil(host)
      assert.matches("a key never goes over http:// to another machine (10.0.0.5); use https", why, 1, true)
    end)
    remote:stop()
    assert(ok, err)
  end)

  it("asks before a frontmatter sends a key to a new host; without a yes nothing is sent", function()
    local far_url = b:url("/v1/chat/completions"):gsub("127%.0%.0%.1", "localhost")
    configure({ far = { kind = "openai_chat", endpoint = far_url, api_key_env = "FLEMMA_SPEC_KEY" } })
    local buf = lua_chat("far", { 'flemma.opt.provider = "far"', 'flemma.opt.model = "qwen3"' })
    local before = text(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 1 and #warnings() == 1
    end, 5000, "not asked")
    assert.same({ "Send", "Do not send" }, asked[1].items)
    assert.equals("flemma.keyhost", asked[1].kind)
    assert.matches(
      "chose far, which sends the key in $FLEMMA_SPEC_KEY to localhost (your own provider, ant, does not). Send the key there?",
      asked[1].prompt,
      1,
      true
    )
    vim.wait(300)
    assert.equals(0, #a:requests())
    assert.equals(0, #b:requests())
    assert.equals(before, text(buf))
    assert.equals(0, #h.finished)
    assert.matches(
      "not sent: the frontmatter of .*far%.chat chose far, which would send the key in %$FLEMMA_SPEC_KEY to localhost, and you did not confirm it",
      warnings()[1]
    )
    assert.is_nil(warnings()[1]:find("\n"), "one line")

    -- Nobody to ask (headless, Neovim's own vim.ui.select): refused, one line.
    vim.ui.select = orig_select
    press("<C-]>")
    vim.wait(300)
    assert.equals(0, #b:requests())
    assert.equals(before, text(buf))
    assert.matches(
      "and there is no UI to ask whether to send it there; remove `flemma.opt.provider`",
      warnings()[2],
      1,
      true
    )
    assert.matches("(:Flemma switch far)", warnings()[2], 1, true)
    assert.is_nil(warnings()[2]:find("\n"), "one line")

    -- Send: the key goes, and is not asked about again for that buffer.
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = { items = items, prompt = opts.prompt, kind = opts.kind }
      on_choice(answer)
    end
    answer = "Send"
    b:script({ { fixture = "openai_chat_text.sse" }, { fixture = "openai_chat_text.sse" } })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.equals(2, #asked)
    assert.equals("Bearer " .. KEY, b:requests()[1].headers.authorization)
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "Again" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    assert.equals(2, #asked)
    assert.equals(2, #b:requests())

    -- Another chat selecting it asks on its own.
    answer = "Do not send"
    lua_chat("far_other", { 'flemma.opt.provider = "far"', 'flemma.opt.model = "qwen3"' })
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 3
    end, 5000, "another buffer not asked")
    vim.wait(200)
    assert.equals(2, #b:requests())
    assert.equals(0, #a:requests())
  end)

  it(":Flemma usage:estimate asks the same question; without a yes nothing is counted or sent", function()
    local far_url = b:url("/v1/messages"):gsub("127%.0%.0%.1", "localhost")
    configure({ far = { kind = "anthropic", endpoint = far_url, api_key_env = "FLEMMA_SPEC_KEY" } })
    local buf = lua_chat("far_estimate", { 'flemma.opt.provider = "far"' })
    local result
    require("flemma.provider.estimate").estimate(buf, function(r)
      result = r
    end)
    helpers.wait_for(function()
      return result ~= nil
    end, 5000, "no result")
    assert.equals(1, #asked)
    assert.equals("flemma.keyhost", asked[1].kind)
    assert.matches(
      "^nothing counted: the frontmatter of .*far_estimate%.chat chose far, which would send the key in %$FLEMMA_SPEC_KEY to localhost",
      result.error
    )
    vim.wait(200)
    assert.equals(0, #b:requests())

    answer = "Send"
    b:script({ { body = '{"input_tokens": 42}' } })
    result = nil
    require("flemma.provider.estimate").estimate(buf, function(r)
      result = r
    end)
    helpers.wait_for(function()
      return result ~= nil
    end, 10000, "no result")
    assert.equals(2, #asked)
    assert.equals(42, result.tokens, vim.inspect(result))
    assert.equals(KEY, b:requests()[1].headers["x-api-key"])
  end)

  it("asks for another key to the same host, not for the same key where your own provider sends it", function()
    vim.env.FLEMMA_SPEC_OTHER_KEY = "sk-spec-other-" .. tostring(math.random(1e9))
    configure({
      same = { kind = "anthropic", endpoint = b:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      other = { kind = "anthropic", endpoint = b:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_OTHER_KEY" },
    })
    b:script({ { fixture = "anthropic_text.sse" } })
    lua_chat("same", { 'flemma.opt.provider = "same"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.equals(0, #asked)
    assert.equals(KEY, b:requests()[1].headers["x-api-key"])

    lua_chat("other", { 'flemma.opt.provider = "other"' })
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 1
    end, 5000, "not asked about another key")
    assert.matches("sends the key in $FLEMMA_SPEC_OTHER_KEY to 127.0.0.1", asked[1].prompt, 1, true)
    vim.wait(200)
    assert.equals(1, #b:requests())

    -- Switched to it (your own choice): not asked.
    b:script({ { fixture = "anthropic_text.sse" } })
    vim.cmd("Flemma switch other")
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    assert.equals(1, #asked)
    assert.equals(vim.env.FLEMMA_SPEC_OTHER_KEY, b:requests()[1].headers["x-api-key"])
    vim.env.FLEMMA_SPEC_OTHER_KEY = nil
  end)
end)
