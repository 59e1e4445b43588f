-- End-to-end specs of the three-phase cycle: real keys pressed in a real chat buffer,
-- real tools (including bash processes), assertions on buffer text, cursor and extmarks.
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local send = require("flemma.cycle.send")
local cycle = require("flemma.cycle")
local preview = require("flemma.ui.preview")
local spinner = require("flemma.cycle.spinner")

local press, text = helpers.press, helpers.text

local function chat(lines)
  local buf = helpers.edit(helpers.tmpdir() .. "/test.chat", lines)
  assert.equals("chat", vim.bo[buf].filetype)
  return buf
end

local function tool_use(name, id, input)
  local out = { ("**Tool Use:** `%s` (`%s`)"):format(name, id), "", "```json", vim.json.encode(input), "```" }
  return out
end

local function conversation(uses)
  local lines = { "@You:", "Do things.", "", "@Assistant:", "On it.", "" }
  for i, u in ipairs(uses) do
    if i > 1 then
      lines[#lines + 1] = ""
    end
    vim.list_extend(lines, tool_use(u[1], u[2], u[3]))
  end
  return lines
end

local function wait_text(buf, pattern, timeout)
  helpers.wait_for(function()
    return text(buf):find(pattern, 1, true) ~= nil
  end, timeout or 5000, "buffer never contained: " .. pattern .. "\n--- buffer:\n" .. text(buf))
end

local function line_of(buf, s)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == s then
      return i
    end
  end
end

local function pgrep(pattern)
  local res = vim.system({ "pgrep", "-f", pattern }, { text = true }):wait()
  return vim.trim(res.stdout or "")
end

local events
local function setup(opts)
  require("flemma").setup(vim.tbl_deep_extend("force", {
    tools = { autopilot = { enabled = false }, auto_approve = { "$default", "echo", "slow" } },
  }, opts or {}))
  tools.register("echo", {
    name = "echo",
    description = "returns its text",
    input_schema = {
      type = "object",
      properties = { text = { type = "string" } },
      required = { "text" },
      additionalProperties = false,
    },
    execute = function(input)
      return { success = true, output = "echo: " .. input.text }
    end,
  })
  tools.register("slow", {
    name = "slow",
    description = "returns its text after ms milliseconds",
    async = true,
    input_schema = {
      type = "object",
      properties = { text = { type = "string" }, ms = { type = "number" } },
      required = { "text", "ms" },
      additionalProperties = false,
    },
    execute = function(input, _, callback)
      local timer = vim.uv.new_timer()
      timer:start(input.ms, 0, function()
        timer:close()
        callback({ success = true, output = "slow: " .. input.text })
      end)
      return function()
        if not timer:is_closing() then
          timer:close()
        end
      end
    end,
  })
  events = {}
  for _, name in ipairs({ "FlemmaToolExecuting", "FlemmaToolFinished", "FlemmaRequestSending", "FlemmaRequestFinished" }) do
    vim.api.nvim_create_autocmd("User", {
      pattern = name,
      group = vim.api.nvim_create_augroup("cycle_spec_" .. name, { clear = true }),
      callback = function(ev)
        events[#events + 1] = { name = name, data = ev.data }
      end,
    })
  end
end

describe("the <C-]> cycle", function()
  before_each(function()
    setup()
  end)
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("phase 1 injects a placeholder per tool use with the approval status and moves to the first pending", function()
    local buf = chat(conversation({
      { "read", "toolu_01", { path = "a.txt", offset = vim.NIL, limit = vim.NIL, label = vim.NIL } },
      { "bash", "toolu_02", { command = "echo hi", label = "listing", timeout = vim.NIL } },
    }))
    require("flemma.tools.approval").register("spec:hold-read", {
      priority = 200,
      resolve = function(name)
        if name == "read" then
          return "require_approval"
        end
      end,
    })
    press("<C-]>")
    require("flemma.tools.approval").unregister("spec:hold-read")
    local t = text(buf)
    assert.truthy(t:find("@You:\n**Tool Result:** `toolu_01`\n\n```flemma:tool status=pending\n```", 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_02`\n\n```flemma:tool status=pending\n```", 1, true), t)
    local fence = line_of(buf, "```flemma:tool status=pending")
    assert.equals(fence, vim.api.nvim_win_get_cursor(0)[1])
  end)

  it("shows a preview inside each empty pending placeholder, gone once the result is in", function()
    local buf =
      chat(conversation({ { "bash", "toolu_01", { command = "echo hi", label = "listing", timeout = vim.NIL } } }))
    press("<C-]>")
    local shown = preview.shown(buf)
    assert.equals(1, #shown)
    assert.equals("bash: $ echo hi # listing", shown[1].text)
    assert.equals("FlemmaToolPreview", shown[1].hl)
    assert.equals(line_of(buf, "```flemma:tool status=pending"), shown[1].line)
    local hl = vim.api.nvim_get_hl(0, { name = "FlemmaToolPreview" })
    assert.equals("Comment", hl.link)

    -- Approve by editing the status, then <C-]> runs it for real.
    local l = line_of(buf, "```flemma:tool status=pending")
    vim.api.nvim_buf_set_lines(buf, l - 1, l, false, { "```flemma:tool status=approved" })
    press("<C-]>")
    wait_text(buf, "\nhi\n")
    assert.equals(0, #preview.shown(buf))
    assert.is_nil(text(buf):find("flemma:tool", 1, true))
  end)

  it("runs approved tools by itself when phase 1 left nothing pending, and fires the tool events", function()
    local buf = chat(conversation({
      { "echo", "toolu_01", { text = "one" } },
      { "echo", "toolu_02", { text = "two" } },
    }))
    press("<C-]>")
    wait_text(buf, "echo: two")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_01`\n\n```\necho: one\n```", 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_02`\n\n```\necho: two\n```", 1, true), t)
    local names = vim.tbl_map(function(e)
      return e.name .. ":" .. ((e.data or {}).tool_id or "")
    end, events)
    -- Both start (in order) before either result is written: they run in parallel.
    assert.same({
      "FlemmaToolExecuting:toolu_01",
      "FlemmaToolExecuting:toolu_02",
      "FlemmaToolFinished:toolu_01",
      "FlemmaToolFinished:toolu_02",
    }, names)
    assert.equals(buf, events[1].data.bufnr)
  end)

  it("denies a tool use whose input is not a JSON object, saying why", function()
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
    local l = line_of(buf, '{"text":"x"}')
    vim.api.nvim_buf_set_lines(buf, l - 1, l, false, { '{"text": "x"' })
    press("<C-]>")
    wait_text(buf, "**Tool Result:** `toolu_01` (error)")
    assert.truthy(text(buf):find("not a valid JSON object", 1, true), text(buf))
  end)

  it("injects an error result for a tool denied by policy", function()
    setup({ tools = { auto_approve = { "$default", "echo" }, presets = { ["$no-echo"] = { deny = { "echo" } } } } })
    require("flemma").setup({
      tools = {
        autopilot = { enabled = false },
        auto_approve = { "$default", "echo", "$no-echo" },
        presets = { ["$no-echo"] = { deny = { "echo" } } },
      },
    })
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
    press("<C-]>")
    wait_text(buf, "**Tool Result:** `toolu_01` (error)")
    assert.truthy(text(buf):find("denied", 1, true))
    assert.is_nil(text(buf):find("echo: x", 1, true))
  end)

  it("uses the user's text as the message of a rejection", function()
    local buf =
      chat(conversation({ { "bash", "toolu_01", { command = "rm -rf ~", label = vim.NIL, timeout = vim.NIL } } }))
    press("<C-]>")
    local l = line_of(buf, "```flemma:tool status=pending")
    vim.api.nvim_buf_set_lines(
      buf,
      l - 1,
      l,
      false,
      { "```flemma:tool status=rejected", "I don't want to run rm -rf on my home directory." }
    )
    press("<C-]>")
    wait_text(buf, "(error)")
    local t = text(buf)
    assert.truthy(
      t:find(
        "**Tool Result:** `toolu_01` (error)\n\n```\nI don't want to run rm -rf on my home directory.\n```",
        1,
        true
      ),
      t
    )
  end)

  it("sends the content of a pending placeholder as the user's own result", function()
    local buf = chat(conversation({ { "bash", "toolu_01", { command = "date", label = vim.NIL, timeout = vim.NIL } } }))
    press("<C-]>")
    local l = line_of(buf, "```flemma:tool status=pending")
    vim.api.nvim_buf_set_lines(buf, l, l, false, { "Sun Nov 22 2026" })
    press("<C-]>")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_01`\n\n```\nSun Nov 22 2026\n```", 1, true), t)
    assert.is_nil(t:find("flemma:tool", 1, true))
  end)

  it("does not execute an approved placeholder whose content was edited, and pauses", function()
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
    -- Inject by hand an approved placeholder that the user typed into.
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, {
      "",
      "@You:",
      "**Tool Result:** `toolu_01`",
      "",
      "```flemma:tool status=approved",
      "my own notes",
      "```",
    })
    local before = text(buf)
    local warned
    local orig = vim.notify
    vim.notify = function(msg)
      warned = msg
    end
    press("<C-]>")
    vim.wait(200)
    vim.notify = orig
    assert.equals(before, text(buf))
    assert.truthy(warned and warned:find("not executed", 1, true), warned)
  end)

  it("runs parallel tools up to max_concurrent and writes each result to its own placeholder", function()
    setup({ tools = { max_concurrent = 2 } })
    local buf = chat(conversation({
      { "slow", "toolu_a", { text = "a", ms = 150 } },
      { "slow", "toolu_b", { text = "b", ms = 30 } },
      { "slow", "toolu_c", { text = "c", ms = 10 } },
    }))
    local max_running = 0
    vim.api.nvim_create_autocmd("User", {
      pattern = "FlemmaToolExecuting",
      group = vim.api.nvim_create_augroup("cycle_spec_conc", { clear = true }),
      callback = function()
        max_running = math.max(max_running, #cycle.running(buf))
      end,
    })
    press("<C-]>")
    helpers.wait_for(function()
      return #cycle.running(buf) > 0
    end, 2000)
    assert.is_false(vim.bo[buf].modifiable)
    wait_text(buf, "slow: a", 5000)
    helpers.wait_for(function()
      return vim.bo[buf].modifiable
    end, 2000, "buffer stayed locked")
    local t = text(buf)
    for _, id in ipairs({ "a", "b", "c" }) do
      assert.truthy(t:find(("**Tool Result:** `toolu_%s`\n\n```\nslow: %s\n```"):format(id, id), 1, true), t)
    end
    assert.equals(2, max_running)
    assert.is_true(vim.bo[buf].modifiable)
  end)

  it("shows a spinner extmark on a running placeholder, never in the text", function()
    local buf = chat(conversation({ { "slow", "toolu_01", { text = "z", ms = 400 } } }))
    press("<C-]>")
    helpers.wait_for(function()
      return #vim.api.nvim_buf_get_extmarks(buf, spinner.ns, 0, -1, {}) > 0
    end, 2000)
    local marks = vim.api.nvim_buf_get_extmarks(buf, spinner.ns, 0, -1, { details = true })
    assert.truthy(marks[1][4].virt_text[1][1]:find("running slow", 1, true))
    assert.is_nil(text(buf):find("running slow", 1, true))
    wait_text(buf, "slow: z")
    assert.equals(0, #vim.api.nvim_buf_get_extmarks(buf, spinner.ns, 0, -1, {}))
  end)

  it("cancels a running bash command with <C-c>: its processes die and the result says so", function()
    local marker = "flemma_cycle_cancel_" .. vim.uv.hrtime()
    local buf = chat(conversation({
      {
        "bash",
        "toolu_01",
        { command = "sleep 100 & sleep 100 & echo " .. marker .. "; wait", label = vim.NIL, timeout = vim.NIL },
      },
    }))
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "bash" } } })
    press("<C-]>")
    helpers.wait_for(function()
      return pgrep(marker) ~= ""
    end, 5000, "bash never started")
    press("<C-c>")
    wait_text(buf, "(error)")
    assert.truthy(text(buf):find("cancelled", 1, true))
    helpers.wait_for(function()
      return pgrep(marker) == ""
    end, 5000, "processes survived the cancel")
    assert.is_true(vim.bo[buf].modifiable)
  end)

  it("cancels cleanly when the buffer is wiped while a tool runs", function()
    local marker = "flemma_cycle_wipe_" .. vim.uv.hrtime()
    local buf = chat(conversation({
      { "bash", "toolu_01", { command = "sleep 100; echo " .. marker, label = vim.NIL, timeout = vim.NIL } },
    }))
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "bash" } } })
    press("<C-]>")
    helpers.wait_for(function()
      return pgrep(marker) ~= ""
    end, 5000, "bash never started")
    local errs = vim.v.errmsg
    vim.cmd("bwipeout! " .. buf)
    helpers.wait_for(function()
      return pgrep(marker) == ""
    end, 5000, "processes survived the wipe")
    vim.wait(100)
    assert.equals(errs, vim.v.errmsg)
  end)

  for _, how in ipairs({ "bunload!", "bdelete!" }) do
    it("unlocks the buffer when it is closed with :" .. how .. " while a tool runs", function()
      local buf = chat(conversation({ { "slow", "toolu_01", { text = "z", ms = 3000 } } }))
      vim.cmd("silent write")
      local name = vim.api.nvim_buf_get_name(buf)
      press("<C-]>")
      helpers.wait_for(function()
        return #cycle.running(buf) > 0
      end, 2000)
      assert.is_false(vim.bo[buf].modifiable)
      vim.cmd("enew")
      vim.cmd(how .. " " .. buf)
      assert.equals(0, #cycle.running(buf))
      vim.cmd("edit " .. vim.fn.fnameescape(name))
      assert.equals(buf, vim.api.nvim_get_current_buf())
      assert.is_true(vim.bo[buf].modifiable)
      press("Go<Esc>")
      assert.equals("", vim.api.nvim_buf_get_lines(buf, -2, -1, false)[1])
    end)
  end

  it("<M-CR> executes just the tool block under the cursor", function()
    local buf = chat(conversation({
      { "bash", "toolu_01", { command = "echo first", label = vim.NIL, timeout = vim.NIL } },
      { "bash", "toolu_02", { command = "echo second", label = vim.NIL, timeout = vim.NIL } },
    }))
    press("<C-]>")
    local l = line_of(buf, "**Tool Result:** `toolu_02`")
    vim.api.nvim_win_set_cursor(0, { l, 0 })
    press("<M-CR>")
    wait_text(buf, "\nsecond\n")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_01`\n\n```flemma:tool status=pending\n```", 1, true), t)
    assert.is_nil(t:find("\nfirst\n", 1, true))
  end)

  it("<M-CR> on a rejected placeholder injects the rejection, leaving the others", function()
    local buf = chat(conversation({
      { "bash", "toolu_01", { command = "echo first", label = vim.NIL, timeout = vim.NIL } },
      { "bash", "toolu_02", { command = "rm -rf /", label = vim.NIL, timeout = vim.NIL } },
    }))
    press("<C-]>")
    local l = line_of(buf, "**Tool Result:** `toolu_02`") + 2
    vim.api.nvim_buf_set_lines(buf, l - 1, l, false, { "```flemma:tool status=rejected", "Not on my machine." })
    vim.api.nvim_win_set_cursor(0, { l, 0 })
    press("<M-CR>")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_02` (error)\n\n```\nNot on my machine.\n```", 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_01`\n\n```flemma:tool status=pending\n```", 1, true), t)
  end)

  it("<M-CR> on a tool use whose result is already there changes nothing", function()
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
    press("<C-]>")
    wait_text(buf, "echo: x")
    local before = text(buf)
    vim.api.nvim_win_set_cursor(0, { line_of(buf, "**Tool Use:** `echo` (`toolu_01`)"), 0 })
    press("<M-CR>")
    vim.wait(100)
    assert.equals(before, text(buf))
    assert.equals(0, #cycle.running(buf))
  end)

  it("<C-]> in insert mode runs the cycle", function()
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "typed" } } }))
    vim.api.nvim_win_set_cursor(0, { 2, 0 })
    press("A more<C-]>")
    wait_text(buf, "echo: typed")
    assert.equals("Do things. more", vim.api.nvim_buf_get_lines(buf, 1, 2, false)[1])
    assert.equals("n", vim.api.nvim_get_mode().mode)
  end)

  it(":Flemma tool:reject with a message, then <C-]>, sends the message as the error", function()
    local buf =
      chat(conversation({ { "bash", "toolu_01", { command = "shutdown now", label = vim.NIL, timeout = vim.NIL } } }))
    press("<C-]>")
    vim.cmd("Flemma tool:reject not today")
    assert.truthy(text(buf):find("```flemma:tool status=rejected\nnot today\n```", 1, true), text(buf))
    press("<C-]>")
    wait_text(buf, "(error)")
    assert.truthy(text(buf):find("**Tool Result:** `toolu_01` (error)\n\n```\nnot today\n```", 1, true), text(buf))
  end)

  it(":Flemma tool:approve, then <C-]>, runs the pending tool", function()
    local buf = chat(
      conversation({ { "bash", "toolu_01", { command = "echo approved-run", label = vim.NIL, timeout = vim.NIL } } })
    )
    press("<C-]>")
    vim.cmd("Flemma tool:approve")
    assert.truthy(text(buf):find("```flemma:tool status=approved\n```", 1, true), text(buf))
    press("<C-]>")
    wait_text(buf, "\napproved-run\n")
  end)

  it(":Flemma tool:cancel on a running placeholder cancels just that tool", function()
    local buf = chat(conversation({
      { "slow", "toolu_a", { text = "a", ms = 5000 } },
      { "slow", "toolu_b", { text = "b", ms = 300 } },
    }))
    press("<C-]>")
    helpers.wait_for(function()
      return #cycle.running(buf) == 2
    end, 2000)
    vim.api.nvim_win_set_cursor(0, { line_of(buf, "**Tool Result:** `toolu_a`"), 0 })
    vim.cmd("Flemma tool:cancel")
    assert.truthy(text(buf):find("**Tool Result:** `toolu_a` (error)", 1, true), text(buf))
    assert.same({ { id = "toolu_b", name = "slow" } }, cycle.running(buf))
    wait_text(buf, "slow: b")
    assert.is_true(vim.bo[buf].modifiable)
  end)

  for _, case in ipairs({ { "result", "header" }, { "stay", "stay" }, { "next", "last" } }) do
    it("tools.cursor_after_result = " .. case[1], function()
      setup({ tools = { cursor_after_result = case[1] } })
      local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
      vim.api.nvim_win_set_cursor(0, { 2, 0 })
      press("<C-]>")
      wait_text(buf, "echo: x")
      local row = vim.api.nvim_win_get_cursor(0)[1]
      if case[2] == "header" then
        assert.equals(line_of(buf, "**Tool Result:** `toolu_01`"), row)
      elseif case[2] == "stay" then
        assert.equals(2, row)
      else
        assert.equals(vim.api.nvim_buf_line_count(buf), row)
      end
    end)
  end

  it("phase 3 without an API key names the variable to set and leaves the buffer as it is", function()
    local buf = chat({ "@You:", "Hello there." })
    local before = text(buf)
    local msg
    local orig = vim.notify
    vim.notify = function(m)
      msg = m
    end
    local saved = vim.env.ANTHROPIC_API_KEY
    vim.env.ANTHROPIC_API_KEY = nil
    press("<C-]>")
    vim.env.ANTHROPIC_API_KEY = saved
    vim.notify = orig
    assert.equals(before, text(buf))
    assert.is_true(vim.bo[buf].modifiable)
    assert.truthy(msg and msg:find("set $ANTHROPIC_API_KEY", 1, true), msg)
    assert.equals("FlemmaRequestSending", events[1].name)
  end)

  it("shows validation problems with their lines instead of sending", function()
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
    vim.api.nvim_buf_set_lines(
      buf,
      -1,
      -1,
      false,
      { "", "@You:", "Never mind that tool.", "", "@Assistant:", "Ok.", "", "@You:", "Go on." }
    )
    local sent = false
    send.set_handler(function(_, _, done)
      sent = true
      done({ status = "completed" })
    end)
    press("<C-]>")
    assert.is_false(sent)
    local diags = vim.diagnostic.get(buf, { namespace = send.ns })
    assert.is_true(#diags >= 1)
    assert.truthy(diags[1].message:find("toolu_01", 1, true))
  end)
end)

