-- Shared helpers for specs: temporary directories, child Neovim processes, buffers.
local M = {}

M.root = FLEMMA_ROOT

--- The command that starts a Neovim: `version` (e.g. "0.10.4") from .deps/, or by
--- default the same Neovim that runs the specs. Start children through M.run_nvim or
--- M.tmux_nvim, which check how they ended; never call this from a spec directly.
---@param version? string
---@return string[]
function M.nvim_cmd(version)
  if version then
    return { M.root .. "/scripts/nvim", version }
  end
  local prog = vim.v.progpath
  local running = prog:match("/%.deps/nvim%-([%d%.]+)/")
  if running then
    return { M.root .. "/scripts/nvim", running }
  end
  return { prog }
end

--- The shell words that start a Neovim used as a tool by a command under test (e.g. a
--- `--remote-expr` client inside the sandbox, whose failure is the point). Never for
--- a child Neovim under test: that goes through M.run_nvim, M.start_nvim, M.tmux_nvim.
---@return string
function M.nvim_client_cmd()
  return table.concat(vim.tbl_map(vim.fn.shellescape, M.nvim_cmd()), " ")
end

local signal_names = {
  [4] = "SIGILL",
  [6] = "SIGABRT",
  [7] = "SIGBUS",
  [8] = "SIGFPE",
  [9] = "SIGKILL",
  [11] = "SIGSEGV",
  [13] = "SIGPIPE",
  [15] = "SIGTERM",
}

--- How a child process ended, when that was not a plain exit 0: "killed by signal 11
--- (SIGSEGV)", "exited with status 3". nil when it exited 0.
---@param res { code: integer, signal?: integer }
---@return string|nil
function M.exit_problem(res)
  if res.code == 124 and res.signal == 9 then
    return "did not finish in time and was killed (signal 9, SIGKILL)"
  end
  if res.signal and res.signal ~= 0 then
    return ("killed by signal %d (%s)"):format(res.signal, signal_names[res.signal] or "?")
  end
  -- Through a shell, a signal shows as status 128 + N.
  if res.code and res.code > 128 and res.code < 160 and signal_names[res.code - 128] then
    return ("exited with status %d (signal %d, %s)"):format(res.code, res.code - 128, signal_names[res.code - 128])
  end
  if res.code ~= 0 then
    return ("exited with status %s"):format(tostring(res.code))
  end
  return nil
end

local function tail(s, n)
  s = s or ""
  if #s > (n or 2000) then
    return "..." .. s:sub(-(n or 2000))
  end
  return s
end

--- Fails the calling test when a child Neovim did not exit 0: a crash (SIGSEGV on
--- exit, an abort), a timeout or an error in its script never passes silently.
---@param res { code: integer, signal?: integer, stderr?: string, stdout?: string }
---@param what? string
---@return table res
function M.check_exit(res, what)
  local problem = M.exit_problem(res)
  if problem then
    error(
      ("%s %s\n--- its stderr:\n%s\n--- its stdout:\n%s"):format(
        what or "the child Neovim",
        problem,
        tail(res.stderr),
        tail(res.stdout)
      ),
      2
    )
  end
  return res
end

