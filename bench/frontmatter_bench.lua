-- Frontmatter in its isolated interpreter (issue 11 §8-10): how long the worst of the
-- attack list holds the main loop, how much the process grows running them, and what
-- a normal frontmatter evaluation costs.
local frontmatter = require("flemma.chat.frontmatter")

local ATTACKS = {
  "table.move({}, 1, 2^52, 1, {})",
  'local s = ("a"):rep(30)\nfor i = 1, 1e9 do s:find("^a*a*b") end',
  'local s = ("("):rep(3e5)\nlocal r = s:find("%b()")',
  'local s = ("a"):rep(2e4)\nlocal r = s:find("(.-)%1b")',
  'flemma.opt.tools = { ("x"):rep(1e5) }',
  'flemma.opt.tools = { ("x"):rep(2^20) }',
  'local s = ("x"):rep(4e5)\nlocal t = s .. s .. s .. s',
  'local s = ("x"):rep(6e7)\nlocal t = s .. s',
  'local t = {}\nfor i = 1, 20 do t[i] = ("x"):rep(4e5) end\nlocal s = table.concat(t)',
  'local s = ("a"):rep(1e5)\nlocal r = s:gsub(".", ("%0"):rep(1e5))',
  "while true do pcall(function() while true do end end) end",
  'local t = {}\nfor i = 1, 1e7 do t["k" .. i] = {} end',
  'local s = ("x"):rep(4e5)\nlocal n = 0\nwhile true do n = n + #(s .. n) end',
  -- issue 23: error handlers (which Lua 5.1 ran with hooks off), comparators, long
  -- string comparisons
  "xpcall(function() while true do end end, function() while true do end end)",
  "xpcall(function() error('x') end, function() while true do end end)",
  "local t = {}\nfor i = 1, 100 do t[i] = i end\nxpcall(function() table.sort(t, function() while true do end end) end, function() while true do end end)",
  "local s = ('x'):rep(5e5)\nlocal t = {}\nfor i = 1, 3000 do t[i] = s end\ntable.sort(t, function(a, b) return a < b end)",
}

local NORMAL = table.concat({
  'flemma.opt.tools = { "bash", "read", "write", "edit" }',
  'flemma.opt.tools.auto_approve:remove("write")',
  'flemma.opt.thinking = "medium"',
  "flemma.opt.max_tokens = 8000",
}, "\n")

local function status_kb(field)
  for line in io.lines("/proc/self/status") do
    local v = line:match("^" .. field .. ":%s+(%d+) kB")
    if v then
      return tonumber(v)
    end
  end
end

-- The scratch buffer of isolate_keypress_templates.
local templates_buf

local function ms(t0)
  return (vim.uv.hrtime() - t0) / 1e6
end

return {
  {
    name = "frontmatter_attack_worst",
    unit = "ms",
    target = 50,
    op = "<=",
    runs = 5,
    setup = function()
      require("flemma").setup({})
    end,
    run = function()
      local worst = 0
      for _, code in ipairs(ATTACKS) do
        require("flemma.core.isolate").begin_action() -- each attack is a key press of its own
        local t0 = vim.uv.hrtime()
        local opts, err = frontmatter.evaluate(code, "lua", 1)
        local t = ms(t0)
        assert(not opts and err, code)
        worst = math.max(worst, t)
      end
      return worst
    end,
  },
  {
    name = "frontmatter_attack_rss_growth",
    unit = "MB",
    target = 64,
    op = "<=",
    runs = 3,
    run = function()
      collectgarbage()
      -- Reset the peak (VmHWM) to the current size, then run every attack.
      local f = io.open("/proc/self/clear_refs", "w")
      if f then
        f:write("5")
        f:close()
      end
      local base = status_kb("VmRSS")
      for _, code in ipairs(ATTACKS) do
        require("flemma.core.isolate").begin_action()
        frontmatter.evaluate(code, "lua", 1)
      end
      return (status_kb("VmHWM") - base) / 1024
    end,
  },
  {
    name = "frontmatter_eval",
    unit = "ms",
    target = 1,
    op = "<=",
    runs = 9,
    run = function()
      local n = 50
      local t0 = vim.uv.hrtime()
      for _ = 1, n do
        assert(frontmatter.evaluate(NORMAL, "lua", 1))
      end
      return ms(t0) / n
    end,
  },
  {
    name = "frontmatter_auto_approve_call",
    unit = "ms",
    target = 0.2,
    op = "<=",
    runs = 9,
    run = function()
      local opts = assert(
        frontmatter.evaluate(
          'flemma.opt.tools.auto_approve = function(name, input) return name == "bash" and input.command:match("^git ") ~= nil end',
          "lua",
          1
        )
      )
      local n = 200
      local t0 = vim.uv.hrtime()
      for _ = 1, n do
        assert(opts.auto_approve("bash", { command = "git status" }, { bufnr = 1 }) == true)
      end
      return ms(t0) / n
    end,
  },
  {
    -- issue 23: 150 tool calls of one <C-]> asking an auto_approve function that
    -- loops forever held the loop 5.4-5.9 s (35 ms each); one key press shares 100 ms.
    name = "isolate_keypress_auto_approve",
    unit = "ms",
    target = 100,
    op = "<=",
    runs = 5,
    run = function()
      local opts =
        assert(frontmatter.evaluate("flemma.opt.tools.auto_approve = function() while true do end end", "lua", 1))
      require("flemma.core.isolate").begin_action()
      local t0 = vim.uv.hrtime()
      for i = 1, 150 do
        assert(not pcall(opts.auto_approve, "bash", { command = "ls " .. i }, { bufnr = 1 }))
      end
      local t = ms(t0)
      frontmatter.release(opts)
      return t
    end,
  },
  {
    -- issue 23: 150 template tags of one send that loop forever, one key press.
    name = "isolate_keypress_templates",
    unit = "ms",
    target = 100,
    op = "<=",
    runs = 5,
    setup = function()
      local lines = {}
      for i = 1, 150 do
        vim.list_extend(lines, { "@You:", ("tag %d {{ (function() while true do end end)() }}"):format(i), "" })
      end
      templates_buf = vim.api.nvim_create_buf(false, true)
      vim.api.nvim_buf_set_lines(templates_buf, 0, -1, false, lines)
    end,
    teardown = function()
      vim.api.nvim_buf_delete(templates_buf, { force = true })
    end,
    run = function()
      local doc = require("flemma.chat.document").parse(vim.api.nvim_buf_get_lines(templates_buf, 0, -1, false))
      local t0 = vim.uv.hrtime()
      local out, problems = require("flemma.chat.templates").expand(templates_buf, doc)
      local t = ms(t0)
      assert(not out and #problems == 150, "every message fails")
      return t
    end,
  },
}
