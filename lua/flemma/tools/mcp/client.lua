--- One MCP server over stdio: a child of the process manager whose stdout is framed
--- and parsed as JSON-RPC 2.0 natively, on the manager's worker thread (decoder
--- "jsonrpc": bounded line length and depth); the messages reach this module on the
--- main thread. Requests carry timeouts; the server's stderr goes to the log and its
--- last lines are kept for error messages. Nothing here blocks Neovim. An entry with
--- `url` speaks Streamable HTTP instead (flemma.tools.mcp.http): the same messages,
--- each a POST through curl.
local http = require("flemma.tools.mcp.http")
local log = require("flemma.core.log")
local messages = require("flemma.tools.mcp.messages")
local process = require("flemma.core.process")
local util = require("flemma.core.util")

local M = {}
local H = {}

-- The spill directories of the servers running now (their stderr files past the
-- memory window): each is removed when its server stops, and all of them when
-- Neovim exits (the processes are killed then, without an exit callback).
H.spill_dirs = {} ---@type table<string, true>

function H.remove_dir(dir)
  if dir then
    H.spill_dirs[dir] = nil
    vim.fn.delete(dir, "rf")
  end
end

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = vim.api.nvim_create_augroup("flemma.tools.mcp.client", { clear = true }),
  desc = "Flemma: remove the stderr files of MCP servers",
  callback = function()
    for dir in pairs(H.spill_dirs) do
      H.remove_dir(dir)
    end
  end,
})

-- The protocol versions this client speaks, newest first.
M.PROTOCOL_VERSIONS = { "2025-06-18", "2025-03-26", "2024-11-05" }
-- Lines of the server's stderr kept for error messages.
M.STDERR_LINES = 10
-- Bytes of the server's stderr kept in its spill file (a server runs for hours: its
-- file ends with a note past this; the last lines above still follow the stream).
M.STDERR_FILE_BYTES = 1024 * 1024
-- Milliseconds a starting server is kept off the CPU Neovim's main thread is on, at
-- most (it gets it back once ready).
M.SPARE_CPU_MS = 30000

---@class flemma.mcp.Client
---@field name string
---@field state "stopped"|"starting"|"ready"|"failed"
---@field tools table[] the server's tools (tools/list)
---@field last_error string|nil
---@field stderr string[] its last stderr lines
---@field spill_dir string|nil the directory of its stderr file while it runs (removed when it stops)
local Client = {}
Client.__index = Client

--- A client for server `name` ({ command, args?, env?, cwd? }). Callbacks:
--- `on_tools(client)` after every tools/list, `on_exit(client, result)` when the
--- process ended on its own (not through stop()).
---@param name string
---@param spec table
---@param opts { timeout: number, on_tools?: fun(c: flemma.mcp.Client), on_exit?: fun(c: flemma.mcp.Client, r: table) }
---@return flemma.mcp.Client
function M.new(name, spec, opts)
  return setmetatable({
    name = name,
    spec = spec,
    opts = opts,
    state = "stopped",
    tools = {},
    stderr = {},
    pending = {},
    next_id = 0,
    progress = {},
  }, Client)
end

function Client:_log(level, fmt, ...)
  log.log(level, "mcp " .. self.name .. ": " .. fmt, ...)
end

--- The last stderr lines, joined (for error messages).
---@return string
function Client:stderr_tail()
  return table.concat(self.stderr, "\n")
end

