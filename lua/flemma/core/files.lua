--- Reading files without blocking Neovim. Only regular files are read: a FIFO, a
--- socket or a device is refused (M.refusal, the one check the tools, the
--- attachments and include() make). The tools read on a native thread of their
--- own (M.read: the native file reader, which reports through a descriptor Neovim's
--- loop polls) with a deadline, so a file that never answers (a FIFO swapped in, a
--- file behind a lease, a hung mount) gives an error instead of a frozen editor.
--- M.open_regular opens a file for a read on the main thread without waiting for a
--- FIFO's writer.
local native = require("flemma.core.native")
local util = require("flemma.core.util")

local M = {}
local H = {}

local uv = vim.uv or vim.loop

-- What a file that is not regular is, by the type names of vim.uv.fs_stat.
H.KINDS = {
  directory = "a directory",
  fifo = "a FIFO",
  socket = "a socket",
  char = "a character device",
  block = "a block device",
  link = "a symbolic link",
}

--- Why a file of this type cannot be read ("a FIFO, not a regular file"), or nil
--- for a regular file. `type` is a vim.uv.fs_stat type ("file", "fifo", ...).
---@param type string
---@return string|nil
function M.refusal(type)
  if type == "file" then
    return nil
  end
  return ("%s, not a regular file"):format(H.KINDS[type] or ("a " .. tostring(type) .. " file"))
end

--- Opens a regular file for reading (vim.uv descriptor) without blocking: with
--- O_NONBLOCK, so that a FIFO does not wait for a writer, and refused (closed
--- again) unless fstat says it is a regular file. nil and why when not.
---@param path string
---@return integer|nil fd
---@return string|nil err
---@return table|nil stat
function M.open_regular(path)
  local flags = uv.constants and uv.constants.O_RDONLY or 0
  local nonblock = uv.constants and uv.constants.O_NONBLOCK
  local fd, err = uv.fs_open(path, nonblock and bit.bor(flags, nonblock) or "r", 0)
  if not fd then
    return nil, err
  end
  local st = uv.fs_fstat(fd)
  if not st then
    uv.fs_close(fd)
    return nil, "cannot stat it"
  end
  local refused = M.refusal(st.type)
  if refused then
    uv.fs_close(fd)
    return nil, refused
  end
  return fd, nil, st
end

