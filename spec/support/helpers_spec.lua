-- The test harness itself: a child Neovim that crashes, exits non-zero or fails in its
-- code fails the test that started it, and scripts/test.sh counts a crashed spec run.
local helpers = require("spec.support.helpers")

local function failure_of(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "the check let a failed child pass")
  return tostring(err)
end

describe("helpers.run_nvim", function()
  after_each(helpers.cleanup)

  it("returns the result of a child that exits 0", function()
    local res = helpers.run_nvim({ lua = "io.stdout:write('fine')" })
    assert.equals(0, res.code)
    assert.equals("fine", res.stdout)
  end)

  it("fails the test when the child dies on SIGSEGV", function()
    local lua = "io.stderr:write('about to crash\\n'); vim.uv.kill(vim.uv.os_getpid(), 'sigsegv'); vim.wait(5000)"
    local res = helpers.run_nvim({ lua = lua, allow_failure = true })
    assert.equals(11, res.signal)
    local err = failure_of(function()
      helpers.check_exit(res)
    end)
    assert.matches("killed by signal 11 (SIGSEGV)", err, 1, true)
    assert.matches("about to crash", err, 1, true)
    -- and without allow_failure, run_nvim itself fails
    err = failure_of(function()
      helpers.run_nvim({ lua = lua })
    end)
    assert.matches("killed by signal 11 (SIGSEGV)", err, 1, true)
  end)

  it("fails the test when the child dies on SIGSEGV in `nvim -l` mode", function()
    local err = failure_of(function()
      helpers.run_nvim({ script = true, lua = "vim.uv.kill(vim.uv.os_getpid(), 'sigsegv'); vim.wait(5000)" })
    end)
    assert.matches("killed by signal 11 (SIGSEGV)", err, 1, true)
  end)

  it("fails the test on a non-zero exit status", function()
    local err = failure_of(function()
      helpers.run_nvim({ lua = "vim.cmd('cquit 5')" })
    end)
    assert.matches("exited with status 5", err, 1, true)
  end)

  it("fails the test when the child's code raises an error", function()
    local err = failure_of(function()
      helpers.run_nvim({ lua = "error('boom in the child')" })
    end)
    assert.matches("exited with status 3", err, 1, true)
    assert.matches("boom in the child", err, 1, true)
    err = failure_of(function()
      helpers.run_nvim({ script = true, lua = "error('boom in the script')" })
    end)
    assert.matches("exited with status 1", err, 1, true)
    assert.matches("boom in the script", err, 1, true)
  end)

  it("fails the test when the child does not finish in time", function()
    local err = failure_of(function()
      helpers.run_nvim({ lua = "vim.wait(20000)", timeout = 500 })
    end)
    assert.matches("did not finish in time and was killed", err, 1, true)
  end)
end)

describe("helpers.start_nvim", function()
  after_each(helpers.cleanup)

  it("accepts the signal the spec killed the child with, and nothing else", function()
    local child = helpers.start_nvim({ lua = "vim.wait(20000)" })
    vim.wait(300)
    child.kill(9)
    assert.equals(9, child.wait({ signal = 9 }).signal)

    child = helpers.start_nvim({ lua = "vim.uv.kill(vim.uv.os_getpid(), 'sigsegv'); vim.wait(5000)" })
    local err = failure_of(function()
      child.wait({ signal = 9 })
    end)
    assert.matches("should have been killed by signal 9, but killed by signal 11 (SIGSEGV)", err, 1, true)
  end)
end)

describe("helpers.tmux_nvim", function()
  after_each(helpers.cleanup)

  it("stops a child that exits 0, and fails the test when the child crashed", function()
    local child = helpers.tmux_nvim({ socket = "flemma-harness-" .. vim.fn.getpid(), args = { "--clean" } })
    helpers.wait_for(function()
      return child.screen():find("[No Name]", 1, true) ~= nil
    end, 5000, "Neovim did not start in tmux")
    assert.equals(0, child.stop().code)

    local init = helpers.tmpdir() .. "/init.lua"
    helpers.write_file(init, "vim.defer_fn(function() vim.uv.kill(vim.uv.os_getpid(), 'sigsegv') end, 200)")
    child = helpers.tmux_nvim({ socket = "flemma-harness-" .. vim.fn.getpid(), args = { "--clean", "-u", init } })
    vim.wait(1000)
    local err = failure_of(child.stop)
    assert.matches("the Neovim in tmux exited with status 139 (signal 11, SIGSEGV)", err, 1, true)
  end)
end)