function Client:_stderr_line(line)
  if line == nil or line == "" or line == self._last_stderr then
    return
  end
  self._last_stderr = line
  self:_log("info", "stderr: %s", line)
  self.stderr[#self.stderr + 1] = line
  if #self.stderr > M.STDERR_LINES then
    table.remove(self.stderr, 1)
  end
end

--- Starts the server and runs the handshake; on_ready(err) once, on the main thread.
---@param on_ready fun(err?: string)
function Client:start(on_ready)
  if self.state == "starting" or self.state == "ready" then
    util.error(("mcp: server `%s` is already %s"):format(self.name, self.state))
  end
  self.state = "starting"
  self.last_error = nil
  self.start_error = nil
  self.stopping = false
  local spec = self.spec
  if spec.url then
    local ok, transport = pcall(http.new, self, spec)
    if not ok then
      self.state = "failed"
      self.last_error = util.message(transport)
      vim.schedule(function()
        on_ready(self.last_error)
      end)
      return
    end
    self.http = transport
    self:_log("info", "session starting: %s", http.display_url(spec.url))
    return self:_handshake(on_ready)
  end
  local cmd = { spec.command }
  for _, a in ipairs(spec.args or {}) do
    cmd[#cmd + 1] = a
  end
  -- Its stderr file (once past the memory window) goes into a directory of its own
  -- in Neovim's temporary directory, removed with the file when the server stops.
  local spill_dir = vim.fn.tempname()
  if vim.fn.mkdir(spill_dir, "p", 448) == 1 then -- 0700
    self.spill_dir = spill_dir
    H.spill_dirs[spill_dir] = true
  else
    spill_dir, self.spill_dir = nil, nil
  end
  -- The spawn is the process manager's worker's (it held the main loop for up to
  -- 3 ms on a loaded machine): the handshake's messages wait in its queue until the
  -- server runs; a program that cannot be started ends it with `result.error`.
  -- A message's long strings come after it (flemma.tools.mcp.messages).
  self.assembler = messages.new(function(why)
    self:_log("warn", "stdout: %s", why)
    self.last_error = "stdout: " .. why
  end)
  -- Until it is ready (or M.SPARE_CPU_MS) it runs on every CPU but the one Neovim's
  -- main thread is on: Node's start-up threads took both CPUs of a 2-CPU machine and
  -- made the editor wait 2-7 ms for one.
  local ok, handle = pcall(process.spawn, {
    cmd = cmd,
    async_spawn = true,
    spare_cpu_ms = M.SPARE_CPU_MS,
    on_start = function(pid)
      self:_log("info", "started (pid %d): %s", pid, table.concat(cmd, " "))
    end,
    spill_dir = spill_dir,
    cwd = spec.cwd and vim.fs.normalize(spec.cwd) or nil,
    env = spec.env,
    keep_stdin_open = true,
    decoder = "jsonrpc",
    merge_output = false,
    max_lines = 200,
    max_bytes = 16384,
    max_file_bytes = M.STDERR_FILE_BYTES,
    on_events = function(events)
      self:_events(events)
    end,
    on_progress = function(p)
      self:_stderr_line(p.last_line)
    end,
  }, function(result)
    -- Its last stderr lines are kept in memory (for the error of a crash); the
    -- file goes with its directory.
    H.remove_dir(spill_dir)
    if self.spill_dir == spill_dir then
      self.spill_dir = nil
    end
    self:_exited(result)
  end)
  if not ok then
    H.remove_dir(self.spill_dir)
    self.spill_dir = nil
    self.state = "failed"
    self.last_error = util.message(handle)
    vim.schedule(function()
      on_ready(self.last_error)
    end)
    return
  end
  self.handle = handle
  self:_handshake(on_ready)
end

--- initialize, notifications/initialized, tools/list; on_ready(err) once.
function Client:_handshake(on_ready)
  local started = vim.uv.hrtime()
  self:request("initialize", {
    protocolVersion = M.PROTOCOL_VERSIONS[1],
    capabilities = vim.empty_dict(),
    clientInfo = { name = "flemma", version = "0.1.0" },
  }, function(res, err)
    if err then
      -- A server that could not be started: why, as it is.
      return self:_fail(on_ready, self.start_error or ("initialize failed: " .. err))
    end
    local version = type(res) == "table" and res.protocolVersion or nil
    if not vim.tbl_contains(M.PROTOCOL_VERSIONS, version) then
      return self:_fail(
        on_ready,
        ("speaks protocol version %s; Flemma speaks %s"):format(
          vim.inspect(version),
          table.concat(M.PROTOCOL_VERSIONS, ", ")
        )
      )
    end
    self.protocol_version = version
    if self.http then
      self.http.protocol_version = version
    end
    self.server_info = type(res.serverInfo) == "table" and res.serverInfo or nil
    self:notify("notifications/initialized")
    self:list_tools(function(lerr)
      if lerr then
        return self:_fail(on_ready, "tools/list failed: " .. lerr)
      end
      self.state = "ready"
      if self.handle then
        self.handle:release_cpu()
      end
      if self.http then
        self.http:listen()
      end
      self:_log(
        "info",
        "ready in %.0f ms, %d tools (protocol %s)",
        (vim.uv.hrtime() - started) / 1e6,
        #self.tools,
        version
      )
      on_ready(nil)
    end)
  end)
end

function Client:_fail(on_ready, msg)
  self.last_error = msg
  self:_log("warn", "%s", msg)
  self:stop()
  self.state = "failed"
  on_ready(msg)
end

--- Lists the tools (following nextCursor); cb(err) once the list is complete.
---@param cb fun(err?: string)
function Client:list_tools(cb)
  local tools = {}
  local pages = 0
  local function page(cursor)
    pages = pages + 1
    if pages > 100 then
      return cb("more than 100 pages of tools")
    end
    self:request("tools/list", cursor and { cursor = cursor } or vim.empty_dict(), function(res, err)
      if err then
        return cb(err)
      end
      for _, t in ipairs(type(res) == "table" and type(res.tools) == "table" and res.tools or {}) do
        if type(t) == "table" and type(t.name) == "string" then
          tools[#tools + 1] = t
        end
      end
      if type(res.nextCursor) == "string" and res.nextCursor ~= "" then
        return page(res.nextCursor)
      end
      self.tools = tools
      if self.opts.on_tools then
        util.safe(self.opts.on_tools, "mcp on_tools")(self)
      end
      cb(nil)
    end)
  end
  page(nil)
end

function Client:_write(msg, timeout)
  if self.http then
    return not self.stopping and self.http:open() and self.http:send(msg, timeout)
  end
  if self.stopping or not self.handle or not self.handle:is_running() then
    return false
  end
  self.handle:write(vim.json.encode(msg) .. "\n")
  return true
end

--- Sends a request; cb(result, err) once, on the main thread. opts.timeout in
--- seconds (default mcp.timeout); opts.on_progress(params) for progress notifications
--- (a progress token is sent). Returns a function that cancels it (the server gets
--- notifications/cancelled, cb gets "cancelled").
---@return fun() cancel
function Client:request(method, params, cb, opts)
  opts = opts or {}
  self.next_id = self.next_id + 1
  local id = self.next_id
  local entry = { method = method, cb = cb }
  if opts.on_progress then
    params = params or {}
    params._meta = { progressToken = id }
    self.progress[id] = opts.on_progress
  end
  self.pending[id] = entry
  local timeout = opts.timeout or self.opts.timeout or 60
  entry.timer = vim.uv.new_timer()
  -- The loop's clock is cached from its last turn, which may be long past after a
  -- slow spawn: update it, or the timeout fires before its time.
  vim.uv.update_time()
  entry.timer:start(math.floor(timeout * 1000), 0, function()
    vim.schedule(function()
      if self.pending[id] == entry then
        self:notify("notifications/cancelled", { requestId = id, reason = "timed out" })
        self:_settle(id, nil, ("%s timed out after %gs"):format(method, timeout))
      end
    end)
  end)
  if not self:_write({ jsonrpc = "2.0", id = id, method = method, params = params }, timeout) then
    vim.schedule(function()
      self:_settle(id, nil, "the server is not running")
    end)
  end
  return function()
    if self.pending[id] == entry then
      self:notify("notifications/cancelled", { requestId = id, reason = "cancelled by the user" })
      self:_settle(id, nil, "cancelled")
    end
  end
end

function Client:_settle(id, result, err)
  local entry = self.pending[id]
  if not entry then
    return
  end
  self.pending[id] = nil
  self.progress[id] = nil
  if entry.timer and not entry.timer:is_closing() then
    entry.timer:stop()
    entry.timer:close()
  end
  if self.http then
    self.http:forget(id)
  end
  util.safe(entry.cb, "mcp " .. entry.method .. " callback")(result, err)
end

function Client:notify(method, params)
  self:_write({ jsonrpc = "2.0", method = method, params = params })
end

function Client:_events(events)
  for _, ev in ipairs(events) do
    if ev.type == "jsonrpc" or ev.type == "blob" then
      local msg, kind = self.assembler:feed(ev)
      if msg then
        self:_message(kind, msg)
      end
    elseif ev.type == "error" then
      self:_log("warn", "stdout: %s", ev.message)
      self.last_error = "stdout: " .. ev.message
    end
  end
end

function Client:_message(kind, msg)
  if kind == "result" or kind == "error" then
    local id = tonumber(msg.id)
    if id == nil or not self.pending[id] then
      return
    end
    if kind == "error" then
      local e = msg.error
      local text = type(e.message) == "string" and e.message or "error"
      if type(e.code) == "number" then
        text = ("%s (%d)"):format(text, e.code)
      end
      self:_settle(id, nil, text)
    else
      self:_settle(id, msg.result, nil)
    end
  elseif kind == "request" then
    if msg.method == "ping" then
      self:_write({ jsonrpc = "2.0", id = msg.id, result = vim.empty_dict() })
    else
      self:_write({
        jsonrpc = "2.0",
        id = msg.id,
        error = { code = -32601, message = "Flemma does not offer " .. tostring(msg.method) },
      })
    end
  else
    local params = type(msg.params) == "table" and msg.params or {}
    if msg.method == "notifications/tools/list_changed" then
      if self.state == "ready" then
        self:list_tools(function(err)
          if err then
            self:_log("warn", "tools/list after list_changed failed: %s", err)
          end
        end)
      end
    elseif msg.method == "notifications/progress" then
      local fn = self.progress[tonumber(params.progressToken) or -1]
      if fn then
        util.safe(fn, "mcp progress")(params)
      end
    elseif msg.method == "notifications/message" then
      self:_log(
        "info",
        "message: %s",
        type(params.data) == "string" and params.data or vim.json.encode(params.data or "")
      )
    end
  end
end

function Client:_exited(result)
  self.handle = nil
  if result.error then
    -- Never started (a missing program or working directory): one line, as it is.
    self.start_error = result.error
    self.last_error = result.error
    local ids = vim.tbl_keys(self.pending)
    table.sort(ids)
    for _, id in ipairs(ids) do
      self:_settle(id, nil, result.error)
    end
    self.state = "failed"
    return
  end
  local stopping, was_ready = self.stopping, self.state == "ready"
  for line in tostring(result.stderr or ""):gmatch("[^\n]+") do
    self:_stderr_line(line)
  end
  local how = result.signal and ("signal " .. result.signal) or ("code " .. tostring(result.code))
  self:_log(self.stopping and "info" or "warn", "exited (%s)", how)
  local ids = vim.tbl_keys(self.pending)
  table.sort(ids)
  local why = ("server `%s` exited (%s)"):format(self.name, how)
  local tail = self:stderr_tail()
  if tail ~= "" then
    why = why .. "; its last stderr lines:\n" .. tail
  end
  for _, id in ipairs(ids) do
    self:_settle(id, nil, why)
  end
  if stopping then
    if self.state ~= "failed" then
      self.state = "stopped"
    end
    return
  end
  self.state = "failed"
  self.last_error = why
  if was_ready and self.opts.on_exit then
    util.safe(self.opts.on_exit, "mcp on_exit")(self, result)
  end
end

--- The server (over HTTP) forgot the session: what is pending fails and the client
--- counts as exited (restarted once, as a crashed server).
function Client:_session_lost(why)
  local was_ready = self.state == "ready"
  self.last_error = why
  self:_closed(why)
  self.state = "failed"
  if was_ready and self.opts.on_exit then
    util.safe(self.opts.on_exit, "mcp on_exit")(self, { code = nil })
  end
end

--- Over HTTP: the curls are stopped and what is pending fails with `why`; at exit
--- the DELETE's process is returned (see flemma.tools.mcp.http).
function Client:_closed(why, at_exit)
  local proc
  if self.http then
    proc = self.http:close(at_exit)
    self.http = nil
  end
  local ids = vim.tbl_keys(self.pending)
  table.sort(ids)
  for _, id in ipairs(ids) do
    self:_settle(id, nil, why)
  end
  return proc
end

--- Ends the server's whole process group (SIGTERM, SIGKILL after the grace period);
--- over HTTP, the session (a DELETE; at Neovim's exit its process is returned).
---@param at_exit? boolean
---@return vim.SystemObj|nil
function Client:stop(at_exit)
  self.stopping = true
  if self.http then
    local proc = self:_closed(("server `%s` was stopped"):format(self.name), at_exit)
    if self.state ~= "failed" then
      self.state = "stopped"
    end
    return proc
  end
  if self.handle and self.handle:is_running() then
    self.handle:close_stdin()
    self.handle:cancel()
  end
end

--- Whether the process runs.
function Client:running()
  if self.http then
    return self.http:open()
  end
  return self.handle ~= nil and self.handle:is_running()
end

M.display_url = http.display_url
M.wait_all = http.wait_all
M.Client = Client
return M