describe("autopilot", function()
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  -- A provider stand-in for the send path: answers with a tool call `calls` times,
  -- then with plain text.
  local function scripted_provider(calls)
    local n = 0
    return function(bufnr, request, done)
      n = n + 1
      local lines = { "", "@Assistant:" }
      if n <= calls then
        vim.list_extend(lines, tool_use("echo", "toolu_turn" .. n, { text = "turn " .. n }))
      else
        lines[#lines + 1] = "All done after " .. (n - 1) .. " tool turns."
      end
      vim.schedule(function()
        vim.api.nvim_buf_set_lines(bufnr, -1, -1, false, lines)
        done({ status = "completed" })
      end)
      assert.is_table(request.messages)
    end
  end

  it("chains categorize, execute and send across turns until the model stops calling tools", function()
    setup({ tools = { autopilot = { enabled = true } } })
    send.set_handler(scripted_provider(3))
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "start" } } }))
    press("<C-]>")
    wait_text(buf, "All done after 3 tool turns.", 8000)
    local t = text(buf)
    for n = 1, 3 do
      assert.truthy(t:find("echo: turn " .. n, 1, true), t)
    end
    assert.truthy(t:find("echo: start", 1, true))
  end)

  it("stops at max_turns with a clear message", function()
    setup({ tools = { autopilot = { enabled = true, max_turns = 2 } } })
    send.set_handler(scripted_provider(100))
    local msgs = {}
    local orig = vim.notify
    vim.notify = function(m)
      msgs[#msgs + 1] = m
    end
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "start" } } }))
    press("<C-]>")
    local ok = vim.wait(8000, function()
      for _, m in ipairs(msgs) do
        if m:find("autopilot stopped after 2 turns", 1, true) then
          return true
        end
      end
    end)
    vim.notify = orig
    assert.is_true(ok, table.concat(msgs, "\n"))
    assert.truthy(text(buf):find("echo: turn 2", 1, true))
    assert.is_nil(text(buf):find("toolu_turn3", 1, true))
  end)

  it("starts approved tools right after phase 1 while others stay pending", function()
    setup({ tools = { autopilot = { enabled = true } } })
    local buf = chat(conversation({
      { "echo", "toolu_01", { text = "auto" } },
      { "bash", "toolu_02", { command = "echo gated", label = vim.NIL, timeout = vim.NIL } },
    }))
    press("<C-]>")
    wait_text(buf, "echo: auto")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_02`\n\n```flemma:tool status=pending\n```", 1, true), t)
    assert.equals(line_of(buf, "```flemma:tool status=pending"), vim.api.nvim_win_get_cursor(0)[1])
  end)

  it(":Flemma autopilot:disable stops the chain for the buffer", function()
    setup({ tools = { autopilot = { enabled = true } } })
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "x" } } }))
    vim.cmd("Flemma autopilot:disable")
    assert.is_false(cycle.autopilot_enabled(buf))
    local sent = false
    send.set_handler(function(_, _, done)
      sent = true
      done({ status = "completed" })
    end)
    press("<C-]>")
    wait_text(buf, "echo: x")
    vim.wait(100)
    assert.is_false(sent)
    vim.cmd("Flemma autopilot:enable")
    assert.is_true(cycle.autopilot_enabled(buf))
  end)
