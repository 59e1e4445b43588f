local helpers = require("spec.support.helpers")
local frontmatter = require("flemma.chat.frontmatter")

local function chat(first, code, rest)
  local lines = { first or "```lua" }
  vim.list_extend(lines, vim.split(code, "\n"))
  vim.list_extend(lines, rest or { "```", "@You:", "Go." })
  return helpers.buffer(lines)
end

-- Evaluates Lua code whose fence opens on buffer line 1; returns opts, err.
local function lua(code)
  return frontmatter.evaluate(code, "lua", 1)
end

local function err_of(code, lang)
  local opts, err = frontmatter.evaluate(code, lang or "lua", 1)
  assert.is_nil(opts)
  assert.is_string(err)
  return err
end

describe("flemma.chat.frontmatter", function()
  before_each(function()
    require("flemma").setup({})
  end)
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  describe("evaluate()", function()
    it("returns the defaults when nothing is set", function()
      local opts = assert(lua("local x = 1"))
      assert.same({ auto_approve_excluded = {}, parameters = {} }, opts)
    end)

    it("collects tools, auto_approve and parameters", function()
      local opts = assert(lua(table.concat({
        'flemma.opt.tools = { "bash", "read" }',
        'flemma.opt.tools.auto_approve = { "$readonly", "bash" }',
        'flemma.opt.thinking = "medium"',
        'flemma.opt.cache_retention = "long"',
        "flemma.opt.max_tokens = 8000",
        "flemma.opt.temperature = 0.3",
        "flemma.opt.anthropic.thinking_budget = 20000",
        'flemma.opt.openai.reasoning = "high"',
        "flemma.opt.vertex.thinking_budget = 4096",
      }, "\n")))
      assert.same({ "bash", "read" }, opts.tools)
      assert.same({ "$readonly", "bash" }, opts.auto_approve)
      assert.same({
        thinking = "medium",
        cache_retention = "long",
        max_tokens = 8000,
        temperature = 0.3,
        anthropic = { thinking_budget = 20000 },
        openai = { reasoning = "high" },
        vertex = { thinking_budget = 4096 },
      }, opts.parameters)
    end)

    it("offers string, table, math, os.time and os.date", function()
      local opts = assert(lua(table.concat({
        "local words = {}",
        'for w in string.gmatch("b a", "%a") do table.insert(words, w) end',
        "table.sort(words)",
        'if math.floor(2.5) == 2 and os.time() > 0 and #os.date("%Y") == 4 and ("ab"):upper() == "AB" then',
        '  flemma.opt.tools = words[1] == "a" and { "read" } or { "bash" }',
        "end",
      }, "\n")))
      assert.same({ "read" }, opts.tools)
    end)

    describe("errors", function()
      it("names the buffer line of a syntax error", function()
        local _, err = frontmatter.evaluate("local x = 1\nlocal = 2", "lua", 4)
        assert.equals("frontmatter line 6: '<name>' expected near '='", err)
      end)

      it("names the buffer line of a runtime error", function()
        local _, err = frontmatter.evaluate("local x = {}\n\nlocal y = x.field.deeper", "lua", 1)
        assert.equals("frontmatter line 4: attempt to index field 'field' (a nil value)", err)
      end)

      it("names the line of an error() call", function()
        local _, err = frontmatter.evaluate("\nerror('nope')", "lua", 1)
        assert.equals("frontmatter line 3: nope", err)
      end)

      it("names the line of a bad flemma.opt assignment", function()
        local _, err = frontmatter.evaluate('local a = 1\nflemma.opt.tools = { "bash", "raed" }', "lua", 10)
        assert.equals("frontmatter line 12: unknown tool `raed` in flemma.opt.tools; did you mean `read`?", err)
      end)

      it("does not call __tostring of a table raised as an error", function()
        local err = err_of("error(setmetatable({}, { __tostring = function() while true do end end }))")
        assert.equals("frontmatter line 1: a table was raised as an error", err)
      end)

      it("refuses an unknown frontmatter language", function()
        assert.matches('unsupported frontmatter language "yaml"; use lua or json', err_of("a: 1", "yaml"), 1, true)
      end)
    end)

    describe("limits", function()
      local loops = {
        { "an endless loop", "local i = 0\nwhile true do i = i + 1 end", 3 },
        { "an endless loop in pcall", "while true do pcall(function() while true do end end) end", 2 },
        { "an endless loop in xpcall", "xpcall(function() while true do end end, function(e) return e end)", 2 },
        { "an endless loop with repeat", "repeat local t = {} until false", 2 },
        { "endless recursion through a for loop", "local function f() for i = 1, 1e12 do end f() end\nf()", 2 },
      }
      for _, case in ipairs(loops) do
        it("stops " .. case[1] .. " with a clear error", function()
          local err = err_of(case[2])
          assert.equals(
            ("frontmatter line %d: ran longer than 35 ms and was stopped (an endless loop?)"):format(case[3]),
            err
          )
        end)
      end

      it("stops code that holds on to too much memory", function()
        local err = err_of("local s = ('x'):rep(2^30)")
        assert.equals(
          "frontmatter line 2: string.rep: the result would be 1073741824 bytes, more than the 512 KB one string may hold",
          err
        )
        err = err_of("local t = {}\nfor i = 1, 1e6 do t[i] = i end")
        assert.equals(
          "frontmatter line 3: needed 1048576 bytes for one string or table, more than the 512 KB one may hold, and was stopped",
          err
        )
        -- (the 64 MB limit in all is covered by the native suite: filling 64 MB of fresh
        -- pages takes longer than the time limit on slow virtual machines)
        assert.is_table((frontmatter.evaluate("local s = ('x'):rep(10)", "lua", 1)))
      end)

      -- Pattern matching is ours and counts its steps against the deadline: these would
      -- freeze Neovim for hours in Lua's own matcher. Run in a child Neovim so that a
      -- regression fails, not hangs.
      it("stops patterns that would backtrack for hours at the time limit, as methods and through string", function()
        local res = helpers.run_nvim({
          rtp = helpers.root,
          timeout = 20000,
          lua = [=[
            local fm = require("flemma.chat.frontmatter")
            local out = {}
            for _, code in ipairs({
              'local s = ("a"):rep(30)\nlocal r = s:find(("a*"):rep(30) .. "b")',
              'local s = ("a"):rep(30)\nlocal r = string.match(s, ("a-"):rep(30) .. "b")',
              'local s = ("a"):rep(100000)\nfor w in s:gmatch(".-.-.-b") do end',
              'local s = ("a"):rep(100000)\nlocal r = s:gsub("(.-)(.-)(.-)b", "")',
            }) do
              require("flemma.core.isolate").begin_action() -- each its own action (a key press)
              local _, err = fm.evaluate(code, "lua", 1)
              out[#out + 1] = tostring(err)
            end
            io.stdout:write(table.concat(out, "\n"))
          ]=],
        })
        assert.equals(0, res.code, res.stderr)
        local errs = vim.split(res.stdout, "\n")
        assert.equals(4, #errs, res.stdout)
        for i = 1, 4 do
          assert.equals("frontmatter line 3: ran longer than 35 ms and was stopped (an endless loop?)", errs[i])
        end
      end)

      it("lets ordinary patterns and plain finds through", function()
        local opts = assert(lua(table.concat({
          'assert(("git status --short"):match("^git%s+(%w+)") == "status")',
          'assert(("a.b"):find(".", 1, true) == 2)',
          'assert(select(1, ("x=1,y=2"):gsub("(%w+)=(%w+)", "%2=%1")) == "1=x,2=y")',
          'assert(("[tag]"):match("%[(.-)%]") == "tag")',
          'assert(("THE (quick) fox"):find("%f[%a]%a+%f[%A]") == 1)',
          'local n = 0; for _ in ("a b c"):gmatch("%a") do n = n + 1 end',
          "flemma.opt.max_tokens = n",
        }, "\n")))
        assert.equals(3, opts.parameters.max_tokens)
        assert.equals(string, getmetatable("").__index)
      end)

      it("allows a frontmatter that does real work within the budget", function()
        local opts = assert(lua("local s = 0\nfor i = 1, 10000 do s = s + i end\nflemma.opt.max_tokens = s"))
        assert.equals(50005000, opts.parameters.max_tokens)
      end)

      it("removes its hook afterwards", function()
        err_of("while true do end")
        assert.is_nil(debug.gethook())
        local n = 0
        for i = 1, 3000000 do
          n = n + i
        end
        assert.is_true(n > 0)
      end)
    end)

    describe("restricted environment", function()
      local escapes = {
        { "io", "io.open('/etc/passwd')" },
        { "os.execute", "os.execute('touch /tmp/flemma-pwned')" },
        { "os.getenv", "return os.getenv('HOME')" },
        { "os.remove", "os.remove('/tmp/x')" },
        { "require", "require('os')" },
        { "vim.api", "vim.api.nvim_buf_set_lines(0, 0, -1, false, {})" },
        { "vim.fn", "vim.fn.system('true')" },
        { "load", "load('return 1')()" },
        { "loadstring", "loadstring('return 1')()" },
        { "dofile", "dofile('/etc/passwd')" },
        { "loadfile", "loadfile('/etc/passwd')" },
        { "setfenv", "setfenv(1, {})" },
        { "getfenv", "getfenv(0).vim.api.nvim_get_current_buf()" },
        { "debug", "debug.getregistry()" },
        { "coroutine", "coroutine.create(function() end)" },
        { "collectgarbage", "collectgarbage('stop')" },
        { "string.dump", "string.dump(function() end)" },
        { "package", "package.loaded.os.execute('true')" },
        { "rawset", "rawset(flemma.opt, 'x', 1)" },
        { "jit", "jit.off()" },
        { "print", "print('hello')" },
      }
      for _, case in ipairs(escapes) do
        it("has no " .. case[1], function()
          local err = err_of(case[2])
          assert.matches("^frontmatter line 2: attempt to ", err)
        end)
      end

      it("gives copies of string, table and math, leaving the real ones untouched", function()
        local rep, insert, floor = string.rep, table.insert, math.floor
        assert(lua("string.rep = nil\ntable.insert = nil\nmath.floor = nil\nstring.evil = true"))
        assert.equals(rep, string.rep)
        assert.equals(insert, table.insert)
        assert.equals(floor, math.floor)
        assert.is_nil(string.evil) -- luacheck: ignore 143 (the field the isolate's code tried to add)
      end)

      it("lets strings use methods but hides the real string table behind getmetatable", function()
        local opts = assert(lua(table.concat({
          'assert(("abc"):rep(2) == "abcabc")',
          'local mt = getmetatable("")',
          "assert(mt.__index == string)",
          "mt.__index.rep = function() return 'pwned' end",
          "mt.__index = { upper = function() return 'pwned' end }",
          'flemma.opt.max_tokens = #("x"):rep(3)',
        }, "\n")))
        assert.equals(3, opts.parameters.max_tokens)
        assert.equals("abcabc", ("abc"):rep(2))
        assert.equals("AB", ("ab"):upper())
        assert.equals("table", type(getmetatable("").__index))
        assert.equals(string, getmetatable("").__index)
      end)

      it("cannot reach the real globals through _G", function()
        local err = err_of("_G.vim.api.nvim_get_current_buf()")
        assert.matches("attempt to index field 'vim'", err, 1, true)
      end)

      it("protects the metatables of flemma.opt", function()
        assert.matches("cannot change a protected metatable", err_of("setmetatable(flemma.opt, {})"), 1, true)
        assert.is_table(lua("assert(getmetatable(flemma.opt) == 'flemma.opt')"))
        assert.matches(
          "cannot change a protected metatable",
          err_of("setmetatable(flemma.opt.tools, { __index = function() end })"),
          1,
          true
        )
      end)

      it("refuses precompiled bytecode", function()
        local code = string.dump(function()
          return 1
        end)
        local _, err = frontmatter.evaluate(code, "lua", 1)
        assert.equals("frontmatter line 2: precompiled chunks are not accepted", err)
      end)

      it("leaves no trace on disk from os.execute attempts", function()
        local dir = helpers.tmpdir()
        err_of(("os.execute('touch %s/pwned')"):format(dir))
        assert.is_nil(vim.uv.fs_stat(dir .. "/pwned"))
      end)
    end)

    describe("json", function()
      it("sets the same options as Lua", function()
        local code = table.concat({
          "{",
          '  "tools": ["bash", "read"],',
          '  "auto_approve": ["$readonly", "bash"],',
          '  "thinking": "medium",',
          '  "cache_retention": "long",',
          '  "max_tokens": 8000,',
          '  "temperature": 0.3,',
          '  "anthropic": { "thinking_budget": 20000 },',
          '  "openai": { "reasoning": "high" },',
          '  "vertex": { "thinking_budget": 4096 }',
          "}",
        }, "\n")
        local from_json = assert(frontmatter.evaluate(code, "json", 1))
        local from_lua = assert(lua(table.concat({
          'flemma.opt.tools = { "bash", "read" }',
          'flemma.opt.tools.auto_approve = { "$readonly", "bash" }',
          'flemma.opt.thinking = "medium"',
          'flemma.opt.cache_retention = "long"',
          "flemma.opt.max_tokens = 8000",
          "flemma.opt.temperature = 0.3",
          "flemma.opt.anthropic.thinking_budget = 20000",
          'flemma.opt.openai.reasoning = "high"',
          "flemma.opt.vertex.thinking_budget = 4096",
        }, "\n")))
        assert.same(from_lua, from_json)
      end)

      local bad = {
        {
          '{\n  "tools": ["bash"],\n  "thinking": "huge"\n}',
          'frontmatter line 4: `thinking` should be "minimal", "low", "medium", "high", "max", false, or a token budget, not "huge"',
        },
        { '{\n  "tols": ["bash"]\n}', "frontmatter line 3: unknown key `tols`; did you mean `tools`?" },
        { '{\n  "tools": ["bsh"]\n}', "frontmatter line 3: unknown tool `bsh` in tools; did you mean `bash`?" },
        {
          '{\n  "auto_approve": ["$defualt"]\n}',
          "frontmatter line 3: unknown preset `$defualt`; did you mean `$default`? in auto_approve",
        },
        {
          '{\n  "max_tokens": null\n}',
          "frontmatter line 3: `max_tokens` is null; remove the key to keep the default",
        },
        -- Infinity cannot even be read: JSON numbers that overflow are refused.
        { '{\n  "max_tokens": 1e999\n}', "frontmatter line 2: invalid JSON: number overflow parsing '1e999'" },
        {
          '{\n  "providers": { "anthropic": { "endpoint": "http://evil" } }\n}',
          "frontmatter line 3: `providers`: transport settings",
        },
        { '{ "tools": [', "frontmatter line 2: invalid JSON" },
        { '["bash"]', "frontmatter line 2: JSON frontmatter should be an object" },
      }
      for _, case in ipairs(bad) do
        it("reports " .. case[2], function()
          local _, err = frontmatter.evaluate(case[1], "json", 1)
          assert.is_string(err)
          assert.equals(case[2], err:sub(1, #case[2]))
        end)
      end
    end)
  end)

  describe("get()", function()
    it("evaluates the buffer's Lua frontmatter", function()
      local buf = chat("```lua", 'flemma.opt.tools = { "read" }')
      local opts = assert(frontmatter.get(buf))
      assert.same({ "read" }, opts.tools)
    end)

    it("evaluates the buffer's JSON frontmatter", function()
      local buf = chat("```json", '{ "tools": ["read"], "max_tokens": 100 }')
      local opts = assert(frontmatter.get(buf))
      assert.same({ "read" }, opts.tools)
      assert.equals(100, opts.parameters.max_tokens)
    end)

    it("returns the defaults for a buffer without frontmatter", function()
      local buf = helpers.buffer({ "@You:", "```lua", "flemma.opt.tools = {}", "```" })
      assert.same({ auto_approve_excluded = {}, parameters = {} }, frontmatter.get(buf))
    end)

    it("names the buffer line of an error", function()
      local buf = chat("```lua", 'local ok = true\nflemma.opt.tools:append("calculater")')
      local opts, err = frontmatter.get(buf)
      assert.is_nil(opts)
      assert.equals(
        "frontmatter line 3: unknown tool `calculater` in flemma.opt.tools; did you mean `calculator`?",
        err
      )
    end)

    it("caches by b:changedtick and re-evaluates after an edit", function()
      local buf = chat("```lua", "flemma.opt.tools.auto_approve = function() return true end")
      local a = frontmatter.get(buf).auto_approve
      local b = frontmatter.get(buf).auto_approve
      assert.equals(a, b) -- same closure: evaluated once
      vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "more text" })
      local c = frontmatter.get(buf).auto_approve
      assert.are_not.equal(a, c)
    end)

    it("starts each evaluation from the defaults", function()
      local buf = chat("```lua", 'flemma.opt.tools:remove("bash")\nflemma.opt.thinking = "high"')
      local first = frontmatter.get(buf)
      assert.is_false(vim.tbl_contains(first.tools, "bash"))
      vim.api.nvim_buf_set_lines(buf, 1, 3, false, { 'flemma.opt.tools:remove("read")' })
      local second = frontmatter.get(buf)
      assert.is_true(vim.tbl_contains(second.tools, "bash"))
      assert.is_false(vim.tbl_contains(second.tools, "read"))
      assert.is_nil(second.parameters.thinking)
    end)

    it("returns copies that callers cannot use to change the cache", function()
      local buf = chat("```lua", 'flemma.opt.tools = { "read" }')
      frontmatter.get(buf).tools[1] = "bash"
      assert.same({ "read" }, frontmatter.get(buf).tools)
    end)

    it("reads the frontmatter without flemma.document (fallback extractor)", function()
      -- A copy of the plugin without document.lua: the small extractor takes over. The
      -- native binding reads its declarations from the header, shipped with the plugin.
      local dir = helpers.tmpdir()
      vim.fn.system({ "cp", "-r", helpers.root .. "/lua", dir })
      vim.fn.mkdir(dir .. "/native/include/flemma", "p")
      vim.fn.system({ "cp", helpers.root .. "/native/include/flemma/flemma.h", dir .. "/native/include/flemma/" })
      os.remove(dir .. "/lua/flemma/document.lua")
      os.remove(dir .. "/lua/flemma/chat/document.lua")
      local out = dir .. "/out.txt"
      local res = helpers.run_nvim({
        rtp = dir,
        lua = ([=[
          vim.g.flemma_library_path = %q
          package.path = %q .. "/lua/?.lua;" .. %q .. "/lua/?/init.lua;" .. package.path
          local fm = require("flemma.chat.frontmatter")
          local results = { tostring(pcall(require, "flemma.chat.document")) }
          local function try(lines)
            local buf = vim.api.nvim_create_buf(true, false)
            vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
            local opts, err = fm.get(buf)
            table.insert(results, opts and vim.inspect(opts.tools) or err)
          end
          try({ "````lua", "local s = [[", "```", "]]", 'flemma.opt.tools = { "read" }', "````", "@You:", "hi" })
          try({ "```lua", 'flemma.opt.tools = { "read" }' })
          try({ "```json", '{ "tools": ["edit"] }', "```" })
          try({ "@You:", "```lua", "flemma.opt.tools = {}", "```" })
          vim.fn.writefile(results, %q)
        ]=]):format(require("flemma.core.native").library_path(), dir, dir, out),
      })
      assert.equals(0, res.code, res.stderr)
      assert.same({
        "false",
        '{ "read" }',
        "frontmatter line 1: the ```lua block is not closed",
        '{ "edit" }',
        "nil",
      }, vim.fn.readfile(out))
    end)
  end)

  describe("parameters()", function()
    it("merges config.parameters with the buffer's overrides", function()
      require("flemma").setup({ parameters = { max_tokens = 1000, temperature = 0.5 } })
      local buf = chat("```lua", "flemma.opt.max_tokens = 8000")
      local p = frontmatter.parameters(buf, "anthropic")
      assert.equals(8000, p.max_tokens)
      assert.equals(0.5, p.temperature)
      assert.equals("short", p.cache_retention)
      assert.equals(600, p.timeout)
    end)

    it("lets provider-specific values win over the general one", function()
      local buf = chat(
        "```lua",
        'flemma.opt.thinking = "low"\nflemma.opt.anthropic.thinking_budget = 20000\nflemma.opt.openai.reasoning = "high"'
      )
      assert.equals(20000, frontmatter.parameters(buf, "anthropic").thinking)
      assert.equals("high", frontmatter.parameters(buf, "openai").thinking)
      assert.equals("low", frontmatter.parameters(buf, "vertex").thinking)
      assert.equals(20000, frontmatter.parameters(buf, "anthropic").anthropic.thinking_budget)
    end)

    it("keeps config provider-specific values unless the buffer overrides them", function()
      require("flemma").setup({ parameters = { vertex = { thinking_budget = 512, project_id = "p" } } })
      local plain = chat("```lua", "-- nothing")
      local p = frontmatter.parameters(plain, "vertex")
      assert.equals(512, p.thinking)
      assert.equals("p", p.vertex.project_id)
      local buf = chat("```lua", "flemma.opt.vertex.thinking_budget = 4096")
      p = frontmatter.parameters(buf, "vertex")
      assert.equals(4096, p.thinking)
      assert.equals("p", p.vertex.project_id)
      assert.equals("global", p.vertex.location)
    end)

    it("returns the config's parameters without a buffer", function()
      require("flemma").setup({ parameters = { max_tokens = 42 } })
      assert.equals(42, frontmatter.parameters(nil, "anthropic").max_tokens)
    end)
  end)
end)
