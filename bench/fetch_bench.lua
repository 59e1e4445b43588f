-- The `fetch` tool on a 5 MB HTML page from a loopback server (spec/support/
-- llm_server.py; its host:port exempted with tools.fetch.allow_hosts):
--   fetch_blocking_5mb   the main loop's longest blocking (a 1 ms timer's lateness)
--                        while the page is fetched, converted (natively, on the
--                        process manager's worker thread), truncated and its whole
--                        text saved (ms); the note gives the same timer's lateness
--                        with nothing running, for the machine's load
--   html_convert_5mb     the native conversion alone of the same page (ms; on the
--                        worker thread in the tool, measured here on the caller's)
local tools = require("flemma.tools")
local native = require("flemma.core.native")

local H = {}
H.PIECE = '<li><p>Item {n}: <a href="/doc/{n}">a link</a> with <b>bold</b>, <code>code()</code> &amp; text</p></li>\n'
H.COUNT = 45000 -- about 4.8 MB (under the 5 MB cap)

function H.page()
  local parts = { "<html><head><title>t</title><style>p{}</style></head><body><h1>Bench</h1><ul>\n" }
  for n = 0, H.COUNT - 1 do
    parts[#parts + 1] = (H.PIECE:gsub("{n}", tostring(n)))
  end
  parts[#parts + 1] = "</ul></body></html>"
  return table.concat(parts)
end

function H.setup()
  if H.web then
    return nil
  end
  if vim.fn.executable("curl") ~= 1 or vim.fn.executable("python3") ~= 1 then
    return "curl and python3 are needed"
  end
  H.web = require("spec.support.llm_server").start()
  require("flemma").setup({
    tools = {
      autopilot = { enabled = false },
      fetch = { enabled = true, allow_hosts = { ("127.0.0.1:%d"):format(H.web.port) }, timeout = 120 },
    },
  })
  return nil
end

function H.teardown()
  if H.web then
    H.web:stop()
    H.web = nil
  end
end

function H.idle_late(ms)
  local timer = vim.uv.new_timer()
  local last, late = vim.uv.hrtime(), 0
  timer:start(1, 1, function()
    local now = vim.uv.hrtime()
    late = math.max(late, (now - last) / 1e6 - 1)
    last = now
  end)
  vim.wait(ms)
  timer:stop()
  timer:close()
  return late
end

H.idle = 0

return {
  {
    name = "fetch_blocking_5mb",
    unit = "ms",
    target = 5,
    runs = 5,
    setup = H.setup,
    teardown = H.teardown,
    run = function()
      H.web:script({
        {
          gen = {
            head = "<html><body><h1>Bench</h1><ul>\n",
            piece = H.PIECE,
            count = H.COUNT,
            tail = "</ul></body></html>",
          },
          content_type = "text/html",
        },
      })
      local result
      local timer = vim.uv.new_timer()
      local last, late = vim.uv.hrtime(), 0
      timer:start(1, 1, function()
        local now = vim.uv.hrtime()
        late = math.max(late, (now - last) / 1e6 - 1)
        last = now
      end)
      local t0 = vim.uv.hrtime()
      tools.execute(0, { id = "bench", name = "fetch", input = { url = H.web:url("/page") } }, function(r)
        result = r
      end)
      assert(
        vim.wait(120000, function()
          return result ~= nil
        end, 1),
        "the fetch did not end"
      )
      timer:stop()
      timer:close()
      assert(result.success, result.error)
      local path = (result.output or ""):match("Full text: (%S+)%]")
      if path then
        os.remove(path)
      end
      H.idle = math.max(H.idle, H.idle_late((vim.uv.hrtime() - t0) / 1e6))
      return late
    end,
    note = function()
      return ("a %d-item list page (~5 MB); the same timer idle as long: up to %.1f ms late"):format(H.COUNT, H.idle)
    end,
  },
  {
    name = "html_convert_5mb",
    unit = "ms",
    target = 200,
    runs = 5,
    setup = function()
      H.html = H.html or H.page()
      return nil
    end,
    run = function()
      local t0 = vim.uv.hrtime()
      local out = assert(native.html_convert(H.html))
      assert(out:find("Item 44999", 1, true))
      return (vim.uv.hrtime() - t0) / 1e6
    end,
  },
}
