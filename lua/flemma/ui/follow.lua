--- Keeping the answer in sight. A window that showed the end of the chat when a
--- request started follows the streamed text (its cursor kept on the last line, as
--- a :terminal window at its last line does) until the user moves the cursor; a
--- window scrolled away stays where it is, and a message says where the answer
--- is. Also: statuslines are redrawn when a request or a tool starts or ends, so
--- b:flemma_status and flemma.statusline() show it at once, not on the next
--- cursor move.
local session = require("flemma.core.session")
local M = {}
local H = {}

-- Per buffer while a request streams: { wins = { [win] = { line = n|nil } | false }, queued }.
-- H.state: the `follow` field of each buffer's session record (flemma.core.session).

--- One `redrawstatus!` on the next turn of the loop, however many asked. Only with
--- a UI attached: without one there is no statusline to show, and a screen update
--- under `nvim -l` (a default grid smaller than 'lines') crashes Neovim 0.12.4.
function M.redraw_status()
  if H.status_queued or #vim.api.nvim_list_uis() == 0 then
    return
  end
  H.status_queued = true
  vim.schedule(function()
    H.status_queued = false
    pcall(vim.cmd, "redrawstatus!")
  end)
end

--- Whether window win shows the last line of buf.
function H.at_end(win, buf)
  return vim.fn.line("w$", win) >= vim.api.nvim_buf_line_count(buf)
end

--- A request of buf starts: each window showing it follows or not.
---@param buf integer
function M.start(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local wins, away = {}, false
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if H.at_end(win, buf) then
      wins[win] = {}
    else
      wins[win] = false
      away = away or win == vim.api.nvim_get_current_win()
    end
  end
  local fresh = session.field(buf, "follow") == nil
  session.get(buf).follow = { wins = wins }
  if away then
    require("flemma.core.util").notify(
      ("the answer streams in below line %d: G goes there"):format(vim.api.nvim_buf_line_count(buf))
    )
  end
  if fresh then
    vim.api.nvim_buf_attach(buf, false, {
      on_lines = function(_, b)
        local st = session.field(b, "follow")
        if not st then
          return true -- detach: the request ended
        end
        if not st.queued then
          st.queued = true
          vim.schedule(function()
            st.queued = false
            if session.field(b, "follow") == st then
              H.step(b, st)
            end
          end)
        end
      end,
    })
  end
end

--- Moves each following window of buf to the last line, unless its cursor is not
--- where the last step put it (the user moved: it follows no more).
function H.step(buf, st)
  if not vim.api.nvim_buf_is_valid(buf) then
    session.set(buf, "follow", nil)
    return
  end
  local last = vim.api.nvim_buf_line_count(buf)
  for win, w in pairs(st.wins) do
    if w and vim.api.nvim_win_is_valid(win) and vim.api.nvim_win_get_buf(win) == buf then
      local cur = vim.api.nvim_win_get_cursor(win)[1]
      if w.line and cur ~= w.line and cur ~= math.min(w.line, last) then
        st.wins[win] = false
      elseif cur ~= last or not H.at_end(win, buf) then
        vim.api.nvim_win_set_cursor(win, { last, 0 })
        w.line = last
      else
        w.line = last
      end
    end
  end
end

--- The request of buf ended: the windows follow its last lines once more, then no more.
---@param buf integer
function M.finish(buf)
  local st = session.field(buf, "follow")
  if not st then
    return
  end
  session.set(buf, "follow", nil)
  if vim.api.nvim_buf_is_valid(buf) then
    H.step(buf, st)
  end
end

return M
