local tools = require("flemma.tools")
local config = require("flemma.core.config")
local helpers = require("spec.support.helpers")

local uv = vim.uv

-- Runs a tool through the registry in buf and waits for its result.
local function run(buf, name, input, timeout)
  local result
  local handle = tools.execute(buf, { id = "toolu_spec", name = name, input = input }, function(r)
    result = r
  end)
  vim.wait(timeout or 5000, function()
    return result ~= nil
  end, 5)
  assert(result, name .. " gave no result in time")
  return result, handle
end

local function dir_entries(dir)
  local out = {}
  for name in vim.fs.dir(dir) do
    out[#out + 1] = name
  end
  table.sort(out)
  return out
end

describe("built-in tools", function()
  local dir, buf, saved_state
  before_each(function()
    tools._reset()
    tools.setup(config.setup({}))
    dir = helpers.tmpdir()
    -- Backups of write and edit go to a fresh state folder.
    saved_state = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    buf = helpers.buffer({ "@You:", "hi" }, dir .. "/talk.chat")
  end)
  after_each(function()
    vim.env.XDG_STATE_HOME = saved_state
    if vim.api.nvim_buf_is_valid(buf) then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
    helpers.cleanup()
    tools._reset()
    config.setup({})
  end)

  describe("calculator", function()
    local good = {
      { "2 + 2", "4" },
      { "2 + 3 * 4", "14" },
      { "(2 + 3) * 4", "20" },
      { "-2^2", "-4" },
      { "2^3^2", "512" },
      { "2 ** 10", "1024" },
      { "7 % 3", "1" },
      { "10 / 4", "2.5" },
      { "sqrt(16) + abs(-3)", "7" },
      { "max(1, 9, 4) - min(3, 2)", "7" },
      { "log(8, 2)", "3" },
      { "round(3.14159, 2)", "3.14" },
      { "floor(PI)", "3" },
      { "1.5e3 + .5", "1500.5" },
      { "1/3", "0.333333333333333" },
    }
    for _, case in ipairs(good) do
      it(("evaluates %s to %s"):format(case[1], case[2]), function()
        local res = run(buf, "calculator", { expression = case[1], label = vim.NIL })
        assert.same({ success = true, output = case[2] }, res)
      end)
    end

    local bad = {
      { "1 / 0", "division by zero" },
      { "5 % (2 - 2)", "modulo by zero" },
      { "2 +", "unexpected end of expression" },
      { "(1 + 2", "expected `)`" },
      { "1 2", "unexpected `2`" },
      { "os.exit(1)", "unexpected character `.`" },
      { "print(1)", "unknown function `print`" },
      { "x + 1", "unknown name `x`" },
      { "sqrt(1, 2)", "`sqrt` takes 1 argument, got 2" },
      { "sqrt(-1)", "not a number" },
      { "\"a\" .. 'b'", "unexpected character" },
      { "   ", "empty expression" },
    }
    for _, case in ipairs(bad) do
      it(("refuses %s with a clear error"):format(case[1]), function()
        local res = run(buf, "calculator", { expression = case[1], label = vim.NIL })
        assert.is_false(res.success)
        assert.matches("cannot evaluate", res.error, 1, true)
        assert.matches(case[2], res.error, 1, true)
      end)
    end

    it("never runs code: a would-be global assignment stays an error", function()
      _G.flemma_calc_probe = nil
      local res = run(buf, "calculator", { expression = "flemma_calc_probe = 1", label = vim.NIL })
      assert.is_false(res.success)
      assert.is_nil(_G.flemma_calc_probe)
    end)
  end)

  describe("calculator_async", function()
    it("answers after the delay", function()
      local t0 = uv.hrtime()
      local res = run(buf, "calculator_async", { expression = "sqrt(16)", delay = 80, label = vim.NIL })
      assert.same({ success = true, output = "4" }, res)
      assert.is_true((uv.hrtime() - t0) / 1e6 >= 75)
    end)

    it("reports evaluation errors", function()
      local res = run(buf, "calculator_async", { expression = "1/0", delay = 0, label = vim.NIL })
      assert.is_false(res.success)
      assert.matches("division by zero", res.error, 1, true)
    end)

    it("can be cancelled while it waits", function()
      local got = {}
      local handle = tools.execute(buf, {
        name = "calculator_async",
        input = { expression = "1 + 1", delay = 150, label = vim.NIL },
      }, function(r)
        got[#got + 1] = r
      end)
      vim.wait(20)
      handle.cancel()
      vim.wait(400)
      assert.equals(1, #got)
      assert.is_false(got[1].success)
      assert.matches("cancelled", got[1].error, 1, true)
    end)
  end)

  describe("read", function()
    local function read(input)
      return run(buf, "read", vim.tbl_extend("keep", input, { offset = vim.NIL, limit = vim.NIL, label = vim.NIL }))
    end

    it("reads a file relative to the chat file", function()
      helpers.write_file(dir .. "/notes.txt", "one\ntwo\nthree\n")
      assert.same({ success = true, output = "one\ntwo\nthree" }, read({ path = "notes.txt" }))
    end)

    it("reads a window with offset and limit and says how to continue", function()
      local lines = {}
      for i = 1, 10 do
        lines[i] = "line " .. i
      end
      helpers.write_file(dir .. "/ten.txt", table.concat(lines, "\n") .. "\n")
      local res = read({ path = "ten.txt", offset = 3, limit = 2 })
      assert.is_true(res.success)
      assert.equals("line 3\nline 4\n\n[Showing lines 3-4 of 10. Use offset=5 to continue.]", res.output)
      res = read({ path = "ten.txt", offset = 9, limit = 5 })
      assert.equals("line 9\nline 10", res.output)
    end)

    it("cuts a long file at the line limit with a hint", function()
      local lines = {}
      for i = 1, 3000 do
        lines[i] = "L" .. i
      end
      helpers.write_file(dir .. "/long.txt", table.concat(lines, "\n"))
      local res = read({ path = dir .. "/long.txt" })
      local shown = vim.split(res.output, "\n")
      assert.equals("L1", shown[1])
      assert.equals("L2000", shown[2000])
      assert.matches(
        "Showing lines 1-2000 of 3000 (2000-line limit). Use offset=2001 to continue.",
        res.output,
        1,
        true
      )
      res = read({ path = dir .. "/long.txt", offset = 2001 })
      assert.equals("L2001", vim.split(res.output, "\n")[1])
      assert.is_nil(res.output:find("Showing"))
    end)

    it("cuts at the byte limit of tools.truncate", function()
      config.setup({ tools = { truncate = { max_lines = 2000, max_bytes = 100 } } })
      helpers.write_file(dir .. "/wide.txt", string.rep(string.rep("w", 30) .. "\n", 10))
      local res = read({ path = "wide.txt" })
      local body = res.output:match("^(.-)\n\n%[")
      assert.equals(3, #vim.split(body, "\n"))
      assert.matches("Showing lines 1-3 of 10 (100B limit). Use offset=4 to continue.", res.output, 1, true)
    end)

    it("shows the start of a single line over the byte limit without splitting UTF-8", function()
      config.setup({ tools = { truncate = { max_lines = 2000, max_bytes = 101 } } })
      helpers.write_file(dir .. "/oneline.txt", string.rep("é", 200) .. "\nnext\n")
      local res = read({ path = "oneline.txt" })
      assert.is_true(res.success)
      local first = vim.split(res.output, "\n")[1]
      assert.equals(string.rep("é", 50), first)
      assert.matches("Line 1 alone is over", res.output, 1, true)
      assert.matches("Use offset=2 to continue", res.output, 1, true)
    end)

    it("numbers lines as cat -n does when line_numbers is true, from the offset", function()
      helpers.write_file(dir .. "/ten.txt", table.concat(
        vim.tbl_map(function(i)
          return "line " .. i
        end, vim.fn.range(1, 10)),
        "\n"
      ) .. "\n")
      local res = read({ path = "ten.txt", offset = 9, limit = 2, line_numbers = true })
      assert.same({ success = true, output = "     9\tline 9\n    10\tline 10" }, res)
      res = read({ path = "ten.txt", offset = 1, limit = 1, line_numbers = false })
      assert.equals("line 1\n\n[Showing lines 1-1 of 10. Use offset=2 to continue.]", res.output)
      local want = vim.system({ "cat", "-n", dir .. "/ten.txt" }, { text = true }):wait().stdout
      assert.equals(vim.trim(want), vim.trim(read({ path = "ten.txt", line_numbers = true }).output))
    end)

    it("cuts lines over 2000 bytes at a UTF-8 boundary and says which were cut", function()
      local long = string.rep("é", 1500) -- 3000 bytes
      helpers.write_file(dir .. "/wide.txt", "short\n" .. long .. "\nmid\n" .. long .. "x\nend\n")
      local res = read({ path = "wide.txt", line_numbers = true })
      assert.is_true(res.success)
      local lines = vim.split(res.output, "\n")
      assert.equals("     1\tshort", lines[1])
      assert.equals("     2\t" .. string.rep("é", 1000) .. " …", lines[2])
      assert.equals("     3\tmid", lines[3])
      assert.equals("     4\t" .. string.rep("é", 1000) .. " …", lines[4])
      assert.equals("     5\tend", lines[5])
      assert.matches("[Lines 2, 4 are longer than 2000 bytes and were cut (marked …)", res.output, 1, true)
      assert.is_nil(read({ path = "wide.txt", offset = 5 }).output:find("cut", 1, true))
    end)

    it("counts only the shown start of long lines against the byte limit", function()
      helpers.write_file(dir .. "/wide30.txt", string.rep(string.rep("w", 5000) .. "\n", 30))
      local res = read({ path = "wide30.txt" })
      assert.is_true(res.success)
      -- 25 lines of 2000 bytes (+ the mark) fit the 50KB limit; whole, only 10 would.
      assert.matches("Showing lines 1-25 of 30 (", res.output, 1, true)
      assert.matches(
        "[Lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ... (25 in all) are longer than 2000 bytes",
        res.output,
        1,
        true
      )
    end)

    it("describes binary files instead of dumping them; an image is attached", function()
      helpers.write_file(dir .. "/pack.zip", "PK\3\4" .. string.rep("\0\1\2", 400))
      helpers.write_file(dir .. "/pic.png", "\137PNG\r\n\26\n" .. string.rep("\0\1\2", 400))
      helpers.write_file(dir .. "/blob.bin", "abc\0def")
      local res = read({ path = "pack.zip" })
      assert.same(
        { success = true, output = "pack.zip is a binary file (ZIP archive, 1.2KB); its content is not shown." },
        res
      )
      -- An image goes to the model with the result (:help flemma-result-files).
      res = read({ path = "pic.png" })
      assert.same({
        success = true,
        output = "pic.png is an image (image/png) of 1.2KB; it is attached to this result.",
        attachments = { { path = dir .. "/pic.png", mime = "image/png" } },
      }, res)
      res = read({ path = "blob.bin" })
      assert.matches("binary file %(binary data, 7B%)", res.output)
    end)

    it("gives clear errors for a missing file, a directory, a broken link and a bad offset", function()
      local res = read({ path = "nope.txt" })
      assert.same({ success = false, error = "file not found: " .. dir .. "/nope.txt" }, res)
      vim.fn.mkdir(dir .. "/sub")
      assert.matches("is a directory", read({ path = "sub" }).error, 1, true)
      assert(uv.fs_symlink(dir .. "/gone", dir .. "/dangling"))
      assert.matches("broken symbolic link", read({ path = "dangling" }).error, 1, true)
      helpers.write_file(dir .. "/short.txt", "a\nb\n")
      assert.matches(
        "`offset` 5 is past the end of short.txt, which has 2 lines",
        read({ path = "short.txt", offset = 5 }).error,
        1,
        true
      )
      assert.matches("`limit` should be 1 or more", read({ path = "short.txt", limit = 0 }).error, 1, true)
    end)

    it("follows symlinks, reads non-UTF-8 names and empty files", function()
      helpers.write_file(dir .. "/real.txt", "target content\n")
      assert(uv.fs_symlink(dir .. "/real.txt", dir .. "/link.txt"))
      assert.equals("target content", read({ path = "link.txt" }).output)
      local odd = dir .. "/caf\233.txt" -- latin-1 e-acute: not valid UTF-8
      helpers.write_file(odd, "latin\n")
      assert.equals("latin", read({ path = odd }).output)
      helpers.write_file(dir .. "/empty.txt", "")
      assert.equals("(empty.txt is empty)", read({ path = "empty.txt" }).output)
    end)
  end)

  describe("write", function()
    local function write(path, content)
      return run(buf, "write", { path = path, content = content, label = vim.NIL })
    end

    it("creates the file and its missing parents", function()
      local res = write("a/b/c/out.txt", "hello\nworld\n")
      assert.same({
        success = true,
        output = "Wrote 12B (2 lines) to a/b/c/out.txt (a new file). To undo: :Flemma tool:undo (choose this change from the list).",
      }, res)
      assert.equals("hello\nworld\n", helpers.read_file(dir .. "/a/b/c/out.txt"))
    end)

    it("replaces a file atomically, keeping its mode and leaving no temporary file", function()
      local path = dir .. "/script.sh"
      helpers.write_file(path, "old")
      assert(uv.fs_chmod(path, 448)) -- 0700
      local ino = uv.fs_stat(path).ino
      assert.is_true(write(path, "new content").success)
      assert.equals("new content", helpers.read_file(path))
      assert.equals(448, uv.fs_stat(path).mode % 4096)
      assert.are_not.equal(ino, uv.fs_stat(path).ino) -- a new inode: renamed into place
      assert.same({ "script.sh" }, dir_entries(dir))
    end)

    it("writes through a symlink to its target", function()
      helpers.write_file(dir .. "/target.txt", "before")
      assert(uv.fs_symlink(dir .. "/target.txt", dir .. "/alias.txt"))
      assert.is_true(write("alias.txt", "after").success)
      assert.equals("link", uv.fs_lstat(dir .. "/alias.txt").type)
      assert.equals("after", helpers.read_file(dir .. "/target.txt"))
    end)

    it("writes non-UTF-8 names and large content", function()
      local odd = dir .. "/d\255r/f\233.bin"
      local big = string.rep("0123456789abcdef", 2 ^ 16) -- 1 MiB
      assert.is_true(write(odd, big).success)
      assert.equals(big, helpers.read_file(odd))
    end)

    it("refuses to replace a directory or to write below a file", function()
      vim.fn.mkdir(dir .. "/adir")
      assert.matches("is a directory", write("adir", "x").error, 1, true)
      helpers.write_file(dir .. "/plain", "x")
      assert.matches("exists and is not a directory", write("plain/child.txt", "x").error, 1, true)
    end)
  end)

  describe("edit", function()
    local function edit(path, old, new)
      return run(buf, "edit", { path = path, old_string = old, new_string = new, label = vim.NIL })
    end

    it("replaces one unique occurrence", function()
      helpers.write_file(dir .. "/cfg.lua", "local a = 1\nlocal b = 2\nreturn a + b\n")
      local res = edit("cfg.lua", "local b = 2", "local b = 3\nlocal c = 4")
      assert.same({
        success = true,
        output = table.concat({
          "Edited cfg.lua at line 2 (strategy: exact match).",
          "",
          "--- a/cfg.lua",
          "+++ b/cfg.lua",
          "@@ -1,3 +1,4 @@",
          " local a = 1",
          "-local b = 2",
          "+local b = 3",
          "+local c = 4",
          " return a + b",
          "",
          "To undo: :Flemma tool:undo (choose this change from the list).",
        }, "\n"),
      }, res)
      assert.equals("local a = 1\nlocal b = 3\nlocal c = 4\nreturn a + b\n", helpers.read_file(dir .. "/cfg.lua"))
    end)

    it("treats the old text literally, not as a pattern", function()
      helpers.write_file(dir .. "/p.txt", "x = a.b(%d)\n")
      assert.is_true(edit("p.txt", "a.b(%d)", "c").success)
      assert.equals("x = c\n", helpers.read_file(dir .. "/p.txt"))
    end)

    it("says how many matches there were and on which lines when not unique", function()
      local original = "foo\nbar\nfoo\nbaz\nfoo\n"
      helpers.write_file(dir .. "/dup.txt", original)
      local res = edit("dup.txt", "foo", "qux")
      assert.is_false(res.success)
      assert.matches("matches 3 places in dup.txt (exact match) at lines 1, 3, 5", res.error, 1, true)
      assert.equals(original, helpers.read_file(dir .. "/dup.txt"))
      res = edit("dup.txt", "missing", "x")
      assert.is_false(res.success)
      assert.matches("`old_string` was not found in dup.txt", res.error, 1, true)
      assert.equals(original, helpers.read_file(dir .. "/dup.txt"))
    end)

    it("refuses missing files, binary files, empty and unchanged texts", function()
      assert.matches("file not found", edit("none.txt", "a", "b").error, 1, true)
      helpers.write_file(dir .. "/bin", "a\0b")
      assert.matches("binary file", edit("bin", "a", "b").error, 1, true)
      helpers.write_file(dir .. "/t.txt", "abc")
      assert.matches("`old_string` is empty", edit("t.txt", "", "b").error, 1, true)
      assert.matches("are the same", edit("t.txt", "a", "a").error, 1, true)
    end)

    it("edits the target of a symlink and keeps the link", function()
      helpers.write_file(dir .. "/real.txt", "hello world")
      assert(uv.fs_symlink("real.txt", dir .. "/ln.txt"))
      assert.is_true(edit("ln.txt", "world", "there").success)
      assert.equals("hello there", helpers.read_file(dir .. "/real.txt"))
      assert.equals("link", uv.fs_lstat(dir .. "/ln.txt").type)
    end)
  end)

  describe("bash", function()
    local function sh(command, timeout)
      return run(buf, "bash", { command = command, timeout = timeout or vim.NIL, label = vim.NIL }, 15000)
    end

    it("runs a command in the working directory with stderr merged", function()
      local res = sh("pwd; echo to-err >&2")
      assert.is_true(res.success)
      assert.equals(vim.fs.normalize(vim.fn.getcwd()) .. "\nto-err\n", res.output)
    end)

    it("says so when there is no output", function()
      assert.same({ success = true, output = "(no output)" }, sh("true"))
    end)

    it("uses the shell and env of tools.bash", function()
      config.setup({ tools = { bash = { shell = "sh", env = { FLEMMA_SPEC_VAR = "from-config" } } } })
      local res = sh('echo "$0 $FLEMMA_SPEC_VAR"')
      assert.same({ success = true, output = "sh from-config\n" }, res)
    end)

    it("never shows the command a secret of Neovim's environment, unless passed through", function()
      local saved = {}
      local secrets = {
        ANTHROPIC_API_KEY = "sk-ant-flemma-spec",
        OPENAI_API_KEY = "sk-openai-flemma-spec",
        FLEMMA_SPEC_TOKEN = "tok-flemma-spec",
        flemma_spec_secret = "lower-flemma-spec",
        VERTEX_ACCESS_TOKEN = "vertex-flemma-spec",
      }
      for k, v in pairs(secrets) do
        saved[k] = vim.env[k]
        vim.env[k] = v
      end
      local ok, err = pcall(function()
        local res = sh("env")
        assert.is_true(res.success)
        assert.is_nil(res.output:find("flemma-spec", 1, true), "a secret reached the command")
        assert.is_truthy(res.output:find("\nCI=true\n", 1, true))
        config.setup({ tools = { env_passthrough = { "FLEMMA_SPEC_TOKEN" } } })
        res = sh("env")
        assert.is_truthy(res.output:find("FLEMMA_SPEC_TOKEN=tok-flemma-spec", 1, true))
        assert.is_nil(res.output:find("sk-ant-flemma-spec", 1, true))
      end)
      for k in pairs(secrets) do
        vim.env[k] = saved[k]
      end
      assert(ok, err)
    end)

    it("strips secrets by other names and by value, sandboxed or not; env_passthrough names exceptions", function()
      local key = "sk-ant-flemma-value-spec-0123456789"
      local vars = {
        ANTHROPIC_API_KEY = key,
        VERTEX_SERVICE_ACCOUNT = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIflemma\\n-----END PRIVATE KEY-----\\n"}',
        GITHUB_PAT = "ghp_flemma_pat_spec",
        SSH_AUTH_SOCK = "/tmp/flemma-spec-agent.sock",
        XDG_SESSION_ID = "flemma-session-spec",
        MY_COOKIE_JAR = "flemma-cookie-spec",
        DEPLOY_ID_RSA = "-----BEGIN RSA PRIVATE KEY-----\nflemma-pem-spec\n-----END RSA PRIVATE KEY-----",
        SA_JSON = '{"private_key": "flemma-json-spec"}',
        PROXY_HEADER = "Authorization: Bearer " .. key,
        GIT_AUTHOR_NAME = "Flemma Spec Author",
        FLEMMA_SPEC_PLAIN = "plain-value-spec",
      }
      local saved = {}
      for k, v in pairs(vars) do
        saved[k] = vim.env[k]
        vim.env[k] = v
      end
      local ok, err = pcall(function()
        local function check(res, passthrough)
          assert.is_true(res.success, res.error)
          local out = res.output
          for _, gone in ipairs({
            "VERTEX_SERVICE_ACCOUNT",
            "SSH_AUTH_SOCK",
            "XDG_SESSION_ID",
            "MY_COOKIE_JAR",
            "DEPLOY_ID_RSA",
            "SA_JSON",
            "PROXY_HEADER",
            "ANTHROPIC_API_KEY",
          }) do
            assert.is_nil(out:find("\n" .. gone .. "=", 1, true), gone .. " reached the command:\n" .. out)
          end
          for _, value in ipairs({
            key,
            "MIIflemma",
            "flemma-pem-spec",
            "flemma-json-spec",
            "flemma-session-spec",
            "flemma-cookie-spec",
          }) do
            assert.is_nil(out:find(value, 1, true), value .. " reached the command")
          end
          if passthrough then
            assert.is_truthy(out:find("\nGITHUB_PAT=ghp_flemma_pat_spec\n", 1, true), out)
          else
            assert.is_nil(out:find("ghp_flemma_pat_spec", 1, true), out)
          end
          -- What commands need is still there.
          for _, name in ipairs({ "PATH", "HOME", "TERM", "LANG", "USER" }) do
            if vim.env[name] then
              assert.is_truthy(
                out:find("\n" .. name .. "=" .. vim.env[name] .. "\n", 1, true),
                name .. " is missing:\n" .. out
              )
            end
          end
          assert.is_truthy(out:find("\nGIT_AUTHOR_NAME=Flemma Spec Author\n", 1, true), out)
          assert.is_truthy(out:find("\nFLEMMA_SPEC_PLAIN=plain-value-spec\n", 1, true), out)
        end
        -- env -0 would be exact; a leading newline makes every name start a line.
        check(sh("echo; env"), false)
        config.setup({ tools = { env_passthrough = { "GITHUB_PAT" } } })
        check(sh("echo; env"), true)
        config.setup({ tools = { env_passthrough = { "GITHUB_PAT" } }, sandbox = { enabled = true } })
        assert.is_true(require("flemma.policy.sandbox").is_enabled())
        check(sh("echo; env"), true)
      end)
      for k in pairs(vars) do
        vim.env[k] = saved[k]
      end
      config.setup({})
      assert(ok, err)
    end)

    it("takes the password out of URLs in the environment (DATABASE_URL), unless passed through", function()
      local vars = {
        DATABASE_URL = "postgres://app:pg-flemma-pass-spec@db.example:5432/app?sslmode=require",
        REDIS_URL = "redis://:redis-flemma-pass-spec@cache.example:6379/0",
        AMQP_URL = "amqp://rabbit:p@ss-flemma-amqp-spec@mq.example/vhost",
        FLEMMA_SPEC_URLS = "https://u1:one-flemma-spec@a.example,https://u2:two-flemma-spec@b.example/x",
        FLEMMA_SPEC_SITE = "https://host.example:8443/@someone?a=b:c@d",
      }
      local saved = {}
      for k, v in pairs(vars) do
        saved[k] = vim.env[k]
        vim.env[k] = v
      end
      local ok, err = pcall(function()
        local function check(res, passthrough)
          assert.is_true(res.success, res.error)
          local out = res.output
          for _, secret in ipairs({
            "redis-flemma-pass-spec",
            "ss-flemma-amqp-spec",
            "one-flemma-spec",
            "two-flemma-spec",
          }) do
            assert.is_nil(out:find(secret, 1, true), secret .. " reached the command:\n" .. out)
          end
          -- The variables stay, without their passwords.
          for _, line in ipairs({
            "REDIS_URL=redis://cache.example:6379/0",
            "AMQP_URL=amqp://rabbit@mq.example/vhost",
            "FLEMMA_SPEC_URLS=https://u1@a.example,https://u2@b.example/x",
            -- No password in it: as it was.
            "FLEMMA_SPEC_SITE=https://host.example:8443/@someone?a=b:c@d",
          }) do
            assert.is_truthy(out:find("\n" .. line .. "\n", 1, true), line .. " is missing:\n" .. out)
          end
          if passthrough then
            assert.is_truthy(out:find("\nDATABASE_URL=" .. vars.DATABASE_URL .. "\n", 1, true), out)
          else
            assert.is_nil(out:find("pg-flemma-pass-spec", 1, true), out)
            assert.is_truthy(
              out:find("\nDATABASE_URL=postgres://app@db.example:5432/app?sslmode=require\n", 1, true),
              out
            )
          end
        end
        check(sh("echo; env"), false)
        config.setup({ sandbox = { enabled = true } })
        assert.is_true(require("flemma.policy.sandbox").is_enabled())
        check(sh("echo; env"), false)
        config.setup({ tools = { env_passthrough = { "DATABASE_URL" } } })
        check(sh("echo; env"), true)
      end)
      for k in pairs(vars) do
        vim.env[k] = saved[k]
      end
      config.setup({})
      assert(ok, err)
    end)

    it("strips a variable holding a provider's key whatever its name (a dash, a dot)", function()
      -- Names a shell cannot write are still passed on by exec (env(1), systemd,
      -- another program): the child sees them, and `env | curl -d @- ...` sends them.
      local key = "sk-flemma-dashed-spec-" .. tostring(math.random(1e9))
      local vars =
        { FLEMMA_SPEC_PROVIDER_KEY = key, ["CFG-DEPLOY"] = "token=" .. key, ["app.secretless"] = key .. ";x" }
      local saved = {}
      for k, v in pairs(vars) do
        saved[k] = vim.fn.getenv(k)
        vim.fn.setenv(k, v)
      end
      local out = vim.fs.normalize(vim.fn.getcwd()) .. "/flemma-env-spec.txt"
      local ok, err = pcall(function()
        config.setup({
          providers = {
            spec = {
              kind = "anthropic",
              endpoint = "https://api.anthropic.com/v1/messages",
              api_key_env = "FLEMMA_SPEC_PROVIDER_KEY",
            },
          },
        })
        local res = sh("env > " .. vim.fn.shellescape(out) .. "; echo done")
        assert.is_true(res.success, res.error)
        local text = table.concat(vim.fn.readfile(out), "\n")
        assert.is_truthy(text:find("PATH=", 1, true), text)
        -- Only the names are shown: the rest of the environment is the machine's.
        local holders = {}
        for line in (text .. "\n"):gmatch("([^\n]*)\n") do
          if line:find(key, 1, true) then
            holders[#holders + 1] = line:match("^[^=]*")
          end
        end
        assert.same({}, holders, "these variables carried the key to the command")
      end)
      os.remove(out)
      for k in pairs(vars) do
        vim.fn.setenv(k, saved[k])
      end
      config.setup({})
      assert(ok, err)
    end)

    it("refuses an env_passthrough entry that is not a variable name", function()
      local ok, err = pcall(config.setup, { tools = { env_passthrough = { "A=B" } } })
      assert.is_false(ok)
      assert.matches("`tools.env_passthrough[1]` should be a variable name", err, 1, true)
    end)

    it("makes a non-zero exit an error result that keeps the output", function()
      local res = sh("echo partial; exit 3")
      assert.is_false(res.success)
      assert.equals("the command exited with code 3", res.error)
      assert.equals("partial\n", res.output)
    end)

    it("kills a command at its timeout and keeps what it printed", function()
      local t0 = uv.hrtime()
      local res = sh("echo started; sleep 20", 0.3)
      assert.is_false(res.success)
      assert.matches("timed out after 0.3s", res.error, 1, true)
      assert.matches("started", res.output, 1, true)
      assert.is_true((uv.hrtime() - t0) / 1e6 < 5000)
    end)

    it("keeps the tail of long output and names the file with all of it", function()
      local res = sh("seq 1 5000")
      assert.is_true(res.success)
      assert.matches("^%[Output truncated: showing the last 2000 of 5000 lines", res.output)
      assert.matches("\n5000\n$", res.output)
      assert.is_nil(res.output:find("\n2999\n", 1, true))
      local path = res.output:match("Full output: (%S+)%]")
      assert.is_not_nil(path)
      local full = helpers.read_file(path)
      assert.equals(table.concat(vim.fn.range(1, 5000), "\n") .. "\n", full)
    end)

    it("can be cancelled, and the process is gone", function()
      local pidfile = dir .. "/pid"
      local got = {}
      local handle = tools.execute(buf, {
        name = "bash",
        input = { command = "echo $$ > " .. pidfile .. "; exec sleep 30", timeout = vim.NIL, label = vim.NIL },
      }, function(r)
        got[#got + 1] = r
      end)
      helpers.wait_for(function()
        local s = helpers.read_file(pidfile)
        return s and s:match("%d+")
      end, 5000, "the command did not start")
      local pid = tonumber(helpers.read_file(pidfile):match("%d+"))
      handle.cancel()
      helpers.wait_for(function()
        return #got > 0
      end, 2000)
      assert.is_false(got[1].success)
      assert.matches("cancelled", got[1].error, 1, true)
      helpers.wait_for(function()
        return uv.kill(pid, 0) ~= 0
      end, 5000, "the process is still alive after cancel")
    end)
  end)

  describe("with the sandbox on", function()
    local outside
    before_each(function()
      outside = helpers.tmpdir()
      config.setup({ sandbox = { enabled = true, policy = { rw_paths = { dir } } } })
    end)

    it("write is refused outside the writable paths and allowed inside", function()
      local res = run(buf, "write", { path = outside .. "/no.txt", content = "x", label = vim.NIL })
      assert.is_false(res.success)
      assert.matches("^sandbox: " .. vim.pesc(outside) .. "/no.txt is outside the writable paths", res.error)
      assert.is_nil(uv.fs_stat(outside .. "/no.txt"))
      assert.is_true(run(buf, "write", { path = "yes.txt", content = "x", label = vim.NIL }).success)
      assert.equals("x", helpers.read_file(dir .. "/yes.txt"))
    end)

    it("write through a symlink is refused when its target is outside", function()
      helpers.write_file(outside .. "/target.txt", "keep")
      assert(uv.fs_symlink(outside .. "/target.txt", dir .. "/sneaky.txt"))
      local res = run(buf, "write", { path = "sneaky.txt", content = "changed", label = vim.NIL })
      assert.is_false(res.success)
      assert.equals("keep", helpers.read_file(outside .. "/target.txt"))
    end)

    it("edit is refused outside the writable paths", function()
      helpers.write_file(outside .. "/f.txt", "hello")
      local res =
        run(buf, "edit", { path = outside .. "/f.txt", old_string = "hello", new_string = "bye", label = vim.NIL })
      assert.is_false(res.success)
      assert.matches("^sandbox: ", res.error)
      assert.equals("hello", helpers.read_file(outside .. "/f.txt"))
    end)

    it("write never lands outside the roots while a process swaps a symlink in the path", function()
      -- dir/d flips between a real directory and a symlink to `outside` (one
      -- renameat2 RENAME_EXCHANGE with dir/e each time), as fast as it can.
      local swapper = vim.system({
        "/usr/bin/python3",
        "-c",
        [[
import ctypes, os, sys
os.chdir(sys.argv[1])
os.mkdir("d")
os.symlink(sys.argv[2], "e")
libc = ctypes.CDLL(None, use_errno=True)
print("swapping", flush=True)
while True:
    libc.renameat2(-100, b"d", -100, b"e", 2)
]],
        dir,
        outside,
      })
      helpers.wait_for(function()
        return vim.uv.fs_lstat(dir .. "/e") ~= nil
      end, 5000, "the swapper did not start")
      -- Thousands of calls in one buffer: the rate limit (its own spec) is off here.
      config.setup({ sandbox = { enabled = true, policy = { rw_paths = { dir } } }, tools = { rate_limit = false } })
      -- At least 400 tries, and on until one landed (a loaded machine can refuse the
      -- first few hundred: each try must find d a directory from check to write).
      local wrote, refused, why = 0, 0, {}
      local i = 0
      while i < 400 or (wrote == 0 and i < 4000) do
        i = i + 1
        local res = run(buf, "write", { path = "d/f.txt", content = "write " .. i .. "\n", label = vim.NIL })
        if res.success then
          wrote = wrote + 1
        else
          refused = refused + 1
          why[res.error or "?"] = (why[res.error or "?"] or 0) + 1
        end
      end
      swapper:kill(9)
      swapper:wait(2000)
      assert.same({}, dir_entries(outside), ("%d writes, %d refused"):format(wrote, refused))
      assert.is_true(wrote > 0, "no write succeeded: " .. vim.inspect(why))
    end)

    it("edit writes beneath the roots as well", function()
      helpers.write_file(dir .. "/e.txt", "hello\n")
      local res = run(buf, "edit", { path = "e.txt", old_string = "hello", new_string = "bye", label = vim.NIL })
      assert.is_true(res.success, res.error)
      assert.equals("bye\n", helpers.read_file(dir .. "/e.txt"))
      assert.is_true(run(buf, "write", { path = "new/deep/f.txt", content = "x", label = vim.NIL }).success)
      assert.equals("x", helpers.read_file(dir .. "/new/deep/f.txt"))
      local res2 = run(buf, "write", { path = ".git/config", content = "x", label = vim.NIL })
      assert.is_false(res2.success)
    end)

    it("bash runs inside the sandbox: writes outside the writable paths fail", function()
      assert.is_true(require("flemma.policy.sandbox").is_enabled())
      local res = run(buf, "bash", {
        command = ("touch %s/in.txt && touch %s/out.txt"):format(dir, outside),
        timeout = vim.NIL,
        label = vim.NIL,
      }, 15000)
      assert.is_false(res.success)
      assert.is_not_nil(uv.fs_stat(dir .. "/in.txt"))
      assert.is_nil(uv.fs_stat(outside .. "/out.txt"))
    end)
  end)
end)
