local process = require("flemma.core.process")
local helpers = require("spec.support.helpers")

-- Live (non-zombie) processes whose process group is pgid.
local function alive_in_group(pgid)
  local n = 0
  for _, name in ipairs(vim.fn.readdir("/proc")) do
    if name:match("^%d+$") then
      local stat = helpers.read_file("/proc/" .. name .. "/stat")
      if stat then
        local state, pgrp = stat:match("%) (%S) %d+ (%d+)")
        if tonumber(pgrp) == pgid and state ~= "Z" then
          n = n + 1
        end
      end
    end
  end
  return n
end

-- Runs opts to completion and returns the result (and the handle).
local function run(opts, timeout)
  local result
  local h = process.spawn(opts, function(r)
    result = r
  end)
  helpers.wait_for(function()
    return result ~= nil
  end, timeout or 10000, "process did not finish: " .. table.concat(opts.cmd, " "))
  return result, h
end

local function rss_kb()
  return tonumber(helpers.read_file("/proc/self/status"):match("VmRSS:%s*(%d+)"))
end

describe("flemma.core.process", function()
  after_each(function()
    helpers.cleanup()
  end)

  describe("spawn", function()
    it("reports the exit code and the merged output in arrival order", function()
      local r, h = run({ cmd = { "bash", "-c", "echo one; echo two >&2; echo three; exit 3" } })
      assert.equal(3, r.code)
      assert.is_nil(r.signal)
      assert.equal("one\ntwo\nthree\n", r.output)
      assert.equal(3, r.total_lines)
      assert.equal(14, r.total_bytes)
      assert.is_false(r.truncated)
      assert.is_nil(r.full_output_path)
      assert.is_false(h:is_running())
      assert.is_true(h.pid > 0)
    end)

    it("keeps stdout and stderr apart when merge_output is false", function()
      local r = run({ cmd = { "bash", "-c", "echo out; echo err >&2" }, merge_output = false })
      assert.equal("out\n", r.output)
      assert.equal("err\n", r.stderr)
      assert.equal(0, r.code)
    end)

    it("reports the signal that ended the process", function()
      local r = run({ cmd = { "bash", "-c", "kill -KILL $$" } })
      assert.is_nil(r.code)
      assert.equal(9, r.signal)
    end)

    it("gives the child a closed stdin so that `read` gets EOF", function()
      local r = run({ cmd = { "bash", "-c", 'read -r line; echo "rc=$? line=[$line]"' } }, 3000)
      assert.equal("rc=1 line=[]\n", r.output)
    end)

    it("writes the given stdin content, then closes stdin", function()
      local r = run({ cmd = { "bash", "-c", "cat; echo; echo end" }, stdin = "hello\nworld" })
      assert.equal("hello\nworld\nend\n", r.output)
    end)

    it("accepts writes while stdin is kept open", function()
      local result
      local h = process.spawn({ cmd = { "cat" }, keep_stdin_open = true }, function(r)
        result = r
      end)
      h:write("abc\n")
      h:write("def\n")
      h:close_stdin()
      helpers.wait_for(function()
        return result ~= nil
      end)
      assert.equal("abc\ndef\n", result.output)
      local ok, err = pcall(h.write, h, "late")
      assert.is_false(ok)
      assert.is_truthy(err:find("stdin is not open", 1, true))
    end)

    it("applies cwd, extra env and the non-interactive environment", function()
      local dir = helpers.tmpdir()
      local r = run({
        cmd = { "bash", "-c", 'pwd; echo "$FOO|$CI|$DEBIAN_FRONTEND|$PAGER|$GIT_TERMINAL_PROMPT|$HOME"' },
        cwd = dir,
        env = { FOO = "bar baz" },
      })
      assert.equal(dir .. "\nbar baz|true|noninteractive|cat|0|" .. vim.env.HOME .. "\n", r.output)
    end)

    it("runs a program given by a path relative to its working directory", function()
      local dir = helpers.tmpdir()
      helpers.write_file(dir .. "/tool.sh", "#!/bin/sh\necho from-tool\n")
      vim.uv.fs_chmod(dir .. "/tool.sh", 493)
      local r = run({ cmd = { "./tool.sh" }, cwd = dir })
      assert.equal("from-tool\n", r.output)
    end)

    it("runs a program found in PATH under the name it was given, scripts without #! under sh", function()
      local dir = helpers.tmpdir()
      vim.fn.mkdir(dir .. "/bin", "p")
      vim.fn.mkdir(dir .. "/rel", "p")
      helpers.write_file(dir .. "/bin/flemma-plain", 'echo "plain $1"\nexit 5\n')
      vim.uv.fs_chmod(dir .. "/bin/flemma-plain", 493)
      helpers.write_file(dir .. "/rel/flemma-rel", "#!/bin/sh\necho rel\n")
      vim.uv.fs_chmod(dir .. "/rel/flemma-rel", 493)
      local path = dir .. "/bin:rel:" .. vim.env.PATH
      local r = run({ cmd = { "flemma-plain", "x" }, env = { PATH = path } })
      assert.equal("plain x\n", r.output)
      assert.equal(5, r.code)
      -- argv[0] is the name given, not the file found
      r = run({ cmd = { "bash", "-c", 'tr "\\0" " " < /proc/$$/cmdline' }, env = { PATH = path } })
      assert.equal('bash -c tr "\\0" " " < /proc/$$/cmdline ', r.output)
      -- a relative PATH entry is searched from the child's working directory
      r = run({ cmd = { "flemma-rel" }, cwd = dir, env = { PATH = path } })
      assert.equal("rel\n", r.output)
      assert.equal(0, r.code)
    end)

    it("runs each child in a session and process group of its own", function()
      local r, h = run({ cmd = { "bash", "-c", "ps -o pid=,pgid=,sid= -p $$" } })
      local pid, pgid, sid = r.output:match("(%d+)%s+(%d+)%s+(%d+)")
      -- h.pid leads the group: the reaper (flemma-reap), the command's parent's parent
      assert.are_not.equal(h.pid, tonumber(pid))
      assert.equal(h.pid, tonumber(pgid))
      assert.equal(h.pid, tonumber(sid))
    end)

    it("gives the child only descriptors 0, 1 and 2, even ones Neovim left inheritable", function()
      local leaky = assert(io.open("/dev/null", "r")) -- fopen: no close-on-exec
      local r = run({ cmd = { "bash", "-c", "ls /proc/$$/fd; true" } })
      leaky:close()
      assert.equal("0\n1\n2\n", r.output)
    end)

    it("leaves no descriptor open in Neovim once its children finished", function()
      local function fds()
        return #vim.fn.readdir("/proc/self/fd")
      end
      run({ cmd = { "true" } })
      vim.wait(100)
      local before = fds()
      for _ = 1, 20 do
        run({ cmd = { "true" } })
      end
      vim.wait(2000, function()
        return fds() == before
      end, 10)
      assert.equal(before, fds(), "descriptors left open after 20 children")
    end)

    it("raises a clear error for a bad request", function()
      local cases = {
        { { cmd = {} }, "`cmd` should be a non-empty list" },
        { { cmd = { "true" }, cwd = "/nonexistent/dir" }, "working directory `/nonexistent/dir` does not exist" },
        { { cmd = { "flemma-no-such-program" } }, "cannot run `flemma-no-such-program`" },
        { { cmd = { "true" }, timeout = "1" }, "`timeout` should be a number" },
        { { cmd = { "true" }, env = { ["A=B"] = "x" } }, "`env` keys should be variable names" },
      }
      for _, c in ipairs(cases) do
        local ok, err = pcall(process.spawn, c[1], function() end)
        assert.is_false(ok)
        assert.is_truthy(err:find(c[2], 1, true), err)
        assert.equal("(flemma) ", err:sub(1, 9))
      end
    end)

    it("runs 100 short processes at the same time", function()
      local results, handles = {}, {}
      for i = 1, 100 do
        handles[i] = process.spawn({ cmd = { "bash", "-c", "echo n" .. i .. "; exit " .. (i % 7) } }, function(r)
          results[i] = r
        end)
      end
      helpers.wait_for(function()
        return vim.tbl_count(results) == 100
      end, 20000, "not all 100 processes finished")
      for i = 1, 100 do
        assert.equal(i % 7, results[i].code)
        assert.equal("n" .. i .. "\n", results[i].output)
      end
      -- no zombies left behind: every leader was reaped
      for i = 1, 100 do
        assert.is_nil(helpers.read_file("/proc/" .. handles[i].pid .. "/stat"))
      end
    end)
  end)

  describe("timeout and cancel", function()
    it("a timeout ends the whole group, background children included", function()
      local t0 = vim.uv.hrtime()
      local r, h = run({ cmd = { "bash", "-c", "sleep 100 & sleep 100 & echo started; wait" }, timeout = 300 })
      local elapsed = (vim.uv.hrtime() - t0) / 1e6
      assert.is_true(r.timed_out)
      assert.is_false(r.cancelled)
      assert.equal("started\n", r.output)
      assert.is_true(elapsed < 3000, "took " .. elapsed .. " ms")
      helpers.wait_for(function()
        return alive_in_group(h.pid) == 0
      end, 3000, "processes of the group survived the timeout")
    end)

    it("cancel ends the whole group and reports cancelled", function()
      local result
      local h = process.spawn({ cmd = { "bash", "-c", "sleep 100 & sleep 100 & wait" } }, function(r)
        result = r
      end)
      helpers.wait_for(function()
        -- the reaper (flemma-reap, the group's leader), the shell and its two children
        return alive_in_group(h.pid) == 4
      end, 3000, "the shell and its two children did not start")
      assert.is_true(h:is_running())
      h:cancel()
      helpers.wait_for(function()
        return result ~= nil
      end, 5000)
      assert.is_true(result.cancelled)
      assert.is_false(result.timed_out)
      assert.equal(15, result.signal)
      helpers.wait_for(function()
        return alive_in_group(h.pid) == 0
      end, 3000, "processes of the group survived the cancel")
    end)

    it("sends SIGKILL after the grace period to a process that ignores SIGTERM", function()
      local t0 = vim.uv.hrtime()
      local r = run({
        cmd = { "bash", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done" },
        timeout = 200,
        kill_grace = 300,
      })
      local elapsed = (vim.uv.hrtime() - t0) / 1e6
      assert.is_true(r.timed_out)
      assert.equal(9, r.signal)
      assert.is_true(elapsed >= 450, "killed too early: " .. elapsed)
      assert.is_true(elapsed < 3000, "killed too late: " .. elapsed)
    end)

    it("kill_all ends every running group at once", function()
      local results, handles = {}, {}
      for i = 1, 3 do
        handles[i] = process.spawn({ cmd = { "bash", "-c", "sleep 100 & wait" } }, function(r)
          results[i] = r
        end)
      end
      helpers.wait_for(function()
        return alive_in_group(handles[3].pid) == 3 -- the reaper, bash, sleep
      end)
      assert.equal(3, #process.running())
      process.kill_all()
      helpers.wait_for(function()
        return vim.tbl_count(results) == 3
      end, 5000)
      for i = 1, 3 do
        assert.is_true(results[i].cancelled)
        assert.equal(9, results[i].signal)
        helpers.wait_for(function()
          return alive_in_group(handles[i].pid) == 0
        end, 3000, "a process of the group survived kill_all")
      end
    end)

    it("kills running children when Neovim exits #child", function()
      local dir = helpers.tmpdir()
      local pidfile = dir .. "/pid"
      local res = helpers.run_nvim({
        rtp = helpers.root,
        lua = ([[
          vim.g.flemma_library_path = %q
          local h = require("flemma.core.process").spawn({ cmd = { "bash", "-c", "sleep 100 & wait" } }, function() end)
          local f = io.open(%q, "w"); f:write(tostring(h.pid)); f:close()
          vim.wait(300)
        ]]):format(require("flemma.core.native").library_path(), pidfile),
      })
      assert.equal(0, res.code, res.stderr)
      local pid = tonumber(helpers.read_file(pidfile))
      assert.is_truthy(pid)
      helpers.wait_for(function()
        return alive_in_group(pid) == 0
      end, 3000, "the child group outlived Neovim")
    end)
  end)

  describe("async_spawn", function()
    it("on_start brings the pid first; stdin written at once reaches it; the timeout counts from the spawn", function()
      local result, started, order = nil, nil, {}
      local h = process.spawn({
        cmd = { "bash", "-c", "cat; echo done; sleep 100" },
        async_spawn = true,
        keep_stdin_open = true,
        timeout = 400,
        on_progress = function()
          order[#order + 1] = "progress"
        end,
        on_start = function(pid)
          started = pid
          order[#order + 1] = "start"
        end,
      }, function(r)
        result = r
        order[#order + 1] = "exit"
      end)
      assert.is_nil(h.pid)
      h:write("given\n")
      h:close_stdin()
      helpers.wait_for(function()
        return result ~= nil
      end, 10000, "the process did not finish")
      assert.is_true(started > 0)
      assert.equal(started, h.pid)
      assert.equal("start", order[1])
      assert.equal("exit", order[#order])
      assert.is_true(result.timed_out)
      assert.is_nil(result.error)
      assert.equal("given\ndone\n", result.output)
      helpers.wait_for(function()
        return alive_in_group(started) == 0
      end, 3000, "processes of the group survived the timeout")
    end)

    it("a missing program or working directory ends it with one line in result.error", function()
      local cases = {
        {
          { cmd = { "flemma-no-such-program" } },
          "spawn: cannot run `flemma-no-such-program`: No such file or directory (is it installed and on PATH?)",
        },
        {
          { cmd = { "true" }, cwd = "/nonexistent/dir" },
          "spawn: the working directory `/nonexistent/dir` does not exist",
        },
      }
      for _, c in ipairs(cases) do
        local opts = vim.tbl_extend("force", c[1], {
          async_spawn = true,
          on_start = function()
            error("on_start ran for " .. c[2])
          end,
        })
        local r, h = run(opts)
        assert.equal(c[2], r.error)
        assert.is_nil(r.code)
        assert.is_false(r.cancelled)
        assert.is_nil(h.pid)
      end
      -- A request that cannot be used is still raised at once.
      local ok, err = pcall(process.spawn, { cmd = { "true" }, async_spawn = true, timeout = "1" }, function() end)
      assert.is_false(ok)
      assert.truthy(err:find("`timeout` should be a number", 1, true), err)
      ok, err = pcall(process.spawn, { cmd = { "true" }, on_start = function() end }, function() end)
      assert.is_false(ok)
      assert.truthy(err:find("`on_start` needs `async_spawn`", 1, true), err)
    end)

    it("a cancel or kill_all at once leaves nothing running", function()
      local dir = helpers.tmpdir()
      for _, how in ipairs({ "cancel", "kill_all" }) do
        local results, pids = {}, {}
        for i = 1, 5 do
          local h = process.spawn({
            cmd = { "bash", "-c", ("echo $$ > %s/%s%d; sleep 100"):format(dir, how, i) },
            async_spawn = true,
            on_start = function(pid)
              pids[#pids + 1] = pid
            end,
          }, function(r)
            results[i] = r
          end)
          if how == "cancel" then
            h:cancel()
          end
        end
        if how == "kill_all" then
          process.kill_all()
        end
        helpers.wait_for(function()
          return vim.tbl_count(results) == 5
        end, 10000, "not all of them ended after " .. how)
        for i = 1, 5 do
          assert.is_true(results[i].cancelled, how)
        end
        for _, pid in ipairs(pids) do
          helpers.wait_for(function()
            return alive_in_group(pid) == 0
          end, 3000, "a group survived " .. how)
        end
        -- A shell that ran before the kill is gone as well.
        for i = 1, 5 do
          local pid = tonumber(helpers.read_file(("%s/%s%d"):format(dir, how, i)) or "")
          if pid then
            helpers.wait_for(function()
              return helpers.read_file("/proc/" .. pid .. "/stat") == nil
            end, 3000, "a shell survived " .. how)
          end
        end
      end
    end)

    it("kills its children when Neovim exits, also one asked for just before #child", function()
      for _, when in ipairs({ "started", "at once" }) do
        local dir = helpers.tmpdir()
        helpers.run_nvim({
          rtp = helpers.root,
          lua = ([[
            vim.g.flemma_library_path = %q
            local pid
            require("flemma.core.process").spawn({
              cmd = { "bash", "-c", "echo $$ > %s/shell; sleep 100 & wait" },
              async_spawn = true,
              on_start = function(p) pid = p end,
            }, function() end)
            if %s then
              vim.wait(5000, function() return pid ~= nil end)
              local f = io.open(%q, "w"); f:write(tostring(pid)); f:close()
              vim.wait(200)
            end
          ]]):format(
            require("flemma.core.native").library_path(),
            dir,
            tostring(when == "started"),
            dir .. "/pid"
          ),
        })
        local pid = tonumber(helpers.read_file(dir .. "/pid") or "")
        if when == "started" then
          assert.is_truthy(pid)
          helpers.wait_for(function()
            return alive_in_group(pid) == 0
          end, 3000, "the child group outlived Neovim")
        end
        vim.wait(300)
        local shell = tonumber(helpers.read_file(dir .. "/shell") or "")
        if shell then
          helpers.wait_for(function()
            return helpers.read_file("/proc/" .. shell .. "/stat") == nil
          end, 3000, "the shell outlived Neovim (" .. when .. ")")
        end
      end
    end)
  end)

  describe("jobs that leave the group", function()
    -- A pid file per background job: `setsid` starts a new session, the
    -- subshell of `( ... & )` exits at once (a double fork, as daemons do).
    local escapes = "setsid sleep 1000 & echo $! > %s/a; (setsid sleep 1000 & echo $! > %s/b) ; "
      .. "( (sleep 1000 & echo $! > %s/c) & ) ; sleep 0.2; echo started; %s"

    local function pids(dir)
      local out = {}
      for _, n in ipairs({ "a", "b", "c" }) do
        out[#out + 1] = assert(tonumber(helpers.read_file(dir .. "/" .. n)), "no pid in " .. n)
      end
      return out
    end

    local function alive(pid)
      local stat = helpers.read_file("/proc/" .. pid .. "/stat")
      return stat ~= nil and stat:match("%) (%S)") ~= "Z"
    end

    local function assert_all_die(list, what)
      helpers.wait_for(function()
        for _, pid in ipairs(list) do
          if alive(pid) then
            return false
          end
        end
        return true
      end, 5000, "a background job survived " .. what)
    end

    local function script(dir, tail)
      return escapes:format(dir, dir, dir, tail)
    end

    it("cancel kills setsid and double-forked jobs", function()
      local dir = helpers.tmpdir()
      local result
      local h = process.spawn({ cmd = { "bash", "-c", script(dir, "sleep 1000") } }, function(r)
        result = r
      end)
      helpers.wait_for(function()
        for _, n in ipairs({ "a", "b", "c" }) do
          if not tonumber(helpers.read_file(dir .. "/" .. n) or "") then
            return false
          end
        end
        return true
      end, 10000, "the background jobs did not start")
      local list = pids(dir)
      for _, pid in ipairs(list) do
        assert.is_true(alive(pid))
      end
      h:cancel()
      helpers.wait_for(function()
        return result ~= nil
      end, 5000)
      assert.is_true(result.cancelled)
      assert_all_die(list, "the cancel")
    end)

    it("a timeout kills them too", function()
      local dir = helpers.tmpdir()
      local r = run({ cmd = { "bash", "-c", script(dir, "sleep 1000") }, timeout = 1000 })
      assert.is_true(r.timed_out)
      assert_all_die(pids(dir), "the timeout")
    end)

    it("they outlive a command that finished, until Neovim exits, however it ends #child", function()
      for _, how in ipairs({ "qa!", "SIGKILL" }) do
        local dir = helpers.tmpdir()
        local lua = ([[
          vim.g.flemma_library_path = %q
          local done
          require("flemma.core.process").spawn({ cmd = { "bash", "-c", %q } }, function(r) done = r end)
          vim.wait(5000, function() return done ~= nil end)
          local f = io.open(%q, "w"); f:write(tostring(done and done.code)); f:close()
          %s
        ]]):format(
          require("flemma.core.native").library_path(),
          script(dir, "true"),
          dir .. "/code",
          how == "SIGKILL" and "vim.wait(60000, function() return false end)" or ""
        )
        if how == "qa!" then
          helpers.run_nvim({ rtp = helpers.root, lua = lua })
        else
          -- Killed from outside while it runs: no exit handler of Neovim runs.
          local child = helpers.start_nvim({ rtp = helpers.root, lua = lua })
          helpers.wait_for(function()
            return helpers.read_file(dir .. "/code") ~= nil
          end, 10000, "the child Neovim did not run its command")
          child.kill(9)
          assert.equal(9, child.wait({ signal = 9 }, 5000).signal)
        end
        assert.equal("0", helpers.read_file(dir .. "/code"))
        assert_all_die(pids(dir), "Neovim's exit (" .. how .. ")")
      end
    end)

    it("keeps them while Neovim runs, when the command finished normally", function()
      local dir = helpers.tmpdir()
      local r = run({ cmd = { "bash", "-c", script(dir, "true") } })
      assert.equal(0, r.code)
      local list = pids(dir)
      vim.wait(300)
      for _, pid in ipairs(list) do
        assert.is_true(alive(pid), "a background job died with its finished command")
        vim.uv.kill(pid, "sigkill")
      end
    end)
  end)

  describe("bounded output", function()
    it("keeps the tail, counts everything and writes the whole output to a file", function()
      local r = run({ cmd = { "seq", "1", "300000" } })
      assert.is_true(r.truncated)
      assert.equal(300000, r.total_lines)
      local lines = vim.split(r.output, "\n", { trimempty = true })
      assert.equal(2000, #lines)
      assert.equal("298001", lines[1])
      assert.equal("300000", lines[#lines])
      assert.is_string(r.full_output_path)
      local full = helpers.read_file(r.full_output_path)
      assert.equal(r.total_bytes, #full)
      assert.equal(table.concat(vim.fn.range(1, 300000), "\n") .. "\n", full)
      os.remove(r.full_output_path)
    end)

    it("honours per-request limits", function()
      local r = run({ cmd = { "seq", "1", "100" }, max_lines = 5, max_bytes = 1000 })
      assert.equal("96\n97\n98\n99\n100\n", r.output)
      assert.is_true(r.truncated)
      os.remove(r.full_output_path)
    end)

    it("detects binary output and reports it instead of the bytes", function()
      local r = run({ cmd = { "printf", "abc\\000def" } })
      assert.is_true(r.binary)
      assert.is_nil(r.output:find("\0", 1, true))
      assert.is_truthy(r.output:find("binary output", 1, true))
      assert.equal("abc\0def", helpers.read_file(r.full_output_path))
      os.remove(r.full_output_path)
    end)

    it("reports progress at most every 100 ms with the last complete line", function()
      local seen = {}
      local r = run({
        cmd = { "bash", "-c", "for i in $(seq 1 8); do echo line$i; sleep 0.06; done" },
        on_progress = function(p)
          seen[#seen + 1] = { t = vim.uv.hrtime() / 1e6, p = p }
        end,
      })
      assert.equal(0, r.code)
      assert.is_true(#seen >= 2, "only " .. #seen .. " progress events")
      assert.is_true(#seen <= 6, #seen .. " progress events for ~500 ms")
      for _, s in ipairs(seen) do
        assert.is_truthy(s.p.last_line:match("^line%d$"), s.p.last_line)
        assert.is_true(s.p.bytes >= 6)
      end
    end)

    it("cuts a progress line longer than 512 bytes on a UTF-8 boundary", function()
      local seen
      run({
        -- "a" and 300 two-byte characters: byte 512 is inside one of them
        cmd = {
          "bash",
          "-c",
          "s=a; for i in $(seq 300); do s+=$'\\xc3\\xa9'; done; echo \"$s\"; sleep 0.2; printf x; sleep 0.2",
        },
        on_progress = function(p)
          seen = p.last_line
        end,
      })
      assert.equal("a" .. ("é"):rep(255), seen)
    end)

    it("streams 500 MB of output with flat memory", function()
      local before = rss_kb()
      local peak = before
      local timer = vim.uv.new_timer()
      timer:start(20, 20, function()
        local now = rss_kb()
        if now > peak then
          peak = now
        end
      end)
      -- seq 1 57000000 writes about 500 MB of distinct lines
      local r = run({ cmd = { "seq", "1", "57000000" } }, 120000)
      timer:stop()
      timer:close()
      assert.equal(0, r.code)
      assert.is_true(r.total_bytes > 500 * 1000 * 1000, "only " .. r.total_bytes)
      assert.equal(57000000, r.total_lines)
      assert.equal("57000000\n", r.output:sub(-9))
      assert.is_true((peak - before) < 64 * 1024, ("memory grew by %d KB"):format(peak - before))
      local st = vim.uv.fs_stat(r.full_output_path)
      assert.equal(r.total_bytes, st.size)
      os.remove(r.full_output_path)
    end)
  end)

  describe("spare_cpu_ms", function()
    local task_cpus, tree_tasks, command_tasks = helpers.task_cpus, helpers.tree_tasks, helpers.command_tasks
    local own = task_cpus(vim.fn.getpid())
    local n_own = vim.tbl_count(own)

    -- Spawns a command whose tree has a background job, a second process and two
    -- threads of one process (python), with the caller's CPU known: it is retried
    -- until the main thread was on the same CPU before and after the spawn call.
    local function spawn_tree(spare_ms)
      local script = "import threading,time\n"
        .. "threading.Thread(target=time.sleep,args=(60,)).start()\ntime.sleep(60)"
      for _ = 1, 50 do
        local before, pid = helpers.main_cpu(), nil
        local h = process.spawn({
          cmd = { "sh", "-c", ("sleep 60 & python3 -c '%s' & wait"):format(script) },
          async_spawn = true,
          spare_cpu_ms = spare_ms,
          on_start = function(p)
            pid = p
          end,
        }, function() end)
        local after = helpers.main_cpu()
        helpers.wait_for(function()
          return pid ~= nil
        end, 5000, "never started")
        helpers.wait_for(function()
          -- sh, sleep, python's two threads
          return #command_tasks(pid) >= 4
        end, 5000, "the tree never grew")
        if before == after then
          return h, pid, before
        end
        h:cancel()
      end
      error("the main thread moved during every spawn")
    end

    local function cpus_of(pid)
      local out = {}
      for _, t in ipairs(tree_tasks(pid)) do
        out[#out + 1] = { t.tid, vim.tbl_keys(task_cpus(t.pid, t.tid) or {}) }
      end
      return out
    end

    -- Waits until every task below pid may run on every CPU Neovim may.
    local function wait_all_back(pid)
      local ok = vim.wait(8000, function()
        for _, t in ipairs(tree_tasks(pid)) do
          local set = task_cpus(t.pid, t.tid)
          if set and not vim.deep_equal(set, own) then
            return false
          end
        end
        return true
      end, 10)
      assert(ok, "not every CPU back: " .. vim.inspect(cpus_of(pid)))
    end

    -- Every task of the command may run on every CPU but `cpu`.
    local function assert_spared(pid, cpu)
      -- A snapshot with sh, sleep and python's two threads (a shell's fork that is
      -- gone meanwhile does not count).
      local sets
      assert(
        vim.wait(5000, function()
          sets = {}
          for _, t in ipairs(command_tasks(pid)) do
            sets[#sets + 1] = task_cpus(t.pid, t.tid)
          end
          return #sets >= 4
        end, 10),
        "the tree never had 4 tasks: " .. vim.inspect(cpus_of(pid))
      )
      for _, set in ipairs(sets) do
        assert.is_nil(set[cpu], ("a task may run on CPU %d: %s"):format(cpu, vim.inspect(set)))
        assert.equal(n_own - 1, vim.tbl_count(set))
      end
    end

    it("keeps the command's tree off the caller's CPU until release_cpu()", function()
      if n_own < 2 then
        pending("needs two CPUs")
        return
      end
      local h, pid, cpu = spawn_tree(60000)
      assert_spared(pid, cpu)
      -- The reaper's own processes keep every CPU.
      local _, keeper = command_tasks(pid)
      assert.same(own, task_cpus(pid))
      assert.same(own, task_cpus(keeper))
      h:release_cpu()
      wait_all_back(pid)
      -- Still running, under the same reaper: only its CPUs changed.
      assert.is_true(h:is_running())
      h:cancel()
    end)

    it("gives the CPU back by itself after spare_cpu_ms", function()
      if n_own < 2 then
        pending("needs two CPUs")
        return
      end
      local h, pid, cpu = spawn_tree(3000)
      -- Off it first (the tree is complete well within 3 s), then back.
      assert_spared(pid, cpu)
      wait_all_back(pid)
      h:cancel()
    end)

    it("without spare_cpu_ms the command has every CPU", function()
      local h, pid = spawn_tree(nil)
      for _, t in ipairs(tree_tasks(pid)) do
        assert.same(own, task_cpus(t.pid, t.tid) or own)
      end
      h:release_cpu() -- a no-op
      h:cancel()
      local ok, err = pcall(process.spawn, { cmd = { "true" }, spare_cpu_ms = "1" }, function() end)
      assert.is_false(ok)
      assert.truthy(err:find("`spare_cpu_ms` should be a number", 1, true), err)
    end)
  end)
end)
