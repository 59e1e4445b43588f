--- Flemma: a .chat buffer as a conversation with a language model that calls tools.
local M = {}

-- Modules with a `setup(config)` function, called in this order by setup().
local subsystems = {
  "flemma.ui.highlights",
  "flemma.tools",
  "flemma.tools.approval",
  "flemma.tools.mcp",
}

--- Configures Flemma. Safe to call more than once; each call starts from the defaults.
---@param opts? table see `:help flemma-config`
function M.setup(opts)
  local config = require("flemma.core.config").setup(opts)
  for _, name in ipairs(subsystems) do
    require(name).setup(config)
  end
  vim.g.flemma_setup_done = true
end

--- Token usage and cost: `{ last, buffer, session }` for a buffer (default: the
--- current one). `last` is the last response's record (nil before the first),
--- `buffer` the totals of the buffer, `session` the totals of all buffers since
--- Neovim started. Each record: input_tokens, output_tokens, thinking_tokens,
--- cache_read_tokens, cache_write_tokens, cost (dollars; nil when unknown), requests.
---@param bufnr? integer
function M.usage(bufnr)
  return require("flemma.provider.usage").get(bufnr)
end

--- The statusline text of a buffer (default: the current one): provider, model,
--- thinking level, running tools and the session's cost, e.g.
--- "anthropic claude-sonnet-4-6 · thinking high · running bash · $0.0123".
---@param bufnr? integer
---@return string
function M.statusline(bufnr)
  return require("flemma.ui.statusline").text(bufnr)
end

return M
