-- How a chat buffer looks: highlight groups at their positions (as the decoration
-- provider draws them), fold levels and fold text, closed completed blocks, rulers
-- and signs; also after a response streamed from the loopback server.
local helpers = require("spec.support.helpers")
local server_mod = require("spec.support.llm_server")

local CHAT = {
  "```lua", -- 1
  "x = 1",
  "```",
  "",
  "@System:", -- 5
  "Be terse. {{ x }}",
  "",
  "@You:", -- 8
  "Read @./notes.txt, then {% if x then %}go{% end %}.",
  "",
  "@Assistant:", -- 11
  "<thinking>",
  "I should look.",
  "</thinking>",
  "Let me look.", -- 15
  "",
  "**Tool Use:** `bash` (`toolu_01`)", -- 17
  "",
  "```json",
  '{ "command": "ls" }',
  "```", -- 21
  "",
  "**Tool Use:** `bash` (`toolu_02`)", -- 23
  "",
  "```json",
  '{ "command": "false" }',
  "```", -- 27
  "",
  "@You:", -- 29
  "**Tool Result:** `toolu_01`",
  "",
  "```flemma:tool status=pending", -- 32
  "```",
  "",
  "**Tool Result:** `toolu_02` (error)", -- 35
  "",
  "```",
  "boom",
  "```", -- 39
}

local function open_chat(lines, name)
  local dir = helpers.tmpdir()
  local path = dir .. "/" .. (name or "view.chat")
  helpers.write_file(path, table.concat(lines, "\n") .. "\n")
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  -- Window setup (closing completed folds, marks in view) runs on the next tick.
  vim.wait(20)
  return buf
end

