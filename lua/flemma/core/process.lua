--- Child processes for tools: each runs in its own session and process group with
--- a non-interactive environment, stdin closed unless given, bounded output (a tail
--- window in memory, the whole output in a temp file once over the limits), timeout
--- and cancel that end the whole group (SIGTERM, then SIGKILL after a grace period).
--- A native worker thread watches the children; this module drains its events on
--- the main thread and calls back through vim.schedule.
local native = require("flemma.core.native")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.process.Progress
---@field bytes integer output bytes so far (both streams)
---@field lines integer output lines so far
---@field last_line string the last complete line (at most 512 bytes)

---@class flemma.process.Opts
---@field cmd string[] argv; cmd[1] is looked up in PATH
---@field cwd? string working directory (default: Neovim's)
---@field env? table<string, string|number> extra variables on top of the inherited environment
--- (which never holds secrets: see `tools.env_passthrough`)
---@field stdin? string written to stdin, then stdin is closed (nil: stdin is /dev/null)
---@field keep_stdin_open? boolean keep stdin open after `stdin` for handle:write()/close_stdin()
---@field timeout? integer milliseconds; nil or 0: none
---@field kill_grace? integer milliseconds between SIGTERM and SIGKILL (default 2000)
---@field merge_output? boolean stdout and stderr in arrival order (default true)
---@field max_lines? integer lines of the tail kept in memory (default 2000)
---@field max_bytes? integer bytes of the tail kept in memory (default 51200)
---@field on_progress? fun(p: flemma.process.Progress) at most every 100 ms
---@field decoder? string a stream kind ("anthropic", "openai_chat", "openai", "vertex"), or a JSON object describing a search output decoder (`{"kind": "rg_json"|"paths", "max": n, "glob"?, "name_only"?, "hidden"?, "skip"?}`): stdout is decoded natively (and not kept)
---@field on_events? fun(events: table[]) with `decoder`: batches of decoded events, in order, all before on_exit
---@field max_stdout_bytes? integer with `decoder`: past this many bytes of stdout the stream fails (an `error`
--- event of type "response_too_large", then `end` incomplete) and the process is stopped
---@field max_file_bytes? integer bytes of each full output file (`full_output_path`,
--- `stderr_full_output_path`): past them the file ends with one line saying the rest was not
--- kept (the tail in memory still follows the output); nil or 0: no limit
---@field spill_dir? string the directory the full output files are made in (an existing
--- one, e.g. to remove them with it); nil: $TMPDIR, else /tmp
---@field async_spawn? boolean the spawn itself happens on the native worker thread (it
--- takes a few milliseconds on a loaded machine): `handle.pid` is nil until `on_start(pid)`
--- ran, and a program or working directory that is missing is not raised here but ends it
--- with on_exit({ error = "..." }). Writes, cancel and close_stdin may come at once; a
--- cancel before the spawn means it never starts.
---@field on_start? fun(pid: integer) with `async_spawn`: the process started
---@field spare_cpu_ms? integer (Linux) the process, its threads and the processes it
--- starts run on every CPU but the one Neovim's main thread is on, until
--- `handle:release_cpu()` or this many milliseconds: a server starting several threads
--- on a machine with few CPUs does not make the editor wait for one

---@class flemma.process.Result
---@field code integer|nil exit code (nil when a signal ended the process)
---@field signal integer|nil
---@field timed_out boolean
---@field cancelled boolean
---@field output string the kept tail of the merged output (or stdout); for binary output, a notice
---@field stderr string|nil the kept tail of stderr when not merged
---@field truncated boolean the output passed the limits
---@field total_bytes integer
---@field total_lines integer
---@field full_output_path string|nil temp file with the whole output (once over the limits, or binary)
---@field stderr_full_output_path string|nil the same for stderr when not merged
---@field binary boolean NUL bytes were seen
---@field error string|nil (async_spawn) the process could not be started: why, in one line

---@class flemma.process.Handle
---@field id integer
---@field pid integer|nil nil until an `async_spawn` process started
---@field private _done boolean

H.handles = {} ---@type table<integer, flemma.process.Handle>
H.poll = nil
H.Handle = {}
H.Handle.__index = H.Handle

--- Ends the process group: SIGTERM, SIGKILL after the grace period. on_exit still
--- runs (with `cancelled = true`). A no-op once the process finished.
function H.Handle:cancel()
  if self._done then
    return
  end
  self._cancelled = true
  native.proc_cancel(self.id)
end

--- Gives the process (spawned with `spare_cpu_ms`) every CPU again. A no-op once it
--- finished, or when it spared none.
function H.Handle:release_cpu()
  if not self._done and self._spare then
    self._spare = false
    native.proc_release_cpu(self.id)
  end
end

--- Stops reading the process's stdout (with `decoder`): a consumer that cannot keep
--- up holds the process back (it blocks on the full pipe) instead of queueing its
--- output. A no-op once the process finished.
function H.Handle:pause()
  if not self._done and not self._paused then
    self._paused = true
    native.proc_pause(self.id, true)
  end
end

--- Reads stdout again after pause().
function H.Handle:resume()
  if not self._done and self._paused then
    self._paused = false
    native.proc_pause(self.id, false)
  end
end

---@return boolean
function H.Handle:is_paused()
  return self._paused == true
end

--- Writes to stdin (needs `keep_stdin_open`).
---@param data string
function H.Handle:write(data)
  if type(data) ~= "string" then
    util.error("process: write() takes a string, not " .. type(data))
  end
  if not self._stdin_open then
    util.error("process: stdin is not open: spawn with `keep_stdin_open = true` to write to it")
  end
  native.proc_write(self.id, data)
end

--- Closes stdin after what was written (the child sees EOF).
function H.Handle:close_stdin()
  if self._stdin_open then
    self._stdin_open = false
    native.proc_close_stdin(self.id)
  end
end

---@return boolean
function H.Handle:is_running()
  return not self._done
end

function H.check(opts)
  if type(opts) ~= "table" then
    util.error("process.spawn: `opts` should be a table, not " .. type(opts))
  end
  local cmd = opts.cmd
  if type(cmd) ~= "table" or #cmd == 0 then
    util.error("process.spawn: `cmd` should be a non-empty list of strings (argv)")
  end
  for i, a in ipairs(cmd) do
    if type(a) ~= "string" then
      util.error(("process.spawn: `cmd[%d]` should be a string, not %s"):format(i, type(a)))
    end
  end
  local function typed(key, t)
    if opts[key] ~= nil and type(opts[key]) ~= t then
      util.error(("process.spawn: `%s` should be a %s, not %s"):format(key, t, type(opts[key])))
    end
  end
  typed("cwd", "string")
  typed("env", "table")
  typed("stdin", "string")
  typed("keep_stdin_open", "boolean")
  typed("merge_output", "boolean")
  typed("on_progress", "function")
  typed("decoder", "string")
  typed("on_events", "function")
  typed("spill_dir", "string")
  typed("async_spawn", "boolean")
  typed("spare_cpu_ms", "number")
  typed("on_start", "function")
  if opts.on_start and not opts.async_spawn then
    util.error("process.spawn: `on_start` needs `async_spawn` (a synchronous spawn returns the pid)")
  end
  if opts.decoder and not opts.on_events then
    util.error("process.spawn: `decoder` needs `on_events` to receive the decoded events")
  end
  if opts.decoder and opts.merge_output then
    util.error("process.spawn: a `decoder` reads stdout alone: leave `merge_output` unset (or false)")
  end
  for _, key in ipairs({ "timeout", "kill_grace", "max_lines", "max_bytes", "max_stdout_bytes", "max_file_bytes" }) do
    typed(key, "number")
    if opts[key] and opts[key] < 0 then
      util.error(("process.spawn: `%s` should not be negative"):format(key))
    end
  end
  local env = nil
  if opts.env then
    env = {}
    for k, v in pairs(opts.env) do
      if type(k) ~= "string" or k == "" or k:find("=", 1, true) then
        util.error("process.spawn: `env` keys should be variable names, not " .. vim.inspect(k))
      end
      if type(v) ~= "string" and type(v) ~= "number" then
        util.error(("process.spawn: `env.%s` should be a string, not %s"):format(k, type(v)))
      end
      env[#env + 1] = k .. "=" .. tostring(v)
    end
    table.sort(env)
  end
  return env
end

--- Whether an inherited variable's name looks like a secret's (the native side's
--- rule: KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, SERVICE_ACCOUNT, PRIVATE,
--- AUTH but not the word AUTHOR, COOKIE, SESSION, a `_PAT` ending; any case).
---@param name string
---@return boolean
function M.secret_name(name)
  local up = name:upper()
  local from = 1
  while true do
    local at = up:find("AUTH", from, true)
    if not at then
      break
    end
    local word_start = at == 1 or up:sub(at - 1, at - 1) == "_"
    local after = up:sub(at + 6, at + 6)
    if not (word_start and up:sub(at, at + 5) == "AUTHOR" and (after == "" or after == "_")) then
      return true
    end
    from = at + 1
  end
  for _, part in ipairs({
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "SERVICE_ACCOUNT",
    "PRIVATE",
    "COOKIE",
    "SESSION",
  }) do
    if up:find(part, 1, true) then
      return true
    end
  end
  return #up > 4 and up:sub(-4) == "_PAT"
end

--- A text with the password of every URL taken out: `scheme://user:password@host`
--- becomes `scheme://user@host` (`scheme://:password@host`: `scheme://host`). The
--- user part ends at the last `@` before the URL's path (`/`, `?`, `#`) or a blank,
--- so a raw `@` in a password goes as well.
---@param text string
---@return string
function M.strip_url_passwords(text)
  if not text:find("://", 1, true) then
    return text
  end
  local parts, from = {}, 1
  while true do
    local s, e = text:find("[%a][%w+.-]*://", from)
    if not s then
      break
    end
    local rest_end = (text:find("[/?#%s]", e + 1) or (#text + 1)) - 1
    -- The next URL inside this one's authority ends it (a list of URLs, a,b).
    local nxt = text:find("[%a][%w+.-]*://", e + 1)
    if nxt and nxt <= rest_end then
      rest_end = nxt - 1
    end
    local authority = text:sub(e + 1, rest_end)
    local at = authority:match(".*()@")
    local colon = at and authority:find(":", 1, true)
    parts[#parts + 1] = text:sub(from, e)
    if colon and colon < at then
      local user = authority:sub(1, colon - 1)
      parts[#parts + 1] = user ~= "" and (user .. "@") or ""
      parts[#parts + 1] = authority:sub(at + 1)
    else
      parts[#parts + 1] = authority
    end
    from = rest_end + 1
  end
  parts[#parts + 1] = text:sub(from)
  return table.concat(parts)
end

--- Secrets stay out of children: the native side never passes on an inherited
--- variable whose name looks like a secret's (KEY, TOKEN, SECRET, PASSWORD, PASSWD,
--- CREDENTIAL, SERVICE_ACCOUNT, PRIVATE, AUTH, COOKIE, SESSION, `*_PAT`; any case)
--- or whose value holds a PEM private key or JSON with "private_key". Here, the
--- variables the providers read their keys from are taken out as well (a bare
--- NAME), and so is any variable whose value holds a provider's key (a key
--- resolved this session, or the value of a provider's `api_key_env`), whatever
--- its name. Those named in `tools.env_passthrough` are passed on explicitly.
---@param env string[]|nil NAME=value entries from opts.env
---@param explicit table|nil opts.env
---@return string[]
function H.secret_env(env, explicit)
  local cfg = require("flemma.core.config").get()
  local pass = {}
  for _, name in ipairs((cfg.tools or {}).env_passthrough or {}) do
    pass[name] = true
  end
  env = env or {}
  local function given(name)
    return explicit ~= nil and explicit[name] ~= nil
  end
  local names = vim.tbl_keys(pass)
  table.sort(names)
  for _, name in ipairs(names) do
    local value = vim.env[name]
    if value ~= nil and not given(name) then
      env[#env + 1] = name .. "=" .. value
    end
  end
  local out = {}
  local function remove(name)
    -- Any name the environment can hold (exec passes on names a shell cannot write,
    -- such as CFG-DEPLOY or app.key): all but `=` and NUL.
    if
      type(name) == "string"
      and name ~= ""
      and not name:find("[=%z]")
      and not pass[name]
      and not given(name)
      and not out[name]
    then
      out[name] = true
      env[#env + 1] = name
    end
  end
  -- The keys to look for in every value: at least 8 bytes (a shorter one would
  -- match ordinary text).
  local keys = {}
  for _, k in ipairs(util.secret_values()) do
    keys[#keys + 1] = k
  end
  for _, provider in pairs(cfg.providers or {}) do
    local name = type(provider) == "table" and provider.api_key_env or nil
    remove(name)
    local v = type(name) == "string" and vim.env[name] or nil
    if type(v) == "string" then
      keys[#keys + 1] = vim.trim(v)
    end
  end
  keys = vim.tbl_filter(function(k)
    return #k >= 8
  end, keys)
  -- A password inside a URL (DATABASE_URL=postgres://user:pass@host/db, REDIS_URL,
  -- AMQP_URL, any scheme://user:password@): the variable stays, without the password
  -- (postgres://user@host/db).
  for name, value in pairs(vim.fn.environ()) do
    if type(value) == "string" and not pass[name] and not given(name) and not M.secret_name(name) then
      local clean = M.strip_url_passwords(value)
      if clean ~= value then
        env[#env + 1] = name .. "=" .. clean
      end
    end
  end
  if #keys > 0 then
    for name, value in pairs(vim.fn.environ()) do
      if type(value) == "string" and #value >= 8 then
        for _, k in ipairs(keys) do
          if value:find(k, 1, true) then
            remove(name)
            break
          end
        end
      end
    end
  end
  return env
end

function H.ensure_poll()
  if H.poll then
    return
  end
  local fd = native.proc_fd()
  local poll = assert(vim.uv.new_poll(fd))
  H.drain_timer = assert(vim.uv.new_timer())
  poll:start("r", function(err)
    if err then
      return
    end
    H.drain()
  end)
  H.poll = poll
end

-- Decoded stream events taken in one turn of the loop (bytes of text, see
-- native.proc_events): a fast stream (a model answering megabytes at once) is
-- handled in slices of a millisecond or two, with the loop running (timers,
-- input, redraws) between them.
H.DRAIN_BYTES = 64 * 1024

-- Fast context: takes events now (keeps the descriptor drained) and handles them
-- where the API is allowed, in order; once they are handled, the rest of a long
-- run is taken on the next turn of the loop.
function H.drain()
  local events, more = native.proc_events(H.DRAIN_BYTES)
  if #events == 0 and not more then
    return
  end
  vim.schedule(function()
    H.dispatch(events)
    if more and not H.drain_timer:is_active() then
      H.drain_timer:start(0, 0, H.drain)
    end
  end)
end

--- The whole output kept on disk (a truncated or binary output) is redacted as the
--- output in the buffer is (util.redact: every key Flemma resolved, secret-looking
--- environment values but those of `tools.env_passthrough`, authentication headers),
--- so that a key split between two reads goes as well. The file is rewritten into a
--- new private file renamed over it (if that fails both are removed). The library
--- does it on a native worker thread of its own (flemma_procmgr_redact_file: the
--- values are passed in memory), the main loop only starts it and takes its exit
--- event; without it, it is done here one piece per turn of the loop. Either way a
--- 100 MB output never holds Neovim. `done()` runs when it is over.
---@param path string|nil
---@param done fun()
function H.redact_file(path, done)
  if not path or path == "" then
    return done()
  end
  local except = H.redact_except()
  if native.proc_can_redact_file() then
    local ok, id = pcall(function()
      H.ensure_poll()
      return native.proc_redact_file(path, util.redact_values(except))
    end)
    if ok then
      H.redacting[id] = done
      return
    end
    -- It could not start: fail closed.
    os.remove(path .. ".redacted")
    os.remove(path)
    return done()
  end
  H.redact_file_lua(path, except, done)
end

-- Redactions running natively: their id -> done().
H.redacting = {}

-- The environment variables whose values a kept output keeps (tools.env_passthrough).
function H.redact_except()
  local except = {}
  for _, n in ipairs((require("flemma.core.config").get().tools or {}).env_passthrough or {}) do
    except[n] = true
  end
  return except
end

-- Without the native redaction: util.redactor, one piece per turn of the loop.
function H.redact_file_lua(path, except, done)
  local r = util.redactor(except)
  local tmp = path .. ".redacted"
  local src, fd
  local function finish(ok)
    if src then
      pcall(src.close, src)
    end
    if fd then
      pcall(vim.uv.fs_close, fd)
    end
    if not (ok and vim.uv.fs_rename(tmp, path)) then
      os.remove(tmp)
      os.remove(path)
    end
    done()
  end
  local function put(text)
    if text ~= "" then
      assert(vim.uv.fs_write(fd, text, -1))
    end
  end
  local function step()
    local ok, more = pcall(function()
      local piece = src:read(H.REDACT_PIECE)
      if not piece then
        put(r.flush())
        return false
      end
      put(r.push(piece))
      return true
    end)
    if ok and more then
      -- A timer, not vim.schedule: Neovim runs callbacks scheduled by a scheduled
      -- callback in the same turn, which made the whole file one block (20 ms per 10 MB).
      vim.defer_fn(step, 0)
    else
      finish(ok)
    end
  end
  local ok = pcall(function()
    src = assert(io.open(path, "rb"))
    fd = assert(vim.uv.fs_open(tmp, "wx", 384)) -- 0600, never an existing file
  end)
  if not ok then
    return finish(false)
  end
  step()
end

-- Bytes of a kept output redacted in one turn of the loop.
H.REDACT_PIECE = 256 * 1024

--- The same for another file Flemma saved whole (an MCP result's text): `done()` once
--- the file holds no secret (or is removed), a piece per turn of the loop.
---@param path string|nil
---@param done fun()
M.redact_file = H.redact_file

function H.result(ev, merged)
  local out, err = ev.out, ev.err
  local binary = out.binary or (not merged and err.binary) or false
  local r = {
    code = ev.code,
    signal = ev.signal,
    timed_out = ev.timed_out,
    cancelled = ev.cancelled,
    output = out.tail,
    truncated = out.truncated or (not merged and err.truncated) or false,
    total_bytes = out.total_bytes,
    total_lines = out.total_lines,
    full_output_path = out.path,
    binary = binary,
  }
  if not merged then
    r.stderr = err.tail
    r.stderr_full_output_path = err.path
  end
  if out.binary then
    r.output = ("[binary output: %s%s]"):format(
      native.format_size(out.total_bytes),
      out.path and ("; saved to " .. out.path) or ""
    )
  end
  if not merged and err.binary then
    r.stderr = ("[binary output: %s%s]"):format(
      native.format_size(err.total_bytes),
      err.path and ("; saved to " .. err.path) or ""
    )
  end
  return r
end

function H.dispatch(events)
  for _, ev in ipairs(events) do
    local h = H.handles[ev.id]
    local redacted = H.redacting[ev.id]
    if redacted and ev.kind == "exit" then
      H.redacting[ev.id] = nil
      util.safe(redacted, "redact_file done")()
    elseif h then
      if ev.kind == "started" then
        h.pid = ev.pid
        if h._on_start and not h._done then
          h._on_start(ev.pid)
        end
      elseif ev.kind == "progress" then
        if h._on_progress and not h._done then
          h._on_progress({ bytes = ev.bytes, lines = ev.lines, last_line = ev.last_line })
        end
      elseif ev.kind == "stream" then
        if h._on_events and not h._done then
          h._on_events(ev.events)
        end
      else
        H.handles[ev.id] = nil
        h._done = true
        h._stdin_open = false
        local result = H.result(ev, h._merged)
        result.cancelled = result.cancelled or (h._cancelled and not result.timed_out) or false
        if ev.error then
          result.error = ev.error
        end
        if h._async and h.pid == nil then
          result.code = nil -- never started (an error, or cancelled before its spawn)
        end
        -- The kept output files are redacted before the result goes on.
        H.redact_file(ev.out.path, function()
          H.redact_file(not h._merged and ev.err.path or nil, function()
            h._on_exit(result)
          end)
        end)
      end
    end
  end
end

--- Starts a process. on_exit(result) runs once on the main thread.
---@param opts flemma.process.Opts
---@param on_exit fun(result: flemma.process.Result)
---@return flemma.process.Handle
function M.spawn(opts, on_exit)
  local env = H.secret_env(H.check(opts), opts.env)
  if type(on_exit) ~= "function" then
    util.error("process.spawn: `on_exit` should be a function, not " .. type(on_exit))
  end
  local merged = opts.merge_output ~= false and not opts.decoder
  H.ensure_poll()
  local stdin_mode = 0
  if opts.keep_stdin_open then
    stdin_mode = 2
  elseif opts.stdin then
    stdin_mode = 1
  end
  local id, pid = native.proc_spawn({
    argv = opts.cmd,
    cwd = opts.cwd,
    env = env,
    stdin = opts.stdin,
    stdin_mode = stdin_mode,
    merge_output = merged,
    progress = opts.on_progress ~= nil,
    timeout_ms = opts.timeout and math.floor(opts.timeout) or 0,
    kill_grace_ms = opts.kill_grace and math.floor(opts.kill_grace) or -1,
    max_lines = opts.max_lines and math.floor(opts.max_lines) or 0,
    max_bytes = opts.max_bytes and math.floor(opts.max_bytes) or 0,
    decoder = opts.decoder,
    max_stdout_bytes = opts.max_stdout_bytes and math.floor(opts.max_stdout_bytes) or 0,
    max_file_bytes = opts.max_file_bytes and math.floor(opts.max_file_bytes) or 0,
    spill_dir = opts.spill_dir,
    async = opts.async_spawn,
    spare_cpu_ms = opts.spare_cpu_ms and math.floor(opts.spare_cpu_ms) or 0,
  })
  local handle = setmetatable({
    id = id,
    pid = pid,
    _done = false,
    _merged = merged,
    _stdin_open = stdin_mode == 2,
    _on_exit = util.safe(on_exit, "process on_exit"),
    _on_progress = opts.on_progress and util.safe(opts.on_progress, "process on_progress") or nil,
    _on_events = opts.on_events and util.safe(opts.on_events, "process on_events") or nil,
    _on_start = opts.on_start and util.safe(opts.on_start, "process on_start") or nil,
    _async = opts.async_spawn == true,
    _spare = (opts.spare_cpu_ms or 0) > 0,
  }, H.Handle)
  H.handles[id] = handle
  return handle
end

--- Starts a native search (grep, glob, find without rg or fd) on a worker thread
--- of its own, watched like a child: `on_events(events)` receives batches of
--- `search_match`, `search_file` and finally one `search_summary` event, then
--- `on_exit(result)` runs once (code 0, or 2 when it failed; `cancelled` after
--- handle:cancel()). Both run on the main thread. Raises on a bad request (a
--- pattern the engine does not take).
---@param opts table the fields of native.proc_search
---@param on_events fun(events: table[])
---@param on_exit fun(result: flemma.process.Result)
---@return flemma.process.Handle
function M.search(opts, on_events, on_exit)
  if type(on_events) ~= "function" or type(on_exit) ~= "function" then
    util.error("process.search: `on_events` and `on_exit` should be functions")
  end
  H.ensure_poll()
  local id = native.proc_search(opts)
  local handle = setmetatable({
    id = id,
    pid = nil,
    _done = false,
    _merged = true,
    _stdin_open = false,
    _on_exit = util.safe(on_exit, "search on_exit"),
    _on_events = util.safe(on_events, "search on_events"),
  }, H.Handle)
  H.handles[id] = handle
  return handle
end

--- Handles of the processes still running.
---@return flemma.process.Handle[]
function M.running()
  local list = vim.tbl_values(H.handles)
  table.sort(list, function(a, b)
    return a.id < b.id
  end)
  return list
end

--- Kills (SIGKILL) every process group the plugin started, at once. Their
--- on_exit callbacks still run (cancelled) if the editor keeps running.
function M.kill_all()
  for _, h in pairs(H.handles) do
    h._cancelled = true
  end
  native.proc_kill_all()
end

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = vim.api.nvim_create_augroup("flemma.core.process", { clear = true }),
  desc = "Flemma: kill running tool processes",
  callback = function()
    M.kill_all()
  end,
})

return M
