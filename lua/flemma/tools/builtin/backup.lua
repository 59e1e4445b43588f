--- Backups of what the write, edit, delete and move tools change, remove or
--- replace: a copy of the file in
--- `stdpath("state")/flemma/backups/<the path, encoded>/<time>-<n>`, at most MAX
--- per file (the oldest go first). Each tool call that changed files is one entry
--- of a journal (`backups/journal.jsonl`, the newest MAX_JOURNAL kept):
--- M.undo restores what the call changed (:Flemma tool:undo picks the entry).
local M = {}
local H = {}

M.MAX = 10
M.MAX_JOURNAL = 100

--- The folder holding the backups of `path` (absolute).
---@param path string
---@return string
function M.dir(path)
  local encoded = path:gsub("%%", "%%25"):gsub("/", "%%2F")
  return vim.fs.normalize(vim.fn.stdpath("state")) .. "/flemma/backups/" .. encoded
end

--- Copies the regular file at `path` into its backup folder and keeps the newest
--- MAX copies. Returns the copy's path, or nil and why.
---@param path string absolute
---@return string|nil copy
---@return string|nil err
function M.save(path)
  local dir = M.dir(path)
  local ok, err = require("flemma.tools.builtin.fs").mkdir_p(dir)
  if not ok then
    return nil, err
  end
  local sec, usec = vim.uv.gettimeofday()
  local copy = ("%s/%d%06d"):format(dir, sec, usec)
  local n = 0
  while vim.uv.fs_stat(copy .. "-" .. n) do
    n = n + 1
  end
  copy = copy .. "-" .. n
  local copied, cerr = vim.uv.fs_copyfile(path, copy, { excl = true })
  if not copied then
    return nil, ("cannot back up %s: %s"):format(path, cerr)
  end
  local names = {}
  for name in vim.fs.dir(dir) do
    names[#names + 1] = name
  end
  table.sort(names, function(a, b)
    local sa, na = a:match("^(%d+)%-(%d+)$")
    local sb, nb = b:match("^(%d+)%-(%d+)$")
    if sa and sb and sa ~= sb then
      return tonumber(sa) < tonumber(sb)
    end
    if sa and sb then
      return tonumber(na) < tonumber(nb)
    end
    return a < b
  end)
  for i = 1, #names - M.MAX do
    vim.uv.fs_unlink(dir .. "/" .. names[i])
  end
  return copy
end

function H.root()
  return vim.fs.normalize(vim.fn.stdpath("state")) .. "/flemma/backups"
end

function H.journal()
  return H.root() .. "/journal.jsonl"
end

---@class flemma.backup.File
---@field path string absolute
---@field copy string|false the backup of the file before the call; false: it did not exist
---@field moved_from? string for a move: where the file was

---@class flemma.backup.Entry
---@field id string
---@field time integer seconds
---@field tool string
---@field summary string
---@field chat? string the chat file the call came from
---@field files flemma.backup.File[]

-- All entries, oldest first, those undone left out.
function H.load()
  local f = io.open(H.journal(), "r")
  if not f then
    return {}
  end
  local entries, undone = {}, {}
  for line in f:lines() do
    local ok, e = pcall(vim.json.decode, line)
    if ok and type(e) == "table" then
      if e.undone then
        undone[e.undone] = true
      elseif type(e.id) == "string" and type(e.files) == "table" then
        entries[#entries + 1] = e
      end
    end
  end
  f:close()
  return vim.tbl_filter(function(e)
    return not undone[e.id]
  end, entries)
end

function H.append(obj)
  local ok, err = require("flemma.tools.builtin.fs").mkdir_p(H.root())
  if not ok then
    return nil, err
  end
  local f, ferr = io.open(H.journal(), "a")
  if not f then
    return nil, ferr
  end
  f:write(vim.json.encode(obj), "\n")
  f:close()
  -- Keep the journal short: rewrite it with the newest entries now and then.
  local st = vim.uv.fs_stat(H.journal())
  if st and st.size > 512 * 1024 then
    local keep = H.load()
    keep = vim.list_slice(keep, math.max(1, #keep - M.MAX_JOURNAL + 1))
    local tmp = H.journal() .. ".tmp"
    local w = io.open(tmp, "w")
    if w then
      for _, e in ipairs(keep) do
        w:write(vim.json.encode(e), "\n")
      end
      w:close()
      vim.uv.fs_rename(tmp, H.journal())
    end
  end
  return true
end

--- Records a tool call's changes as one journal entry. `files`: each path with
--- its backup (false: the file did not exist before). Returns the entry's id.
---@param tool string
---@param summary string
---@param files flemma.backup.File[]
---@param chat? string
---@return string id
function M.record(tool, summary, files, chat)
  local sec, usec = vim.uv.gettimeofday()
  local id = ("%d%06d-%d"):format(sec, usec, math.random(1, 1e9))
  H.append({ id = id, time = sec, tool = tool, summary = summary, chat = chat, files = files })
  return id
end

--- The changes that can be undone, newest first.
---@return flemma.backup.Entry[]
function M.entries()
  local all = H.load()
  local out = {}
  for i = #all, 1, -1 do
    out[#out + 1] = all[i]
  end
  return out
end

-- Puts the bytes of `copy` at `path` atomically: a copy beside it, renamed over it.
function H.restore(copy, path)
  local ok, err = require("flemma.tools.builtin.fs").mkdir_p(vim.fs.dirname(path))
  if not ok then
    return nil, err
  end
  local tmp = ("%s/.%s.flemma-undo-%d"):format(vim.fs.dirname(path), vim.fs.basename(path), vim.uv.hrtime())
  local copied, cerr = vim.uv.fs_copyfile(copy, tmp, { excl = true })
  if not copied then
    return nil, ("cannot restore %s: %s"):format(path, cerr)
  end
  local renamed, rerr = vim.uv.fs_rename(tmp, path)
  if not renamed then
    vim.uv.fs_unlink(tmp)
    return nil, ("cannot restore %s: %s"):format(path, rerr)
  end
  return true
end

--- Undoes a journal entry: each file gets back its bytes from before the call (a
--- file the call created is removed; a moved file goes back). What is there now
--- is backed up first, so an undo can itself be undone from the backups folder.
--- Returns a line saying what was done, or nil and why (nothing is marked undone then).
---@param entry flemma.backup.Entry
---@return string|nil done
---@return string|nil err
function M.undo(entry)
  local done = {}
  for i = #entry.files, 1, -1 do
    local f = entry.files[i]
    local now = vim.uv.fs_lstat(f.path)
    if f.moved_from then
      if vim.uv.fs_lstat(f.moved_from) then
        return nil, ("cannot move %s back: %s exists again"):format(f.path, f.moved_from)
      end
      local ok, err = vim.uv.fs_rename(f.path, f.moved_from)
      if not ok then
        return nil, ("cannot move %s back to %s: %s"):format(f.path, f.moved_from, err)
      end
      done[#done + 1] = ("moved %s back to %s"):format(f.path, f.moved_from)
      now = nil
    end
    if now and now.type == "file" then
      local saved, serr = M.save(f.path)
      if not saved then
        return nil, serr
      end
    end
    if f.copy then
      if not vim.uv.fs_stat(f.copy) then
        return nil, ("the backup %s of %s is gone (at most %d are kept per file)"):format(f.copy, f.path, M.MAX)
      end
      local ok, err = H.restore(f.copy, f.path)
      if not ok then
        return nil, err
      end
      done[#done + 1] = "restored " .. f.path
    elseif not f.moved_from and now then
      local ok, err = vim.uv.fs_unlink(f.path)
      if not ok then
        return nil, ("cannot remove %s: %s"):format(f.path, err)
      end
      done[#done + 1] = ("removed %s (the call created it)"):format(f.path)
    end
  end
  H.append({ undone = entry.id })
  return table.concat(done, "; ")
end

--- The line a tool's result ends with: how to undo the change.
---@return string
function M.hint()
  return "To undo: :Flemma tool:undo (choose this change from the list)."
end

return M
