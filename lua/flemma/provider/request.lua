--- The request of one buffer, from the send to its end, as one state machine. Each
--- state is entered by one function, below in the order a request passes them:
---
---   resolving_key ──> attempting ──> streaming ──> finished
---         ^               │   ^                    (completed | cancelled | error)
---         │ a refused key │   │ a transient failure before anything streamed
---         └───────────────┤   │
---                         └──> waiting_retry
---
--- A request starts in resolving_key (the key of the buffer's provider: at once from
--- the cache or the environment, else from the keyring, gcloud or a custom resolver),
--- builds its body once, and makes attempts (curl through flemma.provider.transport)
--- until one streams or it gives up. The first content event moves it to streaming;
--- from then on it is never retried. `cancel`, unloading the buffer and a broken limit
--- finish it from any state. Only the current attempt's callbacks act: a stale
--- attempt's events and exit are ignored.
local session = require("flemma.core.session")
local util = require("flemma.core.util")
local resolve = require("flemma.provider.resolve")
local encode = require("flemma.provider.encode")
local kinds = require("flemma.provider.kinds")
local failure = require("flemma.provider.failure")

local M = {}
local H = {}

--- HTTP statuses retried (with retry-after or backoff) before any content streamed.
M.retry_statuses = { [429] = true, [503] = true, [529] = true }
--- Error types of an SSE error event retried the same way.
M.retry_error_types = { overloaded_error = true, rate_limit_error = true }
--- Backoff: base * 2^(attempt-1) ms plus up to `jitter` of it, capped at `max_delay`.
M.backoff = { base = 1000, jitter = 0.25, max_delay = 60000 }
--- Error types of the native decoder that end a stream early: it broke a limit.
M.limit_errors = { response_too_large = true, limit_exceeded = true }

---@alias flemma.provider.State "resolving_key"|"attempting"|"waiting_retry"|"streaming"|"finished"

---@class flemma.provider.Result
---@field status "completed"|"cancelled"|"error"
---@field usage? flemma.Usage
---@field error? string
---@field notified? boolean the error was shown already
---@field tool_uses? integer

---@class flemma.provider.Request
---@field bufnr integer
---@field state flemma.provider.State
---@field spec flemma.provider.Spec
---@field request? table the conversation (document.to_messages), when not read from `doc`
---@field doc? flemma.document.Doc
---@field done fun(result: flemma.provider.Result)
---@field ctx? flemma.provider.Context once the key is known
---@field body? string[] the request body's pieces, built once
---@field headers? table<string, string>
---@field writer? flemma.provider.Writer once the body is built
---@field attempt? flemma.provider.Attempt the current attempt
---@field handle? flemma.process.Handle curl of the current attempt
---@field pid? integer
---@field timer? uv.uv_timer_t waiting_retry's
---@field retries integer
---@field reauthed? boolean a refused key was looked up again (once)
---@field usage table what the stream reported
---@field model? string the model the server says answers
---@field unload_au? integer

---@type table<integer, flemma.provider.Request> the unfinished request of each buffer
-- H.requests: the `request` field of each buffer's session record (flemma.core.session).

--- Starts the request of a buffer: `done` is called once with its result.
---@param bufnr integer
---@param request? table the conversation (document.to_messages); nil: read from `doc`
---@param done fun(result: flemma.provider.Result)
---@param doc? flemma.document.Doc the document (templates and files expanded)
function M.start(bufnr, request, done, doc)
  if session.field(bufnr, "request") then
    return done({ status = "error", error = "a request of this buffer is already running: <C-c> cancels it" })
  end
  local spec, err = resolve.resolve_buffer(bufnr)
  if not spec then
    return done({ status = "error", error = err })
  end
  local _, kerr = kinds.get(spec.kind)
  if kerr then
    return done({ status = "error", error = ("%s: %s"):format(spec.name, kerr) })
  end
  local req = {
    bufnr = bufnr,
    spec = spec,
    request = request,
    doc = doc,
    done = done,
    usage = {},
    retries = 0,
  }
  session.get(bufnr).request = req
  -- Unloading the buffer (:bd, :qa!) cancels; removed when the request finishes (left
  -- in place, it kept every finished request of the buffer, its body the whole
  -- conversation, alive until the buffer was unloaded). Cheap however fast the
  -- stream: the text waiting to be written is bounded (the stream is held back), and
  -- flemma.ui.quit writes the marker of a buffer :wq! wrote again.
  req.unload_au = vim.api.nvim_create_autocmd({ "BufUnload", "BufWipeout" }, {
    buffer = bufnr,
    once = true,
    callback = function()
      H.finish(req, "cancelled")
    end,
  })
  H.resolving_key(req)
