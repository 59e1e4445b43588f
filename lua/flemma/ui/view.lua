--- How a chat buffer looks: highlights (flemma.ui.highlight), folds
--- (flemma.ui.fold), rulers and signs (flemma.ui.marks). attach() is called by
--- ftplugin/chat.lua; work after a change is proportional to what changed.
local session = require("flemma.core.session")
local after = require("flemma.ui.after")
local fold = require("flemma.ui.fold")
local follow = require("flemma.ui.follow")
local highlight = require("flemma.ui.highlight")
local lines = require("flemma.ui.lines")
local marks = require("flemma.ui.marks")

local M = {}
local H = {}

-- H.attached: the `view_attached` field of each buffer's session record (flemma.core.session).
-- H.request_version: the `view_request_version` field of each buffer's session record (flemma.core.session).
H.BURST_MS = 16

function H.cfg()
  return require("flemma.core.config").get().ui
end

function H.safe(fn, ...)
  local ok, err = pcall(fn, ...)
  if not ok then
    require("flemma.core.log").debug("view: " .. tostring(err))
  end
end

--- With `win`: closes, in that window, the folds of every completed tool result
--- and thinking block (the chat was just shown). Without: closes, in every window
--- showing buf, the folds of the thinking blocks a response wrote since it started
--- (tool results written meanwhile stay open: they were just asked for).
function M.close_completed(buf, win)
  if not H.cfg().fold_completed then
    return
  end
  local idoc = lines.idoc(buf)
  if not idoc then
    return
  end
  fold.flush(buf)
  if win then
    fold.close_completed(win)
    return
  end
  local since = session.field(buf, "view_request_version")
  if not since then
    return
  end
  local exact, lo, hi = require("flemma.core.native").idoc_changes(idoc, since)
  if not exact then
    lo, hi = nil, nil
  end
  for _, w in ipairs(vim.fn.win_findbuf(buf)) do
    fold.close_completed(w, lo, hi, { thinking = true })
  end
end

--- Closes, in every window showing buf, the fold of the completed tool result
--- whose header is on `line` (a tool just wrote it), as a chat shown again has it.
function M.close_result(buf, line)
  if not H.cfg().fold_completed or not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local idoc = lines.idoc(buf)
  if not idoc then
    return
  end
  fold.flush(buf)
  local seg = require("flemma.core.native").idoc_segment_at(idoc, line)
  if not seg then
    return
  end
  for _, w in ipairs(vim.fn.win_findbuf(buf)) do
    fold.close_completed(w, seg, seg + 1, { tool_result = true })
  end
end

function H.window(buf, win)
  if vim.api.nvim_win_get_buf(win) ~= buf then
    return
  end
  fold.setup_window(win) -- a window that never showed it (nvim_open_win from a plugin)
  fold.mark_current(buf)
  M.close_completed(buf, win)
  marks.redraw(buf)
end

--- A chat that grew past ui.treesitter_max_bytes (a long answer streaming in) goes
--- over to Vim's syntax, as a chat of that size is opened: tree-sitter parsed the
--- whole buffer again after changes (a 20 MB answer: 2 s, also while quitting).
function H.limit_treesitter(buf)
  local hl = vim.treesitter.highlighter and vim.treesitter.highlighter.active or {}
  if not hl[buf] then
    return
  end
  local max = require("flemma.core.config").get().ui.treesitter_max_bytes
  if vim.api.nvim_buf_get_offset(buf, vim.api.nvim_buf_line_count(buf)) > max then
    vim.treesitter.stop(buf)
    vim.bo[buf].syntax = "chat"
  end
end

--- Makes buffer buf (filetype chat) highlighted, folded in the current window,
--- with rulers and signs.
---@param buf integer
function M.attach(buf)
  fold.setup_window(vim.api.nvim_get_current_win())
  highlight.attach(buf)
  H.global()
  if session.field(buf, "view_attached") then
    return
  end
  session.get(buf).view_attached = true
  -- The marks of what changed are updated on a later turn of the loop (after its
  -- folds: flemma.ui.after), or, when changes come in a burst (chunk after
  -- chunk), once per H.BURST_MS for all of them.
  local scheduled, last_run = false, 0
  local function update_marks()
    scheduled = false
    last_run = vim.uv.hrtime()
    if session.field(buf, "view_attached") and vim.api.nvim_buf_is_valid(buf) then
      H.safe(marks.update, buf)
      H.safe(marks.redraw, buf)
      H.safe(H.fence_warnings, buf)
      H.safe(H.limit_treesitter, buf)
    end
  end
  vim.api.nvim_buf_attach(buf, false, {
    on_lines = function(_, b, _, first, _, last_new)
      if not session.field(b, "view_attached") then
        return true
      end
      lines.invalidate(b)
      fold.changed(b, first, last_new)
      if not scheduled then
        scheduled = true
        if vim.uv.hrtime() - last_run < H.BURST_MS * 1e6 then
          vim.defer_fn(update_marks, H.BURST_MS)
        else
          after.run("marks " .. b, update_marks)
        end
      end
    end,
    on_reload = function(_, b)
      lines.forget(b)
      marks.forget(b)
      fold.changed(b, 0, vim.api.nvim_buf_line_count(b))
    end,
    on_detach = function(_, b)
      M.detach(b)
    end,
  })
  local group = vim.api.nvim_create_augroup("flemma.view." .. buf, { clear = true })
  vim.api.nvim_create_autocmd("BufWinEnter", {
    group = group,
    buffer = buf,
    callback = function()
      local win = vim.api.nvim_get_current_win()
      vim.schedule(function()
        if vim.api.nvim_win_is_valid(win) then
          H.safe(H.window, buf, win)
        end
      end)
    end,
  })
  local win = vim.api.nvim_get_current_win()
  vim.schedule(function()
    if vim.api.nvim_win_is_valid(win) and vim.api.nvim_buf_is_valid(buf) then
      H.safe(H.window, buf, win)
      H.safe(H.fence_warnings, buf)
    end
  end)
