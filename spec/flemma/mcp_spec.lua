-- MCP servers as Flemma tools (issue 26): the real reference servers from npm
-- (.deps/npm, `make deps`) run with Node, and spec/support/mcp_server.js for servers
-- that crash, never answer or write garbage. Every spec checks that no server process
-- is left behind.
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local mcp = require("flemma.tools.mcp")

local press, text = helpers.press, helpers.text
local NPM = helpers.root .. "/.deps/npm/node_modules/@modelcontextprotocol"
local EVERYTHING = NPM .. "/server-everything/dist/index.js"
local FILESYSTEM = NPM .. "/server-filesystem/dist/index.js"
local SUPPORT = helpers.root .. "/spec/support/mcp_server.js"
local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

local pids = {}

local function alive(pid)
  return vim.uv.kill(pid, 0) == 0
end

--- Remembers the pid of every server running now (checked in after_each).
local function note_pids()
  for _, s in ipairs(mcp.status()) do
    if s.pid then
      pids[s.pid] = true
    end
  end
end

local function setup(servers, extra)
  require("flemma").setup(vim.tbl_deep_extend("force", {
    tools = { autopilot = { enabled = false } },
    mcp = { servers = servers, timeout = 20 },
  }, extra or {}))
end

local function wait_ready(timeout)
  helpers.wait_for(function()
    note_pids()
    return tools.is_ready()
  end, timeout or 20000, "the MCP tool sources never finished: " .. vim.inspect(mcp.status()))
  note_pids()
end

local function run(name, input, opts)
  local result
  local handle = tools.execute(0, { id = "t1", name = name, input = input }, function(r)
    result = r
  end, opts)
  return function(timeout)
    helpers.wait_for(function()
      note_pids()
      return result ~= nil
    end, timeout or 10000, "the tool never finished: " .. name)
    return result
  end,
    handle
end

local function everything()
  return { command = "node", args = { EVERYTHING, "stdio" } }
end

local function spec_server(mode, env)
  return { command = "node", args = { SUPPORT, mode }, env = env }
end

