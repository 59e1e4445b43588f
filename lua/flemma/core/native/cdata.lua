--- What the sections share: C arrays of Lua strings, LuaJIT's preallocating table
--- constructor, and the one wrapper of the two event decoders (stream, jsonrpc).
local ffi = require("ffi")
local util = require("flemma.core.util")

-- Used by the other sections only: not part of flemma.core.native.
local S, N = require("flemma.core.native.section").new(true)
local H = {}

--- A handle of the library made on first use (`lib[new]()`, raising "cannot start
--- <what>: <error>" when it fails) and freed with `lib[free]` once collected. Returns
--- `get` (makes it when missing) and `peek` (the handle, or nil before the first get).
---@param new string
---@param free string
---@param what string
---@return fun(): ffi.cdata* get
---@return fun(): ffi.cdata*|nil peek
function S.lazy_handle(new, free, what)
  local handle
  local function get()
    if handle then
      return handle
    end
    local lib = N.lib()
    local h = lib[new]()
    if h == nil then
      util.error(("cannot start %s: %s"):format(what, N.last_error()))
    end
    handle = ffi.gc(h, lib[free])
    return handle
  end
  return get, function()
    return handle
  end
end

-- LuaJIT's preallocating table constructor (plain {} where it is missing).
S.table_new = (function()
  local ok, new = pcall(require, "table.new")
  return ok and new or function()
    return {}
  end
end)()

--- A NULL-terminated `const char *[]` of the strings (anchored by the caller: keep
--- the array and the list alive until the call that uses them returns).
---@param list string[]
---@return ffi.cdata*
function S.cstrings(list)
  local arr = ffi.new("const char *[?]", #list + 1)
  for i, s in ipairs(list) do
    arr[i - 1] = s
  end
  arr[#list] = nil
  return arr
end

-- Pointer and length arrays for a list of lines, kept between calls (they only
-- grow) so that parsing a buffer again allocates nothing here.
H.line_cap = 0
H.line_ptrs = nil
H.line_lens = nil

function H.check_line(what, lines, i)
  util.error(("%s: line %d should be a string, not %s"):format(what, i, type(lines[i])))
end

--- The lines as pointer and length arrays for the C side (reused between calls;
--- valid while `lines` is alive and until the next call).
---@param lines string[]
---@param what string the caller, for the error of a line that is not a string
---@return ffi.cdata* ptrs
---@return ffi.cdata* lens
---@return integer n
function S.pack_lines(lines, what)
  local n = #lines
  if n > H.line_cap then
    local cap = math.max(n, 2 * H.line_cap, 64)
    H.line_ptrs = ffi.new("const char *[?]", cap)
    H.line_lens = ffi.new("size_t[?]", cap)
    H.line_cap = cap
  end
  local ptrs, lens = H.line_ptrs, H.line_lens
  for i = 1, n do
    local l = lines[i]
    if type(l) ~= "string" then
      H.check_line(what, lines, i)
    end
    ptrs[i - 1] = l
    lens[i - 1] = #l
  end
  return ptrs, lens, n
end

--- A Lua string of a C string (`len` bytes, or up to its NUL), nil for NULL.
---@return string|nil
function S.opt_string(ptr, len)
  if ptr == nil then
    return nil
  end
  return len and ffi.string(ptr, len) or ffi.string(ptr)
end

-- ---------------------------------------------------------------------------
-- Event decoders: flemma_stream and flemma_jsonrpc have the same shape (new, feed,
-- finish, free; events as flemma_stream_event), so one class wraps both.
-- ---------------------------------------------------------------------------

H.Decoder = {}
H.Decoder.__index = H.Decoder
H.events_out = nil
H.events_count = nil

function H.decoder_call(self, finish, data)
  local c = self._c
  if not self._h then
    util.error(c.name .. ": the decoder was already finished")
  end
  local lib = N.lib()
  H.events_out = H.events_out or ffi.new("const flemma_stream_event *[1]")
  H.events_count = H.events_count or ffi.new("size_t[1]")
  local rc
  if finish then
    rc = lib[c.finish](self._h, H.events_out, H.events_count)
  else
    rc = lib[c.feed](self._h, data, #data, H.events_out, H.events_count)
  end
  if rc ~= 0 then
    util.error(c.name .. ": " .. N.last_error())
  end
  return N.stream_events(H.events_out[0], tonumber(H.events_count[0]))
end

--- Decodes the next bytes: the events decoded from them (see M.stream_events).
---@param bytes string
---@return table[] events
function H.Decoder:feed(bytes)
  if type(bytes) ~= "string" then
    util.error(self._c.name .. ": feed() takes a string, not " .. type(bytes))
  end
  return H.decoder_call(self, false, bytes)
end

--- Ends the stream; the events end with an `end` event. The decoder is freed.
---@return table[] events
function H.Decoder:finish()
  local events = H.decoder_call(self, true)
  local h = self._h
  self._h = nil
  N.lib()[self._c.free](ffi.gc(h, nil))
  return events
end

--- A decoder object with :feed(bytes) and :finish() around the handle `h` of the
--- C object `name` (flemma_<name>_feed, _finish, _free); freed when collected.
---@param name "stream"|"jsonrpc"
---@param h ffi.cdata*
---@return table
H.classes = {}

function S.decoder(name, h)
  local c = H.classes[name]
  if not c then
    c = { name = name, feed = "flemma_" .. name .. "_feed", finish = "flemma_" .. name .. "_finish" }
    c.free = "flemma_" .. name .. "_free"
    H.classes[name] = c
  end
  local lib = N.lib()
  return setmetatable({ _h = ffi.gc(h, lib[c.free]), _c = c }, H.Decoder)
end

return S
