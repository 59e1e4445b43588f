--- Which files a chat's own text may make Flemma read and send to the provider
--- (`@./path` references, `include()` in templates). Files inside the project roots
--- (those of the tools: the cwd and the chat file's directory, or the sandbox's
--- writable roots while the sandbox is on) are read freely. A file outside them
--- (after symlinks) is sent only once the user confirmed it for this buffer: a chat
--- file from someone else cannot send ~/.ssh/id_rsa with one keypress. A secret file
--- (flemma.secret_paths: ~/.ssh, ~/.aws, `.env*`, `*.pem`...) asks the same way even
--- inside the project. A confirmed path stays allowed for the buffer until Neovim
--- exits (flemma.consent asks and remembers). Without a UI to ask, nothing is sent.
local consent = require("flemma.policy.consent")
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

-- The real paths the user allowed are kept by flemma.consent under this topic.
H.TOPIC = "reach"
---@type table<integer, { real: string, shown: string }[]> paths refused since the last take
-- H.wanted: the `reach_wanted` field of each buffer's session record (flemma.core.session).

--- The project roots of a buffer, symlinks resolved.
---@param bufnr integer|nil
---@return string[]
function M.roots(bufnr)
  local out = {}
  if not bufnr or not vim.api.nvim_buf_is_valid(bufnr) then
    return out
  end
  for _, r in ipairs(require("flemma.policy.scope").roots(bufnr)) do
    out[#out + 1] = vim.uv.fs_realpath(r) or vim.fs.normalize(r)
  end
  return out
end

--- Whether the text of bufnr may have the file at `abs` read and sent: inside the
--- project and not a secret, or allowed by the user. When not, the path is
--- remembered (see M.take_wanted) and the second value says why.
---@param bufnr integer|nil
---@param abs string absolute path of an existing file
---@param shown string the path as the chat names it (for messages)
---@return boolean ok
---@return string|nil err
function M.check(bufnr, abs, shown)
  local real = vim.uv.fs_realpath(abs) or vim.fs.normalize(abs)
  if bufnr and consent.approved(bufnr, H.TOPIC, real) then
    return true
  end
  -- Media a tool handed over as data (an MCP image), saved by Flemma under the
  -- sha256 of its content (flemma.files.save_media).
  if require("flemma.core.files").is_media(real) then
    return true
  end
  local secret = require("flemma.policy.secret_paths").check(abs, real)
  local roots = M.roots(bufnr)
  if not secret then
    local inside = require("flemma.policy.scope").inside
    for _, root in ipairs(roots) do
      if inside(real, root) then
        return true
      end
    end
  end
  if bufnr then
    local list = session.field(bufnr, "reach_wanted") or {}
    session.get(bufnr).reach_wanted = list
    local known = false
    for _, w in ipairs(list) do
      known = known or w.real == real
    end
    if not known then
      list[#list + 1] = { real = real, shown = shown, secret = secret }
    end
  end
  if secret then
    return false,
      ("%s is a secret file (%s, %s): Flemma sends a secret file only after you confirm it when sending"):format(
        shown,
        vim.fn.fnamemodify(real, ":~"),
        secret
      )
  end
  local where = #roots > 0
      and table.concat(
        vim.tbl_map(function(r)
          return vim.fn.fnamemodify(r, ":~")
        end, roots),
        ", "
      )
    or "none"
  return false,
    ("%s is outside the project (%s; project roots: %s): Flemma sends a file from outside the project only after you confirm it when sending"):format(
      shown,
      vim.fn.fnamemodify(real, ":~"),
      where
    )
end

--- The files refused since the last call (and forgets them).
---@param bufnr integer
---@return { real: string, shown: string }[]
function M.take_wanted(bufnr)
  local list = session.field(bufnr, "reach_wanted") or {}
  session.set(bufnr, "reach_wanted", nil)
  return list
end

--- Forgets what was allowed for bufnr (all buffers when nil).
---@param bufnr? integer
function M.reset(bufnr)
  consent.reset(H.TOPIC, bufnr)
  if bufnr then
    session.set(bufnr, "reach_wanted", nil)
  else
    for _, b in ipairs(session.buffers()) do
      session.set(b, "reach_wanted", nil)
    end
  end
end

M.CHOICES = { "Send", "Do not send" }

-- One file of a question: how the chat names it, where it leads and why it asks.
function H.describe(w)
  local where = vim.fn.fnamemodify(w.real, ":~")
  if w.secret then
    return ("%s (%s: secret file, %s)"):format(w.shown, where, w.secret)
  end
  return ("%s (%s)"):format(w.shown, where)
end

--- Asks whether to send the files outside the project or secret; cb(true) when the
--- user agreed (the paths are then allowed for the buffer), cb(false, why) when not:
--- why is "declined", or "no_ui" when there is no one to ask (one line said what to
--- do). While a question waits, another send only says so (cb is not called).
---@param bufnr integer
---@param wanted { real: string, shown: string, secret?: string }[]
---@param cb fun(ok: boolean, why?: "declined"|"no_ui")
function M.confirm(bufnr, wanted, cb)
  local names, secrets = {}, 0
  for _, w in ipairs(wanted) do
    names[#names + 1] = H.describe(w)
    secrets = secrets + (w.secret and 1 or 0)
  end
  local what = secrets == 0 and "from outside the project"
    or secrets == #wanted and (#wanted == 1 and "that holds secrets" or "that hold secrets")
    or (
      #wanted == 1 and "that holds secrets or is outside the project" or "that hold secrets or are outside the project"
    )
  local prompt = ("This chat sends %d file%s %s to the model: %s. Send %s?"):format(
    #wanted,
    #wanted == 1 and "" or "s",
    what,
    table.concat(names, ", "),
    #wanted == 1 and "it" or "them"
  )
  local reals = {}
  for _, w in ipairs(wanted) do
    reals[#reals + 1] = w.real
  end
  consent.gate(bufnr, {
    topic = H.TOPIC,
    key = reals,
    prompt = prompt,
    choices = M.CHOICES,
    kind = "flemma.reach",
    resume = function()
      cb(true)
    end,
    say = function(outcome, err)
      if outcome == "busy" then
        util.notify("not sent: answer the question about the files this chat sends first")
        return
      elseif outcome == "declined" then
        cb(false, "declined")
        return
      end
      util.warn(
        ("not sent: %s %s %s, and %s to ask whether to send %s: remove the reference, or send from a Neovim with a UI"):format(
          table.concat(names, ", "),
          #wanted == 1 and "is" or "are",
          secrets == 0 and "outside the project"
            or secrets == #wanted and (#wanted == 1 and "a secret file" or "secret files")
            or "secret or outside the project",
          outcome == "no_ui" and "there is no UI" or ("it was not possible (" .. tostring(err) .. ")"),
          #wanted == 1 and "it" or "them"
        )
      )
      cb(false, "no_ui")
    end,
  })
end

return M
