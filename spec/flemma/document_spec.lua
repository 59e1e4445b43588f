local document = require("flemma.chat.document")

local FIXTURES = FLEMMA_ROOT .. "/spec/fixtures/chat/"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- The lines of a file as nvim_buf_get_lines would give them for a unix buffer
-- ("\r" kept at the end of CRLF lines).
local function lines_of(text)
  local lines = vim.split(text, "\n", { plain = true })
  if lines[#lines] == "" then
    lines[#lines] = nil
  end
  return lines
end

local function find_part(doc, kind, id)
  for _, m in ipairs(doc.messages) do
    for _, p in ipairs(m.parts) do
      if p.kind == kind and (id == nil or p.id == id) then
        return p, m
      end
    end
  end
end

describe("flemma.chat.document", function()
  describe("parse", function()
    local files = vim.fn.glob(FIXTURES .. "*.chat", false, true)
    table.sort(files)

    it("has a corpus of fixtures", function()
      assert.is_true(#files >= 10)
    end)

    for _, file in ipairs(files) do
      local name = vim.fs.basename(file)
      it("reads " .. name .. " as its expected model", function()
        local expected = dofile((file:gsub("%.chat$", ".lua")))
        local doc = document.parse(lines_of(read(file)))
        assert.same(expected, doc)
      end)
    end

    it("reads a CRLF file as the same model as its LF twin", function()
      local crlf = read(FIXTURES .. "crlf.chat")
      assert.truthy(crlf:find("\r\n", 1, true))
      local lf = crlf:gsub("\r\n", "\n")
      assert.same(document.parse(lines_of(lf)), document.parse(lines_of(crlf)))
    end)

    it("keeps a 1 MB line intact in text and in a tool result", function()
      local big = string.rep("0123456789abcdef", 65536)
      local doc = document.parse({
        "@You:",
        big,
        "@Assistant:",
        "**Tool Use:** `t` (`id1`)",
        "",
        "```json",
        '{"s":"' .. big .. '"}',
        "```",
        "@You:",
        "**Tool Result:** `id1`",
        "",
        "```",
        big,
        "```",
      })
      assert.same({}, doc.diagnostics)
      assert.equals(big, doc.messages[1].parts[1].text)
      assert.equals(big, find_part(doc, "tool_use").input.s)
      assert.equals(big, find_part(doc, "tool_result").content)
    end)

    it("survives NUL bytes, invalid UTF-8 and a 20 MB single line", function()
      local doc = document.parse({ "@You:", "a\0b\255\254c", "\0@You:" })
      assert.equals("a\0b\255\254c\n\0@You:", doc.messages[1].parts[1].text)
      local huge = string.rep("`", 20 * 1024 * 1024)
      doc = document.parse({ "@You:", huge })
      assert.equals(1, #doc.messages)
    end)

    it("stays linear on 100k lines that look like fences", function()
      local lines = { "@You:" }
      for i = 1, 100000 do
        lines[#lines + 1] = string.rep("`", 3 + i % 7) .. (i % 3 == 0 and "x" or "")
        if i % 10 == 0 then
          lines[#lines + 1] = "@Assistant:"
        end
      end
      -- Finishing is the check (a quadratic parser would not); speed is in `make bench`.
      local doc = document.parse(lines)
      assert.is_true(#doc.messages >= 1)
    end)

    it("reads a list of lines as the same model as the lines joined into one text", function()
      for _, file in ipairs(files) do
        local lines = lines_of(read(file))
        assert.same(document.parse_text(table.concat(lines, "\n")), document.parse(lines), file)
      end
    end)

    it("rejects a list with a line that is not a string, naming the line", function()
      local ok, err = pcall(document.parse, { "@You:", "fine", 42 })
      assert.is_false(ok)
      assert.matches("line 3 should be a string, not number", err)
    end)

    it("returns an empty model for an empty buffer", function()
      assert.same({ messages = {}, diagnostics = {} }, document.parse({}))
      assert.same({ messages = {}, diagnostics = {} }, document.parse({ "" }))
    end)

    it("rejects a non-table argument with a clear error", function()
      local ok, err = pcall(document.parse, "text")
      assert.is_false(ok)
      assert.matches("`lines` should be a list of strings", err)
    end)
  end)

  describe("get", function()
    it("parses the buffer once per changedtick", function()
      local buf = vim.api.nvim_create_buf(false, true)
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "hello" })
      local a = document.get(buf)
      assert.equals("hello", a.messages[1].parts[1].text)
      assert.equals(a, document.get(buf))
      vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "changed" })
      local b = document.get(buf)
      assert.are_not.equal(a, b)
      assert.equals("changed", b.messages[1].parts[1].text)
      vim.api.nvim_buf_delete(buf, { force = true })
    end)

    it("raises for an invalid buffer", function()
      local ok, err = pcall(document.get, 999999)
      assert.is_false(ok)
      assert.matches("not valid", err)
    end)
  end)

  describe("writers", function()
    local function roundtrip(lines, role)
      local all = { role or "@You:" }
      vim.list_extend(all, lines)
      return document.parse(all)
    end

    it("renders a tool use that parses back to the same input", function()
      local input = { command = "echo ```` hi", n = 3, list = { "a", "b" } }
      local lines = document.render_tool_use("toolu_9", "bash", input)
      assert.equals("**Tool Use:** `bash` (`toolu_9`)", lines[1])
      assert.equals("", lines[2])
      assert.equals("`````json", lines[3])
      local doc = roundtrip(lines, "@Assistant:")
      assert.same({}, doc.diagnostics)
      local p = find_part(doc, "tool_use")
      assert.same(input, p.input)
      assert.equals("toolu_9", p.id)
      assert.equals("bash", p.name)
    end)

    it("renders an empty input as {}", function()
      assert.equals("{}", document.render_tool_use("i", "calc", {})[4])
    end)

    it("renders placeholders with and without content", function()
      assert.same(
        { "**Tool Result:** `t1`", "", "```flemma:tool status=pending", "```" },
        document.render_placeholder("t1", "pending")
      )
      local lines = document.render_placeholder("t1", "rejected", "no ``` way\nsecond")
      assert.same(
        { "**Tool Result:** `t1`", "", "````flemma:tool status=rejected", "no ``` way", "second", "````" },
        lines
      )
      local p = find_part(roundtrip(lines), "tool_result")
      assert.equals("rejected", p.status)
      assert.equals("no ``` way\nsecond", p.content)
    end)

    it("renders results: strings as is, tables as json, errors marked", function()
      local p = find_part(roundtrip(document.render_result("r1", "line 1\n```\nline 3\n", false)), "tool_result")
      assert.is_nil(p.status)
      assert.is_false(p.is_error)
      assert.equals("line 1\n```\nline 3", p.content)

      local lines = document.render_result("r2", { ok = true }, false)
      assert.equals("```json", lines[3])
      p = find_part(roundtrip(lines), "tool_result")
      assert.same({ ok = true }, vim.json.decode(p.content))
      assert.equals("json", p.info)

      lines = document.render_error("r3", "boom")
      assert.equals("**Tool Result:** `r3` (error)", lines[1])
      p = find_part(roundtrip(lines), "tool_result")
      assert.is_true(p.is_error)
      assert.equals("boom", p.content)
    end)

    it("rejects bad arguments with messages naming the argument", function()
      assert.matches("`status` should be one of", select(2, pcall(document.render_placeholder, "x", "maybe")))
      assert.matches("`id` should be", select(2, pcall(document.render_result, "a`b", "x")))
      assert.matches("`input` should be a table", select(2, pcall(document.render_tool_use, "x", "bash", "ls")))
    end)

    it("picks a fence longer than any backtick run", function()
      assert.equals("```", document.fence_for("no ticks"))
      assert.equals("````", document.fence_for("a ``` b"))
      assert.equals("``````", document.fence_for("`````"))
    end)
  end)

  describe("to_messages", function()
    it("builds the provider-neutral conversation", function()
      local doc = document.parse(lines_of(read(FIXTURES .. "basic.chat")))
      local conv = document.to_messages(doc)
      assert.equals("You are terse.", conv.system)
      assert.same({
        { role = "user", parts = { { kind = "text", text = "List the files." } } },
        {
          role = "assistant",
          parts = {
            { kind = "text", text = "Let me look." },
            { kind = "tool_use", id = "toolu_01", name = "bash", input = { command = "ls", label = "listing" } },
          },
        },
        { role = "user", parts = { { kind = "tool_result", id = "toolu_01", content = "", is_error = false } } },
      }, conv.messages)
    end)

    it("merges consecutive messages of one role and keeps thinking", function()
      local conv = document.to_messages(document.parse({
        "@You:",
        "a",
        "@You:",
        "b",
        "@Assistant:",
        '<thinking openai:signature="s1">',
        "t",
        "</thinking>",
        "@Assistant:",
      }))
      assert.is_nil(conv.system)
      assert.same({
        { role = "user", parts = { { kind = "text", text = "a" }, { kind = "text", text = "b" } } },
        {
          role = "assistant",
          parts = { { kind = "thinking", text = "t", signature = "s1", provider = "openai", redacted = false } },
        },
      }, conv.messages)
    end)
  end)

  describe("validate_for_send", function()
    local function use(id)
      return { "**Tool Use:** `bash` (`" .. id .. "`)", "", "```json", '{"command":"ls"}', "```" }
    end
    local function doc_of(...)
      local lines = {}
      for _, chunk in ipairs({ ... }) do
        if type(chunk) == "string" then
          lines[#lines + 1] = chunk
        else
          vim.list_extend(lines, chunk)
        end
      end
      return document.parse(lines)
    end

    it("accepts a conversation where every tool use has one result", function()
      local ok, problems = document.validate_for_send(
        doc_of(
          "@You:",
          "go",
          "@Assistant:",
          use("a"),
          use("b"),
          "@You:",
          document.render_result("b", "B"),
          document.render_result("a", "A", true)
        )
      )
      assert.same({}, problems)
      assert.is_true(ok)
    end)

    it("reports a tool use without a result, with its line", function()
      local ok, problems = document.validate_for_send(doc_of("@You:", "go", "@Assistant:", use("a"), "@You:", "next"))
      assert.is_false(ok)
      assert.equals(1, #problems)
      assert.equals(4, problems[1].line)
      assert.matches("`a` %(bash%) has no result in the next @You: message", problems[1].message)
    end)

    it("reports remaining placeholders", function()
      local ok, problems = document.validate_for_send(
        doc_of("@Assistant:", use("a"), "@You:", document.render_placeholder("a", "approved"))
      )
      assert.is_false(ok)
      assert.same({
        {
          line = 8,
          message = "tool result `a` is still a approved placeholder: resolve it with <C-]> or <M-CR> (or replace it with a real result)",
        },
      }, problems)
    end)

    it("reports a result that is not in the message after its tool use", function()
      local ok, problems = document.validate_for_send(
        doc_of(
          "@Assistant:",
          use("a"),
          "@You:",
          "first",
          "@Assistant:",
          "ok",
          "@You:",
          document.render_result("a", "late")
        )
      )
      assert.is_false(ok)
      assert.equals(2, #problems)
      assert.matches("no result in the next @You:", problems[1].message)
      assert.matches("does not answer a tool use", problems[2].message)
    end)

    it("includes the parser's errors but not its warnings", function()
      local ok, problems = document.validate_for_send(doc_of("@You:", "```", "unclosed"))
      assert.is_true(ok)
      assert.same({}, problems)
      ok, problems = document.validate_for_send(doc_of("@Assistant:", "**Tool Use:** `x` (`y`)", "@You:", "hm"))
      assert.is_false(ok)
      assert.matches("has no fenced input block", problems[1].message)
    end)
  end)
end)
