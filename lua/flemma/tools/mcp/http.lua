--- MCP's Streamable HTTP transport (:help flemma-mcp-http): each JSON-RPC message is
--- a POST through curl, run by the native process manager as provider requests are;
--- the answer, one JSON body or an SSE stream, is decoded natively off the main
--- thread (stream kind "mcp": status, headers, JSON-RPC messages, SSE event ids). The
--- server's `Mcp-Session-Id` (from the initialize answer) and the negotiated
--- `MCP-Protocol-Version` go with every later request; an SSE stream that breaks
--- before it answered is resumed with a GET carrying `Last-Event-ID`; once the
--- session is ready a standing GET stream carries what the server sends outside an
--- answer (reopened with `Last-Event-ID` when it breaks, a few times with a growing
--- wait; none when the server answers 405); stopping ends the session with a DELETE. Headers, the bearer key among them, reach curl
--- through its config on stdin, never argv, and are never logged.
local curl = require("flemma.core.curl")
local log = require("flemma.core.log")
local messages = require("flemma.tools.mcp.messages")
local process = require("flemma.core.process")
local util = require("flemma.core.util")

local M = {}
local H = {}

M.program = "curl"
-- Bytes of one answer (a stream of many events included): past them curl is stopped.
M.MAX_RESPONSE = 32 * 1024 * 1024
-- Resumptions of one broken stream (GET with Last-Event-ID).
M.MAX_RESUMES = 3
-- Longest session id taken from a server (visible ASCII only).
M.MAX_SESSION_ID = 1024
-- Seconds the DELETE of a session may take.
M.DELETE_TIMEOUT = 5
-- Seconds one standing GET stream may last (then it is opened again, Last-Event-ID).
M.STREAM_MAX_TIME = 3600
-- Reopenings in a row of a standing stream that delivered nothing, before giving up.
M.STREAM_RETRIES = 5
-- Milliseconds before the first reopening (doubled each time, at most STREAM_RETRY_MAX).
M.STREAM_RETRY_MS = 500
M.STREAM_RETRY_MAX = 30000
-- Milliseconds Neovim's exit waits for the DELETEs of its sessions (all at once).
M.EXIT_WAIT = 2000

---@class flemma.mcp.Http
---@field client flemma.mcp.Client
---@field url string
---@field session_id string|nil
---@field protocol_version string|nil
---@field live table<integer, table> the running curls (by process id)
local Http = {}
Http.__index = Http

--- The URL as logs and status show it: no user info, no query (either may hold a key).
M.display_url = curl.display_url

--- The headers of every request: the entry's `headers`, `Authorization: Bearer`
--- from the variable `bearer_env`; raises when that variable is empty or when a key
--- would go over http:// to another machine. The values become secrets (redacted
--- wherever Flemma shows text).
---@param spec { url: string, headers?: table<string, string>, bearer_env?: string }
---@return table<string, string>
function M.base_headers(spec)
  local secrets = require("flemma.policy.secrets")
  local headers = {}
  for k, v in pairs(spec.headers or {}) do
    headers[k] = v
  end
  if spec.bearer_env then
    local value = vim.env[spec.bearer_env]
    if type(value) ~= "string" or value == "" then
      util.error(("$%s (bearer_env) is not set"):format(spec.bearer_env))
    end
    headers["Authorization"] = "Bearer " .. value
  end
  if next(headers) ~= nil then
    local scheme, host = secrets.url_host(spec.url)
    if not host then
      util.error(("the headers are not sent: the host of %s cannot be told for sure"):format(M.display_url(spec.url)))
    end
    if scheme ~= "https" and not secrets.is_loopback_host(host) then
      util.error(
        ("the headers are not sent: keys never go over %s:// to another machine (%s); use https"):format(scheme, host)
      )
    end
    for _, v in pairs(headers) do
      util.add_secret(v)
      util.add_secret((v:gsub("^[Bb]earer%s+", "")))
    end
  end
  return headers
end

