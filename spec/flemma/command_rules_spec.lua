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
    helpers.write_file(project .. "/x", "keep me\n")
    h.server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
  end)

  after_each(function()
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