end)

describe("per-buffer tool selection", function()
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("refuses to run a tool that the buffer's frontmatter does not select", function()
    setup({ tools = { auto_approve = { "$default", "echo", "calculator" } } })
    local lines = { "```lua", 'flemma.opt.tools = { "calculator" }', "```" }
    vim.list_extend(lines, conversation({ { "echo", "toolu_01", { text = "x" } } }))
    local buf = chat(lines)
    press("<C-]>")
    wait_text(buf, "(error)")
    assert.truthy(
      text(buf):find("tool `echo` is not enabled in this buffer (flemma.opt.tools selects: calculator)", 1, true),
      text(buf)
    )
    assert.is_nil(text(buf):find("echo: x", 1, true))
  end)
end)

describe("the execution UI", function()
  before_each(function()
    setup()
  end)
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("shows the last line of live output under the spinner, never in the text", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "bash" } } })
    local buf = chat(conversation({
      {
        "bash",
        "toolu_01",
        { command = "for i in 1 2 3 4 5 6; do echo progress-$i; sleep 0.2; done", label = vim.NIL, timeout = vim.NIL },
      },
    }))
    press("<C-]>")
    local seen
    helpers.wait_for(function()
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, spinner.ns, 0, -1, { details = true })) do
        local vl = m[4].virt_lines
        if vl and vl[1][1][1]:find("progress%-%d") then
          seen = vl[1][1][1]
          return true
        end
      end
    end, 5000, "no live output line appeared")
    -- While it runs, the output lives only in the extmark.
    assert.truthy(text(buf):find("flemma:tool status=approved", 1, true))
    assert.is_nil(text(buf):find("\nprogress%-%d\n"))
    assert.truthy(seen:find("progress-", 1, true))
    wait_text(buf, "progress-6\n```")
  end)

  it("restores the buffer's modifiable state after a tool that throws", function()
    tools.register("boom", {
      name = "boom",
      description = "throws",
      input_schema = { type = "object", properties = {} },
      execute = function()
        error("kaboom")
      end,
    })
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "boom" } } })
    local buf = chat(conversation({ { "boom", "toolu_01", vim.empty_dict() } }))
    press("<C-]>")
    wait_text(buf, "(error)")
    assert.truthy(text(buf):find("kaboom", 1, true), text(buf))
    assert.is_true(vim.bo[buf].modifiable)
    tools.unregister("boom")
  end)

  it(":Flemma tool:cancel-all cancels every running tool", function()
    local buf = chat(conversation({
      { "slow", "toolu_a", { text = "a", ms = 5000 } },
      { "slow", "toolu_b", { text = "b", ms = 5000 } },
    }))
    press("<C-]>")
    helpers.wait_for(function()
      return #cycle.running(buf) == 2
    end, 2000)
    vim.cmd("Flemma tool:cancel-all")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_a` (error)", 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_b` (error)", 1, true), t)
    assert.equals(0, #cycle.running(buf))
    assert.is_true(vim.bo[buf].modifiable)
  end)

  it("waits for async tool sources before sending, then sends by itself", function()
    local finish
    tools.register(function(register, done)
      finish = function()
        register("late", {
          name = "late",
          description = "arrives late",
          input_schema = { type = "object", properties = {} },
          execute = function()
            return { success = true, output = "" }
          end,
        })
        done()
      end
    end)
    local buf = chat({ "@You:", "Hello." })
    local orig = vim.notify
    vim.notify = function() end
    press("<C-]>")
    assert.equals("Waiting for tool definitions to load...", vim.b[buf].flemma_status)
    assert.equals(0, #vim.tbl_filter(function(e)
      return e.name == "FlemmaRequestSending"
    end, events))
    finish()
    helpers.wait_for(function()
      return #vim.tbl_filter(function(e)
        return e.name == "FlemmaRequestSending"
      end, events) == 1
    end, 3000, "the send never happened")
    vim.notify = orig
    assert.is_nil(vim.b[buf].flemma_status)
    tools.unregister("late")
  end)
