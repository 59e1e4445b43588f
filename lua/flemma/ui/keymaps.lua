--- Buffer-local keys and autocmds of chat buffers.
local session = require("flemma.core.session")
local M = {}
local H = {}

M.group = vim.api.nvim_create_augroup("flemma.chat", { clear = true })

-- H.attached: the `keymaps_attached` field of each buffer's session record (flemma.core.session).
-- A TextChanged this soon after the previous one is part of a burst of changes.
H.BURST_NS = 8e6

function H.map(bufnr, modes, lhs, rhs, desc, expr)
  if type(lhs) ~= "string" or lhs == "" then
    return
  end
  vim.keymap.set(modes, lhs, rhs, { buffer = bufnr, desc = desc, silent = true, expr = expr })
end

function H.safe(fn, what)
  return function()
    if not require("flemma.core.native").usable() then
      return
    end
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then
      require("flemma.core.util").notify(what .. " failed: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

-- Wraps a key's function: an error is reported, never raised into the editor.
function H.guard(fn, what)
  return function()
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then
      require("flemma.core.util").notify(what .. " failed: " .. tostring(err), vim.log.levels.ERROR)
    end
  end
end

--- The keys of `:help flemma-moving` (each one may be set to false).
function H.map_moving(bufnr, km)
  local function nav(name, ...)
    local args = { ... }
    return function()
      require("flemma.ui.nav")[name](unpack(args))
    end
  end
  H.map(bufnr, { "n", "x", "o" }, km.next_message, H.guard(nav("message_motion", 1), "]m"), "Flemma: next message")
  H.map(bufnr, { "n", "x", "o" }, km.prev_message, H.guard(nav("message_motion", -1), "[m"), "Flemma: previous message")
  H.map(bufnr, { "x", "o" }, km.inner_message, function()
    return require("flemma.ui.nav").message_object(false)
  end, "Flemma: inner message", true)
  H.map(bufnr, { "x", "o" }, km.around_message, function()
    return require("flemma.ui.nav").message_object(true)
  end, "Flemma: a message", true)
  H.map(bufnr, "n", km.goto_file, H.guard(nav("goto_file"), "gf"), "Flemma: edit the file reference under the cursor")
  H.map(bufnr, "n", km.goto_pair, H.guard(nav("goto_pair"), "gd"), "Flemma: tool use <-> tool result")
end

-- A change of a chat buffer (the live document's on_lines, flemma.core.events "changed").
function H.on_change(buf)
  if session.field(buf, "keymaps_attached") and not require("flemma.cycle.send").is_active(buf) then
    require("flemma.ui.preview").schedule(buf)
  end
end

-- The cycle's keys of a chat buffer (keymaps.send, execute, cancel) and the moving ones.
function H.map_keys(bufnr, km)
  if vim.fn.maparg("ZZ", "n") == "" then
    -- `:x` from Normal mode: refused while an answer streams, as a typed `:x` is.
    H.map(bufnr, "n", "ZZ", function()
      require("flemma.ui.quit").zz()
    end, "Flemma: ZZ, refused while an answer streams")
  end
  H.map(
    bufnr,
    "n",
    km.send,
    H.safe(function()
      -- A diff review open for a pending call of this chat is accepted first.
      require("flemma.ui.review").accept_open(bufnr)
      require("flemma.cycle").advance(bufnr)
    end, "<C-]>"),
    "Flemma: next step of the tool cycle / send"
  )
  H.map(
    bufnr,
    "i",
    km.send,
    H.safe(function()
      vim.cmd("stopinsert")
      vim.schedule(function()
        require("flemma.ui.review").accept_open(bufnr)
        require("flemma.cycle").advance(bufnr)
      end)
    end, "<C-]>"),
    "Flemma: next step of the tool cycle / send"
  )
  H.map(
    bufnr,
    "n",
    km.execute,
    H.safe(function()
      -- A pending write or edit opens its diff review; every other block runs or
      -- resolves as before.
      if not require("flemma.ui.review").at_cursor(bufnr) then
        require("flemma.cycle").execute_at_cursor(bufnr)
      end
    end, "<M-CR>"),
    "Flemma: review a pending write/edit, else execute or resolve the tool block under the cursor"
  )
  H.map(
    bufnr,
    "n",
    km.approve_always,
    H.safe(function()
      -- Why nothing was approved is one line, as from :Flemma tool:approve always.
      local ok, err = pcall(require("flemma.cycle.commands").approve_always, bufnr)
      if not ok then
        local util = require("flemma.core.util")
        util.notify(util.message(err), vim.log.levels.ERROR)
      end
    end, "approve always"),
    "Flemma: approve the pending call and remember a rule for it"
  )
  H.map(
    bufnr,
    "n",
    km.cancel,
    H.safe(function()
      if require("flemma.cycle.send").cancel(bufnr) then
        require("flemma.core.util").notify("request cancelled")
        return
      end
      local n = require("flemma.cycle").cancel(bufnr)
      if n > 0 then
        require("flemma.core.util").notify(("cancelled %d tool(s)"):format(n))
      end
    end, "<C-c>"),
    "Flemma: cancel the request or the running tools"
  )
  H.map_moving(bufnr, km)
end

-- Keeps the tool previews of a chat buffer current: after insert mode, on entering a
-- window, after changes (TextChanged, and the document's on_lines for changes that
-- fire none) and when windows resize.
function H.watch_previews(bufnr)
  -- Changes that fire no TextChanged (another window, a plugin writing into
  -- a hidden buffer) reach the previews through the document's on_lines.
  session.get(bufnr).keymaps_attached = true
  require("flemma.core.events").on("changed", H.on_change)
  local refresh = function()
    if not vim.api.nvim_buf_is_valid(bufnr) then
      session.set(bufnr, "keymaps_attached", nil)
      return true
    end
    if not require("flemma.core.native").usable() then
      return
    end
    if require("flemma.cycle.send").is_active(bufnr) then
      return -- a response is streaming in: previews are refreshed once it ends
    end
    -- Only what changed is redrawn (a large change: the visible part now,
    -- the rest a moment later).
    local ok, err = pcall(require("flemma.ui.preview").update, bufnr, { visible_only = true })
    if not ok and not H.warned then
      H.warned = true
      require("flemma.core.util").warn("tool previews unavailable: " .. require("flemma.core.util").message(err))
    end
  end
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufWinEnter" }, {
    group = M.group,
    buffer = bufnr,
    callback = refresh,
  })
  -- TextChanged: the previews of the changed lines are drawn on a later turn of
  -- the loop (apart from the change and its folds and marks: flemma.ui.after), unless
  -- changes come faster than anyone types (a plugin writing chunk after chunk):
  -- then the update the document's on_lines scheduled draws them a moment later,
  -- once for all of them.
  local last_changed = 0
  vim.api.nvim_create_autocmd("TextChanged", {
    group = M.group,
    buffer = bufnr,
    callback = function()
      local now = vim.uv.hrtime()
      local burst = now - last_changed < H.BURST_NS
      last_changed = now
      if burst and vim.api.nvim_buf_is_valid(bufnr) then
        if not require("flemma.cycle.send").is_active(bufnr) then
          require("flemma.ui.preview").schedule(bufnr)
        end
        return
      end
      require("flemma.ui.after").run("previews " .. bufnr, refresh)
    end,
  })
  vim.api.nvim_create_autocmd({ "VimResized", "WinResized" }, {
    group = M.group,
    callback = function()
      if not vim.api.nvim_buf_is_valid(bufnr) then
        return true
      end
      if vim.fn.bufwinid(bufnr) ~= -1 then
        refresh()
      end
    end,
  })
  vim.schedule(refresh)
end

--- Attaches Flemma to a chat buffer: keys (when keymaps.enabled) and preview refresh.
---@param bufnr integer
function M.attach(bufnr)
  if vim.b[bufnr].flemma_attached then
    return
  end
  vim.b[bufnr].flemma_attached = true
  local km = require("flemma.core.config").get().keymaps
  if km.enabled then
    H.map_keys(bufnr, km)
  end
  H.watch_previews(bufnr)
end

return M
