-- Flemma's chat buffers: keys, previews, highlights, folds, the @You: a new chat starts
-- with. Loads no native code until first use.
-- Once per load of the buffer: `:e`, `:e!` and a reload read the file again after
-- unloading it (which detaches the view) and fire FileType again, while b: variables
-- stay, so the guard is whether the view is attached, not a b: variable.
local ui = require("flemma.ui")
if ui.attached(vim.api.nvim_get_current_buf()) then
  return
end
vim.bo.commentstring = "<!-- %s -->"
require("flemma.ui.keymaps").attach(vim.api.nvim_get_current_buf())
require("flemma.ui.nav").start_empty(vim.api.nvim_get_current_buf())
ui.attach(vim.api.nvim_get_current_buf())
