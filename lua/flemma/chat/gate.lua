--- Whether the tool cycle may act on a buffer now. Every entry point of the cycle
--- (<C-]>, <M-CR>, autopilot, :Flemma tool:*) asks here first:
---   - a frontmatter that does not evaluate stops everything: no tool runs, nothing is
---     injected. Its error is shown once per frontmatter text (not on every key press)
---     and stays as a diagnostic on its line until the frontmatter is fixed;
---   - a frontmatter that widens the approval policy is asked about once
---     (flemma.trust) before the cycle goes on.
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

M.ns = vim.api.nvim_create_namespace("flemma.chat.frontmatter")

-- Per buffer, while its frontmatter fails: { key = error .. text, text = frontmatter
-- lines, notified = key of the last notification }.
---@type table<integer, { key: string, text: string, notified: string|nil }>
-- H.failing: the `gate_failing` field of each buffer's session record (flemma.core.session).

-- The lines of the buffer up to and including the frontmatter's closing fence (or
-- the whole of an unclosed one): what a change must touch to change the frontmatter.
function H.frontmatter_text(bufnr)
  local ok, doc = pcall(require("flemma.chat.document").get, bufnr)
  local last = ok and type(doc) == "table" and doc.frontmatter and doc.frontmatter.last_line or nil
  if not last then
    -- Not parsed as a frontmatter (e.g. never closed): line 1 is what made it one.
    last = 1
  end
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, last, false), "\n")
end

--- The 1-based buffer line named by a frontmatter error ("frontmatter line N: ...").
---@param err string
---@return integer
function M.error_line(err)
  return tonumber(tostring(err):match("frontmatter line (%d+)")) or 1
end

function H.set_diagnostic(bufnr, err)
  vim.diagnostic.set(M.ns, bufnr, {
    {
      lnum = M.error_line(err) - 1,
      col = 0,
      severity = vim.diagnostic.severity.ERROR,
      message = util.redact(err),
      source = "flemma",
    },
  })
end

function H.clear(bufnr)
  if session.field(bufnr, "gate_failing") then
    session.set(bufnr, "gate_failing", nil)
    if vim.api.nvim_buf_is_valid(bufnr) then
      vim.diagnostic.reset(M.ns, bufnr)
    end
  end
end

-- The frontmatter's options, or nil and its error. Never raises.
function H.evaluate(bufnr)
  local ok, opts, err = pcall(require("flemma.chat.frontmatter").get, bufnr)
  if not ok then
    return nil, util.message(opts)
  end
  if opts == nil then
    return nil, err or "frontmatter line 1: the frontmatter did not evaluate"
  end
  return opts
end

-- After an edit of a buffer whose frontmatter fails: when the frontmatter text
-- changed, evaluate it again; fixed, the diagnostic goes; still failing, the
-- diagnostic follows the new error (the message waits for the next key press).
function H.recheck(bufnr)
  local f = session.field(bufnr, "gate_failing")
  if not f or not vim.api.nvim_buf_is_valid(bufnr) then
    return true -- drop the autocmd
  end
  local text = H.frontmatter_text(bufnr)
  if text == f.text then
    return
  end
  local opts, err = H.evaluate(bufnr)
  if opts then
    H.clear(bufnr)
    return true
  end
  f.text = text
  f.key = err .. "\0" .. text
  H.set_diagnostic(bufnr, err)
end

function H.report(bufnr, err)
  local text = H.frontmatter_text(bufnr)
  local key = err .. "\0" .. text
  local f = session.field(bufnr, "gate_failing")
  if not f then
    f = {}
    session.get(bufnr).gate_failing = f
    vim.api.nvim_create_autocmd({ "TextChanged", "InsertLeave" }, {
      group = vim.api.nvim_create_augroup("flemma.gate." .. bufnr, { clear = true }),
      buffer = bufnr,
      callback = function()
        return H.recheck(bufnr)
      end,
    })
  end
  f.key, f.text = key, text
  H.set_diagnostic(bufnr, err)
  if f.notified ~= key then
    f.notified = key
    util.notify(
      ("no tool runs while the frontmatter fails: %s (fix it, then press the key again)"):format(err),
      vim.log.levels.ERROR
    )
  end
end

--- The buffer's frontmatter options when it evaluates; else nil and its error, shown
--- once per frontmatter text and as a diagnostic on its line. Clears the diagnostic
--- once the frontmatter evaluates again.
---@param bufnr integer
---@return flemma.frontmatter.Options|nil opts
---@return string|nil err
function M.check(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    -- Wiped while a step of the cycle was queued: nothing to act on, nothing to show.
    return nil, ("buffer %s is not valid"):format(tostring(bufnr))
  end
  local opts, err = H.evaluate(bufnr)
  if not opts then
    H.report(bufnr, err)
    return nil, err
  end
  H.clear(bufnr)
  return opts
end

--- Whether the cycle may go on in bufnr now. False when the frontmatter fails (see
--- M.check), or while the user is asked whether to trust it: `resume` is called
--- once they answered.
---@param bufnr integer
---@param resume? fun() called after an answer, to do what was asked
---@return boolean
function M.allow(bufnr, resume)
  local opts = M.check(bufnr)
  if not opts then
    return false
  end
  return require("flemma.chat.trust").settle(bufnr, opts, resume)
end

return M
