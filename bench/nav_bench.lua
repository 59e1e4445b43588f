-- Moving in a long chat (:help flemma-moving): the keys read only the messages
-- they pass over, so after an edit (the live document follows it) a motion in
-- a 10 MB chat costs about what it costs in a short one. One measurement: an
-- edit of a line in the middle, then ]m, 2[m, yam and gd pressed there, in ms.
local gen = dofile(_G.FLEMMA_ROOT .. "/bench/chat_gen.lua")

local H = {}

local function press(keys)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), "mx", false)
end

function H.setup()
  require("flemma").setup({})
  local lines = gen.generate(10 * 1024 * 1024)
  local buf = vim.api.nvim_create_buf(true, false)
  vim.bo[buf].undolevels = -1
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modified = false
  vim.api.nvim_set_current_buf(buf)
  vim.bo[buf].filetype = "chat"
  vim.wait(500)
  -- A tool use in the middle of the chat.
  local mid = math.floor(#lines / 2)
  while not lines[mid]:find("^%*%*Tool Use:%*%*") do
    mid = mid + 1
  end
  H.buf, H.use, H.n = buf, mid, 0
  require("flemma.chat.document").get(buf) -- the first load, off the measurement
  vim.o.report = 100000 -- no "23 lines yanked"
  local t0 = vim.uv.hrtime()
  require("flemma.chat.document").parse(lines)
  H.parse_ms = (vim.uv.hrtime() - t0) / 1e6
end

function H.run()
  local buf, use = H.buf, H.use
  H.n = H.n + 1
  local t0 = vim.uv.hrtime()
  -- Typing in the assistant's prose above the tool use.
  vim.api.nvim_buf_set_lines(buf, use - 3, use - 2, false, { ("Edited %d: the plan changes."):format(H.n) })
  vim.api.nvim_win_set_cursor(0, { use - 3, 0 })
  press("]m") -- the @You: with the results
  press("2[m") -- back past the assistant's marker to the previous @You:
  press("yam")
  vim.api.nvim_win_set_cursor(0, { use, 0 })
  press("gd") -- to its result
  local ms = (vim.uv.hrtime() - t0) / 1e6
  assert(vim.api.nvim_get_current_line():find("^%*%*Tool Result:%*%*"), "gd did not reach the result")
  return ms
end

function H.teardown()
  vim.api.nvim_buf_delete(H.buf, { force = true })
end

return {
  {
    name = "nav_10mb_edit_then_motions",
    unit = "ms",
    target = 5,
    runs = 9,
    setup = H.setup,
    run = H.run,
    teardown = H.teardown,
    note = function()
      return ("one full parse of the same chat: %.0f ms"):format(H.parse_ms)
    end,
  },
}
