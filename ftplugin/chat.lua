-- Flemma's chat buffers: keys, previews, highlights, folds, the @You: a new chat starts
-- with. Loads no native code until first use.
if vim.b.did_flemma_ftplugin then
  return
end
vim.b.did_flemma_ftplugin = true
vim.bo.commentstring = "<!-- %s -->"
require("flemma.keymaps").attach(vim.api.nvim_get_current_buf())
require("flemma.ui.nav").start_empty(vim.api.nvim_get_current_buf())
require("flemma.ui").attach(vim.api.nvim_get_current_buf())