end

--- resolving_key: the key of the provider. Known without waiting (none needed, the
--- cache, the environment): on at once. Otherwise the resolvers are asked and the
--- status line says so; `refused` (a 401 for a cached key): the cached key is
--- forgotten and looked up again.
---@param req flemma.provider.Request
---@param refused? boolean
function H.resolving_key(req, refused)
  req.state = "resolving_key"
  local spec = req.spec
  local secrets = require("flemma.policy.secrets")
  if refused then
    secrets.invalidate(spec.name)
    H.set_status(req, ("%s: the key was refused, looking it up again"):format(spec.name))
    return secrets.resolve(resolve.secret_target(spec), function(key, why)
      if req.state == "resolving_key" then
        if key then
          H.attempting(req, key)
        else
          H.finish(req, "error", why)
        end
      end
    end)
  end
  if not resolve.needs_key(spec) then
    return H.attempting(req, nil)
  end
  local known = secrets.peek(resolve.secret_target(spec))
  if known then
    return H.attempting(req, known)
  end
  H.set_status(req, ("%s: looking up the API key"):format(spec.name))
  resolve.resolve_key(spec, function(key, why)
    if req.state ~= "resolving_key" then
      return -- cancelled meanwhile
    end
    H.set_status(req, nil)
    if why then
      return H.finish(req, "error", why)
    end
    H.attempting(req, key)
  end)
end

--- attempting: one curl run. The first attempt builds the body (once: retries send
--- the same pieces) and the writer; after a refused key, the new key replaces the
--- old one in the headers.
---@param req flemma.provider.Request
---@param key string|nil
function H.attempting(req, key)
  if not req.body then
    local ok, err = pcall(H.build, req, key)
    if not ok then
      return H.finish(req, "error", util.message(err))
    end
  elseif key and req.ctx.key and key ~= req.ctx.key then
    req.headers = H.swap_key(req.headers, req.ctx.key, key)
    req.ctx.key = key
  end
  req.state = "attempting"
  local a = {}
  req.attempt = a
  local params = req.ctx.parameters
  local ok, handle = pcall(require("flemma.provider.transport").start, {
    endpoint = req.spec.endpoint,
    headers = req.headers,
    body = req.body,
    decoder = kinds.get(req.spec.kind).stream,
    connect_timeout = tonumber(params.connect_timeout),
    timeout = tonumber(params.timeout),
    max_response_bytes = tonumber(params.max_response_bytes),
    on_events = function(events)
      H.on_events(req, a, events)
    end,
    on_exit = function(result)
      H.on_exit(req, a, result)
    end,
  })
  if not ok then
    return H.finish(req, "error", ("%s: %s"):format(req.spec.name, util.message(handle)))
  end
  req.handle = handle
  req.pid = handle.pid
end

--- The context, body pieces and headers of the request, and the writer of its answer.
function H.build(req, key)
  local o = { bufnr = req.bufnr, key = key }
  local ctx
  if req.request then
    ctx = encode.context(req.spec, req.request, o)
  else
    ctx = encode.document_context(req.spec, req.doc, o)
  end
  req.ctx = ctx
  req.body, req.headers = encode.pieces(ctx)
  req.writer = require("flemma.provider.writer").new(req.bufnr, {
    provider = req.spec.kind,
    label = req.spec.name,
    max_tool_calls = require("flemma.core.config").get().tools.max_calls_per_answer,
  })
