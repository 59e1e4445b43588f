-- Approval of file tool calls: each `write` is checked against the project roots
-- (paths resolved natively, protected paths refused), so phase 1 of a large batch of
-- calls stays fast.
local N = 2000

local buf
return {
  {
    name = "approval_write_inside_project",
    unit = "us/call",
    target = 200,
    op = "<=",
    runs = 7,
    setup = function()
      require("flemma").setup({})
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      buf = vim.api.nvim_create_buf(true, false)
      vim.api.nvim_buf_set_name(buf, dir .. "/bench.chat")
    end,
    run = function()
      local approval = require("flemma.tools.approval")
      local t0 = vim.uv.hrtime()
      for i = 1, N do
        local d = approval.resolve("write", { path = "src/f" .. i .. ".txt", content = "x" }, { bufnr = buf })
        assert(d == "approve", d)
      end
      return (vim.uv.hrtime() - t0) / 1e3 / N
    end,
  },
}