-- The groups drawn on line lnum, as "Group[start,end)" strings.
local function drawn(buf, lnum)
  local out = {}
  for _, s in ipairs(require("flemma.ui.highlight").spans(buf, lnum)) do
    out[#out + 1] = ("%s[%d,%d)"):format(s[3], s[1], s[2])
  end
  return table.concat(out, " ")
end

local function levels(from, to)
  local out = {}
  for l = from, to do
    out[#out + 1] = vim.fn.foldlevel(l)
  end
  return out
end

describe("flemma.ui (chat buffers)", function()
  before_each(function()
    require("flemma").setup({})
  end)
  after_each(function()
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  describe("highlights", function()
    it("marks roles, tool headers, placeholders, errors, thinking, frontmatter, references and tags", function()
      local buf = open_chat(CHAT)
      assert.equals("chat", vim.bo[buf].filetype)
      assert.equals("FlemmaFrontmatter[0,6)", drawn(buf, 1))
      assert.equals("", drawn(buf, 2))
      assert.equals("FlemmaRoleSystem[0,8)", drawn(buf, 5))
      assert.equals("FlemmaTemplateExpression[10,17)", drawn(buf, 6))
      assert.equals("FlemmaRoleUser[0,5)", drawn(buf, 8))
      assert.equals("FlemmaFileReference[5,17) FlemmaTemplateCode[24,39) FlemmaTemplateCode[41,50)", drawn(buf, 9))
      assert.equals("FlemmaRoleAssistant[0,11)", drawn(buf, 11))
      assert.equals("FlemmaThinkingTag[0,10)", drawn(buf, 12))
      assert.equals("FlemmaThinking[0,14)", drawn(buf, 13))
      assert.equals("FlemmaThinkingTag[0,11)", drawn(buf, 14))
      assert.equals("", drawn(buf, 15))
      assert.equals("FlemmaToolUse[0,13) FlemmaToolName[14,20) FlemmaToolId[22,32)", drawn(buf, 17))
      assert.equals("FlemmaToolResult[0,16) FlemmaToolId[17,27)", drawn(buf, 30))
      assert.equals("FlemmaPlaceholderPending[3,29)", drawn(buf, 32))
      assert.equals("FlemmaToolResultError[0,16) FlemmaToolId[17,27) FlemmaToolResultError[28,35)", drawn(buf, 35))
      assert.equals("FlemmaToolResultErrorBody[0,4)", drawn(buf, 38))
    end)

    it("gives each placeholder status its own group", function()
      local lines = vim.deepcopy(CHAT)
      for _, status in ipairs({ "approved", "pending", "denied", "rejected" }) do
        lines[32] = "```flemma:tool status=" .. status
        local buf = open_chat(lines, status .. ".chat")
        local group = "FlemmaPlaceholder" .. status:sub(1, 1):upper() .. status:sub(2)
        assert.equals(("%s[3,%d)"):format(group, #lines[32]), drawn(buf, 32))
      end
    end)

    it("does not take a marker or header inside a fenced block for one", function()
      local buf = open_chat({
        "@You:",
        "````markdown",
        "@Assistant:",
        "**Tool Use:** `bash` (`x`)",
        "<thinking>",
        "````",
        "@Assistant:",
      })
      assert.equals("FlemmaRoleUser[0,5)", drawn(buf, 1))
      assert.equals("", drawn(buf, 3))
      assert.equals("", drawn(buf, 4))
      assert.equals("", drawn(buf, 5))
      assert.equals("FlemmaRoleAssistant[0,11)", drawn(buf, 7))
      assert.same({ 1, 1, 1, 1, 1, 1, 1 }, levels(1, 7))
    end)

    it("marks as references exactly what is sent (escaped spaces; not e-mail or inline code)", function()
      local buf = open_chat({
        "@You:",
        "to me@example.com: `@./code.txt` and @./my\\ notes.txt, (@~/x.png)",
      })
      -- @./my\ notes.txt is bytes 38..53, @~/x.png 57..64 (1-based).
      assert.equals("FlemmaFileReference[37,53) FlemmaFileReference[56,64)", drawn(buf, 2))
    end)

    it("follows an edit at once", function()
      local buf = open_chat(CHAT)
      vim.api.nvim_buf_set_lines(buf, 14, 15, false, { "@You:" })
      assert.equals("FlemmaRoleUser[0,5)", drawn(buf, 15))
      vim.api.nvim_buf_set_lines(buf, 14, 15, false, { "Let me look." })
      assert.equals("", drawn(buf, 15))
    end)

    it("defines every group as a default link, again after :colorscheme", function()
      local groups = require("flemma.ui.highlights").CHAT_GROUPS
      for name, link in pairs(groups) do
        assert.same({ default = true, link = link }, vim.api.nvim_get_hl(0, { name = name }), name)
      end
      vim.cmd("colorscheme default")
      for name, link in pairs(groups) do
        assert.same({ default = true, link = link }, vim.api.nvim_get_hl(0, { name = name }), name)
      end
    end)

    it("highlights markdown underneath with tree-sitter, or with syntax/chat.vim", function()
      local buf = open_chat(CHAT)
      assert.is_true(vim.treesitter.highlighter.active[buf] ~= nil)
      require("flemma").setup({ ui = { treesitter = false } })
      local buf2 = open_chat(CHAT, "plain.chat")
      assert.is_nil(vim.treesitter.highlighter.active[buf2])
      assert.equals("chat", vim.bo[buf2].syntax)
      -- The frontmatter is Lua: `x` on line 2 is inside the Lua region.
      local stack = vim.tbl_map(function(id)
        return vim.fn.synIDattr(id, "name")
      end, vim.fn.synstack(2, 1))
      assert.truthy(vim.tbl_contains(stack, "flemmaFrontmatterLua"), vim.inspect(stack))
      local stack3 = vim.tbl_map(function(id)
        return vim.fn.synIDattr(id, "name")
      end, vim.fn.synstack(20, 3))
      assert.is_false(vim.tbl_contains(stack3, "flemmaFrontmatterLua"), vim.inspect(stack3))
      -- A chat larger than ui.treesitter_max_bytes gets the syntax too, and the
      -- same highlights of Flemma's own.
      require("flemma").setup({ ui = { treesitter_max_bytes = 100 } })
      local buf3 = open_chat(CHAT, "large.chat")
      assert.is_nil(vim.treesitter.highlighter.active[buf3])
      assert.equals("chat", vim.bo[buf3].syntax)
      assert.equals("FlemmaToolUse[0,13) FlemmaToolName[14,20) FlemmaToolId[22,32)", drawn(buf3, 17))
      assert.is_false(pcall(require("flemma").setup, { ui = { treesitter_max_bytes = -1 } }))
    end)

    it("by default, a chat over 32 KB gets the syntax: tree-sitter parsed it again after every deleted line", function()
      require("flemma").setup({})
      local small = open_chat(CHAT, "small.chat")
      assert.is_true(vim.treesitter.highlighter.active[small] ~= nil)
      -- 40 KB: prose and a fenced block per message.
      local lines = vim.deepcopy(CHAT)
      while #table.concat(lines, "\n") < 40 * 1024 do
        vim.list_extend(lines, {
          "",
          "@You:",
          "Another question about the module, long enough to take some room in the chat.",
          "",
          "@Assistant:",
          "```lua",
          "local answer = compute(42) -- a line of code in a fenced block",
          "```",
        })
      end
      local big = open_chat(lines, "big.chat")
      assert.is_nil(vim.treesitter.highlighter.active[big])
      assert.equals("chat", vim.bo[big].syntax)
      assert.equals("FlemmaToolUse[0,13) FlemmaToolName[14,20) FlemmaToolId[22,32)", drawn(big, 17))
    end)
  end)

  describe("folds", function()
    it("are level 1 per message, level 2 per block, with completed blocks closed", function()
      open_chat(CHAT)
      assert.equals("expr", vim.wo.foldmethod)
      assert.same({ 2, 2, 2, 1 }, levels(1, 4)) -- frontmatter
      assert.same({ 1, 1, 1, 1, 1, 1, 1 }, levels(5, 11))
      assert.same({ 2, 2, 2, 1, 1 }, levels(12, 16)) -- thinking, text
      assert.same({ 2, 2, 2, 2, 2, 1 }, levels(17, 22)) -- tool use
      assert.same({ 1, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2 }, levels(29, 39))
      -- A new fold starts at each marker and each block.
      assert.equals(5, vim.fn.foldclosed(5) == -1 and 5 or -1)
      -- Closed: thinking and the real (error) result; open: tool uses, the placeholder.
      assert.equals(12, vim.fn.foldclosed(13))
      assert.equals(14, vim.fn.foldclosedend(13))
      assert.equals(35, vim.fn.foldclosed(38))
      assert.equals(39, vim.fn.foldclosedend(38))
      assert.equals(-1, vim.fn.foldclosed(20))
      assert.equals(-1, vim.fn.foldclosed(32))
      vim.cmd("5foldclose")
      assert.equals(5, vim.fn.foldclosed(6))
      assert.equals(7, vim.fn.foldclosedend(6))
      vim.cmd("11foldclose")
      assert.equals(11, vim.fn.foldclosed(20))
      assert.equals(28, vim.fn.foldclosedend(20))
    end)

    it("leave everything open when ui.fold_completed is false", function()
      require("flemma").setup({ ui = { fold_completed = false } })
      open_chat(CHAT)
      assert.equals(-1, vim.fn.foldclosed(13))
      assert.equals(-1, vim.fn.foldclosed(38))
    end)

    it("are not set up for a chat over ui.fold_max_bytes (Neovim would compute every line's level)", function()
      require("flemma").setup({ ui = { fold_max_bytes = 200 } })
      local big = { "@You:" }
      for i = 1, 40 do
        big[#big + 1] = "a line of text number " .. i
      end
      open_chat(big, "big.chat")
      assert.is_not.equals("expr", vim.wo.foldmethod)
      vim.cmd("silent! %bwipeout!")
      require("flemma").setup({ ui = { fold_max_bytes = 1024 * 1024 } })
      open_chat(big, "big2.chat")
      assert.equals("expr", vim.wo.foldmethod)
      assert.equals(1, vim.fn.foldlevel(2))
    end)

    it("show the role, the tool and a preview with the line count", function()
      local buf = open_chat(CHAT)
      local fold = require("flemma.ui.fold")
      assert.equals("@System: Be terse. {{ x }} · 3 lines", fold.describe(buf, 5, 7))
      assert.equals("frontmatter (lua): x = 1 · 4 lines", fold.describe(buf, 1, 4))
      assert.equals("thinking: I should look. · 3 lines", fold.describe(buf, 12, 14))
      assert.equals('Tool Use: bash (toolu_01): { "command": "ls" } · 5 lines', fold.describe(buf, 17, 21))
      assert.equals("Tool Result: bash (toolu_01) [pending] · 4 lines", fold.describe(buf, 30, 33))
      assert.equals("Tool Result: bash (toolu_02) [error]: boom · 5 lines", fold.describe(buf, 35, 39))
      -- As 'foldtext' shows it for the closed thinking fold (level 2: indented).
      local text = vim.api.nvim_win_call(0, function()
        vim.v.foldstart, vim.v.foldend, vim.v.foldlevel = 12, 14, 2
        return vim.fn.eval(vim.wo.foldtext)
      end)
      assert.equals("  thinking: I should look. · 3 lines", text)
    end)

    it("are computed again only around an edit, not down to the end of the chat", function()
      local lines = {}
      for i = 1, 150 do
        vim.list_extend(lines, { i % 2 == 1 and "@You:" or "@Assistant:", "line one of " .. i, "line two", "" })
        if i % 2 == 0 then
          vim.list_extend(lines, { "<thinking>", "hm " .. i, "</thinking>", "" })
        end
      end
      local buf = open_chat(lines, "long.chat")
      local fold = require("flemma.ui.fold")
      local orig, calls = fold.expr, 0
      fold.expr = function(l)
        calls = calls + 1
        return orig(l)
      end
      local ok, err = pcall(function()
        for _, keys in ipairs({ "dd", "p", "u", "x" }) do
          calls = 0
          vim.api.nvim_win_set_cursor(0, { 42, 0 })
          vim.cmd("normal! " .. keys) -- Neovim folds the change before on_lines
          vim.wait(50)
          assert.is_true(calls < 60, ("%s: the fold expression ran for %d lines of %d"):format(keys, calls, #lines))
        end
      end)
      fold.expr = orig
      assert(ok, err)
      assert.equals(buf, vim.api.nvim_get_current_buf())
    end)

    it("are computed again only around a chunk appended to a long answer, not over the whole answer", function()
      local lines = { "@You:", "Explain.", "", "@Assistant:", "<thinking>", "hm", "</thinking>", "" }
      for i = 1, 1500 do
        lines[#lines + 1] = "prose line " .. i
      end
      local buf = open_chat(lines, "stream.chat")
      local fold = require("flemma.ui.fold")
      local orig, calls, worst = fold.expr, 0, 0
      fold.expr = function(l)
        calls = calls + 1
        return orig(l)
      end
      local chunks = {
        "more ",
        "words",
        "\n",
        "```lua",
        "\nlocal x = 1",
        "\n```",
        "\n",
        "**Tool Use:** `bash` (`t1`)",
        "\n\n```json",
        '\n{"command": "ls"}',
        "\n```\n",
      }
      local ok, err = pcall(function()
        for round = 1, 3 do
          for _, chunk in ipairs(chunks) do
            calls = 0
            local last = vim.api.nvim_buf_line_count(buf)
            local col = #vim.api.nvim_buf_get_lines(buf, last - 1, last, false)[1]
            vim.api.nvim_buf_set_text(
              buf,
              last - 1,
              col,
              last - 1,
              col,
              vim.split(chunk:gsub("t1", "t" .. round), "\n", { plain = true })
            )
            vim.wait(0)
            require("flemma.ui.fold").flush(buf)
            worst = math.max(worst, calls)
          end
        end
      end)
      fold.expr = orig
      assert(ok, err)
      assert.is_true(
        worst < 60,
        ("a chunk made the fold expression run for %d lines of %d"):format(worst, vim.api.nvim_buf_line_count(buf))
      )
      -- The same levels as folds computed afresh over the whole buffer.
      local n = vim.api.nvim_buf_line_count(buf)
      local got = levels(1, n)
      vim.cmd("normal! zx")
      assert.same(levels(1, n), got)
      assert.equals(2, vim.fn.foldlevel(n - 1)) -- inside the last tool use block
    end)

    it("stay in place below a deleted or inserted line (folded before on_lines)", function()
      local buf = open_chat(CHAT)
      vim.cmd("normal! zR")
      local want = levels(11, 39)
      vim.api.nvim_win_set_cursor(0, { 9, 0 })
      vim.cmd("normal! dd") -- Neovim folds the change before the document hears of it
      vim.wait(50)
      assert.same(want, levels(10, 38))
      vim.cmd("28foldclose") -- the @You: message with the results, alone
      assert.equals(28, vim.fn.foldclosed(30))
      assert.equals(38, vim.fn.foldclosedend(30))
      vim.cmd("normal! zR")
      vim.api.nvim_win_set_cursor(0, { 8, 0 })
      vim.cmd("normal! p")
      vim.wait(50)
      assert.same(want, levels(11, 39))
      assert.equals(buf, vim.api.nvim_get_current_buf())
    end)

    it("follow an edit that changes the structure far above it", function()
      local buf = open_chat(CHAT)
      assert.same({ 1, 2 }, levels(29, 30))
      -- A fence opened in the assistant's text and closed at the very end: the
      -- @You: message and its results become that fence's content.
      vim.api.nvim_buf_set_lines(buf, 15, 16, false, { "````" })
      vim.wait(50)
      assert.same({ 1, 2 }, levels(29, 30)) -- unclosed: it ends with its message
      vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "````" })
      vim.wait(50)
      assert.same({ 1, 1, 1 }, levels(29, 31))
      assert.equals(-1, vim.fn.foldclosed(38)) -- no error result any more
      vim.api.nvim_buf_set_lines(buf, -2, -1, false, {})
      vim.wait(50)
      assert.same({ 1, 2, 2 }, levels(29, 31))
    end)
  end)

  describe("rulers and signs", function()
    local function marks(buf)
      -- What a window drawing every line gets (the decoration provider calls
      -- ensure for the lines it draws; headless 0.10 does not draw).
      require("flemma.ui.marks").ensure(buf, 1, vim.api.nvim_buf_line_count(buf))
      local out = {}
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, require("flemma.ui.marks").ns, 0, -1, { details = true })) do
        local d = m[4]
        out[#out + 1] = {
          line = m[2] + 1,
          ruler = d.virt_lines and d.virt_lines[1][1][1]:sub(1, 6) or nil,
          sign = d.sign_text and vim.trim(d.sign_text) or nil,
        }
      end
      return out
    end

    it("put a ruler above each role marker and a sign on a message with pending tools", function()
      local buf = open_chat(CHAT)
      assert.same({
        { line = 5, ruler = "──" },
        { line = 8, ruler = "──" },
        { line = 11, ruler = "──", sign = "?" },
        { line = 29, ruler = "──" },
      }, marks(buf))
      -- Both tools get real results: no pending sign any more.
      vim.api.nvim_buf_set_lines(buf, 31, 33, false, { "```", "file.txt", "```" })
      vim.wait(50)
      assert.same({
        { line = 5, ruler = "──" },
        { line = 8, ruler = "──" },
        { line = 11, ruler = "──" },
        { line = 29, ruler = "──" },
      }, marks(buf))
    end)

    it("follow ui.ruler and ui.signs", function()
      require("flemma").setup({ ui = { ruler = { enabled = false }, signs = { pending = "P" } } })
      local buf = open_chat(CHAT)
      assert.same({ { line = 11, sign = "P" } }, marks(buf))
      require("flemma").setup({ ui = { ruler = { char = "=" }, signs = { enabled = false } } })
      local buf2 = open_chat(CHAT, "two.chat")
      assert.same("======", marks(buf2)[1].ruler)
      assert.is_nil(marks(buf2)[3].sign)
    end)

    it("refuses a ruler char wider than two cells", function()
      local ok, err = pcall(require("flemma").setup, { ui = { ruler = { char = "---" } } })
      assert.is_false(ok)
      assert.matches("ui.ruler.char", err)
    end)
  end)

  describe("after a streamed response", function()
    local server
    before_each(function()
      server = server_mod.start()
      vim.env.FLEMMA_SPEC_KEY = "sk-flemma-view-" .. tostring(math.random(1e9))
      require("flemma").setup({
        provider = "test",
        providers = {
          test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        },
        parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
        tools = { autopilot = { enabled = false } },
      })
      require("flemma.tools").register("echo", {
        name = "echo",
        description = "returns its text",
        input_schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
        execute = function(input)
          return { success = true, output = "echo: " .. input.text }
        end,
      })
    end)
    after_each(function()
      server:stop()
      require("flemma.tools").unregister("echo")
    end)

    local function send_and_wait(buf)
      local finished
      local id = vim.api.nvim_create_autocmd("User", {
        pattern = "FlemmaRequestFinished",
        callback = function(ev)
          finished = ev.data.status
        end,
      })
      require("flemma.cycle.send").send(buf)
      helpers.wait_for(function()
        return finished ~= nil
      end, 15000, "the request never finished")
      vim.api.nvim_del_autocmd(id)
      vim.wait(50) -- the scheduled fold and mark updates
      return finished
    end

    it("folds the streamed thinking (closed) and the message", function()
      server:script({ { fixture = "anthropic_thinking.sse", chunk_seed = 3, max_chunk = 11 } })
      local buf = open_chat({ "@You:", "What is 2+2?" })
      assert.equals("completed", send_and_wait(buf))
      local lines = helpers.lines(buf)
      local a = vim.fn.index(lines, "@Assistant:") + 1
      assert.is_true(a > 0, table.concat(lines, "\n"))
      local t0 = vim.fn.index(lines, "<thinking", 0, false)
      for i, l in ipairs(lines) do
        if l:match("^<thinking") then
          t0 = i
          break
        end
      end
      local t1 = vim.fn.index(lines, "</thinking>") + 1
      assert.is_true(t0 > a and t1 > t0, table.concat(lines, "\n"))
      assert.equals(1, vim.fn.foldlevel(a))
      assert.equals(2, vim.fn.foldlevel(t0))
      assert.equals(2, vim.fn.foldlevel(t1))
      assert.equals(1, vim.fn.foldlevel(t1 + 1))
      assert.equals(t0, vim.fn.foldclosed(t0 + 1))
      assert.equals(t1, vim.fn.foldclosedend(t0 + 1))
      -- The new @You: at the end starts its own level-1 fold.
      local you = #lines
      while lines[you] ~= "@You:" do
        you = you - 1
      end
      assert.is_true(you > t1)
      vim.cmd(a .. "foldopen!")
      vim.cmd(a .. "foldclose")
      assert.equals(you - 1, vim.fn.foldclosedend(a))
    end)

    it("shows the streaming sign on the message while it streams, and not after", function()
      server:script({ { fixture = "anthropic_text.sse", chunk_seed = 4, max_chunk = 6, delay_ms = 25 } })
      local buf = open_chat({ "@You:", "Say hello." })
      local ns = require("flemma.ui.marks").ns
      local function signs()
        local out = {}
        for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
          if m[4].sign_text then
            out[#out + 1] = { m[2] + 1, vim.trim(m[4].sign_text), m[4].sign_hl_group }
          end
        end
        return out
      end
      local finished
      local id = vim.api.nvim_create_autocmd("User", {
        pattern = "FlemmaRequestFinished",
        callback = function(ev)
          finished = ev.data.status
        end,
      })
      require("flemma.cycle.send").send(buf)
      local seen
      helpers.wait_for(function()
        local s = signs()
        if #s == 1 and s[1][2] == "▶" then
          seen = s[1]
        end
        return seen ~= nil or finished ~= nil
      end, 15000, "the request never started")
      assert.is_nil(finished, "the response ended before the sign showed")
      assert.equals("@Assistant:", vim.api.nvim_buf_get_lines(buf, seen[1] - 1, seen[1], false)[1])
      assert.equals("FlemmaSignStreaming", seen[3])
      helpers.wait_for(function()
        return finished ~= nil
      end, 15000, "the request never finished")
      vim.api.nvim_del_autocmd(id)
      assert.equals("completed", finished)
      helpers.wait_for(function()
        return #signs() == 0
      end, 2000, "the streaming sign stayed: " .. vim.inspect(signs()))
    end)

    it("marks the tool uses streamed without results as pending", function()
      server:script({ { fixture = "anthropic_tools_parallel.sse", chunk_seed = 5, max_chunk = 13 } })
      local buf = open_chat({ "@You:", "Echo twice." })
      assert.equals("completed", send_and_wait(buf))
      local lines = helpers.lines(buf)
      local a = vim.fn.index(lines, "@Assistant:") + 1
      local signs = {}
      for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, require("flemma.ui.marks").ns, 0, -1, { details = true })) do
        if m[4].sign_text then
          signs[#signs + 1] = { m[2] + 1, vim.trim(m[4].sign_text) }
        end
      end
      assert.same({ { a, "?" } }, signs)
      local uses = {}
      for i, l in ipairs(lines) do
        if l:match("^%*%*Tool Use:%*%*") then
          uses[#uses + 1] = i
        end
      end
      assert.equals(2, #uses, table.concat(lines, "\n"))
      for _, u in ipairs(uses) do
        assert.equals(2, vim.fn.foldlevel(u))
        assert.equals(-1, vim.fn.foldclosed(u)) -- tool uses stay open
      end
    end)
  end)
end)
