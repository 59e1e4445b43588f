-- Moving in a chat buffer: real keys pressed in a real chat buffer (]m [m, im am,
-- gf, gd), assertions on the cursor, the buffer text, registers and open files.
local helpers = require("spec.support.helpers")

local press = helpers.press

local function lines(buf)
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

local function chat(content, name)
  local dir = helpers.tmpdir()
  local buf = helpers.edit(dir .. "/" .. (name or "nav.chat"), content)
  assert.equals("chat", vim.bo[buf].filetype)
  return buf, dir
end

local function cursor()
  return vim.api.nvim_win_get_cursor(0)
end

local function at(line, col)
  vim.api.nvim_win_set_cursor(0, { line, col or 0 })
end

-- 1-3 frontmatter, 5 @System:, 8 @You:, 13 @Assistant:, 17 @You:
local CONVERSATION = {
  "```lua", --  1
  "x = 1", --  2
  "```", --  3
  "", --  4
  "@System:", --  5
  "Be terse.", --  6
  "", --  7
  "@You:", --  8
  "", --  9
  "Hello there.", -- 10
  "Second line.", -- 11
  "", -- 12
  "@Assistant:", -- 13
  "Hi.", -- 14
  "", -- 15
  "", -- 16
  "@You:", -- 17
  "Thanks.", -- 18
}