end

--- Headers with the old key replaced by the new one wherever it appears.
function H.swap_key(headers, old, new)
  local out = {}
  for name, value in pairs(headers) do
    local from = value:find(old, 1, true)
    if from then
      value = value:sub(1, from - 1) .. new .. value:sub(from + #old)
    end
    out[name] = value
  end
  return out
end

--- One batch of decoded events of an attempt: what the server says about itself is
--- noted on the attempt, content goes to the writer (and moves the request to
--- streaming), a broken limit finishes the request.
function H.on_events(req, a, events)
  if req.attempt ~= a or req.state == "finished" then
    return
  end
  for _, ev in ipairs(events) do
    local t = ev.type
    if t == "error" and M.limit_errors[ev.error_type] then
      local err, note = failure.limit(req.spec, req.ctx.parameters, ev)
      return H.finish(req, "error", err, { note = note })
    elseif t == "http" then
      a.status = ev.status
      a.headers = ev.headers or {}
      a.sse = (a.headers["content-type"] or ""):find("text/event%-stream") ~= nil
    elseif t == "error" then
      -- What a server says is redacted where it arrives (a server may echo the key),
      -- before any of it is cut short or shown.
      a.error_type = util.redact(ev.error_type)
      a.error_message = util.redact(ev.message)
    elseif t == "usage" then
      for k, v in pairs(ev) do
        if k ~= "type" then
          req.usage[k] = v
        end
      end
    elseif t == "message_start" then
      req.model = ev.model or req.model
    elseif t == "stop" then
      a.stop_reason = ev.reason
    elseif t == "end" then
      a.complete = ev.complete
      a.body = util.redact(ev.body)
    elseif not a.status or a.status < 300 then
      if
        t == "text"
        or t == "thinking"
        or t == "thinking_signature"
        or t == "redacted_thinking"
        or t:find("^tool_")
      then
        if req.state ~= "streaming" then
          H.streaming(req)
        end
        req.writer:apply(ev)
      end
    end
  end
  H.hold_back(req)
end

--- streaming: the answer began; the request is no longer retried.
function H.streaming(req)
  req.state = "streaming"
  H.set_status(req, nil)
end

--- A stream faster than the buffer takes it is held back (curl waits on the pipe)
--- until the writer caught up: the text waiting stays bounded, and so does the work
--- of a cancel or quit.
function H.hold_back(req)
  local handle = req.handle
  if handle and req.writer:over_limit() and not handle:is_paused() then
    handle:pause()
    req.writer.on_low = function()
      if req.handle == handle then
        handle:resume()
      end
    end
  end
end

--- The end of an attempt's curl: the request completes (once the writer wrote the
--- rest), looks up a refused key again, waits to retry, or fails.
function H.on_exit(req, a, result)
  if req.attempt ~= a or req.state == "finished" then
    return
  end
  req.handle = nil
  a.curl_code = result.code
  a.stderr = util.redact(result.stderr)
  if result.cancelled then
    return H.finish(req, "cancelled")
  end
  local name = req.spec.name
  local ok_http = a.status and a.status >= 200 and a.status < 300
  local at_limit = a.stop_reason == "max_tokens" or a.stop_reason == "length"
  if ok_http and a.complete and not a.error_message and at_limit and req.writer:cut_tool() then
    -- The output limit cut a tool call's input: the call is dropped (never written
    -- broken), the text stays with a line saying which limit to raise.
    return H.finish(
      req,
      "error",
      ("%s: the answer hit the output limit inside a tool call: the call was dropped; raise parameters.max_tokens"):format(
        name
      ),
      { note = "<!-- flemma: stopped: the answer hit the output limit; raise parameters.max_tokens -->" }
    )
  end
  if ok_http and a.complete and not a.error_message then
    if at_limit then
      util.warn(("%s: the response stopped at the output limit (parameters.max_tokens)"):format(name))
    elseif a.stop_reason == "refusal" then
      util.warn(("%s: the model refused to answer"):format(name))
    end
    -- The rest of a fast answer goes in at the writer's pace, then the request ends.
    req.writer:push_tail()
    return req.writer:when_drained(function()
      if not req.writer:has_content() then
        -- Nothing at all: the empty `@Assistant:` goes, as after an error.
        return H.finish(req, "error", ("%s: the provider sent an empty answer"):format(name))
      end
      H.finish(req, "completed")
    end)
  end
  if a.curl_code == 28 and req.writer:has_content() then
    -- Timed out while streaming: what arrived stays, marked as a cancel is.
    return H.finish(req, "error", failure.describe(req.spec, req.ctx.parameters, a), {
      note = ("<!-- flemma: timed out after %ss -->"):format(tostring(req.ctx.parameters.timeout)),
    })
  end
  local streamed = req.state == "streaming"
  -- A key from the keyring or another cached resolver that the provider refused:
  -- forgotten, resolved again and the request retried, once.
  if a.status == 401 and not streamed and not req.reauthed and req.ctx.key then
    if require("flemma.policy.secrets").cached_source(name) then
      req.reauthed = true
      return H.resolving_key(req, true)
    end
  end
  -- A failure: retried when nothing streamed yet and the cause is transient.
  local transient = M.retry_statuses[a.status]
    or (not a.status and require("flemma.provider.transport").reset_codes[a.curl_code])
    or (ok_http and M.retry_error_types[a.error_type])
  local max = tonumber(req.ctx.parameters.max_retries) or 3
  if transient and not streamed and req.retries < max then
    return H.waiting_retry(req, a, max)
  end
  local err = failure.describe(req.spec, req.ctx.parameters, a)
  if transient and req.retries > 0 then
    err = failure.after_retries(err, req.retries)
  end
  H.finish(req, "error", err)
