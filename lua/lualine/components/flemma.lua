--- lualine component: `sections = { lualine_x = { "flemma" } }` shows Flemma's
--- provider, model, thinking level, running tools and session cost in chat buffers
--- (require("flemma").statusline()). Option `all_buffers = true` shows it everywhere.
local ok, base = pcall(require, "lualine.component")
local M = ok and base:extend() or {}

function M:update_status()
  local bufnr = vim.api.nvim_get_current_buf()
  local all = type(self) == "table" and type(self.options) == "table" and self.options.all_buffers
  if not all and vim.bo[bufnr].filetype ~= "chat" then
    return ""
  end
  local okl, text = pcall(require("flemma").statusline, bufnr)
  return okl and text or ""
end

return M