describe("flemma.ui.nav", function()
  before_each(function()
    require("flemma").setup({})
  end)
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  describe("]m and [m", function()
    it("move to the next and previous role marker, with counts", function()
      chat(CONVERSATION)
      at(1)
      press("]m")
      assert.same({ 5, 0 }, cursor())
      press("]m")
      assert.same({ 8, 0 }, cursor())
      press("2]m")
      assert.same({ 17, 0 }, cursor())
      press("[m")
      assert.same({ 13, 0 }, cursor())
      at(11, 4) -- inside a message: [m goes to its own marker first
      press("[m")
      assert.same({ 8, 0 }, cursor())
      at(18, 3)
      press("4[m")
      assert.same({ 5, 0 }, cursor())
      -- Past the last (first) message: the end (start) of the buffer, as ]] and [[.
      at(14)
      press("5]m")
      assert.same({ 18, 0 }, cursor())
      press("9[m")
      assert.same({ 1, 0 }, cursor())
    end)

    it("do not stop at a marker inside a fenced block", function()
      chat({ "@You:", "Quote:", "", "```", "@Assistant:", "```", "", "@Assistant:", "Ok." })
      at(1)
      press("]m")
      assert.same({ 8, 0 }, cursor())
      press("[m")
      assert.same({ 1, 0 }, cursor())
    end)

    it("are repeated with . as an operator's motion", function()
      local buf = chat(CONVERSATION)
      at(5)
      press("d]m")
      assert.equals("@You:", lines(buf)[5])
      press(".")
      assert.same({ "@Assistant:", "Hi.", "", "", "@You:", "Thanks." }, vim.list_slice(lines(buf), 5))
    end)

    it("leave a jump behind", function()
      chat(CONVERSATION)
      at(2)
      press("]m")
      press("]m")
      assert.same({ 8, 0 }, cursor())
      press("<C-o>")
      assert.same({ 5, 0 }, cursor())
      press("<C-o>")
      assert.same({ 2, 0 }, cursor())
    end)

    it("extend a Visual selection and serve as an operator's motion", function()
      local buf = chat(CONVERSATION)
      at(8)
      press("V]my")
      assert.same({ "@You:", "", "Hello there.", "Second line.", "", "@Assistant:" }, vim.fn.getreg('"', 1, true))
      at(13)
      press("d]m") -- from a marker's first column: linewise, up to the next marker
      assert.same({ "@You:", "Thanks." }, vim.list_slice(lines(buf), 13))
      assert.equals("@You:", lines(buf)[13])
      at(14)
      press("d]m") -- the last message: to the end of the buffer
      assert.same(13, #lines(buf))
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, CONVERSATION)
      at(8)
      press("2d]m")
      assert.same({ "@System:", "Be terse.", "", "@You:", "Thanks." }, vim.list_slice(lines(buf), 5))
    end)
  end)

  describe("im and am", function()
    it("yam yanks the whole message with the blank lines after it", function()
      chat(CONVERSATION)
      at(10, 3)
      press("yam")
      assert.equals("V", vim.fn.getregtype('"'))
      assert.same({ "@You:", "", "Hello there.", "Second line.", "" }, vim.fn.getreg('"', 1, true))
      at(13)
      press("2yam")
      -- No blank line after the last message: the one before is taken (as with 2yap).
      assert.same({ "", "@Assistant:", "Hi.", "", "", "@You:", "Thanks." }, vim.fn.getreg('"', 1, true))
    end)

    it("dim deletes the text without the marker and the blank lines around it", function()
      local buf = chat(CONVERSATION)
      at(8)
      press("dim")
      assert.same({ "@You:", "", "", "@Assistant:" }, vim.list_slice(lines(buf), 8, 11))
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, CONVERSATION)
      at(18)
      press("cimBye.<Esc>")
      assert.same({ "@You:", "Bye." }, vim.list_slice(lines(buf), 17))
    end)

    it("vim selects the text in Visual mode; dam on the last message takes the blank lines before it", function()
      local buf = chat(CONVERSATION)
      at(11)
      press("vimy")
      assert.same({ "Hello there.", "Second line." }, vim.fn.getreg('"', 1, true))
      assert.equals("n", vim.api.nvim_get_mode().mode)
      at(17)
      press("dam")
      assert.same({ "@Assistant:", "Hi." }, vim.list_slice(lines(buf), 13))
    end)

    it("are repeated with . on the message under the cursor then", function()
      local buf = chat(CONVERSATION)
      at(8)
      press("dam")
      assert.equals("@Assistant:", lines(buf)[8])
      press(".")
      assert.same({ "@System:", "Be terse.", "", "@You:", "Thanks." }, vim.list_slice(lines(buf), 5))
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, CONVERSATION)
      at(10)
      press("dim")
      at(12) -- the assistant's text, now on line 12
      press(".")
      assert.same({ "@You:", "", "", "@Assistant:", "", "", "@You:", "Thanks." }, vim.list_slice(lines(buf), 8))
    end)

    it("grow a Visual selection by the next message when repeated", function()
      chat(CONVERSATION)
      at(6)
      press("Vamamy")
      assert.same(
        { "@System:", "Be terse.", "", "@You:", "", "Hello there.", "Second line.", "" },
        vim.fn.getreg('"', 1, true)
      )
      at(10)
      press("vimimy")
      assert.same({ "Hello there.", "Second line.", "", "@Assistant:", "Hi." }, vim.fn.getreg('"', 1, true))
    end)

    it("select nothing outside a message and in an empty one without lines", function()
      local buf = chat({ "```lua", "x = 1", "```", "", "@You:" })
      local before = lines(buf)
      at(2)
      press("dam")
      assert.same(before, lines(buf))
      press("camX<Esc>") -- the operator is cancelled: no Insert mode
      assert.same(before, lines(buf))
      at(5)
      press("dim")
      assert.same(before, lines(buf))
      press("cimX<Esc>")
      assert.same(before, lines(buf))
      assert.equals("n", vim.api.nvim_get_mode().mode)
    end)
  end)

  describe("gf", function()
    it("edits the file a reference names, relative to the chat, ~, trailing punctuation left out", function()
      local dir = helpers.tmpdir()
      helpers.write_file(dir .. "/notes/a.txt", "a\n")
      helpers.write_file(dir .. "/b.txt", "b\n")
      helpers.write_file(dir .. "/home/h.md", "h\n")
      helpers.write_file(dir .. "/abs.txt", "abs\n")
      helpers.write_file(dir .. "/notes/my notes.md", "spaced\n")
      local home = vim.env.HOME
      vim.env.HOME = dir .. "/home"
      local ok, err = pcall(function()
        vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/notes/c.chat"))
        local buf = vim.api.nvim_get_current_buf()
        vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
          "@You:",
          "Read @./a.txt, then (@../b.txt).",
          "And @~/h.md;type=text/markdown: and @" .. dir .. "/abs.txt.",
          "Also @./my\\ notes.md.",
        })
        local function col(line, needle, offset)
          return lines(buf)[line]:find(needle, 1, true) - 1 + (offset or 0)
        end
        local cases = {
          { 2, col(2, "@./a.txt"), dir .. "/notes/a.txt" }, -- on the @
          { 2, col(2, "@./a.txt", 7), dir .. "/notes/a.txt" }, -- on its last letter
          { 2, col(2, "@../b.txt", 4), dir .. "/b.txt" },
          { 3, col(3, "@~/h.md", 3), dir .. "/home/h.md" },
          { 3, col(3, "type=text"), dir .. "/home/h.md" },
          { 3, col(3, "/abs.txt", 2), dir .. "/abs.txt" },
          { 4, col(4, "notes.md"), dir .. "/notes/my notes.md" }, -- after the escaped space
        }
        for _, c in ipairs(cases) do
          vim.cmd("buffer " .. buf)
          at(c[1], c[2])
          press("gf")
          assert.equals(c[3], vim.api.nvim_buf_get_name(0), ("line %d col %d"):format(c[1], c[2]))
        end
      end)
      vim.env.HOME = home
      assert(ok, err)
    end)

    it("reads references as the attachments do", function()
      local nav = require("flemma.chat.attachments")
      local ref = nav.reference_at("see @./img.png;type=image/png).", 6)
      assert.same({ path = "./img.png", type = "image/png", first = 4, last = 28 }, ref)
      assert.is_nil(nav.reference_at("see @./a.txt.", 12)) -- on the trailing period
      assert.is_nil(nav.reference_at("mail me@./x", 8)) -- not after a word character
      assert.is_nil(nav.reference_at("@You: hello", 1))
      assert.same("../x", nav.reference_at("`@../x`", 2).path)
    end)

    it("says so for a missing file and falls back to Vim's gf elsewhere", function()
      local buf, dir = chat({ "@You:", "See @./missing.txt and plain.txt" })
      helpers.write_file(dir .. "/plain.txt", "p\n")
      local name = vim.api.nvim_buf_get_name(buf)
      local seen
      local notify = vim.notify
      vim.notify = function(msg)
        seen = msg
      end
      at(2, 6)
      press("gf")
      vim.notify = notify
      assert.equals(name, vim.api.nvim_buf_get_name(0))
      assert.truthy(seen and seen:find("(flemma) no file " .. dir .. "/missing.txt", 1, true), seen)
      at(2, 27) -- on plain.txt: found through 'path' (the chat's directory)
      press("gf")
      assert.equals(dir .. "/plain.txt", vim.api.nvim_buf_get_name(0))
    end)
  end)

  describe("gd", function()
    local TOOLS = {
      "@You:", --  1
      "List.", --  2
      "", --  3
      "@Assistant:", --  4
      "**Tool Use:** `bash` (`toolu_01`)", --  5
      "", --  6
      "```json", --  7
      '{ "command": "ls" }', --  8
      "```", --  9
      "", -- 10
      "**Tool Use:** `read` (`toolu_02`)", -- 11
      "", -- 12
      "```json", -- 13
      '{ "path": "x" }', -- 14
      "```", -- 15
      "", -- 16
      "**Tool Use:** `bash` (`toolu_03`)", -- 17
      "", -- 18
      "```json", -- 19
      '{ "command": "pwd" }', -- 20
      "```", -- 21
      "", -- 22
      "@You:", -- 23
      "**Tool Result:** `toolu_02`", -- 24
      "", -- 25
      "```", -- 26
      "x's text", -- 27
      "```", -- 28
      "", -- 29
      "**Tool Result:** `toolu_01`", -- 30
      "", -- 31
      "```flemma:tool status=pending", -- 32
      "```", -- 33
    }

    it("jumps from a tool use to its result and back, placeholders included", function()
      chat(TOOLS)
      at(5, 3)
      press("gd")
      assert.same({ 30, 0 }, cursor()) -- the placeholder of toolu_01
      press("gd")
      assert.same({ 5, 0 }, cursor())
      at(14, 2) -- inside the input of toolu_02
      press("gd")
      assert.same({ 24, 0 }, cursor())
      at(27)
      press("gd")
      assert.same({ 11, 0 }, cursor())
      press("<C-o>")
      assert.same({ 27, 0 }, cursor())
      at(33) -- the placeholder's closing fence
      press("gd")
      assert.same({ 5, 0 }, cursor())
    end)

    it("says so when there is no pair and stays", function()
      local buf = chat(TOOLS)
      vim.api.nvim_buf_set_lines(buf, 23, 24, false, { "**Tool Result:** `toolu_09`" })
      local seen = {}
      local notify = vim.notify
      vim.notify = function(msg)
        seen[#seen + 1] = msg
      end
      at(17)
      press("gd")
      at(24)
      press("gd")
      vim.notify = notify
      assert.same({ 24, 0 }, cursor())
      assert.same({
        "(flemma) tool use `toolu_03` (bash) has no result in the next @You: message",
        "(flemma) tool result `toolu_09` answers no tool use in this chat",
      }, seen)
    end)
  end)

  describe("gd elsewhere", function()
    it("is Vim's own gd outside tool blocks", function()
      chat({ "@You:", "alpha beta", "", "gamma alpha" })
      at(4, 7)
      press("gd")
      assert.same({ 2, 0 }, cursor())
    end)
  end)

  describe("a new chat", function()
    it("starts an empty .chat buffer with @You: and the cursor below it, unmodified", function()
      local dir = helpers.tmpdir()
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/new.chat"))
      local buf = vim.api.nvim_get_current_buf()
      assert.is_true(vim.wait(1000, function()
        return #lines(buf) == 2
      end, 5))
      assert.same({ "@You:", "" }, lines(buf))
      assert.same({ 2, 0 }, cursor())
      assert.is_false(vim.bo[buf].modified)
      press("u") -- the template is no undo step
      assert.same({ "@You:", "" }, lines(buf))
      -- An empty file read from disk gets it as well.
      helpers.write_file(dir .. "/empty.chat", "")
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/empty.chat"))
      local empty = vim.api.nvim_get_current_buf()
      assert.is_true(vim.wait(1000, function()
        return #lines(empty) == 2
      end, 5))
      assert.is_false(vim.bo[empty].modified)
    end)

    it("leaves a file with text and lines set by a script alone", function()
      local dir = helpers.tmpdir()
      helpers.write_file(dir .. "/old.chat", "@Assistant:\nHi.\n")
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/old.chat"))
      local old = vim.api.nvim_get_current_buf()
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/scripted.chat"))
      local scripted = vim.api.nvim_get_current_buf()
      vim.api.nvim_buf_set_lines(scripted, -1, -1, false, { "@Assistant:" })
      vim.wait(50)
      assert.same({ "@Assistant:", "Hi." }, lines(old))
      assert.same({ "", "@Assistant:" }, lines(scripted))
    end)
  end)

  describe("keymaps", function()
    it("are buffer-local and can be turned off one by one", function()
      require("flemma").setup({ keymaps = { goto_file = false, next_message = "]M" } })
      local buf = chat(CONVERSATION)
      local n = {}
      for _, m in ipairs(vim.api.nvim_buf_get_keymap(buf, "n")) do
        n[m.lhs] = true
      end
      assert.is_nil(n["gf"])
      assert.is_nil(n["]m"])
      assert.is_true(n["gd"])
      assert.is_true(n["[m"])
      assert.is_true(n["]M"])
      local o = {}
      for _, m in ipairs(vim.api.nvim_buf_get_keymap(buf, "o")) do
        o[m.lhs] = true
      end
      assert.is_true(o["im"] and o["am"] and o["[m"])
      assert.same({}, vim.api.nvim_buf_get_keymap(vim.api.nvim_create_buf(true, false), "o"))
    end)
  end)
end)
