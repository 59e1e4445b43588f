-- Issue 24 §7: `:e` on a chat removed every decoration (rulers, role highlights,
-- folds) until Neovim restarted, on 0.10.4 and 0.12.4; so did `:e!`, `:checktime`
-- after a change made outside and `:saveas`. Neovim in a real terminal (tmux), the
-- screen read back after each of them.
local helpers = require("spec.support.helpers")

local function chat_lines(extra)
  local body = {}
  for i = 1, 30 do
    body[#body + 1] = ("output line %d"):format(i)
  end
  return table.concat({
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
    extra or "Thanks, and the tests?",
    "",
  }, "\n")
end

describe("a chat read again", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    helpers.cleanup()
  end)

  it("keeps its rulers, role colors and folds after :e, :e!, :checktime and :saveas", function()
    if vim.fn.executable("tmux") ~= 1 then
      error("tmux is required for the screen test: run `make deps`")
    end
    local dir = helpers.tmpdir()
    local file = dir .. "/reload.chat"
    helpers.write_file(file, chat_lines())
    local init = dir .. "/init.lua"
    helpers.write_file(
      init,
      ([[
        vim.opt.rtp:prepend(%q)
        vim.cmd("runtime! plugin/flemma.lua")
        vim.o.autoread = true
        require("flemma").setup({ tools = { autopilot = { enabled = false } } })
        vim.api.nvim_set_hl(0, "FlemmaRoleAssistant", { fg = "#ff0000", ctermfg = 196 })
      ]]):format(helpers.root)
    )
    child = helpers.tmux_nvim({
      socket = "flemma-spec-reload-" .. vim.fn.getpid(),
      args = { "--clean", "-n", "-u", init, file },
      width = 90,
      height = 30,
    })
    local function decorated(what, last_line)
      local s
      local ok = vim.wait(4000, function()
        s = child.screen()
        return s:find("thinking: The user wants a listing. · 4 lines", 1, true) ~= nil
          and s:find("Tool Result: bash (toolu_01): output line 1 · 34 lines", 1, true) ~= nil
          and s:find(string.rep("─", 20), 1, true) ~= nil
      end, 50)
      assert.is_true(ok, what .. ": folds or rulers are gone:\n" .. s)
      assert.is_nil(s:find("output line 2", 1, true), what .. ":\n" .. s)
      assert.truthy(s:find(last_line or "Thanks, and the tests?", 1, true), what .. ":\n" .. s)
      local colored = ""
      ok = vim.wait(3000, function()
        colored = child.tmux({ "capture-pane", "-p", "-e", "-t", "flemma" }).stdout or ""
        return (colored:find("38;2;255;0;0m@Assistant:", 1, true) or colored:find("38;5;196m@Assistant:", 1, true))
          ~= nil
      end, 50)
      assert.is_true(ok, what .. ": the @Assistant: marker lost its color:\n" .. colored)
    end
    local n = 0
    local function cmd(c)
      -- Then a message of its own: once it shows, the command ran and the screen
      -- was drawn after it.
      n = n + 1
      child.tmux({ "send-keys", "-t", "flemma", "Escape", ":" .. c, "Enter" })
      child.tmux({ "send-keys", "-t", "flemma", (":echo 'ran-%d'"):format(n), "Enter" })
      child.wait_screen(("ran-%d"):format(n))
    end

    decorated("at start")
    cmd("e")
    decorated(":e")
    cmd("e!")
    decorated(":e!")
    -- A change made outside, taken in by :checktime ('autoread').
    vim.wait(1100) -- a newer modification time
    helpers.write_file(file, chat_lines("And the linter?"))
    cmd("checktime")
    decorated(":checktime", "And the linter?")
    cmd("saveas " .. dir .. "/copy.chat")
    decorated(":saveas", "And the linter?")
    cmd("e")
    decorated(":e after :saveas", "And the linter?")
    local c = child
    child = nil
    c.stop()
  end)
end)
