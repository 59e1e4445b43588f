-- Flemma's chat buffers: keys, previews. Loads no native code until first use.
if vim.b.did_flemma_ftplugin then
  return
end
vim.b.did_flemma_ftplugin = true
vim.bo.commentstring = "<!-- %s -->"
require("flemma.keymaps").attach(vim.api.nvim_get_current_buf())
