--- The isolated Lua interpreter (the header's "Isolated Lua interpreter" section),
--- made and called only by flemma.isolate, which keeps the budgets.
local ffi = require("ffi")

local S, N = require("flemma.core.native.section").new()

--- A new isolated interpreter from trusted modules ({ name = source }, as JSON text);
--- `main` returns its entry points; `memory` (bytes, nil: 64 MB) is the most it may
--- hold. Freed by the garbage collector, or at once with isolate_free.
---@param modules_json string
---@param main string
---@param memory? integer
---@return ffi.cdata*|nil handle
---@return string|nil err
function S.isolate_new(modules_json, main, memory)
  local lib = N.lib()
  local out = ffi.new("flemma_isolate*[1]")
  if lib.flemma_isolate_new(modules_json, #modules_json, main, memory or 0, out) ~= 0 then
    return nil, N.last_error()
  end
  return ffi.gc(out[0], lib.flemma_isolate_free)
end

--- Calls an entry point with JSON arguments (an array, as text); the decoded result:
--- { ok = true, values = {...} } or { ok = false, error = string, limit = "time"|"budget"|"memory"|nil }.
--- cpu_ms and wall_ms (nil: the interpreter's own 35 ms and 1 s) are what is left for
--- the call; stopped with less than its own limits, it reports the limit "budget".
---@param iso ffi.cdata*
---@param fn string
---@param args_json string
---@param cpu_ms? number
---@param wall_ms? number
---@return table
function S.isolate_call(iso, fn, args_json, cpu_ms, wall_ms)
  local lib = N.lib()
  local out = ffi.new("const char*[1]")
  local len = ffi.new("size_t[1]")
  if lib.flemma_isolate_call(iso, fn, args_json, #args_json, cpu_ms or 0, wall_ms or 0, out, len) ~= 0 then
    return { ok = false, error = N.last_error() }
  end
  return vim.json.decode(ffi.string(out[0], len[0]), { luanil = { object = true, array = true } })
end

--- The CPU time (ms) the interpreter's last call, or its creation, used.
---@param iso ffi.cdata*
---@return number
function S.isolate_cpu_ms(iso)
  return tonumber(N.lib().flemma_isolate_cpu_ms(iso))
end

--- The memory (bytes) the interpreter holds (the most it has held: its arena keeps
--- what it took until it is freed).
---@param iso ffi.cdata*
---@return integer
function S.isolate_peak(iso)
  return tonumber(N.lib().flemma_isolate_peak(iso))
end

--- Frees an interpreter now (its handle must not be used again).
---@param iso ffi.cdata*
function S.isolate_free(iso)
  local lib = N.lib()
  ffi.gc(iso, nil)
  lib.flemma_isolate_free(iso)
end

return S
