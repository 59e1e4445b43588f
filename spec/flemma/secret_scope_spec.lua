-- $HOME and / are never the project, and secret files are never read without the user
-- (issue 23 §3): HOME is a temporary directory holding ~/.ssh/id_rsa, the cwd is set as
-- a user would start Neovim, <C-]> is pressed, and the assertions are on the requests
-- the loopback server recorded, the buffer's text and the previews shown.
local helpers = require("spec.support.helpers")

local KEY = "sk-secret-scope-spec-" .. tostring(math.random(1e9))
local PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nPRIVATE-KEY-BYTES-" .. tostring(math.random(1e9)) .. "\n"
local ENV = "DATABASE_PASSWORD=ENV-SECRET-" .. tostring(math.random(1e9)) .. "\n"

local press, text = helpers.press, helpers.text
local preview = require("flemma.ui.preview")
local scope = require("flemma.policy.scope")
local secret_paths = require("flemma.policy.secret_paths")

-- Everything the model was sent, as one string.
local function sent(req)
  return req.body or ""
end

local function all_sent(server)
  local out = {}
  for _, r in ipairs(server:requests()) do
    out[#out + 1] = sent(r)
  end
  return table.concat(out, "\n")
end

local function status(buf)
  return text(buf):match("```flemma:tool status=(%a+)")
end

local function read_call(path)
  return {
    "@You:",
    "Go.",
    "",
    "@Assistant:",
    "**Tool Use:** `read` (`toolu_01`)",
    "",
    "```json",
    vim.json.encode({ path = path, offset = vim.NIL, limit = vim.NIL, label = vim.NIL }),
    "```",
  }
end

describe("secret files and the project's roots", function()
  local h, server, home, saved, prompts, answer, orig_select

  local function stub_ui()
    vim.ui.select = function(items, o, cb)
      prompts[#prompts + 1] = { items = items, prompt = o.prompt }
      cb(answer)
    end
  end

  before_each(function()
    orig_select = vim.ui.select
    prompts, answer = {}, nil
    h = helpers.send_harness({ key = KEY, timeout = 15000, secrets = { "PRIVATE-KEY-BYTES", "ENV-SECRET" } })
    server = h.server
    home = helpers.tmpdir()
    saved = { home = vim.env.HOME, cwd = vim.fn.getcwd() }
    vim.env.HOME = home
    helpers.write_file(home .. "/.ssh/id_rsa", PRIVATE)
    helpers.write_file(home .. "/.ssh/id_rsa.pub", "ssh-ed25519 AAAA public\n")
    helpers.write_file(home .. "/diary.txt", "DIARY-TEXT\n")
    helpers.write_file(home .. "/proj/notes.txt", "PROJECT-NOTES\n")
    require("flemma.policy.reach").reset()
    require("flemma.policy.sandbox").set_enabled(nil)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false } },
    })
    server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
  end)

  after_each(function()
    vim.ui.select = orig_select
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    vim.env.HOME = saved.home
    require("flemma.policy.reach").reset()
    h.teardown()
  end)

  describe("with Neovim started in $HOME", function()
    before_each(function()
      vim.cmd("cd " .. vim.fn.fnameescape(home))
    end)

    it("does not send @~/.ssh/id_rsa without a UI to ask, and says so in one line", function()
      assert.is_false(require("flemma.core.util").can_ask())
      local buf = helpers.edit(home .. "/talk.chat", { "@You:", "Summarize @~/.ssh/id_rsa please." })
      press("<C-]>")
      vim.wait(400)
      assert.same({}, server:requests())
      local warned = vim.tbl_filter(function(n)
        return n.msg:find("secret file", 1, true) ~= nil
      end, h.notes)
      assert.equals(1, #warned, vim.inspect(h.notes))
      assert.is_nil(warned[1].msg:find("\n", 1, true), warned[1].msg)
      assert.matches("no UI", warned[1].msg, 1, true)
      assert.matches("remove the reference", warned[1].msg, 1, true)
      local diags = vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })
      assert.equals(1, #diags)
      assert.equals(1, diags[1].lnum)
      assert.matches("secret file", diags[1].message, 1, true)
      assert.same({ "@You:", "Summarize @~/.ssh/id_rsa please." }, helpers.lines(buf))
    end)

    it("asks before @~/.ssh/id_rsa is sent, saying it is a secret; declined, nothing is sent", function()
      stub_ui()
      helpers.edit(home .. "/talk.chat", { "@You:", "Summarize @~/.ssh/id_rsa please." })
      answer = "Do not send"
      press("<C-]>")
      vim.wait(400)
      assert.equals(1, #prompts)
      assert.matches("secret", prompts[1].prompt, 1, true)
      assert.matches("id_rsa", prompts[1].prompt, 1, true)
      assert.same({}, server:requests())
      -- The user's explicit yes sends it.
      answer = "Send"
      press("<C-]>")
      h.wait_finished(1)
      assert.equals(2, #prompts)
      assert.matches("PRIVATE-KEY-BYTES", all_sent(server), 1, true)
    end)

    it("does not send a file include() names in ~/.ssh without asking", function()
      local buf =
        helpers.edit(home .. "/talk.chat", { "@System:", '{{ include("~/.ssh/id_rsa") }}', "", "@You:", "hi" })
      press("<C-]>")
      vim.wait(400)
      assert.same({}, server:requests())
      assert.equals(1, #vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns }))
      stub_ui()
      answer = nil -- dismissed
      press("<C-]>")
      vim.wait(400)
      assert.equals(1, #prompts)
      assert.same({}, server:requests())
    end)

    it("has no project root when the chat file is in $HOME itself", function()
      local buf = helpers.edit(home .. "/talk.chat", { "@You:", "hi" })
      assert.same({}, scope.roots(buf))
      -- Not even for a file that is no secret: ~/diary.txt is outside the project.
      stub_ui()
      vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "@./diary.txt" })
      answer = "Do not send"
      press("<C-]>")
      vim.wait(400)
      assert.equals(1, #prompts)
      assert.matches("from outside the project", prompts[1].prompt, 1, true)
      assert.same({}, server:requests())
    end)

    it("takes the chat file's directory below $HOME as the project", function()
      stub_ui()
      local buf = helpers.edit(home .. "/proj/talk.chat", { "@You:", "Read @./notes.txt" })
      assert.same({ home .. "/proj" }, scope.roots(buf))
      press("<C-]>")
      h.wait_finished(1)
      assert.equals(0, #prompts)
      assert.matches("PROJECT-NOTES", all_sent(server), 1, true)
      -- A file of $HOME outside that directory asks.
      server:script({ { fixture = "anthropic_text.sse" } })
      vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "", "@You:", "and @~/diary.txt" })
      answer = "Do not send"
      press("<C-]>")
      vim.wait(400)
      assert.equals(1, #prompts)
      assert.matches("from outside the project", prompts[1].prompt, 1, true)
      assert.same({}, server:requests())
    end)

    it("never takes / as a root, nor a chat directory outside $HOME then", function()
      local elsewhere = helpers.tmpdir()
      vim.cmd("cd /")
      local buf = helpers.edit(elsewhere .. "/talk.chat", { "@You:", "hi" })
      assert.same({}, scope.roots(buf))
      buf = helpers.edit(home .. "/proj/other.chat", { "@You:", "hi" })
      assert.same({ home .. "/proj" }, scope.roots(buf))
      -- With a real project as the cwd, $HOME as the chat's directory is no root either.
      vim.cmd("cd " .. vim.fn.fnameescape(elsewhere))
      buf = helpers.edit(home .. "/third.chat", { "@You:", "hi" })
      assert.same({ elsewhere }, scope.roots(buf))
    end)

    it("leaves an auto-approved read of ~/.ssh/id_rsa pending, its preview saying why", function()
      local buf = helpers.edit(home .. "/proj/talk.chat", read_call("~/.ssh/id_rsa"))
      press("<C-]>")
      vim.wait(200)
      assert.equals("pending", status(buf), text(buf))
      assert.is_nil(text(buf):find("PRIVATE-KEY-BYTES", 1, true))
      assert.equals("read: ~/.ssh/id_rsa (secret file: approve explicitly)", preview.shown(buf)[1].text)
    end)
  end)

  describe("inside a normal project", function()
    local project

    before_each(function()
      project = helpers.tmpdir()
      vim.cmd("cd " .. vim.fn.fnameescape(project))
      helpers.write_file(project .. "/.env", ENV)
      helpers.write_file(project .. "/readme.txt", "README-TEXT\n")
    end)

    it("leaves an auto-approved read of .env pending, its preview saying why", function()
      local buf = helpers.edit(project .. "/talk.chat", read_call(".env"))
      press("<C-]>")
      vim.wait(200)
      assert.equals("pending", status(buf), text(buf))
      assert.is_nil(text(buf):find("ENV-SECRET", 1, true))
      assert.equals("read: .env (secret file: approve explicitly)", preview.shown(buf)[1].text)
      -- A plain file of the project is still read without asking.
      buf = helpers.edit(project .. "/two.chat", read_call("readme.txt"))
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("README-TEXT", 1, true) ~= nil
      end, 5000, text(buf))
    end)

    it("counts a symlink in the project that leads to ~/.ssh/id_rsa as a secret", function()
      assert(vim.uv.fs_symlink(home .. "/.ssh/id_rsa", project .. "/notes.txt"))
      local buf = helpers.edit(project .. "/talk.chat", read_call("notes.txt"))
      press("<C-]>")
      vim.wait(200)
      assert.equals("pending", status(buf), text(buf))
      assert.is_nil(text(buf):find("PRIVATE-KEY-BYTES", 1, true))
      assert.equals("read: notes.txt (secret file: approve explicitly)", preview.shown(buf)[1].text)
    end)

    it("asks before @./.env inside the project is sent", function()
      stub_ui()
      helpers.edit(project .. "/talk.chat", { "@You:", "Check @./.env and @./readme.txt" })
      answer = "Do not send"
      press("<C-]>")
      vim.wait(400)
      assert.equals(1, #prompts)
      assert.matches(".env", prompts[1].prompt, 1, true)
      assert.is_nil(prompts[1].prompt:find("readme", 1, true))
      assert.same({}, server:requests())
    end)
  end)

  describe("the list", function()
    it("knows secret names and places, following links and `..`", function()
      local dir = helpers.tmpdir()
      local function file(name, content)
        helpers.write_file(dir .. "/" .. name, content or "x\n")
        return dir .. "/" .. name
      end
      for _, name in ipairs({ ".env", ".env.local", "server.pem", "tls.KEY", "id_ed25519", "id_rsa" }) do
        assert.is_string(secret_paths.check(file(name)), name)
      end
      -- Private keys in other containers, copies of a key kept aside, credential
      -- files of $HOME copied into a project.
      for _, name in ipairs({
        "deploy.ppk",
        "client.P12",
        "cert.pfx",
        "release.jks",
        "app.keystore",
        "vault.kdbx",
        "id_rsa.bak",
        "id_ed25519.old",
        "id_rsa~",
        "id_ecdsa.orig",
        ".git-credentials",
        ".netrc",
        ".pgpass",
      }) do
        assert.is_string(secret_paths.check(file(name)), name)
      end
      for _, name in ipairs({
        "id_rsa.pub",
        "id_utils.py",
        "notes.txt",
        "environment.md",
        "keys.txt",
        "id_rsa.pub.bak",
        "keystore.md",
      }) do
        assert.is_nil(secret_paths.check(file(name)), name)
      end
      vim.fn.mkdir(dir .. "/npm", "p")
      assert.is_string(secret_paths.check(file("npm/.npmrc", "//registry.npmjs.org/:_authToken=abc\n")))
      assert.is_string(secret_paths.check(file(".pypirc", "[pypi]\nusername = me\npassword = hunter2\n")))
      assert.is_nil(secret_paths.check(file(".npmrc", "registry=https://registry.npmjs.org/\n")))
      -- A FIFO named .npmrc is not opened (that would block): it counts as a secret.
      vim.fn.mkdir(dir .. "/fifo", "p")
      vim.fn.system({ "mkfifo", dir .. "/fifo/.npmrc" })
      assert.equals(0, vim.v.shell_error)
      assert.is_string(secret_paths.check(dir .. "/fifo/.npmrc"))
      assert.equals("under ~/.ssh", secret_paths.check(home .. "/.ssh/id_rsa.pub"))
      assert.equals("under ~/.aws", secret_paths.check(home .. "/.aws/credentials"))
      assert.equals("under ~/.ssh", secret_paths.check(home .. "/proj/../.ssh/x"))
      assert(vim.uv.fs_symlink(home .. "/.ssh", dir .. "/keys"))
      assert.equals("under ~/.ssh", secret_paths.check(dir .. "/keys/id_rsa.pub"))
      assert.is_string(secret_paths.check(vim.fn.stdpath("state") .. "/flemma/trust.json"))
      assert.is_string(secret_paths.check(vim.fn.stdpath("data") .. "/anything"))
      local saved_xdg = vim.env.XDG_CONFIG_HOME
      vim.env.XDG_CONFIG_HOME = dir .. "/xdg"
      local ok, why = pcall(secret_paths.check, dir .. "/xdg/gh/hosts.yml")
      vim.env.XDG_CONFIG_HOME = saved_xdg
      assert(ok, why)
      assert.equals("under " .. dir .. "/xdg/gh", why)
      for _, rel in ipairs(secret_paths.HOME_ENTRIES) do
        assert.is_string(secret_paths.check(home .. "/" .. rel), rel)
      end
    end)
  end)
end)
