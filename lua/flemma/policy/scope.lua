--- Whether a tool call stays inside the project. A file tool says which paths a call
--- touches with `paths(input)` in its definition; built-in and preset approvals apply
--- only when every one of them is inside the project roots (the cwd and the chat
--- file's directory; the sandbox's writable roots while the sandbox is on), resolved
--- as the tool will use them: against the chat file's directory, `~` expanded, `..`
--- folded, then symlinks followed by the native resolver (as is_path_writable does).
--- Writes are also refused on the protected paths inside a root (.git/hooks,
--- .git/config, shell start-up files).
---
--- `/` and $HOME (or a directory holding $HOME) are never project roots: Neovim
--- started in the home directory does not make every file of it part of the project.
--- With such a cwd the project is the chat file's directory when that lies below
--- $HOME, else there is none. Secret files (flemma.secret_paths) are never inside
--- the project: a call that names one waits for the user even within a root.
local M = {}
local H = {}

---@class flemma.tools.PathUse
---@field path string the path as the tool input gives it
---@field write? boolean true when the call writes it

---@class flemma.tools.OutsidePath
---@field path string the path as the tool input gives it
---@field reason "outside"|"protected"|"secret"|"unknown"

function H.bufnr(bufnr)
  if type(bufnr) ~= "number" or bufnr == 0 or not vim.api.nvim_buf_is_valid(bufnr) then
    return vim.api.nvim_get_current_buf()
  end
  return bufnr
end

--- The project roots of a buffer: the cwd and the directory of the chat file (if it
--- has one); while the sandbox is on with `sandbox.policy.rw_paths` set, those roots.
--- The sandbox's default roots /tmp and $TMPDIR are never the project.
---@param bufnr? integer
---@return string[]
function M.roots(bufnr)
  bufnr = H.bufnr(bufnr)
  local cwd = vim.fs.normalize(vim.fn.getcwd())
  local dir
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name ~= "" and vim.bo[bufnr].buftype == "" then
    dir = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(name, ":p")))
  end
  local candidates
  local sandbox = require("flemma.policy.sandbox")
  local configured = sandbox.is_enabled()
    and ((require("flemma.core.config").get().sandbox or {}).policy or {}).rw_paths
  if configured then
    -- Roots the user named: the project is what the sandbox may write.
    candidates = sandbox.policy(bufnr).rw_paths
  else
    -- The cwd and the chat's directory, sandbox or not: the sandbox's default roots
    -- add only the shared temporary directories (/tmp, $TMPDIR), where anyone's
    -- files lie, and those are not the project (a reference to one asks).
    candidates = { cwd }
    if dir then
      candidates[2] = dir
    end
  end
  local home = H.home()
  -- Started in $HOME (or /): the chat file's directory is the project only when it
  -- lies below $HOME.
  local homeless = H.too_wide(cwd, home)
  local roots, seen = {}, {}
  for _, r in ipairs(candidates) do
    if type(r) == "string" and r ~= "" and not seen[r] and not H.too_wide(r, home) then
      local keep = true
      if homeless and r == dir then
        keep = home ~= nil and M.inside(H.real(r), home.real) and H.real(r) ~= home.real
      end
      if keep then
        seen[r] = true
        roots[#roots + 1] = r
      end
    end
  end
  return roots
end

-- $HOME, as written and resolved, or nil (unset, or `/`).
function H.home()
  local path = require("flemma.policy.secret_paths").home()
  if not path then
    return nil
  end
  return { path = path, real = H.real(path) }
end

function H.real(path)
  return vim.uv.fs_realpath(path) or vim.fs.normalize(path)
end

--- Whether a directory is too wide to be a project root: `/`, $HOME, or one that
--- holds $HOME.
---@param dir string
---@param home? { path: string, real: string }
---@return boolean
function H.too_wide(dir, home)
  local real = H.real(dir)
  if real == "/" or dir == "/" then
    return true
  end
  if home then
    return M.inside(home.real, real) or M.inside(home.path, vim.fs.normalize(dir))
  end
  return false
end

-- The project of a buffer as the checks need it: { roots, resolved roots, the
-- directory relative paths start from, cwd }. Kept for one turn of the event loop
-- (a phase resolving thousands of calls builds it once) while the cwd, the buffer's
-- name, the configuration and the sandbox toggle stay the same.
H.project_cache = {}

function H.project(bufnr)
  local cwd = vim.fn.getcwd()
  local key = table.concat({
    vim.uv.now(),
    cwd,
    vim.api.nvim_buf_get_name(bufnr),
    tostring(require("flemma.core.config").get()),
    tostring(require("flemma.policy.sandbox").is_enabled()),
  }, "\0")
  local c = H.project_cache[bufnr]
  if c and c.key == key then
    return c
  end
  local native = require("flemma.core.native")
  local roots = M.roots(bufnr)
  local resolved = {}
  for _, r in ipairs(roots) do
    resolved[#resolved + 1] = native.sandbox_resolve(r, cwd)
  end
  -- As ctx.path.resolve: relative to the chat file's directory, else the cwd.
  local base = vim.fs.normalize(cwd)
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name ~= "" and vim.bo[bufnr].buftype == "" then
    base = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(name, ":p")))
  end
  c = {
    key = key,
    cwd = cwd,
    roots = roots,
    resolved = resolved,
    base = base,
    policy = native.sandbox_policy({ rw_paths = roots, network = true }),
  }
  H.project_cache = { [bufnr] = c }
  return c
