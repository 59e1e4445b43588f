--- Thinking across providers: a provider gets back its own signed thinking as it
--- came; thinking written by another provider goes as plain text by default
--- (`parameters.thinking_foreign = "text"`), in the provider's unsigned reasoning
--- field where its API has one (`"preserve"`), or not at all (`"drop"`). A foreign
--- signature is never sent; redacted (encrypted) thinking of another provider is
--- unreadable and always dropped.
local M = {}

--- How a thinking part goes to a provider kind: "own" (its own thinking: signature
--- or redacted data as it came), "text", "preserve", or nil (not sent).
---@param part { provider?: string, signature?: string, redacted?: boolean }
---@param kind string
---@param params table the request's parameters
---@return "own"|"text"|"preserve"|nil
function M.mode(part, kind, params)
  if part.provider == kind then
    return "own"
  end
  if part.redacted then
    return nil
  end
  local how = params and params.thinking_foreign or "text"
  if how == "drop" then
    return nil
  elseif how == "preserve" then
    return "preserve"
  end
  return "text"
end

--- The plain-text form of another provider's thinking.
---@param text string
---@return string
function M.as_text(text)
  return "<thinking>\n" .. text .. "\n</thinking>"
end

return M
