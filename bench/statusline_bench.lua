-- The statusline (require("flemma").statusline(), the lualine component) runs at
-- every redraw: in a 1 MB chat with frontmatter and a session of recorded usage it
-- must stay well under a millisecond.
local N = 2000

local buf
return {
  {
    name = "statusline_chat_1mb",
    unit = "us/call",
    target = 100,
    op = "<=",
    runs = 7,
    setup = function()
      require("flemma").setup({ parameters = { thinking = "high" } })
      local lines = { "```lua", "flemma.opt.temperature = 0.5", "```" }
      local chunk = {}
      for i = 1, 20 do
        chunk[i] = ("line %d of a long answer with some words to make it wide enough"):format(i)
      end
      while #table.concat(lines, "\n") < 1e6 do
        lines[#lines + 1] = "@You:"
        vim.list_extend(lines, chunk)
        lines[#lines + 1] = "@Assistant:"
        vim.list_extend(lines, chunk)
      end
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/bench.chat"))
      buf = vim.api.nvim_get_current_buf()
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
      local usage = require("flemma.provider.usage")
      for i = 1, 50 do
        usage.add(
          buf,
          usage.record({ input_tokens = 1000 * i, output_tokens = 100 }, {
            kind = "anthropic",
            provider = "anthropic",
            model = i % 2 == 0 and "claude-sonnet-4-6" or "claude-haiku-4-5",
          })
        )
      end
      require("flemma").statusline(buf)
    end,
    run = function()
      local statusline = require("flemma").statusline
      local t0 = vim.uv.hrtime()
      for _ = 1, N do
        statusline(buf)
      end
      return (vim.uv.hrtime() - t0) / 1e3 / N
    end,
  },
}
