-- Issue 27, "Approve and remember": on a pending placeholder, `:Flemma tool:approve
-- always` (or the key keymaps.approve_always) approves the call and adds the narrowest
-- allow rule for it (bash: the words up to the first data-like one; path tools: the
-- path's folder; other tools: the name) to this chat's frontmatter (a buffer edit the
-- user can undo) or to the configuration for this session, as the user picks with
-- vim.ui.select. Real chat buffers, the key, <C-]>, bash and files; vim.ui.select
-- (the user-facing extension point) answers as the user would.
local helpers = require("spec.support.helpers")
local commands = require("flemma.policy.commands")

local press, text = helpers.press, helpers.text

local function use_lines(calls)
  local lines = {}
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

local function chat(calls, frontmatter)
  local lines = {}
  if frontmatter then
    lines[#lines + 1] = "```lua"
    vim.list_extend(lines, frontmatter)
    vim.list_extend(lines, { "```", "" })
  end
  vim.list_extend(lines, { "@You:", "Go.", "", "@Assistant:" })
  vim.list_extend(lines, use_lines(calls))
  return lines
end

local function status_of(buf, id)
  local t = text(buf)
  local s = t:match("%*%*Tool Result:%*%* `" .. id .. "`[^\n]*\n\n```+flemma:tool status=(%a+)")
  if s then
    return s
  end
  return t:find("**Tool Result:** `" .. id .. "`", 1, true) and "result" or nil
end

-- Puts the cursor inside the placeholder of `id`.
local function cursor_to(buf, id)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == "**Tool Result:** `" .. id .. "`" then
      vim.api.nvim_win_set_cursor(0, { i + 2, 0 })
      return
    end
  end
  error("no result of " .. id .. ":\n" .. text(buf))
end

describe("the rule remembered for a command", function()
  local remember = require("flemma.tools.remember")
  before_each(function()
    require("flemma").setup({})
  end)

  -- { command, rules }: each rule set must approve its command again.
  local CASES = {
    { 'git commit -m "fix the thing"', { "bash(git commit *)" } },
    { "git status", { "bash(git status)" } },
    { "git status --short", { "bash(git status *)" } },
    { "npm run build", { "bash(npm run build)" } },
    { "npm run build -- --watch", { "bash(npm run build *)" } },
    { "ls -la src", { "bash(ls *)" } },
    { "cat src/main.lua", { "bash(cat *)" } },
    { "cat main.lua", { "bash(cat *)" } },
    { "curl https://example.com/x", { "bash(curl *)" } },
    { "sleep 10", { "bash(sleep *)" } },
    { "echo 'hello world'", { "bash(echo *)" } },
    { "make", { "bash(make)" } },
    { "docker compose up -d", { "bash(docker compose up *)" } },
    { "CI=1 npm test", { "bash(npm test)" } },
    { "git log > out.txt", { "bash(git log *)" } },
    { "git add . && git commit -m x", { "bash(git add *)", "bash(git commit *)" } },
    { "cat a.txt | wc -l | sort", { "bash(cat *)", "bash(wc *)", "bash(sort)" } },
    { "git status; git status", { "bash(git status)" } },
    { "./configure --prefix=/usr", { "bash(./configure *)" } },
    { "git checkout $BRANCH", { "bash(git checkout *)" } },
  }

  it("is the words up to the first data-like one, one per simple command, and approves its command", function()
    for _, c in ipairs(CASES) do
      local rules, why = remember.rules(0, "bash", { command = c[1] })
      assert.same(c[2], rules, c[1] .. " " .. tostring(why))
      local pats = vim.tbl_map(function(r)
        return require("flemma.isolated.presets").rule(r) and select(2, require("flemma.isolated.presets").rule(r))
      end, rules)
      assert.equals("approve", commands.decide(c[1], pats, {}), c[1])
    end
  end)

  it("never holds a secret: a key or a token-like word is data", function()
    local token = "tok" .. tostring(math.random(1e9)) .. "abcdef"
    vim.env.FLEMMA_SPEC_REMEMBER_TOKEN = token
    local ok, rules = pcall(remember.rules, 0, "bash", { command = "mytool login " .. token })
    local long = ("a"):rep(41)
    local ok2, rules2 = pcall(remember.rules, 0, "bash", { command = "mytool login " .. long })
    vim.env.FLEMMA_SPEC_REMEMBER_TOKEN = nil
    assert.is_true(ok, tostring(rules))
    assert.same({ "bash(mytool login *)" }, rules)
    assert.is_true(ok2, tostring(rules2))
    assert.same({ "bash(mytool login *)" }, rules2)
  end)

  it("is none for a line the parser cannot follow, and says why", function()
    local rules, why = remember.rules(0, "bash", { command = "eval 'rm -rf /'" })
    assert.is_nil(rules)
    assert.truthy(why:find("no rule can approve", 1, true), why)
    rules = remember.rules(0, "bash", { command = "$CMD x" })
    assert.is_nil(rules)
  end)
end)

describe("approve and remember", function()
  local h, project, saved_cwd, orig_select, asked, pick, saved_config

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

  before_each(function()
    h = helpers.send_harness({ key = "sk-remember-" .. tostring(math.random(1e9)), timeout = 15000 })
    project = helpers.tmpdir()
    saved_cwd = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    vim.fn.system({ "git", "init", "-q", project })
    vim.env.XDG_STATE_HOME = project .. "/state"
    -- "my configuration" writes stdpath("config")/flemma/auto_approve.json.
    saved_config = vim.env.XDG_CONFIG_HOME
    vim.env.XDG_CONFIG_HOME = project .. "/config"
    require("flemma.policy.audit").set_path(project .. "/state/audit.jsonl")
    h.server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
    orig_select = vim.ui.select
    asked = {}
    pick = nil
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = { items = items, prompt = opts.prompt }
      for i, item in ipairs(items) do
        if pick and item:find(pick, 1, true) then
          return on_choice(item, i)
        end
      end
      on_choice(nil, nil)
    end
  end)

  after_each(function()
    vim.ui.select = orig_select
    vim.env.XDG_STATE_HOME = nil
    vim.env.XDG_CONFIG_HOME = saved_config
    require("flemma.policy.audit").set_path(nil)
    vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
    h.teardown()
  end)

  -- Adds a new assistant turn calling `calls` after the buffer's last line.
  local function next_turn(buf, calls)
    local lines = { "", "@Assistant:" }
    vim.list_extend(lines, use_lines(calls))
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, lines)
  end

  it("the key on a compound git call: one rule per command into a new frontmatter; undo takes it out", function()
    setup({})
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_g1", 'git add -A && git commit -q --allow-empty -m "first one"' } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_g1") == "pending"
    end, 5000, text(buf))
    cursor_to(buf, "toolu_g1")
    pick = "frontmatter"
    press("gA")
    assert.equals(1, #asked)
    assert.truthy(asked[1].prompt:find("bash(git add *), bash(git commit *)", 1, true), asked[1].prompt)
    assert.same({ "this chat's frontmatter", "my configuration (all chats, kept)" }, asked[1].items)
    local lines = vim.api.nvim_buf_get_lines(buf, 0, 4, false)
    assert.same({
      "```lua",
      'flemma.opt.tools.auto_approve:append({ "bash(git add *)", "bash(git commit *)" })',
      "```",
      "",
    }, lines)
    assert.equals("approved", status_of(buf, "toolu_g1"), text(buf))
    local said = vim.tbl_filter(function(n)
      return n.msg:find("added bash(git add *), bash(git commit *) to this chat's frontmatter", 1, true)
    end, h.notes)
    assert.equals(1, #said, vim.inspect(h.notes))
    -- The approved call runs; the next git commit of the model runs without asking
    -- (the frontmatter Flemma wrote for the user is trusted).
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_g1") == "result"
    end, 10000, text(buf))
    next_turn(buf, { { "toolu_g2", 'git commit -q --allow-empty -m "second one"' }, { "toolu_g3", "git push" } })
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_g3") ~= nil
    end, 5000, text(buf))
    assert.equals("pending", status_of(buf, "toolu_g3"), text(buf))
    assert.truthy(({ approved = true, result = true })[status_of(buf, "toolu_g2")], text(buf))
    assert.equals(1, #asked, vim.inspect(asked)) -- no trust question
    -- Undo takes the frontmatter edit out, step by step, as any edit.
    local before = text(buf)
    local fm_line = 'flemma.opt.tools.auto_approve:append({ "bash(git add *)", "bash(git commit *)" })'
    for _ = 1, 20 do
      if not text(buf):find(fm_line, 1, true) then
        break
      end
      vim.cmd("silent undo")
    end
    assert.is_nil(text(buf):find(fm_line, 1, true), before)
  end)

  it("into a frontmatter not trusted before: the edit does not trust the rest of its code", function()
    -- A frontmatter that widens nothing now, but approves every bash call from a
    -- moment on: a rule added by the user is no reason to trust the rest of it.
    setup({})
    local from = os.time() + 2
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat(
        { { "toolu_t1", "ls -la" } },
        { ('if os.time() >= %d then flemma.opt.tools.auto_approve:append({ "bash" }) end'):format(from) }
      )
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_t1") == "pending"
    end, 5000, text(buf))
    assert.equals(0, #asked, vim.inspect(asked))
    cursor_to(buf, "toolu_t1")
    pick = "this chat's frontmatter"
    press("gA")
    assert.equals("approved", status_of(buf, "toolu_t1"), text(buf))
    assert.is_false(require("flemma.chat.trust").is_trusted(buf))
    pick = nil
    helpers.wait_for(function()
      return os.time() > from
    end, 5000, "time stood still")
    next_turn(buf, { { "toolu_t2", "touch pwned" } })
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_t2") ~= nil
    end, 10000, text(buf))
    helpers.settle()
    assert.equals("pending", status_of(buf, "toolu_t2"), text(buf))
    assert.is_nil(vim.uv.fs_stat(project .. "/pwned"), "the frontmatter's bash ran untrusted")
  end)

  it("into an existing frontmatter: the line goes before its closing fence", function()
    setup({})
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_n1", "npm run build -- --watch" } }, { 'flemma.opt.tools.auto_approve:remove("write")' })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_n1") == "pending"
    end, 5000, text(buf))
    pick = "frontmatter"
    vim.cmd("Flemma tool:approve always")
    assert.same({
      "```lua",
      'flemma.opt.tools.auto_approve:remove("write")',
      'flemma.opt.tools.auto_approve:append({ "bash(npm run build *)" })',
      "```",
    }, vim.api.nvim_buf_get_lines(buf, 0, 4, false))
    assert.equals("approved", status_of(buf, "toolu_n1"))
  end)

  it(
    ":Flemma tool:approve always into the configuration: the next chat's call runs, one line says where it went",
    function()
      setup({})
      local buf = helpers.edit(project .. "/a.chat", chat({ { "toolu_c1", "git log --oneline -3" } }))
      press("<C-]>")
      helpers.wait_for(function()
        return status_of(buf, "toolu_c1") == "pending"
      end, 5000, text(buf))
      pick = "configuration"
      vim.cmd("Flemma tool:approve always")
      assert.equals("approved", status_of(buf, "toolu_c1"))
      assert.truthy(vim.tbl_contains(require("flemma.core.config").get().tools.auto_approve, "bash(git log *)"))
      local said = vim.tbl_filter(function(n)
        return n.msg:find(
          "added bash(git log *) to your configuration's rules in "
            .. vim.fn.fnamemodify(project .. "/config/nvim/flemma/auto_approve.json", ":~")
            .. " (:Flemma tool:rules)",
          1,
          true
        )
      end, h.notes)
      assert.equals(1, #said, vim.inspect(h.notes))
      assert.is_nil(said[1].msg:find("\n", 1, true))
      assert.is_nil(text(buf):find("```lua", 1, true)) -- the chat is unchanged but for the approval
      local buf2 = helpers.edit(
        project .. "/b.chat",
        chat({ { "toolu_c2", "git log -1 && echo LOGGED" }, { "toolu_c3", "git log -1" } })
      )
      press("<C-]>")
      helpers.wait_for(function()
        return status_of(buf2, "toolu_c3") ~= nil
      end, 5000, text(buf2))
      assert.equals("pending", status_of(buf2, "toolu_c2"), text(buf2)) -- echo is not remembered
      assert.equals("approved", status_of(buf2, "toolu_c3"), text(buf2))
    end
  )

  it("a path tool remembers the folder: read(src/lib/*) reads src/lib/b.lua, not src/c.lua", function()
    setup({ auto_approve = { "calculator" } })
    vim.fn.mkdir(project .. "/src/lib", "p")
    for _, f in ipairs({ "src/lib/a.lua", "src/lib/b.lua", "src/c.lua" }) do
      helpers.write_file(project .. "/" .. f, "-- " .. f .. "\n")
    end
    local buf = helpers.edit(project .. "/talk.chat", chat({ { "toolu_p1", { path = "src/lib/a.lua" }, "read" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_p1") == "pending"
    end, 5000, text(buf))
    pick = "configuration"
    cursor_to(buf, "toolu_p1")
    press("gA")
    assert.truthy(asked[1].prompt:find("read(src/lib/*)", 1, true), asked[1].prompt)
    local buf2 = helpers.edit(
      project .. "/b.chat",
      chat({ { "toolu_p2", { path = "src/lib/b.lua" }, "read" }, { "toolu_p3", { path = "src/c.lua" }, "read" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf2, "toolu_p3") ~= nil
    end, 5000, text(buf2))
    assert.equals("approved", status_of(buf2, "toolu_p2"), text(buf2))
    assert.equals("pending", status_of(buf2, "toolu_p3"), text(buf2))
  end)

  it("typed in a diff review: accepts what the review shows and remembers the folder", function()
    setup({ auto_approve = {}, auto_approve_sandboxed = false })
    vim.fn.mkdir(project .. "/notes", "p")
    helpers.write_file(project .. "/notes/a.txt", "one\n")
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_w1", { path = "notes/a.txt", content = "one\ntwo\n" }, "write" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_w1") == "pending"
    end, 5000, text(buf))
    cursor_to(buf, "toolu_w1")
    press("<M-CR>")
    helpers.wait_for(function()
      return vim.b.flemma_review ~= nil and vim.api.nvim_get_current_buf() ~= buf
    end, 5000, "the review did not open:\n" .. vim.inspect(h.notes))
    vim.api.nvim_buf_set_lines(0, 0, -1, false, { "one", "edited in the review" })
    pick = "configuration"
    vim.cmd("Flemma tool:approve always")
    assert.truthy(asked[1].prompt:find("write(notes/*)", 1, true), asked[1].prompt)
    assert.equals("approved", status_of(buf, "toolu_w1"), text(buf))
    assert.truthy(vim.tbl_contains(require("flemma.core.config").get().tools.auto_approve, "write(notes/*)"))
    vim.cmd("silent! tabonly!")
    vim.api.nvim_set_current_buf(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_w1") == "result"
    end, 10000, text(buf))
    assert.equals("one\nedited in the review\n", helpers.read_file(project .. "/notes/a.txt"))
  end)

  it("a nested call (tools.call) waiting under its parent: approved, its rule remembered", function()
    local tools = require("flemma.tools")
    setup({ auto_approve = { "$default", "zz_parent" } })
    tools.register("zz_parent", {
      description = "calls bash",
      input_schema = { type = "object", properties = {} },
      execute = function()
        local r = tools.call("bash", { command = "git status --short" })
        return { success = true, output = ("nested error=%s"):format(tostring(r.is_error)) }
      end,
    })
    local buf = helpers.edit(project .. "/talk.chat", chat({ { "toolu_np", vim.empty_dict(), "zz_parent" } }))
    press("<C-]>")
    local ok = vim.wait(5000, function()
      if status_of(buf, "toolu_np") == "approved" and status_of(buf, "toolu_np.1") == nil then
        press("<C-]>")
      end
      return status_of(buf, "toolu_np.1") ~= nil
    end, 10)
    assert(ok, text(buf))
    assert.equals("pending", status_of(buf, "toolu_np.1"), text(buf))
    cursor_to(buf, "toolu_np.1")
    pick = "configuration"
    vim.cmd("Flemma tool:approve always")
    assert.truthy(asked[1] and asked[1].prompt:find("bash(git status *)", 1, true), vim.inspect(asked))
    local done = vim.wait(10000, function()
      return text(buf):find("nested error=false", 1, true) ~= nil
    end, 10)
    tools.unregister("zz_parent")
    assert(done, text(buf) .. vim.inspect(h.notes))
    assert.truthy(vim.tbl_contains(require("flemma.core.config").get().tools.auto_approve, "bash(git status *)"))
  end)

  it("another tool remembers its name; nothing happens when the user picks nothing", function()
    setup({ auto_approve = {} })
    local buf = helpers.edit(
      project .. "/talk.chat",
      chat({ { "toolu_k1", { expression = "1+2" }, "calculator" }, { "toolu_k2", "eval x" } })
    )
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(buf, "toolu_k2") == "pending"
    end, 5000, text(buf))
    local untouched = text(buf)
    cursor_to(buf, "toolu_k1")
    pick = nil -- dismissed
    press("gA")
    assert.equals(untouched, text(buf))
    pick = "frontmatter"
    press("gA")
    assert.truthy(text(buf):find('flemma.opt.tools.auto_approve:append({ "calculator" })', 1, true), text(buf))
    assert.equals("approved", status_of(buf, "toolu_k1"))
    -- A line the parser cannot follow: no rule, nothing approved, one line why.
    cursor_to(buf, "toolu_k2")
    h.forget_notes()
    local n = #asked
    press("gA")
    assert.equals(n, #asked)
    assert.equals("pending", status_of(buf, "toolu_k2"))
    assert.equals(1, #h.notes, vim.inspect(h.notes))
    assert.truthy(h.notes[1].msg:find("no rule to remember for `toolu_k2`", 1, true), h.notes[1].msg)
    assert.is_nil(h.notes[1].msg:find("\n", 1, true), h.notes[1].msg)
  end)
end)
