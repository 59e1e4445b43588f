-- flemma.consent: the one "ask once" behind cost, keyhost, reach, trust and project MCP
-- servers. vim.ui.select (the user-facing extension point) is replaced to answer; the
-- store is a real file in an isolated XDG_STATE_HOME, read again by a child Neovim.
local helpers = require("spec.support.helpers")

local consent = require("flemma.policy.consent")

local HASH_A = string.rep("a", 64)
local HASH_B = string.rep("b", 64)

local state_dir, saved_state, orig_select, asked

-- vim.ui.select answers with items[choice] (nil dismisses); `later` keeps the answer
-- until the returned function is called.
local function answer(choice, later)
  local pending
  vim.ui.select = function(items, opts, on_choice)
    asked[#asked + 1] = { items = items, prompt = opts.prompt, kind = opts.kind }
    local function go()
      on_choice(choice and items[choice] or nil, choice)
    end
    if later then
      pending = go
    else
      go()
    end
  end
  return function()
    pending()
  end
end

-- A question whose answers are collected in `got` (answered) and `refusals` (refused).
local function question(fields)
  local got, refusals = {}, {}
  local q = vim.tbl_extend("force", {
    topic = "spec",
    key = "k",
    prompt = "Go on?",
    choices = { "Yes", "No" },
    answered = function(a)
      got[#got + 1] = a or "dismissed"
    end,
    refused = function(reason, err)
      refusals[#refusals + 1] = { reason = reason, err = err }
    end,
  }, fields or {})
  return q, got, refusals
end

local function store_lines()
  local text = helpers.read_file(state_dir .. "/nvim/flemma/trust")
  return text and vim.split(text, "\n", { trimempty = true }) or nil
end

describe("flemma.consent", function()
  before_each(function()
    state_dir = helpers.tmpdir()
    saved_state = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = state_dir
    orig_select = vim.ui.select
    asked = {}
  end)
  after_each(function()
    vim.ui.select = orig_select
    vim.env.XDG_STATE_HOME = saved_state
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("asks with vim.ui.select and remembers a yes for the buffer until it is wiped; a no asks again", function()
    local buf = helpers.buffer({ "x" })
    answer(2)
    local q, got = question({ key = { "k1", "k2" } })
    assert.equals("asked", consent.ask(buf, q))
    helpers.wait_for(function()
      return #got == 1
    end, 2000, "no answer")
    assert.same({ "no" }, got)
    assert.same({ items = { "Yes", "No" }, prompt = "Go on?", kind = "flemma.spec" }, asked[1])
    assert.is_nil(consent.answer(buf, "spec", "k1")) -- keep = "yes": a no is not remembered

    answer(1)
    assert.equals("asked", consent.ask(buf, q))
    helpers.wait_for(function()
      return #got == 2
    end, 2000, "no answer")
    assert.same({ "no", "yes" }, got)
    assert.is_true(consent.approved(buf, "spec", "k1"))
    assert.is_true(consent.approved(buf, "spec", "k2"))
    assert.is_false(consent.approved(buf, "other", "k1"))
    local other = helpers.buffer({ "y" })
    assert.is_false(consent.approved(other, "spec", "k1"))
    assert.is_nil(store_lines()) -- nothing written without a hash

    consent.reset("spec", buf)
    assert.is_false(consent.approved(buf, "spec", "k1"))
    consent.set(buf, "spec", "k1", "yes")
    assert.is_true(consent.approved(buf, "spec", "k1"))
    vim.cmd("bwipeout! " .. buf)
    assert.is_false(consent.approved(buf, "spec", "k1"))
    assert.is_nil(require("flemma.core.session").peek(buf))
  end)

  it("keeps one question open per kind and buffer; close() ends the wait", function()
    local buf = helpers.buffer({ "x" })
    local go = answer(1, true)
    local q, got, refusals = question()
    assert.equals("asked", consent.ask(buf, q))
    assert.is_true(consent.waiting(buf, "flemma.spec"))
    -- The same kind in the same buffer: refused at once, nothing asked.
    assert.equals("busy", consent.ask(buf, q))
    assert.same({ { reason = "busy" } }, refusals)
    assert.equals(1, #asked)
    -- Another kind, or another buffer: asked.
    local q2 = question({ kind = "flemma.spec2" })
    assert.equals("asked", consent.ask(buf, q2))
    local other = helpers.buffer({ "y" })
    assert.equals("asked", consent.ask(other, question()))
    assert.equals(3, #asked)
    go() -- answers the last question asked (other buffer)
    helpers.wait_for(function()
      return not consent.waiting(other, "flemma.spec")
    end, 2000, "the answer did not end the wait")
    assert.is_true(consent.waiting(buf, "flemma.spec"))
    -- An answer given otherwise (a command) ends the wait; the open answer still counts.
    consent.close(buf, "flemma.spec")
    assert.is_false(consent.waiting(buf, "flemma.spec"))
    assert.same({}, got)
  end)

  it("asks nothing without a UI or when vim.ui.select raises, and says why at once", function()
    local buf = helpers.buffer({ "x" })
    -- Headless with Neovim's own vim.ui.select (it would wait on inputlist()).
    assert.matches("vim[/\\]ui%.lua$", debug.getinfo(vim.ui.select, "S").source)
    local q, got, refusals = question()
    assert.equals("no_ui", consent.ask(buf, q))
    assert.same({ { reason = "no_ui" } }, refusals)
    assert.is_false(consent.waiting(buf, "flemma.spec"))
    vim.ui.select = function()
      error("picker broke")
    end
    local state, err = consent.ask(buf, q)
    assert.equals("failed", state)
    assert.matches("picker broke", err)
    assert.equals("failed", refusals[2].reason)
    assert.matches("picker broke", refusals[2].err)
    assert.is_false(consent.waiting(buf, "flemma.spec")) -- the next send may ask again
    vim.wait(50)
    assert.same({}, got)
    assert.is_false(consent.approved(buf, "spec", "k"))
  end)

  it("drops an answer about something that changed meanwhile, or about a wiped buffer", function()
    local buf = helpers.buffer({ "x" })
    local go = answer(1, true)
    local same = true
    local q, got = question({
      still = function()
        return same
      end,
    })
    consent.ask(buf, q)
    same = false
    go()
    helpers.wait_for(function()
      return not consent.waiting(buf, "flemma.spec")
    end, 2000)
    assert.same({}, got)
    assert.is_false(consent.approved(buf, "spec", "k"))

    go = answer(1, true)
    consent.ask(buf, question())
    vim.cmd("bwipeout! " .. buf)
    go()
    vim.wait(50)
    assert.is_false(consent.approved(buf, "spec", "k"))
    assert.is_nil(require("flemma.core.session").peek(buf))
  end)

  it("writes answers with a hash to the store (v2 lines), for every Neovim, while the content is the same", function()
    local buf = helpers.buffer({ "x" })
    answer(1)
    local q, got = question({ topic = "mcp", key = "/p/.mcp.json#proj", hash = HASH_A, keep = "answer" })
    consent.ask(buf, q)
    helpers.wait_for(function()
      return #got == 1
    end, 2000)
    answer(2)
    q = question({ topic = "trust", key = "/p/a.chat", hash = HASH_B, keep = "all" })
    local got2
    q.answered = function(a)
      got2 = a
    end
    consent.ask(buf, q)
    helpers.wait_for(function()
      return got2 ~= nil
    end, 2000)
    -- The format of the trust store: a chat file by its path, other topics `topic:key`.
    assert.same({
      "v2 denied " .. HASH_B .. " /p/a.chat",
      "v2 trusted " .. HASH_A .. " mcp:/p/.mcp.json#proj",
    }, store_lines())
    assert.equals("yes", consent.answer(nil, "mcp", "/p/.mcp.json#proj", HASH_A))
    assert.is_nil(consent.answer(nil, "mcp", "/p/.mcp.json#proj", HASH_B)) -- other content
    assert.equals("no", consent.answer(nil, "trust", "/p/a.chat", HASH_B))
    -- A chat file's key is its absolute path; no key spans lines.
    assert.has_error(function()
      consent.answer(nil, "trust", "a.chat", HASH_A)
    end)
    assert.has_error(function()
      consent.set(nil, "mcp", "a\nb", "yes", HASH_A)
    end)
    -- Another Neovim reads the same answers.
    local out = helpers.tmpdir() .. "/out"
    helpers.run_nvim({
      rtp = helpers.root,
      env = { XDG_STATE_HOME = state_dir },
      lua = ([=[
        local consent = require("flemma.policy.consent")
        vim.fn.writefile({
          tostring(consent.answer(nil, "mcp", "/p/.mcp.json#proj", %q)),
          tostring(consent.answer(nil, "trust", "/p/a.chat", %q)),
        }, %q)
      ]=]):format(HASH_A, HASH_B, out),
    })
    assert.same({ "yes", "no" }, vim.fn.readfile(out))
    -- Forgetting one keeps the other.
    consent.set(nil, "trust", "/p/a.chat", nil, HASH_B)
    assert.same({ "v2 trusted " .. HASH_A .. " mcp:/p/.mcp.json#proj" }, store_lines())
  end)

  it("reads a store written before (trust and mcp lines) and drops the text-only lines at the next write", function()
    vim.fn.mkdir(state_dir .. "/nvim/flemma", "p")
    vim.fn.writefile({
      HASH_A .. " trusted /old/x.chat", -- the text-only format of older versions
      "v2 trusted " .. HASH_A .. " /p/a.chat",
      "v2 denied " .. HASH_B .. " mcp:/p/.mcp.json#srv",
    }, state_dir .. "/nvim/flemma/trust")
    assert.equals("yes", consent.answer(nil, "trust", "/p/a.chat", HASH_A))
    assert.equals("no", consent.answer(nil, "mcp", "/p/.mcp.json#srv", HASH_B))
    assert.is_nil(consent.answer(nil, "trust", "/old/x.chat", HASH_A))
    consent.set(nil, "mcp", "/q/.mcp.json#b", "yes", HASH_A)
    assert.same({
      "v2 trusted " .. HASH_A .. " /p/a.chat",
      "v2 denied " .. HASH_B .. " mcp:/p/.mcp.json#srv",
      "v2 trusted " .. HASH_A .. " mcp:/q/.mcp.json#b",
    }, store_lines())
  end)

  it("a dismissal counts as no until Neovim exits with keep = all, and as nothing with keep = answer", function()
    local buf = helpers.buffer({ "x" })
    answer(nil)
    local q, got = question({ topic = "trust", key = "/p/a.chat", hash = HASH_A, keep = "all" })
    consent.ask(buf, q)
    local q2, got2 = question({ topic = "mcp", key = "/p/.mcp.json#s", hash = HASH_A, keep = "answer" })
    consent.ask(buf, q2)
    local q3, got3 = question({ key = "local", keep = "all" })
    consent.ask(buf, q3)
    helpers.wait_for(function()
      return #got == 1 and #got2 == 1 and #got3 == 1
    end, 2000)
    assert.same({ "dismissed" }, got)
    assert.equals("no", consent.answer(nil, "trust", "/p/a.chat", HASH_A))
    assert.is_nil(consent.answer(nil, "mcp", "/p/.mcp.json#s", HASH_A))
    assert.equals("no", consent.answer(buf, "spec", "local"))
    assert.is_nil(store_lines()) -- not written
    -- An answer given by a command replaces the dismissal.
    consent.set(nil, "trust", "/p/a.chat", "yes", HASH_A)
    assert.equals("yes", consent.answer(nil, "trust", "/p/a.chat", HASH_A))
    consent.set(nil, "trust", "/p/a.chat", nil, HASH_A)
    assert.is_nil(consent.answer(nil, "trust", "/p/a.chat", HASH_A))
  end)

  it("gate: a yes resumes; a no, a dismissal, no UI and a failing picker each say one outcome", function()
    local buf = helpers.buffer({ "x" })
    local function gate(choice)
      local resumed, said = 0, {}
      if choice ~= false then
        answer(choice)
      end
      local ret = consent.gate(buf, {
        topic = "spec",
        key = "g",
        prompt = "Send?",
        choices = { "Send", "Do not send" },
        resume = function()
          resumed = resumed + 1
        end,
        say = function(outcome, err)
          said[#said + 1] = err and (outcome .. ": " .. err) or outcome
        end,
      })
      assert.is_false(ret)
      vim.wait(100, function()
        return resumed + #said > 0
      end, 10)
      return resumed, said
    end
    local resumed, said = gate(false) -- Neovim's own vim.ui.select, headless
    assert.equals(0, resumed)
    assert.same({ "no_ui" }, said)
    resumed, said = gate(2)
    assert.same({ 0, { "declined" } }, { resumed, said })
    resumed, said = gate(nil)
    assert.same({ 0, { "declined" } }, { resumed, said })
    assert.is_false(consent.approved(buf, "spec", "g"))
    vim.ui.select = function()
      error("picker broke")
    end
    resumed, said = gate(false)
    assert.equals(0, resumed)
    assert.equals(1, #said)
    assert.matches("^failed: .*picker broke", said[1])
    resumed, said = gate(1)
    assert.same({ 1, {} }, { resumed, said })
    assert.is_true(consent.approved(buf, "spec", "g"))
  end)

  it("reach and trust say in one line that the question failed, and allow nothing", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false } } })
    vim.ui.select = function()
      error("picker broke")
    end
    local dir = helpers.tmpdir()
    local outside = helpers.tmpdir() .. "/notes.txt"
    helpers.write_file(outside, "x")
    local buf = helpers.edit(dir .. "/a.chat", {
      "```lua",
      'flemma.opt.tools.auto_approve = { "bash" }',
      "```",
      "@You:",
      "hi",
    })
    local result
    local notes = helpers.notifications(function()
      require("flemma.policy.reach").confirm(buf, { { real = outside, shown = "notes.txt" } }, function(ok, why)
        result = { ok, why }
      end)
    end)
    assert.same({ false, "no_ui" }, result)
    assert.equals(1, #notes, vim.inspect(notes))
    assert.is_nil(notes[1].msg:find("\n", 1, true))
    assert.matches("not sent: notes.txt .* it was not possible %(.*picker broke", notes[1].msg)
    assert.is_false(consent.approved(buf, "reach", outside))
    assert.is_false(consent.waiting(buf, "flemma.reach"))

    local trust = require("flemma.chat.trust")
    local opts = assert(require("flemma.chat.frontmatter").get(buf))
    local go_on, resumed
    notes = helpers.notifications(function()
      go_on = trust.settle(buf, opts, function()
        resumed = true
      end)
    end)
    assert.is_true(go_on) -- the cycle goes on, the widening ignored
    assert.equals(1, #notes, vim.inspect(notes))
    assert.matches("cannot ask whether to trust the frontmatter: .*picker broke", notes[1].msg)
    vim.wait(50)
    assert.is_nil(resumed)
    assert.is_nil(trust.state(buf))
    assert.is_false(trust.is_trusted(buf))
    assert.is_nil(store_lines())
  end)
end)
