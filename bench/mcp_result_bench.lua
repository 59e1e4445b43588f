-- MCP tools/call results, from the answer to the tool result, the longest the main
-- loop is held (a 1 ms timer's gaps while it is waited for, and the synchronous part
-- of the call): a 5 MB PNG (a screenshot tool; saved under the sha256 of its base64
-- text) and a 10 MB text (cut to tools.truncate, the whole text saved and redacted).
-- mcp_large_result_block: the same for a whole tools/call of a real stdio server
-- (spec/support/mcp_blob_server.py) answering a 10 MB text, from the call to the
-- result: the message's framing and decoding too (its long text never goes through
-- vim.json.decode: the native decoder hands it on as it is).
local mcp = require("flemma.tools.mcp")
local root = _G.FLEMMA_ROOT

local N = 0
local BLOB_DIR

-- The longest block while `res` becomes a tool result (or, a function, while it calls
-- its argument with the result); the result.
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
  if type(res) == "function" then
    res(function(r)
      result = r
    end)
  elseif mcp.result_async then
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
  {
    name = "mcp_large_result_block",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    setup = function()
      if vim.fn.executable("python3") == 0 then
        return "no python3"
      end
      -- The server writes what it sends here.
      BLOB_DIR = vim.fn.tempname()
      vim.fn.mkdir(BLOB_DIR, "p")
      require("flemma").setup({
        tools = { autopilot = { enabled = false } },
        mcp = {
          servers = { blobs = { command = "python3", args = { root .. "/spec/support/mcp_blob_server.py", BLOB_DIR } } },
          timeout = 60,
        },
      })
      mcp.start()
      local tools = require("flemma.tools")
      assert(vim.wait(30000, tools.is_ready, 10), "the server never listed its tools")
    end,
    teardown = function()
      mcp.stop_all()
      vim.fn.delete(BLOB_DIR, "rf")
      require("flemma").setup({})
    end,
    run = function()
      local tools = require("flemma.tools")
      local worst, result = measure(function(done)
        tools.execute(0, { id = "b1", name = "blobs:text", input = { bytes = 10000000 } }, done)
      end)
      assert(result.success, vim.inspect(result.error))
      local path = assert(result.output:match("Full text: (%S+)%]"), result.output:sub(1, 200))
      assert(vim.fn.getfsize(path) >= 10000000, "the whole text was not saved")
      os.remove(path)
      return worst
    end,
  },
}
