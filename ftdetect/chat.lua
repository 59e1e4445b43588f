-- Files ending in `.chat` are Flemma conversations. Kept in ftdetect/ so that plugin
-- managers that load Flemma on `ft = "chat"` (lazy.nvim sources ftdetect/ of lazy
-- plugins at startup) know the filetype before the plugin itself is loaded.
vim.filetype.add({ extension = { chat = "chat" } })
