-- What a user sees: Neovim in a real terminal (tmux), keys sent as a user types
-- them, the screen read back with capture-pane.
local helpers = require("spec.support.helpers")

local function tmux(socket, args)
  local cmd = { "tmux", "-L", socket }
  vim.list_extend(cmd, args)
  return vim.system(cmd, { text = true }):wait(5000)
end

local function screen(socket)
  return tmux(socket, { "capture-pane", "-p", "-t", "flemma" }).stdout or ""
end

local function wait_screen(socket, needle, timeout)
  local last = ""
  local ok = vim.wait(timeout or 8000, function()
    last = screen(socket)
    return last:find(needle, 1, true) ~= nil
  end, 50)
  assert(ok, "screen never showed: " .. needle .. "\n--- screen:\n" .. last)
  return last
end

describe("the screen", function()
  local socket
  after_each(function()
    if socket then
      tmux(socket, { "kill-server" })
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
    socket = "flemma-spec-" .. vim.fn.getpid()
    local nvim = table.concat(
      vim.tbl_map(function(a)
        return vim.fn.shellescape(a)
      end, helpers.nvim_cmd()),
      " "
    )
    local cmd = ("%s --clean -n -u %s %s"):format(nvim, vim.fn.shellescape(init), vim.fn.shellescape(file))
    local res = tmux(socket, { "new-session", "-d", "-s", "flemma", "-x", "90", "-y", "30", cmd })
    assert.equals(0, res.code, res.stderr)
    wait_screen(socket, "Check the repo.")

    tmux(socket, { "send-keys", "-t", "flemma", "C-]" })
    local s = wait_screen(socket, "bash: $ sleep 2; echo screen-done # checking repo")
    assert.truthy(s:find("```flemma:tool status=pending", 1, true), s)

    tmux(socket, { "send-keys", "-t", "flemma", ":%s/status=pending/status=approved/", "Enter" })
    wait_screen(socket, "status=approved")
    tmux(socket, { "send-keys", "-t", "flemma", "C-]" })
    s = wait_screen(socket, "running bash")
    -- The spinner is virtual text: the placeholder line itself is unchanged.
    assert.truthy(s:find("```flemma:tool status=approved", 1, true), s)
    wait_screen(socket, "screen-done\n", 10000)
  end)
end)