end

--- waiting_retry: the status line counts down to the next attempt.
function H.waiting_retry(req, a, max)
  req.state = "waiting_retry"
  req.retries = req.retries + 1
  local name = req.spec.name
  local delay = M.retry_delay(req.retries, a.headers)
  local why = a.status and ("HTTP " .. a.status) or (a.error_type or ("curl exit " .. tostring(a.curl_code)))
  H.set_status(req, ("%s: %s, retry %d/%d in %ss"):format(name, why, req.retries, max, ("%.1f"):format(delay / 1000)))
  local timer = assert(vim.uv.new_timer())
  req.timer = timer
  timer:start(
    delay,
    0,
    vim.schedule_wrap(function()
      if req.timer ~= timer then
        return -- finished meanwhile
      end
      H.stop_timer(req)
      H.set_status(req, ("%s: retry %d/%d"):format(name, req.retries, max))
      H.attempting(req, req.ctx.key)
    end)
  )
end

--- The delay before retry `attempt` (1-based): the server's retry-after, else
--- exponential backoff with jitter.
---@param attempt integer
---@param headers? table<string, string>
---@return integer ms
function M.retry_delay(attempt, headers)
  headers = headers or {}
  local ms = tonumber(headers["retry-after-ms"])
  if not ms then
    local s = tonumber(headers["retry-after"])
    ms = s and s * 1000 or nil
  end
  if ms and ms >= 0 then
    return math.min(math.floor(ms), M.backoff.max_delay)
  end
  local base = M.backoff.base * 2 ^ (attempt - 1)
  return math.floor(math.min(base + base * M.backoff.jitter * math.random(), M.backoff.max_delay))
end

