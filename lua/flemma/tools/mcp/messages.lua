--- JSON-RPC messages from the native decoders' events (the stdio decoder "jsonrpc" and
--- the stream kind "mcp"): a `jsonrpc` event carries the message as compact JSON with
--- every string value over 64 KiB taken out ("" in its place), and the `blob` events
--- after it carry those strings and their paths (made by the decoder, not read from the
--- server's text). Only the small rest goes through vim.json.decode on the main loop;
--- each string is put back at its path. The events of one message may come in more
--- than one batch: an assembler keeps a message until its last blob.
local M = {}
local H = {}

---@class flemma.mcp.Assembler
---@field pending? { msg: table, kind: string, left: integer, err?: string }
---@field on_drop fun(why: string)
local Assembler = {}
Assembler.__index = Assembler

--- A new assembler, one per stream of events (a server's stdout, an HTTP response).
--- `on_drop(why)` hears of each message dropped because its blobs did not fit it (one
--- line, for the log).
---@param on_drop fun(why: string)
---@return flemma.mcp.Assembler
function M.new(on_drop)
  return setmetatable({ on_drop = on_drop }, Assembler)
end

--- Puts `data` at `path` (JSON text: an array of object keys and 0-based array
--- indices) into msg, where the decoder left "". nil and why when the path does not
--- lead there (then the message is not to be trusted).
---@return true|nil ok
---@return string? err
function H.put(msg, path, data)
  local ok, keys = pcall(vim.json.decode, path)
  if not ok or type(keys) ~= "table" or #keys == 0 then
    return nil, "a blob's path is no array of keys: " .. path:sub(1, 80)
  end
  local at = msg
  for i, k in ipairs(keys) do
    if type(at) ~= "table" then
      return nil, "a blob's path leads through a " .. type(at)
    end
    if type(k) == "number" then
      if k < 0 or k ~= math.floor(k) or not vim.islist(at) then
        return nil, "a blob's path has index " .. tostring(k) .. " where there is no array"
      end
      k = k + 1
    elseif type(k) ~= "string" or vim.islist(at) and next(at) ~= nil then
      return nil, "a blob's path has a key where there is no object"
    end
    if i == #keys then
      if at[k] ~= "" then
        return nil, "a blob's path does not lead to its place"
      end
      at[k] = data
      return true
    end
    at = at[k]
  end
end

--- One decoded event: a complete message and its kind, or nothing (a message that
--- waits for its blobs, or was dropped: see on_drop; an event of another type).
---@param ev table a `jsonrpc` or `blob` event
---@return table? msg
---@return string? kind
function Assembler:feed(ev)
  if ev.type == "jsonrpc" then
    if self.pending then
      self.pending = nil
      self.on_drop("a " .. tostring(ev.kind) .. " message came before the blobs of the one before it")
    end
    local ok, msg = pcall(vim.json.decode, ev.json)
    if not ok or type(msg) ~= "table" then
      return nil
    end
    if (ev.blobs or 0) == 0 then
      return msg, ev.kind
    end
    self.pending = { msg = msg, kind = ev.kind, left = ev.blobs }
  elseif ev.type == "blob" then
    local p = self.pending
    if not p then
      self.on_drop("a long string came without its message")
      return nil
    end
    if not p.err then
      local _, err = H.put(p.msg, ev.path, ev.data)
      p.err = err
    end
    p.left = p.left - 1
    if p.left > 0 then
      return nil
    end
    self.pending = nil
    if p.err then
      self.on_drop(("a %s message was dropped: %s"):format(p.kind, p.err))
      return nil
    end
    return p.msg, p.kind
  end
  return nil
end

return M