end

-- A code fence that reads a role marker as text (the parser's warning "this fence
-- is not closed: the @Assistant: below it ...") is shown as a warning on its
-- opening line while it does; set only when the warnings change (every
-- DiagnosticChanged redraws the screen).
M.fence_ns = vim.api.nvim_create_namespace("flemma.fence")
-- H.fence_shown: the `view_fence_shown` field of each buffer's session record (flemma.core.session).

function H.fence_warnings(buf)
  local idoc = lines.idoc(buf)
  if not idoc then
    return
  end
  local out, keys = {}, {}
  for _, d in ipairs(require("flemma.core.native").idoc_diagnostics(idoc)) do
    if d.message:find("this fence is not closed: ", 1, true) == 1 then
      out[#out + 1] =
        { lnum = d.line - 1, col = 0, severity = vim.diagnostic.severity.WARN, message = d.message, source = "flemma" }
      keys[#keys + 1] = d.line .. "\0" .. d.message
    end
  end
  local key = table.concat(keys, "\n")
  if key == (session.field(buf, "view_fence_shown") or "") then
    return
  end
  session.get(buf).view_fence_shown = key
  if #out == 0 then
    vim.diagnostic.reset(M.fence_ns, buf)
  else
    vim.diagnostic.set(M.fence_ns, buf, out)
  end
end

---@param buf integer
---@return boolean
function M.attached(buf)
  return session.field(buf, "view_attached") == true
end

function M.detach(buf)
  if not session.field(buf, "view_attached") then
    return
  end
  session.set(buf, "view_attached", nil)
  highlight.detach(buf)
  lines.forget(buf)
  marks.forget(buf)
  fold.forget(buf)
  session.set(buf, "view_request_version", nil)
  if
    session.field(buf, "view_fence_shown")
    and session.field(buf, "view_fence_shown") ~= ""
    and vim.api.nvim_buf_is_valid(buf)
  then
    vim.diagnostic.reset(M.fence_ns, buf)
  end
  session.set(buf, "view_fence_shown", nil)
  pcall(vim.api.nvim_del_augroup_by_name, "flemma.view." .. buf)
  if vim.api.nvim_buf_is_valid(buf) then
    pcall(vim.api.nvim_buf_clear_namespace, buf, marks.ns, 0, -1)
  end
end

-- Requests and tools: the streaming sign, and folds of what they wrote.
function H.global()
  if H.global_done then
    return
  end
  H.global_done = true
  require("flemma.ui.quit").setup()
  local group = vim.api.nvim_create_augroup("flemma.view", { clear = true })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    callback = function(ev)
      fold.forget_window(tonumber(ev.match))
    end,
  })
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = "FlemmaToolExecuting",
    callback = function()
      follow.redraw_status()
    end,
  })
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = "FlemmaRequestSending",
    callback = function(ev)
      local buf = ev.data and ev.data.bufnr
      follow.redraw_status()
      if buf and session.field(buf, "view_attached") then
        H.safe(follow.start, buf)
        local _, version = lines.idoc(buf)
        session.get(buf).view_request_version = version
        vim.schedule(function()
          H.safe(marks.refresh_tail, buf)
        end)
      end
    end,
  })
  vim.api.nvim_create_autocmd("User", {
    group = group,
    pattern = { "FlemmaRequestFinished", "FlemmaToolFinished" },
    callback = function(ev)
      local buf = ev.data and ev.data.bufnr
      follow.redraw_status()
      if buf and ev.match == "FlemmaRequestFinished" then
        H.safe(follow.finish, buf)
      end
      if buf and session.field(buf, "view_attached") and ev.match == "FlemmaToolFinished" and ev.data.line then
        -- The result a tool wrote is folded as a reopened chat's results are.
        local line = ev.data.line
        vim.schedule(function()
          H.safe(M.close_result, buf, line)
        end)
      end
      if buf and session.field(buf, "view_attached") then
        local request = ev.match == "FlemmaRequestFinished"
        -- After the writes of this tick have reached the document.
        vim.schedule(function()
          if session.field(buf, "view_attached") and vim.api.nvim_buf_is_valid(buf) then
            H.safe(marks.refresh_tail, buf)
            if request then
              H.safe(M.close_completed, buf)
              session.set(buf, "view_request_version", nil)
            end
          end
        end)
      end
    end,
  })
end

-- Unloading (`:e` reads the file again into a fresh view) or wiping a buffer detaches it.
session.on("unload", "view", M.detach)
session.on("wipe", "view", M.detach)

return M
