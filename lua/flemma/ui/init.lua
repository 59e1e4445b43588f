--- The look of chat buffers: markdown underneath (tree-sitter when Neovim has the
--- `markdown` parser, else syntax/chat.vim), Flemma's own highlights, folds,
--- rulers and signs (flemma.ui.view).
local M = {}

--- Whether tree-sitter highlights buffer buf as markdown (started here when it can).
function M.start_markdown(buf)
  local ui = require("flemma.core.config").get().ui
  if not ui.treesitter then
    return false
  end
  -- tree-sitter parses the whole buffer before it draws (0.10: seconds for a few MB of
  -- markdown); Vim's syntax only looks at what is drawn.
  local size = vim.api.nvim_buf_get_offset(buf, vim.api.nvim_buf_line_count(buf))
  if size > ui.treesitter_max_bytes then
    return false
  end
  local ok = pcall(vim.treesitter.language.add, "markdown")
  if not ok then
    return false
  end
  pcall(vim.treesitter.language.register, "markdown", "chat")
  return (pcall(vim.treesitter.start, buf, "markdown"))
end

--- Called by ftplugin/chat.lua for the current window and buffer.
function M.attach(buf)
  if not M.start_markdown(buf) then
    vim.bo[buf].syntax = "chat"
  end
  require("flemma.ui.view").attach(buf)
end

--- Whether buffer buf has its highlights, folds and marks (attached since its last load).
---@param buf integer
---@return boolean
function M.attached(buf)
  return require("flemma.ui.view").attached(buf)
end

function M.detach(buf)
  require("flemma.ui.view").detach(buf)
end

return M
