-- An MCP tools/call result holding a 5 MB PNG (a screenshot tool): from the answer to
-- the tool result, the longest the main loop is held (a 1 ms timer's gaps while it
-- is waited for). The image is saved under the sha256 of its base64 text.
local mcp = require("flemma.tools.mcp")

local N = 0

return {
  {
    name = "mcp_image_result_5mb",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    run = function()
      N = N + 1
      -- New content each run: the file is written each time.
      local bytes = "\137PNG\r\n\26\n" .. string.rep("p", 5 * 1000 * 1000) .. tostring(vim.uv.hrtime()) .. N
      local res = { content = { { type = "image", mimeType = "image/png", data = vim.base64.encode(bytes) } } }
      local result
      local worst, last = 0, vim.uv.hrtime()
      local timer = vim.uv.new_timer()
      timer:start(1, 1, function()
        local now = vim.uv.hrtime()
        worst = math.max(worst, (now - last) / 1e6)
        last = now
      end)
      vim.wait(20, function()
        return false
      end, 1)
      last = vim.uv.hrtime()
      -- The tool's own path (result_async where there is one); its synchronous part
      -- counts as a block too.
      local t0 = vim.uv.hrtime()
      if mcp.result_async then
        mcp.result_async("bench", res, function(r)
          result = r
        end)
      else
        result = mcp.result("bench", res)
      end
      worst = math.max(worst, (vim.uv.hrtime() - t0) / 1e6)
      vim.wait(30000, function()
        return result ~= nil
      end, 1)
      vim.wait(5, function()
        return false
      end, 1)
      timer:stop()
      timer:close()
      local path = assert(result.output:match("saved as (%S+%.png)"), result.output)
      os.remove(path)
      return worst
    end,
  },
}
