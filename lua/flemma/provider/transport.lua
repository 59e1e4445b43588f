--- The HTTP transport: curl run by the native process manager, never blocking the
--- editor. The request body goes through a private temp file (0600, removed when curl
--- exits); headers, the API key among them, reach curl through `--config -` on stdin,
--- so no secret is ever in argv (visible in `ps`), on disk or in a log; curl reads no
--- `~/.curlrc` (`-q`), whose lines could trace the key to a file or add headers. The child's
--- stdout (`--dump-header -`: status line and headers, then the body) is decoded by
--- the native stream decoder of the provider's kind.
local curl = require("flemma.core.curl")
local util = require("flemma.core.util")

local M = {}

M.program = "curl"

--- curl exit codes (see `man curl`, EXIT CODES).
M.curl_errors = curl.errors
--- Exit codes of a connection that was reset or dropped: a retry may succeed.
M.reset_codes = { [52] = true, [55] = true, [56] = true }

--- The `--config -` text (headers; see core/curl).
M.config_text = curl.config_text

--- The whole `--config -` text of a request: its URL, then its headers.
---@param url string
---@param headers table<string, string>
---@return string
function M.config(url, headers)
  return curl.config_url(url) .. M.config_text(headers)
end

--- curl's argv. Nothing secret is in it: the endpoint too goes on stdin (M.config), as
--- an endpoint may hold a token in its path or query and argv is visible in `ps`.
---@param o { endpoint: string, body_path: string, connect_timeout?: number, timeout?: number }
---@return string[]
function M.args(o)
  local argv = {
    M.program,
    "-q", -- first: no ~/.curlrc (its `trace` or `header` lines would log or resend the key)
    "--silent",
    "--show-error",
    "--no-buffer",
    "--dump-header",
    "-",
    "--config",
    "-",
    "--data-binary",
    "@" .. o.body_path,
  }
  if o.connect_timeout and o.connect_timeout > 0 then
    vim.list_extend(argv, { "--connect-timeout", tostring(o.connect_timeout) })
  end
  if o.timeout and o.timeout > 0 then
    vim.list_extend(argv, { "--max-time", tostring(o.timeout) })
  end
  -- A server on this machine is reached directly: with http_proxy or ALL_PROXY set,
  -- curl sent a plain http:// request (the key in its headers) to the proxy, which
  -- may be another machine. Remote endpoints keep the proxy (https tunnels through).
  local secrets = require("flemma.policy.secrets")
  local _, host = secrets.url_host(o.endpoint)
  if secrets.is_loopback_host(host) then
    vim.list_extend(argv, { "--noproxy", "*" })
  end
  return argv
end

--- curl's argv of a small GET (`--fail`: an HTTP error is exit code 22; no body is
--- read past `max_bytes`). Nothing secret is in it: the URL and headers go through
--- `--config -`.
---@param o { url: string, connect_timeout: number, timeout: number, max_bytes: integer }
---@return string[]
function M.get_args(o)
  local argv = {
    M.program,
    "-q", -- first: no ~/.curlrc
    "--silent",
    "--show-error",
    "--fail",
    "--config",
    "-",
    "--max-filesize",
    tostring(o.max_bytes),
    "--connect-timeout",
    tostring(o.connect_timeout),
    "--max-time",
    tostring(o.timeout),
  }
  local secrets = require("flemma.policy.secrets")
  local _, host = secrets.url_host(o.url)
  if secrets.is_loopback_host(host) then
    vim.list_extend(argv, { "--noproxy", "*" })
  end
  return argv
end

