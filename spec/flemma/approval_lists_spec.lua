-- Issue 27, "Approval that users ask for": rules come in allow (`tools.auto_approve`),
-- ask (`tools.ask`) and deny (`tools.deny`) lists, in setup() and in frontmatter;
-- deny is checked first, then ask (it holds back any approval), then allow. Per-path
-- rules (`read(src/*)`). A malformed rule is one clear error at setup (a diagnostic in
-- frontmatter). The audit log records the user's own denials and rejections, and
-- names the global policy when an untrusted frontmatter falls back to it. Real chat
-- buffers, <C-]>, bash, files and the loopback LLM server; vim.ui.select (the
-- user-facing extension point) is replaced by the user's answers.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

-- The chat of an assistant answer calling bash once per { id, command } (or another
-- tool: { id, input, name }), with an optional Lua frontmatter (lines).
local function chat(calls, frontmatter)
  local lines = {}
  if frontmatter then
    lines[#lines + 1] = "```lua"
    vim.list_extend(lines, frontmatter)
    vim.list_extend(lines, { "```", "" })
  end
  vim.list_extend(lines, { "@You:", "Go.", "", "@Assistant:" })
  for _, c in ipairs(calls) do
    local input = type(c[2]) == "table" and c[2] or { command = c[2], label = c[1] }
    vim.list_extend(lines, {
      ("**Tool Use:** `%s` (`%s`)"):format(c[3] or "bash", c[1]),
      "",
      "```json",
      vim.json.encode(input),
      "```",
      "",
    })
  end
  return lines
end

-- The placeholder status of a call in the buffer, or "result" once it has one.
local function status_of(buf, id)
  local t = text(buf)
  local s = t:match("%*%*Tool Result:%*%* `" .. id .. "`[^\n]*\n\n```+flemma:tool status=(%a+)")
  if s then
    return s
  end
  return t:find("**Tool Result:** `" .. id .. "`", 1, true) and "result" or nil
end

-- Puts the cursor inside the placeholder of `id`.
local function cursor_to_result(buf, id)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == "**Tool Result:** `" .. id .. "`" then
      vim.api.nvim_win_set_cursor(0, { i + 2, 0 })
      return
    end
  end
  error("no result of " .. id .. ":\n" .. text(buf))
end

local h, project, saved_cwd, orig_select, asked, log

local function setup(tools)
  require("flemma").setup({
    provider = "test",
    providers = {
      test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
    },
    parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
    tools = vim.tbl_extend("force", { autopilot = { enabled = false } }, tools or {}),
  })
end

-- Presses <C-]> until no placeholder is approved any more (the approved ones ran).
local function cycle(buf)
  press("<C-]>")
  helpers.wait_for(function()
    if text(buf):find("status=approved", 1, true) and #require("flemma.cycle").running(buf) == 0 then
      press("<C-]>")
    end
    return not text(buf):find("status=approved", 1, true) and #require("flemma.cycle").running(buf) == 0
  end, 10000, "approved calls did not run: " .. text(buf))
end

