-- A frontmatter that does not evaluate stops the whole tool cycle (issue 10 §2): real
-- keys in a real chat file, real tools; assertions on files, buffer text, messages and
-- diagnostics.
local helpers = require("spec.support.helpers")

local gate = require("flemma.chat.gate")

local press, text = helpers.press, helpers.text

local dir
-- A chat file in a fresh directory: the frontmatter lines, then one assistant message
-- with a `write` of out.txt (relative to the chat file).
local function chat(frontmatter)
  dir = helpers.tmpdir()
  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/test.chat"))
  local buf = vim.api.nvim_get_current_buf()
  local lines = { "```lua" }
  vim.list_extend(lines, frontmatter)
  vim.list_extend(lines, {
    "```",
    "@You:",
    "Write it.",
    "",
    "@Assistant:",
    "**Tool Use:** `write` (`toolu_01`)",
    "",
    "```json",
    vim.json.encode({ path = "out.txt", content = "written", label = vim.NIL }),
    "```",
  })
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  return buf
end

local messages
local orig_notify
local function capture()
  messages = {}
  orig_notify = vim.notify
  vim.notify = function(msg, level)
    messages[#messages + 1] = { msg = msg, level = level }
  end
end

local function errors_about(pattern)
  return vim.tbl_filter(function(m)
    return m.level == vim.log.levels.ERROR and m.msg:find(pattern, 1, true) ~= nil
  end, messages)
end

local function diagnostics(buf)
  return vim.tbl_map(function(d)
    return { line = d.lnum + 1, message = d.message }
  end, vim.diagnostic.get(buf, { namespace = gate.ns }))
end

describe("a frontmatter that does not evaluate", function()
  before_each(function()
    require("flemma").setup({ tools = { autopilot = { enabled = false } } })
    capture()
  end)
  after_each(function()
    vim.notify = orig_notify
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("stops <C-]>: $readonly then an error does not let $default run a write", function()
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "$readonly" }', 'error("boom")' })
    local before = text(buf)
    press("<C-]>")
    vim.wait(200)
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"), "the write ran")
    assert.equals(before, text(buf))
    local errs = errors_about("frontmatter line 3: ")
    assert.equals(1, #errs, vim.inspect(messages))
    assert.truthy(errs[1].msg:find("boom", 1, true))
    assert.same({ { line = 3, message = diagnostics(buf)[1].message } }, diagnostics(buf))
    assert.truthy(diagnostics(buf)[1].message:find("boom", 1, true))
  end)

  it("stops <C-]> on a misspelled tool name (the did-you-mean error)", function()
    local buf = chat({ 'flemma.opt.tools = { "reed", "write" }' })
    local before = text(buf)
    press("<C-]>")
    vim.wait(200)
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"), "the write ran")
    assert.equals(before, text(buf))
    local errs = errors_about("frontmatter line 2: unknown tool `reed` in flemma.opt.tools; did you mean `read`?")
    assert.equals(1, #errs, vim.inspect(messages))
    assert.equals(2, diagnostics(buf)[1].line)
  end)

  it("stops a syntax error too, naming its line", function()
    local buf = chat({ "flemma.opt.max_tokens = 100", "flemma.opt.nope(" })
    local before = text(buf)
    press("<C-]>")
    vim.wait(100)
    assert.equals(before, text(buf))
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"))
    assert.equals(1, #errors_about("frontmatter line "), vim.inspect(messages))
  end)

  it("stops on a frontmatter that is never closed (it does not fall back to the global policy)", function()
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "$readonly" }' })
    -- A four-backtick opener that the three-backtick fences below cannot close.
    vim.api.nvim_buf_set_lines(buf, 0, 1, false, { "````lua" })
    vim.api.nvim_buf_set_lines(buf, 2, 3, false, { "" })
    local before = text(buf)
    press("<C-]>")
    vim.wait(200)
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"), "the write ran")
    assert.equals(before, text(buf))
    assert.equals(
      1,
      #errors_about("frontmatter line 1: the frontmatter opened on line 1 is never closed"),
      vim.inspect(messages)
    )
    assert.equals(1, diagnostics(buf)[1].line)
  end)

  it("shows the error once, not on every key press, until the frontmatter text changes", function()
    local buf = chat({ 'error("boom")' })
    press("<C-]>")
    press("<C-]>")
    press("<C-]>")
    assert.equals(1, #errors_about("boom"), vim.inspect(messages))
    -- Editing the conversation keeps it quiet.
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "", "@You:", "more" })
    press("<C-]>")
    assert.equals(1, #errors_about("boom"))
    -- Another error is shown once.
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { 'error("bang")' })
    press("<C-]>")
    press("<C-]>")
    assert.equals(1, #errors_about("bang"), vim.inspect(messages))
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"))
  end)

  it("stops <M-CR>, autopilot and the :Flemma tool commands", function()
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "$readonly" }', 'error("boom")' })
    local before = text(buf)
    vim.api.nvim_win_set_cursor(0, { 9, 0 }) -- on the tool use
    press("<M-CR>")
    vim.cmd("Flemma tool:execute")
    require("flemma.cycle").advance(buf, { auto = true })
    require("flemma.cycle").execute(buf)
    vim.wait(200)
    assert.equals(before, text(buf))
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"))

    -- A placeholder typed by hand is neither approved nor run.
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, {
      "",
      "@You:",
      "**Tool Result:** `toolu_01`",
      "",
      "```flemma:tool status=pending",
      "```",
    })
    before = text(buf)
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
    vim.cmd("Flemma tool:approve")
    vim.cmd("Flemma tool:reject no")
    press("<C-]>")
    vim.wait(200)
    assert.equals(before, text(buf))
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"))
    assert.equals(1, #errors_about("boom"), vim.inspect(messages))
  end)

  it("clears the diagnostic once the frontmatter is fixed, and the cycle goes on", function()
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "$readonly" }', 'error("boom")' })
    press("<C-]>")
    assert.equals(1, #diagnostics(buf))
    -- An edit of the frontmatter that fixes it; Neovim fires TextChanged after a
    -- normal-mode change (not under `nvim -l`, so the spec fires it).
    vim.api.nvim_win_set_cursor(0, { 3, 0 })
    press("dd")
    vim.api.nvim_exec_autocmds("TextChanged", { buffer = buf })
    helpers.wait_for(function()
      return #diagnostics(buf) == 0
    end, 2000, "the diagnostic stayed after the fix")
    -- Fixed, the buffer's narrowing holds: $readonly leaves the write pending.
    press("<C-]>")
    assert.truthy(text(buf):find("```flemma:tool status=pending", 1, true), text(buf))
    assert.is_nil(vim.uv.fs_stat(dir .. "/out.txt"))
  end)

  it("keeps a queued tool from starting once the frontmatter broke", function()
    -- The buffer is locked while tools run; a frontmatter can still break then, e.g.
    -- when a tool it selects goes away.
    require("flemma").setup({
      tools = { autopilot = { enabled = false }, max_concurrent = 1, auto_approve = { "slow" } },
    })
    require("flemma.tools").register("gone", {
      name = "gone",
      description = "a tool that goes away",
      input_schema = { type = "object" },
      execute = function()
        return { success = true }
      end,
    })
    require("flemma.tools").register("slow", {
      name = "slow",
      description = "returns its text after 200 ms",
      async = true,
      input_schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
      execute = function(input, _, callback)
        vim.defer_fn(function()
          callback({ success = true, output = "slow: " .. input.text })
        end, 200)
      end,
    })
    dir = helpers.tmpdir()
    vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/test.chat"))
    local buf = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
      "```lua",
      'flemma.opt.tools = { "slow", "gone" }',
      "```",
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      "**Tool Use:** `slow` (`toolu_01`)",
      "",
      "```json",
      '{ "text": "one" }',
      "```",
      "",
      "**Tool Use:** `slow` (`toolu_02`)",
      "",
      "```json",
      '{ "text": "two" }',
      "```",
    })
    press("<C-]>")
    helpers.wait_for(function()
      return #require("flemma.cycle").running(buf) == 1
    end, 2000, "nothing started")
    require("flemma.tools").unregister("gone")
    helpers.wait_for(function()
      return text(buf):find("slow: one", 1, true) ~= nil
    end, 3000, "the running tool never finished")
    vim.wait(400)
    assert.is_nil(text(buf):find("slow: two", 1, true), text(buf))
    assert.truthy(text(buf):find("**Tool Result:** `toolu_02`\n\n```flemma:tool status=approved", 1, true), text(buf))
    require("flemma.tools").unregister("slow")
  end)
end)

describe("flemma.gate.error_line()", function()
  it("reads the line of a frontmatter error", function()
    assert.equals(7, gate.error_line("frontmatter line 7: boom"))
    assert.equals(1, gate.error_line("something else"))
  end)
end)
