-- Lazy entry point: cheap definitions only. Nothing here loads the native library.
if vim.g.loaded_flemma then
  return
end
vim.g.loaded_flemma = true

-- Detection lives in ftdetect/chat.lua; repeated here (it is idempotent) for setups
-- that source plugin/ without ftdetect/.
vim.filetype.add({ extension = { chat = "chat" } })

-- The file a chat buffer was just read from: the live document of a long chat
-- is first built from that file's text when the buffer still holds it.
vim.api.nvim_create_autocmd("BufReadPost", {
  group = vim.api.nvim_create_augroup("flemma.core.read", { clear = true }),
  pattern = "*.chat",
  callback = function(ev)
    require("flemma.core.read").note(ev.buf)
  end,
})

vim.api.nvim_create_user_command("Flemma", function(opts)
  require("flemma.commands").run(opts)
end, {
  nargs = "*",
  desc = "Flemma: :Flemma {subcommand}",
  complete = function(...)
    return require("flemma.commands").complete(...)
  end,
})

require("flemma.ui.highlights").setup()
