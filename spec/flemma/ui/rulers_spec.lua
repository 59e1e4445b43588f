-- Issue 24 §9: each failed send (HTTP 500, 529, 401, a refused connection) and each
-- cancelled tool left one more ruler at the end of the buffer; after a few errors
-- there were seven in a row. A chat keeps exactly one ruler above each role marker
-- (but the first line's). Real <C-]>, real curl and bash, the loopback server.
local helpers = require("spec.support.helpers")
local marks = require("flemma.ui.marks")

local press = helpers.press

--- The lines (1-based) of the ruler extmarks, as a window drawing every line gets
--- them (the decoration provider places what it draws; headless 0.10 draws nothing).
--- A line past the last one is a mark left there by deleted lines.
local function rulers(buf)
  helpers.settle()
  marks.update(buf) -- what the view does after a change (perhaps on a timer still due)
  marks.ensure(buf, 1, vim.api.nvim_buf_line_count(buf))
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, marks.ns, 0, -1, { details = true })) do
    if m[4].virt_lines then
      out[#out + 1] = m[2] + 1
    end
  end
  return out
end

--- The lines (1-based) of the role markers but the first line's: where rulers belong.
local function markers(buf)
  local out = {}
  for i, l in ipairs(helpers.lines(buf)) do
    if i > 1 and (l == "@You:" or l == "@Assistant:" or l == "@System:") then
      out[#out + 1] = i
    end
  end
  return out
end

describe("rulers", function()
  local h
  local function setup(endpoint)
    require("flemma").setup({
      provider = "test",
      providers = { test = { kind = "anthropic", endpoint = endpoint, api_key_env = "FLEMMA_SPEC_KEY" } },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false }, auto_approve = { "bash" } },
    })
  end
  before_each(function()
    h = helpers.send_harness({ key = "sk-flemma-spec-rulers" })
  end)
  after_each(function()
    h.teardown()
  end)

  it("stay one per role marker after failed sends", function()
    setup(h.server:url("/v1/messages"))
    h.server:script({
      { status = 500, body = '{"type":"error","error":{"type":"api_error","message":"Internal server error"}}' },
      { status = 529, body = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}' },
      { status = 401, body = '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}' },
    })
    local buf = helpers.open_chat({ "@System:", "Be brief.", "", "@You:", "Hello" })
    assert.same({ 4 }, rulers(buf))
    for n = 1, 3 do
      press("<C-]>")
      assert.equals("error", h.wait_finished(n).status)
      assert.same(markers(buf), rulers(buf), ("after failure %d:\n%s"):format(n, helpers.text(buf)))
    end
    assert.same({ 4 }, rulers(buf))
    -- Then one that works: one ruler above its @Assistant: and one above the new @You:.
    h.server:script({ { fixture = "anthropic_text.sse" } })
    press("<C-]>")
    assert.equals("completed", h.wait_finished(4).status)
    assert.equals(3, #markers(buf))
    assert.same(markers(buf), rulers(buf))
  end)

  it("stay one per role marker after refused connections", function()
    -- A port nothing listens on: take a free one and close it again.
    local tcp = vim.uv.new_tcp()
    tcp:bind("127.0.0.1", 0)
    local port = tcp:getsockname().port
    tcp:close()
    setup(("http://127.0.0.1:%d/v1/messages"):format(port))
    local buf = helpers.open_chat({ "@System:", "Be brief.", "", "@You:", "Hello" })
    assert.same({ 4 }, rulers(buf))
    for n = 1, 3 do
      press("<C-]>")
      assert.equals("error", h.wait_finished(n).status)
      assert.same({ 4 }, rulers(buf), ("after failure %d:\n%s"):format(n, helpers.text(buf)))
    end
  end)

  it("stay one per role marker after cancelled tools", function()
    setup(h.server:url("/v1/messages"))
    local buf = helpers.open_chat({
      "@You:",
      "Wait.",
      "",
      "@Assistant:",
      "**Tool Use:** `bash` (`t1`)",
      "",
      "```json",
      '{"command": "sleep 30"}',
      "```",
    })
    for _ = 1, 3 do
      press("<C-]>") -- phase 1, then phase 2 starts the approved sleep
      helpers.wait_for(function()
        return #require("flemma.cycle").running(buf) > 0
      end, 5000, "the tool never started:\n" .. helpers.text(buf))
      press("<C-c>")
      helpers.wait_for(function()
        return #require("flemma.cycle").running(buf) == 0
      end, 5000, "the tool was not cancelled")
      assert.same(markers(buf), rulers(buf), helpers.text(buf))
      -- Take the result away again for the next round.
      local lines = helpers.lines(buf)
      local you = #lines
      while lines[you] ~= "@You:" do
        you = you - 1
      end
      vim.api.nvim_buf_set_lines(buf, you - 2, -1, false, {})
      assert.same({ 4 }, rulers(buf), helpers.text(buf))
    end
  end)
end)
