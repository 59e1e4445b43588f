local helpers = require("spec.support.helpers")
local approval = require("flemma.tools.approval")

local BUILTIN = {
  "urn:flemma:approval:config",
  "urn:flemma:approval:frontmatter",
  "urn:flemma:approval:sandbox",
  "urn:flemma:approval:catch-all",
}

local function setup(opts)
  return require("flemma").setup(opts or {})
end

-- A buffer holding a ```lua frontmatter with `code`, then a short conversation.
local function chat(code)
  local lines = { "```lua" }
  vim.list_extend(lines, vim.split(code, "\n"))
  vim.list_extend(lines, { "```", "@You:", "Go." })
  return helpers.buffer(lines)
end

local function decide(tool, input, bufnr)
  return approval.resolve(tool, input or {}, { bufnr = bufnr, tool_id = "toolu_01" })
end

-- Decisions for the built-in file tools, bash and a tool of your own (`lookup`, in no
-- preset) in one table.
local function decisions(bufnr, input)
  local out = {}
  for _, tool in ipairs({ "bash", "read", "write", "edit", "lookup" }) do
    out[tool] = decide(tool, input or { command = "ls" }, bufnr)
  end
  return out
end

local capture_notify = helpers.notifications

local A, R, D = "approve", "require_approval", "deny"

