-- Phase 1 on a large turn: 500 tool uses categorized (approval chain, placeholders
-- written into the buffer) and previewed (virtual lines), in one chat buffer.
local N = 500

local function conversation()
  local lines = { "@You:", "Go.", "", "@Assistant:", "Working." }
  for i = 1, N do
    vim.list_extend(lines, {
      "",
      ("**Tool Use:** `bash` (`toolu_%04d`)"):format(i),
      "",
      "```json",
      ('{ "command": "echo line %d && ls -la /tmp/dir%d", "label": "step %d", "timeout": null }'):format(i, i, i),
      "```",
    })
  end
  return lines
end

local buf
return {
  {
    name = "categorize_preview_500",
    unit = "ms",
    target = 50,
    op = "<=",
    runs = 9,
    setup = function()
      require("flemma").setup({ tools = { autopilot = { enabled = false } } })
      buf = vim.api.nvim_create_buf(true, false)
      vim.api.nvim_set_current_buf(buf)
    end,
    run = function()
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, conversation())
      local t0 = vim.uv.hrtime()
      local counts = require("flemma.cycle").categorize(buf)
      local ms = (vim.uv.hrtime() - t0) / 1e6
      assert(counts and counts.pending == N, "expected 500 pending placeholders")
      assert(#require("flemma.ui.preview").shown(buf) == N, "expected 500 previews")
      return ms
    end,
  },
}