describe("mcp", function()
  after_each(function()
    mcp.stop_all()
    helpers.wait_for(function()
      for pid in pairs(pids) do
        if alive(pid) then
          return false
        end
      end
      return true
    end, 5000, "an MCP server process was left behind")
    pids = {}
    require("flemma").setup({})
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  describe("configuration", function()
    it("says in one line what is wrong with a server entry", function()
      local ok, err = pcall(require("flemma").setup, { mcp = { servers = { x = { command = 42 } } } })
      assert.is_false(ok)
      assert.equals("(flemma) `mcp.servers.x.command` should be a string, not number", err)
      ok, err = pcall(require("flemma").setup, { mcp = { servers = { x = { args = {} } } } })
      assert.is_false(ok)
      assert.truthy(err:find("`mcp.servers.x.command` should be a string, not nil", 1, true), err)
      ok, err = pcall(require("flemma").setup, { mcp = { servers = { ["a__b"] = { command = "x" } } } })
      assert.is_false(ok)
      assert.truthy(err:find("server name", 1, true), err)
      ok, err = pcall(require("flemma").setup, { mcp = { servers = { x = { command = "x", args = { 1 } } } } })
      assert.is_false(ok)
      assert.equals("(flemma) `mcp.servers.x.args[1]` should be a string, not number", err)
      ok, err = pcall(require("flemma").setup, { mcp = { timeout = 0 } })
      assert.is_false(ok)
      assert.truthy(err:find("mcp.timeout", 1, true), err)
    end)
  end)

  describe("lazy start", function()
    it("a chat whose frontmatter selects no MCP tool starts nothing; a plain chat starts the server", function()
      setup({ everything = everything() })
      helpers.open_chat({ "```lua", 'flemma.opt.tools = { "bash" }', "```", "@You:", "hi" }, "a.chat")
      vim.wait(300)
      assert.equals("stopped", mcp.status()[1].state)
      assert.is_nil(tools.get("everything:echo"))
      helpers.open_chat({ "@You:", "hi" }, "b.chat")
      wait_ready()
      assert.equals("ready", mcp.status()[1].state)
      assert.is_not_nil(tools.get("everything:echo"))
    end)

    it("without MCP servers a chat starts no process", function()
      setup({})
      helpers.open_chat({ "@You:", "hi" })
      vim.wait(100)
      assert.same({}, mcp.status())
      assert.same({}, require("flemma.core.process").running())
    end)
  end)

  describe("the everything server", function()
    before_each(function()
      setup({ everything = everything() })
      mcp.start()
      wait_ready()
    end)

    it("lists its tools as server:tool with their schemas and annotations in the preview", function()
      local names = tools.list()
      for _, want in ipairs({
        "everything:echo",
        "everything:get-sum",
        "everything:get-tiny-image",
        "everything:trigger-long-running-operation",
      }) do
        assert.truthy(vim.tbl_contains(names, want), want .. " in " .. table.concat(names, " "))
      end
      local sum = tools.get("everything:get-sum")
      assert.same({ "a", "b" }, sum.input_schema.required)
      assert.equals("number", sum.input_schema.properties.a.type)
      assert.equals("[read-only] a=1, b=2", tools.preview("everything:get-sum", { a = 1, b = 2 }))
      local s = mcp.status()[1]
      assert.equals("ready", s.state)
      assert.equals(#vim.tbl_filter(function(n)
        return n:find("^everything:")
      end, names), s.tools)
    end)

    it("calls echo and get-sum", function()
      local wait = run("everything:echo", { message = "hello there" })
      assert.same({ success = true, output = "Echo: hello there" }, wait())
      wait = run("everything:get-sum", { a = 2, b = 40 })
      local r = wait()
      assert.is_true(r.success)
      assert.truthy(r.output:find("42", 1, true), r.output)
    end)

    it("carries an image result as an attachment, saved under its content's sha256", function()
      local r = run("everything:get-tiny-image", {})()
      assert.is_true(r.success, r.error)
      assert.equals(1, #r.attachments, vim.inspect(r))
      local a = r.attachments[1]
      assert.equals("image/png", a.mime)
      local dir = require("flemma.core.files").media_dir()
      assert.equals(dir, vim.fs.dirname(a.path))
      local data = helpers.read_file(a.path)
      assert.equals("\137PNG", data:sub(1, 4))
      -- Named by the sha256 of the base64 the server sent (computed apart here).
      local b64 = vim.system({ "base64", "-w0", a.path }, { text = true }):wait().stdout
      local sum = vim.system({ "sha256sum" }, { stdin = vim.trim(b64), text = true }):wait().stdout:match("^%x+")
      assert.equals(dir .. "/" .. sum .. ".png", a.path)
      assert.equals(384, bit.band(vim.uv.fs_stat(a.path).mode, 511)) -- 0600
      assert.truthy(
        r.output:find("[image image/png, " .. #data .. " bytes, attached; saved as " .. a.path .. "]", 1, true),
        r.output
      )
      -- The same image again: the same file.
      local again = run("everything:get-tiny-image", {})()
      assert.equals(a.path, again.attachments[1].path)
    end)

    it("lists resource links by name and URI; structuredContent as JSON, once", function()
      local r = run("everything:get-resource-links", { count = 2 })()
      assert.is_true(r.success, r.error)
      assert.truthy(r.output:find("Here are 2 resource links", 1, true), r.output)
      -- One line each: name, URI, type and description, as the server gave them.
      for i = 1, 2 do
        assert.truthy(
          r.output:find(
            ("\n%%[resource link%%] %%a+ Resource %d: demo://resource/dynamic/%%a+/%d %%([%%w/]+%%) %%- Resource %d: "):format(
              i,
              i,
              i
            )
          ),
          r.output
        )
      end
      assert.is_nil(r.attachments)
      r = run("everything:get-structured-content", { location = "Chicago" })()
      assert.is_true(r.success, r.error)
      local decoded = vim.json.decode(r.output)
      assert.same({ temperature = 36, conditions = "Light rain / drizzle", humidity = 82 }, decoded)
    end)

    it("reports progress of a long-running tool, and a cancel ends it at once", function()
      local progress = {}
      local wait = run("everything:trigger-long-running-operation", { duration = 1.2, steps = 3 }, {
        on_progress = function(p)
          progress[#progress + 1] = p.last_line
        end,
      })
      local r = wait(10000)
      assert.is_true(r.success, r.error)
      assert.same({ "progress 1/3", "progress 2/3", "progress 3/3" }, progress)

      progress = {}
      local wait2, handle = run("everything:trigger-long-running-operation", { duration = 30, steps = 30 }, {
        on_progress = function(p)
          progress[#progress + 1] = p.last_line
        end,
      })
      helpers.wait_for(function()
        return #progress > 0
      end, 5000, "no progress")
      local t0 = vim.uv.hrtime()
      handle.cancel()
      r = wait2(2000)
      assert.is_false(r.success)
      assert.truthy(r.error:find("cancelled", 1, true), r.error)
      assert.is_true((vim.uv.hrtime() - t0) / 1e6 < 1000)
      -- The server is still there and answers.
      assert.is_true(run("everything:echo", { message = "after" })().success)
    end)
  end)

  it("sends notifications/cancelled for a cancelled call", function()
    local log = helpers.tmpdir() .. "/received.jsonl"
    setup({ plain = spec_server("plain", { MCP_SPEC_LOG = log }) })
    mcp.start()
    wait_ready()
    local wait, handle = run("plain:slow", {})
    vim.wait(200)
    handle.cancel()
    local r = wait(2000)
    assert.is_false(r.success)
    local lines, methods
    helpers.wait_for(function()
      lines = vim.split(vim.trim(helpers.read_file(log) or ""), "\n")
      methods = vim.tbl_map(function(l)
        return vim.json.decode(l).method
      end, lines)
      return vim.tbl_contains(methods, "notifications/cancelled")
    end, 3000, "the server never got notifications/cancelled")
    -- tools/list three times: one tool a page (nextCursor).
    assert.same({
      "initialize",
      "notifications/initialized",
      "tools/list",
      "tools/list",
      "tools/list",
      "tools/call",
      "notifications/cancelled",
    }, methods)
    local cancelled = vim.json.decode(lines[7])
    assert.equals(vim.json.decode(lines[6]).id, cancelled.params.requestId)
  end)

  it("follows nextCursor, answers ping and registers again on tools/list_changed", function()
    local log = helpers.tmpdir() .. "/received.jsonl"
    setup({ plain = spec_server("plain", { MCP_SPEC_LOG = log }) })
    mcp.start()
    wait_ready()
    assert.is_not_nil(tools.get("plain:echo"))
    assert.is_not_nil(tools.get("plain:slow"))
    assert.is_not_nil(tools.get("plain:grow"))
    assert.is_nil(tools.get("plain:added"))
    assert.same({ success = true, output = "grown" }, run("plain:grow", {})())
    helpers.wait_for(function()
      return tools.get("plain:added") ~= nil
    end, 3000, "list_changed did not register the new tool")
    local pong
    for _, l in ipairs(vim.split(vim.trim(helpers.read_file(log)), "\n")) do
      local m = vim.json.decode(l)
      if m.id == "ping-1" then
        pong = m
      end
    end
    assert.is_not_nil(pong, "no answer to ping")
    assert.same({}, pong.result)
    assert.is_nil(pong.error)
  end)

  it("a server that crashes is restarted once, then its tools answer with its last stderr lines", function()
    setup({ crashy = spec_server("crash") })
    mcp.start()
    wait_ready()
    local first_pid = mcp.status()[1].pid
    local r = run("crashy:boom", {})()
    assert.is_false(r.success)
    assert.truthy(r.error:find("crashy", 1, true), r.error)
    assert.truthy(r.error:find("boom: the spec server crashes now", 1, true), r.error)
    -- Restarted once.
    helpers.wait_for(function()
      note_pids()
      local s = mcp.status()[1]
      return s.state == "ready" and s.pid ~= first_pid
    end, 10000, "never restarted: " .. vim.inspect(mcp.status()))
    assert.equals(1, mcp.status()[1].restarts)
    r = run("crashy:boom", {})()
    assert.is_false(r.success)
    vim.wait(300)
    assert.equals("failed", mcp.status()[1].state)
    r = run("crashy:boom", {})()
    assert.is_false(r.success)
    assert.truthy(r.error:find("MCP server `crashy` is not running", 1, true), r.error)
    assert.truthy(r.error:find("boom: the spec server crashes now", 1, true), r.error)
  end)

  it("an image over attachments.max_bytes is saved and named, not attached", function()
    setup({ everything = everything() }, { attachments = { max_bytes = 16 } })
    mcp.start()
    wait_ready()
    local r = run("everything:get-tiny-image", {})()
    assert.is_true(r.success, r.error)
    assert.is_nil(r.attachments)
    local path = r.output:match(
      "%[image image/png, %d+ bytes, saved to (%S+); not shown to the model: over attachments%.max_bytes %(16 bytes%)%]"
    )
    assert.truthy(path, r.output)
    assert.equals("\137PNG", helpers.read_file(path):sub(1, 4))
  end)

  -- The stderr file of a server past its memory window, in the server's own directory.
  local function stderr_files(c)
    return c.spill_dir and vim.fn.glob(c.spill_dir .. "/flemma-stderr-*", false, true) or {}
  end

  it("keeps at most 1 MB of a server's stderr in its file, and removes the file when the server stops", function()
    setup({ chatty = spec_server("chatty") })
    mcp.start()
    wait_ready()
    local c = mcp.client("chatty")
    local dir = c.spill_dir
    assert.truthy(dir and vim.startswith(dir, vim.fn.fnamemodify(vim.fn.tempname(), ":h")), tostring(dir))
    local file
    helpers.wait_for(function()
      file = stderr_files(c)[1]
      local data = file and helpers.read_file(file) or ""
      return data:find("\n%[flemma: output file cut at 1048576 bytes; the rest was not kept%]\n$") ~= nil
    end, 20000, "the 8 MB of stderr never filled the file up to its cap: " .. vim.inspect(stderr_files(c)))
    assert.is_true(vim.fn.getfsize(file) <= 1024 * 1024 + 100, file .. " holds " .. vim.fn.getfsize(file) .. " bytes")
    assert.same({ success = true, output = "echo: still here" }, run("chatty:echo", { text = "still here" })())
    mcp.stop_all()
    helpers.wait_for(function()
      return not c:running() and vim.uv.fs_stat(file) == nil
    end, 10000, "the stderr file is still there after the server stopped: " .. file)
    assert.is_nil(vim.uv.fs_stat(dir), dir)
    assert.is_nil(c.spill_dir)
  end)

  it("a crashed server's stderr file is removed; its last lines still reach the error", function()
    setup({ noisy = spec_server("noisy") })
    mcp.start()
    wait_ready()
    local c = mcp.client("noisy")
    local dir = c.spill_dir
    assert.truthy(dir)
    local r = run("noisy:boom", {})(20000)
    assert.is_false(r.success)
    assert.truthy(r.error:find("server `noisy` exited (code 3)", 1, true), r.error)
    assert.truthy(r.error:find("boom: the spec server crashes now", 1, true), r.error)
    assert.is_nil(vim.uv.fs_stat(dir), dir .. " is still there")
  end)

  it("the stderr files of running servers are gone once Neovim exits", function()
    local tmp = helpers.tmpdir()
    local out = tmp .. "/seen.txt"
    local res = helpers.run_nvim({
      rtp = helpers.root,
      env = { TMPDIR = tmp },
      timeout = 60000,
      lua = ([[
        require("flemma").setup({ mcp = { servers = { chatty = { command = "node", args = { %q, "chatty" } } }, timeout = 20 } })
        local mcp = require("flemma.tools.mcp")
        mcp.start()
        local c
        local file
        assert(vim.wait(30000, function()
          c = mcp.client("chatty")
          file = c and c.spill_dir and vim.fn.glob(c.spill_dir .. "/flemma-stderr-*", false, true)[1]
          return c and c.state == "ready" and file ~= nil and vim.fn.getfsize(file) > 1024 * 1024
        end, 20), "no stderr file: " .. vim.inspect(mcp.status()))
        vim.fn.writefile({ file }, %q)
      ]]):format(SUPPORT, out),
    })
    assert.equals(0, res.code, res.stderr)
    local file = vim.trim(assert(helpers.read_file(out)))
    assert.truthy(vim.startswith(file, tmp .. "/"), file)
    assert.is_nil(vim.uv.fs_stat(file), file .. " is still there")
    assert.same({}, vim.fn.globpath(tmp, "**/flemma-stderr-*", false, true))
  end)

  it("initialize that never answers times out while Neovim keeps running", function()
    setup({ silent = spec_server("silent") }, { mcp = { timeout = 1 } })
    local ticks = 0
    local timer = vim.uv.new_timer()
    timer:start(20, 20, function()
      ticks = ticks + 1
    end)
    -- Hold the loop for 300 ms first: its cached clock is then that far behind,
    -- and a timeout counted from it would fire 300 ms early.
    local spin = vim.uv.hrtime()
    while vim.uv.hrtime() - spin < 300e6 do
    end
    local t0 = vim.uv.hrtime()
    mcp.start()
    note_pids()
    wait_ready(5000)
    local elapsed = (vim.uv.hrtime() - t0) / 1e6
    timer:stop()
    timer:close()
    assert.is_true(elapsed >= 900 and elapsed < 4000, tostring(elapsed))
    assert.is_true(ticks >= 20, "the timer ticked only " .. ticks .. " times")
    local s = mcp.status()[1]
    assert.equals("failed", s.state)
    assert.truthy(s.last_error:find("initialize timed out", 1, true), s.last_error)
    assert.is_nil(tools.get("silent:echo"))
    local failed = vim.tbl_filter(function(x)
      return x.state == "failed"
    end, tools.sources())
    assert.equals(1, #failed)
  end)

  it("a starting server runs off the CPU Neovim's main thread is on; once ready it has every CPU", function()
    local own = helpers.task_cpus(vim.fn.getpid())
    if vim.tbl_count(own) < 2 then
      pending("needs two CPUs")
      return
    end
    -- A server that never answers stays starting: all its threads are kept off the
    -- CPU the main thread was on when it was started.
    setup({ silent = spec_server("silent") }, { mcp = { timeout = 20 } })
    -- The CPU the main thread is on when the server is spawned (a turn after
    -- mcp.start()), when it did not move during the call.
    local process = require("flemma.core.process")
    local spawn = process.spawn
    local cpu, pid, spawned
    process.spawn = function(...)
      local before = helpers.main_cpu()
      local h = spawn(...)
      spawned = helpers.main_cpu() == before and before or false
      return h
    end
    local ok, err = pcall(function()
      for _ = 1, 50 do
        spawned = nil
        mcp.start()
        helpers.wait_for(function()
          return spawned ~= nil
        end, 5000, "never spawned")
        if spawned then
          cpu = spawned
          break
        end
        mcp.stop_all()
        wait_ready()
      end
    end)
    process.spawn = spawn
    assert(ok, err)
    assert(cpu, "the main thread moved during every spawn")
    helpers.wait_for(function()
      note_pids()
      pid = mcp.status()[1].pid
      -- node runs (its main thread and the threads it starts)
      return pid and #helpers.command_tasks(pid) >= 2
    end, 10000, "the server never started")
    vim.wait(300) -- node's start-up threads
    local tasks = helpers.command_tasks(pid)
    assert.is_true(#tasks >= 2, vim.inspect(tasks))
    for _, t in ipairs(tasks) do
      local set = helpers.task_cpus(t.pid, t.tid)
      if set then
        assert.is_nil(set[cpu], ("thread %d may run on CPU %d: %s"):format(t.tid, cpu, vim.inspect(set)))
        assert.equal(vim.tbl_count(own) - 1, vim.tbl_count(set))
      end
    end
    assert.equal("starting", mcp.status()[1].state)
    mcp.stop_all()
    wait_ready() -- its tool source ends (failed) before the next setup
    -- The everything server gets them all back once it answered (not after the 30 s
    -- the spare lasts at most).
    setup({ everything = everything() })
    mcp.start()
    wait_ready()
    pid = mcp.status()[1].pid
    local back = vim.wait(2000, function()
      for _, t in ipairs(helpers.command_tasks(pid)) do
        local set = helpers.task_cpus(t.pid, t.tid)
        if set and not vim.deep_equal(set, own) then
          return false
        end
      end
      return true
    end, 10)
    assert(back, "the ready server's threads are still kept off a CPU")
    assert.is_true(#helpers.command_tasks(pid) >= 2)
  end)

  it("survives garbage and a 50 MB line on stdout", function()
    setup({ junk = spec_server("garbage") })
    mcp.start()
    wait_ready(30000)
    local s = mcp.status()[1]
    assert.equals("ready", s.state)
    assert.truthy(
      (s.last_error or ""):find("line_too_long", 1, true) or (s.last_error or ""):find("over the limit", 1, true),
      vim.inspect(s)
    )
    assert.same({ success = true, output = "echo: still here" }, run("junk:echo", { text = "still here" })())
  end)

  it("cuts a 10 MB result to tools.truncate: its head, and the whole text in a private file", function()
    setup({ big = spec_server("big") })
    mcp.start()
    wait_ready(30000)
    local r = run("big:big", { lines = 100000, width = 100 })(30000)
    assert.is_true(r.success, vim.inspect(r.error))
    assert.is_true(#r.output < 51200 + 400, "the result holds " .. #r.output .. " bytes")
    local first = r.output:match("^[^\n]*")
    assert.truthy(first:find("^%[Result of big truncated: showing the first %d+ of 100002 lines"), first)
    assert.truthy(r.output:find("\nbig: start\n", 1, true), r.output:sub(1, 300))
    local path = first:match("Full text: (%S+)%]$")
    assert.truthy(path, first)
    local st = vim.uv.fs_stat(path)
    assert.equals(10000019, st.size)
    assert.equals("600", ("%o"):format(st.mode % 512))
    local whole = table.concat(vim.fn.readfile(path, "b"), "\n")
    assert.equals("big: end", whole:sub(-8))
    os.remove(path)
  end)

  it("the whole text of a long result is saved redacted before the result is handed on", function()
    setup({})
    local key = "sk-mcp-long-" .. tostring(math.random(1e9))
    require("flemma.core.util").add_secret(key)
    local long = ("x"):rep(300000) .. key .. ("\n"):rep(3000) .. key
    local r
    mcp.result_async("srv", { content = { { type = "text", text = long } } }, function(x)
      r = x
    end)
    helpers.wait_for(function()
      return r ~= nil
    end, 10000, "no result")
    local path = r.output:match("Full text: (%S+)%]")
    assert.truthy(path, r.output:sub(1, 300))
    local f = assert(io.open(path, "rb"))
    local whole = f:read("*a")
    f:close()
    os.remove(path)
    assert.is_nil(whole:find(key, 1, true))
    assert.equals(300000 + #"[redacted]" * 2 + 3000, #whole)
  end)

  it("an image result is saved under the sha256 of its data and attached (hashed off the main loop)", function()
    setup({ big = spec_server("big") })
    mcp.start()
    wait_ready(30000)
    local r = run("big:image", { bytes = 300000 })(30000)
    assert.is_true(r.success, vim.inspect(r.error))
    local path = r.output:match("attached; saved as (%S+%.png)%]")
    assert.truthy(path, r.output)
    assert.same({ { path = path, mime = "image/png" } }, r.attachments)
    local f = assert(io.open(path, "rb"))
    local bytes = f:read("*a")
    f:close()
    assert.equals(300000, #bytes)
    assert.equals(vim.fn.sha256(vim.base64.encode(bytes)) .. ".png", vim.fs.basename(path))
    os.remove(path)
  end)

  it("a server's progress message is one short line, redacted", function()
    local key = "sk-mcp-progress-" .. tostring(math.random(1e9))
    require("flemma.core.util").add_secret(key)
    setup({ big = spec_server("big") })
    mcp.start()
    wait_ready(30000)
    local lines = {}
    local message = "step one\nstep two " .. key .. " " .. ("x"):rep(100000)
    local r = run("big:progress", { message = message }, {
      on_progress = function(p)
        lines[#lines + 1] = p.last_line
      end,
    })(30000)
    assert.same({ success = true, output = "done" }, r)
    assert.equals(1, #lines)
    assert.is_nil(lines[1]:find("%c"), lines[1])
    assert.is_nil(lines[1]:find(key, 1, true), lines[1])
    assert.truthy(lines[1]:find("^progress 1/2 step one step two %[redacted%] x+$"), lines[1])
    assert.is_true(vim.fn.strchars(lines[1]) <= 220, tostring(#lines[1]))
  end)

  describe("through the <C-]> cycle", function()
    local h
    local function tool_stream(name, id, input_json)
      return helpers.anthropic_tool_stream({ { name, id, input_json } })
    end

    before_each(function()
      h = helpers.send_harness({ key = KEY })
    end)
    after_each(function()
      h.teardown()
    end)

    it('flemma.opt.tools = { "$mcp:everything", "read" } sends that server\'s tools and read only', function()
      require("flemma").setup({
        provider = "test",
        providers = {
          test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        },
        parameters = { max_retries = 0, cache_retention = "none" },
        tools = { autopilot = { enabled = false } },
        mcp = { servers = { everything = everything(), plain = spec_server("plain") }, timeout = 20 },
      })
      h.server:script({ { body = helpers.sse_body("anthropic_text.http"), content_type = "text/event-stream" } })
      local buf = helpers.open_chat({
        "```lua",
        'flemma.opt.tools = { "$mcp:everything", "read" }',
        'flemma.opt.tools:remove("everything:get-sum")',
        "```",
        "@You:",
        "Which tools?",
      })
      press("<C-]>")
      h.wait_finished(1, 30000)
      note_pids()
      local sent = vim.tbl_map(function(t)
        return t.name
      end, h.server:requests()[1].json.tools or {})
      table.sort(sent)
      local everything_tools = vim.tbl_filter(function(n)
        return n:find("^everything__") ~= nil
      end, sent)
      assert.truthy(vim.tbl_contains(sent, "everything__echo"), vim.inspect(sent))
      assert.truthy(vim.tbl_contains(sent, "read"), vim.inspect(sent))
      assert.is_false(vim.tbl_contains(sent, "everything__get-sum"), vim.inspect(sent))
      assert.equals(#sent - 1, #everything_tools, vim.inspect(sent))
      -- The registry's own view of the buffer agrees: the same tools, named server:tool.
      local names = tools.for_buffer(buf)
      assert.equals(#sent, #names, vim.inspect(names))
      assert.truthy(vim.tbl_contains(names, "everything:echo"), vim.inspect(names))
      assert.is_false(vim.tbl_contains(names, "plain:echo"), vim.inspect(names))
      assert.is_false(vim.tbl_contains(names, "bash"), vim.inspect(names))
    end)

    it("an image an MCP tool returns reaches the model in the tool result after <C-]>", function()
      require("flemma").setup({
        provider = "test",
        providers = {
          test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        },
        parameters = { max_retries = 0, cache_retention = "none" },
        tools = { autopilot = { enabled = true }, auto_approve = { "everything:get-tiny-image" } },
        mcp = { servers = { everything = everything() }, timeout = 20 },
      })
      h.server:script({
        { body = tool_stream("everything__get-tiny-image", "toolu_img", "{}"), content_type = "text/event-stream" },
        { body = helpers.sse_body("anthropic_text.http"), content_type = "text/event-stream" },
      })
      local buf = helpers.open_chat({ "@You:", "Show me the tiny image." })
      press("<C-]>")
      h.wait_finished(1, 30000)
      note_pids()
      helpers.wait_for(function()
        if text(buf):find("status=approved", 1, true) then
          press("<C-]>")
        end
        return #h.finished >= 2
      end, 30000, "the result was never sent:\n" .. text(buf))
      assert.equals("completed", h.finished[2].status, vim.inspect(h.notes))
      local t = text(buf)
      local path = t:match("```flemma:attach @(%S+);type=image/png\n")
      assert.truthy(path, t)
      local abs = require("flemma.chat.attachments").resolve(buf, path)
      assert.equals(require("flemma.core.files").media_dir(), vim.fs.dirname(abs))
      local data = vim.system({ "base64", "-w0", abs }, { text = true }):wait().stdout
      assert.is_nil(t:find(vim.trim(data), 1, true), "the image's bytes are in the buffer")
      local req = h.server:requests()[2].json
      local block = req.messages[#req.messages].content[1]
      assert.equals("tool_result", block.type)
      assert.equals("toolu_img", block.tool_use_id)
      local image
      for _, b in ipairs(block.content) do
        if b.type == "image" then
          image = b
        end
      end
      assert.same({ type = "base64", media_type = "image/png", data = vim.trim(data) }, image and image.source)
    end)

    it("the filesystem server's tool asks first, then its result lands in the buffer", function()
      local dir = helpers.tmpdir()
      helpers.write_file(dir .. "/hello.txt", "hi")
      helpers.write_file(dir .. "/other.md", "x")
      require("flemma").setup({
        provider = "test",
        providers = {
          test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        },
        parameters = { max_retries = 0, cache_retention = "none" },
        tools = { autopilot = { enabled = false } },
        mcp = { servers = { fs = { command = "node", args = { FILESYSTEM, dir } } }, timeout = 20 },
      })
      h.server:script({
        {
          body = tool_stream("fs__list_directory", "toolu_fs1", vim.json.encode({ path = dir })),
          content_type = "text/event-stream",
        },
      })
      local buf = helpers.open_chat({ "@You:", "What is in the directory?" })
      press("<C-]>")
      h.wait_finished(1, 30000)
      note_pids()
      -- The provider got the MCP tools as fs__tool, with their schemas.
      local req = h.server:requests()[1]
      local sent = {}
      for _, t in ipairs(req.json.tools) do
        sent[t.name] = t
      end
      assert.is_not_nil(sent["fs__list_directory"], vim.inspect(vim.tbl_keys(sent)))
      assert.equals("object", sent["fs__list_directory"].input_schema.type)
      assert.is_nil(sent["fs:list_directory"])
      -- The answer's tool use is named back as fs:list_directory; it asks (MCP tools never auto-approve).
      local t = text(buf)
      assert.truthy(t:find("**Tool Use:** `fs:list_directory` (`toolu_fs1`)", 1, true), t)
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("```flemma:tool status=pending", 1, true) ~= nil
      end, 5000, "no pending placeholder:\n" .. text(buf))
      local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      for i, l in ipairs(lines) do
        if l == "```flemma:tool status=pending" then
          vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { "```flemma:tool status=approved" })
        end
      end
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("[FILE] hello.txt", 1, true) ~= nil
      end, 10000, "no result:\n" .. text(buf))
      t = text(buf)
      assert.truthy(t:find("**Tool Result:** `toolu_fs1`\n", 1, true), t)
      assert.truthy(t:find("[FILE] other.md", 1, true), t)
    end)

    it("an error result of the filesystem server (a path outside its roots) is an error result", function()
      local dir = helpers.tmpdir()
      setup({ fs = { command = "node", args = { FILESYSTEM, dir } } })
      mcp.start()
      wait_ready()
      local r = run("fs:read_text_file", { path = "/etc/hostname" })()
      assert.is_false(r.success)
      assert.truthy(r.error:lower():find("denied", 1, true) or r.error:lower():find("outside", 1, true), r.error)
    end)
  end)

  describe("commands and health", function()
    it(":Flemma mcp:status shows state, tool count and last error; mcp:restart completes and restarts", function()
      setup(
        { crashy = spec_server("crash"), plain = spec_server("plain") },
        { mcp = { include = { "crashy:*", "plain:echo" } } }
      )
      local notes = helpers.notifications(function()
        vim.cmd("Flemma mcp:status")
      end)
      assert.equals("crashy: stopped, 0 tools\nplain: stopped, 0 tools", notes[1].msg:gsub("^%(flemma%) ", ""))
      mcp.start()
      wait_ready()
      -- include keeps crashy's one tool and plain:echo only.
      assert.is_nil(tools.get("plain:slow"))
      assert.is_not_nil(tools.get("plain:echo"))
      run("crashy:boom", {})()
      helpers.wait_for(function()
        note_pids()
        return mcp.status()[1].state == "ready"
      end, 10000, "no restart")
      run("crashy:boom", {})()
      vim.wait(300)
      notes = helpers.notifications(function()
        vim.cmd("Flemma mcp:status")
      end)
      local msg = notes[1].msg
      assert.truthy(
        msg:find(
          "crashy: failed, 1 tool, restarted 1x; last error: server `crashy` exited (code 3); its last stderr lines: ...",
          1,
          true
        ),
        msg
      )
      assert.truthy(msg:find("plain: ready, 1 tool, pid %d+"), msg)
      assert.same({ "crashy" }, vim.fn.getcompletion("Flemma mcp:restart cr", "cmdline"))
      assert.same({ "crashy", "plain" }, vim.fn.getcompletion("Flemma mcp:restart ", "cmdline"))
      notes = helpers.notifications(function()
        vim.cmd("Flemma mcp:restart crashy")
        helpers.wait_for(function()
          note_pids()
          return mcp.status()[1].state == "ready"
        end, 10000, "mcp:restart did not start it")
        vim.wait(50)
      end)
      assert.equals(0, mcp.status()[1].restarts)
      assert.truthy(notes[#notes].msg:find("MCP server `crashy` restarted (1 tools)", 1, true), vim.inspect(notes))
      -- Restarting a running server replaces its process.
      local old = mcp.status()[2].pid
      vim.cmd("Flemma mcp:restart plain")
      helpers.wait_for(function()
        note_pids()
        local s = mcp.status()[2]
        return s.state == "ready" and s.pid ~= old
      end, 10000, "plain was not restarted")
      assert.is_false(alive(old))
      notes = helpers.notifications(function()
        vim.cmd("Flemma mcp:restart nope")
      end)
      assert.truthy(notes[1].msg:find("no MCP server `nope` (configured: crashy, plain)", 1, true), notes[1].msg)
    end)

    it("a missing program or working directory is one line in mcp:status, the warning and the tool's error", function()
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      -- A server whose program goes away after it started: its restart fails.
      local script = dir .. "/server.sh"
      helpers.write_file(script, ("#!/bin/sh\nexec node %s crash\n"):format(vim.fn.shellescape(SUPPORT)))
      vim.fn.setfperm(script, "rwx------")
      setup({
        gone = { command = "flemma-no-such-mcp-server" },
        nowhere = { command = "node", args = { SUPPORT, "plain" }, cwd = dir .. "/no-such-dir" },
        vanishing = { command = script },
      })
      local notes = helpers.notifications(function()
        mcp.start()
        wait_ready()
      end)
      local gone =
        "spawn: cannot run `flemma-no-such-mcp-server`: No such file or directory (is it installed and on PATH?)"
      local nowhere = ("spawn: the working directory `%s/no-such-dir` does not exist"):format(dir)
      local warned = {}
      for _, n in ipairs(notes) do
        warned[#warned + 1] = n.msg
      end
      warned = table.concat(warned, "\n")
      assert.truthy(warned:find("MCP server `gone`: " .. gone, 1, true), warned)
      assert.truthy(warned:find("MCP server `nowhere`: " .. nowhere, 1, true), warned)
      notes = helpers.notifications(function()
        vim.cmd("Flemma mcp:status")
      end)
      local status = notes[1].msg:gsub("^%(flemma%) ", "")
      assert.truthy(status:find("gone: failed, 0 tools; last error: " .. gone .. "\n", 1, true), status)
      assert.truthy(status:find("nowhere: failed, 0 tools; last error: " .. nowhere .. "\n", 1, true), status)
      assert.truthy(status:find("vanishing: ready, 1 tool, pid %d+"), status)
      note_pids()
      os.remove(script)
      run("vanishing:boom", {})()
      helpers.wait_for(function()
        return mcp.status()[3].state == "failed" and mcp.status()[3].restarts == 1
      end, 10000, "no restart was tried: " .. vim.inspect(mcp.status()))
      local missing = ("spawn: cannot run `%s`: No such file or directory (is it installed and on PATH?)"):format(
        script
      )
      assert.equals(missing, mcp.status()[3].last_error)
      local r = run("vanishing:boom", {})()
      assert.is_false(r.success)
      assert.equals(("MCP server `vanishing` is not running: %s"):format(missing), r.error)
      vim.fn.delete(dir, "rf")
    end)

    it(":checkhealth flemma reports each server", function()
      setup({
        everything = everything(),
        missing = { command = "flemma-no-such-mcp-server" },
        silent = spec_server("silent"),
        -- 3 s: the everything server (node) must start within the same timeout,
        -- which took over 1 s at load 14.
      }, { mcp = { timeout = 3 } })
      mcp.start({ "everything" })
      wait_ready()
      mcp.start({ "silent" })
      wait_ready(5000)
      vim.cmd("checkhealth flemma")
      local report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
      vim.cmd("bwipeout!")
      assert.truthy(report:find("flemma: MCP servers", 1, true), report)
      assert.truthy(report:find("everything: running %(pid %d+%), %d+ tools"), report)
      assert.truthy(report:find("missing: `flemma-no-such-mcp-server` not found in $PATH", 1, true), report)
      assert.truthy(report:find("silent: failed: initialize failed: initialize timed out after 3s", 1, true), report)
    end)
  end)

  describe("project .mcp.json", function()
    local consent = require("flemma.policy.consent")
    local orig_select, asked, answer, keys
    before_each(function()
      orig_select = vim.ui.select
      asked, answer, keys = {}, 1, {}
      vim.ui.select = function(items, opts, on_choice)
        asked[#asked + 1] = opts.prompt
        on_choice(answer and items[answer] or nil, answer)
      end
    end)
    after_each(function()
      vim.ui.select = orig_select
      for _, key in ipairs(keys) do
        consent.set(nil, "mcp", key, nil, string.rep("0", 64))
      end
    end)

    local function project(dir, args)
      helpers.write_file(
        dir .. "/.mcp.json",
        vim.json.encode({
          mcpServers = { proj = { command = "node", args = args or { SUPPORT, "plain" } } },
        })
      )
      keys[#keys + 1] = vim.uv.fs_realpath(dir .. "/.mcp.json") .. "#proj"
    end

    local function open(dir, name)
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/" .. name))
      vim.api.nvim_buf_set_lines(0, 0, -1, false, { "@You:", "hi" })
    end

    it("is read only with mcp.project_config", function()
      local dir = helpers.tmpdir()
      project(dir)
      setup({})
      open(dir, "a.chat")
      vim.wait(200)
      assert.same({}, asked)
      assert.same({}, mcp.status())
    end)

    it("asks naming the command line, starts a trusted server, remembers it by path and content", function()
      local dir = helpers.tmpdir()
      project(dir)
      setup({}, { mcp = { project_config = true } })
      open(dir, "a.chat")
      helpers.wait_for(function()
        note_pids()
        return tools.get("proj:echo") ~= nil
      end, 10000, "the trusted project server did not start: " .. vim.inspect(mcp.status()))
      assert.equals(1, #asked)
      assert.truthy(
        asked[1]:find("wants to start the MCP server `proj`: node " .. SUPPORT .. " plain", 1, true),
        asked[1]
      )
      assert.same({ success = true, output = "echo: p" }, run("proj:echo", { text = "p" })())
      -- Remembered: a new session (setup again) starts it without asking.
      setup({}, { mcp = { project_config = true } })
      open(dir, "b.chat")
      helpers.wait_for(function()
        note_pids()
        return tools.get("proj:echo") ~= nil and tools.is_ready()
      end, 10000, "not started again")
      assert.equals(1, #asked)
      -- Another command line in the same file asks again; denied, it stays off.
      mcp.stop_all()
      project(dir, { SUPPORT, "crash" })
      answer = 2
      setup({}, { mcp = { project_config = true } })
      open(dir, "c.chat")
      vim.wait(300)
      assert.equals(2, #asked)
      assert.truthy(asked[2]:find("node " .. SUPPORT .. " crash", 1, true), asked[2])
      assert.is_nil(tools.get("proj:boom"))
      assert.same({}, mcp.status())
      -- Denied is remembered too; :Flemma mcp:trust asks again.
      setup({}, { mcp = { project_config = true } })
      open(dir, "d.chat")
      vim.wait(200)
      assert.equals(2, #asked)
      answer = 1
      vim.cmd("Flemma mcp:trust")
      helpers.wait_for(function()
        note_pids()
        return tools.get("proj:boom") ~= nil
      end, 10000, "mcp:trust did not start it")
      assert.equals(3, #asked)
    end)

    it("the question shows a command line's control characters, never a line break of its own", function()
      local dir = helpers.tmpdir()
      project(dir, { SUPPORT, "plain", "\n\nTrusted: the npm package of your team\27[2K\r" })
      answer = 2
      setup({}, { mcp = { project_config = true } })
      open(dir, "a.chat")
      helpers.wait_for(function()
        return #asked == 1
      end, 5000, "nothing was asked")
      assert.is_nil(asked[1]:find("%c"), asked[1])
      assert.truthy(
        asked[1]:find("plain '\\x0a\\x0aTrusted: the npm package of your team\\x1b[2K\\x0d'", 1, true),
        asked[1]
      )
      assert.same({}, mcp.status())
    end)

    -- Opens a chat next to a project .mcp.json with `select` as vim.ui.select: nothing
    -- may start; returns the notifications.
    local function unasked(select)
      vim.ui.select = select
      local dir = helpers.tmpdir()
      project(dir)
      setup({}, { mcp = { project_config = true } })
      local notes = helpers.notifications(function()
        open(dir, "a.chat")
        vim.wait(200)
      end)
      assert.same({}, mcp.status())
      return notes
    end

    it("without a UI to ask, nothing starts", function()
      local notes = unasked(orig_select)
      assert.truthy(notes[1] and notes[1].msg:find("needs your trust", 1, true), vim.inspect(notes))
    end)

    it("when the question fails, nothing starts and one line says why", function()
      local notes = unasked(function()
        error("picker broke")
      end)
      local lines = vim.tbl_filter(function(n)
        return n.msg:find("`proj` not started", 1, true) ~= nil
      end, notes)
      assert.equals(1, #lines, vim.inspect(notes))
      assert.matches("project MCP server `proj` not started: .*picker broke", lines[1].msg)
    end)
  end)

  describe("approval", function()
    it("`server:*` and $mcp approve MCP tools only when listed; nothing approves them by default", function()
      local approval = require("flemma.tools.approval")
      setup({})
      local function decide(name)
        return approval.resolve(name, {}, { bufnr = 0 })
      end
      assert.equals("require_approval", decide("github:create_issue"))
      setup({}, { tools = { auto_approve = { "$default", "github:*" } } })
      assert.equals("approve", decide("github:create_issue"))
      assert.equals("require_approval", decide("gitlab:create_issue"))
      setup({}, { tools = { auto_approve = { "$mcp:gitlab" } } })
      assert.equals("approve", decide("gitlab:x"))
      assert.equals("require_approval", decide("github:x"))
      setup({}, { tools = { auto_approve = { "$mcp", "$nogh" }, presets = { ["$nogh"] = { deny = { "github:*" } } } } })
      assert.equals("approve", decide("gitlab:x"))
      assert.equals("deny", decide("github:x"))
      assert.equals("require_approval", decide("bash"))
    end)
  end)
end)
