-- The work after a change runs one piece per turn of the loop, with the loop's
-- timers running between the pieces (flemma.ui.after), and after an edit of a
-- chat the folds, the marks and the previews are such pieces.
local helpers = require("spec.support.helpers")

-- A 1 ms timer counting its ticks: what else the loop got to run.
local function ticker()
  local t = { n = 0 }
  t.timer = vim.uv.new_timer()
  t.timer:start(1, 1, function()
    t.n = t.n + 1
  end)
  function t.stop()
    t.timer:stop()
    t.timer:close()
  end
  return t
end

-- Spins the CPU for ms milliseconds (a piece of work that holds the loop).
local function spin(ms)
  local t0 = vim.uv.hrtime()
  while vim.uv.hrtime() - t0 < ms * 1e6 do
  end
end

describe("flemma.ui.after", function()
  local after = require("flemma.ui.after")

  it("runs pieces in order, one per turn, with the loop's timers between them", function()
    local t = ticker()
    local seen = {}
    for k = 1, 4 do
      after.run("spec piece " .. k, function()
        seen[#seen + 1] = { k = k, tick = t.n }
        spin(2) -- longer than the ticker's period: its tick is due when this ends
      end)
    end
    vim.wait(1000, function()
      return not after.state()
    end, 1)
    t.stop()
    assert.equals(4, #seen)
    for k = 1, 4 do
      assert.equals(k, seen[k].k)
    end
    for k = 2, 4 do
      assert.is_true(seen[k].tick > seen[k - 1].tick, ("no tick between pieces %d and %d"):format(k - 1, k))
    end
  end)

  it("queues a piece once per key until it ran, and goes on after a piece that fails", function()
    local runs = 0
    after.run("spec failing", function()
      error("boom")
    end)
    after.run("spec once", function()
      runs = runs + 1
    end)
    after.run("spec once", function()
      runs = runs + 10
    end)
    vim.wait(1000, function()
      return not after.state()
    end, 1)
    assert.equals(1, runs)
    after.run("spec once", function()
      runs = runs + 1
    end)
    vim.wait(1000, function()
      return not after.state()
    end, 1)
    assert.equals(2, runs)
  end)

  it("after an edit of a chat, updates folds, marks and previews in turns of their own", function()
    require("flemma").setup({})
    local lines = { "@You:", "List the files.", "", "@Assistant:", "Let me look.", "" }
    for i = 1, 40 do
      lines[#lines + 1] = ("Line %d of the answer."):format(i)
    end
    vim.list_extend(lines, { "", "@You:", "ok" })
    local buf = helpers.open_chat(lines, "after.chat")
    helpers.settle()
    local fold = require("flemma.ui.fold")
    local marks = require("flemma.ui.marks")
    local preview = require("flemma.ui.preview")
    local orig = { fold = fold.update, marks = marks.update, preview = preview.update }
    local t = ticker()
    local at, in_edit, during = {}, false, {}
    local function record(name, fn)
      return function(...)
        at[name] = at[name] or t.n
        if in_edit then
          during[#during + 1] = name
        end
        spin(2)
        return fn(...)
      end
    end
    fold.update = record("fold", orig.fold)
    marks.update = record("marks", orig.marks)
    preview.update = record("preview", orig.preview)
    local ok, err = pcall(function()
      vim.api.nvim_win_set_cursor(0, { 20, 0 })
      in_edit = true
      vim.cmd("silent normal! x")
      vim.api.nvim_exec_autocmds("TextChanged", { buffer = buf, modeline = false })
      in_edit = false
      helpers.settle()
    end)
    fold.update, marks.update, preview.update = orig.fold, orig.marks, orig.preview
    t.stop()
    assert(ok, err)
    assert.is_number(at.fold)
    assert.is_number(at.marks)
    assert.is_number(at.preview)
    -- None in the edit's own turn; each piece holds the loop for 2 ms here, and
    -- a tick comes between each of them. (The timer may tick during the edit:
    -- Neovim's fold update polls the loop for CTRL-C.)
    assert.same({}, during)
    assert.is_true(at.fold < at.marks and at.marks < at.preview, vim.inspect(at))
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)
end)