end)

describe("a broken frontmatter", function()
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("stops the send with an error naming its line", function()
    setup()
    local sent = false
    send.set_handler(function(_, _, done)
      sent = true
      done({ status = "completed" })
    end)
    local buf = chat({ "```lua", "flemma.opt.max_tokens = 100", "flemma.opt.nope(", "```", "@You:", "Hello." })
    local msgs = {}
    local orig = vim.notify
    vim.notify = function(m)
      msgs[#msgs + 1] = m
    end
    press("<C-]>")
    vim.notify = orig
    assert.is_false(sent)
    assert.truthy(table.concat(msgs, "\n"):find("frontmatter line 3", 1, true), table.concat(msgs, "\n"))
    assert.equals("Hello.", vim.api.nvim_buf_get_lines(buf, -2, -1, false)[1])
  end)
end)

describe("cancel of a tool that is not running", function()
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("leaves the others' automatic send alone", function()
    setup({ tools = { autopilot = { enabled = true } } })
    local sent = false
    send.set_handler(function(_, _, done)
      sent = true
      done({ status = "completed" })
    end)
    local buf = chat(conversation({ { "slow", "toolu_01", { text = "a", ms = 200 } } }))
    press("<C-]>")
    helpers.wait_for(function()
      return #cycle.running(buf) == 1
    end, 2000)
    assert.equals(0, cycle.cancel(buf, "toolu_nope"))
    wait_text(buf, "slow: a")
    helpers.wait_for(function()
      return sent
    end, 3000, "the automatic send did not happen")
  end)
end)

describe("a chat wiped while the cycle's next step is queued", function()
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  -- Phase 1 with every call approved queues phase 2 for the next turn of the loop; a
  -- buffer wiped before then raised "Invalid buffer id" from that callback.
  it("drops the queued step without an error", function()
    setup()
    local buf = chat(conversation({ { "echo", "toolu_01", { text = "a" } } }))
    vim.v.errmsg = ""
    cycle.advance(buf)
    vim.cmd("bwipeout! " .. buf)
    vim.wait(100)
    assert.equals("", vim.v.errmsg)
  end)
end)

-- Issue 11 §13: one <C-]> resolves every placeholder that needs no run in one pass
-- (the time is measured by bench/cycle_bench.lua, cycle_rejected_4000).
describe("one <C-]> over many placeholders", function()
  before_each(function()
    setup()
  end)
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  local function with_placeholders(n, placeholder)
    local uses, results = {}, { "", "@You:" }
    for i = 1, n do
      local id = ("toolu_%05d"):format(i)
      uses[i] = { "bash", id, { command = "rm -rf /srv/old-" .. i, label = vim.NIL, timeout = vim.NIL } }
      results[#results + 1] = ""
      vim.list_extend(results, { ("**Tool Result:** `%s`"):format(id), "" })
      vim.list_extend(results, placeholder(i))
    end
    local lines = conversation(uses)
    vim.list_extend(lines, results)
    return chat(lines)
  end

  it("turns 4,000 rejected placeholders into 4,000 error results, in order", function()
    local buf = with_placeholders(4000, function()
      return { "```flemma:tool status=rejected", "```" }
    end)
    -- Work proportional to the chat, once: one buffer edit for all the results (it was
    -- an edit and a parse of the whole buffer per placeholder: 4 minutes on the VM).
    local edits = 0
    vim.api.nvim_buf_attach(buf, false, {
      on_lines = function()
        edits = edits + 1
      end,
    })
    press("<C-]>")
    assert(edits <= 2, ("one press edited the buffer %d times"):format(edits))
    local t = text(buf)
    assert.is_nil(t:find("flemma:tool", 1, true))
    local ids = {}
    for id in t:gmatch("%*%*Tool Result:%*%* `(toolu_%d+)` %(error%)\n\n```\nThe user rejected this tool call%.\n```") do
      ids[#ids + 1] = id
    end
    assert.equals(4000, #ids)
    assert.equals("toolu_00001", ids[1])
    assert.equals("toolu_04000", ids[4000])
    for i = 2, #ids do
      assert(ids[i - 1] < ids[i], "results out of order at " .. i)
    end
    -- The cursor is on the last result written (tools.cursor_after_result = "result").
    assert.equals("**Tool Result:** `toolu_04000` (error)", vim.api.nvim_get_current_line())
  end)

  it("resolves a mix in one press and leaves what needs a decision or a run", function()
    local kinds = {
      function()
        return { "```flemma:tool status=rejected", "```" }
      end,
      function(i)
        return { "```flemma:tool status=rejected", "not number " .. i, "second line", "```" }
      end,
      function()
        return { "```flemma:tool status=denied", "```" }
      end,
      function(i)
        return { "```flemma:tool status=pending", "typed by hand " .. i, "```" }
      end,
      function()
        return { "```flemma:tool status=pending", "```" }
      end,
    }
    local buf = with_placeholders(50, function(i)
      return kinds[(i - 1) % #kinds + 1](i)
    end)
    press("<C-]>")
    local t = text(buf)
    for i = 1, 50 do
      local id = ("toolu_%05d"):format(i)
      local k = (i - 1) % #kinds + 1
      local want = ({
        ("**Tool Result:** `%s` (error)\n\n```\nThe user rejected this tool call.\n```"):format(id),
        ("**Tool Result:** `%s` (error)\n\n```\nnot number %d\nsecond line\n```"):format(id, i),
        ("**Tool Result:** `%s` (error)\n\n```\nThe tool call was denied by the approval policy.\n```"):format(id),
        ("**Tool Result:** `%s`\n\n```\ntyped by hand %d\n```"):format(id, i),
        ("**Tool Result:** `%s`\n\n```flemma:tool status=pending\n```"):format(id),
      })[k]
      assert.truthy(t:find(want, 1, true), "missing for " .. id .. ": " .. want)
    end
    -- The empty pending placeholders stay, with their previews, and block the send.
    local _, left = t:gsub("flemma:tool status=pending", "")
    assert.equals(10, left)
    assert.equals(10, #preview.shown(buf))
    assert.equals("```flemma:tool status=pending", vim.api.nvim_get_current_line())
    assert.equals(0, #events)
  end)
end)
