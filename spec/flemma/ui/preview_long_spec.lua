-- Previews of a long chat (more messages than are drawn at once): the pending
-- tools at the end are shown as soon as the chat is opened, and a redraw of
-- everything (the window got narrower) keeps the previews shown until the slice
-- that draws their message again.
local helpers = require("spec.support.helpers")
local preview = require("flemma.ui.preview")

-- 120 messages of prose, a pending placeholder in the @You: message after turn 3
-- (near the top) and two at the very end.
local function long_chat()
  local lines = { "@You:", "Start." }
  local function turn(t, pending)
    local id = ("toolu_%03d"):format(t)
    vim.list_extend(lines, {
      "",
      "@Assistant:",
      "Turn " .. t .. ", some prose.",
      "",
      "**Tool Use:** `bash` (`" .. id .. "`)",
      "",
      "```json",
      ('{"command": "echo %d %s"}'):format(t, pending and string.rep("x", 100) or ""),
      "```",
      "",
      "@You:",
      "**Tool Result:** `" .. id .. "`",
      "",
    })
    if pending then
      vim.list_extend(lines, { "```flemma:tool status=pending", "```" })
    else
      vim.list_extend(lines, { "```", "out " .. t, "```" })
    end
  end
  for t = 1, 60 do
    turn(t, t == 3 or t == 60)
  end
  return lines
end

local function open(lines)
  local path = helpers.tmpdir() .. "/long.chat"
  helpers.write_file(path, table.concat(lines, "\n") .. "\n")
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  return vim.api.nvim_get_current_buf()
end

local function texts(buf)
  local out = {}
  for _, s in ipairs(preview.shown(buf)) do
    out[#out + 1] = s.line .. " " .. s.text
  end
  return out
end

describe("previews of a long chat", function()
  before_each(function()
    require("flemma").setup({})
  end)
  after_each(function()
    vim.cmd("silent! only")
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("show the pending tool at the end as soon as the chat is opened at its start", function()
    local lines = long_chat()
    local buf = open(lines)
    assert.equals(1, vim.fn.line("w0"))
    -- Nothing waited for: what :edit itself drew (Neovim 0.10 may count more
    -- lines as in view before the window is first drawn).
    local shown = preview.shown(buf)
    local last = shown[#shown]
    assert.is_not_nil(last, "no preview right after :edit")
    assert.matches("^bash: %$ echo 60 xxx", last.text)
    assert.equals("```flemma:tool status=pending", lines[last.line])
    -- The one near the top, outside the window, a moment later.
    helpers.wait_for(function()
      return #preview.shown(buf) == 2
    end, 1000, "the preview of turn 3 was never drawn")
    assert.matches("^bash: %$ echo 3 xxx", preview.shown(buf)[1].text)
  end)

  it("keep the previews shown while a redraw of everything goes on in slices", function()
    local buf = open(long_chat())
    helpers.wait_for(function()
      return #preview.shown(buf) == 2
    end, 1000, "the previews were never drawn")
    local before = texts(buf)
    vim.cmd("vsplit")
    vim.cmd("vertical resize 40")
    -- One slice of the redraw for the new width (one message with no time budget).
    preview.update(buf, { budget_ms = 0 })
    assert.same(before, texts(buf))
    helpers.wait_for(function()
      local shown = preview.shown(buf)
      return #shown == 2
        and vim.fn.strdisplaywidth(shown[1].text) == preview.text_width(buf)
        and vim.fn.strdisplaywidth(shown[2].text) == preview.text_width(buf)
    end, 2000, "not redrawn for the narrower window: " .. vim.inspect(preview.shown(buf)))
  end)
end)