--- A fresh temporary directory, removed by M.cleanup().
local tmpdirs = {}
function M.tmpdir()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  tmpdirs[#tmpdirs + 1] = dir
  return vim.uv.fs_realpath(dir)
end

function M.cleanup()
  for _, d in ipairs(tmpdirs) do
    vim.fn.delete(d, "rf")
  end
  tmpdirs = {}
end

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("*a")
  f:close()
  return s
end

function M.write_file(path, content)
  vim.fn.mkdir(vim.fs.dirname(path), "p")
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
end

--- Runs a child Neovim (headless, clean) with `rtp` prepended and the given Lua code,
--- and returns the vim.system result. The test fails (an error) when the child exits
--- on a signal or with a non-zero status, or does not end within `timeout` ms; an
--- error in the code exits with status 3. `script = true` runs the code with
--- `nvim -l` (as the spec runner does) instead of `-c luafile`; `version` picks another
--- Neovim than the one running the specs; `args` are more startup arguments (--cmd);
--- `allow_failure = true` returns the result unchecked (for specs of this check).
---@param opts { args?: string[], rtp?: string, lua: string, timeout?: integer, cwd?: string, env?: table, version?: string, script?: boolean, allow_failure?: boolean }
---@return vim.SystemCompleted
function M.run_nvim(opts)
  local child = M.start_nvim(opts)
  return child.wait(opts.allow_failure and "any" or nil, opts.timeout)
end

--- Starts a child Neovim like M.run_nvim (same options) without waiting for it;
--- without `lua` it runs until killed (a server started with args = { "--listen", s }).
--- `wait(expect, timeout)` waits and checks how it ended: by default it must exit 0;
--- `{ signal = N }` when the spec kills it itself (kill(N)), "any" to check nothing.
---@param opts { args?: string[], rtp?: string, lua?: string, cwd?: string, env?: table, version?: string, script?: boolean }
---@return { kill: fun(signal: integer), wait: fun(expect?: "any"|{ signal: integer }, timeout?: integer): vim.SystemCompleted }
function M.start_nvim(opts)
  local cmd = M.nvim_cmd(opts.version)
  vim.list_extend(cmd, { "--headless", "--clean" })
  vim.list_extend(cmd, opts.args or {})
  if opts.rtp then
    vim.list_extend(cmd, { "--cmd", "set rtp^=" .. vim.fn.fnameescape(opts.rtp) })
    vim.list_extend(cmd, { "--cmd", "runtime! plugin/flemma.lua" })
  end
  local script, wrapper
  if opts.lua then
    script = vim.fn.tempname() .. ".lua"
    M.write_file(script, opts.lua)
  end
  if not script then
    -- No code: it runs (e.g. as a --listen server) until the spec kills it.
  elseif opts.script then
    vim.list_extend(cmd, { "-l", script })
  else
    -- An error in the code would only be printed: make it an exit status.
    wrapper = vim.fn.tempname() .. ".lua"
    M.write_file(
      wrapper,
      ([[
local ok, err = xpcall(dofile, debug.traceback, %q)
if not ok then
  io.stderr:write("error in the child's code: " .. tostring(err) .. "\n")
  vim.cmd("cquit 3")
end
]]):format(script)
    )
    vim.list_extend(cmd, { "-c", "luafile " .. vim.fn.fnameescape(wrapper), "-c", "qa!" })
  end
  local what = ("the child Neovim (%s)"):format(table.concat(cmd, " ", #M.nvim_cmd(opts.version)))
  local proc = vim.system(cmd, { text = true, cwd = opts.cwd, env = opts.env })
  local child = {}
  function child.kill(signal)
    proc:kill(signal)
  end
  function child.wait(expect, timeout)
    local res = proc:wait(timeout or 30000)
    if script then
      os.remove(script)
    end
    if wrapper then
      os.remove(wrapper)
    end
    if type(expect) == "table" then
      if res.signal ~= expect.signal then
        error(
          ("%s should have been killed by signal %d, but %s"):format(
            what,
            expect.signal,
            M.exit_problem(res) or "exited 0"
          ),
          2
        )
      end
    elseif expect ~= "any" then
      M.check_exit(res, what)
    end
    return res
  end
  return child
end

--- A child Neovim in a real terminal: a tmux server of its own (`socket`) with one
--- session "flemma" of width x height running Neovim with `args`. The shell around it
--- writes its exit status to a file, so `stop` can tell how it ended.
--- Instead of `args`, `command(argv)` may return a shell command line that starts
--- Neovim through a wrapper (e.g. `make demo`); `argv` is the command (a list) that
--- starts the right Neovim. The wrapper's exit status is what is checked.
---@param opts { socket: string, args?: string[], command?: fun(argv: string[]): string, width?: integer, height?: integer }
---@return { tmux: fun(args: string[]): vim.SystemCompleted, screen: fun(): string, stop: fun(): table }
function M.tmux_nvim(opts)
  local function tmux(args)
    local cmd = { "tmux", "-L", opts.socket }
    vim.list_extend(cmd, args)
    return vim.system(cmd, { text = true }):wait(5000)
  end
  local argv = M.nvim_cmd()
  vim.list_extend(argv, opts.args or {})
  local line = table.concat(vim.tbl_map(vim.fn.shellescape, argv), " ")
  if opts.command then
    line = "(" .. opts.command(argv) .. ")"
  end
  local status_file = M.tmpdir() .. "/exit-status"
  -- A signal shows as 128 + N in $?.
  local shell = ("%s; echo $? > %s"):format(line, vim.fn.shellescape(status_file))
  local res = tmux({
    "new-session",
    "-d",
    "-s",
    "flemma",
    "-x",
    tostring(opts.width or 90),
    "-y",
    tostring(opts.height or 30),
    shell,
  })
  assert(res.code == 0, "tmux new-session failed: " .. tostring(res.stderr))
  local t = { tmux = tmux }
  function t.screen()
    return tmux({ "capture-pane", "-p", "-t", "flemma" }).stdout or ""
  end
  --- Waits until the screen shows `needle` (plain text); fails with the screen.
  function t.wait_screen(needle, timeout)
    local last = ""
    local ok = vim.wait(timeout or 8000, function()
      last = t.screen()
      return last:find(needle, 1, true) ~= nil
    end, 50)
    assert(ok, "screen never showed: " .. needle .. "\n--- screen:\n" .. last)
    return last
  end
  local function ended()
    local code = tonumber(vim.trim(M.read_file(status_file) or ""))
    return code and { code = code, signal = 0 }
  end
  --- Quits the child (Escape, :qa!) unless it already ended, waits for it, checks how
  --- it ended (the test fails on a signal or a non-zero status) and kills the server.
  function t.stop()
    local screen = t.screen()
    -- Keys sent while Neovim is still starting can be lost: send them again.
    for _ = 1, 3 do
      if ended() then
        break
      end
      screen = t.screen()
      tmux({ "send-keys", "-t", "flemma", "Escape", ":qa!", "Enter" })
      vim.wait(3000, function()
        return ended() ~= nil
      end, 50)
    end
    tmux({ "kill-server" })
    local exit = ended() or { code = 124, signal = 0, stderr = "(it did not exit after :qa!)" }
    exit.stdout = screen
    return M.check_exit(exit, "the Neovim in tmux")
  end
  return t
end

--- A scratch buffer with the given lines, in the current window.
function M.buffer(lines, name)
  local buf = vim.api.nvim_create_buf(true, false)
  if name then
    vim.api.nvim_buf_set_name(buf, name)
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines or {})
  vim.api.nvim_set_current_buf(buf)
  return buf
end

function M.lines(buf)
  return vim.api.nvim_buf_get_lines(buf or 0, 0, -1, false)
end

--- Waits (running the event loop) until fn() is truthy; fails with msg after timeout ms.
function M.wait_for(fn, timeout, msg)
  local ok = vim.wait(timeout or 5000, fn, 10)
  assert(ok, msg or "timed out waiting for a condition")
end

--- Presses keys as typed (termcodes such as "<C-]>" replaced), mappings included.
function M.press(keys)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), "mx", false)
end