--- Reads an open file from its start until its end or past `max` bytes (at most
--- `max` + 1 are read, so that a caller can tell a larger file), closes it and returns
--- what was read.
---@param fd integer
---@param max integer
---@return string
function M.read_fd(fd, max)
  local chunks, got = {}, 0
  while got <= max do
    local data = uv.fs_read(fd, math.min(max + 1 - got, 256 * 1024), got)
    if not data or data == "" then
      break
    end
    chunks[#chunks + 1] = data
    got = got + #data
  end
  uv.fs_close(fd)
  return table.concat(chunks)
end

---@class flemma.files.ReadResult
---@field ok boolean
---@field timed_out? boolean
---@field type string "file", "missing", "directory", "fifo", "socket", "char", "block", "other"
---@field err_no integer
---@field message string why it failed
---@field size integer
---@field head string
---@field text string
---@field total_lines integer
---@field shown_lines integer
---@field cut_by integer 0 none, 1 by max_lines, 2 by max_bytes
---@field long_line boolean

-- Reads waiting for their result: id -> { cb, timer }.
H.waiting = {}
H.poll = nil

function H.ensure_poll()
  if H.poll then
    return
  end
  local poll = assert(uv.new_poll(native.fread_fd()))
  poll:start("r", function(err)
    if not err then
      H.drain()
    end
  end)
  H.poll = poll
end

-- Fast context allowed: takes the results and hands them to their callbacks on the
-- main loop.
function H.drain()
  for _, res in ipairs(native.fread_results()) do
    local w = H.waiting[res.id]
    if w then
      H.waiting[res.id] = nil
      H.finish(w, res)
    end
  end
end

function H.finish(w, res)
  if w.timer and not w.timer:is_closing() then
    w.timer:stop()
    w.timer:close()
  end
  vim.schedule(function()
    util.safe(w.cb, "reading " .. w.path)(res)
  end)
end

--- Reads a regular file on a native thread; `cb(result)` is called once, on the
--- main loop, never before M.read returns. `opts.whole`: the bytes (at most
--- max_bytes; cut_by = 2 when there are more); else the lines from first_line
--- (at most max_lines and max_bytes of text; with max_line_bytes, a longer line
--- kept and counted as its first max_line_bytes + 4 bytes), every line counted. After
--- `timeout_ms` the read is given up (result.timed_out). Returns a function that
--- cancels the read (cb is not called then).
---@param path string absolute
---@param opts { whole?: boolean, first_line?: integer, max_lines?: integer, max_bytes: integer, head_bytes?: integer, max_line_bytes?: integer, timeout_ms?: integer }
---@param cb fun(result: flemma.files.ReadResult)
---@return fun() cancel
function M.read(path, opts, cb)
  local ok_start, id, err = pcall(function()
    H.ensure_poll()
    return native.fread_start({
      path = path,
      whole = opts.whole,
      first_line = opts.first_line,
      max_lines = opts.max_lines,
      max_bytes = opts.max_bytes,
      head_bytes = opts.head_bytes,
      max_line_bytes = opts.max_line_bytes,
    })
  end)
  if not ok_start or not id then
    local msg = util.message(ok_start and err or id)
    vim.schedule(function()
      cb({ ok = false, type = "other", err_no = 0, message = "cannot read " .. path .. ": " .. msg })
    end)
    return function() end
  end
  local w = { cb = cb, path = path }
  H.waiting[id] = w
  local timeout = opts.timeout_ms
  if timeout and timeout > 0 then
    w.timer = uv.new_timer()
    w.timer:start(timeout, 0, function()
      if H.waiting[id] ~= w then
        return
      end
      H.waiting[id] = nil
      native.fread_cancel(id)
      H.finish(w, {
        ok = false,
        timed_out = true,
        type = "other",
        err_no = 0,
        message = ("reading %s took longer than %gs and was given up"):format(path, timeout / 1000),
      })
    end)
  end
  return function()
    if H.waiting[id] == w then
      H.waiting[id] = nil
      native.fread_cancel(id)
      if w.timer and not w.timer:is_closing() then
        w.timer:stop()
        w.timer:close()
      end
    end
  end
end

--- Reads waiting for their result.
---@return integer
function M.pending()
  return vim.tbl_count(H.waiting)
end

-- ---------------------------------------------------------------------------
-- Media a tool handed over (an MCP server's image)
-- ---------------------------------------------------------------------------

--- The directory of the images and other media tools hand over as data (an MCP
--- result's image): stdpath("cache")/flemma/media. Its files are named by the
--- sha256 of their content, so a chat can name one only if its author had the
--- content already; flemma.reach lets a chat send them without asking.
---@return string
function M.media_dir()
  return vim.fs.normalize(vim.fn.stdpath("cache") .. "/flemma/media")
end

--- Whether a real path (symlinks resolved) is a file Flemma saved in the media
--- directory (a content-named file directly inside it).
---@param real string
---@return boolean
function M.is_media(real)
  local dir = uv.fs_realpath(M.media_dir())
  if not dir or real:sub(1, #dir + 1) ~= dir .. "/" then
    return false
  end
  return real:sub(#dir + 2):match("^%x+%.%w+$") ~= nil
end

--- Saves media given as base64 into the media directory (once per content) and
--- returns its path; nil and why when it cannot. The file is private (0600) and
--- written whole before it gets its name.
---@param data string base64
---@param bytes string the decoded content
---@param ext string file extension (png, jpg, ...)
---@param digest? string the sha256 of `data` in hex, when computed already (off the main loop)
---@return string|nil path
---@return string|nil err
function M.save_media(data, bytes, ext, digest)
  local dir = M.media_dir()
  if vim.fn.isdirectory(dir) == 0 and vim.fn.mkdir(dir, "p", 448) == 0 then
    return nil, "cannot create " .. dir
  end
  digest = digest or vim.fn.sha256(data)
  local path = ("%s/%s.%s"):format(dir, digest, ext)
  local st = uv.fs_stat(path)
  if st and st.type == "file" and st.size == #bytes then
    return path
  end
  local tmp = ("%s/.%s.%d.tmp"):format(dir, digest:sub(1, 16), uv.os_getpid())
  local fd, err = uv.fs_open(tmp, "w", 384) -- 0600
  if not fd then
    return nil, err
  end
  local ok, werr = uv.fs_write(fd, bytes, 0)
  uv.fs_close(fd)
  if not ok or not uv.fs_rename(tmp, path) then
    os.remove(tmp)
    return nil, werr or ("cannot write " .. path)
  end
  return path
end

return M
