local sandbox = require("flemma.sandbox")
local process = require("flemma.process")
local config = require("flemma.config")
local helpers = require("spec.support.helpers")

local function run(argv, cwd)
  local result
  process.spawn({ cmd = argv, cwd = cwd }, function(r)
    result = r
  end)
  helpers.wait_for(function()
    return result ~= nil
  end, 10000)
  return result
end

-- A project directory with a repository skeleton and a startup file.
local function project()
  local dir = helpers.tmpdir()
  vim.fn.mkdir(dir .. "/.git/hooks", "p")
  helpers.write_file(dir .. "/.git/config", "[core]\n")
  helpers.write_file(dir .. "/.bashrc", "# rc\n")
  return dir
end

local function sandboxed(dir, cmd, network)
  local argv, err = sandbox.wrap_command({ "bash", "-c", cmd }, { rw_paths = { dir }, network = network ~= false })
  assert.is_nil(err)
  return run(argv, dir)
end

describe("flemma.sandbox", function()
  before_each(function()
    config.setup({ sandbox = { enabled = true, backend = "bwrap" } })
    sandbox.set_enabled(true)
  end)
  after_each(function()
    helpers.cleanup()
  end)

  describe("is_available", function()
    it("finds bubblewrap working by a probe run", function()
      assert.is_true((sandbox.is_available("bwrap")))
      assert.equal("bwrap", sandbox.backend())
    end)

    it("reports a backend that cannot run here, with what to do", function()
      local ok, err = sandbox.is_available("sandbox-exec")
      assert.is_false(ok)
      assert.is_truthy(err:find("sandbox-exec", 1, true))
    end)
  end)

  describe("wrap_command", function()
    it("returns the command unchanged when the sandbox is disabled", function()
      sandbox.set_enabled(false)
      assert.same({ "ls" }, sandbox.wrap_command({ "ls" }))
      assert.is_false(sandbox.is_enabled())
    end)

    it("is an error, never a silent unsandboxed run, when the backend is unavailable", function()
      config.setup({ sandbox = { enabled = true, backend = "sandbox-exec" } })
      local argv, err = sandbox.wrap_command({ "ls" })
      assert.is_nil(argv)
      assert.is_truthy(err:find("sandbox enabled but `sandbox-exec` cannot run", 1, true), err)
    end)

    it("lets a sandboxed command write in the working directory", function()
      local dir = project()
      local r = sandboxed(dir, "echo ok > made.txt && cat made.txt")
      assert.equal(0, r.code, r.output)
      assert.equal("ok\n", helpers.read_file(dir .. "/made.txt"))
    end)

    it("refuses writes to $HOME, /etc, .git/hooks, .git/config and startup files", function()
      local dir = project()
      local home = vim.env.HOME
      local targets = {
        home .. "/flemma-sandbox-probe",
        "/etc/flemma-sandbox-probe",
        dir .. "/.git/hooks/pre-commit",
        dir .. "/.git/config",
        dir .. "/.bashrc",
      }
      for _, t in ipairs(targets) do
        local r = sandboxed(dir, "echo x >> " .. vim.fn.shellescape(t))
        assert.are_not.equal(0, r.code, "write to " .. t .. " succeeded")
        assert.is_truthy(r.output:find("Read%-only file system") or r.output:find("Permission denied"), r.output)
      end
      assert.is_nil(helpers.read_file(home .. "/flemma-sandbox-probe"))
      assert.is_nil(helpers.read_file("/etc/flemma-sandbox-probe"))
      assert.equal("[core]\n", helpers.read_file(dir .. "/.git/config"))
      assert.equal("# rc\n", helpers.read_file(dir .. "/.bashrc"))
    end)

    it("keeps a repository without hooks or config from getting them", function()
      local dir = helpers.tmpdir()
      vim.fn.mkdir(dir .. "/.git", "p")
      local r = sandboxed(dir, "mkdir -p .git/hooks; echo 'touch /tmp/pwned' > .git/hooks/pre-commit")
      assert.are_not.equal(0, r.code, r.output)
      r = sandboxed(dir, "printf '[core]\\n\\thooksPath = /tmp\\n' > .git/config")
      assert.are_not.equal(0, r.code, r.output)
      assert.is_nil(vim.uv.fs_stat(dir .. "/.git/hooks/pre-commit"))
      assert.equal("", helpers.read_file(dir .. "/.git/config") or "")
      -- Other writes in the root still work.
      r = sandboxed(dir, "echo ok > made.txt")
      assert.equal(0, r.code, r.output)
    end)

    it("refuses a write through a symlink that points out of a root", function()
      local dir = project()
      local outside = helpers.tmpdir()
      vim.uv.fs_symlink(outside, dir .. "/escape")
      local r = sandboxed(dir, "echo x > escape/file")
      assert.are_not.equal(0, r.code)
      assert.is_nil(helpers.read_file(outside .. "/file"))
    end)

    it("cuts the network when the policy says so, loopback listeners included", function()
      local server = vim.uv.new_tcp()
      server:bind("127.0.0.1", 0)
      server:listen(16, function()
        local c = vim.uv.new_tcp()
        server:accept(c)
        c:close()
      end)
      local port = server:getsockname().port
      local dir = project()
      local cmd = ("exec 3<>/dev/tcp/127.0.0.1/%d && echo connected"):format(port)
      local on = sandboxed(dir, cmd, true)
      assert.equal("connected\n", on.output)
      local off = sandboxed(dir, cmd, false)
      assert.are_not.equal(0, off.code)
      assert.is_nil(off.output:find("connected", 1, true))
      server:close()
    end)

    it("runs the command in a new pid namespace", function()
      local dir = project()
      local r = sandboxed(dir, "echo $$")
      assert.equal(0, r.code)
      assert.is_true(tonumber(r.output) < 10, r.output)
    end)

    it("writes a sandbox-exec profile with the same policy", function()
      local native = require("flemma.native")
      local dir = project()
      local argv = native.sandbox_wrap("sandbox-exec", { rw_paths = { dir, "/nonexistent" }, network = false }, { "ls" }, dir)
      assert.equal("sandbox-exec", argv[1])
      assert.equal("-p", argv[2])
      assert.equal("ls", argv[4])
      local profile = argv[3]
      assert.is_truthy(profile:find("(deny file-write*)", 1, true))
      assert.is_truthy(profile:find('(subpath "' .. dir .. '")', 1, true))
      assert.is_truthy(profile:find('(subpath "' .. dir .. '/.git/hooks")', 1, true))
      assert.is_truthy(profile:find("(deny network*)", 1, true))
      assert.is_nil(profile:find("nonexistent", 1, true))
    end)
  end)

  describe("is_path_writable", function()
    it("allows paths inside a root and refuses the rest", function()
      local dir = project()
      local policy = { rw_paths = { dir }, network = true }
      local outside = helpers.tmpdir()
      vim.uv.fs_symlink(outside, dir .. "/escape")
      local cases = {
        { dir .. "/a.txt", true },
        { dir .. "/new/dir/b.txt", true },
        { dir .. "/sub/../c.txt", true },
        { dir .. "/../elsewhere.txt", false },
        { dir .. "/escape/file", false },
        { dir .. "/escape/../inside.txt", false }, -- `..` after a symlink follows the link
        { dir .. "/.git/hooks/pre-commit", false },
        { dir .. "/.git/config", false },
        { dir .. "/.git/HEAD", true },
        { dir .. "/.bashrc", false },
        { dir .. "/vendor/lib/.git/hooks/x", false },
        { "/etc/passwd", false },
        { vim.env.HOME .. "/x", false },
      }
      for _, c in ipairs(cases) do
        assert.equal(c[2], sandbox.is_path_writable(c[1], policy), c[1])
      end
    end)

    it("judges a dangling symlink by its target, where a write through it would land", function()
      local dir = project()
      local outside = helpers.tmpdir()
      local policy = { rw_paths = { dir }, network = true }
      vim.uv.fs_symlink(outside .. "/created-by-write", dir .. "/dangling")
      vim.uv.fs_symlink("dangling", dir .. "/chain")
      vim.uv.fs_symlink(".git/hooks/pre-commit", dir .. "/to-hook")
      vim.uv.fs_symlink("not-yet.txt", dir .. "/inside-link")
      assert.is_false(sandbox.is_path_writable(dir .. "/dangling", policy))
      assert.is_false(sandbox.is_path_writable(dir .. "/chain", policy))
      assert.is_false(sandbox.is_path_writable(dir .. "/to-hook", policy))
      assert.is_true(sandbox.is_path_writable(dir .. "/inside-link", policy))
      -- what the check guards against: the write lands on the target
      helpers.write_file(dir .. "/inside-link", "x")
      assert.equal("x", helpers.read_file(dir .. "/not-yet.txt"))
    end)

    it("is true for every path when the sandbox is disabled", function()
      sandbox.set_enabled(false)
      assert.is_true(sandbox.is_path_writable("/etc/passwd"))
    end)
  end)

  describe("policy", function()
    it("defaults to the cwd, the buffer's directory, /tmp and the cache dir", function()
      local dir = helpers.tmpdir()
      local buf = helpers.buffer({}, dir .. "/x.chat")
      local p = sandbox.policy(buf)
      assert.is_true(vim.tbl_contains(p.rw_paths, vim.fn.getcwd()))
      assert.is_true(vim.tbl_contains(p.rw_paths, dir))
      assert.is_true(vim.tbl_contains(p.rw_paths, "/tmp"))
      assert.is_true(p.network)
      vim.api.nvim_buf_delete(buf, { force = true })
    end)

    it("uses the configured roots and network setting", function()
      config.setup({ sandbox = { enabled = true, policy = { rw_paths = { "/srv/x" }, network = false } } })
      assert.same({ rw_paths = { "/srv/x" }, network = false }, sandbox.policy())
    end)
  end)

  describe(":Flemma sandbox:*", function()
    it("toggles the sandbox and reports its status", function()
      vim.cmd("Flemma sandbox:disable")
      assert.is_false(sandbox.is_enabled())
      vim.cmd("Flemma sandbox:enable")
      assert.is_true(sandbox.is_enabled())
      assert.is_truthy(sandbox.status():find("sandbox enabled; backend bwrap available", 1, true))
    end)
  end)
end)
