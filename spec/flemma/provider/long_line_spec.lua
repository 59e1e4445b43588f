-- A line longer than the writer's largest change (128 KB): the JSON input of a
-- `write` tool use, one line, streamed through the loopback server, arrives in the
-- buffer intact (the writer's cut points were found by a pattern quadratic in the
-- line's length, which held Neovim for minutes).
local helpers = require("spec.support.helpers")
local document = require("flemma.chat.document")

local KEY = "sk-flemma-long-" .. tostring(math.random(1e9))

describe("a long line in an answer", function()
  local h, server
  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 60 },
      tools = { autopilot = { enabled = false } },
    })
  end)
  after_each(function()
    h.teardown()
  end)

  it("arrives intact: a 600 KB single-line tool input", function()
    local total = 600 * 1024
    server:script({
      { synth = { kind = "anthropic_tool", bytes = total, delta = 3000 }, chunk_seed = 9, max_chunk = 70000 },
    })
    local buf = helpers.edit(helpers.tmpdir() .. "/long.chat", { "@You:", "Write the big file." })
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(1, 60000).status)
    local head, tail = '{"path": "big.txt", "content": "', '"}'
    local content = ("0123456789abcdef"):rep(total / 16 + 1):sub(1, total - #head - #tail)
    local doc = document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    assert.same(
      { "user", "assistant", "user" },
      vim.tbl_map(function(m)
        return m.role
      end, doc.messages)
    )
    local use = doc.messages[2].parts[1]
    assert.equals("tool_use", use.kind)
    assert.equals("write", use.name)
    assert.equals("big.txt", use.input.path)
    assert.equals(#content, #use.input.content)
    assert.is_true(use.input.content == content, "the content changed on the way")
    -- One line holds the whole input.
    local longest = 0
    for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
      longest = math.max(longest, #l)
    end
    assert.is_true(longest > total - 100, "the input is not on one line: " .. longest)
  end)
end)
