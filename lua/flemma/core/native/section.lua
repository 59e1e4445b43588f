--- The start of each section file of flemma.core.native (init.lua lists them):
---   local S, N = require("flemma.core.native.section").new()
--- S is the section's table: init.lua merges its public functions into
--- flemma.core.native (not those of an internal section, new(true), which serves the
--- other sections only). N reads flemma.core.native (its library, constants and the
--- other sections' functions) once init.lua has loaded it and bound the section with
--- S.__bind; a section cannot require it while it loads.
local M = {}

---@param internal? boolean the section serves the other sections only
---@return table S the section's table
---@return table N flemma.core.native, once bound
function M.new(internal)
  local N = {}
  local S = { __internal = internal or nil }
  function S.__bind(native)
    setmetatable(N, { __index = native })
  end
  return S, N
end

return M
