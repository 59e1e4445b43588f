-- MCP (issue 26): a call of the everything server's `echo` from <C-]> to its result
-- in the buffer, against the same call made by a bare stdio client (no Flemma) to a
-- second copy of the server: the line is Flemma's cost above the server's own time.
-- And the longest the main loop is held while a server starts (a 1 ms timer's gaps).
local root = _G.FLEMMA_ROOT
local EVERYTHING = root .. "/.deps/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

-- A bare client: node with pipes, one request at a time, the answer's arrival timed
-- in the read callback.
local Direct = {}
Direct.__index = Direct

--- The server started (its handshake not yet sent).
function Direct.spawn()
  local self = setmetatable({ buf = "", waiting = nil, id = 0 }, Direct)
  self.stdin, self.stdout = vim.uv.new_pipe(), vim.uv.new_pipe()
  self.proc = assert(vim.uv.spawn("node", {
    args = { EVERYTHING, "stdio" },
    stdio = { self.stdin, self.stdout, nil },
  }, function() end))
  self.stdout:read_start(function(_, data)
    if not data then
      return
    end
    self.buf = self.buf .. data
    while true do
      local nl = self.buf:find("\n", 1, true)
      if not nl then
        break
      end
      local line = self.buf:sub(1, nl - 1)
      self.buf = self.buf:sub(nl + 1)
      if self.waiting and line:find('"id":' .. self.waiting.id .. "[,}]") then
        self.waiting.t1 = vim.uv.hrtime()
      end
    end
  end)
  return self
end

--- The handshake: initialize, notifications/initialized.
function Direct:init()
  self:call(
    "initialize",
    { protocolVersion = "2025-06-18", capabilities = vim.empty_dict(), clientInfo = { name = "bench", version = "0" } }
  )
  self.stdin:write(vim.json.encode({ jsonrpc = "2.0", method = "notifications/initialized" }) .. "\n")
  return self
end

function Direct.start()
  return Direct.spawn():init()
end

--- Milliseconds from writing the request to its answer's arrival.
function Direct:call(method, params)
  self.id = self.id + 1
  local w = { id = self.id }
  self.waiting = w
  local t0 = vim.uv.hrtime()
  self.stdin:write(vim.json.encode({ jsonrpc = "2.0", id = self.id, method = method, params = params }) .. "\n")
  assert(
    vim.wait(10000, function()
      return w.t1 ~= nil
    end, 1),
    "the direct client got no answer"
  )
  return (w.t1 - t0) / 1e6
end

function Direct:stop()
  self.stdin:close()
  self.stdout:close()
  self.proc:kill("sigterm")
  self.proc:close()
end

local function median(xs)
  local c = vim.deepcopy(xs)
  table.sort(c)
  return c[math.floor((#c + 1) / 2)]
end

local direct, buf, dir
local idle, ran, bare = {}, {}, {}

-- The time the main thread has waited for a CPU (runnable, another task running), in
-- ns, from /proc/thread-self/schedstat (Linux); nil where it cannot be read.
local schedstat = vim.uv.fs_open("/proc/thread-self/schedstat", "r", 0)
local function run_delay()
  local text = schedstat and vim.uv.fs_read(schedstat, 128, 0)
  return text and tonumber(text:match("^%d+ (%d+)")) or nil
end

-- The longest gap of a 1 ms repeating timer past its period while fn runs, and the
-- longest such gap less the time the main thread waited for a CPU in it (the loop held
-- by work or a blocking system call, without the machine's scheduling), or nil.
local function max_gap(fn)
  local last, worst = vim.uv.hrtime(), 0
  local last_delay, held = run_delay(), 0
  local timer = vim.uv.new_timer()
  timer:start(1, 1, function()
    local now, delay = vim.uv.hrtime(), run_delay()
    local gap = (now - last) / 1e6 - 1
    worst = math.max(worst, gap)
    if delay and last_delay then
      held = math.max(held, gap - (delay - last_delay) / 1e6)
    end
    last, last_delay = now, delay
  end)
  fn()
  timer:stop()
  timer:close()
  return worst, last_delay and held or nil
end
local n = 0
local notes = {}
local finished_at

local function wait_ready()
  assert(
    vim.wait(30000, function()
      return require("flemma.tools").is_ready()
    end, 1),
    "the MCP server never became ready"
  )
end

return {
  {
    name = "mcp_echo_roundtrip",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 15,
    warmup = 3,
    note = function()
      return ("above the bare client's %.2f ms (median): Flemma's whole call %.2f ms"):format(
        median(notes.direct),
        median(notes.flemma)
      )
    end,
    setup = function()
      notes = { direct = {}, flemma = {} }
      dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      require("flemma").setup({
        tools = { autopilot = { enabled = false }, auto_approve = { "everything:echo" } },
        mcp = { servers = { everything = { command = "node", args = { EVERYTHING, "stdio" } } } },
      })
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/bench.chat"))
      buf = vim.api.nvim_get_current_buf()
      wait_ready()
      direct = Direct.start()
      vim.api.nvim_create_autocmd("User", {
        pattern = "FlemmaToolFinished",
        group = vim.api.nvim_create_augroup("mcp_bench", { clear = true }),
        callback = function()
          finished_at = vim.uv.hrtime()
        end,
      })
    end,
    teardown = function()
      pcall(vim.api.nvim_del_augroup_by_name, "mcp_bench")
      direct:stop()
      require("flemma.tools.mcp").stop_all()
      pcall(vim.api.nvim_buf_delete, buf, { force = true })
      vim.fn.delete(dir, "rf")
    end,
    run = function()
      n = n + 1
      local msg = "bench message " .. n
      local id = ("toolu_b%04d"):format(n)
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, {
        "@You:",
        "Echo it.",
        "",
        "@Assistant:",
        "",
        ("**Tool Use:** `everything:echo` (`%s`)"):format(id),
        "",
        "```json",
        vim.json.encode({ message = msg }),
        "```",
      })
      vim.wait(20)
      local d = direct:call("tools/call", { name = "echo", arguments = { message = msg } })
      finished_at = nil
      local t0 = vim.uv.hrtime()
      vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<C-]>", true, false, true), "mx", false)
      assert(
        vim.wait(10000, function()
          return finished_at ~= nil
        end, 1),
        "the tool never finished"
      )
      local ms = (finished_at - t0) / 1e6
      local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
      assert(text:find("Echo: " .. msg, 1, true), "no result in the buffer:\n" .. text)
      notes.direct[#notes.direct + 1] = d
      notes.flemma[#notes.flemma + 1] = ms
      return ms - d
    end,
  },
  {
    name = "mcp_start_max_block",
    unit = "ms",
    target = 2,
    op = "<=",
    runs = 3,
    warmup = 0,
    note = function()
      return ("the longest gap of a 1 ms timer past its 1 ms while the everything server starts and lists its tools; with nothing running, the same timer's longest gap: %.2f ms (median); while a second copy, spawned just before, starts and lists its tools to a bare client (no Flemma): %.2f ms (median)%s"):format(
        median(idle),
        median(bare),
        #ran > 0
            and ("; the longest gap less the main thread's wait for a CPU in it (schedstat): %.2f ms (median)"):format(
              median(ran)
            )
          or ""
      )
    end,
    setup = function()
      idle, ran, bare = {}, {}, {}
      -- The library and the modules loaded once, as in a session that already chats.
      require("flemma").setup({
        mcp = { servers = { everything = { command = "node", args = { EVERYTHING, "stdio" } } } },
      })
      require("flemma.tools.mcp").start()
      wait_ready()
      require("flemma.tools.mcp").stop_all()
      vim.wait(3000, function()
        return require("flemma.tools.mcp").status()[1].state == "stopped"
      end, 5)
    end,
    teardown = function()
      require("flemma.tools.mcp").stop_all()
      require("flemma").setup({})
    end,
    run = function()
      require("flemma").setup({
        mcp = { servers = { everything = { command = "node", args = { EVERYTHING, "stdio" } } } },
      })
      local mcp = require("flemma.tools.mcp")
      local t0 = vim.uv.hrtime()
      local worst, busy = max_gap(function()
        mcp.start()
        wait_ready()
      end)
      ran[#ran + 1] = busy
      local took = (vim.uv.hrtime() - t0) / 1e6
      idle[#idle + 1] = max_gap(function()
        vim.wait(took, function()
          return false
        end, 1)
      end)
      mcp.stop_all()
      vim.wait(3000, function()
        return mcp.status()[1].state == "stopped"
      end, 5)
      -- What the server's own start costs the loop (it shares the machine's CPUs): a
      -- second copy, spawned before the timer starts, answers the same handshake.
      local d = Direct.spawn()
      local bw = max_gap(function()
        d:init()
        d:call("tools/list", vim.empty_dict())
      end)
      bare[#bare + 1] = bw
      d:stop()
      return worst
    end,
  },
}
