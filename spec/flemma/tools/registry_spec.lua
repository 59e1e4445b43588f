local tools = require("flemma.tools")
local config = require("flemma.core.config")

local function def(name, extra)
  local d = {
    name = name,
    description = "test tool " .. name,
    input_schema = { type = "object", properties = {}, required = {} },
  }
  for k, v in pairs(extra or {}) do
    d[k] = v
  end
  return d
end

-- Collects notifications while fn runs (the real vim.notify is restored after).
local function capture_notify()
  local seen = {}
  local orig = vim.notify
  vim.notify = function(msg, level)
    seen[#seen + 1] = { msg = msg, level = level }
  end
  return seen, function()
    vim.notify = orig
  end
end

local function run(bufnr, use, timeout)
  local results = {}
  local returned = false
  local handle = tools.execute(bufnr, use, function(res)
    results[#results + 1] = { res = res, after_return = returned }
  end)
  returned = true
  vim.wait(timeout or 2000, function()
    return #results > 0
  end, 5)
  return results[1] and results[1].res, results, handle
end

describe("flemma.tools", function()
  before_each(function()
    tools._reset()
    config.setup({})
  end)
  after_each(function()
    tools._reset()
    config.setup({})
  end)

  describe("register", function()
    it("registers a name and a definition", function()
      tools.register("alpha", def("alpha"))
      assert.equals("alpha", tools.get("alpha").name)
      assert.same({ "alpha" }, tools.list())
    end)

    it("fills the name from the first argument and refuses a mismatch", function()
      local d = def("x")
      d.name = nil
      tools.register("beta", d)
      assert.equals("beta", tools.get("beta").name)
      local ok, err = pcall(tools.register, "gamma", def("delta"))
      assert.is_false(ok)
      assert.matches("registered as `gamma` has name `delta`", err)
      assert.is_nil(tools.get("gamma"))
    end)

    it("registers a single definition table", function()
      tools.register(def("solo"))
      assert.is_not_nil(tools.get("solo"))
    end)

    it("registers an array of definitions", function()
      tools.register({ def("b_tool"), def("a_tool") })
      assert.same({ "a_tool", "b_tool" }, tools.list())
    end)

    it("registers nothing of an array with one bad entry, naming the entry and field", function()
      local bad = def("bad")
      bad.description = nil
      local ok, err = pcall(tools.register, { def("good"), bad })
      assert.is_false(ok)
      assert.matches("definition #2", err)
      assert.matches("`description`", err)
      assert.same({}, tools.list())
    end)

    local missing = {
      { field = "name", strip = "name", message = "required field `name`" },
      { field = "description", strip = "description", message = "required field `description`" },
      { field = "input_schema", strip = "input_schema", message = "required field `input_schema`" },
    }
    for _, case in ipairs(missing) do
      it("refuses a definition without `" .. case.field .. "`", function()
        local d = def("t")
        d[case.strip] = nil
        local ok, err = pcall(tools.register, d)
        assert.is_false(ok)
        assert.matches("^%(flemma%) ", err)
        assert.matches(case.message, err, 1, true)
        assert.same({}, tools.list())
      end)
    end

    it("refuses optional fields of the wrong type", function()
      local ok, err = pcall(tools.register, def("t", { execute = "nope" }))
      assert.is_false(ok)
      assert.matches("`execute` should be a function, not string", err, 1, true)
      ok, err = pcall(tools.register, def("t", { input_schema = { type = "array" } }))
      assert.is_false(ok)
      assert.matches("input_schema.type", err, 1, true)
    end)

    it("registers a module's `definitions` at once", function()
      package.preload["spec_tools_defs_mod"] = function()
        return { definitions = { def("mod_a"), def("mod_b") } }
      end
      tools.register("spec_tools_defs_mod")
      assert.same({ "mod_a", "mod_b" }, tools.list())
      assert.is_true(tools.is_ready())
    end)

    it("registers a module's `resolve` as an async source with its timeout", function()
      local done_fn
      package.preload["spec_tools_async_mod"] = function()
        return {
          timeout = 5,
          resolve = function(register, done)
            register("late_tool", def("late_tool"))
            done_fn = done
          end,
        }
      end
      tools.register("spec_tools_async_mod")
      assert.is_false(tools.is_ready())
      assert.same({ "late_tool" }, tools.list())
      done_fn()
      assert.is_true(tools.is_ready())
    end)

    it("refuses a missing module and one that exports neither form", function()
      local ok, err = pcall(tools.register, "spec_tools_no_such_module")
      assert.is_false(ok)
      assert.matches("cannot load tool module `spec_tools_no_such_module`", err, 1, true)
      package.preload["spec_tools_empty_mod"] = function()
        return { something = 1 }
      end
      ok, err = pcall(tools.register, "spec_tools_empty_mod")
      assert.is_false(ok)
      assert.matches("neither `definitions`", err, 1, true)
    end)

    it("refuses arguments of no known form", function()
      local ok, err = pcall(tools.register, 42)
      assert.is_false(ok)
      assert.matches("not number", err, 1, true)
    end)
  end)

  describe("async sources", function()
    it("let a function register several tools and become ready on done()", function()
      local finish
      tools.register(function(register, done)
        vim.defer_fn(function()
          register("one", def("one"))
          register("two", def("two"))
          finish = done
        end, 20)
      end)
      assert.is_false(tools.is_ready())
      local fired = 0
      tools.on_ready(function()
        fired = fired + 1
      end)
      vim.wait(1000, function()
        return finish ~= nil
      end)
      assert.same({ "one", "two" }, tools.list())
      assert.equals(0, fired)
      finish()
      finish() -- a second call is harmless
      assert.is_true(tools.is_ready())
      assert.equals(1, fired)
    end)

    it("call on_ready at once when nothing is loading", function()
      local fired = false
      tools.on_ready(function()
        fired = true
      end)
      assert.is_true(fired)
    end)

    it("wait for every source", function()
      local d1, d2
      tools.register(function(_, done)
        d1 = done
      end)
      tools.register({
        resolve = function(_, done)
          d2 = done
        end,
      })
      d1()
      assert.is_false(tools.is_ready())
      d2()
      assert.is_true(tools.is_ready())
    end)

    it("time out after the table's timeout with a warning naming the source", function()
      local seen, restore = capture_notify()
      local fired = false
      -- Timers count from the loop's cached time: refresh it, or a slow spec before
      -- this one makes the timeout fire early by the wall clock.
      vim.uv.update_time()
      local t0 = vim.uv.hrtime()
      tools.register({ timeout = 0.1, resolve = function() end })
      tools.on_ready(function()
        fired = true
      end)
      vim.wait(2000, function()
        return fired
      end, 5)
      restore()
      assert.is_true(fired)
      assert.is_true((vim.uv.hrtime() - t0) / 1e6 >= 90)
      assert.is_true(tools.is_ready())
      assert.equals(1, #seen)
      assert.matches("registry_spec.lua:%d+ failed: timed out after 0.1s", seen[1].msg)
      assert.equals(vim.log.levels.WARN, seen[1].level)
    end)

    it("time out after tools.default_timeout when no timeout is given", function()
      config.setup({ tools = { default_timeout = 0.05 } })
      local seen, restore = capture_notify()
      tools.register(function() end)
      vim.wait(2000, function()
        return tools.is_ready()
      end, 5)
      restore()
      assert.is_true(tools.is_ready())
      assert.matches("timed out after 0.05s", seen[1].msg, 1, true)
    end)

    it("treat a throwing source as done(err) and keep what it registered", function()
      local seen, restore = capture_notify()
      tools.register(function(register)
        register("before_throw", def("before_throw"))
        error("discovery exploded")
      end)
      restore()
      assert.is_true(tools.is_ready())
      assert.same({ "before_throw" }, tools.list())
      assert.matches("tool source function at .*registry_spec.lua:%d+ failed: .*discovery exploded", seen[1].msg)
    end)

    it("warn about done(err) naming the module", function()
      package.preload["spec_tools_failing_mod"] = function()
        return {
          resolve = function(_, done)
            done("remote said no")
          end,
        }
      end
      local seen, restore = capture_notify()
      tools.register("spec_tools_failing_mod")
      restore()
      assert.is_true(tools.is_ready())
      assert.matches("tool source spec_tools_failing_mod failed: remote said no", seen[1].msg, 1, true)
    end)

    it("warn about a bad definition from a source and keep going", function()
      local seen, restore = capture_notify()
      tools.register(function(register, done)
        register("broken", { name = "broken" })
        register("fine", def("fine"))
        done()
      end)
      restore()
      assert.same({ "fine" }, tools.list())
      assert.matches("tool source function at .*`description`", seen[1].msg)
    end)
  end)

  describe("unregister, get and list", function()
    it("unregister returns whether the tool was there", function()
      tools.register(def("gone"))
      assert.is_true(tools.unregister("gone"))
      assert.is_false(tools.unregister("gone"))
      assert.is_nil(tools.get("gone"))
    end)

    it("list leaves out disabled tools, get still finds them", function()
      tools.register({
        def("on"),
        def("off", { enabled = false }),
        def("fn_off", {
          enabled = function()
            return false
          end,
        }),
      })
      assert.same({ "on" }, tools.list())
      assert.is_not_nil(tools.get("off"))
    end)

    it("for_buffer gives the enabled tools when nothing narrows them", function()
      tools.register({ def("x1"), def("x2") })
      local buf = vim.api.nvim_create_buf(true, false)
      assert.same({ "x1", "x2" }, (tools.for_buffer(buf)))
    end)
  end)

  describe("for_buffer with frontmatter", function()
    it("narrows the tools to the frontmatter's selection", function()
      tools.setup(config.get())
      local buf = vim.api.nvim_create_buf(true, false)
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
        "```lua",
        'flemma.opt.tools = { "read", "bash" }',
        "```",
        "@You:",
        "hi",
      })
      assert.same({ "bash", "read" }, (tools.for_buffer(buf)))
    end)
  end)

  describe("setup", function()
    it("registers the built-in tools with strict schemas", function()
      tools.setup(config.get())
      assert.same({
        "ask",
        "bash",
        "calculator",
        "calculator_async",
        "delete",
        "edit",
        "find",
        "glob",
        "grep",
        "ls",
        "move",
        "read",
        "todo",
        "write",
      }, tools.list())
      for _, name in ipairs(tools.list()) do
        local d = tools.get(name)
        assert.is_true(d.strict, name)
        local schema = d.input_schema
        assert.is_false(schema.additionalProperties, name)
        local required = {}
        for _, r in ipairs(schema.required) do
          required[r] = true
        end
        for prop in pairs(schema.properties) do
          assert.is_true(required[prop], name .. "." .. prop .. " is required")
        end
        assert.is_not_nil(schema.properties.label, name .. " has a label")
        assert.same({ "string", "null" }, schema.properties.label.type)
        assert.equals("function", type(d.format_preview))
      end
      assert.same({ "can_auto_approve_if_sandboxed" }, tools.get("bash").capabilities)
    end)

    it("runs through flemma.setup", function()
      require("flemma").setup({})
      assert.is_not_nil(tools.get("calculator"))
    end)
  end)

  describe("execute", function()
    local calls
    before_each(function()
      calls = 0
      tools.register("typed", {
        description = "typed input",
        input_schema = {
          type = "object",
          properties = {
            path = { type = "string" },
            count = { type = { "integer", "null" } },
            mode = { type = "string", enum = { "a", "b" } },
            opts = {
              type = "object",
              properties = { deep = { type = "boolean" } },
              required = { "deep" },
            },
            list = { type = "array", items = { type = "number" } },
          },
          required = { "path", "count", "mode" },
          additionalProperties = false,
        },
        execute = function(input)
          calls = calls + 1
          return { success = true, output = input }
        end,
      })
    end)

    local bad_inputs = {
      { input = { count = 1, mode = "a" }, message = "missing required field `path`" },
      { input = { path = 3, mode = "a" }, message = "field `path` should be string, not integer" },
      { input = { path = "p", mode = "c" }, message = "field `mode` should be one of" },
      { input = { path = "p", mode = "a", count = 1.5 }, message = "field `count` should be integer or null" },
      { input = { path = "p", mode = "a", extra = true }, message = "unknown field `extra`" },
      { input = { path = "p", mode = "a", opts = {} }, message = "missing required field `opts.deep`" },
      { input = { path = "p", mode = "a", opts = { deep = "y" } }, message = "field `opts.deep` should be boolean" },
      { input = { path = "p", mode = "a", list = { 1, "two" } }, message = "field `list[2]` should be number" },
      { input = { path = "p", mode = "a", list = { k = 1 } }, message = "field `list` should be array" },
      { input = { "not", "an", "object" }, message = "the input should be a JSON object" },
    }
    for i, case in ipairs(bad_inputs) do
      it("turns bad input #" .. i .. " into an error naming the field, running nothing", function()
        local res = run(0, { id = "t1", name = "typed", input = case.input })
        assert.is_false(res.success)
        assert.matches("invalid input for `typed`", res.error, 1, true)
        assert.matches(case.message, res.error, 1, true)
        assert.equals(0, calls)
      end)
    end

    it("accepts a nullable field that is absent or JSON null, passing nil to the tool", function()
      local res = run(0, { id = "t1", name = "typed", input = { path = "p", mode = "b", count = vim.NIL } })
      assert.is_true(res.success)
      assert.same({ path = "p", mode = "b" }, res.output)
      assert.equals(1, calls)
    end)

    it("reports an unknown tool", function()
      local res = run(0, { id = "t1", name = "nope", input = {} })
      assert.same({ success = false, error = "unknown tool `nope`" }, res)
    end)

    it("calls on_done once, after execute returned, for a sync tool", function()
      local res, all = run(0, { id = "t1", name = "typed", input = { path = "p", mode = "a" } })
      assert.is_true(res.success)
      vim.wait(50)
      assert.equals(1, #all)
      assert.is_true(all[1].after_return)
    end)

    it("turns a throwing tool into an error result", function()
      tools.register(def("thrower", {
        execute = function()
          error("kaboom")
        end,
      }))
      local res = run(0, { id = "t1", name = "thrower", input = {} })
      assert.is_false(res.success)
      assert.matches("tool `thrower` raised an error: .*kaboom", res.error)
    end)

    it("turns a non-table result and a failure without message into errors", function()
      tools.register(def("weird", {
        execute = function()
          return "just a string"
        end,
      }))
      tools.register(def("quiet", {
        execute = function()
          return { success = false }
        end,
      }))
      assert.matches("returned string instead of a result table", run(0, { name = "weird", input = {} }).error, 1, true)
      assert.matches("failed without a message", run(0, { name = "quiet", input = {} }).error, 1, true)
    end)

    it("runs an async tool and ignores a second callback", function()
      tools.register(def("twice", {
        async = true,
        execute = function(_, ctx, cb)
          vim.defer_fn(function()
            cb({ success = true, output = "first " .. ctx.bufnr })
            cb({ success = true, output = "second" })
          end, 10)
        end,
      }))
      local buf = vim.api.nvim_create_buf(true, false)
      local res, all = run(buf, { name = "twice", input = {} })
      vim.wait(50)
      assert.equals("first " .. buf, res.output)
      assert.equals(1, #all)
    end)

    it("cancels an async tool: its cancel function runs and a late callback is ignored", function()
      local cancelled, cb_later = false, nil
      tools.register(def("slow", {
        async = true,
        execute = function(_, _, cb)
          cb_later = cb
          return function()
            cancelled = true
          end
        end,
      }))
      local got = {}
      local handle = tools.execute(0, { name = "slow", input = {} }, function(r)
        got[#got + 1] = r
      end)
      handle.cancel()
      handle.cancel()
      vim.wait(100, function()
        return #got > 0
      end)
      assert.is_true(cancelled)
      cb_later({ success = true, output = "too late" })
      vim.wait(50)
      assert.equals(1, #got)
      assert.is_false(got[1].success)
      assert.matches("cancelled", got[1].error)
    end)

    it("runs at most tools.max_concurrent tools at once", function()
      config.setup({ tools = { max_concurrent = 1 } })
      local started, callbacks = {}, {}
      tools.register(def("gate", {
        async = true,
        execute = function(input, _, cb)
          started[#started + 1] = input
          callbacks[#callbacks + 1] = cb
        end,
      }))
      local done = {}
      tools.execute(0, { name = "gate", input = {} }, function(r)
        done[#done + 1] = r
      end)
      tools.execute(0, { name = "gate", input = {} }, function(r)
        done[#done + 1] = r
      end)
      assert.equals(1, #started)
      callbacks[1]({ success = true, output = "1" })
      vim.wait(500, function()
        return #started == 2
      end)
      assert.equals(2, #started)
      callbacks[2]({ success = true, output = "2" })
      vim.wait(500, function()
        return #done == 2
      end)
      assert.same({ "1", "2" }, { done[1].output, done[2].output })
    end)
  end)

  describe("preview", function()
    it("uses the tool's format_preview with the input and max_length", function()
      local seen_len
      tools.register(def("pv", {
        format_preview = function(input, max_length)
          seen_len = max_length
          return "q=" .. input.query
        end,
      }))
      assert.equals("q=hello", tools.preview("pv", { query = "hello" }, 42))
      assert.equals(42, seen_len)
    end)

    it("falls back to the generic summary when format_preview fails or is absent", function()
      tools.register(def("pv_bad", {
        format_preview = function()
          error("no")
        end,
      }))
      assert.equals('a="x"', tools.preview("pv_bad", { a = "x" }, 40))
      assert.equals('a="x", n=2', tools.preview("not_registered", { n = 2, a = "x" }, 40))
    end)

    it("returns a single line", function()
      tools.register(def("pv_nl", {
        format_preview = function()
          return "line1\nline2"
        end,
      }))
      local out = tools.preview("pv_nl", {}, 40)
      assert.is_nil(out:find("\n"))
      assert.matches("line1.+line2", out)
    end)
  end)
end)
