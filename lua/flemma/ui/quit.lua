--- Quitting while a request streams. A typed `:wq`, `:x`, `:wqa` or `:xa` that
--- would end Neovim is stopped before it runs (CmdlineLeave: QuitPre comes after the
--- write), so nothing is written, with one E37-like line naming the chat; with `!`
--- the requests are cancelled first, so the marker and `@You:` are in the buffer
--- before it is written. A plain `:q` is refused as `:q` refuses a modified buffer
--- (the streaming buffer is marked modified again); when Neovim quits anyway
--- (`:q!`, `:qa!`, or a `:wq` run from a mapping or script), the request is
--- cancelled first and a buffer that was just written is written again with them.
local session = require("flemma.core.session")

local M = {}
local H = {}

-- In each chat's session record (flemma.core.session): `quit_wrote`, set while the
-- command being run (`:wq`, `:x`) wrote it with a request running, and, of those,
-- `quit_rewrite` when a quit was asked for after the write.

function H.streaming()
  local send = package.loaded["flemma.cycle.send"]
  local out = {}
  if not send then
    return out
  end
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and send.is_active(buf) then
      out[#out + 1] = buf
    end
  end
  return out
end

function H.quit_pre()
  local bufs = H.streaming()
  if #bufs == 0 then
    return
  end
  for _, buf in ipairs(bufs) do
    if session.field(buf, "quit_wrote") then
      session.get(buf).quit_rewrite = true
    end
    -- A quit without ! stops at it: "No write since last change".
    vim.bo[buf].modified = true
  end
  vim.schedule(function()
    -- Still running: the quit was refused.
    for b in session.each("quit_rewrite") do
      session.set(b, "quit_rewrite", nil)
    end
  end)
  -- Said only when this quit may end Neovim or closes a streaming chat (not for a
  -- split of another file closed meanwhile).
  local send = package.loaded["flemma.cycle.send"]
  local last = #vim.api.nvim_list_tabpages() == 1 and vim.fn.winnr("$") == 1
  if not last and not (send and send.is_active(vim.api.nvim_get_current_buf())) then
    return
  end
  require("flemma.core.util").notify(
    ("%s is still receiving: <C-c> stops it, :wq! stops and quits"):format(
      vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufs[1]), ":t")
    ),
    vim.log.levels.WARN
  )
end

-- The commands that write and quit (full names, as nvim_parse_cmd gives them).
H.write_quit = { wq = "one", xit = "one", exit = "one", wqall = "all", xall = "all" }

--- Whether quitting the current window ends Neovim.
function H.last_window()
  return #vim.api.nvim_list_tabpages() == 1 and vim.fn.winnr("$") == 1
end

--- A typed command line about to run: a write-and-quit that would end Neovim while
--- requests stream is refused (nothing written) or, with `!`, cancels them first.
function H.cmdline_leave()
  local ev = vim.v.event
  if vim.fn.expand("<afile>") ~= ":" or (ev and ev.abort) then
    return
  end
  local line = vim.fn.getcmdline()
  if line == "" or not line:find("[wx]") then
    return
  end
  local ok, cmd = pcall(vim.api.nvim_parse_cmd, line, {})
  local kind = ok and H.write_quit[cmd.cmd]
  if not kind or (kind == "one" and not H.last_window()) then
    return
  end
  local typed = line:gsub("^%s*:*%s*", ""):match("^%a+") or "wq"
  if H.stop_write_quit(cmd.bang, typed) then
    vim.cmd("let v:event.abort = v:true")
  end
end

--- A write-and-quit (`typed`, e.g. "wq") that would end Neovim: with `bang` the
--- streaming requests are cancelled (the buffers get the marker before the write);
--- without, it is refused with one line. Returns true when refused.
function H.stop_write_quit(bang, typed)
  local bufs = H.streaming()
  if #bufs == 0 then
    return false
  end
  local send = package.loaded["flemma.cycle.send"]
  if bang then
    for _, buf in ipairs(bufs) do
      pcall(send.cancel, buf)
    end
    return false
  end
  local name = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufs[1]), ":t")
  vim.schedule(function()
    require("flemma.core.util").notify(
      ("E37: %s still receiving, not written (<C-c> stops it, :%s! quits)"):format(
        name ~= "" and name or "the chat",
        typed
      ),
      vim.log.levels.WARN
    )
  end)
  return true
end

--- `ZZ` in a chat (`:x` from Normal mode, which no command line shows): refused
--- while a request streams when it would end Neovim, as a typed `:x` is.
function M.zz()
  if H.last_window() and H.stop_write_quit(false, "x") then
    return
  end
  vim.cmd("normal! ZZ")
end

function H.leave()
  local send = package.loaded["flemma.cycle.send"]
  for _, buf in ipairs(H.streaming()) do
    pcall(send.cancel, buf)
  end
  -- Neovim unloads the buffers before VimLeavePre (BufUnload), which already
  -- cancelled their requests: a buffer `:wq!` wrote is written again with the marker.
  for buf in session.each("quit_rewrite") do
    if vim.api.nvim_buf_is_valid(buf) and vim.bo[buf].modified and vim.api.nvim_buf_get_name(buf) ~= "" then
      pcall(vim.api.nvim_buf_call, buf, function()
        vim.cmd("silent keepalt write!")
      end)
    end
  end
end

--- Sets up the autocmds once.
function M.setup()
  if H.done then
    return
  end
  H.done = true
  local group = vim.api.nvim_create_augroup("flemma.quit", { clear = true })
  vim.api.nvim_create_autocmd("BufWritePost", {
    group = group,
    callback = function(ev)
      local send = package.loaded["flemma.cycle.send"]
      if send and send.is_active(ev.buf) then
        session.get(ev.buf).quit_wrote = true
        vim.schedule(function()
          session.set(ev.buf, "quit_wrote", nil)
        end)
      end
    end,
  })
  vim.api.nvim_create_autocmd("CmdlineLeave", { group = group, callback = H.cmdline_leave })
  vim.api.nvim_create_autocmd("QuitPre", { group = group, callback = H.quit_pre })
  vim.api.nvim_create_autocmd("VimLeavePre", { group = group, callback = H.leave })
end

return M
