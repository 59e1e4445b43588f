-- Secret places beyond ~/.ssh and friends: what GNUPGHOME, KUBECONFIG and the like name,
-- shell histories, and the shared temporary directories while the sandbox is on.
-- Real <C-]>, real bwrap, the requests a loopback server recorded.
local helpers = require("spec.support.helpers")

local KEY = "sk-secret-env-spec-" .. tostring(math.random(1e9))
local GPG = "GPG-KEYRING-BYTES-" .. tostring(math.random(1e9))
local HIST = "HISTORY-TOKEN-" .. tostring(math.random(1e9))
local TMPTEXT = "SOMEONE-ELSES-TMP-" .. tostring(math.random(1e9))

local press, text = helpers.press, helpers.text

local function status(buf)
  return text(buf):match("```flemma:tool status=(%a+)")
end

local function call(name, id, input)
  return {
    "@You:",
    "Go.",
    "",
    "@Assistant:",
    ("**Tool Use:** `%s` (`%s`)"):format(name, id),
    "",
    "```json",
    vim.json.encode(input),
    "```",
  }
end

describe("secret places named by the environment, histories and /tmp", function()
  local h, server, home, project, saved, prompts, answer, orig_select

  before_each(function()
    orig_select = vim.ui.select
    prompts, answer = {}, nil
    vim.ui.select = function(items, o, cb)
      prompts[#prompts + 1] = { items = items, prompt = o.prompt }
      cb(answer)
    end
    h = helpers.send_harness({ key = KEY, timeout = 15000, secrets = { GPG, HIST, TMPTEXT } })
    server = h.server
    home, project = helpers.tmpdir(), helpers.tmpdir()
    saved = { home = vim.env.HOME, gnupg = vim.env.GNUPGHOME, cwd = vim.fn.getcwd() }
    vim.env.HOME = home
    vim.env.GNUPGHOME = project .. "/gpg"
    helpers.write_file(project .. "/gpg/pubring.kbx", GPG .. "\n")
    helpers.write_file(home .. "/.bash_history", "export TOKEN=" .. HIST .. "\n")
    helpers.write_file(project .. "/notes.txt", "PROJECT-NOTES\n")
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    require("flemma.policy.reach").reset()
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
    require("flemma.policy.sandbox").set_enabled(nil)
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    vim.env.HOME = saved.home
    vim.env.GNUPGHOME = saved.gnupg
    require("flemma.policy.reach").reset()
    h.teardown()
  end)

  it("counts what GNUPGHOME names as secret: an auto-approved read there stays pending", function()
    assert.is_truthy(require("flemma.policy.secret_paths").check(project .. "/gpg/pubring.kbx"))
    local buf = helpers.edit(project .. "/talk.chat", call("read", "toolu_g1", { path = "gpg/pubring.kbx" }))
    press("<C-]>")
    vim.wait(300)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(text(buf):find(GPG, 1, true))
    -- A file of the project that is no secret is read as before.
    local buf2 = helpers.edit(project .. "/talk2.chat", call("read", "toolu_g2", { path = "notes.txt" }))
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf2):find("PROJECT-NOTES", 1, true) ~= nil
    end, 5000, "the project's own file was not read: " .. text(buf2))
  end)

  it("counts shell histories and each KUBECONFIG entry as secret", function()
    local sp = require("flemma.policy.secret_paths")
    assert.is_truthy(sp.check(home .. "/.bash_history"))
    assert.is_truthy(sp.check(home .. "/.local/share/fish/fish_history"))
    local saved_kube = vim.env.KUBECONFIG
    vim.env.KUBECONFIG = project .. "/kube/a.yaml:" .. project .. "/kube/b.yaml"
    local ok, err = pcall(function()
      assert.is_truthy(sp.check(project .. "/kube/b.yaml"))
      assert.is_truthy(vim.tbl_contains(sp.paths(), project .. "/kube/a.yaml"))
    end)
    vim.env.KUBECONFIG = saved_kube
    assert(ok, err)
    assert.is_nil(sp.check(project .. "/notes.txt"))
  end)

  it("hides the shell history and GNUPGHOME from a sandboxed command", function()
    local sandbox = require("flemma.policy.sandbox")
    if not sandbox.backend() then
      pending("no sandbox backend here")
      return
    end
    sandbox.set_enabled(true)
    local buf = helpers.edit(
      project .. "/talk.chat",
      call("bash", "toolu_b1", { command = "cat ~/.bash_history gpg/pubring.kbx; echo END-$((40+2))", label = "peek" })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("END-42", 1, true) ~= nil
    end, 10000, "the command did not run: " .. text(buf))
    assert.is_nil(text(buf):find(HIST, 1, true), text(buf))
    assert.is_nil(text(buf):find(GPG, 1, true), text(buf))
  end)

  it("asks before a @reference to a file in /tmp is sent while the sandbox is on", function()
    local sandbox = require("flemma.policy.sandbox")
    if not sandbox.backend() then
      pending("no sandbox backend here")
      return
    end
    -- $HOME where it usually is: a root that contains $HOME (as /tmp would contain a
    -- $HOME made below it) is dropped for another reason.
    vim.env.HOME = saved.home
    sandbox.set_enabled(true)
    local other = vim.fn.tempname() .. "-elsewhere.txt"
    assert.equals("/tmp/", other:sub(1, 5))
    helpers.write_file(other, TMPTEXT .. "\n")
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Summarize @" .. other })
    assert.is_false(vim.tbl_contains(require("flemma.policy.scope").roots(buf), "/tmp"))
    answer = "Do not send"
    press("<C-]>")
    vim.wait(400)
    os.remove(other)
    assert.equals(1, #prompts)
    assert.matches("from outside the project", prompts[1].prompt, 1, true)
    assert.same({}, server:requests())
  end)
end)
