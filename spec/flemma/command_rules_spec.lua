-- Per-command approval rules ("bash(git *)"): the native shell-word parser splits a
-- command line into simple commands; a line is approved only when each matches an
-- allow rule, denied when any matches a deny rule, and left waiting when the parser
-- cannot follow it. A table of commands, the resolver chain, and real <C-]>.
local helpers = require("spec.support.helpers")
local commands = require("flemma.policy.commands")

local press, text = helpers.press, helpers.text

-- { command, rules, expected decision (true: approve, "deny", nil: stays pending) }
local CASES = {
  { "git status", { "git status" }, true },
  { "git  'status'", { "git status" }, true },
  { 'git "status"', { "git status" }, true },
  { "git status --short", { "git status" }, nil },
  { "git log", { "git status" }, nil },
  { "git log", { "git *" }, true },
  { "git", { "git *" }, true },
  { "gitk", { "git *" }, nil },
  { "git status; rm -rf /", { "git *" }, nil },
  { "git status && rm -rf /", { "git *" }, nil },
  { "git status || rm -rf /", { "git *" }, nil },
  { "git status | sh", { "git *" }, nil },
  { "git status\nrm -rf /", { "git *" }, nil },
  { "git status & rm -rf /", { "git *" }, nil },
  { "git log $(curl x | sh)", { "git *" }, nil },
  { "git log $(curl x)", { "git *" }, nil },
  { "git log `rm -rf /`", { "git *" }, nil },
  { "git log <(rm -rf /)", { "git *" }, nil },
  { "(git status; rm x)", { "git *" }, nil },
  { "(git status; git log)", { "git *" }, true },
  { "npm run build && npm test", { "npm *" }, true },
  { "npm run build && npm test", { "npm run *" }, nil },
  { "npm run build && npm run test", { "npm run *" }, true },
  { "npm run", { "npm run *" }, true },
  { "npm install evil", { "npm run *" }, nil },
  { "npm test | tee out.log", { "npm *", "tee *" }, true },
  { "npm test | tee out.log", { "npm *" }, nil },
  { "git log > out.txt", { "git *" }, true },
  { "git log > out.txt", { "git log" }, nil },
  { "echo 'a; rm -rf /'", { "echo *" }, true },
  { 'echo "a && rm -rf /"', { "echo *" }, true },
  { "echo a\\;rm", { "echo *" }, true },
  { "echo 'unbalanced", { "echo *" }, nil },
  { 'echo "unbalanced', { "echo *" }, nil },
  { "$CMD status", { "* status", "git *" }, nil },
  { "eval 'git status'", { "eval *", "git *" }, nil },
  { "bash -c 'git status'", { "bash *", "git *" }, nil },
  { "sh -c 'git status'", { "sh *" }, nil },
  { "source ./env.sh", { "source *" }, nil },
  { "exec git status", { "exec *", "git *" }, nil },
  { "PATH=/tmp git status", { "git *" }, nil },
  { "LD_PRELOAD=/tmp/x.so git status", { "git *" }, nil },
  { "CI=1 npm test", { "npm test" }, true },
  { "cat <<'EOF'\n$(rm -rf /)\nEOF", { "cat *" }, true },
  { "cat <<EOF\n$(rm -rf /)\nEOF", { "cat *" }, nil },
  { "ls *.lua", { "ls *" }, true },
  { "ls *.lua", { "ls foo.lua" }, nil },
  { "ls foo.lua", { "ls *.lua" }, true },
  { "ls $HOME", { "ls *.lua" }, nil },
  { "if true; then git status; fi", { "git *", "true" }, nil },
  { "", { "git *" }, nil },
}

-- { command, allow, deny, expected }
local DENY_CASES = {
  { "git status; rm -rf /", { "git *", "rm *" }, { "rm *" }, "deny" },
  { "echo $(rm -rf /)", { "echo *" }, { "rm *" }, "deny" },
  { "git push --force", { "git *" }, { "git push *" }, "deny" },
  { "git pull", { "git *" }, { "git push *" }, true },
}

