--- Small request-building helpers shared by the provider kinds.
local M = {}

--- A tool's input schema as JSON wants it: a copy (nil: an object schema), with an
--- empty `properties` encoded as `{}` rather than `[]`.
---@param schema table|nil
---@return table
function M.schema(schema)
  local s = vim.deepcopy(schema or { type = "object" })
  if type(s.properties) == "table" and next(s.properties) == nil then
    s.properties = vim.empty_dict()
  end
  return s
end

--- A tool call's input as a JSON text ("{}" for none or an empty one).
---@param input table|nil
---@return string
function M.arguments(input)
  if type(input) ~= "table" or next(input) == nil then
    return "{}"
  end
  return vim.json.encode(input)
end

return M