local function entries()
  local audit = require("flemma.policy.audit")
  vim.wait(5000, function()
    return not audit.pending()
  end, 10)
  local out = {}
  for line in (helpers.read_file(log) or ""):gmatch("[^\n]+") do
    out[#out + 1] = vim.json.decode(line)
  end
  return out
end

local function before()
  h = helpers.send_harness({ key = "sk-approval-lists-" .. tostring(math.random(1e9)), timeout = 15000 })
  project = helpers.tmpdir()
  saved_cwd = vim.fn.getcwd()
  vim.cmd("cd " .. vim.fn.fnameescape(project))
  vim.fn.system({ "git", "init", "-q", project })
  log = project .. "/state/audit.jsonl"
  require("flemma.policy.audit").set_path(log)
  helpers.write_file(project .. "/x", "keep me\n")
  h.server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
  orig_select = vim.ui.select
  asked = {}
  vim.ui.select = function(items, opts, on_choice)
    asked[#asked + 1] = { items = items, prompt = opts.prompt }
    on_choice(items[1], 1) -- "Trust this frontmatter"
  end
end

local function after()
  vim.ui.select = orig_select
  require("flemma.policy.audit").set_path(nil)
  vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
  h.teardown()
end

describe("allow, ask and deny lists through <C-]>", function()
  before_each(before)
  after_each(after)

  it("tools.ask holds back what auto_approve's rule approves: `git push` waits, `git status` runs", function()
    setup({ auto_approve = { "bash(git *)" }, ask = { "bash(git push *)" } })
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({
        { "toolu_s", "git status --porcelain && echo STATUS-RAN" },
        { "toolu_p", "git push origin main" },
        { "toolu_c", "git log -1 ; git push" },
      })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_s") ~= nil
    end, 5000, text(buf))
    assert.equals("pending", status_of(buf, "toolu_s"), text(buf)) -- echo is no git command
    assert.equals("pending", status_of(buf, "toolu_p"), text(buf))
    assert.equals("pending", status_of(buf, "toolu_c"), text(buf))
    local by = {}
    for _, e in ipairs(entries()) do
      by[e.id] = e
    end
    assert.equals("urn:flemma:approval:ask", by.toolu_p.resolver, vim.inspect(by.toolu_p))
    assert.equals("bash(git push *)", by.toolu_p.rule)
    assert.equals("urn:flemma:approval:ask", by.toolu_c.resolver)
    -- Not named by the ask list: the allow rule approves it.
    local buf2 = helpers.edit(project .. "/talk2.chat", chat({ { "toolu_ok", "git status --porcelain" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf2, "toolu_ok") ~= nil
    end, 5000, text(buf2))
    assert.equals("approved", status_of(buf2, "toolu_ok"), text(buf2))
  end)

  it("tools.ask wins over a preset, require_approval = false and a tool name", function()
    setup({ auto_approve = { "bash", "$default" }, require_approval = false, ask = { "bash(rm *)", "write" } })
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({
        { "toolu_rm", "echo a && rm x" },
        { "toolu_w", { path = project .. "/new.txt", content = "hi\n" }, "write" },
        { "toolu_e", "echo ECHO-RAN" },
      })
    )
    cycle(buf)
    assert.equals("pending", status_of(buf, "toolu_rm"), text(buf))
    assert.equals("pending", status_of(buf, "toolu_w"), text(buf))
    assert.equals("result", status_of(buf, "toolu_e"), text(buf))
    assert.truthy(text(buf):find("\nECHO-RAN\n", 1, true), text(buf))
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
    assert.is_nil(vim.uv.fs_stat(project .. "/new.txt"))
  end)

  it("tools.deny is checked first: denied although ask and auto_approve name it", function()
    setup({ auto_approve = { "bash" }, ask = { "bash" }, deny = { "bash(rm *)" } })
    local buf =
      helpers.edit(project .. "/talk.chat", chat({ { "toolu_d", "echo hi; rm x" }, { "toolu_a", "echo ASKED" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_d") ~= nil
    end, 5000, text(buf))
    assert.equals("denied", status_of(buf, "toolu_d"), text(buf))
    assert.equals("pending", status_of(buf, "toolu_a"), text(buf))
    local by = {}
    for _, e in ipairs(entries()) do
      by[e.id] = e
    end
    assert.equals("urn:flemma:approval:deny", by.toolu_d.resolver)
    assert.equals("bash(rm *)", by.toolu_d.rule)
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
  end)

  it("a line the parser cannot follow is not approved past a deny rule (tools.deny or a preset's)", function()
    setup({
      auto_approve = { "$all-but-rm" },
      presets = { ["$all-but-rm"] = { approve = { "bash" }, deny = { "bash(rm *)" } } },
    })
    local buf = helpers.edit(project .. "/talk.chat", chat({ { "toolu_ev", "eval 'rm x'" } }))
    cycle(buf)
    assert.equals("pending", status_of(buf, "toolu_ev"), text(buf))
    setup({ auto_approve = { "bash" }, deny = { "bash(rm *)" } })
    local buf2 = helpers.edit(project .. "/talk2.chat", chat({ { "toolu_ev2", "sh -c 'rm x'" } }))
    cycle(buf2)
    assert.equals("pending", status_of(buf2, "toolu_ev2"), text(buf2))
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
  end)

  it("flemma.opt.tools.ask and .deny narrow one chat without asking for trust", function()
    setup({ auto_approve = { "bash(echo *)", "bash(git *)" } })
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({
        { "toolu_e1", "echo FM-ECHO" },
        { "toolu_g1", "git log -1" },
        { "toolu_g2", "git status" },
      }, { 'flemma.opt.tools.ask = { "bash(git log *)" }', 'flemma.opt.tools.deny:append("bash(git status)")' })
    )
    cycle(buf)
    assert.equals(0, #asked, vim.inspect(asked))
    assert.equals("result", status_of(buf, "toolu_e1"), text(buf))
    assert.truthy(text(buf):find("\nFM-ECHO\n", 1, true), text(buf))
    assert.equals("pending", status_of(buf, "toolu_g1"), text(buf))
    assert.truthy(text(buf):find("**Tool Result:** `toolu_g2` (error)", 1, true), text(buf))
  end)

  it("a JSON frontmatter's ask and deny keys narrow the chat as the Lua ones do", function()
    setup({ auto_approve = { "bash" } })
    local lines = chat({ { "toolu_j1", "rm x" }, { "toolu_j2", "git push" }, { "toolu_j3", "echo JSON-OK" } })
    table.insert(lines, 1, "```json")
    table.insert(lines, 2, '{ "deny": ["bash(rm *)"], "ask": ["bash(git push *)"] }')
    table.insert(lines, 3, "```")
    local buf = helpers.edit(project .. "/json.chat", lines)
    cycle(buf)
    assert.truthy(text(buf):find("**Tool Result:** `toolu_j1` (error)", 1, true), text(buf))
    assert.equals("pending", status_of(buf, "toolu_j2"), text(buf))
    assert.truthy(text(buf):find("\nJSON-OK\n", 1, true), text(buf))
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
  end)

  it(":Flemma status shows the ask and deny lists of the setup and of the chat", function()
    setup({ ask = { "bash(git push *)" }, deny = { "bash(rm *)" } })
    helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_st", "echo x" } }, { 'flemma.opt.tools.ask = { "bash(git log *)" }' })
    )
    vim.cmd("Flemma status")
    local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    local function row(prefix, layer)
      for _, l in ipairs(lines) do
        if vim.trim(l):sub(1, #prefix) == prefix then
          assert.truthy(vim.endswith(l, "[" .. layer .. "]"), l)
          return
        end
      end
      error("no row " .. prefix .. " in:\n" .. table.concat(lines, "\n"))
    end
    row("deny: { bash(rm *) }", "setup")
    row("ask: { bash(git push *) }", "setup")
    row("ask: { bash(git log *) }", "frontmatter")
    vim.cmd("bwipeout!")
  end)

  it("per-path rules: auto_approve { 'read(src/*)' } reads src/a.txt, not src/deep/b.txt or other/c.txt", function()
    setup({ auto_approve = { "read(src/*)" } })
    vim.fn.mkdir(project .. "/src/deep", "p")
    vim.fn.mkdir(project .. "/other", "p")
    helpers.write_file(project .. "/src/a.txt", "A-CONTENT\n")
    helpers.write_file(project .. "/src/deep/b.txt", "B\n")
    helpers.write_file(project .. "/other/c.txt", "C\n")
    -- A link inside src/ that leads out of it is judged by where it leads.
    vim.uv.fs_symlink(project .. "/other/c.txt", project .. "/src/link.txt")
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({
        { "toolu_ra", { path = "src/a.txt" }, "read" },
        { "toolu_rb", { path = "src/deep/b.txt" }, "read" },
        { "toolu_rc", { path = "other/c.txt" }, "read" },
        { "toolu_rl", { path = "src/link.txt" }, "read" },
      })
    )
    cycle(buf)
    assert.equals("result", status_of(buf, "toolu_ra"), text(buf))
    assert.truthy(text(buf):find("A-CONTENT", 1, true), text(buf))
    assert.equals("pending", status_of(buf, "toolu_rb"), text(buf))
    assert.equals("pending", status_of(buf, "toolu_rc"), text(buf))
    assert.equals("pending", status_of(buf, "toolu_rl"), text(buf))
    -- `**` reaches below; a deny path rule wins.
    setup({ auto_approve = { "read(src/**)" }, deny = { "read(src/deep/*)" } })
    local buf2 = helpers.edit(
      project .. "/talk2.chat",
      chat({ { "toolu_r2", { path = "src/deep/b.txt" }, "read" }, { "toolu_r3", { path = "src/a.txt" }, "read" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf2, "toolu_r3") ~= nil
    end, 5000, text(buf2))
    assert.equals("denied", status_of(buf2, "toolu_r2"), text(buf2))
    assert.equals("approved", status_of(buf2, "toolu_r3"), text(buf2))
  end)
end)

describe("a malformed rule", function()
  before_each(before)
  after_each(after)

  local function setup_error(tools)
    local ok, err = pcall(setup, tools)
    assert.is_false(ok)
    err = tostring(err)
    assert.is_nil(err:find("\n", 1, true), err) -- one line
    assert.truthy(err:find("(flemma)", 1, true), err)
    return err
  end

  it("is an error at setup naming it: unbalanced, empty, an unreadable pattern, in each list", function()
    local err = setup_error({ auto_approve = { "$default", "bash(git *" } })
    assert.truthy(err:find("`tools.auto_approve[2]`", 1, true), err)
    assert.truthy(err:find('"bash(git *"', 1, true), err)
    err = setup_error({ auto_approve = { "bash()" } })
    assert.truthy(err:find('"bash()"', 1, true) and err:find("empty", 1, true), err)
    err = setup_error({ ask = { "bash(echo 'x)" } })
    assert.truthy(err:find("`tools.ask[1]`", 1, true), err)
    err = setup_error({ deny = { "bash(git *))" } })
    assert.truthy(err:find("`tools.deny[1]`", 1, true), err)
    err = setup_error({ presets = { ["$p"] = { approve = { "bash(npm run *" } } } })
    assert.truthy(err:find("bash(npm run *", 1, true), err)
    err = setup_error({ ask = { "$default" } })
    assert.truthy(err:find("`tools.ask[1]`", 1, true), err)
    -- Well-formed ones pass.
    setup({ auto_approve = { "bash(git *)", "read(src/*)" }, ask = { "bash(git push *)" }, deny = { "bash(rm *)" } })
  end)

  it("in frontmatter is a diagnostic on the frontmatter naming the rule, and nothing runs", function()
    setup({ auto_approve = { "bash" } })
    local gate = require("flemma.chat.gate")
    for _, case in ipairs({
      { 'flemma.opt.tools.auto_approve = { "bash(git *" }', "bash(git *" },
      { 'flemma.opt.tools.ask = { "bash()" }', "bash()" },
      { 'flemma.opt.tools.deny = { "bash(echo \'x)" }', "bash(echo 'x)" },
    }) do
      local name = project .. "/fm" .. tostring(math.random(1e9)) .. ".chat"
      local buf = helpers.edit(name, chat({ { "toolu_f", "echo FM > " .. project .. "/ran" } }, { case[1] }))
      press("<C-]>")
      helpers.wait_for(function()
        return #vim.diagnostic.get(buf, { namespace = gate.ns }) > 0
      end, 5000, "no diagnostic for " .. case[1])
      local d = vim.diagnostic.get(buf, { namespace = gate.ns })[1]
      assert.truthy(d.message:find(case[2], 1, true), d.message)
      assert.truthy(d.message:find("rule", 1, true), d.message)
      assert.is_nil(status_of(buf, "toolu_f"), text(buf))
    end
    assert.is_nil(vim.uv.fs_stat(project .. "/ran"))
  end)
end)

describe("the audit log of the user's decisions", function()
  before_each(before)
  after_each(after)

  it("records tool:reject and a placeholder the user set to denied, as the user's", function()
    setup({ auto_approve = { "$default" } })
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_rj", "echo one" }, { "toolu_dn", "echo two" }, { "toolu_pd", "echo three" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_pd") == "pending"
    end, 5000, text(buf))
    cursor_to_result(buf, "toolu_rj")
    vim.cmd("Flemma tool:reject not now")
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    local seen = false
    for i, l in ipairs(lines) do
      seen = seen or l == "**Tool Result:** `toolu_dn`"
      if seen and l == "```flemma:tool status=pending" then
        vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { "```flemma:tool status=denied" })
        break
      end
    end
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_dn") == "result" and status_of(buf, "toolu_rj") == "result"
    end, 5000, text(buf))
    local by = {}
    for _, e in ipairs(entries()) do
      by[e.id] = by[e.id] or {}
      table.insert(by[e.id], e)
    end
    local rj = by.toolu_rj[#by.toolu_rj]
    assert.equals("reject", rj.decision, vim.inspect(by.toolu_rj))
    assert.equals("user", rj.resolver)
    assert.equals("bash", rj.tool)
    assert.equals("sha256:" .. vim.fn.sha256('{"command":"echo one","label":"toolu_rj"}'), rj.input_sha256)
    local dn = by.toolu_dn[#by.toolu_dn]
    assert.equals("deny", dn.decision, vim.inspect(by.toolu_dn))
    assert.equals("user", dn.resolver)
    -- The pending one was decided by nobody yet: only the policy's line.
    assert.equals(1, #by.toolu_pd)
    assert.equals("require_approval", by.toolu_pd[1].decision)
  end)

  it("records the user's rejection of a nested call (tools.call) waiting under its parent", function()
    local tools = require("flemma.tools")
    setup({ auto_approve = { "$default", "zz_parent" } })
    tools.register("zz_parent", {
      description = "calls bash",
      input_schema = { type = "object", properties = {} },
      execute = function()
        local r = tools.call("bash", { command = "touch " .. project .. "/nested-ran" })
        return { success = true, output = ("nested rejected=%s"):format(tostring(r.is_error)) }
      end,
    })
    local buf = helpers.edit(project .. "/talk.chat", chat({ { "toolu_par", vim.empty_dict(), "zz_parent" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_par.1") == "pending" or status_of(buf, "toolu_par") == "approved"
    end, 5000, text(buf))
    if status_of(buf, "toolu_par.1") ~= "pending" then
      press("<C-]>")
    end
    helpers.wait_for(function()
      return status_of(buf, "toolu_par.1") == "pending"
    end, 5000, text(buf))
    cursor_to_result(buf, "toolu_par.1")
    vim.cmd("Flemma tool:reject no nesting")
    helpers.wait_for(function()
      return text(buf):find("nested rejected=true", 1, true) ~= nil
    end, 5000, text(buf))
    tools.unregister("zz_parent")
    local line
    for _, e in ipairs(entries()) do
      if e.id == "toolu_par.1" then
        line = e
      end
    end
    assert.is_table(line, tostring(helpers.read_file(log)))
    assert.equals("reject", line.decision)
    assert.equals("user", line.resolver)
    assert.equals("bash", line.tool)
    assert.is_nil(vim.uv.fs_stat(project .. "/nested-ran"))
  end)

  it("a policy denial is logged once, by the policy", function()
    setup({ auto_approve = { "bash" }, deny = { "bash(rm *)" } })
    local buf = helpers.edit(project .. "/talk.chat", chat({ { "toolu_pol", "rm x" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_pol") == "denied"
    end, 5000, text(buf))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_pol") == "result"
    end, 5000, text(buf))
    local lines = vim.tbl_filter(function(e)
      return e.id == "toolu_pol"
    end, entries())
    assert.equals(1, #lines, vim.inspect(lines))
    assert.equals("urn:flemma:approval:deny", lines[1].resolver)
  end)

  it("names the global policy when an untrusted frontmatter's approval falls back to it", function()
    setup({ auto_approve = { "$default" } })
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = { items = items, prompt = opts.prompt }
      on_choice(items[2], 2) -- "Do not trust it"
    end
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_u", "echo UNTRUSTED" } }, { 'flemma.opt.tools.auto_approve = { "bash" }' })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_u") ~= nil
    end, 5000, text(buf))
    assert.equals("pending", status_of(buf, "toolu_u"), text(buf))
    local line
    for _, e in ipairs(entries()) do
      if e.id == "toolu_u" then
        line = e
      end
    end
    assert.equals("require_approval", line.decision)
    assert.equals("none", line.resolver, vim.inspect(line))
  end)
end)

describe("what a frontmatter widens asks for trust", function()
  before_each(before)
  after_each(after)

  it(
    "a risk level the configuration does not approve (risk:medium approves move) asks, and runs once trusted",
    function()
      setup({})
      helpers.write_file(project .. "/old.txt", "moved\n")
      local buf = helpers.edit(
        project .. "/talk.chat",
        chat(
          { { "toolu_mv", { source = "old.txt", destination = "new.txt" }, "move" } },
          { 'flemma.opt.tools.auto_approve = { "$default", "risk:medium" }' }
        )
      )
      press("<C-]>")
      helpers.wait_for(function()
        if status_of(buf, "toolu_mv") == "approved" and #require("flemma.cycle").running(buf) == 0 then
          press("<C-]>")
        end
        return status_of(buf, "toolu_mv") == "result" or status_of(buf, "toolu_mv") == "pending"
      end, 10000, text(buf))
      assert.equals(1, #asked, vim.inspect(h.notes) .. text(buf))
      assert.truthy(asked[1].prompt:find("risk:medium", 1, true), asked[1].prompt)
      assert.equals("result", status_of(buf, "toolu_mv"), text(buf))
      assert.equals("moved\n", helpers.read_file(project .. "/new.txt"))
    end
  )
end)

describe("rules in frontmatter through a real <C-]> cycle with the model", function()
  before_each(before)
  after_each(after)

  it("flemma.opt.tools.auto_approve = { 'bash(git status)' }: git status runs unasked, the rest waits", function()
    setup({ autopilot = { enabled = true } })
    h.server:script({
      {
        body = helpers.anthropic_tool_stream({
          { "bash", "toolu_m1", vim.json.encode({ command = "git status --short", label = "s" }) },
          { "bash", "toolu_m2", vim.json.encode({ command = "git log -1", label = "l" }) },
          { "bash", "toolu_m3", vim.json.encode({ command = "git status && rm x", label = "c" }) },
          { "bash", "toolu_m4", vim.json.encode({ command = "git status", label = "exact" }) },
        }),
        content_type = "text/event-stream",
      },
      { fixture = "anthropic_text.sse" },
    })
    local buf = helpers.edit(project .. "/model.chat", {
      "```lua",
      'flemma.opt.tools.auto_approve = { "bash(git status)" }',
      "```",
      "",
      "@You:",
      "Look at the repository.",
    })
    press("<C-]>")
    h.wait_finished(1)
    -- Autopilot goes on by itself: the approved call runs, the pending ones stop it.
    helpers.wait_for(function()
      return status_of(buf, "toolu_m4") == "result"
    end, 10000, text(buf))
    -- Trusting the frontmatter was asked once, naming the rule it adds.
    assert.equals(1, #asked, vim.inspect(asked))
    assert.truthy(asked[1].prompt:find("bash(git status)", 1, true), asked[1].prompt)
    assert.equals("pending", status_of(buf, "toolu_m1"), text(buf)) -- `--short` is more than the rule
    assert.equals("pending", status_of(buf, "toolu_m2"), text(buf))
    assert.equals("pending", status_of(buf, "toolu_m3"), text(buf))
    assert.truthy(text(buf):find("On branch", 1, true) or text(buf):find("No commits yet", 1, true), text(buf))
    assert.equals("pending", status_of(buf, "toolu_m3"), text(buf))
    assert.equals("keep me\n", helpers.read_file(project .. "/x"))
    -- Nothing was sent on: the pending calls hold the cycle.
    assert.equals(1, #h.finished)
  end)
end)
