--- Flemma: a .chat buffer as a conversation with a language model that calls tools.
local M = {}

-- Modules with a `setup(config)` function, called in this order by setup().
local subsystems = {
  "flemma.highlights",
  "flemma.tools",
  "flemma.tools.approval",
}

--- Configures Flemma. Safe to call more than once; each call starts from the defaults.
---@param opts? table see `:help flemma-config`
function M.setup(opts)
  local config = require("flemma.config").setup(opts)
  for _, name in ipairs(subsystems) do
    require(name).setup(config)
  end
  vim.g.flemma_setup_done = true
end

return M
