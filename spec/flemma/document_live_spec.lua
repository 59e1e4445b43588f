-- document.get keeps a buffer's model up to date from its line edits (the
-- native incremental document fed by nvim_buf_attach). These specs edit real
-- buffers with nvim_buf_set_lines and compare with a fresh full parse.
local document = require("flemma.document")

local FIXTURES = FLEMMA_ROOT .. "/spec/fixtures/chat/"

-- A plain copy of a model with every field read (lazy inputs decoded).
local function plain(doc)
  local out = { frontmatter = doc.frontmatter and vim.deepcopy(doc.frontmatter), messages = {}, diagnostics = {} }
  for i, m in ipairs(doc.messages) do
    local parts = {}
    for j, p in ipairs(m.parts) do
      local q = {}
      for _, k in ipairs({
        "kind", "first_line", "last_line", "text", "id", "name", "input", "input_error", "status", "is_error",
        "content", "fence_line", "info", "legacy", "signature", "provider", "redacted",
      }) do
        q[k] = p[k]
      end
      parts[j] = q
    end
    out.messages[i] = { role = m.role, first_line = m.first_line, last_line = m.last_line, parts = parts }
  end
  for i, d in ipairs(doc.diagnostics) do
    out.diagnostics[i] = { line = d.line, severity = d.severity, message = d.message }
  end
  return out
end

-- Lines that change the structure most.
local POOL = {
  "```", "````", "~~~", "```json", "```lua", "````markdown", "`````", "@You:", "@Assistant:", "@System:", "", "",
  "text", "more text", "**Tool Use:** `bash` (`t1`)", "**Tool Use:** `read` (`t2`)", "**Tool Result:** `t1`",
  "**Tool Result:** `t2` (error)", "```flemma:tool status=pending", "```flemma:tool status=approved",
  '{"command": "ls"}', '{"a": [1, 2', "<thinking>", "</thinking>", "```lua", "flemma.opt.tools.auto_approve = {}",
}

local function chat_buffer(lines)
  local buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  return buf
end

describe("flemma.document.get (live model)", function()
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