--- finished: once, from any state. Curl is stopped when cancelled or `o.note` (a
--- broken limit); the writer writes the end (the text that arrived stays, an
--- incomplete tool use is dropped, `o.note` or the cancelled line is left); usage is
--- recorded and shown; `done` gets the result. Before the writer exists (the key or
--- the body failed, or a cancel while resolving), nothing is written and `done` alone
--- reports.
---@param req flemma.provider.Request
---@param status "completed"|"cancelled"|"error"
---@param err? string
---@param o? { note?: string }
function H.finish(req, status, err, o)
  o = o or {}
  if req.state == "finished" then
    return
  end
  req.state = "finished"
  err = err and util.redact(err)
  if session.field(req.bufnr, "request") == req then
    session.set(req.bufnr, "request", nil)
  end
  if req.unload_au then
    pcall(vim.api.nvim_del_autocmd, req.unload_au)
    req.unload_au = nil
  end
  H.stop_timer(req)
  if req.handle and (status == "cancelled" or o.note) then
    pcall(req.handle.cancel, req.handle)
  end
  if not req.writer then
    H.clear_status(req)
    return req.done({ status = status, error = err })
  end
  local ok, werr = pcall(req.writer.finish, req.writer, o.note and "cancelled" or status, o.note)
  H.clear_status(req)
  local usage = H.record_usage(req, status)
  if not ok then
    err = (err and (err .. "; ") or "") .. "writing the end of the response failed: " .. util.message(werr)
    status = "error"
  end
  if err then
    util.notify(err, vim.log.levels.ERROR)
  end
  req.done({
    status = status,
    usage = usage,
    error = err,
    notified = err ~= nil,
    tool_uses = req.writer.tool_count or 0,
  })
end

function H.clear_status(req)
  if vim.api.nvim_buf_is_valid(req.bufnr) then
    vim.b[req.bufnr].flemma_status = nil
  end
end

function H.stop_timer(req)
  if req.timer then
    req.timer:stop()
    req.timer:close()
    req.timer = nil
  end
end

--- The usage of a finished request (kept for the buffer, and one line when it
--- completed); nil for an error before anything was reported.
function H.record_usage(req, status)
  if status == "error" and next(req.usage) == nil then
    return nil
  end
  local kind = kinds.get(req.spec.kind)
  local raw = vim.deepcopy(req.usage)
  if kind and kind.normalize_usage then
    kind.normalize_usage(raw)
  end
  local u = require("flemma.provider.usage")
  local model = req.model or req.spec.model
  local usage = u.record(raw, {
    kind = req.spec.kind,
    provider = req.spec.name,
    model = model,
    cache_retention = req.ctx.parameters.cache_retention,
  })
  if next(req.usage) ~= nil then
    u.add(req.bufnr, usage)
    if status == "completed" then
      -- One line that fits the message area: a longer one makes Neovim wait for
      -- <Enter> (and hold the screen) after every answer in a narrow terminal.
      local width = math.max(20, (tonumber(vim.v.echospace) or 80) - #"(flemma) " - 1)
      util.notify(u.format_fit(usage, { req.spec.name .. " " .. model, model }, width))
    end
  end
  return usage
end

--- The status of a request while it waits (nil clears): b:flemma_status and the line
--- the writer shows in the buffer.
function H.set_status(req, text)
  text = text and util.redact(text)
  if vim.api.nvim_buf_is_valid(req.bufnr) then
    vim.b[req.bufnr].flemma_status = text
  end
  if req.writer then
    req.writer:set_status(text and text:gsub("^" .. vim.pesc(req.spec.name) .. ": ", "") or nil)
  end
end

--- Cancels the buffer's request, in whatever state: curl is stopped at once, the text
--- that arrived is kept, an incomplete tool use is dropped and a cancelled line is left.
---@param bufnr integer
---@return boolean true when a request was running
function M.cancel(bufnr)
  local req = session.field(bufnr, "request")
  if not req then
    return false
  end
  H.finish(req, "cancelled")
  return true
end

--- Whether a request of the buffer is running (in any state but finished).
---@param bufnr integer
---@return boolean
function M.is_active(bufnr)
  return session.field(bufnr, "request") ~= nil
end

--- The running request of a buffer (for specs and :Flemma status): its state, curl's
--- pid (nil while no attempt runs), the provider and the retries so far.
---@param bufnr integer
---@return { state: flemma.provider.State, pid?: integer, provider: string, retries: integer }|nil
function M.info(bufnr)
  local req = session.field(bufnr, "request")
  return req and { state = req.state, pid = req.pid, provider = req.spec.name, retries = req.retries } or nil
end

return M
