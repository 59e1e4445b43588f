-- Frontmatter that chooses an expensive provider and model asks before the first
-- send (flemma.cost, ui.confirm_frontmatter_cost): real chat buffers, <C-]>, real curl
-- against two loopback servers; vim.ui.select is replaced by a stub that answers and
-- records what it was asked. Assertions on the requests the servers received, the
-- buffer text and the notifications.
local helpers = require("spec.support.helpers")
local server_mod = require("spec.support.llm_server")

local KEY = "sk-fm-cost-" .. tostring(math.random(1e9))

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

-- Appends a question for the next send after an answer.
local function ask_again(buf, question)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  while #lines > 0 and lines[#lines] == "" do
    lines[#lines] = nil
  end
  if lines[#lines] == "@You:" then
    vim.api.nvim_buf_set_lines(buf, #lines, -1, false, { question })
  else
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "", "@You:", question })
  end
end

describe("frontmatter choosing an expensive model", function()
  local hosted, loc, h, notes, orig_select, asked, answer

  local function configure(extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "ant",
      providers = {
        ant = { kind = "anthropic", endpoint = hosted:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        ant2 = { kind = "anthropic", endpoint = loc:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        ["local"] = { kind = "openai_chat", endpoint = loc:url("/v1/chat/completions") },
        -- Never reached: the spec answers "Do not send" or nothing is sent.
        faraway = {
          kind = "openai_chat",
          endpoint = "https://llm.invalid/v1/chat/completions",
          api_key_env = "FLEMMA_SPEC_KEY",
        },
      },
      presets = { ["$review"] = "ant claude-opus-4-1" },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
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

  -- Nothing reached either server, and the buffer is as it was.
  local function nothing_sent(buf, before)
    vim.wait(300)
    assert.equals(0, #hosted:requests())
    assert.equals(0, #loc:requests())
    assert.equals(before, text(buf))
    assert.equals(0, #h.finished)
  end

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
    if package.loaded["flemma.provider.cost"] then
      package.loaded["flemma.provider.cost"].reset() -- approvals of earlier tests
    end
    configure()
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
    h.teardown()
  end)

  it("asks before the first send; Do not send sends nothing and says what to do", function()
    local buf = lua_chat("opus", { 'flemma.opt.provider = "ant"', 'flemma.opt.model = "claude-opus-4-1"' })
    local before = text(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 1 and messages(vim.log.levels.WARN) ~= ""
    end, 5000, "not asked")
    assert.same({ "Send", "Do not send" }, asked[1].items)
    assert.equals("flemma.cost", asked[1].kind)
    assert.equals(
      "The frontmatter of "
        .. vim.fn.fnamemodify(vim.api.nvim_buf_get_name(buf), ":~:.")
        .. " chose ant claude-opus-4-1: $15 in / $75 out per million tokens, above ui.high_cost_threshold ($30). Send with it?",
      asked[1].prompt
    )
    nothing_sent(buf, before)
    local warned = messages(vim.log.levels.WARN)
    assert.matches(
      "not sent: the frontmatter of .*opus%.chat chose ant claude%-opus%-4%-1 and you did not confirm it",
      warned
    )
    assert.matches("edit `flemma.opt.provider` / `flemma.opt.model` in the frontmatter", warned, 1, true)
    assert.matches("or set ui.confirm_frontmatter_cost = false", warned, 1, true)

    -- A "no" is not remembered: the next send asks again; a dismissed question
    -- (nil) sends nothing either.
    answer = nil
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 2
    end, 5000, "not asked again")
    nothing_sent(buf, before)
  end)

  it("sends after Send, and does not ask again for that buffer, provider and model", function()
    hosted:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
    answer = "Send"
    local buf = lua_chat("opus_yes", { 'flemma.opt.provider = "$review"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.equals(1, #asked)
    assert.matches("chose ant claude%-opus%-4%-1 %(%$review%): %$15 in / %$75 out", asked[1].prompt)
    assert.equals(1, #hosted:requests())
    assert.equals("claude-opus-4-1", hosted:requests()[1].json.model)
    assert.equals(KEY, hosted:requests()[1].headers["x-api-key"])
    assert.truthy(text(buf):find("Second line ends here.", 1, true))

    ask_again(buf, "And again")
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    assert.equals(1, #asked)
    assert.equals(2, #hosted:requests())

    -- The frontmatter now chooses another expensive provider and model: asked again.
    vim.api.nvim_buf_set_lines(
      buf,
      1,
      2,
      false,
      { 'flemma.opt.provider = "ant2"; flemma.opt.model = "claude-opus-4-1"' }
    )
    ask_again(buf, "Elsewhere")
    answer = "Do not send"
    local before = text(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 2
    end, 5000, "not asked for ant2")
    assert.matches("chose ant2 claude%-opus%-4%-1: ", asked[2].prompt)
    vim.wait(300)
    assert.equals(0, #loc:requests())
    assert.equals(2, #hosted:requests())
    assert.equals(before, text(buf))

    -- Another buffer choosing the approved model is asked on its own.
    lua_chat("opus_other", { 'flemma.opt.model = "claude-opus-4-1"' })
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 3
    end, 5000, "another buffer not asked")
    vim.wait(200)
    assert.equals(2, #hosted:requests())
  end)

  it("does not ask for a cheap frontmatter model or a local server's unpriced one", function()
    loc:script({ { fixture = "anthropic_text.sse" }, { fixture = "openai_chat_text.sse" } })
    lua_chat("haiku", { 'flemma.opt.provider = "ant2"', 'flemma.opt.model = "claude-haiku-4-5"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    lua_chat("qwen", { 'flemma.opt.provider = "local"', 'flemma.opt.model = "qwen3"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)
    assert.equals(0, #asked)
    local reqs = loc:requests()
    assert.equals("claude-haiku-4-5", reqs[1].json.model)
    assert.equals("qwen3", reqs[2].json.model)
  end)

  it("does not ask when the expensive model is the user's own choice (setup or :Flemma switch)", function()
    hosted:script({
      { fixture = "anthropic_text.sse" },
      { fixture = "anthropic_text.sse" },
      { fixture = "anthropic_text.sse" },
    })
    configure({ model = "claude-opus-4-1" })
    chat("plain", { "@You:", "Hi" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    -- A frontmatter that repeats the user's own provider and model chose nothing new.
    lua_chat("same", { 'flemma.opt.model = "claude-opus-4-1"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(2).status)

    configure()
    vim.cmd("Flemma switch ant claude-opus-4-1")
    chat("switched", { "@You:", "Hi" })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(3).status)
    assert.equals(0, #asked)
    local reqs = hosted:requests()
    assert.equals(3, #reqs)
    for i = 1, 3 do
      assert.equals("claude-opus-4-1", reqs[i].json.model)
    end
    require("flemma.core.config").set_session(nil)
  end)

  it("does not ask with ui.confirm_frontmatter_cost = false", function()
    hosted:script({ { fixture = "anthropic_text.sse" } })
    configure({ ui = { confirm_frontmatter_cost = false } })
    lua_chat("off", { 'flemma.opt.model = "claude-opus-4-1"' })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(1).status)
    assert.equals(0, #asked)
    assert.equals("claude-opus-4-1", hosted:requests()[1].json.model)
  end)

  it("asks for a model of unknown price on a hosted endpoint", function()
    local buf = lua_chat("mystery", { 'flemma.opt.provider = "faraway"', 'flemma.opt.model = "mystery-1"' })
    local before = text(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return #asked == 1
    end, 5000, "not asked")
    assert.matches(
      "chose faraway mystery-1: price unknown (not in the model table), at https://llm.invalid/v1/chat/completions. Send with it?",
      asked[1].prompt,
      1,
      true
    )
    nothing_sent(buf, before)
  end)

  it("sends nothing when the question cannot be shown or fails", function()
    local buf = lua_chat("closed", { 'flemma.opt.model = "claude-opus-4-1"' })
    local before = text(buf)
    vim.ui.select = function()
      error("picker broke")
    end
    press("<C-]>")
    nothing_sent(buf, before)
    assert.matches(
      "not sent: cannot ask whether to use the frontmatter's model: .*picker broke",
      messages(vim.log.levels.ERROR)
    )

    -- Headless with Neovim's own vim.ui.select (it would wait on inputlist()).
    h.forget_notes()
    vim.ui.select = orig_select
    assert.matches("vim[/\\]ui%.lua$", debug.getinfo(vim.ui.select, "S").source)
    press("<C-]>")
    nothing_sent(buf, before)
    assert.matches(
      "chose ant claude%-opus%-4%-1 and there is no UI to ask whether to use it",
      messages(vim.log.levels.WARN)
    )
  end)

  it("ui.confirm_frontmatter_cost must be a boolean", function()
    local ok, err = pcall(require("flemma").setup, { ui = { confirm_frontmatter_cost = "yes" } })
    assert.is_false(ok)
    assert.truthy(err:find("`ui.confirm_frontmatter_cost` should be a boolean, not string", 1, true), err)
  end)
end)
