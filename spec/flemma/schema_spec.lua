-- One option schema (lua/flemma/isolated/schema.lua): setup(), frontmatter's flemma.opt
-- and `:Flemma switch key=value` judge a value the same way and say the same thing.
local helpers = require("spec.support.helpers")
local config = require("flemma.core.config")
local frontmatter = require("flemma.chat.frontmatter")
local schema = require("flemma.isolated.schema")

-- Bad values, each with the one message every surface gives (after the option's name).
local BAD = {
  { name = "thinking", value = "extreme", lua = '"extreme"', switch = "thinking=extreme" },
  { name = "temperature", value = 5, lua = "5", switch = "temperature=5" },
  { name = "max_tokens", value = -3, lua = "-3", switch = "max_tokens=-3" },
  { name = "cache_retention", value = "forever", lua = '"forever"', switch = "cache_retention=forever" },
  { name = "max_tokens", value = 1.5, lua = "1.5", switch = "max_tokens=1.5" },
}
local PROBLEM = {
  thinking = 'should be "minimal", "low", "medium", "high", "max", false, or a token budget, not "extreme"',
  temperature = "should be a number between 0 and 2, not 5",
  max_tokens = "should be a whole number >= 1, not -3",
  cache_retention = 'should be one of none, short, long, not "forever"',
}

describe("the option schema", function()
  local notes, orig_notify
  before_each(function()
    notes = {}
    orig_notify = vim.notify
    vim.notify = function(msg, level)
      notes[#notes + 1] = { msg = msg, level = level or vim.log.levels.INFO }
    end
    require("flemma").setup({ parameters = { temperature = 0.5, max_tokens = 1000, thinking = "low" } })
  end)
  after_each(function()
    vim.notify = orig_notify
    require("flemma").setup({})
    helpers.cleanup()
  end)

  for _, case in ipairs({ BAD[1], BAD[2], BAD[3] }) do
    it(
      ("setup() refuses parameters.%s = %s in one line and keeps the previous config"):format(case.name, case.lua),
      function()
        local before = vim.deepcopy(config.get())
        local ok, err = pcall(require("flemma").setup, { parameters = { [case.name] = case.value } })
        assert.is_false(ok)
        assert.equals(("(flemma) `parameters.%s` %s"):format(case.name, PROBLEM[case.name]), err)
        assert.is_nil(err:find("\n", 1, true))
        assert.same(before, config.get())
        assert.equals(0.5, config.get().parameters.temperature)
      end
    )
  end

  it("refuses all three at once in setup() (nothing of it is applied)", function()
    local ok, err =
      pcall(require("flemma").setup, { parameters = { thinking = "extreme", temperature = 5, max_tokens = -3 } })
    assert.is_false(ok)
    assert.matches("^%(flemma%) `parameters%.[%w_]+` should be ", err)
    assert.equals("low", config.get().parameters.thinking)
  end)

  for _, case in ipairs(BAD) do
    it(
      ("gives the same message for %s = %s in setup(), frontmatter and :Flemma switch"):format(case.name, case.lua),
      function()
        local want = schema.problem("parameters." .. case.name, case.value)
        assert.is_string(want)
        if PROBLEM[case.name] and case.value ~= 1.5 then
          assert.equals(PROBLEM[case.name], want)
        end
        -- setup()
        local ok, err = pcall(require("flemma").setup, { parameters = { [case.name] = case.value } })
        assert.is_false(ok)
        assert.equals(("(flemma) `parameters.%s` %s"):format(case.name, want), err)
        -- frontmatter (code on the line after the fence)
        local opts, ferr = frontmatter.evaluate(("flemma.opt.%s = %s"):format(case.name, case.lua), "lua", 1)
        assert.is_nil(opts)
        assert.equals(("frontmatter line 2: `flemma.opt.%s` %s"):format(case.name, want), ferr)
        -- :Flemma switch key=value
        notes = {}
        vim.cmd("Flemma switch openai " .. case.switch)
        local errs = vim.tbl_filter(function(n)
          return n.level == vim.log.levels.ERROR
        end, notes)
        assert.equals(1, #errs)
        assert.equals(("(flemma) `parameters.%s` %s"):format(case.name, want), errs[1].msg)
        assert.is_nil(config.session())
      end
    )
  end

  it("a preset's bad value reads the same, under its name", function()
    local ok, err = pcall(require("flemma").setup, { presets = { ["$hot"] = "openai temperature=5" } })
    assert.is_false(ok)
    assert.equals("(flemma) preset `$hot`: `parameters.temperature` " .. PROBLEM.temperature, err)
    ok, err = pcall(
      require("flemma").setup,
      { presets = { ["$hot"] = { provider = "openai", parameters = { thinking = "extreme" } } } }
    )
    assert.is_false(ok)
    assert.equals("(flemma) preset `$hot`: `parameters.thinking` " .. PROBLEM.thinking, err)
  end)

  it("accepts every default and every value on the edge of a range", function()
    for _, o in ipairs(schema.OPTIONS) do
      assert.is_nil(schema.problem(o.path, o.default), o.path)
    end
    for _, good in ipairs({
      { temperature = 0 },
      { temperature = 2 },
      { max_tokens = 1 },
      { thinking = false },
      { thinking = 0 },
      { thinking = "max" },
      { vertex = { thinking_budget = -1 } },
    }) do
      assert.has_no.errors(function()
        config.setup({ parameters = good })
      end)
    end
  end)

  it("declares every option with a type and a one-line doc; setup()'s defaults are its defaults", function()
    for _, o in ipairs(schema.OPTIONS) do
      assert.is_truthy(o.type, o.path)
      assert.is_string(o.doc, o.path)
      assert.is_nil(o.doc:find("\n", 1, true), o.path)
    end
    assert.same(schema.defaults(), config.defaults())
    -- an option without a default is absent (nil has a meaning: `mcp.include` nil keeps all)
    local d = config.defaults()
    for _, path in ipairs({ "model", "mcp.include", "mcp.exclude", "tools.bash.env", "sandbox.policy.rw_paths" }) do
      local head, tail = path:match("^(.-)%.?([^.]+)$")
      local parent = d
      for part in head:gmatch("[^.]+") do
        parent = parent[part]
      end
      assert.is_nil(parent[tail], path)
    end
    assert.same({}, d.parameters.anthropic)
    assert.equals("global", d.parameters.vertex.location)
    assert.same(schema.paths(), config.option_paths())
    -- every key of the defaults is an option
    local function walk(t, prefix)
      for k, v in pairs(t) do
        local path = prefix and (prefix .. "." .. k) or k
        assert.is_not_nil(schema.get(path), path)
        if type(v) == "table" and not vim.islist(v) and not schema.get(path).keys then
          walk(v, path)
        end
      end
    end
    walk(config.defaults(), nil)
  end)

  it("loads in plain Lua without Neovim or require (as inside the frontmatter interpreter)", function()
    local chunk = assert(loadfile(helpers.root .. "/lua/flemma/isolated/schema.lua"))
    local env = {
      pairs = pairs,
      ipairs = ipairs,
      type = type,
      tostring = tostring,
      table = table,
      string = string,
      math = math,
    }
    setfenv(chunk, env)
    local s = chunk()
    assert.equals("should be a number between 0 and 2, not 5", s.problem("parameters.temperature", 5))
    assert.is_nil(rawget(env, "vim"))
  end)
end)
