-- Issue 27: the `ask` tool. The model asks the user a question; the answer (picked
-- with vim.ui.select, or typed with vim.ui.input) is the result. No rule, preset or
-- `require_approval = false` approves it: it always waits as a pending placeholder, so
-- autopilot stops there; once the user approves it, <C-]> shows the question.
-- Real chat buffer, <C-]>, the loopback server as the model; only the UI functions
-- vim.ui.select / vim.ui.input are replaced by the user's answers.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

local tool_stream = helpers.anthropic_tool_stream

describe("the ask tool", function()
  local h, orig_select, orig_input, asked
  local function setup(extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { autopilot = { enabled = true } },
    }, extra or {}))
  end
  local function answer_select(choice_of)
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = { kind = "select", items = items, prompt = opts.prompt }
      local idx = choice_of(items)
      on_choice(idx and items[idx] or nil, idx)
    end
  end
  local function answer_input(value)
    vim.ui.input = function(opts, on_confirm)
      asked[#asked + 1] = { kind = "input", prompt = opts.prompt }
      on_confirm(value)
    end
  end
  local function ask_call(id, input)
    return { body = tool_stream({ { "ask", id, vim.json.encode(input) } }), content_type = "text/event-stream" }
  end
  local function approve_all(buf)
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    for i, l in ipairs(lines) do
      if l == "```flemma:tool status=pending" then
        vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { "```flemma:tool status=approved" })
      end
    end
  end
  local function wait_pending(buf)
    helpers.wait_for(function()
      return text(buf):find("```flemma:tool status=pending", 1, true) ~= nil
    end, 10000, "no pending placeholder:\n" .. text(buf))
  end

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    orig_select, orig_input = vim.ui.select, vim.ui.input
    asked = {}
    answer_select(function()
      error("vim.ui.select was called")
    end)
    answer_input(nil)
  end)
  after_each(function()
    vim.ui.select, vim.ui.input = orig_select, orig_input
    h.teardown()
  end)

  it("is never approved by rules: autopilot stops at it; approved, <C-]> asks and the pick is the result", function()
    -- Everything that could approve it: a list naming it, a preset, require_approval = false.
    setup({ tools = { auto_approve = { "ask", "$default" }, require_approval = false } })
    h.server:script({
      ask_call("toolu_ask1", { question = "Which colour?", options = { "red", "blue" }, allow_free_text = vim.NIL }),
      { fixture = "anthropic_text.sse" },
    })
    local buf = helpers.open_chat({ "@You:", "Pick a colour with me." })
    press("<C-]>")
    h.wait_finished(1)
    wait_pending(buf)
    vim.wait(300)
    assert.equals(1, #h.server:requests())
    assert.same({}, asked)
    assert.truthy(text(buf):find("**Tool Use:** `ask` (`toolu_ask1`)", 1, true), text(buf))
    answer_select(function(items)
      return vim.fn.index(items, "blue") + 1
    end)
    approve_all(buf)
    press("<C-]>")
    -- Autopilot sends the answer on.
    h.wait_finished(2)
    assert.equals(1, #asked)
    assert.same({ "red", "blue" }, asked[1].items)
    assert.equals("Which colour?", asked[1].prompt)
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_ask1`\n\n```\nblue\n```", 1, true), t)
    local req = h.server:requests()[2].json
    local last = req.messages[#req.messages]
    assert.equals("user", last.role)
    assert.equals("tool_result", last.content[1].type)
    assert.equals("toolu_ask1", last.content[1].tool_use_id)
    assert.truthy(vim.inspect(last.content[1].content):find("blue", 1, true), vim.inspect(last))
  end)

  it("a question left without an answer is the error result 'the user did not answer'", function()
    setup({ tools = { autopilot = { enabled = false } } })
    h.server:script({
      ask_call("toolu_ask2", { question = "Go on?", options = { "yes", "no" }, allow_free_text = false }),
    })
    local buf = helpers.open_chat({ "@You:", "Ask me." })
    press("<C-]>")
    h.wait_finished(1)
    press("<C-]>")
    wait_pending(buf)
    answer_select(function()
      return nil
    end)
    approve_all(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("**Tool Result:** `toolu_ask2` (error)", 1, true) ~= nil
    end, 10000, "no error result:\n" .. text(buf))
    assert.equals(1, #asked)
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_ask2` (error)\n\n```\nthe user did not answer\n```", 1, true), t)
  end)

  it("without options the answer is typed (vim.ui.input); with allow_free_text, 'own words' asks for it", function()
    setup({ tools = { autopilot = { enabled = false } } })
    h.server:script({
      {
        body = tool_stream({
          {
            "ask",
            "toolu_ask3",
            vim.json.encode({ question = "Your name?", options = vim.NIL, allow_free_text = vim.NIL }),
          },
          {
            "ask",
            "toolu_ask4",
            vim.json.encode({ question = "Which shell?", options = { "bash", "zsh" }, allow_free_text = true }),
          },
        }),
        content_type = "text/event-stream",
      },
    })
    local buf = helpers.open_chat({ "@You:", "Ask me two things." })
    press("<C-]>")
    h.wait_finished(1)
    press("<C-]>")
    wait_pending(buf)
    answer_input("fish, really")
    answer_select(function(items)
      return #items
    end)
    approve_all(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("flemma:tool", 1, true) == nil
    end, 10000, "no results:\n" .. text(buf) .. vim.inspect(asked) .. vim.inspect(h.notes))
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_ask3`\n\n```\nfish, really\n```", 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_ask4`\n\n```\nfish, really\n```", 1, true), t)
    local kinds = vim.tbl_map(function(a)
      return a.kind
    end, asked)
    table.sort(kinds)
    assert.same({ "input", "input", "select" }, kinds)
    for _, a in ipairs(asked) do
      if a.kind == "select" then
        assert.same({ "bash", "zsh", "(answer in your own words)" }, a.items)
      end
    end
  end)
end)
