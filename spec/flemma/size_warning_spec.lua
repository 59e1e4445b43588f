-- Issue 24 §16: sending 5 MB (1.3 M tokens) gave no size or cost warning. A send
-- estimated above ui.warn_tokens input tokens says so in one line, with its size and
-- the estimated input cost, and still goes out. Real <C-]>, the loopback server.
local helpers = require("spec.support.helpers")

describe("a large send", function()
  local h
  local function setup(ui)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = {
          kind = "anthropic",
          endpoint = h.server:url("/v1/messages"),
          api_key_env = "FLEMMA_SPEC_KEY",
          model = "claude-sonnet-4-6",
        },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { autopilot = { enabled = false } },
      ui = ui,
    })
  end
  local function warnings()
    return vim.tbl_filter(function(n)
      return n.level == vim.log.levels.WARN
    end, h.notes)
  end
  local function big_chat(bytes)
    local line = string.rep("x", 99)
    local lines = { "@You:" }
    for _ = 1, math.floor(bytes / 100) do
      lines[#lines + 1] = line
    end
    return lines
  end
  before_each(function()
    h = helpers.send_harness({ key = "sk-flemma-spec-size" })
  end)
  after_each(function()
    h.teardown()
  end)

  it("says how large it is and about what it costs, then sends it", function()
    setup()
    h.server:script({ { fixture = "anthropic_text.sse" } })
    helpers.open_chat(big_chat(2 * 1024 * 1024))
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(1, 30000).status)
    assert.equals(1, #h.server:requests())
    local w = warnings()
    assert.equals(1, #w, vim.inspect(h.notes))
    -- 2 MB / 4 = 524k tokens; Sonnet's input price $3 per million: $1.57.
    assert.equals("(flemma) large request: ~524.3k tokens (2 MB), ~$1.57 input", w[1].msg)
    -- One line that fits the message area of an 80-column Neovim.
    assert.is_true(#w[1].msg <= 68)
  end)

  it("says nothing below ui.warn_tokens, and never with 0", function()
    setup({ warn_tokens = 600000 })
    h.server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
    helpers.open_chat(big_chat(2 * 1024 * 1024))
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(1, 30000).status)
    assert.equals(0, #warnings(), vim.inspect(h.notes))
    setup({ warn_tokens = 0 })
    helpers.open_chat(big_chat(4 * 1024 * 1024), "other.chat")
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(2, 30000).status)
    assert.equals(0, #warnings(), vim.inspect(h.notes))
  end)

  it("refuses a negative ui.warn_tokens", function()
    local ok, err = pcall(require("flemma").setup, { ui = { warn_tokens = -1 } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("ui.warn_tokens", 1, true))
  end)
end)
