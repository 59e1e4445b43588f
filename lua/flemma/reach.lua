--- Which files a chat's own text may make Flemma read and send to the provider
--- (`@./path` references, `include()` in templates). Files inside the project roots
--- (those of the tools: the cwd and the chat file's directory, or the sandbox's
--- writable roots while the sandbox is on) are read freely. A file outside them
--- (after symlinks) is sent only once the user confirmed it for this buffer: a chat
--- file from someone else cannot send ~/.ssh/id_rsa with one keypress. A confirmed
--- path stays allowed for the buffer until Neovim exits.
local M = {}
local H = {}

---@type table<integer, table<string, true>> real paths the user allowed, per buffer
H.allowed = {}
---@type table<integer, { real: string, shown: string }[]> paths refused since the last take
H.wanted = {}

--- The project roots of a buffer, symlinks resolved.
---@param bufnr integer|nil
---@return string[]
function M.roots(bufnr)
  local out = {}
  if not bufnr or not vim.api.nvim_buf_is_valid(bufnr) then
    return out
  end
  for _, r in ipairs(require("flemma.tools.scope").roots(bufnr)) do
    out[#out + 1] = vim.uv.fs_realpath(r) or vim.fs.normalize(r)
  end
  return out
end

--- Whether the text of bufnr may have the file at `abs` read and sent. When not, the
--- path is remembered (see M.take_wanted) and the second value says why.
---@param bufnr integer|nil
---@param abs string absolute path of an existing file
---@param shown string the path as the chat names it (for messages)
---@return boolean ok
---@return string|nil err
function M.check(bufnr, abs, shown)
  local real = vim.uv.fs_realpath(abs) or vim.fs.normalize(abs)
  local roots = M.roots(bufnr)
  local inside = require("flemma.tools.scope").inside
  for _, root in ipairs(roots) do
    if inside(real, root) then
      return true
    end
  end
  if bufnr and H.allowed[bufnr] and H.allowed[bufnr][real] then
    return true
  end
  if bufnr then
    local list = H.wanted[bufnr] or {}
    H.wanted[bufnr] = list
    local known = false
    for _, w in ipairs(list) do
      known = known or w.real == real
    end
    if not known then
      list[#list + 1] = { real = real, shown = shown }
    end
  end
  local where = #roots > 0 and table.concat(
      vim.tbl_map(function(r)
        return vim.fn.fnamemodify(r, ":~")
      end, roots),
      ", "
    ) or "none"
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
  local list = H.wanted[bufnr] or {}
  H.wanted[bufnr] = nil
  return list
end

--- Allows the real paths for bufnr until Neovim exits.
---@param bufnr integer
---@param reals string[]
function M.allow(bufnr, reals)
  H.allowed[bufnr] = H.allowed[bufnr] or {}
  for _, r in ipairs(reals) do
    H.allowed[bufnr][r] = true
  end
end

--- Forgets what was allowed for bufnr (all buffers when nil).
---@param bufnr? integer
function M.reset(bufnr)
  if bufnr then
    H.allowed[bufnr], H.wanted[bufnr] = nil, nil
  else
    H.allowed, H.wanted = {}, {}
  end
end

--- Asks whether to send the files outside the project; cb(true) when the user agreed
--- (the paths are then allowed for the buffer).
---@param bufnr integer
---@param wanted { real: string, shown: string }[]
---@param cb fun(ok: boolean)
function M.confirm(bufnr, wanted, cb)
  local names = {}
  for _, w in ipairs(wanted) do
    names[#names + 1] = ("%s (%s)"):format(w.shown, vim.fn.fnamemodify(w.real, ":~"))
  end
  local prompt = ("This chat sends %d file%s from outside the project to the model: %s. Send %s?"):format(
    #wanted,
    #wanted == 1 and "" or "s",
    table.concat(names, ", "),
    #wanted == 1 and "it" or "them"
  )
  vim.ui.select({ "Send", "Do not send" }, { prompt = prompt, kind = "flemma.reach" }, function(choice)
    if choice == "Send" then
      local reals = {}
      for _, w in ipairs(wanted) do
        reals[#reals + 1] = w.real
      end
      M.allow(bufnr, reals)
      cb(true)
    else
      cb(false)
    end
  end)
end

return M