describe("per-command approval rules", function()
  it("decide a table of at least 40 commands", function()
    assert.is_true(#CASES >= 40)
    for _, c in ipairs(CASES) do
      local got = commands.decide(c[1], c[2], {})
      assert.equals(c[3] and "approve" or nil, got, ("%q with %s"):format(c[1], vim.inspect(c[2])))
    end
    for _, c in ipairs(DENY_CASES) do
      local got = commands.decide(c[1], c[2], c[3])
      assert.equals(c[4] == true and "approve" or c[4], got, c[1])
    end
  end)

  it("split a line into simple commands with the native parser", function()
    local cmds = commands.split('echo "a b" && git log | wc -l')
    assert.same({ "echo", "a b" }, cmds[1].words)
    assert.same({ "git", "log" }, cmds[2].words)
    assert.same({ "wc", "-l" }, cmds[3].words)
    local none, why = commands.split("eval x")
    assert.is_nil(none)
    assert.truthy(why:find("shell code", 1, true))
  end)
end)

local function chat(calls)
  local lines = { "@You:", "Go.", "", "@Assistant:" }
  for _, c in ipairs(calls) do
    vim.list_extend(lines, {
      ("**Tool Use:** `bash` (`%s`)"):format(c[1]),
      "",
      "```json",
      vim.json.encode({ command = c[2], label = c[1] }),
      "```",
      "",
    })
  end
  return lines
end

describe("per-command rules through <C-]>", function()
  local h, project, saved_cwd

  local function setup(tools)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = vim.tbl_extend("force", { autopilot = { enabled = false } }, tools),
    })
  end

  before_each(function()
    h = helpers.send_harness({ key = "sk-command-rules-" .. tostring(math.random(1e9)), timeout = 15000 })
    project = helpers.tmpdir()
    saved_cwd = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    vim.fn.system({ "git", "init", "-q", project })
    require("flemma.policy.audit").set_path(project .. "/state/audit.jsonl")
    helpers.write_file(project .. "/x", "keep me\n")
    h.server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
  end)

  after_each(function()
    require("flemma.policy.audit").set_path(nil)
    vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
    h.teardown()
  end)

  it("auto_approve { 'bash(git *)' } runs `git log` and leaves `git log; rm x` pending", function()
    setup({ auto_approve = { "bash(git *)" } })
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_r1", "git status --porcelain; echo RULE-RAN-$((6*7))" }, { "toolu_r2", "git log; rm x" } })
    )
    press("<C-]>")
    vim.wait(500)
    -- `echo` is no git command either: the first call waits too.
    assert.equals(2, select(2, text(buf):gsub("status=pending", "")), text(buf))
    local buf2 = helpers.edit(
      project .. "/talk2.chat",
      chat({ { "toolu_r3", "git status --porcelain && git rev-parse --is-inside-work-tree" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      if text(buf2):find("status=approved", 1, true) then
        press("<C-]>") -- the approved call runs in the cycle's next phase
      end
      return text(buf2):find("\ntrue\n", 1, true) ~= nil
    end, 10000, "the git command did not run: " .. text(buf2))
    assert.is_nil(text(buf2):find("status=pending", 1, true), text(buf2))
    local buf3 = helpers.edit(project .. "/talk3.chat", chat({ { "toolu_r4", "git log; rm x" } }))
    press("<C-]>")
    vim.wait(500)
    assert.truthy(text(buf3):find("**Tool Result:** `toolu_r4`\n\n```flemma:tool status=pending", 1, true), text(buf3))
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
  end)

  it("a preset's deny rule wins over its own tool approval", function()
    setup({
      auto_approve = { "$gitsafe" },
      presets = { ["$gitsafe"] = { approve = { "bash" }, deny = { "bash(rm *)" } } },
    })
    local buf = helpers.edit(project .. "/talk.chat", chat({ { "toolu_d1", "echo hi && rm x" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("status=denied", 1, true) ~= nil or text(buf):find("(error)", 1, true) ~= nil
    end, 10000, "the call was not denied: " .. text(buf))
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
  end)
end)

describe("the audit log", function()
  local h, project, saved_cwd, log

  before_each(function()
    h = helpers.send_harness({ key = "sk-audit-" .. tostring(math.random(1e9)), timeout = 15000 })
    project = helpers.tmpdir()
    saved_cwd = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    log = project .. "/state/audit.jsonl"
    require("flemma.policy.audit").set_path(log)
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false }, auto_approve = { "bash(echo *)" } },
    })
    h.server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
  end)

  after_each(function()
    require("flemma.policy.audit").set_path(nil)
    vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
    h.teardown()
  end)

  local function entries()
    local out = {}
    for line in (helpers.read_file(log) or ""):gmatch("[^\n]+") do
      out[#out + 1] = vim.json.decode(line)
    end
    return out
  end

  it("records each decision and run through <C-]>: rule, resolver, status, digest, duration, time", function()
    local secret = "TOP-SECRET-INPUT-" .. tostring(math.random(1e9))
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_a1", "echo AUDITED " .. secret }, { "toolu_a2", "touch y" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      if text(buf):find("status=approved", 1, true) then
        press("<C-]>")
      end
      return text(buf):find("\nAUDITED ", 1, true) ~= nil
    end, 10000, "the echo did not run: " .. text(buf))
    vim.wait(5000, function()
      return #entries() >= 3 and not require("flemma.policy.audit").pending()
    end, 10)
    assert.is_true(#entries() >= 3, tostring(helpers.read_file(log)) .. "\n" .. text(buf))
    local raw = helpers.read_file(log)
    assert.is_nil(raw:find(secret, 1, true), raw)
    local by = {}
    for _, e in ipairs(entries()) do
      by[e.event .. ":" .. e.id] = e
      assert.truthy(e.time:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"), e.time)
      assert.truthy(e.input_sha256:match("^sha256:%x+$"), vim.inspect(e))
    end
    local d1 = by["decision:toolu_a1"]
    assert.equals("approve", d1.decision)
    assert.equals("bash(echo *)", d1.rule)
    assert.equals("urn:flemma:approval:config", d1.resolver)
    assert.equals(
      "sha256:" .. vim.fn.sha256('{"command":"echo AUDITED ' .. secret .. '","label":"toolu_a1"}'),
      d1.input_sha256
    )
    local d2 = by["decision:toolu_a2"]
    assert.equals("require_approval", d2.decision)
    local r1 = by["run:toolu_a1"]
    assert.equals("success", r1.status)
    assert.equals("bash", r1.tool)
    assert.is_true(type(r1.duration_ms) == "number" and r1.duration_ms >= 0)
    -- The pending call ran only if the user approved it, and then the log says so.
    if by["run:toolu_a2"] then
      assert.equals("user", by["decision:toolu_a2"].resolver)
    end
  end)

  it("rotates the file at 10 MB, keeping one .1", function()
    local audit = require("flemma.policy.audit")
    vim.fn.mkdir(project .. "/state", "p")
    helpers.write_file(log, string.rep("x", audit.MAX_BYTES - 10) .. "\n")
    audit.record({ event = "decision", tool = "bash", id = "toolu_rot", decision = "deny", resolver = "spec" })
    helpers.wait_for(function()
      return not audit.pending() and vim.fn.filereadable(log .. ".1") == 1
    end, 5000, "not rotated")
    assert.equals(audit.MAX_BYTES - 9, vim.fn.getfsize(log .. ".1"))
    assert.equals(1, #entries())
    assert.equals("toolu_rot", entries()[1].id)
  end)

  it(":Flemma tool:log opens it", function()
    local audit = require("flemma.policy.audit")
    audit.record({ event = "decision", tool = "bash", id = "toolu_open", decision = "deny", resolver = "spec" })
    helpers.wait_for(function()
      return not audit.pending() and vim.fn.filereadable(log) == 1
    end, 5000, "not written")
    vim.cmd("Flemma tool:log")
    assert.equals(vim.fs.normalize(log), vim.fs.normalize(vim.api.nvim_buf_get_name(0)))
    assert.truthy(table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n"):find("toolu_open", 1, true))
    vim.cmd("bwipeout!")
  end)
end)