--- A transport for a client; raises (nothing started) when the entry cannot be used.
---@param client flemma.mcp.Client
---@param spec table
---@return flemma.mcp.Http
function M.new(client, spec)
  if vim.fn.executable(M.program) ~= 1 then
    util.error(("`%s` is not installed (or not in $PATH): MCP over HTTP needs it"):format(M.program))
  end
  local scheme = tostring(spec.url):match("^(%a[%w+.-]*)://")
  if scheme ~= "http" and scheme ~= "https" then
    util.error(("`url` should be an http:// or https:// URL, not %s"):format(M.display_url(spec.url)))
  end
  return setmetatable({
    client = client,
    url = spec.url,
    base = M.base_headers(spec),
    live = {},
    closed = false,
  }, Http)
end

function Http:_log(level, fmt, ...)
  log.log(level, "mcp " .. self.client.name .. " (http): " .. fmt, ...)
end

--- curl's argv: nothing secret in it (the URL, which may hold user info or a token,
--- and the headers go on stdin: H.config). `-q` (first): no ~/.curlrc, whose headers
--- could reach a project file's host.
function H.argv(url, method, body_path, timeout)
  local argv = {
    M.program,
    "-q",
    "--silent",
    "--show-error",
    "--no-buffer",
    "--dump-header",
    "-",
    "--config",
    "-",
    "--connect-timeout",
    tostring(math.max(1, math.min(10, timeout))),
    "--max-time",
    tostring(timeout),
  }
  if body_path then
    vim.list_extend(argv, { "--data-binary", "@" .. body_path })
  else
    vim.list_extend(argv, { "--request", method })
  end
  local secrets = require("flemma.policy.secrets")
  local _, host = secrets.url_host(url)
  if secrets.is_loopback_host(host) then
    vim.list_extend(argv, { "--noproxy", "*" })
  end
  return argv
end

--- curl's `--config -` text: the URL and the headers.
function H.config(url, headers)
  return curl.config_url(url) .. curl.config_text(headers)
end

function Http:_headers(extra)
  local h = {}
  for k, v in pairs(self.base) do
    h[k] = v
  end
  h["Accept"] = "application/json, text/event-stream"
  if self.session_id then
    h["Mcp-Session-Id"] = self.session_id
  end
  if self.protocol_version then
    h["MCP-Protocol-Version"] = self.protocol_version
  end
  for k, v in pairs(extra or {}) do
    h[k] = v
  end
  return h
end

--- A session id as the spec allows it (visible ASCII), or nil.
function H.session_id(value)
  if type(value) ~= "string" or value == "" or #value > M.MAX_SESSION_ID or value:find("[^\33-\126]") then
    return nil
  end
  return value
end

