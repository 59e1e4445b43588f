--- The public entry `require("flemma.document")` (see :help flemma-api): the module lives in
--- lua/flemma/chat/document.lua.
return require("flemma.chat.document")
