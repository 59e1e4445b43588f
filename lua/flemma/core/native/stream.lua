--- The stream decoder (the header's "Stream decoder" section): a provider's streamed
--- response decoded into normalized events, and the one converter of
--- flemma_stream_event structs into Lua tables (the shapes of STREAM_API.md), used
--- for the JSON-RPC decoder and the process manager's decoded output as well.
local bit = require("bit")
local ffi = require("ffi")
local cdata = require("flemma.core.native.cdata")

local S, N = require("flemma.core.native.section").new()
local H = {}

local TEXT, THINKING, TOOL_INPUT_DELTA -- FLEMMA_STREAM_* (the deltas), read by H.init
H.types = nil -- event type value -> name, from the header: FLEMMA_STREAM_TOOL_USE_START -> "tool_use_start"
H.convert = nil -- event type value -> function(e, a, b) returning the event's table
H.split = nil -- the events whose text may be cut (text, thinking, tool input) -> their field

function H.b(e)
  return e.b ~= nil and ffi.string(e.b, e.b_len) or ""
end

-- A JSON-RPC message; `blobs`: how many `blob` events follow it, each a long string
-- taken out of `json` (which holds "" in its place).
function H.jsonrpc(e, a)
  return { type = "jsonrpc", kind = H.jsonrpc_kinds[e.status], method = a, json = H.b(e), blobs = tonumber(e.usage[0]) }
end

-- A string taken out of the message before it: `path`, its place there (a JSON array
-- of keys and 0-based indices), and `data`, the string.
function H.blob(e, a)
  return { type = "blob", path = a, data = H.b(e) }
end

-- The converters of the events with fields of their own, keyed by the header's
-- constants (the deltas are built in H.event, the others are { type, index }); `a` is
-- the event's first string.
function H.converters(C)
  local usage = N.enum_names("flemma_stream_usage", "FLEMMA_STREAM_")
  local band = bit.band
  return {
    [C.FLEMMA_STREAM_HTTP] = function(e, a)
      local headers = {}
      for name, value in a:gmatch("([^\n:]+): ([^\n]*)\n") do
        headers[name] = value
      end
      return { type = "http", status = e.status, headers = headers }
    end,
    [C.FLEMMA_STREAM_MESSAGE_START] = function(e, a)
      return { type = "message_start", id = a, model = H.b(e) }
    end,
    [C.FLEMMA_STREAM_THINKING_SIGNATURE] = function(e, a)
      return { type = "thinking_signature", index = e.index, signature = a }
    end,
    [C.FLEMMA_STREAM_REDACTED_THINKING] = function(e, a)
      return { type = "redacted_thinking", index = e.index, data = a }
    end,
    [C.FLEMMA_STREAM_TOOL_USE_START] = function(e, a)
      return { type = "tool_use_start", index = e.index, id = a, name = H.b(e) }
    end,
    [C.FLEMMA_STREAM_USAGE] = function(e)
      local ev = { type = "usage" }
      for k, field in pairs(usage) do
        if band(e.flags, bit.lshift(1, k)) ~= 0 then
          ev[field] = tonumber(e.usage[k])
        end
      end
      return ev
    end,
    [C.FLEMMA_STREAM_STOP] = function(_, a)
      return { type = "stop", reason = a }
    end,
    [C.FLEMMA_STREAM_ERROR] = function(e, a)
      return { type = "error", error_type = a, message = H.b(e) }
    end,
    [C.FLEMMA_STREAM_END] = function(e, a)
      local ev = { type = "end", complete = e.status == C.FLEMMA_STREAM_END_COMPLETE }
      if band(e.flags, C.FLEMMA_STREAM_END_F_BODY) ~= 0 then
        ev.body = a
      end
      return ev
    end,
    [C.FLEMMA_STREAM_JSONRPC] = H.jsonrpc,
    [C.FLEMMA_STREAM_BLOB] = H.blob,
    [C.FLEMMA_STREAM_SSE_ID] = function(_, a)
      return { type = "sse_id", id = a }
    end,
    [C.FLEMMA_STREAM_SEARCH_MATCH] = function(e, a)
      return {
        type = "search_match",
        path = a,
        text = H.b(e),
        line = e.index,
        context = e.status == C.FLEMMA_STREAM_SEARCH_CONTEXT,
        cut = band(e.flags, C.FLEMMA_STREAM_SEARCH_F_CUT) ~= 0,
      }
    end,
    [C.FLEMMA_STREAM_SEARCH_FILE] = function(e, a)
      return {
        type = "search_file",
        path = a,
        mtime = tonumber(e.usage[0]),
        size = tonumber(e.usage[1]),
        directory = e.status == C.FLEMMA_STREAM_SEARCH_DIRECTORY,
      }
    end,
    [C.FLEMMA_STREAM_PAGE] = function(e, a)
      local u = e.usage
      local saved = H.b(e)
      return {
        type = "page",
        text = a,
        cut = e.status == C.FLEMMA_STREAM_PAGE_CUT,
        path = saved ~= "" and saved or nil,
        total_lines = tonumber(u[0]),
        total_bytes = tonumber(u[1]),
        kept_lines = tonumber(u[2]),
        kept_bytes = tonumber(u[3]),
      }
    end,
    [C.FLEMMA_STREAM_SEARCH_SUMMARY] = function(e, a)
      local u = e.usage
      return {
        type = "search_summary",
        found = tonumber(u[0]),
        searched = tonumber(u[1]),
        binary = tonumber(u[2]),
        unreadable = tonumber(u[3]),
        files = tonumber(u[4]),
        error = a ~= "" and a or nil,
      }
    end,
  }
end

-- Reads the header's constants on first use.
function H.init()
  local C = N.C
  H.types = N.enum_names("flemma_stream_event_type", "FLEMMA_STREAM_")
  H.jsonrpc_kinds = {
    [C.FLEMMA_JSONRPC_REQUEST] = "request",
    [C.FLEMMA_JSONRPC_NOTIFICATION] = "notification",
    [C.FLEMMA_JSONRPC_RESULT] = "result",
    [C.FLEMMA_JSONRPC_ERROR] = "error",
  }
  H.split = {
    [C.FLEMMA_STREAM_TEXT] = "text",
    [C.FLEMMA_STREAM_THINKING] = "text",
    [C.FLEMMA_STREAM_TOOL_INPUT_DELTA] = "json",
  }
  H.convert = H.converters(C)
  TEXT, THINKING, TOOL_INPUT_DELTA = C.FLEMMA_STREAM_TEXT, C.FLEMMA_STREAM_THINKING, C.FLEMMA_STREAM_TOOL_INPUT_DELTA
end

--- The Lua table of one flemma_stream_event (`index` is the provider's 0-based
--- content block index).
function H.event(e)
  local t = e.type
  local a = e.a ~= nil and ffi.string(e.a, e.a_len) or ""
  -- Most events are deltas: built here, without a call through the table.
  if t == TEXT then
    return { type = "text", index = e.index, text = a }
  elseif t == THINKING then
    return { type = "thinking", index = e.index, text = a }
  elseif t == TOOL_INPUT_DELTA then
    return { type = "tool_input_delta", index = e.index, json = a }
  end
  local convert = H.convert[t]
  if convert then
    return convert(e, a)
  end
  local name = H.types[t]
  if name then
    return { type = name, index = e.index }
  end
  return { type = "unknown", code = t }
end

--- Lua tables for the events at `evs` from index i (from byte `off` of its text)
--- on, until about `budget` bytes were taken (their text, and 64 bytes for each
--- event). A text, thinking or tool input longer than what is left is cut on a
--- UTF-8 boundary: its first bytes now as an event of their own, the rest later,
--- as if the provider had sent it in two deltas.
---@return table[] out
---@return integer i the next event
---@return integer off the byte of its text to go on from
---@return integer budget what is left of it
function S.stream_slice(evs, count, i, off, budget)
  if not H.convert then
    H.init()
  end
  local out = {}
  while i < count and budget > 0 do
    local e = evs[i]
    local field = H.split[e.type]
    local left = tonumber(e.a_len) - off
    if field and (left > budget or off > 0) then
      local n = left
      if left > budget then
        local bytes = ffi.cast("const uint8_t *", e.a)
        n = math.max(budget, 1)
        -- Not inside a UTF-8 sequence: back off its continuation bytes.
        while n > 1 and bit.band(bytes[off + n], 0xC0) == 0x80 do
          n = n - 1
        end
      end
      out[#out + 1] = { type = H.types[e.type], index = e.index, [field] = ffi.string(e.a + off, n) }
      budget = budget - n - 64
      if n < left then
        off = off + n
        break
      end
      i, off = i + 1, 0
    else
      out[#out + 1] = H.event(e)
      budget = budget - left - tonumber(e.b_len) - 64
      i, off = i + 1, 0
    end
  end
  return out, i, off, budget
end

--- Lua tables for the flemma_stream_event structs at `evs` from index `from`
--- (default 0) up to `count`.
---@return table[]
function S.stream_events(evs, count, from)
  if not H.convert then
    H.init()
  end
  from = from or 0
  local out = cdata.table_new(count - from, 0)
  for i = from, count - 1 do
    out[i - from + 1] = H.event(evs[i])
  end
  return out
end

--- A decoder of a streamed response (curl --dump-header - output) for a
--- provider kind ("anthropic", "openai_chat", "openai", "vertex"), or "mcp" (a response of
--- MCP's Streamable HTTP transport: `jsonrpc` and `sse_id` events); nil and a message for another.
---@param kind string
---@return table|nil decoder with :feed(bytes) and :finish()
---@return string? err
function S.stream_new(kind)
  if type(kind) ~= "string" then
    return nil, "stream: the kind should be a string, not " .. type(kind)
  end
  local s = N.lib().flemma_stream_new(kind)
  if s == nil then
    return nil, N.last_error()
  end
  return cdata.decoder("stream", s)
end

return S