--- GETs a small document (a server's model list) without blocking: curl through the
--- process manager, headers (the key among them) on stdin, bounded in time
--- (`timeout` seconds, default 10) and size (`max_bytes`, default 256 KiB: past it the
--- transfer is stopped and it fails). cb(body) or cb(nil, message), on the main loop.
--- Raises when curl is missing or the headers are bad (nothing was started then).
---@param o { url: string, headers: table<string, string>, timeout?: number, max_bytes?: integer }
---@param cb fun(body: string|nil, err: string|nil)
---@return flemma.process.Handle
function M.get(o, cb)
  if vim.fn.executable(M.program) ~= 1 then
    util.error(("`%s` is not installed (or not in $PATH): install it to talk to model providers"):format(M.program))
  end
  local max_bytes = o.max_bytes or 262144
  local timeout = o.timeout or 10
  local config = M.config(o.url, o.headers or {})
  local argv = M.get_args({
    url = o.url,
    connect_timeout = math.min(5, timeout),
    timeout = timeout,
    max_bytes = max_bytes,
  })
  local log = require("flemma.core.log")
  local names = vim.tbl_keys(o.headers or {})
  table.sort(names)
  -- Header names only: their values may hold the key.
  log.info("request GET %s (headers: %s)", curl.display_url(o.url), table.concat(names, ", "))
  local handle
  local too_large = false
  handle = require("flemma.core.process").spawn({
    cmd = argv,
    stdin = config,
    merge_output = false,
    max_bytes = max_bytes + 1,
    max_lines = 1000000,
    timeout = math.floor((timeout + 5) * 1000),
    kill_grace = 500,
    on_progress = function(p)
      if p.bytes > max_bytes and not too_large then
        too_large = true
        handle:cancel()
      end
    end,
  }, function(result)
    for _, path in ipairs({ result.full_output_path, result.stderr_full_output_path }) do
      if path then
        os.remove(path)
      end
    end
    log.info("curl GET %s exited with %s", curl.display_url(o.url), tostring(result.code))
    if too_large or result.truncated or (result.total_bytes or 0) > max_bytes or result.code == 63 then
      return cb(nil, ("the answer is larger than %d bytes"):format(max_bytes))
    end
    if result.timed_out or result.code == 28 then
      return cb(nil, ("no answer within %d s"):format(timeout))
    end
    if result.code ~= 0 then
      local why = vim.trim(result.stderr or "")
      why = why:gsub("^curl: %(%d+%) ", "")
      return cb(
        nil,
        why ~= "" and why or (M.curl_errors[result.code] or ("curl exited with " .. tostring(result.code)))
      )
    end
    if result.binary then
      return cb(nil, "the answer is not text")
    end
    cb(result.output or "")
  end)
  return handle
end

M.body_size = curl.body_size
M.write_body = curl.write_body

---@class flemma.transport.Opts
---@field endpoint string
---@field headers table<string, string>
---@field body string|string[] the JSON text, or a list of pieces that make it up
---@field decoder string the stream decoder kind ("anthropic", "openai_chat")
---@field connect_timeout? number seconds
---@field timeout? number seconds
---@field max_response_bytes? integer past this many bytes of the response, it fails (an `error` event of type
--- "response_too_large") and curl is stopped
---@field on_events fun(events: table[])
---@field on_exit fun(result: flemma.process.Result)

--- Starts curl. Returns the process handle; raises when curl is missing or the
--- request cannot be prepared (nothing was started then).
---@param o flemma.transport.Opts
---@return flemma.process.Handle
function M.start(o)
  if vim.fn.executable(M.program) ~= 1 then
    util.error(("`%s` is not installed (or not in $PATH): install it to talk to model providers"):format(M.program))
  end
  local config = M.config(o.endpoint, o.headers)
  local path = M.write_body(o.body)
  local argv = M.args({
    endpoint = o.endpoint,
    body_path = path,
    connect_timeout = o.connect_timeout,
    timeout = o.timeout,
  })
  local log = require("flemma.core.log")
  if log.enabled("info") then
    local names = vim.tbl_keys(o.headers or {})
    table.sort(names)
    -- Header names only: their values may hold the key.
    log.info(
      "request POST %s (%d bytes, decoder %s, headers: %s)",
      curl.display_url(o.endpoint),
      M.body_size(o.body),
      o.decoder,
      table.concat(names, ", ")
    )
    if log.enabled("debug") then
      log.debug("request body: %s", type(o.body) == "table" and table.concat(o.body) or o.body)
    end
  end
  local on_events = o.on_events
  if log.enabled("debug") then
    -- The deltas are logged as one stream per kind: a key a server echoes split
    -- between two deltas is redacted over the joined text (util.redactor holds back
    -- what could be the start of one until the next delta).
    local streams = {}
    local function delta(ev, field)
      local key = ev.type .. "." .. field
      streams[key] = streams[key] or util.redactor()
      local copy = vim.deepcopy(ev)
      copy[field] = streams[key].push(ev[field])
      return copy
    end
    local function flush()
      for key, r in pairs(streams) do
        local rest = r.flush()
        if rest ~= "" then
          log.trace("response %s (held back) %s", key, vim.inspect(rest))
        end
      end
      streams = {}
    end
    on_events = function(events)
      for _, ev in ipairs(events) do
        if ev.type == "http" or ev.type == "error" or ev.type == "end" or ev.type == "stop" or ev.type == "usage" then
          flush()
          log.debug("response %s", ev)
        elseif (ev.type == "text" or ev.type == "thinking") and type(ev.text) == "string" then
          log.trace("response %s", delta(ev, "text"))
        elseif ev.type == "tool_input_delta" and type(ev.json) == "string" then
          log.trace("response %s", delta(ev, "json"))
        else
          log.trace("response %s", ev)
        end
      end
      return o.on_events(events)
    end
  end
  local ok, handle = pcall(require("flemma.core.process").spawn, {
    cmd = argv,
    stdin = config,
    decoder = o.decoder,
    on_events = on_events,
    merge_output = false,
    max_stdout_bytes = o.max_response_bytes,
    -- A safety net behind curl's own --max-time.
    timeout = o.timeout and o.timeout > 0 and math.floor((o.timeout + 30) * 1000) or nil,
    kill_grace = 500,
  }, function(result)
    os.remove(path)
    log.info(
      "curl for %s exited with %s%s%s",
      curl.display_url(o.endpoint),
      tostring(result.code),
      result.signal and (" signal " .. result.signal) or "",
      (result.stderr or "") ~= "" and (": " .. vim.trim(result.stderr)) or ""
    )
    o.on_exit(result)
  end)
  if not ok then
    os.remove(path)
    error(handle, 0)
  end
  return handle
end

return M
