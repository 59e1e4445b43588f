-- Changes that come in a burst (a plugin writing chunk after chunk into a chat,
-- each change followed by TextChanged): the previews and the rulers and signs are
-- brought up to date once for the burst, a moment after it, not once per change;
-- and what they show then is what the text says.
local helpers = require("spec.support.helpers")
local preview = require("flemma.ui.preview")
local marks = require("flemma.ui.marks")

local CHAT = {
  "@You:",
  "List the files.",
  "",
  "@Assistant:",
  "**Tool Use:** `bash` (`toolu_01`)",
  "",
  "```json",
  '{ "command": "ls" }',
  "```",
  "",
  "@You:",
  "**Tool Result:** `toolu_01`",
  "",
  "```flemma:tool status=pending",
  "```",
  "",
  "@Assistant:",
  "",
}

local function open_chat()
  local path = helpers.tmpdir() .. "/burst.chat"
  helpers.write_file(path, table.concat(CHAT, "\n") .. "\n")
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  helpers.wait_for(function()
    return #preview.shown(buf) == 1
  end, 2000, "no preview after opening the chat")
  return buf
end

-- Appends text at the end of buf as a streamed chunk, then fires TextChanged.
local function append(buf, text)
  local last = vim.api.nvim_buf_line_count(buf)
  local col = #vim.api.nvim_buf_get_lines(buf, last - 1, last, false)[1]
  vim.api.nvim_buf_set_text(buf, last - 1, col, last - 1, col, vim.split(text, "\n", { plain = true }))
  vim.api.nvim_exec_autocmds("TextChanged", { buffer = buf, modeline = false })
end

-- Counts the calls of mod[name] while fn runs.
local function count_calls(mod, name, fn)
  local orig, n = mod[name], 0
  mod[name] = function(...)
    n = n + 1
    return orig(...)
  end
  local ok, err = pcall(fn)
  mod[name] = orig
  assert(ok, err)
  return n
end

local function marked(buf)
  marks.ensure(buf, 1, vim.api.nvim_buf_line_count(buf))
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, marks.ns, 0, -1, { details = true })) do
    out[#out + 1] = { line = m[2] + 1, sign = m[4].sign_text and vim.trim(m[4].sign_text) or nil }
  end
  return out
end

describe("a burst of changes", function()
  before_each(helpers.setup_flemma)
  after_each(helpers.wipe)

  it("updates the previews once after the burst, and they show the new placeholder", function()
    local buf = open_chat()
    local chunks = {}
    for i = 1, 200 do
      chunks[#chunks + 1] = (i % 9 == 0) and "\n" or ("word" .. i .. " ")
    end
    vim.list_extend(chunks, {
      "\n\n**Tool Use:** `bash` (`toolu_02`)",
      '\n\n```json\n{ "command": "echo burst" }',
      "\n```\n\n@You:\n**Tool Result:** `toolu_02`",
      "\n\n```flemma:tool status=pending\n```",
    })
    local updates = count_calls(preview, "update", function()
      for _, chunk in ipairs(chunks) do
        append(buf, chunk)
      end
    end)
    -- One immediate update for the first change; the others wait for the burst
    -- (a loaded machine may pause between two changes: far fewer than one each).
    assert.is_true(updates < #chunks / 3, ("%d preview updates for %d changes"):format(updates, #chunks))
    helpers.wait_for(function()
      return #preview.shown(buf) == 2
    end, 100, "the new placeholder has no preview 100 ms after the burst: " .. vim.inspect(preview.shown(buf)))
    local shown = preview.shown(buf)
    assert.equals("bash: $ ls", shown[1].text)
    assert.equals("bash: $ echo burst", shown[2].text)
    assert.equals(
      "```flemma:tool status=pending",
      vim.api.nvim_buf_get_lines(buf, shown[2].line - 1, shown[2].line, false)[1]
    )
  end)

  it("updates the rulers and signs once for changes on consecutive ticks, and they follow the text", function()
    local buf = open_chat()
    assert.same({ { line = 4, sign = "?" }, { line = 11 }, { line = 17 } }, marked(buf))
    local chunks = {}
    for i = 1, 150 do
      chunks[#chunks + 1] = (i % 7 == 0) and "\n" or ("word" .. i .. " ")
    end
    vim.list_extend(chunks, { "\n\n**Tool Use:** `bash` (`toolu_02`)", '\n\n```json\n{ "command": "pwd" }\n```\n' })
    local updates = count_calls(marks, "update", function()
      for _, chunk in ipairs(chunks) do
        append(buf, chunk)
        vim.wait(0) -- a tick between changes, as a stream's chunks come
      end
    end)
    -- At most one per 16 ms (however long the loop takes: far fewer than one each).
    assert.is_true(updates < #chunks / 3, ("%d mark updates for %d changes"):format(updates, #chunks))
    vim.wait(50)
    -- The streamed @Assistant: message now has a tool use without a result: its sign.
    local got = marked(buf)
    assert.same({ { line = 4, sign = "?" }, { line = 11 }, { line = 17, sign = "?" } }, got)
  end)
end)
