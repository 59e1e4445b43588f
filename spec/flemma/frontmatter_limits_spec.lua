-- Frontmatter from an untrusted chat file runs in an isolated interpreter with limits
-- that hold by construction (issue 11 §8-10): each attack below ends with a clear
-- error, and Neovim stays responsive (a timer scheduled before the evaluation fires
-- right after it). The attacks run in a child Neovim, so that a regression fails
-- (the child times out) instead of freezing the suite.
local helpers = require("spec.support.helpers")
local frontmatter = require("flemma.chat.frontmatter")

local TIME = "ran longer than 35 ms and was stopped (an endless loop?)"

-- Runs each code in a child Neovim; returns { err, timer_fired } per code.
local function attack(codes, calls)
  local res = helpers.run_nvim({
    rtp = helpers.root,
    timeout = 60000,
    lua = ([=[
      require("flemma").setup({})
      local fm = require("flemma.chat.frontmatter")
      local out = {}
      local function probe(fn)
        local fired = false
        local timer = vim.uv.new_timer()
        timer:start(0, 0, function()
          fired = true
        end)
        local ok, err = pcall(fn)
        local responsive = vim.wait(5000, function()
          return fired
        end, 1)
        timer:close()
        return (ok and "" or tostring(err)), responsive
      end
      for _, code in ipairs(vim.json.decode(%q)) do
        local err, responsive = probe(function()
          local opts, e = fm.evaluate(code, "lua", 1)
          if opts and %s then
            opts.auto_approve("bash", { command = "ls" }, {})
          end
          assert(not e, e)
        end)
        out[#out + 1] = { err = err, responsive = responsive }
      end
      io.stdout:write(vim.json.encode(out))
    ]=]):format(vim.json.encode(codes), calls and "true" or "false"),
  })
  assert.equals(0, res.code, res.stderr)
  return vim.json.decode(res.stdout)
end

local function check(results, expected)
  assert.equals(#expected, #results)
  for i, want in ipairs(expected) do
    assert.is_true(results[i].responsive, "timer did not fire after attack " .. i)
    local err = results[i].err:gsub("^[^\n]-:%d+: ", "", 1) -- the assert() location
    if want:sub(1, 1) == "^" then
      assert.matches(want, err)
    else
      assert.equals(want, err)
    end
  end
end

describe("frontmatter limits", function()
  before_each(function()
    require("flemma").setup({})
  end)

  it("stops loops inside built-ins and backtracking patterns at the time limit", function()
    check(
      attack({
        "table.move({}, 1, 2^52, 1, {})",
        'local s = ("a"):rep(30)\nfor i = 1, 1e9 do s:find("^a*a*b") end',
        'local s = ("("):rep(3e5)\nlocal r = s:find("%b()")',
        'local s = ("a"):rep(2e4)\nlocal r = s:find("(.-)%1b")',
        'local s = ("a"):rep(3e5)\nfor w in s:gmatch("(.-)(.-)(.-)b") do end',
        'local t = {}\nfor i = 1, 2e3 do t[i] = ("x"):rep(i % 50) end\nwhile true do table.sort(t) end',
        'local f = ("%c"):rep(1000)\nwhile true do local d = os.date(f) end',
      }),
      {
        "frontmatter line 2: " .. TIME,
        "frontmatter line 3: " .. TIME,
        "frontmatter line 3: " .. TIME,
        "frontmatter line 3: " .. TIME,
        "frontmatter line 3: " .. TIME,
        "frontmatter line 4: " .. TIME,
        "frontmatter line 3: " .. TIME,
      }
    )
  end)

  it("stops error handlers, sort comparators and long string comparisons at the time limit (issue 23)", function()
    check(
      attack({
        "xpcall(function() while true do end end, function() while true do end end)",
        "xpcall(function() error('x') end, function() while true do end end)",
        "local function h(e) return select(2, xpcall(function() while true do end end, h)) end\nxpcall(function() error('x') end, h)",
        "xpcall(function() while true do end end, function() while true do pcall(function() while true do end end) end end)",
        "local t = {}\nfor i = 1, 100 do t[i] = i end\nxpcall(function() table.sort(t, function() while true do end end) end, function() while true do end end)",
        "local s = ('x'):rep(5e5)\nlocal t = {}\nfor i = 1, 3000 do t[i] = s end\ntable.sort(t, function(a, b) return a < b end)",
        "local e = setmetatable({}, { __tostring = function() while true do end end })\nxpcall(function() error(e) end, tostring)",
      }),
      {
        "frontmatter line 2: " .. TIME,
        "frontmatter line 2: " .. TIME,
        "frontmatter line 2: " .. TIME,
        "frontmatter line 2: " .. TIME,
        "frontmatter line 4: " .. TIME,
        "frontmatter line 5: " .. TIME,
        "frontmatter line 2: " .. TIME,
      }
    )
  end)

  it("refuses strings and tables past the memory limits", function()
    check(
      attack({
        'local s = ("x"):rep(6e7)',
        'local s = ("x"):rep(4e5)\nlocal t = s .. s .. s .. s',
        'local t = {}\nfor i = 1, 20 do t[i] = ("x"):rep(4e5) end\nlocal s = table.concat(t)',
        'local s = ("a"):rep(1e5)\nlocal r = s:gsub(".", ("%0"):rep(1e5))',
        'local t = {}\nfor i = 1, 1e7 do t["k" .. i] = true end',
        'local s = ("x"):rep(4e5)\nlocal n = 0\nwhile true do n = n + #(s .. n) end',
      }),
      {
        "frontmatter line 2: string.rep: the result would be 60000000 bytes, more than the 512 KB one string may hold",
        "^frontmatter line 3: needed %d+ bytes for one string or table, more than the 512 KB one may hold, and was stopped$",
        "frontmatter line 4: table.concat: the result would be more than 512 KB, the most one string may hold",
        "frontmatter line 3: string.gsub: the result would be more than 512 KB, the most one string may hold",
        "^frontmatter line 3: needed %d+ bytes for one string or table, more than the 512 KB one may hold, and was stopped$",
        "^frontmatter line 4: ",
      }
    )
  end)

  it("answers a huge tool name quickly, every time", function()
    local codes = {}
    for i = 1, 8 do
      codes[i] = 'flemma.opt.tools = { ("x"):rep(1e5) }'
    end
    codes[#codes + 1] = 'flemma.opt.tools = { ("x"):rep(2^20) }'
    local results = attack(codes)
    for i = 1, 8 do
      assert.is_true(results[i].responsive)
      assert.matches("^frontmatter line 2: unknown tool `xxxx+", results[i].err:gsub("^[^\n]-:%d+: ", "", 1))
      assert.is_true(#results[i].err < 2200, "the message is clipped")
    end
    check({ results[9] }, {
      "frontmatter line 2: string.rep: the result would be 1048576 bytes, more than the 512 KB one string may hold",
    })
  end)

  it("stops an auto_approve function at the time limit on each call", function()
    check(
      attack({ "flemma.opt.tools.auto_approve = function(name)\n  while true do end\nend" }, true),
      { "frontmatter line 3: " .. TIME }
    )
  end)

  it("gives an auto_approve function plain copies: no vim.NIL, no shared metatables", function()
    local nil_str, dict_mt = tostring(vim.NIL), getmetatable(vim.empty_dict())
    local opts = assert(frontmatter.evaluate(
      table.concat({
        "flemma.opt.tools.auto_approve = function(name, input)",
        "  local mt = getmetatable(input.obj)",
        "  if mt then mt.__index = function() return 'pwned' end end",
        "  return getmetatable(input.obj) == nil and input.none == nil and #input.list == 2",
        "    and input.list[2] == 'b' and type(input.obj) == 'table'",
        "end",
      }, "\n"),
      "lua",
      1
    ))
    assert.is_true(opts.auto_approve("bash", { obj = vim.empty_dict(), none = vim.NIL, list = { "a", "b" } }, {}))
    assert.equals(nil_str, tostring(vim.NIL))
    assert.equals(dict_mt, getmetatable(vim.empty_dict()))
    assert.is_nil(rawget(dict_mt or {}, "__index"))
  end)

  it("keeps the function in its interpreter: it cannot reach Neovim", function()
    local opts = assert(
      frontmatter.evaluate(
        "flemma.opt.tools.auto_approve = function() return type(vim) .. type(_G.vim) .. type(require) .. type(io) end",
        "lua",
        1
      )
    )
    assert.equals("nilnilnilnil", opts.auto_approve("bash", {}, {}))
  end)

  it("gives math.randomseed a generator of its own", function()
    math.randomseed(7)
    local a = { math.random(), math.random() }
    math.randomseed(7)
    local opts = assert(
      frontmatter.evaluate(
        "math.randomseed(1)\nlocal x = math.random()\nflemma.opt.max_tokens = math.random(100)",
        "lua",
        1
      )
    )
    assert.same(a, { math.random(), math.random() })
    local again = assert(
      frontmatter.evaluate(
        "math.randomseed(1)\nlocal x = math.random()\nflemma.opt.max_tokens = math.random(100)",
        "lua",
        1
      )
    )
    assert.equals(opts.parameters.max_tokens, again.parameters.max_tokens)
  end)

  it("frees the interpreter of a replaced evaluation: its function then refuses", function()
    local buf =
      helpers.buffer({ "```lua", "flemma.opt.tools.auto_approve = function() return true end", "```", "@You:", "hi" })
    local fn = frontmatter.get(buf).auto_approve
    assert.is_true(fn("bash", {}, {}))
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "more" })
    assert.is_true(frontmatter.get(buf).auto_approve("bash", {}, {}))
    local ok, err = pcall(fn, "bash", {}, {})
    assert.is_false(ok)
    assert.matches("belongs to a frontmatter that changed", err, 1, true)
    vim.cmd("silent! bwipeout! " .. buf)
  end)
end)
