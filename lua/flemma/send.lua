--- The send path (phase 3): validates the conversation, waits for tool definitions,
--- fires FlemmaRequestSending and hands the conversation to the provider.
local util = require("flemma.util")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.send")

---@alias flemma.send.Handler fun(bufnr: integer, request: table, done: fun(ok: boolean, err?: string))

---@type flemma.send.Handler|nil
H.handler = nil

--- Installs the function that talks to the provider. Providers call this; until one
--- is installed, sending says plainly that no provider is available.
---@param handler flemma.send.Handler|nil
function M.set_handler(handler)
  H.handler = handler
end

H.pending_ready = {}

--- Shows validation problems as diagnostics on their lines and in a message.
function M.show_problems(bufnr, problems)
  local diags = {}
  local msgs = {}
  for _, p in ipairs(problems) do
    diags[#diags + 1] = {
      lnum = math.max(0, (p.line or 1) - 1),
      col = 0,
      severity = vim.diagnostic.severity.ERROR,
      message = p.message,
      source = "flemma",
    }
    msgs[#msgs + 1] = ("line %d: %s"):format(p.line or 0, p.message)
  end
  vim.diagnostic.set(M.ns, bufnr, diags)
  util.notify("not sent:\n" .. table.concat(msgs, "\n"), vim.log.levels.ERROR)
end

function H.event(name, data)
  vim.api.nvim_exec_autocmds("User", { pattern = name, modeline = false, data = data })
end

--- Sends the buffer's conversation. Returns true when a request was started.
---@param bufnr integer
---@param opts? { on_response?: fun() }
function M.send(bufnr, opts)
  opts = opts or {}
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local tools = require("flemma.tools")
  if not tools.is_ready() then
    vim.b[bufnr].flemma_status = "Waiting for tool definitions to load..."
    util.notify("Waiting for tool definitions to load...")
    if not H.pending_ready[bufnr] then
      H.pending_ready[bufnr] = true
      tools.on_ready(function()
        H.pending_ready[bufnr] = nil
        if vim.api.nvim_buf_is_valid(bufnr) then
          vim.b[bufnr].flemma_status = nil
          M.send(bufnr, opts)
        end
      end)
    end
    return false
  end

  local document = require("flemma.document")
  local doc = document.get(bufnr)
  local ok, problems = document.validate_for_send(doc)
  if not ok then
    M.show_problems(bufnr, problems)
    return false
  end
  vim.diagnostic.reset(M.ns, bufnr)

  local fm = package.loaded["flemma.frontmatter"] or select(2, pcall(require, "flemma.frontmatter"))
  if type(fm) == "table" and fm.get then
    local _, err = fm.get(bufnr)
    if err then
      util.notify("not sent: " .. err, vim.log.levels.ERROR)
      return false
    end
  end

  local request = document.to_messages(doc)
  H.event("FlemmaRequestSending", { bufnr = bufnr })
  if not H.handler then
    util.warn(
      "no provider is available yet in this version of Flemma: the conversation is valid but was not sent, and the buffer is unchanged"
    )
    H.event("FlemmaRequestFinished", { bufnr = bufnr, status = "unavailable" })
    return false
  end
  H.handler(bufnr, request, function(done_ok, err)
    vim.schedule(function()
      H.event("FlemmaRequestFinished", { bufnr = bufnr, status = done_ok and "done" or "error", error = err })
      if not done_ok then
        util.notify("request failed: " .. tostring(err), vim.log.levels.ERROR)
      elseif opts.on_response then
        opts.on_response()
      end
    end)
  end)
  return true
end

return M
