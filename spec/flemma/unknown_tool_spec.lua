-- Issue 24 §10: a tool name the model made up (`bsh` for `bash`) was offered for
-- approval as pending, with a normal preview, and failed only once approved. Phase 1
-- gives it its error result at once, like a denied call, so autopilot goes on.
-- Real chat buffer, <C-]>, the loopback server as the model.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

local tool_stream = helpers.anthropic_tool_stream

describe("a tool call naming a tool the buffer does not have", function()
  local h
  local function setup(autopilot)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { autopilot = { enabled = autopilot } },
    })
  end
  before_each(function()
    h = helpers.send_harness({ key = KEY })
  end)
  after_each(function()
    h.teardown()
  end)

  it("gets its error result in phase 1 and autopilot sends it on", function()
    setup(true)
    h.server:script({
      { body = tool_stream({ { "bsh", "toolu_bsh", '{"command": "ls"}' } }), content_type = "text/event-stream" },
      { fixture = "anthropic_text.sse" },
    })
    local buf = helpers.open_chat({ "@You:", "List the files." })
    press("<C-]>")
    h.wait_finished(2)
    local available = table.concat(require("flemma.tools").for_buffer(buf), ", ")
    local msg = ('unknown tool "bsh"; available: %s'):format(available)
    assert.truthy(available:find("bash", 1, true))
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_bsh` (error)\n\n```\n" .. msg .. "\n```", 1, true), t)
    assert.is_nil(t:find("flemma:tool", 1, true), t)
    assert.truthy(t:find("Second line ends here.", 1, true), t)
    local reqs = h.server:requests()
    assert.equals(2, #reqs)
    local last = reqs[2].json.messages[#reqs[2].json.messages]
    assert.equals("user", last.role)
    assert.equals("tool_result", last.content[1].type)
    assert.equals("toolu_bsh", last.content[1].tool_use_id)
    assert.is_true(last.content[1].is_error)
    assert.equals(
      msg,
      type(last.content[1].content) == "string" and last.content[1].content or last.content[1].content[1].text
    )
  end)

  it("is never offered for approval: no pending placeholder, no preview, the real tool still waits", function()
    setup(false)
    h.server:script({
      {
        body = tool_stream({
          { "bsh", "toolu_bsh", '{"command": "ls"}' },
          { "bash", "toolu_bash", '{"command": "ls"}' },
        }),
        content_type = "text/event-stream",
      },
    })
    local buf = helpers.open_chat({ "@You:", "List the files." })
    press("<C-]>")
    h.wait_finished(1)
    helpers.settle()
    press("<C-]>") -- phase 1
    helpers.settle()
    local t = text(buf)
    assert.truthy(t:find('**Tool Result:** `toolu_bsh` (error)\n\n```\nunknown tool "bsh"; available: ', 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_bash`\n\n```flemma:tool status=pending\n```", 1, true), t)
    -- One preview: the pending bash call's.
    local ns = vim.api.nvim_get_namespaces()
    local previews = 0
    for name, id in pairs(ns) do
      if name:find("flemma") then
        for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, id, 0, -1, { details = true })) do
          for _, chunk in ipairs(m[4].virt_text or {}) do
            if chunk[1]:find("bsh", 1, true) then
              previews = previews + 1
            end
          end
          for _, vl in ipairs(m[4].virt_lines or {}) do
            for _, chunk in ipairs(vl) do
              if chunk[1]:find("bsh", 1, true) then
                previews = previews + 1
              end
            end
          end
        end
      end
    end
    assert.equals(0, previews)
  end)

  it("says so in phase 1 for a tool the frontmatter leaves out", function()
    setup(false)
    h.server:script({
      { body = tool_stream({ { "bash", "toolu_b", '{"command": "ls"}' } }), content_type = "text/event-stream" },
    })
    local buf = helpers.open_chat({ "```lua", 'flemma.opt.tools = { "read" }', "```", "@You:", "List the files." })
    press("<C-]>")
    h.wait_finished(1)
    helpers.settle()
    press("<C-]>")
    helpers.settle()
    local t = text(buf)
    assert.truthy(
      t:find(
        "**Tool Result:** `toolu_b` (error)\n\n```\ntool `bash` is not enabled in this buffer (flemma.opt.tools selects: read)\n```",
        1,
        true
      ),
      t
    )
  end)
end)
