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

describe("at 80 columns, a provider error", function()
  local child, server
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    if server then
      pcall(server.stop, server)
      server = nil
    end
    helpers.cleanup()
  end)

  it("is one line without Press ENTER, the whole text in :messages (HTTP 500, 401)", function()
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    server = require("spec.support.llm_server").start()
    local dir = helpers.tmpdir()
    local file = dir .. "/e.chat"
    helpers.write_file(file, "@You:\nHello.\n")
    local init = dir .. "/init.lua"
    helpers.write_file(
      init,
      ([[
      vim.opt.rtp:prepend(%q)
      vim.cmd("runtime! plugin/flemma.lua")
      vim.env.FLEMMA_SPEC_KEY = "sk-msg-spec-0123456789"
      require("flemma").setup({
        provider = "test",
        providers = { test = { kind = "anthropic", endpoint = %q, api_key_env = "FLEMMA_SPEC_KEY" } },
        parameters = { max_retries = 0, cache_retention = "none" },
        tools = { autopilot = { enabled = false } },
      })
    ]]):format(helpers.root, server:url("/v1/messages"))
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-msgerr-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 80,
      height = 24,
    })
    child.wait_screen("Hello.")
    local function fails(status, kind, detail)
      server:script({
        { status = status, body = vim.json.encode({ type = "error", error = { type = kind, message = detail } }) },
      })
      child.tmux({ "send-keys", "-t", "flemma", ":messages clear", "Enter" })
      child.tmux({ "send-keys", "-t", "flemma", "C-]" })
      child.wait_screen("(flemma) test: HTTP " .. status, 15000)
      -- the time for a second line (and its Press ENTER) to show
      vim.wait(700)
      local s = child.screen()
      assert.is_nil(s:find("Press ENTER", 1, true), s)
      local last = vim.split(vim.trim(s), "\n")
      last = last[#last]
      assert.truthy(last:find("(flemma) test: HTTP " .. status, 1, true), s)
      assert.truthy(last:find("…", 1, true), s)
      -- The whole text, the provider's detail and the advice, is in :messages.
      child.tmux({ "send-keys", "-t", "flemma", ":messages", "Enter" })
      s = child.wait_screen("Press ENTER", 5000)
      child.tmux({ "send-keys", "-t", "flemma", "Enter" })
      return s:gsub("\n", "")
    end
    local s = fails(500, "api_error", "the backend is having a very bad day")
    assert.truthy(s:find("the backend is having a very bad day", 1, true), s)
    assert.truthy(s:find("try again later", 1, true), s)
    s = fails(401, "authentication_error", "invalid x-api-key")
    assert.truthy(s:find('"invalid x-api-key"', 1, true), s)
    assert.truthy(s:find("FLEMMA_SPEC_KEY", 1, true), s)
    local c = child
    child = nil
    c.stop()
  end)
end)

describe("at 80 columns, a long message while a command line is typed", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    helpers.cleanup()
  end)

  it("waits for the command line to end, then is one line", function()
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    local dir = helpers.tmpdir()
    local init = dir .. "/init.lua"
    helpers.write_file(
      init,
      ([[
      vim.opt.rtp:prepend(%q)
      vim.api.nvim_create_user_command("Later", function()
        vim.defer_fn(function()
          require("flemma.core.util").notify(string.rep("a long explanation of what happened; ", 5) .. "\nand what to do")
        end, 1500)
      end, {})
    ]]):format(helpers.root)
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-msgcmd-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init },
      width = 80,
      height = 24,
    })
    child.wait_screen("[No Name]")
    child.tmux({ "send-keys", "-t", "flemma", ":Later", "Enter", ":echo 'typing'" })
    child.wait_screen(":echo 'typing'")
    vim.wait(2500)
    local s = child.screen()
    assert.truthy(s:find(":echo 'typing'", 1, true), s)
    assert.is_nil(s:find("a long explanation", 1, true), s)
    child.tmux({ "send-keys", "-t", "flemma", "Escape" })
    child.wait_screen("(flemma) a long explanation of what happened;", 5000)
    vim.wait(500)
    s = child.screen()
    assert.is_nil(s:find("Press ENTER", 1, true), s)
    assert.truthy(s:find("…", 1, true), s)
    local c = child
    child = nil
    c.stop()
  end)
end)

describe("util.notify", function()
  local util = require("flemma.core.util")
  local long = "test: HTTP 500 api_error: «the backend is having a very bad day, ünd more»\n"
    .. "the provider has a problem: try again later"

  local function history()
    return vim.split(vim.api.nvim_exec2("messages", { output = true }).output, "\n", { trimempty = true })
  end

  it("with Neovim's own vim.notify, shows one line within v:echospace and keeps the whole in :messages", function()
    vim.cmd("messages clear")
    util.notify(long, vim.log.levels.ERROR)
    local h = history()
    local shown = h[#h]
    local head = shown:sub(1, #shown - #"…")
    assert.equals("…", shown:sub(-#"…"))
    assert.equals(("(flemma) " .. long):sub(1, #head), head)
    assert.truthy(#head > 40, shown)
    assert.truthy(vim.fn.strdisplaywidth(shown) <= vim.v.echospace - 1, shown)
    assert.equals("(flemma) " .. long:gsub("\n", " · "), h[#h - 1])
    -- A message that fits is shown as it is, once.
    vim.cmd("messages clear")
    util.notify("short and sweet")
    assert.same({ "(flemma) short and sweet" }, history())
  end)

  it("hands a vim.notify of the user's (a notification plugin) the whole text", function()
    local got = {}
    local orig = vim.notify
    vim.notify = function(msg, level)
      got[#got + 1] = { msg, level }
    end
    util.notify(long, vim.log.levels.WARN)
    vim.notify = orig
    assert.same({ { "(flemma) " .. long, vim.log.levels.WARN } }, got)
  end)

  it("fit cuts whole characters by display width", function()
    assert.equals("abc", util.fit("abc", 3))
    assert.equals("ab…", util.fit("abcd", 3))
    assert.equals("éé…", util.fit("éééé", 3))
    assert.equals("漢…", util.fit("漢字漢字", 4))
    assert.equals("one…", util.fit("one\ntwo", 20))
  end)
end)
