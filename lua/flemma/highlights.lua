--- Highlight groups, all defined with `default = true` so colorschemes win.
local M = {}

---@param config? flemma.Config
function M.setup(config)
  config = config or require("flemma.config").get()
  local preview = config.highlights.tool_preview
  if type(preview) == "string" then
    vim.api.nvim_set_hl(0, "FlemmaToolPreview", { link = preview, default = true })
  else
    local spec = vim.deepcopy(preview)
    spec.default = true
    vim.api.nvim_set_hl(0, "FlemmaToolPreview", spec)
  end
  vim.api.nvim_set_hl(0, "FlemmaToolSpinner", { link = "DiagnosticInfo", default = true })
  vim.api.nvim_set_hl(0, "FlemmaToolOutput", { link = "Comment", default = true })
end

return M
