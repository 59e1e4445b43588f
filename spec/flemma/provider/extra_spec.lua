-- Issue 24 §15: request fields Flemma does not know (tool_choice, seed, top_k, min_p,
-- a grammar, provider options) could not be sent. `parameters.extra` (and
-- `parameters.<provider>.extra`, in setup(), a preset or the frontmatter) is merged
-- into the request body; a field Flemma builds or sets itself is refused with a
-- message. <C-]> in a real chat, real curl, the body the loopback server received.
local helpers = require("spec.support.helpers")

local KEY = "sk-extra-" .. tostring(math.random(1e9))

describe("parameters.extra", function()
  local h
  local function setup(kind, path, parameters, more)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = {
        test = { kind = kind, endpoint = h.server:url(path), api_key_env = "FLEMMA_SPEC_KEY", model = "local-model" },
        other = { kind = kind, endpoint = h.server:url(path), api_key_env = "FLEMMA_SPEC_KEY", model = "local-model" },
      },
      parameters = vim.tbl_extend(
        "force",
        { max_retries = 0, cache_retention = "none", vertex = { project_id = "p" } },
        parameters
      ),
      tools = { autopilot = { enabled = false } },
    }, more or {}))
  end
  local function send(lines)
    local buf = helpers.open_chat(lines or { "@You:", "Hello" })
    local n = #h.finished
    helpers.press("<C-]>")
    local fin = h.wait_finished(n + 1)
    return fin, buf
  end
  before_each(function()
    h = helpers.send_harness({ key = KEY })
  end)
  after_each(function()
    h.teardown()
  end)

  it("adds fields to an Anthropic request, the provider's own after the general ones", function()
    setup("anthropic", "/v1/messages", {
      extra = { seed = 7, top_k = 40, tool_choice = { type = "auto" } },
      test = { extra = { top_k = 20, metadata = { user_id = "u-1" } } },
    })
    h.server:script({ { fixture = "anthropic_text.sse" } })
    assert.equals("completed", send().status, vim.inspect(h.notes))
    local j = h.server:requests()[1].json
    assert.equals(7, j.seed)
    assert.equals(20, j.top_k)
    assert.same({ type = "auto" }, j.tool_choice)
    assert.same({ user_id = "u-1" }, j.metadata)
    assert.equals("local-model", j.model)
    assert.same({ { role = "user", content = { { type = "text", text = "Hello" } } } }, j.messages)
    -- The other provider gets the general fields only.
    vim.cmd("Flemma switch other")
    h.server:script({ { fixture = "anthropic_text.sse" } })
    assert.equals("completed", send().status, vim.inspect(h.notes))
    j = h.server:requests()[1].json
    assert.equals(40, j.top_k)
    assert.is_nil(j.metadata)
  end)

  it("adds a grammar and min_p to an openai_chat request (llama-server)", function()
    setup("openai_chat", "/v1/chat/completions", { extra = { grammar = 'root ::= "yes" | "no"', min_p = 0.05 } })
    h.server:script({ { fixture = "openai_chat_text.sse" } })
    assert.equals("completed", send().status, vim.inspect(h.notes))
    local j = h.server:requests()[1].json
    assert.equals('root ::= "yes" | "no"', j.grammar)
    assert.equals(0.05, j.min_p)
    assert.is_true(j.stream)
  end)

  it("merges into a table Flemma builds, field by field (vertex generationConfig)", function()
    setup(
      "vertex",
      "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse",
      {
        max_tokens = 123,
        extra = {
          generationConfig = { topK = 40 },
          safetySettings = { { category = "HARM_CATEGORY_HATE_SPEECH", threshold = "BLOCK_NONE" } },
        },
      }
    )
    h.server:script({ { body = helpers.sse_body("vertex_thinking_text.http"), content_type = "text/event-stream" } })
    assert.equals("completed", send().status, vim.inspect(h.notes))
    local j = h.server:requests()[1].json
    assert.equals(40, j.generationConfig.topK)
    assert.equals(123, j.generationConfig.maxOutputTokens)
    assert.equals("BLOCK_NONE", j.safetySettings[1].threshold)
  end)

  it("comes from a preset and from the frontmatter", function()
    setup("openai_chat", "/v1/chat/completions", {}, {
      presets = { ["$seeded"] = { provider = "test", parameters = { extra = { seed = 3 } } } },
    })
    vim.cmd("Flemma switch $seeded")
    h.server:script({ { fixture = "openai_chat_text.sse" } })
    assert.equals("completed", send().status, vim.inspect(h.notes))
    assert.equals(3, h.server:requests()[1].json.seed)
    h.server:script({ { fixture = "openai_chat_text.sse" } })
    assert.equals(
      "completed",
      send({ "```lua", "flemma.opt.extra = { seed = 9, top_k = 5 }", "```", "@You:", "Hi" }).status
    )
    assert.equals(9, h.server:requests()[1].json.seed)
    assert.equals(5, h.server:requests()[1].json.top_k)
  end)

  for _, case in ipairs({
    {
      { model = "gpt-x" },
      "parameters.extra.model: Flemma builds `model` itself; parameters.extra adds fields it does not set",
    },
    {
      { messages = {} },
      "parameters.extra.messages: Flemma builds `messages` itself; parameters.extra adds fields it does not set",
    },
    {
      { max_tokens = 5 },
      "parameters.extra.max_tokens: Flemma sets `max_tokens` itself (8192); use the parameter that sets it",
    },
  }) do
    it("refuses " .. next(case[1]) .. ", a field Flemma builds, and sends nothing", function()
      setup("anthropic", "/v1/messages", { extra = case[1] })
      h.server:script({ { fixture = "anthropic_text.sse" } })
      local fin, buf = send()
      assert.equals("error", fin.status)
      assert.equals(0, #h.server:requests())
      local errors = vim.tbl_filter(function(n)
        return n.level == vim.log.levels.ERROR
      end, h.notes)
      assert.equals(1, #errors, vim.inspect(h.notes))
      assert.truthy(errors[1].msg:find(case[2], 1, true), errors[1].msg)
      assert.is_nil(errors[1].msg:find("\n", 1, true), errors[1].msg)
      assert.same({ "@You:", "Hello" }, helpers.lines(buf))
    end)
  end

  it("in the frontmatter must be a table", function()
    setup("openai_chat", "/v1/chat/completions", {})
    local buf = helpers.open_chat({ "```lua", 'flemma.opt.extra = "seed=1"', "```", "@You:", "Hi" })
    helpers.press("<C-]>")
    vim.wait(300)
    assert.equals(0, #h.server:requests())
    local all = table.concat(
      vim.tbl_map(function(n)
        return n.msg
      end, h.notes),
      "\n"
    )
    assert.truthy(all:find("`flemma.opt.extra` should be a table of request fields", 1, true), all)
    assert.truthy(buf)
  end)
end)
