--- Truncation (the header's "Truncation" section): sizes as text, head and tail windows.
local ffi = require("ffi")
local util = require("flemma.core.util")

local S, N = require("flemma.core.native.section").new()
local H = {}

H.size_buf = nil

--- "512B", "12.1KB", "1.0MB".
---@param bytes number
---@return string
function S.format_size(bytes)
  if type(bytes) ~= "number" then
    util.error("format_size: `bytes` should be a number, not " .. type(bytes))
  end
  local lib = N.lib()
  H.size_buf = H.size_buf or ffi.new("char[32]")
  local n = lib.flemma_format_size(bytes, H.size_buf, 32)
  if n < 0 then
    util.error("format_size: " .. N.last_error())
  end
  return ffi.string(H.size_buf, math.min(n, 31))
end

H.truncated_by = nil

--- Truncates text to a head or tail window. Limits <= 0 mean none.
---@param which "head"|"tail"
---@param text string
---@param max_lines integer
---@param max_bytes integer
---@return flemma.truncate.Result
function S.truncate(which, text, max_lines, max_bytes)
  local lib = N.lib()
  local fn = which == "head" and lib.flemma_truncate_head or lib.flemma_truncate_tail
  local r = fn(text, #text, max_lines, max_bytes)
  if r == nil then
    util.error("truncate_" .. which .. ": " .. N.last_error())
  end
  local C = N.C
  H.truncated_by = H.truncated_by or { [C.FLEMMA_CUT_BY_LINES] = "lines", [C.FLEMMA_CUT_BY_BYTES] = "bytes" }
  local out = {
    content = ffi.string(r.content, r.content_len),
    truncated = r.truncated ~= 0,
    truncated_by = H.truncated_by[r.truncated_by],
    total_lines = tonumber(r.total_lines),
    total_bytes = tonumber(r.total_bytes),
    output_lines = tonumber(r.output_lines),
    output_bytes = tonumber(r.output_bytes),
    last_line_partial = r.last_line_partial ~= 0,
    first_line_exceeds_limit = r.first_line_exceeds_limit ~= 0,
  }
  lib.flemma_truncate_result_free(r)
  return out
end

return S
