--- Shell words (the header's "Shell words" section): a command line split into its
--- simple commands and their words, for per-command approval rules.
local ffi = require("ffi")

local S, N = require("flemma.core.native.section").new()

--- The simple commands of a command line, each a list of words after quote removal
--- (`dynamic[i]` true when word i holds an expansion, substitution or glob), or nil
--- and the reason when the line is not fully understood.
---@param cmd string
---@return { words: string[], dynamic: boolean[] }[]|nil commands
---@return string|nil reason
function S.shellwords(cmd)
  local lib = N.lib()
  local res = lib.flemma_shellwords_parse(cmd, #cmd)
  if res == nil then
    return nil, N.last_error()
  end
  res = ffi.gc(res, lib.flemma_shellwords_free)
  local reason = ffi.new("const char *[1]")
  if lib.flemma_shellwords_ok(res, reason) ~= 1 then
    local why = ffi.string(reason[0])
    lib.flemma_shellwords_free(ffi.gc(res, nil))
    return nil, why
  end
  local data, len = ffi.new("const char *[1]"), ffi.new("size_t[1]")
  local command, dynamic = ffi.new("int32_t[1]"), ffi.new("int32_t[1]")
  local out = {}
  for i = 0, tonumber(lib.flemma_shellwords_count(res)) - 1 do
    lib.flemma_shellwords_word(res, i, data, len, command, dynamic)
    local c = command[0] + 1
    out[c] = out[c] or { words = {}, dynamic = {} }
    local cmd_t = out[c]
    cmd_t.words[#cmd_t.words + 1] = ffi.string(data[0], tonumber(len[0]))
    cmd_t.dynamic[#cmd_t.words] = dynamic[0] == 1
  end
  lib.flemma_shellwords_free(ffi.gc(res, nil))
  return out
end

return S
