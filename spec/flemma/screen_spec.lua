-- What a user sees: Neovim in a real terminal (tmux), keys sent as a user types
-- them, the screen read back with capture-pane.
local helpers = require("spec.support.helpers")

describe("the screen", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop) -- a test that failed early: only the tmux server matters now
      child = nil
    end
    helpers.cleanup()
  end)

  it("shows a pending preview, then a running spinner, as a user sees them", function()
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    local dir = helpers.tmpdir()
    local file = dir .. "/screen.chat"
    helpers.write_file(
      file,
      table.concat({
        "@You:",
        "Check the repo.",
        "",
        "@Assistant:",
        "Sure.",
        "",
        "**Tool Use:** `bash` (`toolu_01`)",
        "",
        "```json",
        '{ "command": "sleep 2; echo screen-done", "label": "checking repo", "timeout": null }',
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
      socket = "flemma-spec-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 90,
      height = 30,
    })
    child.wait_screen("Check the repo.")

    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    local s = child.wait_screen("bash: $ sleep 2; echo screen-done # checking repo")
    assert.truthy(s:find("```flemma:tool status=pending", 1, true), s)

    child.tmux({ "send-keys", "-t", "flemma", ":%s/status=pending/status=approved/", "Enter" })
    child.wait_screen("status=approved")
    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    s = child.wait_screen("running bash")
    -- The spinner is virtual text: the placeholder line itself is unchanged.
    assert.truthy(s:find("```flemma:tool status=approved", 1, true), s)
    child.wait_screen("screen-done\n", 10000)
    -- Quitting is part of what the user does: Neovim must exit 0, not crash on the way.
    local c = child
    child = nil
    c.stop()
  end)
end)
