-- Issue 24 §16: at 80 columns most messages needed Enter. The messages of the
-- cycle fit the message line: Neovim in tmux at 80x24, keys as typed, no
-- "Press ENTER" after each step.
local helpers = require("spec.support.helpers")

describe("at 80 columns", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    helpers.cleanup()
  end)

  it("the cycle's messages need no Enter", function()
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    local dir = helpers.tmpdir()
    local file = dir .. "/m.chat"
    helpers.write_file(
      file,
      table.concat({
        "@You:",
        "Check.",
        "",
        "@Assistant:",
        "**Tool Use:** `bash` (`toolu_01`)",
        "",
        "```json",
        '{ "command": "true" }',
        "```",
        "",
      }, "\n")
    )
    local init = dir .. "/init.lua"
    helpers.write_file(
      init,
      ([[
      vim.opt.rtp:prepend(%q)
      vim.cmd("runtime! plugin/flemma.lua")
      require("flemma").setup({ tools = { autopilot = { enabled = false } } })
    ]]):format(helpers.root)
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-msg-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 80,
      height = 24,
    })
    child.wait_screen("Check.")
    child.tmux({ "send-keys", "-t", "flemma", "C-]" }) -- phase 1: a pending placeholder
    child.wait_screen("status=pending")
    child.tmux({ "send-keys", "-t", "flemma", "C-]" }) -- still pending: the cycle says so
    local s = child.wait_screen("(flemma) pending tool call: set status=approved or rejected, <C-]>")
    assert.is_nil(s:find("Press ENTER", 1, true), s)
    -- Approve, then edit the approved block: not run, one line.
    child.tmux({ "send-keys", "-t", "flemma", ":%s/status=pending/status=approved/", "Enter" })
    child.wait_screen("status=approved")
    child.tmux({ "send-keys", "-t", "flemma", "o", "my own text", "Escape", "C-]" })
    s = child.wait_screen("(flemma) not executed: your text is in the approved block")
    assert.is_nil(s:find("Press ENTER", 1, true), s)
    local c = child
    child = nil
    c.stop()
  end)
end)