--- A buffer's whole text, its lines joined by newlines.
function M.text(buf)
  return table.concat(vim.api.nvim_buf_get_lines(buf or 0, 0, -1, false), "\n")
end

--- Edits the file `path` (a .chat file makes a chat buffer) with the given lines, in
--- the current window; returns the buffer.
function M.edit(path, lines)
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  return buf
end

--- Writes `lines` to a .chat file `name` (default "test.chat") in a fresh
--- temporary directory and edits it in the current window (a chat buffer, its
--- first parse done); returns the buffer.
---@param lines string[]
---@param name? string
---@return integer
function M.open_chat(lines, name)
  local path = M.tmpdir() .. "/" .. (name or "test.chat")
  M.write_file(path, table.concat(lines, "\n") .. "\n")
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  vim.wait(20)
  return vim.api.nvim_get_current_buf()
end

--- Runs the event loop until the next piece of the work after a change
--- (flemma.ui.after) has run, or, when none is queued, what was deferred to the
--- next turn of the loop (a 0 ms timer).
function M.next_turn()
  -- The next piece of the work after a change (flemma.ui.after), if any is queued.
  local busy, ran = require("flemma.ui.after").state()
  if busy then
    vim.wait(1000, function()
      return select(2, require("flemma.ui.after").state()) > ran
    end, 1)
    return
  end
  local done = false
  vim.defer_fn(function()
    done = true
  end, 0)
  vim.wait(1000, function()
    return done
  end, 1)
end

--- Runs the event loop until the work after the changes made so far (folds,
--- marks, previews: flemma.ui.after) has all run.
function M.settle()
  vim.wait(1000, function()
    return not require("flemma.ui.after").state()
  end, 1)
  M.next_turn()
end

