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
    assert.same({ "tool:approve", "tool:cancel", "tool:cancel-all", "tool:execute", "tool:list", "tool:reject" },
      vim.tbl_filter(function(n)
        return n:find("^tool:") ~= nil
      end, vim.fn.getcompletion("Flemma tool:", "cmdline")))
    assert.same({ "debug" }, vim.fn.getcompletion("Flemma logging:enable de", "cmdline"))
  end)
end)
