--- Truncation of tool output: head and tail windows by lines and bytes, never
--- splitting a UTF-8 code point. This is `ctx.truncate` for tools.
local native = require("flemma.core.native")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.truncate.Opts
---@field max_lines? integer lines to keep (default M.MAX_LINES)
---@field max_bytes? integer bytes to keep (default M.MAX_BYTES)

---@class flemma.truncate.Result
---@field content string the kept text
---@field truncated boolean
---@field truncated_by "lines"|"bytes"|nil which limit cut the text
---@field total_lines integer
---@field total_bytes integer
---@field output_lines integer
---@field output_bytes integer
---@field last_line_partial boolean tail: the kept line is only the end of an over-long line
---@field first_line_exceeds_limit boolean head: the first line alone is over max_bytes

--- Lines kept by default.
M.MAX_LINES = 2000
--- Bytes kept by default (50 KB).
M.MAX_BYTES = 51200

--- "512B", "12.1KB", "1.0MB".
---@param bytes number
---@return string
function M.format_size(bytes)
  return native.format_size(bytes)
end

function H.limits(fname, text, opts)
  if type(text) ~= "string" then
    util.error(("truncate.%s: `text` should be a string, not %s"):format(fname, type(text)))
  end
  if opts ~= nil and type(opts) ~= "table" then
    util.error(("truncate.%s: `opts` should be a table, not %s"):format(fname, type(opts)))
  end
  opts = opts or {}
  local limits = {}
  for _, key in ipairs({ "max_lines", "max_bytes" }) do
    local v = opts[key]
    if v ~= nil and (type(v) ~= "number" or v < 1 or v ~= math.floor(v)) then
      util.error(("truncate.%s: `%s` should be a positive integer, not %s"):format(fname, key, vim.inspect(v)))
    end
    limits[key] = v
  end
  return limits.max_lines or M.MAX_LINES, limits.max_bytes or M.MAX_BYTES
end

--- Keeps the first lines and bytes (for file reads). A first line longer than
--- max_bytes is cut with a marker and `first_line_exceeds_limit` set.
---@param text string
---@param opts? flemma.truncate.Opts
---@return flemma.truncate.Result
function M.truncate_head(text, opts)
  local max_lines, max_bytes = H.limits("truncate_head", text, opts)
  return native.truncate("head", text, max_lines, max_bytes)
end

--- Keeps the last lines and bytes (for command output). A last line longer than
--- max_bytes keeps its end after a marker, with `last_line_partial` set.
---@param text string
---@param opts? flemma.truncate.Opts
---@return flemma.truncate.Result
function M.truncate_tail(text, opts)
  local max_lines, max_bytes = H.limits("truncate_tail", text, opts)
  return native.truncate("tail", text, max_lines, max_bytes)
end

return M
