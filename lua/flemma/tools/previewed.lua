--- What the files of a pending call were when its preview was shown (issue 27: "the
--- file must be unchanged since the preview, else the call is refused"). When a call
--- that changes files (`write`, `edit`, `delete`, `move`: every tool whose `paths`
--- names a path with `write = true`) waits for the user, each such path's state is
--- taken (M.take); when the user approves it and it is about to run, the state is
--- taken again (M.check) and a difference refuses the call with an error result and
--- one line to the user. A call approved without the user (the policy, autopilot)
--- runs at once, with no preview to compare with.
---
--- A path's state: absent; a symbolic link (what it says, and the state of what it
--- leads to); a regular file of at most M.MAX_HASH bytes by its content (a file
--- written again with the same text is unchanged), a larger one by
--- its size, modification time (ns) and inode (touched counts as changed); a folder
--- by its inode and modification time (an entry added, removed or renamed in it).
---
--- Kept in the chat's session record (`previewed`: call id -> { input, states }). A
--- call whose input was edited after the preview is not compared (the user changed
--- it); one accepted in a diff review is compared by the review (flemma.tools.review).
local session = require("flemma.core.session")

local M = {}
local H = {}

--- Files up to this size are compared by content; larger ones by size, time, inode.
M.MAX_HASH = 1024 * 1024

-- The content of a regular file (at most M.MAX_HASH bytes are read), or nil.
function H.read(path)
  local files = require("flemma.core.files")
  local fd = files.open_regular(path)
  if not fd then
    return nil
  end
  return files.read_fd(fd, M.MAX_HASH)
end

-- The state of what a (followed) stat describes.
function H.entry(path, st)
  local mtime = ("%d.%09d"):format(st.mtime.sec, st.mtime.nsec)
  if st.type == "file" then
    if st.size <= M.MAX_HASH then
      local text = H.read(path)
      if text and #text == st.size then
        -- The content itself, kept until the call runs: no hash to compute on the
        -- main loop (SHA-256 through vim.fn took 3 ms per 256 KiB here).
        return "file " .. text
      end
    end
    return ("file %d bytes, %s, inode %d"):format(st.size, mtime, st.ino)
  elseif st.type == "directory" then
    return ("folder inode %d, %s"):format(st.ino, mtime)
  end
  return ("%s inode %d"):format(st.type, st.ino)
end

--- The state of one absolute path now (links followed, each named).
---@param path string
---@return string
function M.state(path)
  local parts = {}
  for _ = 1, 40 do
    local lst = vim.uv.fs_lstat(path)
    if not lst then
      parts[#parts + 1] = "absent"
      break
    end
    if lst.type ~= "link" then
      parts[#parts + 1] = H.entry(path, lst)
      break
    end
    local target = vim.uv.fs_readlink(path) or "?"
    parts[#parts + 1] = "link to " .. target
    if target:sub(1, 1) ~= "/" then
      target = vim.fs.dirname(path) .. "/" .. target
    end
    path = vim.fs.normalize(target)
  end
  return table.concat(parts, " -> ")
end

-- The absolute paths a call of tool `name` changes: its `paths` with `write = true`,
-- resolved as its execution context resolves them. nil when none (or not known).
function H.targets(bufnr, name, input)
  local def = require("flemma.tools").get(name)
  if type(def) ~= "table" or type(def.paths) ~= "function" or type(input) ~= "table" then
    return nil
  end
  local ok, uses = pcall(require("flemma.policy.scope").uses, def, input)
  if not ok or not uses then
    return nil
  end
  local ctx = require("flemma.tools.context").new(bufnr, name)
  local out = {}
  for _, use in ipairs(uses) do
    if use.write and use.path ~= "" then
      local rok, abs = pcall(ctx.path.resolve, use.path)
      if rok then
        out[#out + 1] = { path = use.path, abs = abs }
      end
    end
  end
  return #out > 0 and out or nil
end

--- Takes the state of the files call `id` would change, as its preview is shown
--- (its placeholder pending). Nothing for a call that changes no file.
---@param bufnr integer
---@param use { id: string, name: string, input: table|nil }
function M.take(bufnr, use)
  local targets = H.targets(bufnr, use.name, use.input)
  if not targets then
    return
  end
  for _, t in ipairs(targets) do
    t.state = M.state(t.abs)
  end
  local r = session.get(bufnr)
  r.previewed = r.previewed or {}
  r.previewed[use.id] = { input = vim.deepcopy(use.input), targets = targets }
end

--- Forgets what was taken for call `id`.
---@param bufnr integer
---@param id string
function M.forget(bufnr, id)
  local all = session.field(bufnr, "previewed")
  if all then
    all[id] = nil
  end
end

-- How a path's state differs, in a few words.
function H.how(before, now)
  if before == "absent" then
    return "it exists now"
  elseif now == "absent" then
    return "it is gone"
  end
  return "its content differs"
end

--- Whether call `id` may run: nil when nothing was taken for it (approved without
--- the user), its input differs from the one previewed, or its files are as they
--- were; else the refusal (the call's error result) and the one line for the user.
--- What was taken is forgotten either way (the call runs once).
---@param bufnr integer
---@param id string
---@param input table|nil the input the call runs with
---@return string|nil refusal
---@return string|nil note
function M.check(bufnr, id, input)
  local all = session.field(bufnr, "previewed")
  local rec = all and all[id]
  if not rec then
    return nil
  end
  all[id] = nil
  if not vim.deep_equal(rec.input, input) then
    return nil
  end
  for _, t in ipairs(rec.targets) do
    local now = M.state(t.abs)
    if now ~= t.state then
      local how = H.how(t.state, now)
      return (
        "refused: %s changed since the preview the user approved (%s), so nothing was done; "
        .. "read it again and make the change anew"
      ):format(t.path, how),
        ("`%s` was not run: %s changed since its preview (%s)"):format(id, t.path, how)
    end
  end
  return nil
end

return M
