-- A file that never answers never freezes Neovim (issue 23 §6): `read` and `edit` of a
-- FIFO inside the project (auto-approved by $default) give an error result at once,
-- a regular file held by a lease (its open waits up to the kernel's lease-break time)
-- gives an error at the tool's timeout, and Neovim's loop keeps running meanwhile (a
-- timer ticks). Each case runs in a child Neovim pressing the real <C-]>: before the
-- fix the child hung in open() and was killed at the deadline.
local helpers = require("spec.support.helpers")

-- The child: opens talk.chat in the project with one call of `tool`, presses <C-]>,
-- waits for the call's result and prints { done, ms, ticks, text } as JSON.
local CHILD = [[
local project, tool, input, timeout = %q, %q, %q, %d
vim.cmd("cd " .. vim.fn.fnameescape(project))
require("flemma").setup({ tools = { autopilot = { enabled = false }, default_timeout = timeout } })
local ticks = 0
local timer = vim.uv.new_timer()
timer:start(20, 20, function()
  ticks = ticks + 1
end)
vim.cmd("edit " .. vim.fn.fnameescape(project .. "/talk.chat"))
local buf = vim.api.nvim_get_current_buf()
vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
  "@You:",
  "Go.",
  "",
  "@Assistant:",
  ("**Tool Use:** `%%s` (`toolu_01`)"):format(tool),
  "",
  "```json",
  input,
  "```",
})
local t0 = vim.uv.hrtime()
vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<C-]>", true, false, true), "mx", false)
local function text()
  return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
end
local done = vim.wait(15000, function()
  return text():find("**Tool Result:** `toolu_01`", 1, true) ~= nil and not text():find("status=", 1, true)
end, 10)
local ms = (vim.uv.hrtime() - t0) / 1e6
timer:stop()
io.stdout:write(vim.json.encode({ done = done, ms = ms, ticks = ticks, text = text() }))
]]

local function run(project, tool, input, timeout)
  local res = helpers.run_nvim({
    rtp = helpers.root,
    cwd = project,
    lua = CHILD:format(project, tool, vim.json.encode(input), timeout or 30),
    timeout = 25000,
  })
  local ok, out = pcall(vim.json.decode, res.stdout)
  assert(ok, "the child printed no result: " .. tostring(res.stdout) .. "\n" .. tostring(res.stderr))
  return out
end

local function mkfifo(path)
  vim.fn.system({ "mkfifo", path })
  assert(vim.v.shell_error == 0, "mkfifo failed")
end

describe("tools and files that never answer", function()
  local project, holder

  before_each(function()
    project = helpers.tmpdir()
  end)

  after_each(function()
    if holder then
      holder:kill("sigkill")
      holder:wait(5000)
      holder = nil
    end
    helpers.cleanup()
  end)

  it("read of a FIFO in the project returns an error result at once", function()
    mkfifo(project .. "/pipe")
    local out = run(project, "read", { path = "pipe", offset = vim.NIL, limit = vim.NIL, label = vim.NIL })
    assert.is_true(out.done, out.text)
    assert.matches("**Tool Result:** `toolu_01` (error)", out.text, 1, true)
    assert.matches("a FIFO, not a regular file", out.text, 1, true)
    assert.is_true(out.ms < 5000, ("took %d ms"):format(out.ms))
  end)

  it("edit of a FIFO is refused, and write does not replace it", function()
    mkfifo(project .. "/pipe")
    local out = run(project, "edit", { path = "pipe", old_string = "a", new_string = "b", label = vim.NIL })
    assert.is_true(out.done, out.text)
    assert.matches("**Tool Result:** `toolu_01` (error)", out.text, 1, true)
    assert.matches("a FIFO, not a regular file", out.text, 1, true)
    out = run(project, "write", { path = "pipe", content = "x", label = vim.NIL })
    assert.is_true(out.done, out.text)
    assert.matches("**Tool Result:** `toolu_01` (error)", out.text, 1, true)
    assert.matches("a FIFO, not a regular file", out.text, 1, true)
    assert.equals("fifo", vim.uv.fs_stat(project .. "/pipe").type)
  end)

  it("read of a file whose open waits (a lease) gives up at the tool's timeout while Neovim runs", function()
    helpers.write_file(project .. "/held.txt", "HELD-CONTENT\n")
    -- Another process holds a write lease: an open for reading waits until it lets
    -- go or the kernel's lease-break time (45 s by default) passes.
    local script = helpers.tmpdir() .. "/lease.py"
    helpers.write_file(
      script,
      table.concat({
        "import fcntl, os, signal, sys, time",
        "signal.signal(signal.SIGIO, signal.SIG_IGN)",
        "fd = os.open(sys.argv[1], os.O_RDONLY)",
        "fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)  # F_SETLEASE",
        "print('LEASED', flush=True)",
        "time.sleep(120)",
      }, "\n")
    )
    local out_buf = {}
    holder = vim.system({ "python3", script, project .. "/held.txt" }, {
      stdout = function(_, data)
        out_buf[#out_buf + 1] = data
      end,
    })
    helpers.wait_for(function()
      return table.concat(out_buf):find("LEASED", 1, true) ~= nil
    end, 10000, "the lease was not taken")
    local out = run(project, "read", { path = "held.txt", offset = vim.NIL, limit = vim.NIL, label = vim.NIL }, 1)
    assert.is_true(out.done, out.text)
    assert.matches("**Tool Result:** `toolu_01` (error)", out.text, 1, true)
    assert.matches("took longer than 1s", out.text, 1, true)
    assert.is_nil(out.text:find("HELD-CONTENT", 1, true))
    assert.is_true(out.ms >= 900 and out.ms < 6000, ("took %d ms"):format(out.ms))
    -- The loop ran while the file was waited for: the 20 ms timer kept ticking.
    assert.is_true(out.ticks >= 20, ("the timer ticked %d times in %d ms"):format(out.ticks, out.ms))
  end)

  it("still reads a regular file in the project", function()
    helpers.write_file(project .. "/notes.txt", "one\ntwo\n")
    local out = run(project, "read", { path = "notes.txt", offset = vim.NIL, limit = vim.NIL, label = vim.NIL })
    assert.is_true(out.done, out.text)
    assert.matches("one\ntwo", out.text, 1, true)
    assert.is_nil(out.text:find("(error)", 1, true))
  end)
end)
