-- Issue 27: the diff review of a pending `write` or `edit`. <M-CR> on the pending
-- placeholder (or :Flemma tool:diff) opens a tab with the file as it is and the file
-- as the call would leave it, in diff mode; the user drops hunks with the diff
-- commands or edits the proposed side, and what it shows when accepted is what the
-- tool writes, through its own checks (the sandbox included). The file must not
-- have changed since the review opened. Real chat buffer, real keys (<C-]>, <M-CR>,
-- ]c, do, dp), real files, the loopback server as the model.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

local tool_stream = helpers.anthropic_tool_stream

-- The first line of buf that is `s`.
local function line_of(buf, s)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == s then
      return i
    end
  end
  error("no line " .. s)
end

local function numbered(n, changes)
  local out = {}
  for i = 1, n do
    out[i] = (changes and changes[i]) or ("line " .. i)
  end
  return table.concat(out, "\n") .. "\n"
end

describe("the diff review", function()
  local h, saved_state
  local function setup(extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { auto_approve = {}, auto_approve_sandboxed = false, autopilot = { enabled = false } },
    }, extra or {}))
  end
  local function call(name, id, input)
    return { body = tool_stream({ { name, id, vim.json.encode(input) } }), content_type = "text/event-stream" }
  end
  local function write_input(path, content)
    return { path = path, content = content, label = vim.NIL }
  end
  local function edit_input(path, old, new)
    return {
      path = path,
      old_string = old,
      new_string = new,
      replace_all = vim.NIL,
      start_line = vim.NIL,
      end_line = vim.NIL,
      label = vim.NIL,
    }
  end
  local function wait_pending(buf)
    helpers.wait_for(function()
      return text(buf):find("```flemma:tool status=pending", 1, true) ~= nil
    end, 10000, "no pending placeholder:\n" .. text(buf))
  end
  -- Asks the model (the loopback server answers with `response`), waits for the
  -- pending placeholder and returns the chat buffer and its folder.
  local function ask(response)
    h.server:script({ response, { fixture = "anthropic_text.sse" } })
    local buf = helpers.open_chat({ "@You:", "Change the file." })
    local dir = vim.fs.dirname(vim.api.nvim_buf_get_name(buf))
    return buf, dir
  end
  local function go(buf)
    press("<C-]>")
    h.wait_finished(1)
    press("<C-]>")
    wait_pending(buf)
  end
  -- <M-CR> on the pending placeholder (the cursor is on it after <C-]>); returns the
  -- proposed side's buffer (the current window's).
  local function open_review(chat)
    assert.equals(chat, vim.api.nvim_get_current_buf())
    press("<M-CR>")
    helpers.wait_for(function()
      return vim.b.flemma_review ~= nil and vim.api.nvim_get_current_buf() ~= chat
    end, 5000, "the review did not open:\n" .. vim.inspect(h.notes))
    assert.equals(2, #vim.api.nvim_list_tabpages())
    assert.is_true(vim.wo.diff)
    return vim.api.nvim_get_current_buf()
  end
  -- Waits until call `id` has its result (not a placeholder); returns the chat's text.
  local function wait_result(buf, id)
    local header = "**Tool Result:** `" .. id .. "`"
    local ok = vim.wait(10000, function()
      local t = text(buf)
      return t:find(header, 1, true) ~= nil and t:find(header .. "\n\n```flemma:tool", 1, true) == nil
    end, 10)
    assert(ok, "no result of " .. id .. ":\n" .. text(buf) .. "\n" .. vim.inspect(h.notes))
    return text(buf)
  end

  local log
  before_each(function()
    h = helpers.send_harness({ key = KEY })
    saved_state = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    log = helpers.tmpdir() .. "/audit.jsonl"
    require("flemma.policy.audit").set_path(log)
  end)
  after_each(function()
    require("flemma.policy.audit").set_path(nil)
    vim.cmd("silent! tabonly!")
    h.teardown()
    vim.env.XDG_STATE_HOME = saved_state
  end)

  it(
    "drops a hunk with do (diffget): the file gets exactly the kept hunks, the result names the dropped one",
    function()
      setup({ tools = { autopilot = { enabled = true } } })
      local before = numbered(12)
      local asked = numbered(12, { [2] = "TWO", [6] = "SIX", [10] = "TEN" })
      local chat, dir = ask(call("write", "toolu_w1", write_input("notes.txt", asked)))
      helpers.write_file(dir .. "/notes.txt", before)
      press("<C-]>")
      h.wait_finished(1)
      wait_pending(chat)
      local proposed = open_review(chat)
      assert.equals(asked, table.concat(helpers.lines(proposed), "\n") .. "\n")
      -- The second hunk (line 6) goes: the proposed side takes the file's line back.
      press("gg]c]c")
      assert.equals(6, vim.fn.line("."))
      press("do")
      assert.equals("line 6", vim.api.nvim_buf_get_lines(proposed, 5, 6, false)[1])
      -- Accepted in the review: the call runs, autopilot sends its result on.
      press("<C-]>")
      h.wait_finished(2)
      assert.equals(numbered(12, { [2] = "TWO", [10] = "TEN" }), helpers.read_file(dir .. "/notes.txt"))
      assert.equals(1, #vim.api.nvim_list_tabpages())
      local t = text(chat)
      assert.truthy(t:find("**Tool Result:** `toolu_w1`\n", 1, true), t)
      assert.truthy(t:find('Left out (not written): hunk 2 of 3 (line 6: -"line 6" +"SIX").', 1, true), t)
      assert.is_nil(t:find("hunk 1 of 3", 1, true), t)
      assert.is_nil(t:find("hunk 3 of 3", 1, true), t)
      local req = h.server:requests()[2].json
      local last = req.messages[#req.messages]
      assert.equals("tool_result", last.content[1].type)
      assert.truthy(vim.inspect(last.content[1].content):find("hunk 2 of 3", 1, true), vim.inspect(last))
      -- The audit log has the user's decision, approved in a changed review, and the run.
      local audit = require("flemma.policy.audit")
      helpers.wait_for(function()
        return not audit.pending() and vim.fn.filereadable(log) == 1
      end, 5000, "no audit log")
      local decided, ran
      for line in io.lines(log) do
        local e = vim.json.decode(line)
        if e.id == "toolu_w1" and e.event == "decision" and e.resolver == "user" then
          decided = e
        elseif e.id == "toolu_w1" and e.event == "run" then
          ran = e
        end
      end
      assert.equals("changed", decided and decided.review, helpers.read_file(log))
      assert.equals("success", ran and ran.status, helpers.read_file(log))
    end
  )

  it("dp from the file's side drops a hunk of an edit; :Flemma tool:approve there accepts", function()
    setup()
    local before = "a\nb\nc\nd\ne\nf\ng\nh\n"
    local chat, dir = ask(call("edit", "toolu_e1", edit_input("e.txt", "b\nc\nd\ne\nf\ng", "B\nc\nd\ne\nf\nG")))
    helpers.write_file(dir .. "/e.txt", before)
    go(chat)
    open_review(chat)
    -- To the file's side, the first hunk: dp puts the file's line into the proposal.
    vim.cmd("wincmd h")
    press("gg]c")
    assert.equals(2, vim.fn.line("."))
    press("dp")
    vim.cmd("wincmd l")
    vim.cmd("Flemma tool:approve")
    assert.equals(1, #vim.api.nvim_list_tabpages())
    assert.equals(chat, vim.api.nvim_get_current_buf())
    assert.truthy(text(chat):find("```flemma:tool status=approved", 1, true), text(chat))
    press("<C-]>")
    local t = wait_result(chat, "toolu_e1")
    assert.equals("a\nb\nc\nd\ne\nf\nG\nh\n", helpers.read_file(dir .. "/e.txt"))
    assert.truthy(t:find("Edited e.txt as the user accepted it in a diff review.", 1, true), t)
    assert.truthy(t:find('Left out (not written): hunk 1 of 2 (line 2: -"b" +"B").', 1, true), t)
  end)

  it("a file changed on disk after the review opened: the call is refused, the file is left as it is", function()
    setup()
    local chat, dir = ask(call("edit", "toolu_e2", edit_input("f.txt", "two", "TWO")))
    helpers.write_file(dir .. "/f.txt", "one\ntwo\nthree\n")
    go(chat)
    open_review(chat)
    -- Someone else changes the file while the user reviews.
    helpers.write_file(dir .. "/f.txt", "one\ntwo\nthree\nfour\n")
    vim.cmd("tabfirst")
    assert.equals(chat, vim.api.nvim_get_current_buf())
    press("<C-]>")
    local t = wait_result(chat, "toolu_e2")
    assert.equals("one\ntwo\nthree\nfour\n", helpers.read_file(dir .. "/f.txt"))
    assert.truthy(t:find("**Tool Result:** `toolu_e2` (error)", 1, true), t)
    assert.truthy(
      t:find("refused: f.txt changed on disk after the user reviewed this change (its content differs)", 1, true),
      t
    )
    assert.equals(1, #vim.api.nvim_list_tabpages())
  end)

  it("a file created after the review of a new file opened is refused too", function()
    setup()
    local chat, dir = ask(call("write", "toolu_w5", write_input("new.txt", "fresh\n")))
    go(chat)
    open_review(chat)
    helpers.write_file(dir .. "/new.txt", "someone else's\n")
    vim.cmd("Flemma tool:approve")
    press("<C-]>")
    local t = wait_result(chat, "toolu_w5")
    assert.equals("someone else's\n", helpers.read_file(dir .. "/new.txt"))
    assert.truthy(t:find("changed on disk after the user reviewed this change (it exists now)", 1, true), t)
  end)

  it("refuses an accepted review when the call's input or where its path leads changed since", function()
    setup()
    local chat, dir = ask({
      body = tool_stream({
        { "write", "toolu_w7", vim.json.encode(write_input("i.txt", "asked\n")) },
        { "write", "toolu_w8", vim.json.encode(write_input("link.txt", "asked\n")) },
      }),
      content_type = "text/event-stream",
    })
    helpers.write_file(dir .. "/i.txt", "old\n")
    helpers.write_file(dir .. "/a.txt", "same\n")
    helpers.write_file(dir .. "/b.txt", "same\n")
    assert(vim.uv.fs_symlink("a.txt", dir .. "/link.txt"))
    go(chat)
    open_review(chat)
    vim.cmd("Flemma tool:approve")
    local l = line_of(chat, "**Tool Result:** `toolu_w8`")
    vim.api.nvim_win_set_cursor(0, { l + 2, 0 })
    open_review(chat)
    vim.cmd("Flemma tool:approve")
    -- The first call's input is edited in the chat; the link now points elsewhere
    -- (to a file with the same content).
    local json = line_of(chat, "**Tool Use:** `write` (`toolu_w7`)") + 3
    local old = vim.api.nvim_buf_get_lines(chat, json - 1, json, false)[1]
    assert.truthy(old:find('"asked\\n"', 1, true), old)
    vim.api.nvim_buf_set_lines(chat, json - 1, json, false, { (old:gsub('"asked', '"other')) })
    assert(vim.uv.fs_unlink(dir .. "/link.txt"))
    assert(vim.uv.fs_symlink("b.txt", dir .. "/link.txt"))
    press("<C-]>")
    wait_result(chat, "toolu_w7")
    local t = wait_result(chat, "toolu_w8")
    assert.equals("old\n", helpers.read_file(dir .. "/i.txt"))
    assert.equals("same\n", helpers.read_file(dir .. "/a.txt"))
    assert.equals("same\n", helpers.read_file(dir .. "/b.txt"))
    assert.truthy(t:find("refused: the input of this call changed after the user reviewed its change", 1, true), t)
    assert.truthy(t:find("refused: link.txt leads to another file (" .. dir .. "/b.txt)", 1, true), t)
  end)

  it("<C-]> in the chat accepts the open review when its placeholder was approved by hand meanwhile", function()
    setup()
    local chat, dir = ask(call("write", "toolu_w9", write_input("m.txt", "A\nb\nC\nd\nE\n")))
    helpers.write_file(dir .. "/m.txt", "a\nb\nc\nd\ne\n")
    go(chat)
    open_review(chat)
    press("gg]cdo")
    vim.cmd("tabfirst")
    local l = line_of(chat, "```flemma:tool status=pending")
    vim.api.nvim_buf_set_lines(chat, l - 1, l, false, { "```flemma:tool status=approved" })
    press("<C-]>")
    local t = wait_result(chat, "toolu_w9")
    assert.equals("A\nb\nc\nd\nE\n", helpers.read_file(dir .. "/m.txt"))
    assert.truthy(t:find('Left out (not written): hunk 2 of 3 (line 3: -"c" +"C").', 1, true), t)
    assert.equals(1, #vim.api.nvim_list_tabpages())
  end)

  it("a secret file's reviewed text is not shown to the model: what the user kept stays out of the result", function()
    setup()
    local chat, dir = ask(call("write", "toolu_s1", write_input(".env", "SPEC_TOKEN_X=your-token\nDEBUG=1\n")))
    helpers.write_file(dir .. "/.env", "SPEC_TOKEN_X=kept-value-4242-secret\nDEBUG=0\n")
    go(chat)
    local proposed = open_review(chat)
    -- The user keeps the real value (the proposal would have replaced it).
    vim.api.nvim_buf_set_lines(proposed, 0, 1, false, { "SPEC_TOKEN_X=kept-value-4242-secret" })
    press("<C-]>")
    local t = wait_result(chat, "toolu_s1")
    assert.equals("SPEC_TOKEN_X=kept-value-4242-secret\nDEBUG=1\n", helpers.read_file(dir .. "/.env"))
    assert.is_nil(t:find("kept-value", 1, true), t)
    assert.truthy(t:find("changed it before it was written", 1, true), t)
    assert.truthy(t:find("is a secret file", 1, true), t)
  end)

  it("the proposed side edited by hand is what is written; the result shows it", function()
    setup()
    local chat, dir = ask(call("write", "toolu_w3", write_input("h.txt", "alpha\nBETA\ngamma\n")))
    helpers.write_file(dir .. "/h.txt", "alpha\nbeta\ngamma\n")
    go(chat)
    local proposed = open_review(chat)
    press("2GccBeta, by hand<Esc>")
    assert.same({ "alpha", "Beta, by hand", "gamma" }, helpers.lines(proposed))
    -- A line added and, still in Insert mode, accepted with <C-]>.
    press("Go, and more<C-]>")
    helpers.wait_for(function()
      return #vim.api.nvim_list_tabpages() == 1
    end, 5000, "the review is still open")
    assert.equals(chat, vim.api.nvim_get_current_buf())
    assert.equals("n", vim.api.nvim_get_mode().mode)
    local t = wait_result(chat, "toolu_w3")
    assert.equals("alpha\nBeta, by hand\ngamma\n, and more\n", helpers.read_file(dir .. "/h.txt"))
    assert.truthy(t:find('Changed by the user: hunk 1 of 1 (line 2: -"beta" +"BETA").', 1, true), t)
    assert.truthy(t:find('Added by the user: after line 3: +", and more".', 1, true), t)
    assert.truthy(t:find("+Beta, by hand", 1, true), t)
  end)

  it(
    ":w in the review writes nothing and errs not: one line says when the file gets it; accepting still does",
    function()
      setup()
      local chat, dir = ask(call("write", "toolu_w9", write_input("s.txt", "alpha\nBETA\n")))
      helpers.write_file(dir .. "/s.txt", "alpha\nbeta\n")
      go(chat)
      local proposed = open_review(chat)
      press("2GccBeta, kept<Esc>")
      h.forget_notes()
      -- Typed as a user types it: no E382 (a scratch buffer cannot be written).
      local ok, err = pcall(vim.cmd, "w")
      assert(ok, tostring(err))
      assert.is_false(vim.bo[proposed].modified)
      assert.equals("alpha\nbeta\n", helpers.read_file(dir .. "/s.txt")) -- nothing written yet
      assert.is_nil(vim.uv.fs_stat("flemma-review://toolu_w9/s.txt (proposed)"))
      assert.equals(1, #h.notes, vim.inspect(h.notes))
      assert.truthy(h.notes[1].msg:find("nothing saved now; s.txt gets the right side when you accept", 1, true))
      assert.is_nil(h.notes[1].msg:find("\n", 1, true))
      -- The review is still open; :w on the file's side (read-only) errs not either.
      assert.equals(2, #vim.api.nvim_list_tabpages())
      vim.cmd("wincmd h")
      ok, err = pcall(vim.cmd, "w")
      assert(ok, tostring(err))
      vim.cmd("wincmd l")
      press("<C-]>")
      wait_result(chat, "toolu_w9")
      assert.equals("alpha\nBeta, kept\n", helpers.read_file(dir .. "/s.txt"))
    end
  )

  it("opens with :Flemma tool:diff and <M-CR> on the tool use; rejected there, nothing is written", function()
    setup()
    local chat, dir = ask(call("write", "toolu_w4", write_input("r.txt", "replaced\n")))
    helpers.write_file(dir .. "/r.txt", "original\n")
    go(chat)
    -- <M-CR> on the tool use block; then closed.
    vim.api.nvim_win_set_cursor(0, { line_of(chat, "**Tool Use:** `write` (`toolu_w4`)"), 0 })
    open_review(chat)
    vim.cmd("tabclose")
    -- :Flemma tool:diff with the cursor on no tool block: the first pending write.
    vim.api.nvim_win_set_cursor(0, { 1, 0 })
    vim.cmd("Flemma tool:diff")
    helpers.wait_for(function()
      return vim.b.flemma_review ~= nil
    end, 5000, "no review")
    assert.equals("toolu_w4", vim.b.flemma_review.id)
    assert.same({ "replaced" }, helpers.lines(0))
    vim.cmd("Flemma tool:reject not like this")
    assert.equals(1, #vim.api.nvim_list_tabpages())
    assert.truthy(text(chat):find("```flemma:tool status=rejected\nnot like this\n```", 1, true), text(chat))
    press("<C-]>")
    local t = wait_result(chat, "toolu_w4")
    assert.truthy(t:find("**Tool Result:** `toolu_w4` (error)\n\n```\nnot like this\n```", 1, true), t)
    assert.equals("original\n", helpers.read_file(dir .. "/r.txt"))
  end)

  it("closing the review decides nothing; <M-CR> on other tools still runs them", function()
    setup()
    local chat, dir = ask({
      body = tool_stream({
        { "write", "toolu_w6", vim.json.encode(write_input("c.txt", "new\n")) },
        { "calculator", "toolu_c1", vim.json.encode({ expression = "6*7", label = vim.NIL }) },
      }),
      content_type = "text/event-stream",
    })
    helpers.write_file(dir .. "/c.txt", "old\n")
    go(chat)
    open_review(chat)
    vim.cmd("tabclose")
    assert.equals(chat, vim.api.nvim_get_current_buf())
    assert.is_nil(require("flemma.core.session").get(chat).reviews.toolu_w6)
    local t = text(chat)
    assert.truthy(t:find("**Tool Result:** `toolu_w6`\n\n```flemma:tool status=pending", 1, true), t)
    -- <M-CR> on the calculator's placeholder runs it, as before.
    local l = line_of(chat, "**Tool Result:** `toolu_c1`")
    vim.api.nvim_win_set_cursor(0, { l + 2, 0 })
    press("<M-CR>")
    wait_result(chat, "toolu_c1")
    assert.equals(1, #vim.api.nvim_list_tabpages())
    -- Approved without a review, the write does what it asked.
    vim.cmd("Flemma tool:approve")
    press("<C-]>")
    wait_result(chat, "toolu_w6")
    assert.equals("new\n", helpers.read_file(dir .. "/c.txt"))
  end)

  it("the result names at most 20 hunks a list, in file order, and counts the others", function()
    local review = require("flemma.tools.review")
    local n = 3000
    local before, asked, written = {}, {}, {}
    for i = 1, n do
      before[i] = "line " .. i
      asked[i] = i % 3 == 0 and ("CHANGED " .. i) or before[i]
      -- Every other asked hunk (lines 6, 12, ...) is left out.
      written[i] = i % 6 == 0 and before[i] or asked[i]
    end
    local function join(t)
      return table.concat(t, "\n") .. "\n"
    end
    local rec = { path = "big.txt", before = join(before), asked = join(asked) }
    local out = review.outcome(rec, join(written))
    local left = out:match("Left out %(not written%): ([^\n]*)")
    assert.truthy(left, out)
    local names = {}
    for i in left:gmatch("hunk (%d+) of 1000") do
      names[#names + 1] = tonumber(i)
    end
    local want = {}
    for i = 1, 20 do
      want[i] = 2 * i
    end
    assert.same(want, names)
    assert.truthy(left:find('hunk 2 of 1000 (line 6: -"line 6" +"CHANGED 6"); ', 1, true), left)
    assert.truthy(left:find("; and 480 more.$"), left)
    assert.is_nil(out:find("Changed by the user", 1, true), out)
    assert.is_nil(out:find("Added by the user", 1, true), out)
  end)

  it("the diff in the result is Neovim's unified diff with one line of context (1000 random pairs)", function()
    local review = require("flemma.tools.review")
    local diff = (vim.text and vim.text.diff) or vim.diff
    math.randomseed(27)
    local function random_text()
      local t = {}
      for i = 1, math.random(0, 12) do
        t[i] = ({ "a", "b", "c", "d" })[math.random(4)]
      end
      return #t > 0 and (table.concat(t, "\n") .. (math.random(2) == 1 and "\n" or "")) or ""
    end
    local compared = 0
    for _ = 1, 1000 do
      local a, b = random_text(), random_text()
      if a ~= b then
        compared = compared + 1
        local lines = vim.split(review.unified(a, b, "x", "y"), "\n", { plain = true })
        assert.equals("```diff", lines[1])
        assert.same({ "--- x", "+++ y" }, { lines[2], lines[3] })
        assert.equals("```", lines[#lines])
        local body = table.concat(vim.list_slice(lines, 4, #lines - 1), "\n") .. "\n"
        assert.equals(diff(a, b, { ctxlen = 1 }), body, vim.inspect({ a, b }))
      end
    end
    assert.is_true(compared > 900)
  end)

  describe("with the sandbox on", function()
    it("the reviewed text goes through the tool's sandbox checks: inside written, outside refused", function()
      local outside = helpers.tmpdir()
      helpers.write_file(outside .. "/o.txt", "outside\n")
      h.server:script({
        {
          body = tool_stream({
            { "edit", "toolu_s1", vim.json.encode(edit_input("in.txt", "x\ny\nz", "X\ny\nZ")) },
            { "write", "toolu_s2", vim.json.encode(write_input(outside .. "/o.txt", "changed\n")) },
          }),
          content_type = "text/event-stream",
        },
      })
      local chat = helpers.open_chat({ "@You:", "Change the files." })
      local dir = vim.fs.dirname(vim.api.nvim_buf_get_name(chat))
      setup({ sandbox = { enabled = true, policy = { rw_paths = { dir } } } })
      assert.is_true(require("flemma.policy.sandbox").is_enabled())
      helpers.write_file(dir .. "/in.txt", "x\ny\nz\n")
      go(chat)
      -- The edit: its second hunk dropped, accepted in the review.
      open_review(chat)
      press("gg]c]c")
      press("do")
      vim.cmd("Flemma tool:approve")
      -- The write outside the writable paths: accepted as it is.
      local l = line_of(chat, "**Tool Result:** `toolu_s2`")
      vim.api.nvim_win_set_cursor(0, { l + 2, 0 })
      open_review(chat)
      vim.cmd("Flemma tool:approve")
      press("<C-]>")
      wait_result(chat, "toolu_s1")
      local t = wait_result(chat, "toolu_s2")
      assert.equals("X\ny\nz\n", helpers.read_file(dir .. "/in.txt"))
      assert.equals("outside\n", helpers.read_file(outside .. "/o.txt"))
      assert.truthy(t:find('Left out (not written): hunk 2 of 2 (line 3: -"z" +"Z").', 1, true), t)
      assert.truthy(t:find("**Tool Result:** `toolu_s2` (error)\n\n```\nsandbox: " .. outside, 1, true), t)
    end)
  end)
end)
