-- File references at send time (:help flemma-attachments) in a 10 MB chat whose last
-- @You: names a text file, a PNG and a 5 MB PDF: after an edit of that message, the
-- attachment step of the send (flemma.attachments.expand) looks only at messages
-- that changed and reads only files that changed. One measurement: expand after an
-- edit of the last line (document.get, not measured here, comes before it), in ms.
local gen = dofile(_G.FLEMMA_ROOT .. "/bench/chat_gen.lua")

local H = {}

local function write(path, content)
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
end

function H.setup()
  require("flemma").setup({})
  H.dir = vim.fn.tempname()
  vim.fn.mkdir(H.dir, "p")
  write(H.dir .. "/notes.md", string.rep("A line of notes about the module.\n", 2000))
  write(H.dir .. "/pixel.png", string.rep("\137PNG\r\n\26\n", 1000))
  write(H.dir .. "/paper.pdf", "%PDF-1.4\n" .. string.rep("stream of bytes ", 5 * 65536))
  local lines = gen.generate(10 * 1024 * 1024)
  -- The generated chat ends with pending placeholders: answer them so it ends in a
  -- plain @You: naming the files.
  vim.list_extend(lines, { "", "@You:", "Read @./notes.md, look at (@./pixel.png) and @./paper.pdf.", "Go on." })
  local buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_buf_set_name(buf, H.dir .. "/bench.chat")
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  H.buf, H.n = buf, 0
  local attachments = require("flemma.chat.attachments")
  local doc = require("flemma.chat.document").get(buf)
  local t0 = vim.uv.hrtime()
  local out = attachments.expand(buf, doc)
  H.first_ms = (vim.uv.hrtime() - t0) / 1e6
  assert(out and out ~= doc, "the files were not attached")
  H.messages = #doc.messages
end

function H.run()
  local buf = H.buf
  H.n = H.n + 1
  local n = vim.api.nvim_buf_line_count(buf)
  vim.api.nvim_buf_set_lines(buf, n - 1, n, false, { ("Go on (%d)."):format(H.n) })
  local doc = require("flemma.chat.document").get(buf)
  local t0 = vim.uv.hrtime()
  local out = require("flemma.chat.attachments").expand(buf, doc)
  local ms = (vim.uv.hrtime() - t0) / 1e6
  local last = out.messages[#out.messages]
  assert(#last.parts == 4 and last.parts[4].kind == "file", "the files were not attached")
  return ms
end

function H.teardown()
  vim.api.nvim_buf_delete(H.buf, { force = true })
  vim.fn.delete(H.dir, "rf")
end

return {
  {
    name = "attach_edit_then_expand_10mb",
    unit = "ms",
    target = 5,
    runs = 9,
    setup = H.setup,
    run = H.run,
    teardown = H.teardown,
    note = function()
      return ("%d messages; the first expand (every message scanned, 5 MB read and encoded): %.0f ms"):format(
        H.messages,
        H.first_ms
      )
    end,
  },
}
