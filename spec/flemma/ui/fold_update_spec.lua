-- The folds computed again after a change the live document followed before
-- Neovim's own fold update: the changed lines and those the document parsed
-- again, not whole messages.
local helpers = require("spec.support.helpers")

local function open_chat(lines)
  local buf = helpers.open_chat(lines, "update.chat")
  vim.cmd("normal! zR")
  return buf
end

local all_levels, fresh_levels, next_tick = helpers.fold_levels, helpers.fresh_fold_levels, helpers.settle

local function long_answer(n)
  local lines = { "@You:", "write a long answer", "", "@Assistant:" }
  for i = 1, n do
    lines[#lines + 1] = ("Line %d of the answer, with some words in it."):format(i)
  end
  return lines
end

describe("flemma.ui fold updates", function()
  local fold, orig, calls
  before_each(function()
    require("flemma").setup({})
    fold = require("flemma.ui.fold")
    orig, calls = fold.expr, 0
    fold.expr = function(l)
      calls = calls + 1
      return orig(l)
    end
  end)
  after_each(function()
    fold.expr = orig
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("give a tool header above the change its level (a line typed between it and its fence)", function()
    local buf = open_chat({
      "@You:",
      "List the files.",
      "",
      "@Assistant:",
      "Let me look.",
      "",
      "**Tool Use:** `bash` (`toolu_01`)",
      "",
      "```json",
      '{ "command": "ls" }',
      "```",
      "",
      "@You:",
      "ok",
    })
    assert.equals(2, vim.fn.foldlevel(7))
    -- The header no longer has its fence right below it: plain text now.
    vim.api.nvim_win_set_cursor(0, { 9, 0 })
    vim.cmd("silent normal! Omore words here\27")
    next_tick()
    assert.equals(1, vim.fn.foldlevel(7))
    assert.same(fresh_levels(buf), all_levels())
    -- And back.
    vim.cmd("silent normal! dd")
    next_tick()
    assert.equals(2, vim.fn.foldlevel(7))
    assert.same(fresh_levels(buf), all_levels())
  end)

  it("do not fold a long answer again when the next @You: is written after it", function()
    local buf = open_chat(long_answer(3000))
    local n = vim.api.nvim_buf_line_count(buf)
    vim.api.nvim_buf_set_lines(buf, n, n, false, { "", "@You:", "" })
    vim.fn.foldlevel(n + 1) -- Neovim's own update of the changed lines, if it waited
    calls = 0
    next_tick()
    assert.is_true(calls < 100, ("the fold expression ran for %d lines after the marker"):format(calls))
    assert.same(fresh_levels(buf), all_levels())
  end)

  it("fold an undo again in the changed message, not in the messages around it", function()
    local lines = {}
    for m = 1, 5 do
      lines[#lines + 1] = m % 2 == 1 and "@You:" or "@Assistant:"
      for i = 1, 400 do
        lines[#lines + 1] = ("Message %d, line %d."):format(m, i)
      end
    end
    local buf = open_chat(lines)
    vim.api.nvim_win_set_cursor(0, { 2 * 401 + 200, 0 })
    vim.cmd("silent normal! dd")
    next_tick()
    calls = 0
    vim.cmd("silent normal! u")
    next_tick()
    -- The changed message (401 lines) and the one after it (Neovim's own update of
    -- the undo went on into it, with the lagging document), once each; the one
    -- before it is not folded again (all three were: 1,208).
    assert.is_true(calls < 900, ("the fold expression ran for %d lines after u"):format(calls))
    assert.same(fresh_levels(buf), all_levels())
    assert.same(lines, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
  end)

  it("fold an undo in a message of 3,000 lines again over several turns of the loop", function()
    local lines = long_answer(3000)
    vim.list_extend(lines, { "", "@You:", "thanks" })
    local buf = open_chat(lines)
    vim.bo[buf].undolevels = vim.bo[buf].undolevels
    vim.api.nvim_win_set_cursor(0, { 1500, 0 })
    vim.cmd("silent normal! dd")
    next_tick()
    vim.bo[buf].undolevels = vim.bo[buf].undolevels
    calls = 0
    vim.cmd("silent normal! u")
    assert.is_true(calls < 50, ("the fold expression ran for %d lines in u"):format(calls))
    -- The changed message is folded again in full (the document lagged behind
    -- Neovim's fold update), at most 400 lines per turn of the loop (the turns
    -- of the marks and previews come between).
    local after = require("flemma.ui.after")
    local turns, most, total, steps = 0, 0, 0, 0
    repeat
      calls = 0
      helpers.next_turn()
      steps = steps + 1
      if calls > 0 then
        turns, most, total = turns + 1, math.max(most, calls), total + calls
      end
    until not after.state() or steps > 100
    assert.is_true(total >= 3000, ("%d lines folded again"):format(total))
    assert.is_true(most <= 450, ("%d lines folded again in one turn"):format(most))
    assert.is_true(turns >= 8, ("done in %d turns"):format(turns))
    assert.same(fresh_levels(buf), all_levels())
    assert.same(lines, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
  end)

  it("fold an undo of edits far apart again at each edit, not in the messages between them", function()
    local lines = {}
    for m = 1, 60 do
      lines[#lines + 1] = m % 2 == 1 and "@You:" or "@Assistant:"
      for i = 1, 20 do
        lines[#lines + 1] = ("Message %d, line %d."):format(m, i)
      end
      lines[#lines + 1] = ""
    end
    local buf = open_chat(lines)
    -- One undo step for three edits (made from one callback, as a plugin
    -- would): in the 5th, 30th and 55th messages, 25 messages apart.
    vim.bo[buf].undolevels = vim.bo[buf].undolevels
    for _, m in ipairs({ 5, 30, 55 }) do
      vim.api.nvim_win_set_cursor(0, { (m - 1) * 22 + 10, 0 })
      vim.cmd("silent normal! dd")
    end
    next_tick()
    assert.equals(#lines - 3, vim.api.nvim_buf_line_count(buf))
    vim.bo[buf].undolevels = vim.bo[buf].undolevels
    calls = 0
    vim.cmd("silent normal! u")
    next_tick()
    -- Each of the three messages (22 lines) once, with Neovim's own update of
    -- the changed lines; the 48 messages between them (1,056 lines) were all
    -- folded again before.
    assert.is_true(calls < 300, ("the fold expression ran for %d lines after u"):format(calls))
    assert.same(fresh_levels(buf), all_levels())
    assert.same(lines, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
  end)
end)
