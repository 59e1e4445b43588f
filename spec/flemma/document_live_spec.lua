-- document.get keeps a buffer's model up to date from its line edits (the
-- native incremental document fed by nvim_buf_attach). These specs edit real
-- buffers with nvim_buf_set_lines and compare with a fresh full parse.
local document = require("flemma.chat.document")
local helpers = require("spec.support.helpers")

local FIXTURES = FLEMMA_ROOT .. "/spec/fixtures/chat/"

local plain = helpers.plain_model

-- Lines that change the structure most.
local POOL = {
  "```",
  "````",
  "~~~",
  "```json",
  "```lua",
  "````markdown",
  "`````",
  "@You:",
  "@Assistant:",
  "@System:",
  "",
  "",
  "text",
  "more text",
  "**Tool Use:** `bash` (`t1`)",
  "**Tool Use:** `read` (`t2`)",
  "**Tool Result:** `t1`",
  "**Tool Result:** `t2` (error)",
  "```flemma:tool status=pending",
  "```flemma:tool status=approved",
  '{"command": "ls"}',
  '{"a": [1, 2',
  "<thinking>",
  "</thinking>",
  "```lua",
  "flemma.opt.tools.auto_approve = {}",
}

local function chat_buffer(lines)
  local buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  return buf
end

