--- The JSON-RPC 2.0 line decoder (the header's "JSON-RPC 2.0 line decoder" section),
--- the MCP stdio framing; its events are converted by stream.lua.
local util = require("flemma.core.util")
local cdata = require("flemma.core.native.cdata")

local S, N = require("flemma.core.native.section").new()

--- A JSON-RPC 2.0 line decoder (flemma_jsonrpc_new): `max_line` bytes per line (nil:
--- 16 MiB), `max_depth` levels of nesting (nil: 64). Its :feed(bytes) returns events
--- `{ type = "jsonrpc", kind, method, json, blobs }` (each followed by `blobs` events
--- `{ type = "blob", path, data }`: the string values over 64 KiB, taken out of `json`,
--- which holds "" at `path`) and `{ type = "error", error_type, message }` for the
--- complete lines in them; :finish() decodes a last line without
--- newline and ends with an `end` event, then frees the decoder.
---@param max_line? integer
---@param max_depth? integer
---@return table decoder with :feed(bytes) and :finish()
function S.jsonrpc_new(max_line, max_depth)
  local d = N.lib().flemma_jsonrpc_new(max_line or 0, max_depth or 0)
  if d == nil then
    util.error("jsonrpc: " .. N.last_error())
  end
  return cdata.decoder("jsonrpc", d)
end

return S
