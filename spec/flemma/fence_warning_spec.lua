-- A code fence left open in one message and closed by a fence of a later one reads
-- the role markers between them as text: the messages merge silently (issue 24.6).
-- The opening line shows a warning while it does, and a send that would change the
-- roles sent is refused with it; through a real chat buffer, <C-]> and the loopback
-- server.
local helpers = require("spec.support.helpers")
local document = require("flemma.chat.document")
local view = require("flemma.ui.view")
local send = require("flemma.cycle.send")

local KEY = "sk-flemma-fence-" .. tostring(math.random(1e9))

local CHAT = {
  "@You:",
  "Fix this:",
  "```python",
  "x = 1",
  "",
  "@Assistant:",
  "Here it is:",
  "",
  "```python",
  "x = 2",
  "```",
  "",
  "@You:",
  "Thanks, and now?",
}

local function warnings(buf)
  return vim.diagnostic.get(buf, { namespace = view.fence_ns })
end

describe("a fence that reads a role marker as text", function()
  local h, server
  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      tools = { autopilot = { enabled = false } },
    })
  end)
  after_each(function()
    h.teardown()
  end)

  it("is named on its opening line, refuses the send, and both go once it is closed", function()
    local buf = helpers.edit(helpers.tmpdir() .. "/fence.chat", CHAT)
    assert.is_true(
      vim.wait(5000, function()
        return #warnings(buf) == 1
      end, 20),
      "no warning on the fence"
    )
    local w = warnings(buf)[1]
    assert.equals(2, w.lnum)
    assert.equals(vim.diagnostic.severity.WARN, w.severity)
    assert.truthy(
      w.message:find("this fence is not closed: the @Assistant: below it is read as text", 1, true),
      w.message
    )

    -- <C-]> refuses: the assistant's answer would go as the user's text.
    server:script({ { fixture = "anthropic_text.sse" } })
    helpers.press("<C-]>")
    helpers.settle()
    assert.same({}, server:requests())
    local refused = vim.tbl_filter(function(n)
      return n.msg:find("not sent", 1, true) and n.msg:find("line 3: this fence is not closed", 1, true)
    end, h.notes)
    assert.equals(1, #refused, vim.inspect(h.notes))
    assert.equals(2, vim.diagnostic.get(buf, { namespace = send.ns })[1].lnum)

    -- Closed: the warning goes and the send goes, with the roles as written.
    vim.api.nvim_buf_set_lines(buf, 4, 4, false, { "```" })
    assert.is_true(
      vim.wait(5000, function()
        return #warnings(buf) == 0
      end, 20),
      "the warning stayed"
    )
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(1, 30000).status)
    local roles = vim.tbl_map(function(m)
      return m.role
    end, server:requests()[1].json.messages)
    assert.same({ "user", "assistant", "user" }, roles)
  end)

  it("warns without refusing the send when the marker it reads as text has its message's role", function()
    local doc = document.parse({ "@You:", "```", "a", "@You:", "b", "```", "" })
    assert.equals(1, #doc.diagnostics)
    assert.equals("warning", doc.diagnostics[1].severity)
    assert.is_true((document.validate_for_send(doc)))
    -- A tool result may quote a chat (the output of `cat x.chat`): no warning, sendable.
    local quoted = document.parse({
      "@You:",
      "show it",
      "",
      "@Assistant:",
      "**Tool Use:** `bash` (`t1`)",
      "",
      "```json",
      '{"command": "cat a.chat"}',
      "```",
      "",
      "@You:",
      "**Tool Result:** `t1`",
      "",
      "```",
      "@Assistant:",
      "hello",
      "```",
      "",
      "go on",
    })
    assert.same({}, quoted.diagnostics)
    assert.is_true((document.validate_for_send(quoted)))
    local other = document.parse(CHAT)
    local ok, problems = document.validate_for_send(other)
    assert.is_false(ok)
    assert.equals(3, problems[1].line)
  end)
end)
