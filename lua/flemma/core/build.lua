--- :Flemma build: runs `make` in the plugin's directory in the background (a plugin
--- manager that installed Flemma from a directory never ran it), shows the last line
--- of its output as it goes, and loads the library when it is done: the chats already
--- open get their decorations without a restart.
local util = require("flemma.core.util")
local native = require("flemma.core.native")

local M = {}
local H = {}

---@type vim.SystemObj?
H.job = nil

--- Where the output of the last build goes (every line, for a failed build's errors).
---@return string
function M.log_path()
  return vim.fn.stdpath("log") .. "/flemma-build.log"
end

--- Whether a build is running.
---@return boolean
function M.running()
  return H.job ~= nil
end

-- Shows line in the message area, cut to fit it (no hit-enter prompt), not in :messages.
function H.progress(line)
  local room = math.max(vim.v.echospace - 1, 10)
  local text = "(flemma) make: " .. line
  if vim.fn.strdisplaywidth(text) > room then
    text = vim.fn.strcharpart(text, 0, room - 1) .. "…"
  end
  vim.api.nvim_echo({ { text } }, false, {})
  vim.cmd.redraw()
end

-- The chats shown in a window, decorated again now that the library loads: what each
-- window does when a chat is shown in it (BufWinEnter) runs once more.
function H.refresh_chats()
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    local buf = vim.api.nvim_win_get_buf(win)
    if vim.bo[buf].filetype == "chat" then
      vim.api.nvim_win_call(win, function()
        vim.api.nvim_exec_autocmds("BufWinEnter", { buffer = buf, modeline = false })
      end)
    end
  end
  vim.cmd("redraw!")
end

function H.finish(res, output, was_loaded, on_done)
  H.job = nil
  local log = M.log_path()
  vim.fn.mkdir(vim.fs.dirname(log), "p")
  local f = io.open(log, "w")
  if f then
    f:write(table.concat(output, "\n"), "\n")
    f:close()
  end
  local ok, msg
  if res.code ~= 0 then
    ok = false
    msg = ("build failed (make exited with %d%s): the output is in %s"):format(
      res.code,
      res.signal ~= 0 and (", signal " .. res.signal) or "",
      log
    )
    util.notify(msg, vim.log.levels.ERROR)
  elseif was_loaded then
    ok = true
    msg = "native library rebuilt: restart Neovim to load it"
    util.notify(msg, vim.log.levels.WARN)
  else
    native.reset()
    local avail, err = native.available()
    if avail then
      ok = true
      msg = "native library built and loaded"
      util.notify(msg)
      H.refresh_chats()
    else
      ok = false
      msg = util.message(err)
      util.notify(msg, vim.log.levels.ERROR)
    end
  end
  if on_done then
    on_done(ok, msg)
  end
end

--- Starts `make` in the plugin's directory; returns at once. on_done(ok, message) is
--- called on the main loop when it ends (after the message was shown).
---@param opts? { on_done?: fun(ok: boolean, msg: string), root?: string }
function M.start(opts)
  opts = opts or {}
  if H.job then
    util.notify("a build is already running", vim.log.levels.WARN)
    return
  end
  if vim.fn.executable("make") ~= 1 then
    util.error("cannot build the native library: `make` is not on PATH (it needs make, CMake and a C++20 compiler)")
  end
  local root = opts.root or util.root()
  local output = {}
  local pending = false
  local function on_output(_, data)
    if not data then
      return
    end
    for line in data:gmatch("[^\r\n]+") do
      output[#output + 1] = line
    end
    if not pending then
      pending = true
      vim.schedule(function()
        pending = false
        if H.job and #output > 0 then
          H.progress(output[#output])
        end
      end)
    end
  end
  local was_loaded = native.loaded()
  H.progress("building in " .. root)
  local ok, job = pcall(vim.system, { "make" }, {
    cwd = root,
    text = true,
    stdout = on_output,
    stderr = on_output,
  }, function(res)
    vim.schedule(function()
      H.finish(res, output, was_loaded, opts.on_done)
    end)
  end)
  if not ok then
    util.error("cannot start make: " .. tostring(job))
  end
  H.job = job
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["build"] = {
  desc = "build the native library (make in the plugin's directory), in the background, and load it",
  run = function()
    M.start()
  end,
}

return M