describe("flemma.tools.approval", function()
  after_each(function()
    for _, r in ipairs(approval.get_all()) do
      if not vim.tbl_contains(BUILTIN, r.name) then
        approval.unregister(r.name)
      end
    end
    setup({})
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  describe("register()", function()
    before_each(function()
      setup({})
    end)

    it("uses priority 50 by default and keeps the description", function()
      approval.register("my:policy", { description = "mine", resolve = function() end })
      local r = approval.get("my:policy")
      assert.equals(50, r.priority)
      assert.equals("mine", r.description)
      assert.equals("my:policy", r.name)
    end)

    it("replaces a resolver registered under the same name", function()
      local before = approval.count()
      approval.register("my:policy", {
        resolve = function()
          return "deny"
        end,
        priority = 300,
      })
      approval.register("my:policy", {
        resolve = function()
          return "approve"
        end,
        priority = 300,
      })
      assert.equals(before + 1, approval.count())
      assert.equals(A, decide("bash"))
    end)

    local bad = {
      { { nil, { resolve = function() end } }, "expects a resolver name" },
      { { "x", "nope" }, "expects a table" },
      { { "x", {} }, "needs a `resolve` function" },
      { { "x", { resolve = function() end, priority = "high" } }, "`priority` should be a number, not string" },
    }
    for _, case in ipairs(bad) do
      it("refuses a bad registration: " .. case[2], function()
        local ok, err = pcall(approval.register, case[1][1], case[1][2])
        assert.is_false(ok)
        assert.matches("(flemma) ", err, 1, true)
        assert.matches(case[2], err, 1, true)
      end)
    end
  end)

  describe("unregister()", function()
    it("returns true when the resolver was registered, false otherwise", function()
      approval.register("my_plugin:security_policy", { resolve = function() end })
      assert.is_true(approval.unregister("my_plugin:security_policy"))
      assert.is_nil(approval.get("my_plugin:security_policy"))
      assert.is_false(approval.unregister("my_plugin:security_policy"))
    end)
  end)

  describe("get_all()", function()
    it("sorts by priority, highest first, ties by name", function()
      setup({})
      approval.register("b:second", { resolve = function() end, priority = 60 })
      approval.register("a:first", { resolve = function() end, priority = 60 })
      approval.register("z:top", { resolve = function() end, priority = 200 })
      local names = vim.tbl_map(function(r)
        return r.name .. "=" .. r.priority
      end, approval.get_all())
      assert.same({
        "z:top=200",
        "urn:flemma:approval:config=100",
        "urn:flemma:approval:frontmatter=90",
        "a:first=60",
        "b:second=60",
        "urn:flemma:approval:sandbox=25",
      }, names)
    end)

    it("returns a deep copy", function()
      setup({})
      local all = approval.get_all()
      all[1].priority = -5
      all[1].name = "changed"
      table.remove(all, 1)
      assert.equals(100, approval.get("urn:flemma:approval:config").priority)
      assert.equals(3, approval.count())
      local one = approval.get("urn:flemma:approval:config")
      one.priority = 1
      assert.equals(100, approval.get("urn:flemma:approval:config").priority)
    end)
  end)

  describe("setup()", function()
    it("registers config, frontmatter and sandbox resolvers with the spec's priorities", function()
      setup({})
      assert.equals(100, approval.get("urn:flemma:approval:config").priority)
      assert.equals(90, approval.get("urn:flemma:approval:frontmatter").priority)
      assert.equals(25, approval.get("urn:flemma:approval:sandbox").priority)
      assert.is_nil(approval.get("urn:flemma:approval:catch-all"))
      assert.equals(3, approval.count())
    end)

    it("adds the catch-all at priority 0 only with require_approval = false", function()
      setup({ tools = { require_approval = false } })
      assert.equals(0, approval.get("urn:flemma:approval:catch-all").priority)
      assert.equals(A, decide("bash"))
      assert.equals(A, decide("anything_at_all"))
      setup({})
      assert.is_nil(approval.get("urn:flemma:approval:catch-all"))
      assert.equals(R, decide("bash"))
    end)

    it("replaces its own resolvers on each call and keeps the others", function()
      approval.register("my:keep", { resolve = function() end })
      setup({})
      setup({})
      assert.equals(4, approval.count())
      assert.is_not_nil(approval.get("my:keep"))
    end)

    it("refuses an unknown preset with a suggestion", function()
      local ok, err = pcall(setup, { tools = { auto_approve = { "$reaonly" } } })
      assert.is_false(ok)
      assert.matches(
        "(flemma) unknown preset `$reaonly`; did you mean `$readonly`? in `tools.auto_approve`",
        err,
        1,
        true
      )
    end)

    it("refuses a malformed preset", function()
      local ok, err = pcall(setup, { tools = { presets = { ["$x"] = { approve = "bash" } } } })
      assert.is_false(ok)
      assert.matches('`tools.presets["$x"].approve` should be a list of tool names, not string', err, 1, true)
      ok, err = pcall(setup, { tools = { presets = { yolo = { approve = { "bash" } } } } })
      assert.is_false(ok)
      assert.matches("preset names start with `$`", err, 1, true)
      ok, err = pcall(setup, { tools = { presets = { ["$x"] = { allow = { "bash" } } } } })
      assert.is_false(ok)
      assert.matches('unknown key "allow"', err, 1, true)
    end)
  end)

  describe("resolve()", function()
    before_each(function()
      setup({ tools = { auto_approve = {} } })
    end)

    it("requires approval when no resolver decides", function()
      assert.equals(R, decide("bash"))
    end)

    it("lets the highest priority decide and skips resolvers that pass", function()
      local calls = {}
      approval.register("low", {
        priority = 10,
        resolve = function()
          calls[#calls + 1] = "low"
          return "deny"
        end,
      })
      approval.register("high", {
        priority = 70,
        resolve = function()
          calls[#calls + 1] = "high"
          return nil
        end,
      })
      approval.register("mid", {
        priority = 40,
        resolve = function()
          calls[#calls + 1] = "mid"
          return "approve"
        end,
      })
      assert.equals(A, decide("bash"))
      assert.same({ "high", "mid" }, calls)
    end)

    it("breaks priority ties by name", function()
      approval.register("b", {
        priority = 60,
        resolve = function()
          return "deny"
        end,
      })
      approval.register("a", {
        priority = 60,
        resolve = function()
          return "approve"
        end,
      })
      assert.equals(A, decide("bash"))
    end)

    it("passes the tool name, the input and { bufnr, tool_id }", function()
      local got
      approval.register("spy", {
        resolve = function(name, input, ctx)
          got = { name, input, ctx }
        end,
      })
      approval.resolve("bash", { command = "ls" }, { bufnr = 7, tool_id = "toolu_9" })
      assert.same({ "bash", { command = "ls" }, { bufnr = 7, tool_id = "toolu_9" } }, got)
    end)

    it("logs and skips a resolver that throws", function()
      approval.register("broken", {
        priority = 80,
        resolve = function()
          error("boom")
        end,
      })
      approval.register("fallback", {
        priority = 10,
        resolve = function()
          return "deny"
        end,
      })
      local result
      local seen = capture_notify(function()
        result = decide("bash")
      end)
      assert.equals(D, result)
      assert.equals(1, #seen)
      assert.matches("approval resolver `broken` failed and was skipped: .*boom", seen[1].msg)
      assert.equals(vim.log.levels.WARN, seen[1].level)
    end)

    it("logs and skips a result that is not a decision", function()
      approval.register("odd", {
        priority = 80,
        resolve = function()
          return "yes"
        end,
      })
      local result
      local seen = capture_notify(function()
        result = decide("bash")
      end)
      assert.equals(R, result)
      assert.matches('returned "yes", which is not a decision', seen[1].msg, 1, true)
    end)

    it("runs the registration example: a third-party security policy", function()
      setup({ tools = { require_approval = false } })
      approval.register("my_plugin:security_policy", {
        description = "Block dangerous bash commands",
        resolve = function(tool_name, input, _context)
          if tool_name == "bash" and input.command:match("rm %-rf") then
            return "deny"
          end
          return nil -- pass to next resolver
        end,
      })
      assert.equals(D, decide("bash", { command = "rm -rf /" }))
      assert.equals(A, decide("bash", { command = "ls" }))
    end)

    it("lets priority 200 override the config", function()
      setup({})
      assert.equals(A, decide("read"))
      approval.register("strict", {
        priority = 200,
        resolve = function(name)
          return name == "read" and "deny" or nil
        end,
      })
      assert.equals(D, decide("read"))
      approval.register("lenient", {
        priority = 60,
        resolve = function()
          return "deny"
        end,
      })
      assert.equals(A, decide("write"))
    end)
  end)

  describe("tools.auto_approve", function()
    it("defaults to $default: read, write and edit approved, bash gated", function()
      setup({})
      assert.same({ bash = R, read = A, write = A, edit = A, lookup = R }, decisions())
    end)

    -- Issue 24 §16: `calculator` asked for approval although it only computes.
    it("approves the calculators with $default, not with $readonly", function()
      setup({})
      assert.equals(A, decide("calculator", { expression = "1+1" }))
      assert.equals(A, decide("calculator_async", { expression = "1+1" }))
      setup({ tools = { auto_approve = { "$readonly" } } })
      assert.equals(R, decide("calculator", { expression = "1+1" }))
    end)

    it('mixes presets and tool names: { "$readonly", "lookup" }', function()
      setup({ tools = { auto_approve = { "$readonly", "lookup" } } })
      assert.same({ bash = R, read = A, write = R, edit = R, lookup = A }, decisions())
    end)

    it('takes a function returning true, false or "deny"', function()
      setup({
        tools = {
          auto_approve = function(tool_name, input, _ctx)
            if tool_name == "lookup" then
              return true
            end
            if tool_name == "bash" and input.command:match("rm %-rf") then
              return "deny"
            end
            return false -- require approval
          end,
        },
      })
      assert.equals(A, decide("lookup"))
      assert.equals(D, decide("bash", { command = "rm -rf ~" }))
      assert.equals(R, decide("bash", { command = "ls" }))
      assert.equals(R, decide("read"))
    end)

    it("passes to the next resolver when the function returns nil", function()
      setup({ tools = {
        auto_approve = function()
          return nil
        end,
      } })
      approval.register("later", {
        priority = 5,
        resolve = function()
          return "deny"
        end,
      })
      assert.equals(D, decide("read"))
    end)

    it("logs a function that returns something else and requires approval", function()
      setup({ tools = {
        auto_approve = function()
          return "ok"
        end,
      } })
      local result
      local seen = capture_notify(function()
        result = decide("read")
      end)
      assert.equals(R, result)
      assert.matches(
        'tools.auto_approve returned "ok"; it should return true, false, "deny" or nil',
        seen[1].msg,
        1,
        true
      )
    end)

    it("loads a module path as a resolver named after the module at priority 100", function()
      local dir = helpers.tmpdir()
      helpers.write_file(
        dir .. "/my_policy_mod.lua",
        [[return { resolve = function(tool_name, input) if tool_name == "bash" then return "deny" end return tool_name == "read" end }]]
      )
      local saved = package.path
      package.path = dir .. "/?.lua;" .. package.path
      local ok, err = pcall(function()
        setup({ tools = { auto_approve = "my_policy_mod" } })
        assert.equals(100, approval.get("my_policy_mod").priority)
        assert.is_nil(approval.get("urn:flemma:approval:config"))
        assert.equals(D, decide("bash"))
        assert.equals(A, decide("read"))
        assert.equals(R, decide("write"))
      end)
      package.path = saved
      package.loaded.my_policy_mod = nil
      assert(ok, err)
    end)

    it("logs a module path that cannot be loaded and requires approval", function()
      setup({ tools = { auto_approve = "no_such_policy_module_xyz" } })
      local result
      local seen = capture_notify(function()
        result = decide("read")
      end)
      assert.equals(R, result)
      assert.matches("cannot load approval module `no_such_policy_module_xyz`", seen[1].msg, 1, true)
    end)
  end)

  describe("presets", function()
    it("runs the spec's example: $yolo with $no-bash", function()
      setup({
        tools = {
          presets = {
            ["$yolo"] = { approve = { "bash", "read", "write", "edit" } },
            ["$no-bash"] = { deny = { "bash" } },
          },
          auto_approve = { "$yolo", "$no-bash" },
        },
      })
      assert.same({ bash = D, read = A, write = A, edit = A, lookup = R }, decisions())
    end)

    -- Composition rules, table-driven: presets, auto_approve, expected decisions.
    local cases = {
      {
        "unions the approve sets of several presets",
        { ["$a"] = { approve = { "read" } }, ["$b"] = { approve = { "bash" } } },
        { "$a", "$b" },
        { bash = A, read = A, write = R, edit = R, lookup = R },
      },
      {
        "unions the deny sets of several presets",
        { ["$a"] = { deny = { "read" } }, ["$b"] = { deny = { "bash" } } },
        { "$a", "$b", "$default" },
        { bash = D, read = D, write = A, edit = A, lookup = R },
      },
      {
        "denies when any preset denies (deny wins, whatever the order)",
        { ["$no-write"] = { deny = { "write" } } },
        { "$no-write", "$default" },
        { bash = R, read = A, write = D, edit = A, lookup = R },
      },
      {
        "denies a tool also named plainly in the list",
        { ["$no-bash"] = { deny = { "bash" } } },
        { "bash", "$no-bash" },
        { bash = D, read = R, write = R, edit = R, lookup = R },
      },
      {
        'mixes plain names with presets: { "$default", "lookup" }',
        {},
        { "$default", "lookup" },
        { bash = R, read = A, write = A, edit = A, lookup = A },
      },
      {
        "lets a user preset override a built-in one by name",
        { ["$default"] = { approve = { "read" } } },
        { "$default" },
        { bash = R, read = A, write = R, edit = R, lookup = R },
      },
      {
        "approves nothing with an empty list",
        {},
        {},
        { bash = R, read = R, write = R, edit = R, lookup = R },
      },
    }
    for _, case in ipairs(cases) do
      it(case[1], function()
        setup({ tools = { presets = case[2], auto_approve = case[3] } })
        assert.same(case[4], decisions())
      end)
    end
  end)

  describe("per-buffer approval (frontmatter resolver)", function()
    local saved_state
    before_each(function()
      setup({})
      -- A tool of your own, in no preset: the frontmatter may name it.
      require("flemma.tools").register("lookup", {
        name = "lookup",
        description = "looks a word up",
        input_schema = { type = "object", properties = {} },
        execute = function()
          return { success = true, output = "" }
        end,
      })
      saved_state = vim.env.XDG_STATE_HOME
      vim.env.XDG_STATE_HOME = helpers.tmpdir() -- trust answers go here
    end)
    after_each(function()
      vim.env.XDG_STATE_HOME = saved_state
      require("flemma.tools").unregister("lookup")
    end)

    -- Cases: the frontmatter, the decisions while it is not trusted (what widens the
    -- configuration is ignored), and once trusted (when they differ).

    local cases = {
      {
        "Preset form: read-only access for this buffer",
        'flemma.opt.tools.auto_approve = { "$readonly" }',
        { bash = R, read = A, write = R, edit = R, lookup = R },
      },
      {
        "List form: auto-approve these tools in this buffer",
        'flemma.opt.tools.auto_approve = { "lookup", "read" }',
        { bash = R, read = A, write = R, edit = R, lookup = R },
        { bash = R, read = A, write = R, edit = R, lookup = A },
      },
      {
        "Mix presets and tool names",
        'flemma.opt.tools.auto_approve = { "$default", "bash" }',
        { bash = R, read = A, write = A, edit = A, lookup = R },
        { bash = A, read = A, write = A, edit = A, lookup = R },
      },
      {
        "Function form: full control per-buffer",
        table.concat({
          "flemma.opt.tools.auto_approve = function(tool_name, input, ctx)",
          '  if tool_name == "lookup" then return true end',
          "  return nil  -- pass to next resolver",
          "end",
        }, "\n"),
        { bash = R, read = R, write = R, edit = R, lookup = R },
        { bash = R, read = R, write = R, edit = R, lookup = A },
      },
      {
        "Start from default, but remove write access",
        'flemma.opt.tools.auto_approve = { "$default" }\nflemma.opt.tools.auto_approve:remove("write")',
        { bash = R, read = A, write = R, edit = A, lookup = R },
      },
      {
        "Add bash to the default set",
        'flemma.opt.tools.auto_approve = { "$default" }\nflemma.opt.tools.auto_approve:append("bash")',
        { bash = R, read = A, write = A, edit = A, lookup = R },
        { bash = A, read = A, write = A, edit = A, lookup = R },
      },
      {
        "Operator shorthand: + (append), - (remove)",
        'flemma.opt.tools.auto_approve = flemma.opt.tools.auto_approve + "bash" - "write"',
        { bash = R, read = A, write = R, edit = A, lookup = R },
        { bash = A, read = A, write = R, edit = A, lookup = R },
      },
      {
        "a buffer without frontmatter follows the config",
        "-- nothing set",
        { bash = R, read = A, write = A, edit = A, lookup = R },
      },
    }
    for _, case in ipairs(cases) do
      it(case[1], function()
        local buf = chat(case[2])
        capture_notify(function()
          assert.same(case[3], decisions(buf))
        end)
        require("flemma.chat.trust").set(buf, "trusted")
        assert.same(case[4] or case[3], decisions(buf))
      end)
    end

    it("keeps the preset listed while the removed tool is excluded at expansion", function()
      local buf = chat('flemma.opt.tools.auto_approve = { "$default" }\nflemma.opt.tools.auto_approve:remove("write")')
      local opts = require("flemma.chat.frontmatter").get(buf)
      assert.same({ "$default" }, opts.auto_approve)
      assert.same({ "write" }, opts.auto_approve_excluded)
    end)

    it('gives the function the bufnr and tool_id and lets "deny" block', function()
      local buf = chat(table.concat({
        "flemma.opt.tools.auto_approve = function(tool_name, input, ctx)",
        '  if ctx.tool_id == "toolu_01" and input.command == "rm" then return "deny" end',
        "  if ctx.bufnr > 0 then return false end",
        "end",
      }, "\n"))
      assert.equals(D, decide("bash", { command = "rm" }, buf))
      assert.equals(R, decide("read", {}, buf))
    end)

    it("stops an endless loop in the buffer's function, names the line and requires approval", function()
      local buf = chat(table.concat({
        "flemma.opt.tools.auto_approve = function(tool_name)",
        "  while true do end",
        "end",
      }, "\n"))
      local result
      local seen = capture_notify(function()
        result = decide("read", {}, buf)
      end)
      assert.equals(R, result)
      assert.matches("frontmatter line 3: ran longer than 35 ms and was stopped", seen[1].msg, 1, true)
    end)

    it("applies only to its own buffer", function()
      local strict = chat('flemma.opt.tools.auto_approve = { "$readonly" }')
      local plain = chat("-- nothing")
      assert.equals(R, decide("write", {}, strict))
      assert.equals(A, decide("write", {}, plain))
    end)

    it("follows edits of the frontmatter", function()
      local buf = chat('flemma.opt.tools.auto_approve = { "$readonly" }')
      assert.equals(R, decide("write", {}, buf))
      vim.api.nvim_buf_set_lines(buf, 1, 2, false, { 'flemma.opt.tools.auto_approve = { "$default" }' })
      assert.equals(A, decide("write", {}, buf))
    end)
  end)

  describe("sandbox resolver", function()
    local function sandboxed(tools_opts, sandbox_opts)
      setup({ tools = tools_opts or {}, sandbox = vim.tbl_extend("force", { enabled = true }, sandbox_opts or {}) })
    end

    it("approves bash (can_auto_approve_if_sandboxed) while the sandbox is enabled and available", function()
      sandboxed()
      assert.is_true((require("flemma.policy.sandbox").is_available()))
      assert.same({ bash = A, read = A, write = A, edit = A, lookup = R }, decisions())
    end)

    it("approves only tools that declare the capability", function()
      sandboxed({ auto_approve = { "$readonly" } })
      assert.same({ bash = A, read = A, write = R, edit = R, lookup = R }, decisions())
    end)

    it("does nothing while the sandbox is disabled", function()
      setup({})
      assert.equals(R, decide("bash"))
    end)

    it("does nothing when the backend is not available", function()
      sandboxed(nil, { backend = "sandbox-exec" }) -- not on Linux
      assert.is_false((require("flemma.policy.sandbox").is_available()))
      assert.equals(R, decide("bash"))
    end)

    it("does nothing without an auto_approve policy", function()
      sandboxed({ auto_approve = {} })
      assert.equals(R, decide("bash"))
    end)

    it("is turned off by tools.auto_approve_sandboxed = false", function()
      sandboxed({ auto_approve_sandboxed = false })
      assert.equals(R, decide("bash"))
      assert.equals(A, decide("read"))
    end)

    it('is turned off for a buffer by auto_approve:remove("bash")', function()
      sandboxed()
      local buf = chat('flemma.opt.tools.auto_approve:remove("bash")')
      local other = chat("-- nothing")
      assert.equals(R, decide("bash", {}, buf))
      assert.equals(A, decide("read", {}, buf))
      assert.equals(A, decide("bash", {}, other))
    end)

    it("lets a deny of the config win over the sandbox", function()
      sandboxed({ presets = { ["$no-bash"] = { deny = { "bash" } } }, auto_approve = { "$default", "$no-bash" } })
      assert.equals(D, decide("bash"))
    end)
  end)
end)
