local helpers = require("spec.support.helpers")
local preview = require("flemma.ui.preview")

local function chat_with_pending(input_json)
  local dir = helpers.tmpdir()
  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/p.chat"))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
    "@Assistant:",
    "**Tool Use:** `bash` (`toolu_01`)",
    "",
    "```json",
    input_json,
    "```",
    "",
    "@You:",
    "**Tool Result:** `toolu_01`",
    "",
    "```flemma:tool status=pending",
    "```",
  })
  return buf
end

describe("flemma.ui.preview", function()
  before_each(function()
    require("flemma").setup({})
  end)
  after_each(function()
    vim.cmd("silent! only")
    vim.cmd("silent! %bwipeout!")
    vim.o.listchars = "tab:> ,trail:-,nbsp:+"
    helpers.cleanup()
  end)

  it("follows changes without TextChanged within 100 ms, redrawing only what changed", function()
    local buf = chat_with_pending('{"command": "ls"}')
    preview.refresh(buf)
    local before = vim.api.nvim_buf_get_extmarks(buf, preview.ns, 0, -1, {})
    assert.equals(1, #before)
    -- An edit in the assistant message: the placeholder's message is after it,
    -- so its preview is redrawn with the new input.
    vim.api.nvim_buf_set_lines(buf, 4, 5, false, { '{"command": "pwd"}' })
    assert.is_true(vim.wait(100, function()
      local shown = preview.shown(buf)
      return #shown == 1 and shown[1].text:find("pwd", 1, true) ~= nil
    end, 5))
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "", "@Assistant:", "done" })
    vim.wait(60)
    local mark = vim.api.nvim_buf_get_extmarks(buf, preview.ns, 0, -1, {})[1]
    -- An edit of a later message leaves the drawn preview alone.
    vim.api.nvim_buf_set_lines(buf, 14, 15, false, { "done, really" })
    vim.wait(60)
    assert.same({ mark }, vim.api.nvim_buf_get_extmarks(buf, preview.ns, 0, -1, {}))
    -- Resolving the placeholder by hand removes the preview.
    vim.api.nvim_buf_set_lines(buf, 10, 11, false, { "```flemma:tool status=approved" })
    assert.is_true(vim.wait(100, function()
      return #preview.shown(buf) == 0
    end, 5))
  end)

  it("leaves no preview behind when the whole buffer is replaced by text with no placeholder", function()
    local buf = chat_with_pending('{"command": "ls"}')
    preview.refresh(buf)
    assert.equals(1, #preview.shown(buf))
    -- The same assistant message, its placeholder gone (the first lines are the same
    -- text, so the document keeps that message as it was).
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
      "@Assistant:",
      "**Tool Use:** `bash` (`toolu_01`)",
      "",
      "```json",
      '{"command": "ls"}',
      "```",
    })
    preview.refresh(buf)
    vim.wait(60)
    assert.same({}, preview.shown(buf))
    for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, preview.ns, 0, -1, { details = true })) do
      assert.is_true(m[4].invalid == true, "a preview is still displayed: " .. vim.inspect(m))
    end
  end)

  it("draws a large change in slices that go on where the last one stopped, also after an edit meanwhile", function()
    local lines = {}
    for t = 1, 60 do
      local id = ("toolu_%03d"):format(t)
      vim.list_extend(lines, {
        "@Assistant:",
        "**Tool Use:** `bash` (`" .. id .. "`)",
        "",
        "```json",
        ('{"command": "echo %d"}'):format(t),
        "```",
        "",
        "@You:",
        "**Tool Result:** `" .. id .. "`",
        "",
        "```flemma:tool status=pending",
        "```",
        "",
      })
    end
    local buf = vim.api.nvim_create_buf(true, false)
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    -- Each slice draws at least one message; with no time budget, one each.
    preview.update(buf, { budget_ms = 0 })
    local first = #preview.shown(buf)
    assert.is_true(first < 60, "drawn in one slice: " .. first)
    -- An edit before the slices are done: message 40's command changes.
    local at = 39 * 13 + 5
    vim.api.nvim_buf_set_lines(buf, at - 1, at, false, { '{"command": "changed"}' })
    assert.is_true(vim.wait(2000, function()
      return #preview.shown(buf) == 60
    end, 5))
    local texts = {}
    for _, s in ipairs(preview.shown(buf)) do
      texts[#texts + 1] = s.text
    end
    assert.equals("bash: $ changed", texts[40])
    assert.equals("bash: $ echo 60", texts[60])
    -- The same as a full redraw from a fresh parse.
    local sliced = preview.shown(buf)
    preview.refresh(buf, require("flemma.chat.document").parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false)))
    assert.same(preview.shown(buf), sliced)
  end)

  it("fits the preview to the window's text width with …", function()
    local buf = chat_with_pending(('{"command": "%s", "label": null, "timeout": null}'):format(string.rep("x", 200)))
    vim.cmd("vsplit")
    vim.cmd("vertical resize 40")
    vim.wo.number = true
    preview.refresh(buf)
    local shown = preview.shown(buf)
    assert.equals(1, #shown)
    local width = preview.text_width(buf)
    assert.equals(40 - vim.fn.getwininfo(vim.fn.bufwinid(buf))[1].textoff, width)
    assert.equals(width, vim.fn.strdisplaywidth(shown[1].text))
    assert.equals("…", vim.fn.strcharpart(shown[1].text, vim.fn.strchars(shown[1].text) - 1))
    assert.truthy(shown[1].text:find("^bash: %$ xxx"))
  end)

  it("is redrawn to the new width when the window is resized", function()
    local buf = chat_with_pending(('{"command": "%s", "label": null, "timeout": null}'):format(string.rep("y", 300)))
    vim.cmd("vsplit")
    vim.cmd("vertical resize 60")
    vim.api.nvim_exec_autocmds("WinResized", {})
    helpers.wait_for(function()
      local shown = preview.shown(buf)
      return #shown == 1 and vim.fn.strdisplaywidth(shown[1].text) == preview.text_width(buf)
    end, 2000, "preview not fitted to 60 columns")
    local wide = preview.text_width(buf)
    vim.cmd("vertical resize 30")
    vim.api.nvim_exec_autocmds("WinResized", {})
    local narrow = preview.text_width(buf)
    assert.equals(wide - 30, narrow)
    helpers.wait_for(function()
      local shown = preview.shown(buf)
      return #shown == 1 and vim.fn.strdisplaywidth(shown[1].text) == narrow
    end, 2000, "preview not redrawn after the resize: " .. vim.inspect(preview.shown(buf)))
  end)

  it("collapses newlines to the 'listchars' eol character, else ↵", function()
    local buf = chat_with_pending('{"command": "echo a\\necho b", "label": null, "timeout": null}')
    preview.refresh(buf)
    assert.equals("bash: $ echo a↵echo b", preview.shown(buf)[1].text)
    vim.o.listchars = "eol:$,tab:> "
    preview.refresh(buf)
    assert.equals("bash: $ echo a$echo b", preview.shown(buf)[1].text)
  end)

  it("is redrawn when the status changes: an approved placeholder has none", function()
    local buf = chat_with_pending('{"command": "ls", "label": null, "timeout": null}')
    preview.refresh(buf)
    assert.equals(1, #preview.shown(buf))
    vim.api.nvim_buf_set_lines(buf, 10, 11, false, { "```flemma:tool status=approved" })
    vim.api.nvim_exec_autocmds("TextChanged", { buffer = buf })
    assert.equals(0, #preview.shown(buf))
  end)

  it("shows the generic fallback for a tool without format_preview", function()
    local tools = require("flemma.tools")
    tools.register("plain", {
      name = "plain",
      description = "no preview",
      input_schema = { type = "object", properties = {} },
      execute = function()
        return { success = true, output = "" }
      end,
    })
    assert.equals(
      'plain: a="1", b=true, list=[2 items], opts={x, y}',
      preview.text("plain", { b = true, a = "1", list = { 1, 2 }, opts = { x = 1, y = 2 } }, 200)
    )
    tools.unregister("plain")
  end)
end)
