-- Issue 24 §16: the results tools finished during the session stayed unfolded while
-- the same results start closed once the chat is opened again (ui.fold_completed).
-- Real <C-]>, a real bash tool, the folds of the window.
local helpers = require("spec.support.helpers")

local function line_of(buf, s)
  for i, l in ipairs(helpers.lines(buf)) do
    if l:find(s, 1, true) then
      return i
    end
  end
end

describe("a tool result written in the session", function()
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    require("flemma").setup({})
    helpers.cleanup()
  end)

  local CHAT = {
    "@You:",
    "List.",
    "",
    "@Assistant:",
    "**Tool Use:** `bash` (`t1`)",
    "",
    "```json",
    '{"command": "printf \'one\\ntwo\\nthree\\n\'"}',
    "```",
  }

  it("is folded as when the chat is opened again", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "bash" } } })
    local buf = helpers.open_chat(CHAT)
    helpers.press("<C-]>")
    helpers.wait_for(function()
      return line_of(buf, "**Tool Result:** `t1`") ~= nil and not helpers.text(buf):find("flemma:tool", 1, true)
    end, 8000, "no result:\n" .. helpers.text(buf))
    helpers.settle()
    helpers.settle()
    local header = line_of(buf, "**Tool Result:** `t1`")
    assert.truthy(helpers.text(buf):find("two", 1, true))
    assert.are_not.equal(-1, vim.fn.foldclosed(header), helpers.text(buf))
    -- The same in a chat opened again.
    local path = vim.api.nvim_buf_get_name(buf)
    vim.cmd("silent write")
    vim.cmd("silent! %bwipeout!")
    vim.cmd("edit " .. vim.fn.fnameescape(path))
    helpers.settle()
    helpers.settle()
    assert.are_not.equal(-1, vim.fn.foldclosed(line_of(0, "**Tool Result:** `t1`")))
  end)

  it("stays open with ui.fold_completed = false", function()
    require("flemma").setup({
      ui = { fold_completed = false },
      tools = { autopilot = { enabled = false }, auto_approve = { "bash" } },
    })
    local buf = helpers.open_chat(CHAT)
    helpers.press("<C-]>")
    helpers.wait_for(function()
      return line_of(buf, "**Tool Result:** `t1`") ~= nil and not helpers.text(buf):find("flemma:tool", 1, true)
    end, 8000, "no result")
    helpers.settle()
    assert.equals(-1, vim.fn.foldclosed(line_of(buf, "**Tool Result:** `t1`")))
  end)
end)

describe("the text of a closed tool use fold", function()
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("shows the start of a 2 MB input line, cut on a whole character", function()
    require("flemma").setup({})
    -- "é" (2 bytes) everywhere: the byte prefix the preview reads ends inside one.
    local input = '{"content":"' .. string.rep("é", 1024 * 1024) .. '"}'
    local buf = helpers.edit(helpers.tmpdir() .. "/big.chat", {
      "@You:",
      "Write.",
      "",
      "@Assistant:",
      "**Tool Use:** `write` (`t_big`)",
      "",
      "```json",
      input,
      "```",
    })
    helpers.settle()
    local text = require("flemma.ui.fold").describe(buf, 5, 9)
    local expected = '{"content":"' .. string.rep("é", 59 - 12) .. "…"
    assert.equals("Tool Use: write (t_big): " .. expected .. " · 5 lines", text)
  end)
end)
