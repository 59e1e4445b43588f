-- The edit tool's forms and fallbacks (issue 27): replace_all, the line range, the
-- fallback strategies in order (table-driven), ambiguous matches, the unified diff;
-- through the registry and through the buffer with <C-]> on real files.
local tools = require("flemma.tools")
local config = require("flemma.core.config")
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

-- Runs a tool through the registry in buf and waits for its result.
local function run(buf, name, input)
  local result
  tools.execute(buf, { id = "toolu_spec", name = name, input = input }, function(r)
    result = r
  end)
  vim.wait(5000, function()
    return result ~= nil
  end, 5)
  assert(result, name .. " gave no result in time")
  return result
end

local function edit_input(input)
  return vim.tbl_extend("keep", input, {
    old_string = vim.NIL,
    replace_all = vim.NIL,
    start_line = vim.NIL,
    end_line = vim.NIL,
    label = vim.NIL,
  })
end

describe("edit", function()
  local dir, buf, saved_state
  before_each(function()
    tools._reset()
    tools.setup(config.setup({}))
    dir = helpers.tmpdir()
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
    require("flemma.tools.builtin.edit_match").BUDGET = 20000000
    require("flemma.tools.builtin.edit_match").MAX_FALLBACK_LINES = 50000
  end)

  local function edit(input)
    return run(buf, "edit", edit_input(input))
  end

  -- Each strategy: a file, old_string, new_string, the file after, and the strategy
  -- the result names. Each case is built so that the strategies before it fail.
  local strategies = {
    {
      "exact",
      "x = 1\ny = 2\n",
      "y = 2",
      "y = 3",
      "x = 1\ny = 3\n",
      "exact match",
    },
    {
      "trimmed lines",
      "a = 1   \nb = 2\t\nc = 3\n",
      "a = 1\nb = 2",
      "a = 10\nb = 20",
      "a = 10\nb = 20\nc = 3\n",
      "trimmed lines match",
    },
    {
      "normalized whitespace",
      "local  x =   1\nreturn\tx\n",
      "local x = 1\nreturn x\n",
      "local x = 2\nreturn x\n",
      "local x = 2\nreturn x\n",
      "normalized whitespace match",
    },
    {
      "normalized indentation",
      "fn()\n    if ok then\n      go()\n    end\n",
      "if ok then\n  go()\nend",
      "if ok then\n  stop()\n  return\nend",
      "fn()\n    if ok then\n      stop()\n      return\n    end\n",
      "normalized indentation match",
    },
    {
      "fuzzy",
      "function greet(name)\n  print('hello ' .. name)\n  return true\nend\nother()\n",
      "function greet(name)\n  print('hallo ' .. name)\n  return true\nend",
      "function greet(name)\n  print('hi ' .. name)\nend",
      "function greet(name)\n  print('hi ' .. name)\nend\nother()\n",
      "fuzzy match, 98% similar",
    },
  }
  for _, case in ipairs(strategies) do
    local name, before, old, new, after, how = unpack(case)
    it(("finds old_string by the %s strategy and names it"):format(name), function()
      helpers.write_file(dir .. "/f.txt", before)
      local res = edit({ path = "f.txt", old_string = old, new_string = new })
      assert.is_true(res.success, res.error)
      assert.matches("(strategy: " .. how .. ")", res.output, 1, true)
      assert.equals(after, helpers.read_file(dir .. "/f.txt"))
      -- The diff in the result is the change: applying it with patch(1) to the
      -- file before gives the file after.
      local diff = res.output:match("\n\n(%-%-%- a/.-)\n\nTo undo: ")
      assert.truthy(diff, res.output)
      helpers.write_file(dir .. "/g.txt", before)
      helpers.write_file(dir .. "/f.diff", diff .. "\n")
      local out = vim.fn.system({ "patch", "-s", dir .. "/g.txt", dir .. "/f.diff" })
      assert.equals(0, vim.v.shell_error, out .. "\n" .. diff)
      assert.equals(after, helpers.read_file(dir .. "/g.txt"))
    end)
  end

  -- Several matches by one strategy: an error listing the lines; the file untouched.
  local ambiguous = {
    { "exact", "foo\nbar\nfoo\n", "foo", "exact match) at lines 1, 3" },
    { "trimmed lines", "a \nb\nc\na\t\nb\n", "a\nb", "trimmed lines (fallback) match) at lines 1, 4" },
    {
      "normalized indentation",
      "  x()\n  y()\nz\n    x()\n    y()\n",
      "x()\ny()",
      "normalized indentation (fallback) match) at lines 1, 4",
    },
    {
      "fuzzy",
      "begin\n  alpha = 1\nend\nbegin\n  alpha = 2\nend\n",
      "begin\n  alpha = 3\nend",
      "fuzzy (fallback) match) at lines 1, 4",
    },
  }
  for _, case in ipairs(ambiguous) do
    local name, before, old, says = unpack(case)
    it(("refuses an ambiguous %s match, listing the candidate lines"):format(name), function()
      helpers.write_file(dir .. "/f.txt", before)
      local res = edit({ path = "f.txt", old_string = old, new_string = "NEW" })
      assert.is_false(res.success)
      assert.matches("is ambiguous: it matches 2 places in f.txt (" .. says, res.error, 1, true)
      assert.equals(before, helpers.read_file(dir .. "/f.txt"))
    end)
  end

  it("does not match a text too unlike anything in the file", function()
    local before = "function greet(name)\n  print('hello ' .. name)\n  return true\nend\n"
    helpers.write_file(dir .. "/f.txt", before)
    local res =
      edit({ path = "f.txt", old_string = "function greet(name)\n  os.exit(1)\n  error('x')\nend", new_string = "x" })
    assert.is_false(res.success)
    assert.matches("was not found in f.txt", res.error, 1, true)
    assert.equals(before, helpers.read_file(dir .. "/f.txt"))
  end)

  it("replaces every occurrence with replace_all, with one hunk per place", function()
    helpers.write_file(dir .. "/f.txt", "foo\n1\n2\n3\n4\n5\n6\n7\n8\nfoo bar foo\n")
    local res = edit({ path = "f.txt", old_string = "foo", new_string = "qux", replace_all = true })
    assert.is_true(res.success, res.error)
    assert.equals("qux\n1\n2\n3\n4\n5\n6\n7\n8\nqux bar qux\n", helpers.read_file(dir .. "/f.txt"))
    assert.matches("Edited f.txt at 3 places, at lines 1, 10, 10 (strategy: exact match)", res.output, 1, true)
    assert.matches(
      "@@ -1,4 +1,4 @@\n-foo\n+qux\n 1\n 2\n 3\n@@ -7,4 +7,4 @@\n 6\n 7\n 8\n-foo bar foo\n+qux bar qux",
      res.output,
      1,
      true
    )
  end)

  it("replaces a range of lines, deletes lines with an empty new_string, and checks the range", function()
    helpers.write_file(dir .. "/f.txt", "one\ntwo\nthree\nfour\n")
    local res = edit({ path = "f.txt", start_line = 2, end_line = 3, new_string = "TWO\nTHREE\nMORE\n" })
    assert.is_true(res.success, res.error)
    assert.matches("Edited f.txt at lines 2-3 (strategy: line range)", res.output, 1, true)
    assert.equals("one\nTWO\nTHREE\nMORE\nfour\n", helpers.read_file(dir .. "/f.txt"))
    res = edit({ path = "f.txt", start_line = 1, end_line = 1, new_string = "" })
    assert.is_true(res.success, res.error)
    assert.equals("TWO\nTHREE\nMORE\nfour\n", helpers.read_file(dir .. "/f.txt"))
    assert.matches("@@ -1,4 +1,3 @@\n-one\n TWO\n THREE\n MORE", res.output, 1, true)
    local bad = edit({ path = "f.txt", start_line = 3, end_line = 9, new_string = "x" })
    assert.matches("<= 4 (the file has 4 lines)", bad.error, 1, true)
    bad = edit({ path = "f.txt", start_line = 1, end_line = 1, old_string = "TWO", new_string = "x" })
    assert.matches("not both", bad.error, 1, true)
    bad = edit({ path = "f.txt", start_line = 1, new_string = "x" })
    assert.matches("needs both", bad.error, 1, true)
    assert.equals("TWO\nTHREE\nMORE\nfour\n", helpers.read_file(dir .. "/f.txt"))
  end)

  it("refuses a fallback search over its budget instead of stalling", function()
    local lines = {}
    for i = 1, 2000 do
      lines[i] = "line " .. i
    end
    helpers.write_file(dir .. "/big.txt", table.concat(lines, "\n") .. "\n")
    require("flemma.tools.builtin.edit_match").BUDGET = 500
    local res = edit({ path = "big.txt", old_string = "no such\nlines here", new_string = "x" })
    assert.is_false(res.success)
    assert.matches("too large for the fallback searches", res.error, 1, true)
    -- Over the size limit, the fallbacks are not tried at all; an exact match still is.
    require("flemma.tools.builtin.edit_match").BUDGET = 20000000
    require("flemma.tools.builtin.edit_match").MAX_FALLBACK_LINES = 1000
    res = edit({ path = "big.txt", old_string = "line  7\nline 8", new_string = "x" })
    assert.matches(
      "not found exactly, and the file is too large for the fallback searches (over 1000 lines",
      res.error,
      1,
      true
    )
    res = edit({ path = "big.txt", old_string = "line 1999\n", new_string = "last but one\n" })
    assert.is_true(res.success, res.error)
  end)
end)

