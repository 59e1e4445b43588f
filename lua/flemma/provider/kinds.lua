--- The registry of provider kinds: one module each (flemma.provider.<kind>).
local M = {}

--- Kinds implemented here, by the module that builds their requests.
M.modules = {
  anthropic = "flemma.provider.anthropic",
  openai_chat = "flemma.provider.openai_chat",
  openai = "flemma.provider.openai",
  vertex = "flemma.provider.vertex",
}

--- The module of a kind, or nil and a message.
---@param kind string
---@return flemma.provider.Kind|nil
---@return string|nil err
function M.get(kind)
  local mod = M.modules[kind]
  if not mod then
    local names = vim.tbl_keys(M.modules)
    table.sort(names)
    return nil,
      ("provider kind `%s` is not supported by this version of Flemma (supported: %s)"):format(
        tostring(kind),
        table.concat(names, ", ")
      )
  end
  return require(mod)
end

return M