describe("flemma.document.get (live model)", function()
  it("frees the model and the native document of a wiped chat", function()
    require("flemma").setup({})
    local lines = {}
    for i = 1, 200 do
      lines[#lines + 1] = i % 2 == 1 and "@You:" or "@Assistant:"
      lines[#lines + 1] = "message " .. i
      lines[#lines + 1] = ""
    end
    local buf = chat_buffer(lines)
    vim.api.nvim_set_current_buf(buf)
    vim.bo[buf].filetype = "chat"
    vim.wait(50)
    local weak = setmetatable({}, { __mode = "v" })
    weak.doc = document.get(buf)
    weak.message = weak.doc.messages[100]
    vim.api.nvim_buf_set_lines(buf, 10, 11, false, { "an edit" })
    weak.doc2 = document.get(buf)
    assert.is_not_nil(weak.doc2)
    vim.api.nvim_buf_delete(buf, { force = true })
    vim.wait(50)
    collectgarbage()
    collectgarbage()
    -- Before: the model stayed reachable from a weak-keyed table whose value (the
    -- live state) held it, with the native document, until Neovim exited.
    assert.is_nil(weak.doc2, "the model of the wiped buffer is still referenced")
    assert.is_nil(weak.doc)
    assert.is_nil(weak.message)
  end)

  it("equals a full parse after thousands of random line edits on the fixture chats", function()
    local files = vim.fn.glob(FIXTURES .. "*.chat", false, true)
    table.sort(files)
    math.randomseed(16)
    local steps = 0
    for _, file in ipairs(files) do
      local buf = chat_buffer(vim.fn.readfile(file, "b"))
      assert.same(plain(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))), plain(document.get(buf)))
      for _ = 1, 300 do
        local n = vim.api.nvim_buf_line_count(buf)
        local first = math.random(0, n)
        local last = math.min(n, first + math.random(0, 2))
        local new = {}
        for k = 1, math.random(0, 2) do
          new[k] = POOL[math.random(#POOL)]
        end
        vim.api.nvim_buf_set_lines(buf, first, last, false, new)
        steps = steps + 1
        -- Not every edit is followed by a read: several edits between reads merge.
        if math.random() < 0.7 then
          local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
          assert.same(plain(document.parse(lines)), plain(document.get(buf)), file)
        end
      end
      vim.api.nvim_buf_delete(buf, { force = true })
    end
    assert.is_true(steps >= 3000)
  end)

  it("takes the lines of an announced nvim_buf_set_text only when the rows hold just them", function()
    local buf = chat_buffer({ "@You:", "hi", "", "@Assistant:", "tail text", "" })
    document.get(buf)
    local function set_text(row, col, lines, told)
      document.api_change(buf, told or { row = row, col = col, lines = lines })
      vim.api.nvim_buf_set_text(buf, row, col, row, col, lines)
      document.api_change(buf, false)
      local all = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      assert.same(plain(document.parse(all)), plain(document.get(buf)), table.concat(all, "\n"))
    end
    -- Inserted before text on its row: the row is not just the line.
    set_text(4, 0, { "@You:", "x" })
    -- Announced wrongly (another column): read from the buffer.
    set_text(1, 2, { " there" }, { row = 1, col = 0, lines = { " there" } })
    -- At the end, each row just its line: taken as told.
    local n = vim.api.nvim_buf_line_count(buf)
    set_text(n - 1, 0, { "**Tool Use:** `bash` (`t9`)", "", "```json", "" })
    n = vim.api.nvim_buf_line_count(buf)
    set_text(n - 1, 0, { '{"command": "' .. string.rep("a", 200000) .. '"}', "" })
    n = vim.api.nvim_buf_line_count(buf)
    set_text(n - 1, 0, { "```" })
    local msgs = document.get(buf).messages
    local parts = msgs[#msgs].parts
    local use = parts[#parts]
    assert.equals("tool_use", use.kind)
    assert.equals(200000, #use.input.command)
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("moves the messages after an edit that inserts or deletes lines, also those a reader placed meanwhile", function()
    local lines = {}
    for i = 1, 40 do
      vim.list_extend(lines, { i % 2 == 1 and "@You:" or "@Assistant:", "line " .. i, "" })
    end
    local buf = chat_buffer(lines)
    local before = document.get(buf)
    local live = document.live(buf)
    for step = 1, 60 do
      local n = vim.api.nvim_buf_line_count(buf)
      local at = math.random(0, n - 1)
      if step % 3 == 0 then
        vim.api.nvim_buf_set_lines(buf, at, at, false, { "inserted", "" })
      elseif step % 3 == 1 then
        vim.api.nvim_buf_set_lines(buf, at, at + 1, false, {})
      else
        vim.api.nvim_buf_set_lines(buf, at, at + 1, false, { "replaced" })
      end
      if step % 4 == 0 then
        -- as the previews do: place a segment after the change before the model is read
        local count = #document.live(buf).entries
        document.entry(live, math.random(0, count - 1))
      end
      if step % 2 == 0 then
        local want = plain(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false)))
        assert.same(want, plain(document.get(buf)), "step " .. step)
      end
    end
    assert.is_true(#before.messages > 0)
    -- A line inserted, the last message placed by a reader, the line deleted again:
    -- no net change of the line count, but that message had moved.
    document.get(buf)
    vim.api.nvim_buf_set_lines(buf, 1, 1, false, { "x" })
    document.entry(document.live(buf), #live.entries - 1)
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, {})
    assert.same(plain(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))), plain(document.get(buf)))
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("follows normal-mode edits, joins and undo/redo (on_bytes, then on_lines; undo the other way round)", function()
    local files = vim.fn.glob(FIXTURES .. "*.chat", false, true)
    table.sort(files)
    math.randomseed(21)
    local cmds = { "x", "dd", "p", "P", "u", "\18", "J", "ox\27", "Oy\27", "A z\27", "2dd", "yyp", ">>", "D", "u", "u" }
    local checks = 0
    for _, file in ipairs(files) do
      local buf = chat_buffer(vim.fn.readfile(file, "b"))
      vim.api.nvim_set_current_buf(buf)
      document.get(buf)
      for _ = 1, 60 do
        local n = vim.api.nvim_buf_line_count(buf)
        vim.api.nvim_win_set_cursor(0, { math.random(1, n), 0 })
        local cmd = cmds[math.random(#cmds)]
        pcall(vim.cmd, "silent! normal! " .. vim.api.nvim_replace_termcodes(cmd, true, true, true))
        vim.cmd("let &undolevels = &undolevels") -- one undo step per command
        if math.random() < 0.6 then
          local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
          assert.same(plain(document.parse(lines)), plain(document.get(buf)), file .. " after " .. cmd)
          checks = checks + 1
        end
      end
      vim.api.nvim_buf_delete(buf, { force = true })
    end
    assert.is_true(checks >= 200)
  end)

  it("follows :substitute and :global (Neovim 0.10 calls on_bytes of :s before the line is replaced)", function()
    local buf = chat_buffer({
      "@Assistant:",
      "**Tool Use:** `bash` (`t1`)",
      "```json",
      '{"command": "ls"}',
      "```",
      "",
      "@You:",
      "**Tool Result:** `t1`",
      "```flemma:tool status=pending",
      "```",
    })
    vim.api.nvim_set_current_buf(buf)
    assert.equals("pending", document.get(buf).messages[2].parts[1].status)
    vim.cmd("silent %s/status=pending/status=approved/")
    assert.equals("approved", document.get(buf).messages[2].parts[1].status)
    vim.cmd([[silent %s/"ls"/"ls -la"/]])
    assert.same({ command = "ls -la" }, document.get(buf).messages[1].parts[1].input)
    vim.cmd([[silent g/^@You:/s/You/Assistant/]])
    vim.cmd([[silent %s/\v^(\*\*Tool Use)/x\r\1/]])
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    assert.same(plain(document.parse(lines)), plain(document.get(buf)))
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("takes lines a writer inserts at a line start as followed before the folds (not lagging)", function()
    local buf = chat_buffer({ "@You:", "Explain.", "", "@Assistant:", "start", "" })
    document.get(buf)
    local L = document.live(buf)
    local version = require("flemma.core.native").idoc_info(L.idoc)
    -- As the provider's writer streams: whole lines put before the empty last line.
    vim.api.nvim_buf_set_text(buf, 5, 0, 5, 0, { "line a", "line b", "" })
    assert.is_false(document.lagged_since(buf, version))
    vim.api.nvim_buf_set_text(buf, 7, 0, 7, 0, { "tail" })
    assert.is_false(document.lagged_since(buf, version))
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    assert.same(plain(document.parse(lines)), plain(document.get(buf)))
    -- An undo is applied by on_lines only: the document lagged then.
    vim.api.nvim_set_current_buf(buf)
    vim.cmd("silent! normal! u")
    lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    assert.same(plain(document.parse(lines)), plain(document.get(buf)))
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("is current while Neovim computes folds during a change (before on_lines)", function()
    local lines = {}
    for i = 1, 30 do
      vim.list_extend(lines, { i % 2 == 1 and "@You:" or "@Assistant:", "line " .. i, "" })
    end
    local buf = chat_buffer(lines)
    vim.api.nvim_set_current_buf(buf)
    document.get(buf)
    local lags = 0
    _G.flemma_spec_fold = function()
      local _, nlines = require("flemma.core.native").idoc_info(document.live(buf).idoc)
      if nlines ~= vim.api.nvim_buf_line_count(buf) then
        lags = lags + 1
      end
      return 0
    end
    vim.wo.foldexpr = "v:lua.flemma_spec_fold()"
    vim.wo.foldmethod = "expr"
    lags = 0
    -- (J and undo still lag: Neovim reports their splices only after the fold update.)
    for _, cmd in ipairs({ "dd", "p", "2dd", "ox\27", "x", "yyP" }) do
      vim.api.nvim_win_set_cursor(0, { 20, 0 })
      vim.cmd("normal! " .. vim.api.nvim_replace_termcodes(cmd, true, true, true))
    end
    assert.equals(0, lags)
    assert.same(plain(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false))), plain(document.get(buf)))
    vim.wo.foldmethod = "manual"
    _G.flemma_spec_fold = nil
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("equals a full parse while a long answer streams in and is edited inside", function()
    -- A long @Assistant: message (the native document resumes inside it at
    -- checkpoints): chunks appended at its end cut lines anywhere, fences are
    -- opened and closed in it, lines in its middle change.
    local lines = { "@You:", "write a long answer", "", "@Assistant:" }
    for i = 1, 400 do
      lines[#lines + 1] = i % 50 == 10 and "```lua" or i % 50 == 30 and "```" or ("answer line %d"):format(i)
    end
    local buf = chat_buffer(lines)
    math.randomseed(1612)
    local CHUNKS = {
      "the ",
      "model ",
      "writes. ",
      "\n",
      "\n\n```lua\n",
      "\n```\n",
      "\n````\n",
      "x = 1\n",
      "\n@You:\n",
      "\n@Assistant:\n",
    }
    for step = 1, 600 do
      local n = vim.api.nvim_buf_line_count(buf)
      if step % 3 ~= 0 then
        local chunk = CHUNKS[math.random(#CHUNKS)]
        if chunk:find("@") and math.random() < 0.8 then
          chunk = "\n"
        end
        local col = #vim.api.nvim_buf_get_lines(buf, n - 1, n, false)[1]
        vim.api.nvim_buf_set_text(buf, n - 1, col, n - 1, col, vim.split(chunk, "\n", { plain = true }))
      else
        -- Inside a message, away from its marker.
        local first = math.random(5, n)
        local last = math.min(n, first + math.random(0, 2))
        local new = {}
        for k = 1, math.random(0, 2) do
          local l = POOL[math.random(#POOL)]
          new[k] = (l:sub(1, 1) == "@" and math.random() < 0.8) and "plain" or l
        end
        vim.api.nvim_buf_set_lines(buf, first, last, false, new)
      end
      if math.random() < 0.5 then
        local all = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
        assert.same(plain(document.parse(all)), plain(document.get(buf)), "step " .. step)
      end
    end
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("keeps the tables of the messages an edit did not touch, with their new lines", function()
    local buf = chat_buffer({ "@You:", "a", "@Assistant:", "b", "@You:", "c" })
    local before = document.get(buf)
    local first, last = before.messages[1], before.messages[3]
    vim.api.nvim_buf_set_lines(buf, 3, 4, false, { "b1", "b2" })
    local after = document.get(buf)
    assert.are_not.equal(before, after)
    assert.equals(first, after.messages[1])
    assert.equals(last, after.messages[3])
    assert.equals(6, last.first_line)
    assert.equals(7, last.parts[1].first_line)
    assert.equals("b1\nb2", after.messages[2].parts[1].text)
    assert.equals(after, document.get(buf))
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("returns the current model after another reader brought the live state up to date", function()
    local buf = chat_buffer({ "@You:", "a" })
    assert.equals("a", document.get(buf).messages[1].parts[1].text)
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "b" })
    document.live(buf) -- as the tool previews do
    assert.equals("b", document.get(buf).messages[1].parts[1].text)
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("validates the live model as a fresh full parse after random edits (rechecking only what changed)", function()
    local files = vim.fn.glob(FIXTURES .. "*.chat", false, true)
    table.sort(files)
    math.randomseed(12)
    local checks = 0
    -- Lines that make and break the pairing of tool uses and results.
    local pool = vim.list_extend({
      "**Tool Result:** `t1`",
      "**Tool Result:** `t2`",
      "**Tool Result:** `toolu_01`",
      "```flemma:tool status=denied",
      "**Tool Use:** `bash` (`t1`)",
      "```json",
      '{"command": "ls"}',
      "```",
      "@You:",
      "@Assistant:",
    }, vim.deepcopy(POOL))
    for _, file in ipairs(files) do
      local buf = chat_buffer(vim.fn.readfile(file, "b"))
      for _ = 1, 150 do
        local n = vim.api.nvim_buf_line_count(buf)
        local first = math.random(0, n)
        local last = math.min(n, first + math.random(0, 2))
        local new = {}
        for k = 1, math.random(0, 3) do
          new[k] = pool[math.random(#pool)]
        end
        vim.api.nvim_buf_set_lines(buf, first, last, false, new)
        if math.random() < 0.6 then
          local ok_full, want =
            document.validate_for_send(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false)))
          local ok_live, got = document.validate_for_send(document.get(buf))
          assert.same(want, got, file)
          assert.equals(ok_full, ok_live)
          checks = checks + 1
        end
      end
      vim.api.nvim_buf_delete(buf, { force = true })
    end
    assert.is_true(checks >= 500)
  end)

  it("after editing one tool result of a long chat, reports the problems a full validation reports", function()
    local lines = {}
    for t = 1, 60 do
      local id = ("toolu_%03d"):format(t)
      vim.list_extend(lines, {
        "@You:",
        "question " .. t,
        "",
        "@Assistant:",
        "**Tool Use:** `bash` (`" .. id .. "`)",
        "",
        "```json",
        '{"command": "ls"}',
        "```",
        "",
        "@You:",
        "**Tool Result:** `" .. id .. "`",
        "",
        "```",
        "out " .. t,
        "```",
        "",
        "@Assistant:",
        "done " .. t,
        "",
      })
    end
    local buf = chat_buffer(lines)
    local ok = document.validate_for_send(document.get(buf))
    assert.is_true(ok)
    math.randomseed(7)
    local seen_problem = false
    for _ = 1, 80 do
      local n = vim.api.nvim_buf_line_count(buf)
      local headers = {}
      for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
        if l:find("^%*%*Tool Result:%*%*") then
          headers[#headers + 1] = i
        end
      end
      local at = headers[math.random(#headers)]
      local choice = math.random(4)
      if choice == 1 then -- another id
        vim.api.nvim_buf_set_lines(
          buf,
          at - 1,
          at,
          false,
          { ("**Tool Result:** `toolu_%03d`"):format(math.random(60)) }
        )
      elseif choice == 2 then -- a placeholder again
        vim.api.nvim_buf_set_lines(buf, at + 1, at + 2, false, { "```flemma:tool status=pending" })
      elseif choice == 3 then -- the result deleted
        vim.api.nvim_buf_set_lines(buf, at - 1, math.min(n, at + 4), false, {})
      else -- a result duplicated
        vim.api.nvim_buf_set_lines(buf, at - 1, at - 1, false, vim.api.nvim_buf_get_lines(buf, at - 1, at + 4, false))
      end
      local ok_full, want = document.validate_for_send(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false)))
      local ok_live, got = document.validate_for_send(document.get(buf))
      assert.same(want, got)
      assert.equals(ok_full, ok_live)
      seen_problem = seen_problem or not ok_live
    end
    assert.is_true(seen_problem)
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("decodes a tool input only when it is read", function()
    local buf = chat_buffer({
      "@Assistant:",
      "**Tool Use:** `bash` (`t1`)",
      "",
      "```json",
      '{"command": "ls", "n": 2}',
      "```",
    })
    local use = document.get(buf).messages[1].parts[1]
    assert.is_nil(rawget(use, "input"))
    assert.same({ command = "ls", n = 2 }, use.input)
    assert.same({ command = "ls", n = 2 }, rawget(use, "input"))
    assert.is_nil(use.input_error)
    assert.same({ command = "ls", n = 2 }, document.to_messages(document.get(buf)).messages[1].parts[1].input)
    vim.api.nvim_buf_delete(buf, { force = true })
  end)

  it("follows undo, a reload of the file and a buffer emptied", function()
    local path = vim.fn.tempname() .. ".chat"
    vim.fn.writefile({ "@You:", "one" }, path)
    vim.cmd("edit " .. vim.fn.fnameescape(path))
    local buf = vim.api.nvim_get_current_buf()
    assert.equals("one", document.get(buf).messages[1].parts[1].text)
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "two" })
    assert.equals("two", document.get(buf).messages[1].parts[1].text)
    vim.cmd("silent undo")
    assert.equals("one", document.get(buf).messages[1].parts[1].text)
    vim.fn.writefile({ "@Assistant:", "three" }, path)
    vim.cmd("silent edit!")
    assert.equals("assistant", document.get(buf).messages[1].role)
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, {})
    assert.same({ messages = {}, diagnostics = {} }, document.get(buf))
    vim.cmd("bwipeout!")
    os.remove(path)
  end)
end)