describe("edit through the buffer", function()
  local project, elsewhere, saved

  local function chat(input, file)
    return helpers.edit(file or (project .. "/test.chat"), {
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      "**Tool Use:** `edit` (`toolu_01`)",
      "",
      "```json",
      vim.json.encode(edit_input(input)),
      "```",
    })
  end

  local function wait_text(b, s)
    helpers.wait_for(function()
      return text(b):find(s, 1, true) ~= nil
    end, 10000, "buffer never contained: " .. s .. "\n--- buffer:\n" .. text(b))
  end

  local function status(b)
    return text(b):match("```flemma:tool status=(%a+)")
  end

  before_each(function()
    project = helpers.tmpdir()
    elsewhere = helpers.tmpdir()
    saved = { cwd = vim.fn.getcwd(), state = vim.env.XDG_STATE_HOME }
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "$default" } } })
  end)
  after_each(function()
    vim.env.XDG_STATE_HOME = saved.state
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("edits by a fallback and shows the strategy and the diff in the result", function()
    helpers.write_file(project .. "/a.lua", "  if x then\n      call()\n  end\n")
    local b =
      chat({ path = "a.lua", old_string = "if x then\n    call()\nend", new_string = "if x then\n    other()\nend" })
    press("<C-]>")
    wait_text(b, "(strategy: normalized indentation match)")
    wait_text(b, "@@ -1,3 +1,3 @@\n   if x then\n-      call()\n+      other()\n   end")
    assert.equals("  if x then\n      other()\n  end\n", helpers.read_file(project .. "/a.lua"))
  end)

  it("refuses when the file changed after the preview (issue 27), the file as it is", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = {} } })
    helpers.write_file(project .. "/a.txt", "alpha\nbeta\n")
    local b = chat({ path = "a.txt", old_string = "beta", new_string = "BETA" })
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(b), text(b))
    -- Changed by someone else before the user approves: beta is gone.
    helpers.write_file(project .. "/a.txt", "alpha\ngamma\n")
    local row = vim.fn.search("status=pending")
    vim.api.nvim_buf_set_lines(b, row - 1, row, false, { "```flemma:tool status=approved" })
    press("<C-]>")
    wait_text(b, "(error)")
    assert.matches("refused: a.txt changed since the preview the user approved (its content differs)", text(b), 1, true)
    assert.equals("alpha\ngamma\n", helpers.read_file(project .. "/a.txt"))
  end)

  -- Runs :Flemma tool:undo and answers its vim.ui.select with item `choice` (as a
  -- picker plugged into vim.ui.select would); returns the items as shown.
  local function undo(choice)
    local orig = vim.ui.select
    local shown = {}
    vim.ui.select = function(items, opts, on_choice)
      for i, item in ipairs(items) do
        shown[i] = opts.format_item(item)
      end
      on_choice(items[choice], choice)
    end
    local ok, err = pcall(vim.cmd, "Flemma tool:undo")
    vim.ui.select = orig
    assert(ok, err)
    return table.concat(shown, "\n")
  end

  it("undoes a call's change: the exact bytes back, a created file removed, newest first", function()
    local original = "keep  \r\nthese bytes é\n\tand\nno final newline"
    helpers.write_file(project .. "/a.txt", original)
    local b = chat({ path = "a.txt", old_string = "these bytes", new_string = "other bytes" })
    press("<C-]>")
    wait_text(b, "To undo: :Flemma tool:undo")
    assert.equals("keep  \r\nother bytes é\n\tand\nno final newline", helpers.read_file(project .. "/a.txt"))
    vim.cmd("silent! %bwipeout!")
    b = helpers.edit(project .. "/two.chat", {
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      "**Tool Use:** `write` (`toolu_01`)",
      "",
      "```json",
      vim.json.encode({ path = "new.txt", content = "fresh\n", label = vim.NIL }),
      "```",
    })
    press("<C-]>")
    wait_text(b, "(a new file). To undo: :Flemma tool:undo")
    assert.equals("fresh\n", helpers.read_file(project .. "/new.txt"))
    -- Newest first: 1 is the write, 2 the edit. Undo the edit only.
    local shown = undo(2)
    local write_at = shown:find("write: Wrote 6B (1 lines) to new.txt", 1, true)
    local edit_at = shown:find("edit: Edited a.txt at line 2 (strategy: exact match).", 1, true)
    assert.truthy(write_at and edit_at and write_at < edit_at, shown)
    assert.equals(original, helpers.read_file(project .. "/a.txt"))
    assert.equals("fresh\n", helpers.read_file(project .. "/new.txt"))
    -- The edit is no longer listed; undoing the write removes the file it created.
    shown = undo(1)
    assert.is_nil(shown:find("edit: Edited a.txt", 1, true), shown)
    assert.is_nil(vim.uv.fs_stat(project .. "/new.txt"))
    assert.equals(original, helpers.read_file(project .. "/a.txt"))
  end)

  it("undoes a write over an existing file, a delete and a move over a file", function()
    local bytes = "\0\1binary-ish\255 text\n"
    helpers.write_file(project .. "/w.txt", bytes)
    local b = chat({}, project .. "/x.chat")
    vim.api.nvim_buf_set_lines(b, 4, -1, false, {
      "**Tool Use:** `write` (`toolu_01`)",
      "",
      "```json",
      vim.json.encode({ path = "w.txt", content = "replaced\n", label = vim.NIL }),
      "```",
    })
    press("<C-]>")
    wait_text(b, "The previous content is kept in")
    assert.equals("replaced\n", helpers.read_file(project .. "/w.txt"))
    undo(1)
    assert.equals(bytes, helpers.read_file(project .. "/w.txt"))
    -- delete through the buffer (asks: approve it), then undo.
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "$default", "delete" } } })
    vim.cmd("silent! %bwipeout!")
    b = helpers.edit(project .. "/y.chat", {
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      "**Tool Use:** `delete` (`toolu_01`)",
      "",
      "```json",
      vim.json.encode({ path = "w.txt", label = vim.NIL }),
      "```",
    })
    press("<C-]>")
    wait_text(b, "Deleted w.txt")
    assert.is_nil(vim.uv.fs_stat(project .. "/w.txt"))
    undo(1)
    assert.equals(bytes, helpers.read_file(project .. "/w.txt"))
    -- A move over an existing file: undo moves it back and restores the replaced one.
    helpers.write_file(project .. "/old.txt", "was here\n")
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "$default", "move" } } })
    vim.cmd("silent! %bwipeout!")
    b = helpers.edit(project .. "/z.chat", {
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      "**Tool Use:** `move` (`toolu_01`)",
      "",
      "```json",
      vim.json.encode({ source = "w.txt", destination = "old.txt", overwrite = true, label = vim.NIL }),
      "```",
    })
    press("<C-]>")
    wait_text(b, "Moved w.txt to old.txt")
    assert.equals(bytes, helpers.read_file(project .. "/old.txt"))
    undo(1)
    assert.equals(bytes, helpers.read_file(project .. "/w.txt"))
    assert.equals("was here\n", helpers.read_file(project .. "/old.txt"))
  end)

  it("leaves an edit through a symlink leading out of the project pending", function()
    helpers.write_file(elsewhere .. "/outside.txt", "keep\n")
    assert(vim.uv.fs_symlink(elsewhere .. "/outside.txt", project .. "/link.txt"))
    local b = chat({ path = "link.txt", old_string = "keep", new_string = "changed" })
    press("<C-]>")
    vim.wait(150)
    assert.equals("pending", status(b), text(b))
    assert.equals("keep\n", helpers.read_file(elsewhere .. "/outside.txt"))
  end)
end)
