-- The interpreters that run code from chat files (flemma.isolate), through real
-- headless Neovim: an error handler that loops forever in frontmatter, a template or
-- the statusline ends with the time error and Neovim answers (a timer fires); the
-- calls of one key press share one budget, so 150 tool calls asking a looping
-- auto_approve function hold Neovim about as long as one, and a policy that did not
-- evaluate approves nothing. Each attack runs in a child Neovim, so that a
-- regression fails (the child times out) instead of freezing the suite.
local helpers = require("spec.support.helpers")

local TIME = "ran longer than 35 ms and was stopped (an endless loop?)"
local HANDLER = "xpcall(function() while true do end end, function() while true do end end)"

-- Runs `body` (Lua code) in a child Neovim after setup; it writes its result as JSON
-- with `out(v)`. The child has a data directory of its own (trust store).
local function child(body, timeout)
  local dir = helpers.tmpdir()
  local res = helpers.run_nvim({
    rtp = helpers.root,
    timeout = timeout or 60000,
    env = { XDG_DATA_HOME = dir .. "/data", XDG_STATE_HOME = dir .. "/state", FLEMMA_SPEC_KEY = "sk-isolate-spec" },
    lua = ([=[
      local dir = %q
      local function out(v)
        io.stdout:write(vim.json.encode(v))
      end
      -- Whether a timer started now fires within 5 s of the code's return.
      local function responsive(fn)
        local fired = false
        local timer = vim.uv.new_timer()
        timer:start(0, 0, function()
          fired = true
        end)
        local t0 = vim.uv.hrtime()
        local ok, err = pcall(fn)
        local ms = (vim.uv.hrtime() - t0) / 1e6
        local answered = vim.wait(5000, function()
          return fired
        end, 1)
        timer:close()
        return answered, ms, ok, err
      end
      %s
    ]=]):format(dir, body),
  })
  assert.equals(0, res.code, res.stderr)
  return vim.json.decode(res.stdout)
end

local CHAT_SETUP = [=[
  require("flemma").setup({
    provider = "test",
    providers = { test = { kind = "anthropic", endpoint = "http://127.0.0.1:9/v1/messages", api_key_env = "FLEMMA_SPEC_KEY" } },
    parameters = { max_retries = 0 },
    tools = { autopilot = { enabled = false } },
  })
  local function chat(lines)
    local path = dir .. "/attack.chat"
    vim.fn.writefile(lines, path)
    vim.cmd("edit " .. vim.fn.fnameescape(path))
    return vim.api.nvim_get_current_buf()
  end
]=]

