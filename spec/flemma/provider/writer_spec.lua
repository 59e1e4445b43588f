local helpers = require("spec.support.helpers")
local writer = require("flemma.provider.writer")

local function chat(lines)
  return helpers.buffer(lines)
end

local function text(buf)
  return table.concat(helpers.lines(buf), "\n")
end

local function feed(w, events)
  for _, ev in ipairs(events) do
    w:apply(ev)
  end
end

describe("flemma.provider.writer", function()
  after_each(function()
    vim.cmd("silent! %bwipeout!")
  end)

  it("writes @Assistant: at once with a spinner, then the text, then a fresh @You:", function()
    local buf = chat({ "@You:", "Hello" })
    local w = writer.new(buf, { provider = "anthropic", label = "anthropic" })
    assert.same({ "@You:", "Hello", "", "@Assistant:", "" }, helpers.lines(buf))
    assert.is_false(vim.bo[buf].modifiable)
    local marks = vim.api.nvim_buf_get_extmarks(buf, writer.ns, 0, -1, { details = true })
    assert.equals(1, #marks)
    assert.equals(3, marks[1][2])
    assert.truthy(marks[1][4].virt_text[1][1]:find("waiting", 1, true))
    feed(w, {
      { type = "text", index = 0, text = "Hi" },
      { type = "text", index = 0, text = " there,\nsecond" },
      { type = "text", index = 0, text = " line.\n" },
    })
    helpers.wait_for(function()
      return text(buf):find("second line.", 1, true) ~= nil
    end, 1000)
    assert.is_false(vim.bo[buf].modifiable)
    w:finish("completed")
    assert.equals("@You:\nHello\n\n@Assistant:\nHi there,\nsecond line.\n\n@You:\n", text(buf))
    assert.is_true(vim.bo[buf].modifiable)
    assert.same({}, vim.api.nvim_buf_get_extmarks(buf, writer.ns, 0, -1, {}))
  end)

  it("makes the whole response one undo step", function()
    local buf = chat({ "@You:", "Hello" })
    vim.bo[buf].undolevels = 100
    local w = writer.new(buf)
    for i = 1, 5 do
      w:apply({ type = "text", index = 0, text = "part " .. i .. "\n" })
      w:flush()
    end
    w:finish("completed")
    assert.truthy(text(buf):find("part 5", 1, true))
    vim.api.nvim_buf_call(buf, function()
      vim.cmd("silent undo")
    end)
    assert.same({ "@You:", "Hello" }, helpers.lines(buf))
  end)

  it("changes the buffer at most once per 16 ms however many deltas arrive", function()
    local buf = chat({ "@You:", "Hello" })
    local w = writer.new(buf)
    local tick = vim.api.nvim_buf_get_changedtick(buf)
    for i = 1, 200 do
      w:apply({ type = "text", index = 0, text = tostring(i) .. " " })
    end
    assert.equals(tick, vim.api.nvim_buf_get_changedtick(buf))
    helpers.wait_for(function()
      return text(buf):find("200 ", 1, true) ~= nil
    end, 1000)
    assert.is_true(vim.api.nvim_buf_get_changedtick(buf) - tick <= 2)
    w:finish("completed")
  end)

  it("writes a flood in slices of at most max_flush bytes, cut after a newline or on a UTF-8 boundary", function()
    local saved = writer.max_flush
    writer.max_flush = 4096
    local buf = chat({ "@You:", "Hello" })
    local w = writer.new(buf)
    local piece = string.rep("é", 50) .. "\n" -- 101 bytes
    local n = 100
    for _ = 1, n do
      w:apply({ type = "text", index = 0, text = piece })
    end
    w:apply({ type = "text", index = 0, text = string.rep("ü", 5000) }) -- one line, 2 bytes a char
    w:flush()
    local written = #table.concat(helpers.lines(buf), "\n")
    assert.is_true(written < 4096 + 100, written)
    helpers.wait_for(function()
      return not w:has_pending()
    end, 5000)
    w:finish("completed")
    writer.max_flush = saved
    local lines = helpers.lines(buf)
    assert.equals(4 + n + 1 + 3, #lines)
    for i = 5, 4 + n do
      assert.equals(string.rep("é", 50), lines[i])
    end
    assert.equals(string.rep("ü", 5000), lines[5 + n])
  end)

  it("writes lines longer than max_flush each by itself, whole, and the text around them exactly", function()
    local saved = writer.max_flush
    writer.max_flush = 1000
    local buf = chat({ "@You:", "Go." })
    local w = writer.new(buf)
    local calls = {}
    local set_text = vim.api.nvim_buf_set_text
    vim.api.nvim_buf_set_text = function(b, r1, c1, r2, c2, repl)
      calls[#calls + 1] = vim.tbl_map(function(l)
        return #l
      end, repl)
      return set_text(b, r1, c1, r2, c2, repl)
    end
    -- A long text line streamed in small pieces, short lines, then a tool input
    -- written as it came (invalid, over max_input_normalized): long and short lines.
    local long = string.rep("x", 5000)
    for i = 1, #long, 300 do
      w:apply({ type = "text", index = 0, text = long:sub(i, i + 299) })
    end
    w:apply({ type = "text", index = 0, text = "\nshort one\nshort two\n" })
    local json = "{\n" .. string.rep("a", 3000) .. "\n" .. string.rep("b", 70 * 1024) .. "\n}\n```\n@You:\n"
    feed(w, {
      { type = "tool_use_start", index = 1, id = "toolu_L", name = "echo" },
      { type = "tool_input_delta", index = 1, json = json },
      { type = "tool_use_stop", index = 1 },
    })
    helpers.wait_for(function()
      return not w:has_pending()
    end, 5000)
    vim.api.nvim_buf_set_text = set_text
    w:finish("completed")
    writer.max_flush = saved
    -- Each long line went into the buffer in one change of its own.
    for _, want in ipairs({ 5000, 3000, 70 * 1024 }) do
      local alone = false
      for _, c in ipairs(calls) do
        alone = alone or (c[1] == want and (#c == 1 or (#c == 2 and c[2] == 0)))
      end
      assert.is_true(alone, ("the %d-byte line was not written by itself: %s"):format(want, vim.inspect(calls)))
    end
    local lines = helpers.lines(buf)
    local fence = "````"
    assert.same({
      "@You:",
      "Go.",
      "",
      "@Assistant:",
      long,
      "short one",
      "short two",
      "",
      "",
      "**Tool Use:** `echo` (`toolu_L`)",
      "",
      fence .. "json",
      "{",
      string.rep("a", 3000),
      string.rep("b", 70 * 1024),
      "}",
      "```",
      "@You:",
      "",
      fence,
      "",
      "@You:",
      "",
    }, lines)
    local doc = require("flemma.chat.document").parse(lines)
    assert.same(
      { "user", "assistant", "user" },
      vim.tbl_map(function(m)
        return m.role
      end, doc.messages)
    )
  end)

  it("when_drained waits until the pending text is in the buffer, written slice by slice", function()
    local saved = writer.max_flush
    writer.max_flush = 1024
    local buf = chat({ "@You:", "Hello" })
    local w = writer.new(buf)
    for i = 1, 200 do
      w:apply({ type = "text", index = 0, text = ("line %03d of the answer\n"):format(i) })
    end
    local ticks, drained = {}, false
    vim.api.nvim_buf_attach(buf, false, {
      on_lines = function()
        ticks[#ticks + 1] = true
      end,
    })
    w:when_drained(function()
      drained = true
    end)
    assert.is_false(drained)
    helpers.wait_for(function()
      return drained
    end, 5000)
    writer.max_flush = saved
    assert.is_true(#ticks >= 4, #ticks) -- 4,800 bytes in slices of at most 1,024
    assert.truthy(text(buf):find("line 200 of the answer", 1, true))
    w:finish("completed")
  end)

  it("writes thinking with its signature, redacted thinking, then text", function()
    local buf = chat({ "@You:", "2+2?" })
    local w = writer.new(buf, { provider = "anthropic" })
    feed(w, {
      { type = "thinking", index = 0, text = "Let me think" },
      { type = "thinking", index = 0, text = " about it.\nIt is 4." },
      { type = "thinking_signature", index = 0, signature = "EqQB+/sig==" },
      { type = "redacted_thinking", index = 1, data = "UkVEQUNURUQ=" },
      { type = "text", index = 2, text = "4." },
    })
    w:finish("completed")
    assert.equals(
      table.concat({
        "@You:",
        "2+2?",
        "",
        "@Assistant:",
        '<thinking anthropic:signature="EqQB+/sig==">',
        "Let me think about it.",
        "It is 4.",
        "</thinking>",
        "",
        "<thinking redacted>",
        "UkVEQUNURUQ=",
        "</thinking>",
        "",
        "4.",
        "",
        "@You:",
        "",
      }, "\n"),
      text(buf)
    )
    -- What was written parses back into the same thinking parts.
    local doc = require("flemma.chat.document").parse(helpers.lines(buf))
    local parts = doc.messages[2].parts
    assert.equals("thinking", parts[1].kind)
    assert.equals("EqQB+/sig==", parts[1].signature)
    assert.equals("Let me think about it.\nIt is 4.", parts[1].text)
    assert.is_true(parts[2].redacted)
    assert.equals("UkVEQUNURUQ=", parts[2].text)
  end)

  it("puts a signature on its thinking tag while slices of earlier text still wait", function()
    local saved = writer.max_flush
    writer.max_flush = 64
    local buf = chat({ "@You:", "go" })
    local w = writer.new(buf, { provider = "anthropic" })
    for i = 1, 40 do
      w:apply({ type = "text", index = 0, text = ("text line %02d\n"):format(i) })
    end
    w:flush() -- one slice of 64 bytes written, the rest waits
    assert.is_true(w:has_pending())
    feed(w, {
      { type = "thinking", index = 1, text = "hmm\nyes" },
      { type = "thinking_signature", index = 1, signature = "c2ln" },
      { type = "text", index = 2, text = "done" },
    })
    w:finish("completed")
    writer.max_flush = saved
    local lines = helpers.lines(buf)
    assert.equals("@Assistant:", lines[4])
    for i = 1, 40 do
      assert.equals(("text line %02d"):format(i), lines[4 + i])
    end
    assert.same(
      { "", "", '<thinking anthropic:signature="c2ln">', "hmm", "yes", "</thinking>", "", "done" },
      vim.list_slice(lines, 45, 52)
    )
  end)

  it(
    "writes each tool use once its input is complete, parallel ones in order, fences longer than backtick runs",
    function()
      local buf = chat({ "@You:", "Run both." })
      local w = writer.new(buf)
      feed(w, {
        { type = "text", index = 0, text = "Running both." },
        { type = "tool_use_start", index = 1, id = "toolu_A", name = "echo" },
        { type = "tool_input_delta", index = 1, json = '{"text": "fir' },
      })
      w:flush()
      assert.is_nil(text(buf):find("Tool Use", 1, true))
      feed(w, {
        { type = "tool_input_delta", index = 1, json = 'st ```"}' },
        { type = "tool_use_stop", index = 1 },
        { type = "tool_use_start", index = 2, id = "toolu_B", name = "echo" },
        { type = "tool_input_delta", index = 2, json = '{"text": "second"}' },
        { type = "tool_use_stop", index = 2 },
      })
      w:finish("completed")
      local doc = require("flemma.chat.document").parse(helpers.lines(buf))
      local uses = {}
      for _, p in ipairs(doc.messages[2].parts) do
        if p.kind == "tool_use" then
          uses[#uses + 1] = { p.id, p.name, p.input }
        end
      end
      assert.same({ { "toolu_A", "echo", { text = "first ```" } }, { "toolu_B", "echo", { text = "second" } } }, uses)
      assert.truthy(text(buf):find("\n````json\n", 1, true), text(buf))
      assert.equals("user", doc.messages[3].role)
      assert.same({}, doc.diagnostics)
    end
  )

  it("on cancel keeps the text, drops an incomplete tool use and leaves a cancelled line", function()
    local buf = chat({ "@You:", "Go" })
    local w = writer.new(buf)
    feed(w, {
      { type = "text", index = 0, text = "Partial answer" },
      { type = "tool_use_start", index = 1, id = "toolu_X", name = "bash" },
      { type = "tool_input_delta", index = 1, json = '{"comm' },
    })
    w:finish("cancelled")
    assert.equals("@You:\nGo\n\n@Assistant:\nPartial answer\n\n<!-- flemma: cancelled -->\n\n@You:\n", text(buf))
    assert.is_true(vim.bo[buf].modifiable)
  end)

  it("on an error before any content removes the empty @Assistant: and restores the buffer", function()
    for _, lines in ipairs({ { "@You:", "Hello" }, { "@You:", "Hello", "" }, { "@You:", "Hello", "", "" } }) do
      local buf = chat(lines)
      local w = writer.new(buf)
      assert.truthy(text(buf):find("@Assistant:", 1, true))
      w:finish("error")
      assert.same(lines, helpers.lines(buf))
      assert.is_true(vim.bo[buf].modifiable)
    end
  end)

  it("restores a buffer that was not modifiable before", function()
    local buf = chat({ "@You:", "Hello" })
    vim.bo[buf].modifiable = false
    local w = writer.new(buf)
    w:apply({ type = "text", index = 0, text = "x" })
    w:finish("completed")
    assert.is_false(vim.bo[buf].modifiable)
    assert.truthy(text(buf):find("\nx\n", 1, true))
  end)
end)
