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
    -- The output line, or (the finished result folded, ui.fold_completed) its fold line.
    local done = vim.wait(10000, function()
      local now = child.screen()
      return now:find("screen-done\n", 1, true) ~= nil or now:find("(toolu_01): screen-done", 1, true) ~= nil
    end, 50)
    assert.is_true(done, "the output never showed:\n" .. child.screen())
    -- Quitting is part of what the user does: Neovim must exit 0, not crash on the way.
    local c = child
    child = nil
    c.stop()
  end)
  it("shows a folded conversation: closed thinking and results, rulers, colored markers", function()
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    local dir = helpers.tmpdir()
    local file = dir .. "/folded.chat"
    local body = {}
    for i = 1, 30 do
      body[#body + 1] = ("output line %d"):format(i)
    end
    helpers.write_file(
      file,
      table.concat({
        "@You:",
        "List the files.",
        "",
        "@Assistant:",
        "<thinking>",
        "The user wants a listing.",
        "I will run ls.",
        "</thinking>",
        "Let me look.",
        "",
        "**Tool Use:** `bash` (`toolu_01`)",
        "",
        "```json",
        '{ "command": "ls" }',
        "```",
        "",
        "@You:",
        "**Tool Result:** `toolu_01`",
        "",
        "```",
        table.concat(body, "\n"),
        "```",
        "",
        "Thanks, and the tests?",
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
        -- The user's own color for one group: the screen must show it on the marker.
        vim.api.nvim_set_hl(0, "FlemmaRoleAssistant", { fg = "#ff0000", ctermfg = 196 })
      ]]):format(helpers.root)
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-fold-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 90,
      height = 30,
    })
    local s = child.wait_screen("Tool Result: bash (toolu_01): output line 1 · 34 lines")
    -- The thinking is one closed line; the tool use stays open; the 30 output
    -- lines are hidden; the ruler separates the messages.
    assert.truthy(s:find("thinking: The user wants a listing. · 4 lines", 1, true), s)
    assert.truthy(s:find('{ "command": "ls" }', 1, true), s)
    assert.is_nil(s:find("output line 2", 1, true), s)
    assert.truthy(s:find("Thanks, and the tests?", 1, true), s)
    assert.truthy(s:find(string.rep("─", 20), 1, true), s)
    local colored = child.tmux({ "capture-pane", "-p", "-e", "-t", "flemma" }).stdout or ""
    local red = colored:find("38;2;255;0;0m@Assistant:", 1, true) or colored:find("38;5;196m@Assistant:", 1, true)
    assert.truthy(red, "the @Assistant: marker is not drawn in its group's color:\n" .. colored)
    -- zR opens everything: the output is there.
    child.tmux({ "send-keys", "-t", "flemma", "zR" })
    child.wait_screen("output line 2")
    -- zM closes all: one line per message.
    child.tmux({ "send-keys", "-t", "flemma", "zM" })
    s = child.wait_screen("@Assistant: Let me look. · 13 lines")
    assert.truthy(s:find("@You: List the files. · 3 lines", 1, true), s)
    local c = child
    child = nil
    c.stop()
  end)
end)
