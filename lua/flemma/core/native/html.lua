--- HTML conversion (the header's "HTML conversion" section): HTML into Markdown or
--- plain text, in one linear pass. The `fetch` tool converts pages on the process
--- manager's worker thread (spawn's decoder {"kind": "fetch"}); this call runs on the
--- caller's thread, for small texts.
local ffi = require("ffi")

local S, N = require("flemma.core.native.section").new()

--- The Markdown (format "markdown", the default) or plain text ("text") of an HTML
--- text, or nil and the error.
---@param html string
---@param format? "markdown"|"text"
---@return string|nil
---@return string|nil
function S.html_convert(html, format)
  local lib = N.lib()
  local C = N.C
  local f = format == "text" and C.FLEMMA_HTML_TEXT or C.FLEMMA_HTML_MARKDOWN
  local out, len = ffi.new("char *[1]"), ffi.new("size_t[1]")
  if lib.flemma_html_convert(html, #html, f, out, len) ~= 0 then
    return nil, N.last_error()
  end
  local text = ffi.string(out[0], tonumber(len[0]))
  lib.flemma_html_free(out[0])
  return text
end

return S