describe("flemma.core.isolate", function()
  it("stops an error handler that loops forever when the chat is opened with the statusline", function()
    local r = child(CHAT_SETUP .. ([=[
      local answered, ms, ok, err = responsive(function()
        local buf = chat({ "```lua", %q, "```", "@You:", "hi" })
        return vim.api.nvim_eval_statusline("%%{%%v:lua.require'flemma'.statusline()%%}", {}).str
      end)
      local buf = vim.api.nvim_get_current_buf()
      local _, fm_err = require("flemma.chat.frontmatter").get(buf)
      out({ answered = answered, ok = ok, text = err, fm_err = fm_err })
    ]=]):format(HANDLER))
    assert.is_true(r.answered, "a timer did not fire")
    assert.is_true(r.ok, tostring(r.text))
    assert.matches("frontmatter error %(line 2%)", r.text)
    assert.equals("frontmatter line 2: " .. TIME, r.fm_err)
  end)

  it("stops a template whose error handler loops forever on <C-]>: nothing is sent", function()
    local r = child(CHAT_SETUP .. ([=[
      local buf = chat({ "@You:", "Say {{ select(2, %s) }}" })
      local answered, ms = responsive(function()
        vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<C-]>", true, false, true), "mx", false)
      end)
      local msgs = {}
      for _, d in ipairs(vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })) do
        msgs[#msgs + 1] = d.message
      end
      out({ answered = answered, diags = msgs, sending = require("flemma.provider").is_active(buf) })
    ]=]):format(HANDLER))
    assert.is_true(r.answered, "a timer did not fire")
    assert.is_false(r.sending)
    assert.equals(1, #r.diags, vim.inspect(r.diags))
    assert.matches("template: " .. vim.pesc(TIME), r.diags[1])
  end)

  -- A chat whose frontmatter (trusted) approves every call with a function that loops
  -- forever for the command "loop"; `uses` bash calls follow, the first `loops` of them
  -- with that command. Returns the statuses of the placeholders, how long <C-]> held
  -- Neovim and whether a timer fired after it.
  local function press_with_policy(uses, loops)
    return child(CHAT_SETUP .. ([=[
      local lines = {
        "```lua",
        "flemma.opt.tools.auto_approve = function(name, input)",
        "  if input.command == 'loop' then while true do end end",
        "  return true",
        "end",
        "```",
        "@You:",
        "Do things.",
        "",
        "@Assistant:",
        "On it.",
      }
      for i = 1, %d do
        lines[#lines + 1] = ""
        lines[#lines + 1] = ("**Tool Use:** `bash` (`toolu_%%03d`)"):format(i)
        lines[#lines + 1] = ""
        lines[#lines + 1] = "```json"
        lines[#lines + 1] = vim.json.encode({ command = i <= %d and "loop" or "echo ran-" .. i })
        lines[#lines + 1] = "```"
      end
      local buf = chat(lines)
      require("flemma.chat.trust").set(buf, "trusted")
      assert(require("flemma.chat.trust").is_trusted(buf))
      local notes = {}
      vim.notify = function(msg)
        notes[#notes + 1] = msg
      end
      local answered, ms = responsive(function()
        vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<C-]>", true, false, true), "mx", false)
      end)
      vim.wait(300) -- an approved call would start (and write its result) meanwhile
      local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
      local statuses = {}
      for status in text:gmatch("```flemma:tool status=(%%a+)") do
        statuses[status] = (statuses[status] or 0) + 1
      end
      out({ answered = answered, ms = ms, statuses = statuses, notes = notes, ran = text:find("\nran%%-%%d+\n") ~= nil })
    ]=]):format(uses, loops))
  end

  it("gives all the auto_approve calls of one <C-]> one budget: 150 looping calls hold Neovim briefly", function()
    local r = press_with_policy(150, 150)
    assert.is_true(r.answered, "a timer did not fire")
    assert.same({ pending = 150 }, r.statuses)
    -- 150 calls of 35 ms each held Neovim 5.4-5.9 s before; the budget of one key
    -- press is 100 ms (make bench: isolate_keypress_auto_approve). Generous here.
    assert.is_true(r.ms < 2500, ("<C-]> held Neovim %.0f ms"):format(r.ms))
    -- One warning per kind of failure, not one per call.
    assert.is_true(#r.notes <= 3, vim.inspect(r.notes))
  end)

  it("keeps a dozen chats' interpreters under the memory cap, frees idle ones and makes them again", function()
    local r = child([=[
      require("flemma").setup({ frontmatter = { max_memory_mb = 40, idle_seconds = 1 } })
      local isolate = require("flemma.core.isolate")
      local fm = require("flemma.chat.frontmatter")
      local bufs, peaks = {}, {}
      for i = 1, 12 do
        isolate.begin_action() -- each chat opened by a key press of its own
        local path = ("%s/chat%d.chat"):format(dir, i)
        -- 10 MB held while evaluating (its interpreter keeps them), then a policy.
        vim.fn.writefile({
          "```lua",
          "local t = {}",
          "for i = 1, 20 do t[i] = ('x'):rep(5e5 - 10) .. i end",
          ("flemma.opt.tools.auto_approve = function(name) return name == 'read' and %d or false end"):format(i),
          "```",
          "@You:",
          "hi",
        }, path)
        vim.cmd("edit " .. vim.fn.fnameescape(path))
        bufs[i] = vim.api.nvim_get_current_buf()
        local opts = assert(fm.get(bufs[i]))
        assert(opts.auto_approve("read", {}, {}) == i)
        peaks[#peaks + 1] = isolate.stats().memory
      end
      -- Every chat's function answers as before (its interpreter made again).
      local answers = {}
      for i, buf in ipairs(bufs) do
        isolate.begin_action()
        local opts = assert(fm.get(buf))
        answers[i] = { opts.auto_approve("read", {}, {}), opts.auto_approve("bash", {}, {}) }
        peaks[#peaks + 1] = isolate.stats().memory
      end
      local before_idle = isolate.stats()
      vim.wait(4000, function()
        return isolate.stats().count == 0
      end, 50)
      local after_idle = isolate.stats()
      isolate.begin_action()
      local again = assert(fm.get(bufs[5])).auto_approve("read", {}, {})
      local live = isolate.stats().count
      isolate.begin_action()
      local _, too_big = fm.evaluate("local t = {}\nfor i = 1, 100 do t[i] = ('x'):rep(5e5 - 10) .. i end", "lua", 1)
      out({ peaks = peaks, answers = answers, before_idle = before_idle, after_idle = after_idle, again = again,
            live = live, too_big = too_big })
    ]=])
    for _, m in ipairs(r.peaks) do
      assert.is_true(m <= 40 * 1024 * 1024, ("the interpreters held %.1f MB"):format(m / 1048576))
    end
    assert.is_true(r.peaks[1] >= 9 * 1024 * 1024, "one interpreter holds its 10 MB")
    for i, a in ipairs(r.answers) do
      assert.same({ i, false }, a)
    end
    assert.is_true(r.before_idle.count >= 1)
    assert.same({ count = 0, memory = 0 }, r.after_idle)
    assert.equals(5, r.again)
    assert.equals(1, r.live)
    assert.equals("frontmatter line 3: used more than 40 MB of memory and was stopped", r.too_big)
  end)

  it("approves nothing once the budget is spent: the calls wait for the user", function()
    local r = press_with_policy(40, 3)
    assert.is_true(r.answered, "a timer did not fire")
    assert.same({ pending = 40 }, r.statuses)
    assert.is_false(r.ran, "a tool ran")
  end)
end)