--- Runs one curl: `req` = { method, body?, ids (request ids it answers), resumes,
--- initialize? }. Its events go to the client as they come.
function Http:_run(req)
  if self.closed then
    return false
  end
  local timeout = math.max(1, math.ceil((req.timeout or self.client.opts.timeout or 60) + 5))
  local extra = { ["Content-Type"] = req.body and "application/json" or nil }
  if req.last_event_id then
    extra["Last-Event-ID"] = req.last_event_id
  end
  if req.accept then
    extra["Accept"] = req.accept
  end
  local config = H.config(self.url, self:_headers(extra))
  local path = req.body and curl.write_body(req.body) or nil
  local st = { status = nil, sse = false, last_id = req.last_event_id, errors = {}, answered = {} }
  -- A message's long strings come after it (flemma.tools.mcp.messages).
  st.assembler = messages.new(function(why)
    st.errors[#st.errors + 1] = why
    self:_log("warn", "%s", why)
  end)
  local ok, handle = pcall(process.spawn, {
    cmd = H.argv(self.url, req.method, path, timeout),
    stdin = config,
    decoder = "mcp",
    merge_output = false,
    max_stdout_bytes = M.MAX_RESPONSE,
    timeout = (timeout + 5) * 1000,
    kill_grace = 500,
    on_events = function(events)
      self:_events(req, st, events)
    end,
  }, function(result)
    if path then
      os.remove(path)
    end
    self:_done(req, st, result)
  end)
  if not ok then
    if path then
      os.remove(path)
    end
    self:_log("warn", "%s", util.message(handle))
    return false
  end
  st.handle = handle
  req.handle = handle
  self.live[handle.id] = req
  self:_log("debug", "%s %s (%s)", req.method, M.display_url(self.url), req.what or "")
  return true
end

function Http:_events(req, st, events)
  for _, ev in ipairs(events) do
    if ev.type == "http" then
      st.status = ev.status
      st.sse = (ev.headers["content-type"] or ""):find("text/event-stream", 1, true) ~= nil
      if req.initialize and ev.status >= 200 and ev.status < 300 then
        local sid = ev.headers["mcp-session-id"]
        if sid ~= nil then
          self.session_id = H.session_id(sid)
          if not self.session_id then
            st.errors[#st.errors + 1] = "the server's Mcp-Session-Id is not visible ASCII of at most 1024 bytes"
          end
        end
      end
    elseif ev.type == "sse_id" then
      st.last_id = ev.id ~= "" and ev.id or nil
      if req.standing then
        self.stream_last_id = st.last_id
        st.delivered = true
      end
    elseif ev.type == "jsonrpc" or ev.type == "blob" then
      st.delivered = true
      local msg, kind = st.assembler:feed(ev)
      if msg then
        if (kind == "result" or kind == "error") and msg.id ~= nil then
          st.answered[tonumber(msg.id) or -1] = true
        end
        if not (st.status and st.status >= 400) then
          self.client:_message(kind, msg)
        end
      end
    elseif ev.type == "error" then
      st.errors[#st.errors + 1] = ev.message ~= "" and ev.message or ev.error_type
    end
  end
end

--- The one line saying why a request got no answer.
function H.why(st, result)
  local parts = {}
  if st.status and st.status >= 400 then
    parts[#parts + 1] = "HTTP " .. st.status
  end
  for _, e in ipairs(st.errors) do
    parts[#parts + 1] = e
  end
  if #parts == 0 then
    if result.code ~= 0 and result.code ~= nil then
      local why = vim.trim(result.stderr or ""):gsub("^curl: %(%d+%) ", "")
      parts[#parts + 1] = why ~= "" and why or (curl.errors[result.code] or ("curl exited with " .. result.code))
    elseif result.signal or result.timed_out then
      parts[#parts + 1] = "no answer in time"
    elseif not st.status then
      parts[#parts + 1] = "no HTTP answer"
    else
      parts[#parts + 1] = "the server ended its answer without a response"
    end
  end
  return (table.concat(parts, ": "):gsub("[\r\n]+", " "))
end

function Http:_done(req, st, result)
  if req.handle then
    self.live[req.handle.id] = nil
  end
  if self.closed then
    return
  end
  local waiting = {}
  for _, id in ipairs(req.ids) do
    if self.client.pending[id] and not st.answered[id] then
      waiting[#waiting + 1] = id
    end
  end
  if st.status == 404 and self.session_id and not req.initialize then
    -- The server forgot the session: a new one is needed (the client starts over).
    self:_log("warn", "the server ended the session (HTTP 404)")
    self.session_id = nil
    return self.client:_session_lost("the server ended the session (HTTP 404)")
  end
  if req.standing then
    return self:_stream_ended(st, result)
  end
  if #waiting == 0 then
    if st.status and st.status >= 400 and #req.ids == 0 then
      self:_log("warn", "%s %s", req.what or req.method, H.why(st, result))
    end
    return
  end
  local broken = st.sse and (not st.status or st.status < 300)
  if broken and st.last_id and self.session_id and (req.resumes or 0) < M.MAX_RESUMES then
    self:_log("info", "the stream broke before it answered; resuming after event %s", st.last_id)
    local again = {
      method = "GET",
      ids = waiting,
      resumes = (req.resumes or 0) + 1,
      last_event_id = st.last_id,
      timeout = req.timeout,
      what = "resume",
    }
    if self:_run(again) then
      return
    end
  end
  local why = H.why(st, result)
  if broken and st.status and #st.errors == 0 and (result.code == 0 or result.code == 18) then
    why = "the server closed the stream before answering" .. (st.last_id and "" or " (no event id to resume from)")
  end
  for _, id in ipairs(waiting) do
    self.client:_settle(id, nil, why)
  end
end

--- Opens the standing GET stream (server-initiated messages: notifications such as
--- tools/list_changed, requests such as ping), after the last event seen if any.
function Http:listen()
  if self.closed or self.listening then
    return
  end
  self.listening = self:_run({
    method = "GET",
    ids = {},
    standing = true,
    accept = "text/event-stream",
    last_event_id = self.stream_last_id,
    timeout = M.STREAM_MAX_TIME,
    what = "standing stream",
  })
end

--- The standing stream ended: none offered (405), or opened again after a wait that
--- grows with each stream in a row that delivered nothing, given up after
--- M.STREAM_RETRIES of them (never a busy loop).
function Http:_stream_ended(st, result)
  self.listening = false
  if st.status == 405 then
    self:_log("debug", "the server offers no standing stream (HTTP 405)")
    return
  end
  self.stream_failures = st.delivered and 1 or (self.stream_failures or 0) + 1
  local why = (#st.errors == 0 and st.status and st.status < 300) and "the server closed it" or H.why(st, result)
  if self.stream_failures > M.STREAM_RETRIES then
    self:_log("warn", "the standing stream is given up after %d tries: %s", M.STREAM_RETRIES, why)
    return
  end
  local delay = math.min(M.STREAM_RETRY_MAX, M.STREAM_RETRY_MS * 2 ^ (self.stream_failures - 1))
  self:_log("info", "the standing stream ended (%s); opened again in %d ms", why, delay)
  local timer = vim.uv.new_timer()
  self.retry_timer = timer
  timer:start(delay, 0, function()
    vim.schedule(function()
      if self.retry_timer == timer then
        self.retry_timer = nil
        timer:close()
        self:listen()
      end
    end)
  end)
end

--- Sends one message (a request, a notification or a response) as a POST.
---@param msg table
---@param timeout? number seconds of the request
---@return boolean started
function Http:send(msg, timeout)
  local ids = {}
  if msg.method ~= nil and msg.id ~= nil then
    ids[1] = msg.id
  end
  return self:_run({
    method = "POST",
    body = vim.json.encode(msg),
    ids = ids,
    timeout = timeout,
    initialize = msg.method == "initialize",
    what = msg.method or "response",
  })
end

--- Stops the curls that answer request `id` alone (it was settled: cancelled or
--- timed out).
function Http:forget(id)
  for _, req in pairs(self.live) do
    if #req.ids == 1 and req.ids[1] == id and req.handle then
      req.handle:cancel()
    end
  end
end

--- Stops every curl and ends the session: a DELETE, not waited for; at Neovim's
--- exit (`at_exit`) a curl of its own (the process manager is gone by then) whose
--- handle is returned, to be waited for (M.wait_all).
---@param at_exit? boolean
---@return vim.SystemObj|nil
function Http:close(at_exit)
  if self.closed then
    return
  end
  self.closed = true
  local timer = self.retry_timer
  self.retry_timer = nil
  if timer and not timer:is_closing() then
    timer:stop()
    timer:close()
  end
  for _, req in pairs(self.live) do
    if req.handle then
      req.handle:cancel()
    end
  end
  self.live = {}
  if not self.session_id then
    return
  end
  local config = H.config(self.url, self:_headers())
  self.session_id = nil
  local name = self.client.name
  if at_exit then
    local ok, proc = pcall(vim.system, H.argv(self.url, "DELETE", nil, M.DELETE_TIMEOUT), { stdin = config })
    return ok and proc or nil
  end
  pcall(process.spawn, {
    cmd = H.argv(self.url, "DELETE", nil, M.DELETE_TIMEOUT),
    stdin = config,
    merge_output = false,
    max_bytes = 4096,
    max_lines = 20,
    timeout = (M.DELETE_TIMEOUT + 2) * 1000,
    kill_grace = 500,
  }, function(result)
    for _, p in ipairs({ result.full_output_path, result.stderr_full_output_path }) do
      if p then
        os.remove(p)
      end
    end
    log.info("mcp %s (http): session ended (DELETE, curl exit %s)", name, tostring(result.code))
  end)
end

--- Waits (at most M.EXIT_WAIT ms in all) for the DELETEs started at exit.
---@param procs vim.SystemObj[]
function M.wait_all(procs)
  local deadline = vim.uv.hrtime() + M.EXIT_WAIT * 1e6
  for _, p in ipairs(procs) do
    local left = math.floor((deadline - vim.uv.hrtime()) / 1e6)
    if left <= 0 or not pcall(p.wait, p, left) then
      pcall(p.kill, p, 9)
    end
  end
end

--- Whether the session is open (not closed).
function Http:open()
  return not self.closed
end

M.Http = Http
return M
