-- Lazy entry point: cheap definitions only. Nothing here loads the native library.
if vim.g.loaded_flemma then
  return
end
vim.g.loaded_flemma = true

-- Detection lives in ftdetect/chat.lua; repeated here (it is idempotent) for setups
-- that source plugin/ without ftdetect/.
vim.filetype.add({ extension = { chat = "chat" } })

vim.api.nvim_create_user_command("Flemma", function(opts)
  require("flemma.commands").run(opts)
end, {
  nargs = "*",
  desc = "Flemma: :Flemma {subcommand}",
  complete = function(...)
    return require("flemma.commands").complete(...)
  end,
})

require("flemma.highlights").setup()
