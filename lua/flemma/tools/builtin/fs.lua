--- File helpers shared by the read, write and edit tools: binary detection, parent directory creation and atomic writes (temporary file + rename).
local M = {}
local H = {}

local uv = vim.uv

--- Creates dir and its missing parents.
---@param dir string absolute path
---@return boolean ok
---@return string|nil err
function M.mkdir_p(dir)
  local stat = uv.fs_stat(dir)
  if stat then
    if stat.type ~= "directory" then
      return false, dir .. " exists and is not a directory"
    end
    return true
  end
  local parent = vim.fs.dirname(dir)
  if parent and parent ~= dir then
    local ok, err = M.mkdir_p(parent)
    if not ok then
      return false, err
    end
  end
  local ok, err, code = uv.fs_mkdir(dir, 493) -- 0755
  if not ok and code ~= "EEXIST" then
    return false, ("cannot create directory %s: %s"):format(dir, err)
  end
  return true
end

H.magic = {
  { "\137PNG\r\n\26\n", "PNG image" },
  { "\255\216\255", "JPEG image" },
  { "GIF8", "GIF image" },
  { "%PDF-", "PDF document" },
  { "PK\3\4", "ZIP archive" },
  { "\127ELF", "ELF executable" },
  { "\31\139", "gzip archive" },
  { "RIFF", "RIFF media file" },
}

--- Whether a file's first bytes look binary (NUL bytes), and what it is if known.
---@param head string the first bytes (up to 8KB)
---@return boolean binary
---@return string kind e.g. "PNG image" or "binary data"
function M.sniff(head)
  for _, m in ipairs(H.magic) do
    if head:sub(1, #m[1]) == m[1] then
      return true, m[2]
    end
  end
  if head:find("\0", 1, true) then
    return true, "binary data"
  end
  return false, "text"
end

-- Images and documents a provider can be shown, by their first bytes.
H.media = {
  { "\137PNG\r\n\26\n", "image/png" },
  { "\255\216\255", "image/jpeg" },
  { "GIF87a", "image/gif" },
  { "GIF89a", "image/gif" },
  { "%PDF-", "application/pdf" },
}

--- The MIME type of an image (png, jpeg, gif, webp) or PDF from a file's first
--- bytes (its content, never its name), or nil.
---@param head string the first bytes
---@return string|nil mime
function M.media_type(head)
  for _, m in ipairs(H.media) do
    if head:sub(1, #m[1]) == m[1] then
      return m[2]
    end
  end
  if head:sub(1, 4) == "RIFF" and head:sub(9, 12) == "WEBP" then
    return "image/webp"
  end
  return nil
end

--- The file a write to `path` ends up in: the target of a symlink (even a dangling
--- one), else path itself.
---@param path string
---@return string
function M.write_target(path)
  for _ = 1, 40 do
    local lstat = uv.fs_lstat(path)
    if not lstat or lstat.type ~= "link" then
      return path
    end
    local target = uv.fs_readlink(path)
    if not target then
      return path
    end
    if target:sub(1, 1) ~= "/" then
      target = vim.fs.dirname(path) .. "/" .. target
    end
    path = vim.fs.normalize(target)
  end
  return path
end

--- Writes content to path atomically: a temporary file beside it, then a rename.
--- Missing parent directories are created; an existing file keeps its permissions.
---@param path string absolute path (not a symlink: see write_target)
---@param content string
---@return boolean ok
---@return string|nil err
function M.atomic_write(path, content)
  local dir = vim.fs.dirname(path)
  local ok, err = M.mkdir_p(dir)
  if not ok then
    return false, err
  end
  local existing = uv.fs_stat(path)
  if existing and existing.type == "directory" then
    return false, path .. " is a directory"
  end
  local tmp = ("%s/.%s.flemma-%d-%d.tmp"):format(dir, vim.fs.basename(path), uv.os_getpid(), uv.hrtime() % 1e9)
  local fd, open_err = uv.fs_open(tmp, "wx", existing and existing.mode % 4096 or 420) -- 0644
  if not fd then
    return false, ("cannot write %s: %s"):format(path, open_err)
  end
  local written, write_err = uv.fs_write(fd, content, 0)
  local synced = written == #content and uv.fs_fsync(fd)
  uv.fs_close(fd)
  if written ~= #content or not synced then
    uv.fs_unlink(tmp)
    return false, ("cannot write %s: %s"):format(path, write_err or "short write")
  end
  if existing then
    uv.fs_chmod(tmp, existing.mode % 4096)
  end
  local renamed, rename_err = uv.fs_rename(tmp, path)
  if not renamed then
    uv.fs_unlink(tmp)
    return false, ("cannot replace %s: %s"):format(path, rename_err)
  end
  return true
end

--- Number of lines of a text (a final line without newline counts).
---@param text string
---@return integer
function M.count_lines(text)
  if text == "" then
    return 0
  end
  local _, n = text:gsub("\n", "")
  if text:sub(-1) ~= "\n" then
    n = n + 1
  end
  return n
end

return M