describe("scripts/test.sh", function()
  after_each(helpers.cleanup)

  local function suite(body)
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/crash_spec.lua", body)
    local res = vim
      .system({ helpers.root .. "/scripts/test.sh", dir }, {
        text = true,
        env = { NVIM_VERSIONS = "0.12.4", SUITE_TIMEOUT = "60" },
      })
      :wait(90000)
    return res, res.stdout .. res.stderr
  end

  it("counts a Neovim that crashes after busted printed its summary", function()
    local res, out = suite([[
      require("busted").subscribe({ "suite", "end" }, function()
        io.stdout:flush()
        vim.uv.kill(vim.uv.os_getpid(), "sigsegv")
      end)
      describe("x", function() it("passes", function() end) end)
    ]])
    assert.matches("busted: 1 passed, 0 failed, 0 errors", out, 1, true)
    assert.matches("Neovim 0.12.4 exited with status 139 (signal 11", out, 1, true)
    assert.matches("\n1 passed, 1 failed\n", out, 1, true)
    assert.is_not.equals(0, res.code)
  end)

  it("counts a Neovim that crashes before any summary", function()
    local res, out = suite([[
      describe("x", function() it("crashes", function() vim.uv.kill(vim.uv.os_getpid(), "sigsegv") end) end)
    ]])
    assert.matches("produced no summary (exited with status 139 (signal 11", out, 1, true)
    assert.matches("\n0 passed, 1 failed\n", out, 1, true)
    assert.is_not.equals(0, res.code)
  end)

  it("passes a clean run", function()
    local res, out = suite([[describe("x", function() it("passes", function() end) end)]])
    assert.matches("\n1 passed, 0 failed\n", out, 1, true)
    assert.equals(0, res.code)
  end)
end)

describe("helpers.send_harness", function()
  it("records notifications and finished requests, and puts vim.notify and the key back", function()
    local orig_notify = vim.notify
    local h = helpers.send_harness({ key = "sk-harness-spec" })
    assert.equals("sk-harness-spec", vim.env.FLEMMA_SPEC_KEY)
    vim.notify("hello", vim.log.levels.WARN)
    vim.notify("no level")
    assert.same(
      { { msg = "hello", level = vim.log.levels.WARN }, { msg = "no level", level = vim.log.levels.INFO } },
      h.notes
    )
    vim.api.nvim_exec_autocmds("User", { pattern = "FlemmaRequestFinished", data = { status = "completed" } })
    assert.equals("completed", h.wait_finished().status)
    local err = failure_of(function()
      h.wait_finished(2, 50)
    end)
    assert.matches("the request never finished (1 of 2); notes:\nhello\nno level", err, 1, true)
    local url = h.server:url("/v1/messages")
    h.teardown()
    assert.equals(orig_notify, vim.notify)
    assert.is_nil(vim.env.FLEMMA_SPEC_KEY)
    assert.is_nil(h.server.proc, "the server was not stopped")
    assert.same(
      {},
      vim.tbl_filter(function(a)
        return a.group_name == "spec_send_harness"
      end, vim.api.nvim_get_autocmds({ event = "User", pattern = "FlemmaRequestFinished" }))
    )
    assert.truthy(url:match("^http://127%.0%.0%.1:%d+/v1/messages$"), url)
  end)

  it("fails the test when a key appeared in a notification, even one forgotten since", function()
    local orig_notify = vim.notify
    local h = helpers.send_harness({ server = false, key = "sk-harness-one", secrets = { "sk-harness-two" } })
    vim.notify("leaked sk-harness-two here")
    h.forget_notes()
    assert.same({}, h.notes)
    local err = failure_of(h.teardown)
    assert.matches("a key appeared in a notification", err, 1, true)
    assert.equals(orig_notify, vim.notify)
  end)
end)

describe("the specs", function()
  -- A child Neovim started around the helpers would not have its exit checked.
  it("start child Neovims only through spec/support/helpers.lua", function()
    local offenders = {}
    for name, kind in vim.fs.dir(helpers.root .. "/spec", { depth = 5 }) do
      if kind == "file" and name:match("%.lua$") and not name:match("^support/") then
        local text = helpers.read_file(helpers.root .. "/spec/" .. name)
        for _, needle in ipairs({
          "nvim_cmd(",
          "v.progpath",
          "scripts/nvim",
          "/bin/nvim",
          '"nvim"',
          "termopen(",
          "jobstart(",
          "io.popen(",
        }) do
          if text:find(needle, 1, true) then
            offenders[#offenders + 1] = name .. ": " .. needle
          end
        end
      end
    end
    assert.same({}, offenders)
  end)
end)
