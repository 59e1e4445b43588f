-- End-to-end attacks from a hostile "provider" (the loopback server) against a real
-- headless Neovim: real <C-]>, real bash/bwrap/curl, autopilot on. Each case is one
-- bypass an attack review found; see the commit that added it.
local helpers = require("spec.support.helpers")

local KEY = "sk-flemma-attack-" .. tostring(math.random(1e9)) .. "-" .. tostring(math.random(1e9))

local anthropic_answer = helpers.anthropic_answer

-- A tool result that holds the API key never reaches the chat (a file) or the
-- provider: many users keep `export X_API_KEY=...` in ~/.bashrc or a project script,
-- and with the sandbox on `cat ~/.bashrc` is auto-approved; an auto-approved `read`
-- of a project file does the same without the sandbox.
describe("a tool result holding the API key", function()
  local h, server, saved, home, project

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    saved = { HOME = vim.env.HOME, cwd = vim.fn.getcwd() }
    -- Outside /tmp, which the sandbox replaces by a private tmpfs.
    home = vim.fs.normalize(assert(vim.uv.fs_realpath(assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-attack-XXXXXX")))))
    vim.env.HOME = home
    helpers.write_file(home .. "/.bashrc", "alias ll='ls -l'\nexport FLEMMA_SPEC_KEY=" .. KEY .. "\n")
    project = home .. "/projects/app"
    vim.fn.mkdir(project, "p")
    helpers.write_file(project .. "/deploy.sh", "#!/bin/sh\nKEY='" .. KEY .. "' ./run\n")
    vim.cmd.cd(project)
  end)

  after_each(function()
    h.teardown()
    vim.cmd.cd(saved.cwd)
    vim.env.HOME = saved.HOME
    vim.fn.delete(home, "rf")
  end)

  local function run(sandbox, use)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      sandbox = { enabled = sandbox, backend = "bwrap" },
      tools = { autopilot = { enabled = true } },
    })
    server:script({
      { body = anthropic_answer("Let me look.", { use }), content_type = "text/event-stream" },
      { body = anthropic_answer("Thanks."), content_type = "text/event-stream" },
    })
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(2, 60000).status)
    helpers.settle()
    local reqs = server:requests()
    assert.equals(2, #reqs)
    local text = helpers.text(buf)
    -- The tool ran (its result is in the chat), and the key is not in it.
    assert.truthy(text:find("**Tool Result:** `" .. use.id .. "`", 1, true), text)
    assert.truthy(text:find("[redacted]", 1, true), text)
    assert.is_nil(text:find(KEY, 1, true), "the key is in the chat:\n" .. text)
    assert.is_nil(reqs[2].body:find(KEY, 1, true), "the key was sent to the provider in a tool result")
  end

  it("from `cat ~/.bashrc` in the sandbox (auto-approved) is redacted", function()
    if vim.fn.executable("bwrap") ~= 1 then
      pending("bwrap is not installed")
      return
    end
    run(true, { id = "toolu_cat", name = "bash", input = { command = "cat ~/.bashrc" } })
  end)

  it("from an auto-approved read of a project file is redacted", function()
    run(false, { id = "toolu_read", name = "read", input = { path = "deploy.sh" } })
  end)
end)

