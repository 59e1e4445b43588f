-- MCP tools/call results, from the answer to the tool result, the longest the main
-- loop is held (a 1 ms timer's gaps while it is waited for, and the synchronous part
-- of the call): a 5 MB PNG (a screenshot tool; saved under the sha256 of its base64
-- text) and a 10 MB text (cut to tools.truncate, the whole text saved and redacted).
local mcp = require("flemma.tools.mcp")

local N = 0

-- The longest block while `res` becomes a tool result; the result.
local function measure(res)
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
  return worst, result
end

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
      local worst, result = measure(res)
      local path = assert(result.output:match("saved as (%S+%.png)"), result.output)
      os.remove(path)
      return worst
    end,
  },
  {
    name = "mcp_text_result_10mb",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    run = function()
      N = N + 1
      local text = string.rep("a line of a long answer from a server\n", 270000) .. N
      local worst, result = measure({ content = { { type = "text", text = text } } })
      local path = assert(result.output:match("Full text: (%S+)%]"), result.output:sub(1, 200))
      assert(vim.fn.getfsize(path) == #text, "the whole text was not saved")
      os.remove(path)
      return worst
    end,
  },
}
