local helpers = require("spec.support.helpers")
local commands = require("flemma.commands")

local notifications = helpers.notifications

describe(":Flemma", function()
  after_each(helpers.cleanup)

  it("alone lists every subcommand, one line each with what it does", function()
    local seen = notifications(function()
      vim.cmd("Flemma")
    end)
    assert.equals(1, #seen)
    local lines = vim.split(seen[1].msg, "\n")
    assert.equals("(flemma) usage: :Flemma {subcommand} [args]", lines[1])
    local names = commands.names()
    assert.equals(#names + 1, #lines)
    for i, name in ipairs(names) do
      assert.matches("^  " .. vim.pesc(name) .. " +%S", lines[i + 1])
    end
    for _, name in ipairs({ "send", "cancel", "status", "tool:approve", "logging:enable", "sandbox:status" }) do
      assert.is_true(vim.tbl_contains(names, name), name)
    end
  end)

  it("says `did you mean` for a misspelled subcommand and runs nothing", function()
    local seen = notifications(function()
      vim.cmd("Flemma stauts")
    end)
    assert.equals(1, #seen)
    assert.equals(vim.log.levels.ERROR, seen[1].level)
    assert.equals("(flemma) unknown subcommand `stauts`; did you mean `status`?; `:Flemma` lists them all", seen[1].msg)
    seen = notifications(function()
      vim.cmd("Flemma zzzzzzzzzz")
    end)
    assert.equals("(flemma) unknown subcommand `zzzzzzzzzz`; `:Flemma` lists them all", seen[1].msg)
  end)

  it("completes subcommand names and the arguments of those that take them", function()
    local all = vim.fn.getcompletion("Flemma ", "cmdline")
    assert.same(commands.names(), all)
    assert.same(
      {
        "tool:approve",
        "tool:cancel",
        "tool:cancel-all",
        "tool:diff",
        "tool:execute",
        "tool:list",
        "tool:log",
        "tool:reject",
        "tool:rules",
        "tool:undo",
      },
      vim.tbl_filter(function(n)
        return n:find("^tool:") ~= nil
      end, vim.fn.getcompletion("Flemma tool:", "cmdline"))
    )
    assert.same({ "debug" }, vim.fn.getcompletion("Flemma logging:enable de", "cmdline"))
  end)
end)

-- Issue 24 §5: `:Flemma send` in a `.env` file sent it to the provider and appended
-- `@Assistant:` to it. Every subcommand that reads or writes a conversation refuses a
-- buffer that is not a chat, in one line, and touches neither the buffer nor the
-- network.
describe(":Flemma in a buffer that is not a chat", function()
  local h
  before_each(function()
    h = helpers.send_harness({ key = "sk-flemma-spec-notchat" })
    h.server:script({ { fixture = "anthropic_text.sse" } })
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0 },
    })
  end)
  after_each(function()
    h.teardown()
  end)

  local conversation = {
    "send",
    "cancel",
    "status",
    "usage:estimate",
    "preview",
    "trust",
    "untrust",
    "tool:execute",
    "tool:approve",
    "tool:reject no",
    "tool:cancel",
    "tool:cancel-all",
    "tool:diff",
    "autopilot:enable",
    "autopilot:disable",
    "autopilot:status",
  }

  for _, file in ipairs({ ".env", "main.py", "notes" }) do
    it("refuses every conversation command in `" .. file .. "`, sends nothing and leaves the file alone", function()
      local dir = helpers.tmpdir()
      local path = dir .. "/" .. file
      local content = "@You:\nSECRET_TOKEN=hunter2\n"
      helpers.write_file(path, content)
      vim.cmd("edit " .. vim.fn.fnameescape(path))
      local buf = vim.api.nvim_get_current_buf()
      assert.are_not.equal("chat", vim.bo[buf].filetype)
      local ft = vim.bo[buf].filetype
      for _, sub in ipairs(conversation) do
        h.forget_notes()
        vim.cmd("Flemma " .. sub)
        vim.wait(200, function()
          return #h.server:requests() > 0
        end, 10)
        assert.equals(1, #h.notes, sub .. ": " .. vim.inspect(h.notes))
        local note = h.notes[1]
        assert.equals(vim.log.levels.ERROR, note.level, sub)
        assert.equals(
          ("(flemma) :Flemma %s: not a chat (filetype %s)"):format(vim.split(sub, " ")[1], ft == "" and "none" or ft),
          note.msg
        )
        assert.equals(0, #h.server:requests(), sub .. " reached the server")
        assert.same({ "@You:", "SECRET_TOKEN=hunter2" }, helpers.lines(buf), sub)
        assert.is_false(vim.bo[buf].modified, sub)
        assert.equals(1, #vim.api.nvim_list_wins(), sub .. " opened a window")
      end
      vim.cmd("silent write")
      assert.equals(content, helpers.read_file(path))
    end)
  end

  it("still runs the commands about the session or the setup in any buffer", function()
    helpers.buffer({ "plain" })
    for _, sub in ipairs({ "usage", "tool:list", "sandbox:status", "switch test" }) do
      h.forget_notes()
      vim.cmd("Flemma " .. sub)
      for _, n in ipairs(h.notes) do
        assert.is_nil(n.msg:find("not a chat (", 1, true), sub)
      end
    end
  end)
end)
