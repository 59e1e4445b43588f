-- Folds after `u`, <C-r> and J in the middle of a long chat: Neovim computes the
-- folds of an undo, a redo or a join before on_lines (and on_bytes) tell the live
-- document of it. The fold expression must still let Neovim stop right after the
-- change (not evaluate every line down to the end of the chat), and once the
-- document caught up the folds must be those a fresh window computes.
local helpers = require("spec.support.helpers")

local function long_chat()
  return helpers.turns_chat(150, { "second line" })
end

local function open_chat(lines)
  local buf = helpers.open_chat(lines, "undo.chat")
  vim.cmd("normal! zR")
  return buf
end

local all_levels, fresh_levels = helpers.fold_levels, helpers.fresh_fold_levels

describe("flemma.ui folds after undo, redo and J", function()
  before_each(helpers.setup_flemma)
  after_each(helpers.wipe)

  it("are evaluated only around the change and equal a fresh window's", function()
    local lines = long_chat()
    local buf = open_chat(lines)
    local fold = require("flemma.ui.fold")
    local orig, calls = fold.expr, 0
    fold.expr = function(l)
      calls = calls + 1
      return orig(l)
    end
    local ok, err = pcall(function()
      local sequences = {
        { "dd", "u", "<C-r>", "u" },
        { "7dd", "u", "<C-r>", "u" },
        { "J", "u", "<C-r>", "u" },
        { "3J", "u", "<C-r>", "u" },
        { "yyp", "u", "<C-r>", "u" },
      }
      for _, row in ipairs({ 300, 304, 311, 317 }) do
        for _, seq in ipairs(sequences) do
          for _, keys in ipairs(seq) do
            vim.api.nvim_win_set_cursor(0, { row, 0 })
            calls = 0
            vim.cmd("silent normal! " .. vim.keycode(keys))
            vim.wait(50) -- the changed segments are folded again on the next tick
            assert.is_true(
              calls < 150,
              ("%s (of %s) at line %d: the fold expression ran for %d lines of %d"):format(
                keys,
                table.concat(seq, " "),
                row,
                calls,
                #lines
              )
            )
          end
          fold.expr = orig
          assert.same(fresh_levels(buf), all_levels(), table.concat(seq, " ") .. " at line " .. row)
          fold.expr = function(l)
            calls = calls + 1
            return orig(l)
          end
        end
      end
      assert.same(lines, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    end)
    fold.expr = orig
    assert(ok, err)
  end)
end)
