local sandbox = require("flemma.policy.sandbox")
local process = require("flemma.core.process")
local config = require("flemma.core.config")
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

describe("flemma.policy.sandbox", function()
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
      local native = require("flemma.core.native")
      local dir = project()
      local argv = native.sandbox_wrap(
        "sandbox-exec",
        { rw_paths = { dir, "/nonexistent" }, network = false },
        { "ls" },
        dir
      )
      assert.equal("sandbox-exec", argv[1])
      assert.equal("-p", argv[2])
      assert.equal("ls", argv[4])
      local profile = argv[3]
      assert.is_truthy(profile:find("(deny file-write*)", 1, true))
      assert.is_truthy(profile:find('(subpath "' .. dir .. '")', 1, true))
      assert.is_truthy(profile:find('(subpath "' .. dir .. '/.git/hooks")', 1, true))
      assert.is_truthy(profile:find("(deny network*)", 1, true))
      assert.is_nil(profile:find("nonexistent", 1, true))
      -- With the network off, Unix sockets are off too (Neovim's RPC socket among them).
      assert.is_nil(profile:find("(allow network", 1, true), profile)
      assert.is_truthy(profile:find("(deny network* (remote unix-socket))", 1, true), profile)
      local on = native.sandbox_wrap("sandbox-exec", { rw_paths = { dir }, network = true }, { "ls" }, dir)[3]
      assert.is_nil(on:find("(deny network", 1, true), on)
    end)
  end)

  describe("places that run code later", function()
    -- A repository with a submodule's git directory (hooks and config missing
    -- in one of them) and a nested repository.
    local function repos()
      local dir = project()
      vim.fn.mkdir(dir .. "/.git/modules/lib/hooks", "p")
      helpers.write_file(dir .. "/.git/modules/lib/config", "[core]\n")
      helpers.write_file(dir .. "/.git/modules/lib/HEAD", "ref: refs/heads/main\n")
      vim.fn.mkdir(dir .. "/.git/modules/bare", "p")
      helpers.write_file(dir .. "/.git/modules/bare/HEAD", "ref: refs/heads/main\n")
      helpers.write_file(dir .. "/lib/.git", "gitdir: ../.git/modules/lib\n")
      vim.fn.mkdir(dir .. "/vendor/pkg/.git/hooks", "p")
      helpers.write_file(dir .. "/vendor/pkg/.git/config", "[core]\n")
      return dir
    end

    local targets = {
      ".git/modules/lib/hooks/pre-commit",
      ".git/modules/lib/config",
      ".git/modules/bare/hooks/pre-commit",
      ".git/modules/bare/config",
      "vendor/pkg/.git/hooks/pre-commit",
      "vendor/pkg/.git/config",
      "lib/.git",
    }

    it("keeps submodules' and nested repositories' hooks and config read-only in bwrap", function()
      local dir = repos()
      for _, t in ipairs(targets) do
        local r = sandboxed(
          dir,
          ("mkdir -p \"$(dirname %s)\" 2>/dev/null; echo '[core] fsmonitor = touch /tmp/x' >> %s"):format(t, t)
        )
        assert.are_not.equal(0, r.code, "write to " .. t .. " succeeded: " .. r.output)
      end
      -- The git directory cannot be swapped for a fresh one either.
      local r = sandboxed(
        dir,
        "mv vendor/pkg/.git vendor/pkg/.git-old && mkdir -p vendor/pkg/.git/hooks && echo x > vendor/pkg/.git/hooks/post-checkout"
      )
      assert.are_not.equal(0, r.code, r.output)
      assert.is_nil(vim.uv.fs_stat(dir .. "/vendor/pkg/.git/hooks/post-checkout"))
      assert.equal("[core]\n", helpers.read_file(dir .. "/.git/modules/lib/config"))
      assert.equal("[core]\n", helpers.read_file(dir .. "/vendor/pkg/.git/config"))
      assert.equal("gitdir: ../.git/modules/lib\n", helpers.read_file(dir .. "/lib/.git"))
      assert.is_nil(vim.uv.fs_stat(dir .. "/.git/modules/lib/hooks/pre-commit"))
      assert.equal("", helpers.read_file(dir .. "/.git/modules/bare/config") or "")
      -- Ordinary files of the nested repository stay writable.
      r = sandboxed(dir, "echo ok > vendor/pkg/README && echo ok > .git/modules/lib/HEAD.new")
      assert.equal(0, r.code, r.output)
    end)

    it("refuses them in is_path_writable", function()
      local dir = repos()
      local policy = { rw_paths = { dir }, network = true }
      for _, t in ipairs(targets) do
        assert.is_false(sandbox.is_path_writable(dir .. "/" .. t, policy), t)
      end
      assert.is_true(sandbox.is_path_writable(dir .. "/vendor/pkg/README", policy))
      assert.is_true(sandbox.is_path_writable(dir .. "/.git/modules/lib/HEAD", policy))
    end)

    describe("with the cwd at $HOME", function()
      local saved_home
      local home
      before_each(function()
        saved_home = vim.env.HOME
        -- Outside /tmp, which the sandbox replaces by a private tmpfs.
        home = assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-home-XXXXXX"))
        vim.env.HOME = home
        vim.fn.mkdir(home .. "/.config/nvim", "p")
        vim.fn.mkdir(home .. "/.ssh", "p")
        vim.fn.mkdir(home .. "/.cache/nvim", "p")
        vim.fn.mkdir(home .. "/projects", "p")
        helpers.write_file(home .. "/.gitconfig", "[user]\n")
      end)
      after_each(function()
        vim.env.HOME = saved_home
        vim.fn.delete(home, "rf")
      end)

      local sensitive = {
        ".config/nvim/init.lua",
        ".config/autostart/evil.desktop",
        ".ssh/authorized_keys",
        ".gitconfig",
        ".bashrc", -- missing: refused all the same
        ".profile",
        ".zshrc",
        ".cache/nvim/luac/x",
        "new-file-in-home",
      }

      it("never makes $HOME a writable root: only its entries that are not hidden", function()
        local policy = { rw_paths = { home }, network = false }
        for _, t in ipairs(sensitive) do
          assert.is_false(sandbox.is_path_writable(home .. "/" .. t, policy), t)
          local r = sandboxed(home, ('mkdir -p "$(dirname %s)" 2>/dev/null; echo x >> %s'):format(t, t), false)
          assert.are_not.equal(0, r.code, "write to ~/" .. t .. " succeeded")
        end
        assert.is_nil(vim.uv.fs_stat(home .. "/.ssh/authorized_keys"))
        assert.is_nil(vim.uv.fs_stat(home .. "/.bashrc"))
        assert.is_nil(vim.uv.fs_stat(home .. "/.config/nvim/init.lua"))
        assert.equal("[user]\n", helpers.read_file(home .. "/.gitconfig"))
        assert.is_true(sandbox.is_path_writable(home .. "/projects/a.txt", policy))
        local r = sandboxed(home, "echo ok > projects/a.txt", false)
        assert.equal(0, r.code, r.output)
        assert.equal("ok\n", helpers.read_file(home .. "/projects/a.txt"))
      end)

      it("protects them inside a root below $HOME too", function()
        local policy = { rw_paths = { home .. "/.config" }, network = false }
        assert.is_false(sandbox.is_path_writable(home .. "/.config/nvim/init.lua", policy))
        assert.is_false(sandbox.is_path_writable(home .. "/.config/autostart/x.desktop", policy))
        assert.is_true(sandbox.is_path_writable(home .. "/.config/other/x", policy))
        local argv = assert(sandbox.wrap_command({
          "bash",
          "-c",
          "echo x > nvim/init.lua; mkdir -p autostart && echo x > autostart/e.desktop; echo ok > other.txt",
        }, policy))
        local r = run(argv, home .. "/.config")
        assert.is_nil(vim.uv.fs_stat(home .. "/.config/nvim/init.lua"), r.output)
        assert.is_nil(vim.uv.fs_stat(home .. "/.config/autostart/e.desktop"), r.output)
        assert.equal("ok\n", helpers.read_file(home .. "/.config/other.txt"))
      end)
    end)
  end)

  describe("secrets in $HOME (sandbox.deny_read)", function()
    local tools = require("flemma.tools")
    local saved, home, project_dir, buf
    -- Secret files of a fake $HOME: path -> content.
    local secrets = {
      [".ssh/id_ed25519"] = "SECRET-ssh-private-key",
      [".ssh/config"] = "SECRET-ssh-config",
      [".aws/credentials"] = "SECRET-aws",
      [".netrc"] = "SECRET-netrc",
      [".git-credentials"] = "SECRET-git-credentials",
      [".docker/config.json"] = "SECRET-docker",
      [".config/gh/hosts.yml"] = "SECRET-gh",
      [".config/gcloud/credentials.db"] = "SECRET-gcloud",
      [".gnupg/private-keys-v1.d/k.key"] = "SECRET-gnupg",
      [".password-store/site.gpg"] = "SECRET-pass",
      [".local/share/keyrings/login.keyring"] = "SECRET-keyring",
      [".mozilla/firefox/p/cookies.sqlite"] = "SECRET-firefox",
      [".config/google-chrome/Default/Login Data"] = "SECRET-chrome",
      [".local/state/nvim/flemma/trust"] = "SECRET-trust-store",
      [".local/share/nvim/shada/main.shada"] = "SECRET-shada",
    }

    -- Runs `command` with the bash tool through the tool registry (the path a
    -- model's call takes), in the chat buffer.
    local function bash(command)
      local result
      tools.execute(
        buf,
        { id = "toolu_deny", name = "bash", input = { command = command, timeout = vim.NIL, label = vim.NIL } },
        function(r)
          result = r
        end
      )
      helpers.wait_for(function()
        return result ~= nil
      end, 15000)
      return result
    end

    local function chat_in(dir)
      if buf and vim.api.nvim_buf_is_valid(buf) then
        vim.api.nvim_buf_delete(buf, { force = true })
      end
      vim.fn.mkdir(dir, "p")
      vim.cmd.cd(dir)
      buf = helpers.buffer({ "@You:", "hi" }, dir .. "/talk.chat")
    end

    before_each(function()
      saved = {
        HOME = vim.env.HOME,
        XDG_STATE_HOME = vim.env.XDG_STATE_HOME,
        XDG_DATA_HOME = vim.env.XDG_DATA_HOME,
        XDG_CONFIG_HOME = vim.env.XDG_CONFIG_HOME,
        cwd = vim.fn.getcwd(),
      }
      -- Outside /tmp, which the sandbox replaces by a private tmpfs.
      home = vim.fs.normalize(assert(vim.uv.fs_realpath(assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-home-XXXXXX")))))
      vim.env.HOME = home
      vim.env.XDG_STATE_HOME = nil
      vim.env.XDG_DATA_HOME = nil
      vim.env.XDG_CONFIG_HOME = nil
      for rel, content in pairs(secrets) do
        vim.fn.mkdir(vim.fs.dirname(home .. "/" .. rel), "p")
        helpers.write_file(home .. "/" .. rel, content .. "\n")
      end
      project_dir = home .. "/projects/app"
      vim.fn.mkdir(project_dir, "p")
      helpers.write_file(project_dir .. "/README", "project-readme\n")
      tools._reset()
      tools.setup(config.setup({ sandbox = { enabled = true, backend = "bwrap" } }))
      chat_in(project_dir)
    end)
    after_each(function()
      if buf and vim.api.nvim_buf_is_valid(buf) then
        vim.api.nvim_buf_delete(buf, { force = true })
      end
      buf = nil
      vim.cmd.cd(saved.cwd)
      for k, v in pairs(saved) do
        if k ~= "cwd" then
          vim.env[k] = v
        end
      end
      vim.fn.delete(home, "rf")
      tools._reset()
      tools.setup(config.setup({ sandbox = { enabled = true, backend = "bwrap" } }))
    end)

    local function cat_all()
      local names = {}
      for rel in pairs(secrets) do
        names[#names + 1] = '"$HOME/' .. rel .. '"'
      end
      table.sort(names)
      return "cat "
        .. table.concat(names, " ")
        .. ' 2>&1; echo "entries: $(find ~/.ssh ~/.aws ~/.config/gh -mindepth 1 | wc -l)"; cat README'
    end

    it("hides keys, credentials, browser profiles and Neovim's state and data from a sandboxed bash", function()
      local res = bash(cat_all())
      local out = res.output or ""
      for rel, content in pairs(secrets) do
        assert.is_nil(out:find(content, 1, true), "~/" .. rel .. " was readable:\n" .. out)
      end
      assert.is_truthy(out:find("\nentries: 0\n", 1, true), out) -- the directories show empty
      assert.is_truthy(out:find("project-readme", 1, true), out)
      -- The project stays writable; the hidden entries do not change on disk.
      res = bash("echo made > new.txt && cat new.txt; echo x > ~/.ssh/id_ed25519")
      assert.is_truthy(res.output:find("made", 1, true), res.output)
      assert.equal("made\n", helpers.read_file(project_dir .. "/new.txt"))
      assert.equal("SECRET-ssh-private-key\n", helpers.read_file(home .. "/.ssh/id_ed25519"))
    end)

    it(
      "hides the secret files of the project itself from a sandboxed bash, as flemma.secret_paths names them",
      function()
        -- Names secret_paths counts as secrets by name, and some it does not.
        local names = {
          ".env",
          ".env.local",
          ".ENVRC",
          "server.pem",
          "tls.KEY",
          "deploy.ppk",
          "client.p12",
          "cert.pfx",
          "release.jks",
          "app.keystore",
          "vault.kdbx",
          "id_rsa",
          "id_ed25519",
          "ID_ECDSA",
          "id_rsa.bak",
          "id_rsa~",
          ".netrc",
          ".git-credentials",
          ".pgpass",
          "sub/dir/.env",
          "id_rsa.pub",
          "id_utils.py",
          "notes.txt",
          "environment.md",
          "keys.txt",
          "id_rsa.pub.bak",
          "keystore.md",
          "krb5cc_1000",
        }
        local secret_paths = require("flemma.policy.secret_paths")
        for i, name in ipairs(names) do
          helpers.write_file(project_dir .. "/" .. name, "CONTENT-" .. i .. "-END\n")
        end
        -- A plain .npmrc stays readable: package managers in the sandbox need it.
        helpers.write_file(project_dir .. "/.npmrc", "registry=https://registry.npmjs.org/\n")
        local res = bash("grep -r . . 2>&1; cat .env id_rsa 2>&1; true")
        local out = res.output or ""
        for i, name in ipairs(names) do
          local shown = out:find("CONTENT-" .. i .. "-END", 1, true) ~= nil
          local secret = secret_paths.check(project_dir .. "/" .. name) ~= nil
          assert.equals(
            not secret,
            shown,
            ("%s (secret: %s) shown: %s\n%s"):format(name, tostring(secret), tostring(shown), out)
          )
        end
        assert.is_truthy(out:find("registry.npmjs.org", 1, true), out)
        assert.is_truthy(out:find("project-readme", 1, true), out)
        -- On disk they are unchanged, and the command cannot replace them.
        bash("echo x > .env; rm -f id_rsa; true")
        assert.equal("CONTENT-1-END\n", helpers.read_file(project_dir .. "/.env"))
        assert.equal("CONTENT-12-END\n", helpers.read_file(project_dir .. "/id_rsa"))
      end
    )

    it("hides the target of a symlinked entry, by either path", function()
      local elsewhere = assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-kube-XXXXXX"))
      elsewhere = assert(vim.uv.fs_realpath(elsewhere))
      helpers.write_file(elsewhere .. "/config", "SECRET-kube\n")
      assert(vim.uv.fs_symlink(elsewhere, home .. "/.kube"))
      local res = bash(("cat ~/.kube/config %s/config 2>&1; true"):format(elsewhere))
      vim.fn.delete(elsewhere, "rf")
      assert.is_nil(res.output:find("SECRET-kube", 1, true), res.output)
    end)

    it("hides what the user adds and shows a default entry the user takes out", function()
      helpers.write_file(home .. "/notes/private.txt", "SECRET-notes\n")
      tools.setup(config.setup({
        sandbox = { enabled = true, backend = "bwrap", deny_read = { "$default", "~/notes/private.txt", "!~/.netrc" } },
      }))
      local res = bash("cat ~/notes/private.txt ~/.netrc ~/.ssh/id_ed25519 2>&1; true")
      assert.is_nil(res.output:find("SECRET-notes", 1, true), res.output)
      assert.is_truthy(res.output:find("SECRET-netrc", 1, true), res.output)
      assert.is_nil(res.output:find("SECRET-ssh", 1, true), res.output)
    end)

    it("keeps a project that lies inside a hidden directory readable and writable, and the rest hidden", function()
      local inner = home .. "/.config/gh/myext"
      helpers.write_file(inner .. "/main.sh", "echo ext\n")
      chat_in(inner)
      local res =
        bash('cat main.sh; echo ok > out.txt; cat ~/.config/gh/hosts.yml 2>&1; echo "entries: $(ls -A ~/.config/gh)"')
      assert.is_truthy(res.output:find("echo ext", 1, true), res.output)
      assert.equal("ok\n", helpers.read_file(inner .. "/out.txt"))
      assert.is_nil(res.output:find("SECRET-gh", 1, true), res.output)
      assert.is_truthy(res.output:find("\nentries: myext\n", 1, true), res.output)
    end)

    it("refuses a bad deny_read entry in setup()", function()
      for _, bad in ipairs({ "relative/path", 42, "", "!$default" }) do
        local ok, err = pcall(config.setup, { sandbox = { deny_read = { "$default", bad } } })
        assert.is_false(ok)
        assert.is_truthy(err:find("`sandbox.deny_read[2]` should be", 1, true), err)
      end
      local ok, err = pcall(config.setup, { sandbox = { deny_read = "~/.ssh" } })
      assert.is_false(ok)
      assert.is_truthy(err:find("`sandbox.deny_read` should be a table", 1, true), err)
    end)
  end)

  describe("Unix sockets", function()
    local servers = {}
    after_each(function()
      for _, srv in ipairs(servers) do
        srv.kill(9)
        srv.wait({ signal = 9 }, 2000) -- killed by us, not crashed
      end
      servers = {}
    end)

    -- A real Neovim listening on `sock`, ready to evaluate requests.
    local function listen(sock)
      local srv = helpers.start_nvim({ args = { "--listen", sock } })
      servers[#servers + 1] = srv
      helpers.wait_for(function()
        local ok, ch = pcall(vim.fn.sockconnect, "pipe", sock, { rpc = true })
        if ok and ch > 0 then
          vim.fn.chanclose(ch)
          return true
        end
        return false
      end, 10000, "the Neovim server did not start listening on " .. sock)
    end

    it("no sandboxed command can make a host Neovim run anything through its RPC socket", function()
      local dir = project()
      -- One where Neovim puts its own (/tmp/nvim.USER/xxx/nvim.PID.0), one inside the writable root.
      local tmp_sock = helpers.tmpdir() .. "/nvim.4242.0"
      local root_sock = dir .. "/nvim.sock"
      listen(tmp_sock)
      listen(root_sock)
      local marker = helpers.tmpdir() .. "/ran-outside"
      -- The issue's loop, limited to this spec's own servers (other Neovims on
      -- the machine are not ours to poke), and what the command can see.
      local attack = ([[
        for s in /tmp/nvim.*/*/nvim.* /tmp/nvim.*/*/*/nvim.* "$XDG_RUNTIME_DIR"/nvim.*; do
          [ -S "$s" ] && echo "visible $s"
        done
        for s in %s %s; do
          timeout 5 %s --clean --headless --server "$s" --remote-expr "system('touch %s')" && echo "reached $s"
        done
        /usr/bin/python3 -c 'import socket, sys
for p in sys.argv[1:]:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(p)
        print("connected", p)
    except OSError as e:
        print("refused", p, e.strerror)
a, b = socket.socketpair()
a.send(b"x")
print("socketpair", b.recv(1).decode())' %s %s
        true
      ]]):format(root_sock, tmp_sock, helpers.nvim_client_cmd(), marker, root_sock, tmp_sock)
      -- The attack works without the sandbox: the host Neovim runs the command.
      sandbox.set_enabled(false)
      local plain = run({ "bash", "-c", attack }, dir)
      assert.is_truthy(plain.output:find("reached " .. root_sock, 1, true), plain.output)
      assert.is_not_nil(vim.uv.fs_stat(marker))
      os.remove(marker)
      sandbox.set_enabled(true)
      for _, policy in ipairs({
        { rw_paths = { dir }, network = false },
        { rw_paths = { dir, "/tmp" }, network = false }, -- /tmp itself writable, as by default
        { rw_paths = { dir, "/tmp" }, network = true },
      }) do
        local argv = assert(sandbox.wrap_command({ "bash", "-c", attack }, policy))
        local r = run(argv, dir)
        local what = vim.inspect(policy)
        assert.equal(0, r.code, r.output)
        assert.is_nil(r.output:find("reached", 1, true), what .. ": " .. r.output)
        assert.is_nil(r.output:find("visible " .. tmp_sock, 1, true), what .. ": " .. r.output)
        assert.is_nil(r.output:find("connected", 1, true), what .. ": " .. r.output)
        assert.is_truthy(r.output:find("refused " .. root_sock .. " Operation not permitted", 1, true), r.output)
        assert.is_truthy(r.output:find("socketpair x", 1, true), r.output)
        assert.is_nil(vim.uv.fs_stat(marker), what .. ": the host Neovim ran the command")
      end
    end)

    it("hides the socket directories of /tmp, even when /tmp is writable", function()
      local dir = project()
      local sockdir = helpers.tmpdir()
      listen(sockdir .. "/nvim.4243.0")
      local r = sandboxed(dir, "ls " .. vim.fn.shellescape(sockdir) .. " 2>&1; ls -d /tmp/nvim.* 2>&1; true")
      assert.is_nil(r.output:find("nvim.4243.0", 1, true), r.output)
      local argv = assert(
        sandbox.wrap_command(
          { "bash", "-c", "ls -A /tmp/nvim.*/ 2>&1; echo x > /tmp/flemma-sb-probe-$$ && echo wrote" },
          { rw_paths = { dir, "/tmp" }, network = true }
        )
      )
      r = run(argv, dir)
      assert.is_nil(r.output:find("nvim.4243.0", 1, true), r.output)
      assert.is_truthy(r.output:find("wrote", 1, true), r.output)
    end)
  end)

  describe("background jobs", function()
    -- Host processes whose command line is `sleep <marker>`.
    local function sleepers(marker)
      local n = 0
      for _, name in ipairs(vim.fn.readdir("/proc")) do
        if name:match("^%d+$") then
          local cmd = helpers.read_file("/proc/" .. name .. "/cmdline")
          local stat = helpers.read_file("/proc/" .. name .. "/stat")
          if cmd == "sleep\0" .. marker .. "\0" and stat and stat:match("%) (%S)") ~= "Z" then
            n = n + 1
          end
        end
      end
      return n
    end

    it("setsid and double-forked jobs of a sandboxed command die on cancel and timeout", function()
      local dir = project()
      for _, how in ipairs({ "cancel", "timeout" }) do
        local marker = tostring(1000 + math.random(1, 1e6)) .. ".25"
        local cmd = ("setsid sleep %s & (setsid sleep %s &) ; ( (sleep %s &) & ); sleep 1000"):format(
          marker,
          marker,
          marker
        )
        local argv = assert(sandbox.wrap_command({ "bash", "-c", cmd }, { rw_paths = { dir }, network = false }))
        local result
        local h = process.spawn({ cmd = argv, cwd = dir, timeout = how == "timeout" and 1500 or nil }, function(r)
          result = r
        end)
        helpers.wait_for(function()
          return sleepers(marker) == 3
        end, 5000, "the three jobs did not start")
        if how == "cancel" then
          h:cancel()
        end
        helpers.wait_for(function()
          return result ~= nil
        end, 10000)
        helpers.wait_for(function()
          return sleepers(marker) == 0
        end, 5000, "a background job of a sandboxed command survived the " .. how)
      end
    end)
  end)

  describe("capabilities", function()
    local attack = "grep CapEff /proc/self/status; mount -o remount,rw,bind / 2>&1 && echo remounted; "
      .. "echo x > /etc/flemma-sandbox-probe 2>&1 && echo wrote-etc; echo ok > made.txt && echo wrote-root"

    local function check(r, dir)
      assert.equal(0, r.code, r.output)
      assert.is_truthy(r.output:find("CapEff:%s+0+\n"), r.output)
      assert.is_nil(r.output:find("remounted", 1, true), r.output)
      local escaped = vim.uv.fs_stat("/etc/flemma-sandbox-probe") ~= nil
      os.remove("/etc/flemma-sandbox-probe") -- never leave it behind, even when failing
      assert.is_nil(r.output:find("wrote-etc", 1, true), r.output)
      assert.is_false(escaped)
      assert.is_truthy(r.output:find("wrote-root", 1, true), r.output)
      assert.equal("ok\n", helpers.read_file(dir .. "/made.txt"))
    end

    it("leaves root inside the sandbox without any capability: no remount, no write outside", function()
      local dir = project()
      check(sandboxed(dir, attack .. "; true"), dir)
    end)

    it("holds for an unprivileged user too", function()
      if vim.uv.getuid() ~= 0 or vim.fn.executable("setpriv") ~= 1 then
        pending("needs root and setpriv to switch to an unprivileged user")
        return
      end
      local dir = assert(vim.uv.fs_mkdtemp("/tmp/flemma-sandbox-user-XXXXXX"))
      vim.uv.fs_chmod(dir, 511) -- 0777: nobody writes here
      local ok, err = pcall(function()
        -- Nothing hidden: the entries of root's $HOME cannot even be looked up
        -- by the unprivileged user (bwrap could not mount over them).
        local policy = { rw_paths = { dir }, network = false, deny_read = {} }
        local argv = assert(sandbox.wrap_command({ "bash", "-c", attack .. "; id -u" }, policy))
        local cmd = { "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--" }
        vim.list_extend(cmd, argv)
        local r = run(cmd, dir)
        check(r, dir)
        assert.is_truthy(r.output:find("\n65534\n", 1, true), r.output)
      end)
      vim.fn.delete(dir, "rf")
      assert(ok, err)
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
    it("defaults to the cwd, the buffer's directory and /tmp, never the cache dir", function()
      local dir = helpers.tmpdir()
      local buf = helpers.buffer({}, dir .. "/x.chat")
      local p = sandbox.policy(buf)
      assert.is_true(vim.tbl_contains(p.rw_paths, vim.fn.getcwd()))
      assert.is_true(vim.tbl_contains(p.rw_paths, dir))
      assert.is_true(vim.tbl_contains(p.rw_paths, "/tmp"))
      assert.is_false(vim.tbl_contains(p.rw_paths, vim.fs.normalize("~/.cache")))
      if vim.env.XDG_CACHE_HOME then
        assert.is_false(vim.tbl_contains(p.rw_paths, vim.fs.normalize(vim.env.XDG_CACHE_HOME)))
      end
      assert.is_true(p.network)
      vim.api.nvim_buf_delete(buf, { force = true })
    end)

    it("uses the configured roots and network setting", function()
      config.setup({ sandbox = { enabled = true, policy = { rw_paths = { "/srv/x" }, network = false } } })
      assert.same({ rw_paths = { "/srv/x" }, network = false, deny_read = sandbox.deny_read() }, sandbox.policy())
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