-- A truncated output is kept whole in a file the result names ("Full output: PATH"):
-- the key a command prints lands there as well, and the model can ask to read it.
describe("the file holding a truncated tool output", function()
  local h, server, saved, project

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    saved = { cwd = vim.fn.getcwd() }
    project = vim.fs.normalize(assert(vim.uv.fs_realpath(assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-attack-XXXXXX")))))
    helpers.write_file(project .. "/deploy.sh", "KEY='" .. KEY .. "' ./run\n")
    vim.cmd.cd(project)
  end)

  after_each(function()
    h.teardown()
    vim.cmd.cd(saved.cwd)
    vim.fn.delete(project, "rf")
  end)

  it("is redacted as the result in the buffer is, a key split between two pieces included", function()
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      tools = { autopilot = { enabled = true }, auto_approve = { "bash" } },
    })
    -- The key at the start, then across the 1 MiB mark (where the file is read in
    -- pieces), then in 3,000 lines (more than the output keeps).
    local line = "KEY='" .. KEY .. "' ./run\n"
    local command = "cat deploy.sh; head -c "
      .. tostring(1024 * 1024 - #line - 5 - 10)
      .. " /dev/zero | tr '\\0' x; cat deploy.sh; for i in $(seq 3000); do cat deploy.sh; done"
    local use = { id = "toolu_big", name = "bash", input = { command = command } }
    server:script({
      { body = anthropic_answer("Let me look.", { use }), content_type = "text/event-stream" },
      { body = anthropic_answer("Thanks."), content_type = "text/event-stream" },
    })
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(2, 60000).status)
    helpers.settle()
    local text = helpers.text(buf)
    assert.is_nil(text:find(KEY, 1, true), "the key is in the chat:\n" .. text)
    local path = text:match("Full output: (/[^%s`%]]+)")
    assert.truthy(path, "the result names no file:\n" .. text)
    local full = assert(helpers.read_file(path))
    os.remove(path)
    assert.truthy(#full > 1024 * 1024, "the whole output is not in the file")
    assert.is_nil(full:find(KEY, 1, true), "the key is in " .. path)
    assert.is_nil(full:find(KEY:sub(1, 20), 1, true), "a part of the key is in " .. path)
    assert.is_nil(full:find(KEY:sub(-12), 1, true), "a part of the key is in " .. path)
    local _, n = full:gsub("KEY='%[redacted%]' %./run\n", "")
    assert.equals(3002, n)
  end)
end)

-- A call is approved for where its path leads when the answer arrives (phase 1) and
-- runs later (phase 3): calls that run before it may change where it leads. With the
-- sandbox on, bash is auto-approved and may make a link to a file it cannot read
-- itself (~/.ssh is hidden from it), and `read` (run by Neovim, outside the sandbox)
-- of a path in the project is auto-approved.
describe("a read whose path a command redirects after the approval", function()
  local h, server, saved, home, project

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    saved = { HOME = vim.env.HOME, cwd = vim.fn.getcwd() }
    home = vim.fs.normalize(assert(vim.uv.fs_realpath(assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-attack-XXXXXX")))))
    vim.env.HOME = home
    helpers.write_file(home .. "/.ssh/id_ed25519", "SECRET-SSH-PRIVATE-KEY\n")
    helpers.write_file(home .. "/.aws/credentials", "SECRET-AWS-CREDENTIALS\n")
    project = home .. "/projects/app"
    vim.fn.mkdir(project, "p")
    helpers.write_file(project .. "/README", "project-readme\n")
    vim.cmd.cd(project)
  end)

  after_each(function()
    h.teardown()
    vim.cmd.cd(saved.cwd)
    vim.env.HOME = saved.HOME
    vim.fn.delete(home, "rf")
  end)

  local function attack(command, path, secret)
    if vim.fn.executable("bwrap") ~= 1 then
      pending("bwrap is not installed")
      return
    end
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      sandbox = { enabled = true, backend = "bwrap" },
      tools = { autopilot = { enabled = true } },
    })
    -- Four commands fill tools.max_concurrent; the read starts when one has ended.
    local uses = {}
    for i = 1, 4 do
      uses[i] = { id = "toolu_ln" .. i, name = "bash", input = { command = command } }
    end
    uses[5] = { id = "toolu_read", name = "read", input = { path = path } }
    server:script({
      { body = anthropic_answer("Setting up.", uses), content_type = "text/event-stream" },
      { body = anthropic_answer("Thanks."), content_type = "text/event-stream" },
    })
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    -- Either the read waits for the user (nothing more is sent), or it ran.
    vim.wait(20000, function()
      return #h.finished >= 2 or (helpers.text(buf):find("**Tool Result:** `toolu_read`", 1, true) ~= nil)
    end, 20)
    helpers.settle()
    vim.wait(2000, function()
      return #h.finished >= 2
    end, 20)
    local text = helpers.text(buf)
    assert.is_nil(text:find(secret, 1, true), "the secret is in the chat:\n" .. text)
    for _, req in ipairs(server:requests()) do
      assert.is_nil(req.body:find(secret, 1, true), "the secret was sent to the provider")
    end
    -- The commands ran; the read waits for the user, its preview saying why.
    local doc = require("flemma.chat.document").parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    local status = {}
    for _, m in ipairs(doc.messages) do
      for _, p in ipairs(m.parts) do
        if p.kind == "tool_result" then
          status[p.id] = p.status or (p.is_error and "error" or "done")
        end
      end
    end
    assert.same(
      { toolu_ln1 = "done", toolu_ln2 = "done", toolu_ln3 = "done", toolu_ln4 = "done", toolu_read = "pending" },
      status
    )
    assert.equals(1, #server:requests())
  end

  it("by a link made after the approval never reads ~/.ssh", function()
    attack('ln -sfn "$HOME/.ssh/id_ed25519" notes.txt', "notes.txt", "SECRET-SSH-PRIVATE-KEY")
  end)

  it("runs alone: no command runs while it reads (a flip loop cannot race it)", function()
    if vim.fn.executable("bwrap") ~= 1 then
      pending("bwrap is not installed")
      return
    end
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      sandbox = { enabled = true, backend = "bwrap" },
      tools = { autopilot = { enabled = true } },
    })
    server:script({
      {
        body = anthropic_answer("Go.", {
          { id = "toolu_slow", name = "bash", input = { command = "sleep 1; echo written-by-bash > order.txt" } },
          { id = "toolu_read", name = "read", input = { path = "order.txt" } },
        }),
        content_type = "text/event-stream",
      },
      { body = anthropic_answer("Thanks."), content_type = "text/event-stream" },
    })
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(2, 60000).status)
    local text = helpers.text(buf)
    assert.truthy(text:find("**Tool Result:** `toolu_read`\n\n```\nwritten-by-bash\n```", 1, true), text)
  end)

  it("by a directory swapped for a link never reads ~/.aws", function()
    helpers.write_file(project .. "/conf/credentials", "project-readme\n")
    attack(
      '[ -L conf ] || { mv conf conf.old && ln -s "$HOME/.aws" conf; }',
      "conf/credentials",
      "SECRET-AWS-CREDENTIALS"
    )
  end)
