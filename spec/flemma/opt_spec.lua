local frontmatter = require("flemma.chat.frontmatter")
local opt = require("flemma.isolated.opt")

-- Evaluates frontmatter code (fence on line 1, so code line L is buffer line L + 1).
local function run(code)
  return frontmatter.evaluate(code, "lua", 1)
end

local function ok(code)
  local opts, err = run(code)
  assert(opts, err)
  return opts
end

local function fails(code)
  local opts, err = run(code)
  assert.is_nil(opts)
  return err
end

describe("flemma.isolated.opt", function()
  local all_tools
  before_each(function()
    require("flemma").setup({})
    all_tools = require("flemma.tools").list()
  end)

  describe("ListOption", function()
    local without = function(list, name)
      return vim.tbl_filter(function(x)
        return x ~= name
      end, list)
    end

    it("starts flemma.opt.tools from all enabled tools", function()
      assert.is_true(#all_tools >= 5)
      assert.same(all_tools, ok("flemma.opt.tools:append({})").tools)
    end)

    it("is replaced by assignment", function()
      assert.same({ "bash", "read" }, ok('flemma.opt.tools = {"bash", "read"}').tools)
    end)

    it(":remove() removes", function()
      assert.same(without(all_tools, "calculator"), ok('flemma.opt.tools:remove("calculator")').tools)
    end)

    it(":append() adds at the end, once", function()
      local opts =
        ok('flemma.opt.tools = {"bash"}\nflemma.opt.tools:append("calculator_async")\nflemma.opt.tools:append("bash")')
      assert.same({ "bash", "calculator_async" }, opts.tools)
    end)

    it(":prepend() adds at the front, keeping the order of a list", function()
      local opts = ok('flemma.opt.tools = {"bash"}\nflemma.opt.tools:prepend({ "read", "edit" })')
      assert.same({ "read", "edit", "bash" }, opts.tools)
    end)

    it("+ appends and - removes, chained, and assignment takes the result", function()
      local opts = ok('flemma.opt.tools = {"bash"}\nflemma.opt.tools = flemma.opt.tools + "read" + { "edit" } - "bash"')
      assert.same({ "read", "edit" }, opts.tools)
    end)

    it("+ with the list on the right prepends", function()
      assert.same(
        { "read", "bash" },
        ok('flemma.opt.tools = {"bash"}\nflemma.opt.tools = "read" + flemma.opt.tools').tools
      )
    end)

    it("+ and - leave the original untouched until assigned", function()
      local opts = ok('flemma.opt.tools = {"bash"}\nlocal more = flemma.opt.tools + "read"\nassert(#more:get() == 2)')
      assert.same({ "bash" }, opts.tools)
    end)

    it("reads items by index, :get() copies, tostring shows the list", function()
      ok(table.concat({
        'flemma.opt.tools = { "bash", "read" }',
        'assert(flemma.opt.tools[2] == "read")',
        "local copy = flemma.opt.tools:get()",
        'copy[1] = "edit"',
        'assert(flemma.opt.tools[1] == "bash")',
        'assert(tostring(flemma.opt.tools) == \'{ "bash", "read" }\', tostring(flemma.opt.tools))',
      }, "\n"))
    end)

    it("leaves tools unset (nil: all tools) when only read", function()
      assert.is_nil(ok("local t = flemma.opt.tools:get()").tools)
    end)

    it("starts auto_approve from the global list, so :remove() works without assignment", function()
      local opts = ok('flemma.opt.tools.auto_approve:remove("write")')
      assert.same({ "$default" }, opts.auto_approve)
      assert.same({ "write" }, opts.auto_approve_excluded)
    end)

    it("keeps exclusions through + and -, and :append() brings a tool back", function()
      local opts = ok('flemma.opt.tools.auto_approve = flemma.opt.tools.auto_approve + "bash" - "write"')
      assert.same({ "$default", "bash" }, opts.auto_approve)
      assert.same({ "write" }, opts.auto_approve_excluded)
      opts = ok('flemma.opt.tools.auto_approve:remove("write")\nflemma.opt.tools.auto_approve:append("write")')
      assert.same({ "$default", "write" }, opts.auto_approve)
      assert.same({}, opts.auto_approve_excluded)
    end)

    it("removing a preset drops it from the list", function()
      local opts = ok('flemma.opt.tools.auto_approve:remove("$default")')
      assert.same({}, opts.auto_approve)
      assert.same({}, opts.auto_approve_excluded)
    end)

    it("assignment clears earlier exclusions", function()
      local opts = ok('flemma.opt.tools.auto_approve:remove("write")\nflemma.opt.tools.auto_approve = { "$default" }')
      assert.same({}, opts.auto_approve_excluded)
    end)

    it("takes a function for auto_approve, and a list replaces it again", function()
      local opts = ok("flemma.opt.tools.auto_approve = function() return true end")
      assert.is_function(opts.auto_approve)
      assert.is_true(opts.auto_approve("bash", {}, {}))
      opts = ok('flemma.opt.tools.auto_approve = function() end\nflemma.opt.tools.auto_approve = { "read" }')
      assert.same({ "read" }, opts.auto_approve)
    end)

    local bad = {
      { 'flemma.opt.tools = "bash"', 'frontmatter line 2: flemma.opt.tools should be a list of names, not "bash"' },
      { "flemma.opt.tools = { 1 }", "frontmatter line 2: flemma.opt.tools: assignment expects tool names, not number" },
      {
        "flemma.opt.tools = { auto_approve = {} }",
        'frontmatter line 2: flemma.opt.tools: assignment expects a list of names, not a table with the key "auto_approve"',
      },
      {
        "flemma.opt.tools:append(true)",
        "frontmatter line 2: flemma.opt.tools: append expects a name or a list of names, not boolean",
      },
      { "flemma.opt.tools.append('bash')", "frontmatter line 2: ListOption:append() must be called with `:`" },
      { "flemma.opt.tools.nope = 1", "frontmatter line 2: unknown option `flemma.opt.tools.nope`" },
      {
        "flemma.opt.tools.auto_approve = 5",
        "frontmatter line 2: flemma.opt.tools.auto_approve should be a list of names, not number",
      },
      { 'local x = "bash" - flemma.opt.tools', "frontmatter line 2: `-` needs a ListOption on its left" },
    }
    for _, case in ipairs(bad) do
      it("refuses " .. case[1], function()
        assert.equals(case[2], fails(case[1]))
      end)
    end
  end)

  describe("tools selection", function()
    local cases = {
      { 'flemma.opt.tools = { "bash", "raed" }', "unknown tool `raed` in flemma.opt.tools; did you mean `read`?" },
      {
        'flemma.opt.tools:remove("calculater")',
        "unknown tool `calculater` in flemma.opt.tools; did you mean `calculator`?",
      },
      { 'flemma.opt.tools:append("Bash")', "unknown tool `Bash` in flemma.opt.tools; did you mean `bash`?" },
      {
        'flemma.opt.tools = flemma.opt.tools + "wrte"',
        "unknown tool `wrte` in flemma.opt.tools; did you mean `write`?",
      },
      {
        'flemma.opt.tools.auto_approve:append("eddit")',
        "unknown tool `eddit` in flemma.opt.tools.auto_approve; did you mean `edit`?",
      },
      {
        'flemma.opt.tools.auto_approve = { "$readonyl" }',
        "unknown preset `$readonyl`; did you mean `$readonly`? in flemma.opt.tools.auto_approve",
      },
    }
    for _, case in ipairs(cases) do
      it("suggests a name for " .. case[1], function()
        assert.equals("frontmatter line 2: " .. case[2], fails(case[1]))
      end)
    end

    it("lists the available tools when nothing is close", function()
      local err = fails('flemma.opt.tools = { "zzzzzzzzzz" }')
      assert.equals(
        "frontmatter line 2: unknown tool `zzzzzzzzzz` in flemma.opt.tools; available tools: "
          .. table.concat(all_tools, ", "),
        err
      )
    end)

    it("knows tools registered later", function()
      require("flemma.tools").register("opt_spec_probe", {
        description = "probe",
        input_schema = { type = "object", properties = {} },
        execute = function()
          return "ok"
        end,
      })
      local ok_reg, err = pcall(function()
        assert.same({ "opt_spec_probe" }, ok('flemma.opt.tools = { "opt_spec_probe" }').tools)
      end)
      require("flemma.tools").unregister("opt_spec_probe")
      assert(ok_reg, err)
      assert.matches("unknown tool `opt_spec_probe`", fails('flemma.opt.tools = { "opt_spec_probe" }'), 1, true)
    end)

    it("accepts user presets in auto_approve", function()
      require("flemma").setup({ tools = { presets = { ["$mine"] = { approve = { "bash" } } } } })
      assert.same({ "$mine" }, ok('flemma.opt.tools.auto_approve = { "$mine" }').auto_approve)
    end)
  end)

  describe("parameters", function()
    it("reads the config's values until set", function()
      require("flemma").setup({ parameters = { max_tokens = 1234, anthropic = { thinking_budget = 99 } } })
      ok(table.concat({
        "assert(flemma.opt.max_tokens == 1234)",
        'assert(flemma.opt.cache_retention == "short")',
        "assert(flemma.opt.anthropic.thinking_budget == 99)",
        "flemma.opt.max_tokens = 10",
        "assert(flemma.opt.max_tokens == 10)",
      }, "\n"))
    end)

    it("clears an override set to nil", function()
      assert.same({}, ok("flemma.opt.max_tokens = 10\nflemma.opt.max_tokens = nil").parameters)
    end)

    it("takes a provider table by assignment", function()
      local opts = ok("flemma.opt.anthropic = { thinking_budget = 2048 }")
      assert.same({ anthropic = { thinking_budget = 2048 } }, opts.parameters)
    end)

    it("accepts false for thinking", function()
      assert.is_false(ok("flemma.opt.thinking = false").parameters.thinking)
    end)

    local bad = {
      {
        'flemma.opt.thinking = "huge"',
        '`flemma.opt.thinking` should be "minimal", "low", "medium", "high", "max", false, or a token budget, not "huge"',
      },
      {
        'flemma.opt.cache_retention = "forever"',
        '`flemma.opt.cache_retention` should be one of none, short, long, not "forever"',
      },
      { "flemma.opt.max_tokens = 0", "`flemma.opt.max_tokens` should be a whole number >= 1, not 0" },
      { "flemma.opt.max_tokens = 1.5", "`flemma.opt.max_tokens` should be a whole number >= 1, not 1.5" },
      { "flemma.opt.temperature = 3", "`flemma.opt.temperature` should be a number between 0 and 2, not 3" },
      {
        'flemma.opt.anthropic.thinking_budget = "lots"',
        '`flemma.opt.anthropic.thinking_budget` should be a whole number >= 0, not "lots"',
      },
      {
        'flemma.opt.openai.reasoning = "extreme"',
        '`flemma.opt.openai.reasoning` should be one of none, minimal, low, medium, high, not "extreme"',
      },
      {
        "flemma.opt.vertex.thinking_budget = -2",
        "`flemma.opt.vertex.thinking_budget` should be a whole number >= -1, not -2",
      },
      { 'flemma.opt.thinkng = "low"', "unknown option `flemma.opt.thinkng`; did you mean `flemma.opt.thinking`?" },
      {
        "local x = flemma.opt.max_token",
        "unknown option `flemma.opt.max_token`; did you mean `flemma.opt.max_tokens`?",
      },
      {
        "flemma.opt.anthropic.thinking_budjet = 1",
        "unknown option `flemma.opt.anthropic.thinking_budjet`; did you mean `flemma.opt.anthropic.thinking_budget`?",
      },
      { "flemma.opt.anthropic = 5", "`flemma.opt.anthropic` should be a table of parameters, not number" },
      { "flemma.opt.temperature = 0 / 0", "`flemma.opt.temperature` should be a finite number, not nan" },
      { "flemma.opt.temperature = math.huge", "`flemma.opt.temperature` should be a finite number, not inf" },
      { "flemma.opt.max_tokens = math.huge", "`flemma.opt.max_tokens` should be a finite number, not inf" },
      { "flemma.opt.thinking = math.huge", "`flemma.opt.thinking` should be a finite number, not inf" },
      {
        "flemma.opt.anthropic.thinking_budget = math.huge",
        "`flemma.opt.anthropic.thinking_budget` should be a finite number, not inf",
      },
      {
        "flemma.opt.vertex.thinking_budget = -math.huge",
        "`flemma.opt.vertex.thinking_budget` should be a finite number, not -inf",
      },
      {
        "flemma.opt.anthropic = { thinking_budget = 0 / 0 }",
        "`flemma.opt.anthropic.thinking_budget` should be a finite number, not nan",
      },
    }
    for _, case in ipairs(bad) do
      it("refuses " .. case[1], function()
        assert.equals("frontmatter line 2: " .. case[2], fails(case[1]))
      end)
    end
  end)

  describe("transport", function()
    local cases = {
      'flemma.opt.providers = { anthropic = { endpoint = "http://evil" } }',
      "local p = flemma.opt.providers",
      'flemma.opt.anthropic.endpoint = "http://evil"',
      'flemma.opt.openai.api_key_env = "OTHER_KEY"',
      'flemma.opt.endpoint = "http://evil"',
      'flemma.opt.anthropic = { endpoint = "http://evil" }',
    }
    for _, code in ipairs(cases) do
      it("cannot be set: " .. code, function()
        local err = fails(code)
        assert.matches(
          "^frontmatter line 2: `flemma%.opt%.[%w_.]+`: transport settings %(`providers%.%*`: endpoints, headers, keys%) cannot be set from frontmatter: a chat file must not choose where the conversation and your keys are sent",
          err
        )
      end)
    end

    it("stays as configured in the effective parameters", function()
      local before = vim.deepcopy(require("flemma.core.config").get().providers)
      fails('flemma.opt.providers = { anthropic = { endpoint = "http://evil" } }')
      assert.same(before, require("flemma.core.config").get().providers)
    end)
  end)

  describe("new()", function()
    it("gives a fresh object each time: nothing carries over", function()
      local a, collect_a = opt.new()
      a.max_tokens = 10
      a.tools = { "read" }
      local _, collect_b = opt.new()
      assert.same({ max_tokens = 10 }, collect_a().parameters)
      assert.same({ auto_approve_excluded = {}, parameters = {} }, collect_b())
    end)

    it("raises without a line outside frontmatter", function()
      local o = opt.new()
      local okc, err = pcall(function()
        o.tools = { "raed" }
      end)
      assert.is_false(okc)
      assert.equals("unknown tool `raed` in flemma.opt.tools; did you mean `read`?", err)
    end)
  end)
end)
