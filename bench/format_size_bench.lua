-- format_size through the FFI: the first vertical slice of the native core.
local native = require("flemma.core.native")

local N = 200000
return {
  {
    name = "format_size",
    unit = "ns/call",
    target = 500,
    op = "<=",
    runs = 9,
    run = function()
      local t0 = vim.uv.hrtime()
      local sink = 0
      for i = 1, N do
        sink = sink + #native.format_size(i * 37)
      end
      assert(sink > 0)
      return (vim.uv.hrtime() - t0) / N
    end,
  },
}
