--- Escaping of model text (the header's "Escaping of model text" section, :help
--- flemma-escaping): a streaming escaper, and unescaping of parsed text.
local ffi = require("ffi")
local util = require("flemma.core.util")

local S, N = require("flemma.core.native.section").new()
local H = {}

H.Escaper = {}
H.Escaper.__index = H.Escaper
H.esc_out = nil
H.esc_len = nil

--- Escapes the next piece of streamed text; returns what can be written now (the
--- start of a line that may still become a marker is held back). With `final`
--- the text ends here: what is held is written as a complete line.
---@param text string
---@param final? boolean
---@return string
function H.Escaper:feed(text, final)
  local lib = N.lib()
  H.esc_out = H.esc_out or ffi.new("const char *[1]")
  H.esc_len = H.esc_len or ffi.new("size_t[1]")
  if lib.flemma_escaper_feed(self._e, text, #text, final and 1 or 0, H.esc_out, H.esc_len) ~= 0 then
    util.error("escape: " .. N.last_error())
  end
  local n = tonumber(H.esc_len[0])
  return n > 0 and ffi.string(H.esc_out[0], n) or ""
end

--- The code fence the escaped text leaves open: its closing line ("```"), or nil.
---@return string|nil
function H.Escaper:open_fence()
  local ch, len = ffi.new("char[1]"), ffi.new("int64_t[1]")
  if N.lib().flemma_escaper_fence(self._e, ch, len) ~= 0 then
    util.error("escape: " .. N.last_error())
  end
  if ch[0] == 0 then
    return nil
  end
  return string.rep(string.char(ch[0]), tonumber(len[0]))
end

--- Starts afresh: no held text, no open fence.
function H.Escaper:reset()
  N.lib().flemma_escaper_reset(self._e)
end

--- A streaming escaper of model text: text fed in pieces split anywhere is written
--- as the whole would be, and never has the shape of structure.
---@return { feed: fun(self, text: string, final?: boolean): string, open_fence: fun(self): string|nil, reset: fun(self) }
function S.escaper_new()
  local lib = N.lib()
  local e = lib.flemma_escaper_new()
  if e == nil then
    util.error("escape: " .. N.last_error())
  end
  return setmetatable({ _e = ffi.gc(e, lib.flemma_escaper_free) }, H.Escaper)
end

H.unescape_buf, H.unescape_cap = nil, 0
H.unescape_len = nil

--- The text of a message as the model or user meant it: one backslash removed from
--- each line that has the shape of structure after one or more backslashes.
--- Text without a line starting with a backslash is returned as it is.
---@param text string
---@return string
function S.unescape(text)
  if text:byte(1) ~= 92 and not text:find("\n\\", 1, true) then
    return text
  end
  local n = #text
  if H.unescape_cap < n then
    H.unescape_buf, H.unescape_cap = ffi.new("char[?]", n), n
  end
  H.unescape_len = H.unescape_len or ffi.new("size_t[1]")
  if N.lib().flemma_unescape(text, n, H.unescape_buf, H.unescape_len) ~= 0 then
    util.error("unescape: " .. N.last_error())
  end
  local out = ffi.string(H.unescape_buf, tonumber(H.unescape_len[0]))
  if H.unescape_cap > 1024 * 1024 then
    H.unescape_buf, H.unescape_cap = nil, 0
  end
  return out
end

return S