end

-- The path a tool opens for `path` (what ctx.path.resolve gives).
function H.target(project, path)
  if path == "" then
    error("empty path", 0)
  end
  if path:sub(1, 1) == "~" then
    path = vim.fs.normalize(path)
  end
  if path:sub(1, 1) ~= "/" then
    path = project.base .. "/" .. path
  end
  -- As the tool does (vim.fs.normalize): `..` folded, and $VARS expanded (a
  -- variable holding `../..` leads out of the project).
  if
    path:find("/.", 1, true)
    or path:find("//", 1, true)
    or path:find("\\", 1, true)
    or path:find("$", 1, true)
    or path:sub(-1) == "/"
  then
    path = vim.fs.normalize(path)
  end
  return path
end

--- Whether `path` is `root` or below it (both absolute and normalized).
---@param path string
---@param root string
---@return boolean
function M.inside(path, root)
  if root == "/" then
    return true
  end
  return path == root or (path:sub(1, #root) == root and path:sub(#root + 1, #root + 1) == "/")
end

--- The paths a tool call touches, from its definition's `paths(input)`; nil when the
--- tool does not declare any. Raises when `paths` fails or answers something else.
---@param def flemma.tools.Definition
---@param input table
---@return flemma.tools.PathUse[]|nil
function M.uses(def, input)
  if type(def) ~= "table" or type(def.paths) ~= "function" then
    return nil
  end
  local list = def.paths(type(input) == "table" and input or {})
  if list == nil then
    return {}
  end
  if type(list) ~= "table" then
    error(("`paths` of tool `%s` returned %s, not a list"):format(def.name, type(list)), 0)
  end
  local out = {}
  for _, entry in ipairs(list) do
    if type(entry) == "string" then
      out[#out + 1] = { path = entry }
    elseif type(entry) == "table" and type(entry.path) == "string" then
      out[#out + 1] = { path = entry.path, write = entry.write == true }
    end
    -- Anything else (a missing path, JSON null) names no file: the call fails its
    -- input validation and touches nothing.
  end
  return out
end

--- The paths of a tool call that are not inside the project roots of bufnr (empty
--- when all are, or when the tool declares no `paths`). A path that cannot be
--- checked counts as outside ("unknown").
---@param bufnr? integer
---@param def flemma.tools.Definition|nil the tool's definition (flemma.tools.get)
---@param input table|nil
---@return flemma.tools.OutsidePath[]
function M.outside(bufnr, def, input)
  local ok, uses = pcall(M.uses, def, input)
  if not ok then
    return { { path = "?", reason = "unknown" } }
  end
  if not uses or #uses == 0 then
    return {}
  end
  bufnr = H.bufnr(bufnr)
  local native = require("flemma.core.native")
  local out = {}
  for _, use in ipairs(uses) do
    local checked, reason = pcall(function()
      local project = H.project(bufnr)
      -- The path the tool opens (ctx.path.resolve), then where it really leads.
      local target = H.target(project, use.path)
      local real = native.sandbox_resolve(target, project.cwd)
      -- A secret file waits for the user wherever it is.
      if require("flemma.policy.secret_paths").check(target, real) then
        return "secret"
      end
      local inside = false
      for _, r in ipairs(project.resolved) do
        inside = inside or M.inside(real, r)
      end
      if not inside then
        return "outside"
      end
      -- The protected paths (.git/hooks, .git/config, shell start-up files...) all
      -- lie below a dot-file or dot-directory: a path without one needs no check.
      local dotted = real:find("/.", 1, true) or target:find("/.", 1, true)
      if use.write and dotted and not native.sandbox_is_path_writable(project.policy, target, project.cwd) then
        return "protected"
      end
      return nil
    end)
    if not checked then
      out[#out + 1] = { path = use.path, reason = "unknown" }
    elseif reason then
      out[#out + 1] = { path = use.path, reason = reason }
    end
  end
  return out
end

--- Where the paths of a call lead (the tool's `paths`, resolved as it opens them,
--- symlinks followed), and the project roots resolved the same way: what per-path
--- rules (`read(src/*)`, flemma.policy.commands.decide_paths) are matched against.
--- nil when the tool declares no `paths`; raises when a path cannot be resolved.
---@param bufnr? integer
---@param def flemma.tools.Definition|nil
---@param input table|nil
---@return string[]|nil paths
---@return string[] roots
function M.real_paths(bufnr, def, input)
  local uses = M.uses(def, input)
  bufnr = H.bufnr(bufnr)
  local project = H.project(bufnr)
  if not uses then
    return nil, project.resolved
  end
  local native = require("flemma.core.native")
  local out = {}
  for _, use in ipairs(uses) do
    out[#out + 1] = native.sandbox_resolve(H.target(project, use.path), project.cwd)
  end
  return out, project.resolved
end

--- Whether every path of the call is inside the project (true for tools without
--- `paths`).
---@param bufnr? integer
---@param def flemma.tools.Definition|nil the tool's definition (flemma.tools.get)
---@param input table|nil
---@return boolean
function M.is_inside(bufnr, def, input)
  return #M.outside(bufnr, def, input) == 0
end

H.REASONS = {
  outside = "(outside the project)",
  protected = "(protected path)",
  unknown = "(cannot tell where it leads)",
  secret = "(secret file: approve explicitly)",
}

--- A preview marked with where its paths lead: `~/.bashrc (outside the project) (12 B)`.
--- The mark follows the first outside path when the preview starts with it, else the
--- path and its mark come first.
---@param summary string the tool's preview (without the `name: ` prefix)
---@param outside flemma.tools.OutsidePath[]
---@return string
function M.mark(summary, outside)
  if #outside == 0 then
    return summary
  end
  local first = outside[1]
  local mark = H.REASONS[first.reason] or H.REASONS.unknown
  if first.path ~= "?" and summary:sub(1, #first.path) == first.path then
    return first.path .. " " .. mark .. summary:sub(#first.path + 1)
  end
  local path = first.path ~= "?" and (first.path .. " ") or ""
  return path .. mark .. (summary ~= "" and (": " .. summary) or "")
end

return M
