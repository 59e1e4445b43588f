--- API keys are never accepted in setup() or frontmatter: the option names that look
--- like one, and the one message refusing them. Pure Lua: flemma.isolated.opt uses it
--- inside the frontmatter interpreter, flemma.core.config and flemma.policy.secrets in
--- Neovim.
local M = {}

--- Names that look like a key in setup() or frontmatter: refused there.
M.forbidden =
  { api_key = true, apikey = true, key = true, token = true, access_token = true, secret = true, password = true }

--- The message refusing a key at `path` (e.g. "providers.openai.api_key").
---@param path string
---@return string
function M.refusal(path)
  return ("`%s`: API keys are never accepted in configuration or frontmatter; put the key in the environment variable named by `api_key_env`, in the system keyring (secret-tool store --label=flemma service <provider> key api), or register a resolver with require('flemma.secrets').register; a local server needs no key: require('flemma').setup({ provider = \"ollama\", model = \"...\" })"):format(
    path
  )
end

return M
