--- The file reader (the header's "File reader" section): files read on native threads
--- so that the main loop never blocks on one.
local ffi = require("ffi")
local cdata = require("flemma.core.native.cdata")

local S, N = require("flemma.core.native.section").new()
local H = {}

--- The file reader (created on first use, freed when collected).
---@return ffi.cdata*
S.freader, H.peek = cdata.lazy_handle("flemma_freader_new", "flemma_freader_free", "the file reader")

--- The descriptor that becomes readable when file reads finished.
---@return integer
function S.fread_fd()
  return N.lib().flemma_freader_fd(S.freader())
end

--- Starts reading a file on a native thread; nil and the error when it cannot start.
---@param o { path: string, whole?: boolean, first_line?: integer, max_lines?: integer, max_bytes: integer, head_bytes?: integer, max_line_bytes?: integer }
---@return integer|nil id
---@return string|nil err
function S.fread_start(o)
  local lib = N.lib()
  local opts = ffi.new("flemma_fread_opts")
  opts.path = o.path
  opts.whole = o.whole and 1 or 0
  opts.first_line = o.first_line or 1
  opts.max_lines = o.max_lines or 0
  opts.max_bytes = o.max_bytes
  opts.head_bytes = o.head_bytes or 0
  opts.max_line_bytes = o.max_line_bytes or 0
  local id = ffi.new("int64_t[1]")
  if lib.flemma_freader_start(S.freader(), opts, id) ~= 0 then
    return nil, N.last_error()
  end
  return tonumber(id[0])
end

--- Drops the result of a read.
---@param id integer
function S.fread_cancel(id)
  if H.peek() then
    N.lib().flemma_freader_cancel(H.peek(), id)
  end
end

H.file_types = nil

-- The name of each file_type value (FLEMMA_FILE_*).
function H.type_names(C)
  H.file_types = H.file_types
    or {
      [C.FLEMMA_FILE_MISSING] = "missing",
      [C.FLEMMA_FILE_REGULAR] = "file",
      [C.FLEMMA_FILE_DIRECTORY] = "directory",
      [C.FLEMMA_FILE_FIFO] = "fifo",
      [C.FLEMMA_FILE_SOCKET] = "socket",
      [C.FLEMMA_FILE_CHAR_DEVICE] = "char",
      [C.FLEMMA_FILE_BLOCK_DEVICE] = "block",
      [C.FLEMMA_FILE_OTHER] = "other",
    }
  return H.file_types
end

--- Resets the descriptor and returns the finished reads as Lua tables
--- ({ id, ok, err_no, type, message, size, head, text, total_lines, shown_lines,
--- cut_by, long_line }; cut_by is FLEMMA_CUT_*: 0 none, 1 by lines, 2 by bytes).
---@return table[]
function S.fread_results()
  if not H.peek() then
    return {}
  end
  local lib = N.lib()
  local types = H.type_names(N.C)
  lib.flemma_freader_ack(H.peek())
  local out = {}
  while true do
    local r = lib.flemma_freader_next(H.peek())
    if r == nil then
      break
    end
    out[#out + 1] = {
      id = tonumber(r.id),
      ok = r.ok ~= 0,
      err_no = r.err_no,
      type = types[r.file_type] or "other",
      message = ffi.string(r.message),
      size = tonumber(r.size),
      head = ffi.string(r.head, r.head_len),
      text = ffi.string(r.text, r.text_len),
      total_lines = tonumber(r.total_lines),
      shown_lines = tonumber(r.shown_lines),
      cut_by = r.cut_by,
      long_line = r.long_line ~= 0,
    }
    lib.flemma_fread_result_free(r)
  end
  return out
end

--- Reads started whose result was not taken or dropped yet.
---@return integer
function S.fread_running()
  return H.peek() and N.lib().flemma_freader_running(H.peek()) or 0
end

return S
