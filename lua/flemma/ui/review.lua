--- The diff review of a pending `write` or `edit` call (issue 27; `:help flemma-review`):
--- a tab with the file as it is (left, read-only) and the file as the call would leave
--- it (right, a scratch buffer the user may edit), in diff mode. The user drops hunks
--- with the diff commands (`dp` on the left, `do`/`:diffget` on the right) or edits
--- the right side freely, then accepts (`<C-]>` in the review or in the chat,
--- `:Flemma tool:approve`) or rejects (`:Flemma tool:reject`). What was accepted is
--- what the tool writes when the call runs (flemma.tools.review keeps it in the
--- chat's session record); closing the tab decides nothing.
local review = require("flemma.tools.review")
local util = require("flemma.core.util")

local M = {}
local H = {}

-- The tool use and the placeholder of the call under the cursor in a chat (the cursor
-- on either block), or nil.
function H.call_at(bufnr, line)
  local doc = require("flemma.chat.document").get(bufnr)
  local id
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if
        (part.kind == "tool_use" or part.kind == "tool_result")
        and line >= part.first_line
        and line <= part.last_line
      then
        id = part.id
      end
    end
  end
  if not id then
    return nil
  end
  return H.find(doc, id)
end

function H.find(doc, id)
  local use, result
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.id == id then
        if part.kind == "tool_use" then
          use = use or part
        elseif part.kind == "tool_result" then
          result = result or part
        end
      end
    end
  end
  return use, result
end

-- Whether the call's placeholder is pending and its tool has a review.
function H.reviewable(use, result)
  return use ~= nil
    and result ~= nil
    and result.status == "pending"
    and vim.trim(result.content or "") == ""
    and review.supports(use.name)
end

--- <M-CR> in a chat: opens the review when the cursor is on a pending `write` or
--- `edit` call (its tool use or its placeholder) and returns true; false for every
--- other block (the key then executes or resolves it as before).
---@param bufnr integer
---@return boolean
function M.at_cursor(bufnr)
  local use, result = H.call_at(bufnr, vim.api.nvim_win_get_cursor(0)[1])
  if not H.reviewable(use, result) then
    return false
  end
  M.open(bufnr, use.id)
  return true
end

--- Opens the review of call `id` of chat `bufnr` (its placeholder pending).
---@param bufnr integer
---@param id string
function M.open(bufnr, id)
  local use, result = H.find(require("flemma.chat.document").get(bufnr), id)
  if not use then
    util.warn(("no **Tool Use:** block has the id `%s`"):format(id))
    return
  end
  if not H.reviewable(use, result) then
    util.warn(("`%s` is not a pending write or edit: nothing to review"):format(id))
    return
  end
  local chat_win = vim.fn.bufwinid(bufnr)
  review.prepare(bufnr, use, function(p, err)
    if not p then
      util.warn(("no diff review of `%s`: %s"):format(id, err))
      return
    end
    if not vim.api.nvim_buf_is_valid(bufnr) then
      return
    end
    -- The call may have been decided while the file was read.
    local _, now = H.find(require("flemma.chat.document").get(bufnr), id)
    if not (now and now.status == "pending") then
      return
    end
    H.show(bufnr, chat_win, review.start(bufnr, id, use.name, p))
  end)
end

function H.scratch(name, text, ft)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  pcall(vim.api.nvim_buf_set_name, buf, name)
  local lines = vim.split(text, "\n", { plain = true })
  if #lines > 1 and lines[#lines] == "" then
    lines[#lines] = nil
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modified = false
  if ft then
    -- The file's highlighting, without its filetype's plugins and language servers.
    vim.bo[buf].syntax = ft
  end
  return buf
end

-- The windows of the review: a tab, the file as it is on the left, the proposal on
-- the right (the cursor there), both in diff mode.
function H.show(bufnr, chat_win, rec)
  local ft = vim.filetype.match({ filename = rec.target })
  local name = ("flemma-review://%s/%s"):format(rec.id, vim.fs.basename(rec.target))
  local left = H.scratch(name .. " (now)", rec.before or "", ft)
  vim.bo[left].modifiable = false
  local right = H.scratch(name .. " (proposed)", rec.asked, ft)
  vim.cmd("tabnew")
  local placeholder_buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_win_set_buf(0, left)
  if placeholder_buf ~= left and vim.api.nvim_buf_is_valid(placeholder_buf) then
    pcall(vim.api.nvim_buf_delete, placeholder_buf, { force = true })
  end
  local left_win = vim.api.nvim_get_current_win()
  vim.cmd("diffthis")
  vim.cmd("rightbelow vsplit")
  local right_win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(right_win, right)
  vim.cmd("diffthis")
  for _, w in ipairs({ left_win, right_win }) do
    vim.wo[w].foldenable = true
    vim.wo[w].wrap = false
  end
  rec.buf = right
  for _, b in ipairs({ left, right }) do
    vim.b[b].flemma_review = { chat = bufnr, id = rec.id }
    H.map_keys(b, bufnr, rec.id)
    H.on_write(b, rec)
  end
  local tab = vim.api.nvim_get_current_tabpage()
  rec.close = function()
    for _, b in ipairs({ right, left }) do
      if vim.api.nvim_buf_is_valid(b) then
        for _, w in ipairs(vim.fn.win_findbuf(b)) do
          -- The last window of the last tab is not closed: it gets an empty buffer.
          if #vim.api.nvim_list_wins() > 1 then
            pcall(vim.api.nvim_win_close, w, true)
          end
        end
        pcall(vim.api.nvim_buf_delete, b, { force = true })
      end
    end
    if vim.api.nvim_tabpage_is_valid(tab) and #vim.api.nvim_list_tabpages() > 1 then
      local wins = vim.api.nvim_tabpage_list_wins(tab)
      if #wins == 1 and vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(wins[1])) == "" then
        pcall(vim.api.nvim_win_close, wins[1], true)
      end
    end
    if chat_win ~= -1 and vim.api.nvim_win_is_valid(chat_win) then
      vim.api.nvim_set_current_win(chat_win)
    end
  end
  -- Closing the review (:q, :tabclose) decides nothing: the review is forgotten.
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = right,
    once = true,
    callback = function()
      local now = review.get(bufnr, rec.id)
      if now == rec and not rec.accepted and rec.buf then
        rec.close = nil
        review.discard(bufnr, rec.id)
        vim.schedule(function()
          if vim.api.nvim_buf_is_valid(left) then
            pcall(vim.api.nvim_buf_delete, left, { force = true })
          end
        end)
      end
    end,
  })
  vim.api.nvim_set_current_win(right_win)
  -- One line that fits the message area; the rest is in :help flemma-review.
  util.notify("diff review: dp/do drop a hunk, <C-]> accepts (:help flemma-review)")
