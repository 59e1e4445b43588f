-- The read tool's window, numbered lines and long-line cuts (issue 27) through the
-- buffer and <C-]> with real files, and a link leading out of the project.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

describe("read through the buffer", function()
  local project, elsewhere, saved

  local function chat(input)
    return helpers.edit(project .. "/test.chat", {
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      "**Tool Use:** `read` (`toolu_01`)",
      "",
      "```json",
      vim.json.encode(
        vim.tbl_extend("keep", input, { offset = vim.NIL, limit = vim.NIL, line_numbers = vim.NIL, label = vim.NIL })
      ),
      "```",
    })
  end

  local function wait_text(b, s)
    helpers.wait_for(function()
      return text(b):find(s, 1, true) ~= nil
    end, 10000, "buffer never contained: " .. s .. "\n--- buffer:\n" .. text(b))
  end

  before_each(function()
    project = helpers.tmpdir()
    elsewhere = helpers.tmpdir()
    saved = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "$default" } } })
  end)
  after_each(function()
    vim.cmd("cd " .. vim.fn.fnameescape(saved))
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("shows a numbered window with a long line cut and says how to go on", function()
    local lines = {}
    for i = 1, 30 do
      lines[i] = i == 12 and string.rep("w", 5000) or ("row " .. i)
    end
    helpers.write_file(project .. "/data.txt", table.concat(lines, "\n") .. "\n")
    local b = chat({ path = "data.txt", offset = 11, limit = 3, line_numbers = true })
    press("<C-]>")
    wait_text(b, "[Showing lines 11-13 of 30. Use offset=14 to continue.]")
    local t = text(b)
    assert.truthy(t:find("    11\trow 11\n    12\t" .. string.rep("w", 2000) .. " …\n    13\trow 13\n", 1, true), t)
    assert.truthy(t:find("[Line 12 is longer than 2000 bytes and was cut (marked …)", 1, true), t)
    assert.is_nil(t:find(string.rep("w", 2001), 1, true))
  end)

  it("leaves a read through a link leading out of the project pending", function()
    helpers.write_file(elsewhere .. "/secret.txt", "outside words\n")
    assert(vim.uv.fs_symlink(elsewhere .. "/secret.txt", project .. "/link.txt"))
    local b = chat({ path = "link.txt", line_numbers = true })
    press("<C-]>")
    vim.wait(150)
    assert.equals("pending", text(b):match("```flemma:tool status=(%a+)"), text(b))
    assert.is_nil(text(b):find("outside words", 1, true))
  end)
end)
