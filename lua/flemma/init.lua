--- Flemma: a .chat buffer as a conversation with a language model that calls tools.
local M = {}

--- Hooks run by setup(), in registration order, with the validated config.
--- Subsystems (tools, approval, keymaps) add themselves here.
local setup_hooks = {}

---@param fn fun(config: flemma.Config)
function M._on_setup(fn)
  setup_hooks[#setup_hooks + 1] = fn
end

--- Configures Flemma. Safe to call more than once; each call starts from the defaults.
---@param opts? table see `:help flemma-config`
function M.setup(opts)
  local config = require("flemma.config").setup(opts)
  require("flemma.highlights").setup(config)
  for _, fn in ipairs(setup_hooks) do
    fn(config)
  end
  vim.g.flemma_setup_done = true
end

return M