end

-- `:w` (`:update`, `:x`) in either side writes nothing: the buffer is an "acwrite"
-- one whose write marks it unmodified and says in one line where the change goes and
-- when. Accepting stays a decision of its own (<C-]>, :Flemma tool:approve).
function H.on_write(buf, rec)
  vim.bo[buf].buftype = "acwrite"
  vim.api.nvim_create_autocmd("BufWriteCmd", {
    buffer = buf,
    callback = function()
      vim.bo[buf].modified = false
      util.notify(("diff review: nothing saved now; %s gets the right side when you accept (<C-]>)"):format(rec.path))
    end,
  })
end

function H.map_keys(buf, bufnr, id)
  local km = require("flemma.core.config").get().keymaps
  if not km.enabled or type(km.send) ~= "string" or km.send == "" then
    return
  end
  local function accept()
    local ok, err = xpcall(M.accept, debug.traceback, bufnr, id, true)
    if not ok then
      util.notify("accepting the review failed: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
  local desc = "Flemma: accept the reviewed change and go on"
  vim.keymap.set("n", km.send, accept, { buffer = buf, silent = true, desc = desc })
  vim.keymap.set("i", km.send, function()
    vim.cmd("stopinsert")
    vim.schedule(accept)
  end, { buffer = buf, silent = true, desc = desc })
end

--- Accepts the open review of call `id`: the placeholder becomes approved and the
--- call writes what the proposed side shows now. With go_on, the cycle takes its
--- next step (as <C-]> in the chat). false when no review of it is open.
---@param bufnr integer the chat
---@param id string
---@param go_on? boolean
---@return boolean
function M.accept(bufnr, id, go_on)
  if not require("flemma.chat.gate").check(bufnr) then
    return false
  end
  if not review.accept(bufnr, id) then
    return false
  end
  local cycle = require("flemma.cycle")
  cycle.set_status(bufnr, id, "approved", "")
  if go_on then
    cycle.advance(bufnr)
  end
  return true
end

--- <C-]> in a chat: accepts the review that is open for one of its calls (its
--- placeholder pending, or approved by hand meanwhile); then the key goes on with the
--- cycle. A review whose placeholder is gone or decided otherwise is dropped. false
--- when none was accepted.
---@param bufnr integer
---@return boolean
function M.accept_open(bufnr)
  local rec = review.open_one(bufnr)
  if not rec then
    return false
  end
  local _, result = H.find(require("flemma.chat.document").get(bufnr), rec.id)
  local status = result and vim.trim(result.content or "") == "" and result.status
  if status ~= "pending" and status ~= "approved" then
    review.discard(bufnr, rec.id)
    return false
  end
  return M.accept(bufnr, rec.id, false)
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["tool:diff"] = {
  chat = true,
  desc = "review a pending write or edit as a diff (the one under the cursor, or the first pending)",
  run = function()
    local bufnr = vim.api.nvim_get_current_buf()
    if M.at_cursor(bufnr) then
      return
    end
    local doc = require("flemma.chat.document").get(bufnr)
    local uses = {}
    for _, msg in ipairs(doc.messages) do
      for _, part in ipairs(msg.parts) do
        if part.kind == "tool_use" then
          uses[part.id] = uses[part.id] or part
        end
      end
    end
    for _, part in ipairs(require("flemma.cycle")._placeholders(bufnr)) do
      if H.reviewable(uses[part.id], part) then
        M.open(bufnr, part.id)
        return
      end
    end
    util.notify("no pending write or edit to review")
  end,
}

return M
