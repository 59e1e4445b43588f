local tools = require("flemma.tools")
local preview = require("flemma.tools.preview")

describe("flemma.tools.preview", function()
  setup(function()
    tools._reset()
    tools.setup(require("flemma.core.config").setup({}))
  end)
  teardown(function()
    tools._reset()
  end)

  describe("built-in format_preview", function()
    local cases = {
      { "calculator", { expression = "2 + 2", label = vim.NIL }, "2 + 2" },
      { "calculator", { expression = "2 + 2", label = "sum" }, "2 + 2 # sum" },
      { "todo", { action = "read", todos = vim.NIL, label = vim.NIL }, "read the list" },
      {
        "todo",
        {
          action = "write",
          todos = {
            { content = "a", status = "pending", id = vim.NIL },
            { content = "b", status = "completed", id = "b" },
          },
          label = "planning",
        },
        "write 2 item(s): 1 pending · 0 in progress · 1 done # planning",
      },
      { "calculator_async", { expression = "sqrt(16)", delay = 500, label = vim.NIL }, "sqrt(16) # 500ms" },
      { "calculator_async", { expression = "sqrt(16)", delay = vim.NIL, label = vim.NIL }, "sqrt(16)" },
      { "calculator_async", { expression = "1", delay = 5, label = "slow" }, "1 # slow, 5ms" },
      {
        "bash",
        { command = "git status", timeout = vim.NIL, label = "checking repo" },
        "$ git status # checking repo",
      },
      { "bash", { command = "make test", timeout = 5, label = vim.NIL }, "$ make test" },
      {
        "read",
        { path = "config.lua", offset = 100, limit = 50, label = "reading tail" },
        "config.lua +100,50 # reading tail",
      },
      { "read", { path = "src/config.lua", offset = vim.NIL, limit = 50, label = vim.NIL }, "src/config.lua +0,50" },
      { "read", { path = "a.lua", offset = 7, limit = vim.NIL, label = vim.NIL }, "a.lua +7" },
      { "read", { path = "a.lua", offset = vim.NIL, limit = vim.NIL, label = vim.NIL }, "a.lua" },
      {
        "edit",
        { path = "config.lua", old_string = "a", new_string = "b", label = "fixing typo" },
        "config.lua # fixing typo",
      },
      { "edit", { path = "config.lua", old_string = "a", new_string = "b", label = vim.NIL }, "config.lua" },
      {
        "write",
        { path = "output.txt", content = string.rep("x", 2355), label = "saving log" },
        "output.txt (2.3KB) # saving log",
      },
      { "write", { path = "empty.txt", content = "", label = vim.NIL }, "empty.txt (0B)" },
    }
    for _, case in ipairs(cases) do
      it(("shows %s as %q"):format(case[1], case[3]), function()
        assert.equals(case[3], tools.preview(case[1], case[2], 80))
      end)
    end

    it("keeps a multi-line command on one line", function()
      local out = tools.preview("bash", { command = "echo a\necho b" }, 80)
      assert.is_nil(out:find("\n"))
      assert.matches("^%$ echo a.+echo b$", out)
    end)
  end)

  describe("generic", function()
    it("puts sorted scalars first, then tables as keys or item counts", function()
      assert.equals(
        'a=1, b="two", c=true, list=[3 items], one=[1 item], opts={x, y}',
        preview.generic({ opts = { y = 1, x = 2 }, b = "two", list = { 1, 2, 3 }, a = 1, c = true, one = { "z" } })
      )
    end)

    it("leaves out JSON nulls and shows an empty input as nothing", function()
      assert.equals('q="x"', preview.generic({ q = "x", gone = vim.NIL }))
      assert.equals("", preview.generic({}))
    end)

    it("is what tools.preview uses for a tool without format_preview", function()
      tools.register("plain", {
        description = "no preview",
        input_schema = { type = "object", properties = {} },
      })
      -- The default summary (tools.default_summary, issue 28) comes first, then the other fields.
      assert.equals("x, tags=[2 items]", tools.preview("plain", { tags = { "a", "b" }, path = "x" }, 80))
      assert.equals('a="1", tags=[2 items]', tools.preview("plain", { tags = { "a", "b" }, a = "1" }, 80))
    end)
  end)
end)
