-- The smelt-style tool API (`:help flemma-tools-api`): call(), middleware(), register
-- handles, default_summary() and input normalization, through the public functions and
-- through a real chat buffer (real <C-]>, real bash processes, real files).
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local send = require("flemma.cycle.send")

local press, text = helpers.press, helpers.text

local function def(name, extra)
  local d = {
    name = name,
    description = "test tool " .. name,
    input_schema = { type = "object", properties = {} },
  }
  for k, v in pairs(extra or {}) do
    d[k] = v
  end
  return d
end

local function chat(uses)
  local lines = { "@You:", "Do things.", "", "@Assistant:", "On it.", "" }
  for i, u in ipairs(uses) do
    if i > 1 then
      lines[#lines + 1] = ""
    end
    vim.list_extend(
      lines,
      { ("**Tool Use:** `%s` (`%s`)"):format(u[1], u[2]), "", "```json", vim.json.encode(u[3]), "```" }
    )
  end
  local buf = helpers.edit(helpers.tmpdir() .. "/api.chat", lines)
  assert.equals("chat", vim.bo[buf].filetype)
  return buf
end

local function wait_text(buf, pattern, timeout)
  helpers.wait_for(function()
    return text(buf):find(pattern, 1, true) ~= nil
  end, timeout or 8000, "buffer never contained: " .. pattern .. "\n--- buffer:\n" .. text(buf))
end

local function line_of(buf, s)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == s then
      return i
    end
  end
end

local function run(use)
  local got
  tools.execute(nil, use, function(res)
    got = res
  end)
  helpers.wait_for(function()
    return got ~= nil
  end, 8000)
  return got
end

local function setup(opts)
  require("flemma").setup(vim.tbl_deep_extend("force", {
    tools = { autopilot = { enabled = false }, auto_approve = { "$default" } },
  }, opts or {}))
end

describe("flemma.tools API", function()
  local handles
  before_each(function()
    setup()
    handles = {}
  end)
  after_each(function()
    for _, h in ipairs(handles) do
      h:remove()
    end
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  describe("register, list, unregister", function()
    it("register returns the names with a :remove() that unregisters them", function()
      local h = tools.register({ def("zz_b"), def("zz_a") })
      assert.equals("zz_b", h[1])
      assert.equals("zz_a", h[2])
      assert.truthy(vim.tbl_contains(tools.list(), "zz_a"))
      local list = tools.list()
      local sorted = vim.deepcopy(list)
      table.sort(sorted)
      assert.same(sorted, list)
      assert.is_true(h:remove())
      assert.is_nil(tools.get("zz_a"))
      assert.is_nil(tools.get("zz_b"))
      assert.is_false(h:remove())
    end)

    it(":remove() leaves a tool registered again later under the same name", function()
      local h = tools.register(def("zz_c"))
      tools.register(def("zz_c", { description = "the second one" }))
      assert.is_false(h:remove())
      assert.equals("the second one", tools.get("zz_c").description)
      assert.is_true(tools.unregister("zz_c"))
      assert.is_false(tools.unregister("zz_c"))
    end)
  end)

  describe("default_summary", function()
    it("picks questions, then pattern (with its path), then the first non-empty field", function()
      local cwd = vim.fs.normalize(vim.fn.getcwd())
      assert.equals("2 questions", tools.default_summary({ questions = { {}, {} }, command = "ls" }))
      assert.equals("1 question", tools.default_summary({ questions = { {} } }))
      assert.equals("TODO in src/a.lua", tools.default_summary({ pattern = "TODO", path = cwd .. "/src/a.lua" }))
      assert.equals("TODO", tools.default_summary({ pattern = "TODO" }))
      assert.equals("make", tools.default_summary({ command = "make", path = "x" }))
      assert.equals("a.txt", tools.default_summary({ command = "", file_path = "a.txt", url = "u" }))
      assert.equals("http://x", tools.default_summary({ url = "http://x", name = "n" }))
      assert.equals("7", tools.default_summary({ id = 7 }))
      assert.equals("", tools.default_summary({ other = "x" }))
      assert.equals("", tools.default_summary(nil))
    end)

    it("is the generic preview of a tool without format_preview", function()
      table.insert(handles, tools.register(def("zz_plain")))
      assert.equals("https://example.org, n=2", tools.preview("zz_plain", { url = "https://example.org", n = 2 }, 80))
      assert.equals("https://example.org", tools.preview("zz_plain", { url = "https://example.org" }, 80))
      assert.equals('a="x", n=2', tools.preview("zz_plain", { n = 2, a = "x" }, 80))
    end)
  end)

  describe("middleware", function()
    it("runs before hooks in order, each seeing the previous replacement; after replaces the result", function()
      table.insert(
        handles,
        tools.register(def("zz_echo", {
          input_schema = { type = "object", properties = { text = { type = "string" } } },
          execute = function(input)
            return { success = true, output = "echo " .. input.text }
          end,
        }))
      )
      local seen = {}
      table.insert(
        handles,
        tools.middleware("", {
          before = function(args, ctx)
            seen[#seen + 1] = "all:" .. args.text .. ":" .. ctx.tool_name
            return { text = args.text .. "+1" }
          end,
        })
      )
      table.insert(
        handles,
        tools.middleware("zz_echo", {
          before = function(args)
            seen[#seen + 1] = "echo:" .. args.text
            return { text = args.text .. "+2" }
          end,
          after = function(_, _, result)
            return { content = result.content .. " (checked)", is_error = false }
          end,
        })
      )
      local res = run({ id = "t1", name = "zz_echo", input = { text = "x" } })
      assert.same({ "all:x:zz_echo", "echo:x+1" }, seen)
      assert.is_true(res.success)
      assert.equals("echo x+1+2 (checked)", res.output)
    end)

    it("a deny from before is an error result and the tool never runs", function()
      local ran = false
      table.insert(
        handles,
        tools.register(def("zz_never", {
          execute = function()
            ran = true
            return { success = true, output = "ran" }
          end,
        }))
      )
      local mw = tools.middleware("zz_never", {
        before = function()
          return { deny = true, reason = "not today" }
        end,
      })
      local res = run({ id = "t2", name = "zz_never", input = {} })
      assert.is_false(res.success)
      assert.equals("not today", res.error)
      assert.is_false(ran)
      assert.is_true(mw:remove())
      assert.is_false(mw:remove())
      res = run({ id = "t3", name = "zz_never", input = {} })
      assert.is_true(res.success)
      assert.is_true(ran)
    end)

    it("after fires for the async bash tool through <C-]>, and a denied call runs no process", function()
      local dir = helpers.tmpdir()
      setup({ tools = { auto_approve = { "$default", "bash" } } })
      local after_seen
      table.insert(
        handles,
        tools.middleware("bash", {
          before = function(args)
            if args.command:find("forbidden", 1, true) then
              return { deny = true, reason = "forbidden by middleware" }
            end
          end,
          after = function(args, _, result)
            after_seen = args.command
            return { content = "REVIEWED: " .. vim.trim(result.content), is_error = false }
          end,
        })
      )
      local buf = chat({
        { "bash", "toolu_01", { command = "echo real-output > " .. dir .. "/made.txt; cat " .. dir .. "/made.txt" } },
        { "bash", "toolu_02", { command = "touch " .. dir .. "/forbidden.txt" } },
      })
      press("<C-]>")
      wait_text(buf, "REVIEWED: real-output")
      wait_text(buf, "forbidden by middleware")
      assert.truthy(text(buf):find("**Tool Result:** `toolu_02` (error)", 1, true), text(buf))
      assert.equals(1, vim.fn.filereadable(dir .. "/made.txt"))
      assert.equals(0, vim.fn.filereadable(dir .. "/forbidden.txt"))
      assert.truthy(after_seen:find("made.txt", 1, true))
    end)
  end)

  describe("call", function()
    it("a sync tool calls an approved tool and gets { content, is_error, metadata }", function()
      local got
      table.insert(
        handles,
        tools.register(def("zz_outer", {
          execute = function()
            got = tools.call("calculator", { expression = "6 * 7" })
            return { success = true, output = "outer got " .. got.content }
          end,
        }))
      )
      local res = run({ id = "p1", name = "zz_outer", input = {} })
      assert.is_true(res.success, res.error)
      assert.equals(false, got.is_error)
      assert.equals("p1.1", got.metadata.call_id)
      assert.truthy(res.output:find("outer got 42", 1, true), res.output)
      -- Grouped under the parent's result.
      assert.truthy(res.output:find("[nested call `calculator` (`p1.1`)]\n42", 1, true), res.output)
    end)

    it("a denied nested call is an error result, and call() outside execute wants a callback", function()
      require("flemma.tools.approval").register("spec:deny-calc", {
        priority = 300,
        resolve = function(name)
          return name == "calculator" and "deny" or nil
        end,
      })
      local got
      table.insert(
        handles,
        tools.register(def("zz_outer2", {
          async = true,
          execute = function(_, _, cb)
            got = tools.call("calculator", { expression = "1+1" })
            cb({ success = true, output = "done" })
          end,
        }))
      )
      local res = run({ id = "p2", name = "zz_outer2", input = {} })
      require("flemma.tools.approval").unregister("spec:deny-calc")
      assert.is_true(got.is_error)
      assert.equals("denied", got.metadata.status)
      assert.truthy(res.output:find("(error)]", 1, true))
      assert.has_error(function()
        tools.call("calculator", { expression = "1" })
      end)
    end)

    it("a nested call lands on pending under its parent, the parent waits, and approval runs it", function()
      local dir = helpers.tmpdir()
      table.insert(
        handles,
        tools.register(def("zz_deploy", {
          execute = function()
            local r = tools.call("bash", { command = "echo nested-ran > " .. dir .. "/nested.txt; echo from-bash" })
            return { success = true, output = "parent saw: " .. vim.trim(r.content) }
          end,
        }))
      )
      setup({ tools = { auto_approve = { "$default", "zz_deploy" } } })
      local buf = chat({ { "zz_deploy", "toolu_09", vim.empty_dict() } })
      press("<C-]>")
      wait_text(buf, "**Tool Result:** `toolu_09.1`\n\n```flemma:tool status=pending\n```")
      local t = text(buf)
      -- The nested placeholder sits right under the parent's (still running) one.
      assert.truthy(
        t:find(
          "**Tool Result:** `toolu_09`\n\n```flemma:tool status=approved\n```\n\n**Tool Result:** `toolu_09.1`",
          1,
          true
        ),
        t
      )
      vim.wait(300)
      assert.equals(0, vim.fn.filereadable(dir .. "/nested.txt"))
      assert.is_nil(text(buf):find("parent saw", 1, true))
      -- <C-]> while it waits points at it rather than doing anything.
      press("<C-]>")
      assert.equals(0, vim.fn.filereadable(dir .. "/nested.txt"))
      vim.api.nvim_win_set_cursor(0, { line_of(buf, "**Tool Result:** `toolu_09.1`"), 0 })
      vim.cmd("Flemma tool:approve")
      wait_text(buf, "parent saw: from-bash")
      assert.equals("nested-ran\n", helpers.read_file(dir .. "/nested.txt"))
      t = text(buf)
      assert.truthy(t:find("[nested call `bash` (`toolu_09.1`)]\nfrom-bash", 1, true), t)
      assert.is_nil(t:find("**Tool Result:** `toolu_09.1`", 1, true), t)
      assert.is_nil(t:find("flemma:tool", 1, true), t)
    end)

    it("a nested call the user rejects gives the parent an error and runs nothing", function()
      local dir = helpers.tmpdir()
      table.insert(
        handles,
        tools.register(def("zz_deploy2", {
          execute = function()
            local r = tools.call("bash", { command = "touch " .. dir .. "/no.txt" })
            return { success = true, output = ("rejected=%s %s"):format(tostring(r.is_error), r.content) }
          end,
        }))
      )
      setup({ tools = { auto_approve = { "$default", "zz_deploy2" } } })
      local buf = chat({ { "zz_deploy2", "toolu_10", vim.empty_dict() } })
      press("<C-]>")
      wait_text(buf, "**Tool Result:** `toolu_10.1`")
      vim.api.nvim_win_set_cursor(0, { line_of(buf, "**Tool Result:** `toolu_10.1`"), 0 })
      vim.cmd("Flemma tool:reject not that")
      wait_text(buf, "rejected=true not that")
      assert.equals(0, vim.fn.filereadable(dir .. "/no.txt"))
    end)
  end)

  describe("input normalization", function()
    it("accepts { params = {...} } and a direct input naming the tool", function()
      local h = tools.register(def("zz_norm", {
        input_schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
        execute = function(input)
          return { success = true, output = input.text }
        end,
      }))
      table.insert(handles, h)
      assert.equals("a", run({ id = "n1", name = "zz_norm", input = { params = { text = "a" } } }).output)
      assert.equals(
        "b",
        run({ id = "n2", name = "zz_norm", input = { name = "zz_norm", params = { text = "b" } } }).output
      )
      assert.equals("c", run({ id = "n3", name = "zz_norm", input = { name = "zz_norm", text = "c" } }).output)
      assert.equals("d", run({ id = "n4", name = "zz_norm", input = { text = "d" } }).output)
    end)

    it("refuses more than 1,000 parameters counted at any depth", function()
      local ran = false
      table.insert(
        handles,
        tools.register(def("zz_many", {
          execute = function()
            ran = true
            return { success = true, output = "" }
          end,
        }))
      )
      local inner = {}
      for i = 1, 999 do
        inner["k" .. i] = i
      end
      local res = run({ id = "m1", name = "zz_many", input = { deep = { deeper = inner } } })
      assert.is_false(res.success)
      assert.truthy(res.error:find("more than 1000 parameters", 1, true), res.error)
      assert.is_false(ran)
      inner.k999 = nil
      res = run({ id = "m2", name = "zz_many", input = { deep = { deeper = inner } } })
      assert.is_true(res.success)
    end)
  end)
end)