--- The fold level of every line of the current window's buffer.
---@return integer[]
function M.fold_levels()
  local out = {}
  for l = 1, vim.api.nvim_buf_line_count(0) do
    out[l] = vim.fn.foldlevel(l)
  end
  return out
end

--- The fold levels a new window on buf computes from scratch (Flemma's fold
--- expression set up in it); the current window stays current.
---@param buf integer
---@return integer[]
function M.fresh_fold_levels(buf)
  local win = vim.api.nvim_get_current_win()
  vim.cmd("split")
  vim.api.nvim_win_set_buf(0, buf)
  vim.wo.foldmethod = "manual"
  require("flemma.ui.fold").setup_window(0)
  local out = M.fold_levels()
  vim.cmd("close")
  vim.api.nvim_set_current_win(win)
  return out
end

--- The lines of a chat of `turns` messages, alternately @You: (a question, the
--- extra lines given, a blank line) and @Assistant: (a closed thinking block and
--- an answer; every fourth turn also a tool use and its result).
---@param turns integer
---@param question_extra? string[]
---@return string[]
function M.turns_chat(turns, question_extra)
  local lines = {}
  for i = 1, turns do
    if i % 2 == 1 then
      lines[#lines + 1] = "@You:"
      lines[#lines + 1] = "question " .. i
      vim.list_extend(lines, question_extra or {})
      lines[#lines + 1] = ""
    else
      vim.list_extend(lines, { "@Assistant:", "<thinking>", "hm " .. i, "</thinking>", "", "answer " .. i, "" })
      if i % 4 == 0 then
        vim.list_extend(lines, {
          "**Tool Use:** `bash` (`t" .. i .. "`)",
          "```json",
          '{"command": "ls"}',
          "```",
          "",
          "**Tool Result:** `t" .. i .. "`",
          "```",
          "out " .. i,
          "```",
          "",
        })
      end
    end
  end
  return lines
end

--- A plain copy of a document model with every field read (lazy tool inputs
--- decoded), to compare two models with assert.same.
function M.plain_model(doc)
  local out = { frontmatter = doc.frontmatter and vim.deepcopy(doc.frontmatter), messages = {}, diagnostics = {} }
  for i, m in ipairs(doc.messages) do
    local parts = {}
    for j, p in ipairs(m.parts) do
      local q = {}
      for _, k in ipairs({
        "kind",
        "first_line",
        "last_line",
        "text",
        "id",
        "name",
        "input",
        "input_error",
        "status",
        "is_error",
        "content",
        "fence_line",
        "info",
        "legacy",
        "signature",
        "provider",
        "redacted",
      }) do
        q[k] = p[k]
      end
      parts[j] = q
    end
    out.messages[i] = { role = m.role, first_line = m.first_line, last_line = m.last_line, parts = parts }
  end
  for i, d in ipairs(doc.diagnostics) do
    out.diagnostics[i] = { line = d.line, severity = d.severity, message = d.message }
  end
  return out
end

--- For before_each: Flemma set up with its defaults.
function M.setup_flemma()
  require("flemma").setup({})
end

--- For after_each: every buffer and temporary directory gone.
function M.wipe()
  vim.cmd("silent! %bwipeout!")
  M.cleanup()
end

--- Runs fn with vim.notify captured (put back even when fn fails, whose error is
--- raised again); returns what it notified, each { msg, level }.
---@param fn fun()
---@return { msg: string, level?: integer }[]
function M.notifications(fn)
  local seen = {}
  local orig = vim.notify
  vim.notify = function(msg, level)
    seen[#seen + 1] = { msg = msg, level = level }
  end
  local ok, err = pcall(fn)
  vim.notify = orig
  if not ok then
    error(err, 0)
  end
  return seen
end

--- The body of a stream fixture (spec/fixtures/stream/) written as a whole HTTP
--- response: what follows its headers.
function M.sse_body(name)
  local raw = assert(M.read_file(M.root .. "/spec/fixtures/stream/" .. name))
  local _, stop = raw:find("\r\n\r\n", 1, true)
  return raw:sub(stop + 1)
end

--- The frame of a spec that sends through the real send path: call it in before_each
--- and `teardown()` in after_each. It starts a loopback LLM server
--- (spec/support/llm_server.lua) as `server` unless opts.server is false, sets
--- $FLEMMA_SPEC_KEY to opts.key when given, and records every notification in `notes`
--- ({ msg, level }, level INFO when none is given) and the data of every
--- FlemmaRequestFinished event in `finished`.
--- `wait_finished(n, timeout)` waits until n requests (1 by default) have finished,
--- for opts.timeout ms (10 s by default), and returns the nth one's data; it fails
--- with the notifications so far.
--- `forget_notes()` empties `notes` (the same table) for what a test checks next.
--- `teardown()` restores vim.notify, wipes every buffer, stops the server, removes the
--- temporary directories (M.cleanup), unsets the key and resets the configuration
--- (require("flemma").setup({})); then it asserts that no notification, forgotten or
--- not, held opts.key or any of opts.secrets.
---@param opts? { key?: string, secrets?: string[], server?: boolean, timeout?: integer }
---@return { server?: table, notes: { msg: string, level: integer }[], finished: table[], wait_finished: fun(n?: integer, timeout?: integer): table, forget_notes: fun(), teardown: fun() }
function M.send_harness(opts)
  opts = opts or {}
  local h = { notes = {}, finished = {} }
  local orig_notify = vim.notify
  local all_notes = {}
  if opts.server ~= false then
    h.server = require("spec.support.llm_server").start()
  end
  if opts.key then
    vim.env.FLEMMA_SPEC_KEY = opts.key
  end
  vim.notify = function(msg, level)
    local note = { msg = msg, level = level or vim.log.levels.INFO }
    h.notes[#h.notes + 1] = note
    all_notes[#all_notes + 1] = note
  end
  local group = vim.api.nvim_create_augroup("spec_send_harness", { clear = true })
  vim.api.nvim_create_autocmd("User", {
    pattern = "FlemmaRequestFinished",
    group = group,
    callback = function(ev)
      h.finished[#h.finished + 1] = ev.data
    end,
  })

  function h.wait_finished(n, timeout)
    n = n or 1
    local ok = vim.wait(timeout or opts.timeout or 10000, function()
      return #h.finished >= n
    end, 10)
    if not ok then
      local msgs = vim.tbl_map(function(x)
        return x.msg
      end, h.notes)
      error(("the request never finished (%d of %d); notes:\n%s"):format(#h.finished, n, table.concat(msgs, "\n")), 2)
    end
    return h.finished[n]
  end

  function h.forget_notes()
    for i = #h.notes, 1, -1 do
      h.notes[i] = nil
    end
  end

  function h.teardown()
    vim.notify = orig_notify
    pcall(vim.api.nvim_del_augroup_by_id, group)
    vim.cmd("silent! %bwipeout!")
    if h.server then
      h.server:stop()
    end
    M.cleanup()
    if opts.key then
      vim.env.FLEMMA_SPEC_KEY = nil
    end
    require("flemma").setup({})
    local secrets = vim.list_extend({ opts.key }, opts.secrets or {})
    for _, n in ipairs(all_notes) do
      for _, secret in ipairs(secrets) do
        require("luassert").is_nil(n.msg:find(secret, 1, true), "a key appeared in a notification")
      end
    end
  end

  return h
end

--- An Anthropic stream whose answer is one tool call per { name, id, input_json },
--- after the text `text` (one text block, streamed in one delta) when given.
function M.anthropic_tool_stream(calls, text)
  local ev = {}
  local function add(name, data)
    ev[#ev + 1] = "event: " .. name .. "\ndata: " .. vim.json.encode(data) .. "\n\n"
  end
  add("message_start", {
    type = "message_start",
    message = {
      id = "msg_1",
      type = "message",
      role = "assistant",
      model = "claude-sonnet-4-6",
      content = {},
      usage = { input_tokens = 10, output_tokens = 1 },
    },
  })
  local base = 0
  if text then
    base = 1
    add(
      "content_block_start",
      { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } }
    )
    add(
      "content_block_delta",
      { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = text } }
    )
    add("content_block_stop", { type = "content_block_stop", index = 0 })
  end
  for i, c in ipairs(calls) do
    add("content_block_start", {
      type = "content_block_start",
      index = base + i - 1,
      content_block = { type = "tool_use", id = c[2], name = c[1], input = vim.empty_dict() },
    })
    add(
      "content_block_delta",
      { type = "content_block_delta", index = base + i - 1, delta = { type = "input_json_delta", partial_json = c[3] } }
    )
    add("content_block_stop", { type = "content_block_stop", index = base + i - 1 })
  end
  add("message_delta", { type = "message_delta", delta = { stop_reason = "tool_use" }, usage = { output_tokens = 20 } })
  add("message_stop", { type = "message_stop" })
  return table.concat(ev)
end

--- The CPUs a task may run on, as a set ({ [0] = true, [1] = true }); nil when the
--- task is gone.
---@param pid integer
---@param tid? integer (default: the process's main thread)
---@return table<integer, true>|nil
function M.task_cpus(pid, tid)
  local status = M.read_file(("/proc/%d/task/%d/status"):format(pid, tid or pid))
  local list = status and status:match("Cpus_allowed_list:%s*(%S+)")
  if not list then
    return nil
  end
  local set = {}
  for part in list:gmatch("[^,]+") do
    local a, b = part:match("^(%d+)%-(%d+)$")
    a = tonumber(a or part)
    for c = a, tonumber(b or a) do
      set[c] = true
    end
  end
  return set
end

--- The CPU Neovim's main thread last ran on.
---@return integer
function M.main_cpu()
  local fields = vim.split(M.read_file("/proc/thread-self/stat"):match("%) (.*)"), " ")
  return tonumber(fields[37]) -- field 39 of stat, counted from the state (field 3)
end

--- Every task (thread) of the processes below pid, recursively: { pid, tid }s.
---@param pid integer
---@return { pid: integer, tid: integer }[]
function M.tree_tasks(pid, out)
  out = out or {}
  for _, tid in ipairs(vim.fn.readdir(("/proc/%d/task"):format(pid))) do
    local kids = M.read_file(("/proc/%d/task/%s/children"):format(pid, tid)) or ""
    for kid in kids:gmatch("%d+") do
      for _, t in ipairs(vim.fn.readdir(("/proc/%s/task"):format(kid))) do
        out[#out + 1] = { pid = tonumber(kid), tid = tonumber(t) }
      end
      M.tree_tasks(tonumber(kid), out)
    end
  end
  return out
end

--- The tasks of the command flemma-reap `pid` runs (below its keeper), and the
--- keeper's pid.
---@param pid integer
---@return { pid: integer, tid: integer }[], integer|nil
function M.command_tasks(pid)
  local kids = M.read_file(("/proc/%d/task/%d/children"):format(pid, pid)) or ""
  local keeper = tonumber(kids:match("%d+"))
  return vim.tbl_filter(function(t)
    return t.pid ~= keeper
  end, M.tree_tasks(pid)), keeper
end

-- One SSE event's data line (JSON) and the blank line after it.
local function sse_data(t)
  return "data: " .. vim.json.encode(t) .. "\n\n"
end

--- A whole Anthropic answer as an SSE body: `answer` in one text event, then the tool
--- uses `{ id, name, input }` given (stop reason tool_use), or none (end_turn).
---@param answer string
---@param uses? { id: string, name: string, input: table }[]
---@return string
function M.anthropic_answer(answer, uses)
  local out = {
    "event: message_start\n",
    sse_data({
      type = "message_start",
      message = {
        id = "msg_a",
        type = "message",
        role = "assistant",
        model = "m",
        content = {},
        usage = { input_tokens = 1, output_tokens = 1 },
      },
    }),
    "event: content_block_start\n",
    sse_data({ type = "content_block_start", index = 0, content_block = { type = "text", text = "" } }),
    "event: content_block_delta\n",
    sse_data({ type = "content_block_delta", index = 0, delta = { type = "text_delta", text = answer } }),
    "event: content_block_stop\n",
    sse_data({ type = "content_block_stop", index = 0 }),
  }
  for i, u in ipairs(uses or {}) do
    vim.list_extend(out, {
      "event: content_block_start\n",
      sse_data({
        type = "content_block_start",
        index = i,
        content_block = { type = "tool_use", id = u.id, name = u.name, input = vim.empty_dict() },
      }),
      "event: content_block_delta\n",
      sse_data({
        type = "content_block_delta",
        index = i,
        delta = { type = "input_json_delta", partial_json = vim.json.encode(u.input) },
      }),
      "event: content_block_stop\n",
      sse_data({ type = "content_block_stop", index = i }),
    })
  end
  vim.list_extend(out, {
    "event: message_delta\n",
    sse_data({
      type = "message_delta",
      delta = { stop_reason = uses and "tool_use" or "end_turn" },
      usage = { output_tokens = 9 },
    }),
    "event: message_stop\n",
    sse_data({ type = "message_stop" }),
  })
  return table.concat(out)
end

return M