end)

-- /tmp is a writable root of the sandbox, so part of the project while it is on: a
-- Kerberos ticket cache there (/tmp/krb5cc_UID by default) was read by an
-- auto-approved `read` and `cat`.
describe("a Kerberos ticket in /tmp with the sandbox on", function()
  local h, server, saved, project, ticket

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    saved = { cwd = vim.fn.getcwd() }
    project = vim.fs.normalize(assert(vim.uv.fs_realpath(assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-attack-XXXXXX")))))
    vim.cmd.cd(project)
    ticket = "/tmp/krb5cc_flemma_spec_" .. tostring(math.random(1e9))
    helpers.write_file(ticket, "SECRET-KERBEROS-TICKET\n")
  end)

  after_each(function()
    h.teardown()
    vim.cmd.cd(saved.cwd)
    os.remove(ticket)
    vim.fn.delete(project, "rf")
  end)

  it("is neither read by an auto-approved read nor shown to a sandboxed cat", function()
    if vim.fn.executable("bwrap") ~= 1 then
      pending("bwrap is not installed")
      return
    end
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      sandbox = { enabled = true, backend = "bwrap" },
      tools = { autopilot = { enabled = true } },
    })
    server:script({
      {
        body = anthropic_answer("Looking.", {
          { id = "toolu_cat", name = "bash", input = { command = "cat " .. ticket .. " 2>&1; echo cat-done" } },
          { id = "toolu_read", name = "read", input = { path = ticket } },
        }),
        content_type = "text/event-stream",
      },
      { body = anthropic_answer("Thanks."), content_type = "text/event-stream" },
    })
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    vim.wait(20000, function()
      return helpers.text(buf):find("cat-done", 1, true) ~= nil
    end, 20)
    helpers.settle()
    vim.wait(1000, function()
      return #h.finished >= 2
    end, 20)
    local text = helpers.text(buf)
    assert.truthy(text:find("cat-done", 1, true), text)
    assert.is_nil(text:find("SECRET-KERBEROS", 1, true), "the ticket is in the chat:\n" .. text)
    for _, req in ipairs(server:requests()) do
      assert.is_nil(req.body:find("SECRET-KERBEROS", 1, true), "the ticket was sent")
    end
    assert.truthy(text:find("**Tool Result:** `toolu_read`\n\n```flemma:tool status=pending", 1, true), text)
  end)
end)

-- A key goes over http:// only to this machine; with http_proxy set (a corporate
-- proxy is often exported in the shell), curl sent the request for a loopback
-- endpoint, Authorization and all, in clear to the proxy.
describe("a key for a loopback endpoint with http_proxy set", function()
  local h, server, proxy, saved

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    proxy = require("spec.support.llm_server").start()
    saved = {
      http_proxy = vim.env.http_proxy,
      HTTP_PROXY = vim.env.HTTP_PROXY,
      ALL_PROXY = vim.env.ALL_PROXY,
      all_proxy = vim.env.all_proxy,
      no_proxy = vim.env.no_proxy,
      NO_PROXY = vim.env.NO_PROXY,
    }
    local url = ("http://127.0.0.1:%d"):format(proxy.port)
    vim.env.http_proxy, vim.env.ALL_PROXY = url, url
    vim.env.no_proxy, vim.env.NO_PROXY = nil, nil
  end)

  after_each(function()
    -- Every name, also those that were unset (pairs() skips nil values: the proxy
    -- stayed set for every later spec).
    for _, k in ipairs({ "http_proxy", "HTTP_PROXY", "ALL_PROXY", "all_proxy", "no_proxy", "NO_PROXY" }) do
      vim.env[k] = saved[k]
    end
    proxy:stop()
    h.teardown()
  end)

  it("never goes through the proxy", function()
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
    })
    server:script({ { body = anthropic_answer("Hello."), content_type = "text/event-stream" } })
    proxy:script({ { body = anthropic_answer("Proxied."), content_type = "text/event-stream" } })
    local dir = helpers.tmpdir()
    local buf = helpers.edit(dir .. "/p.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    h.wait_finished(1, 30000)
    assert.equals(0, #proxy:requests(), "the request (and the key) went to the proxy")
    assert.equals(1, #server:requests())
    assert.truthy(helpers.text(buf):find("Hello.", 1, true), helpers.text(buf))
  end)
end)
