--- Providers: the registry of kinds (one module each: request body and headers,
--- error bodies) and the shared path every request takes: resolving the named
--- provider, the API key, transport (curl), retries, writing the response into the
--- buffer, errors and usage. Installed as the send handler of `flemma.send`.
local util = require("flemma.core.util")

local M = {}
local H = {}

--- Kinds implemented here, by the module that builds their requests.
M.kinds = {
  anthropic = "flemma.provider.anthropic",
  openai_chat = "flemma.provider.openai_chat",
  openai = "flemma.provider.openai",
  vertex = "flemma.provider.vertex",
}

--- HTTP statuses retried (with retry-after or backoff) before any content streamed.
M.retry_statuses = { [429] = true, [503] = true, [529] = true }
--- Error types of an SSE error event retried the same way.
M.retry_error_types = { overloaded_error = true, rate_limit_error = true }
--- Backoff: base * 2^(attempt-1) ms plus up to `jitter` of it, capped at `max_delay`.
M.backoff = { base = 1000, jitter = 0.25, max_delay = 60000 }

---@class flemma.provider.Spec
---@field name string the key in `providers`
---@field kind string
---@field endpoint string
---@field api_key_env? string
---@field model string
---@field headers? table<string, string>

---@class flemma.provider.Context
---@field spec flemma.provider.Spec
---@field model string
---@field model_info? flemma.models.Model
---@field parameters table
---@field request { system?: string, messages: table[] }
---@field tools { name: string, description: string, input_schema: table }[]
---@field key? string

--- The module of a kind, or nil and a message.
---@param kind string
function M.kind(kind)
  local mod = M.kinds[kind]
  if not mod then
    return nil,
      ("provider kind `%s` is not supported by this version of Flemma (supported: %s)"):format(
        tostring(kind),
        table.concat(vim.tbl_keys(M.kinds), ", ")
      )
  end
  return require(mod)
end

--- The provider that sends: `config.provider` with its entry, and the model
--- (`config.model`, else the entry's `model`, else the model table's default).
---@param config? flemma.Config
---@return flemma.provider.Spec|nil
---@return string|nil err
function M.resolve(config)
  config = config or require("flemma.core.config").get()
  local name = config.provider
  local entry = config.providers[name]
  if type(entry) ~= "table" then
    return nil, ("provider `%s` has no entry in `providers`"):format(tostring(name))
  end
  local model = config.model
    or entry.model
    or require("flemma.core.models").defaults[name]
    or require("flemma.core.models").defaults[entry.kind]
  if not model or model == "" then
    return nil,
      ("%s: no model is set: set `model` in setup() (or `providers.%s.model`), e.g. a name from the server's model list"):format(
        name,
        name
      )
  end
  local endpoint = entry.endpoint
  if entry.kind == "vertex" then
    local verr
    endpoint, verr = H.vertex_endpoint(entry.endpoint, model, (config.parameters or {}).vertex or {})
    if not endpoint then
      return nil, ("%s: %s"):format(name, verr)
    end
  end
  if type(endpoint) ~= "string" or endpoint == "" then
    return nil, ("%s: `providers.%s.endpoint` is not set"):format(name, name)
  end
  return {
    name = name,
    kind = entry.kind,
    endpoint = endpoint,
    api_key_env = entry.api_key_env,
    headers = entry.headers,
    model = model,
  }
end

--- The provider that sends for a buffer: M.resolve of the buffer's configuration (its
--- frontmatter's `flemma.opt.provider`, `flemma.opt.model` and parameters on top of
--- the active ones). A frontmatter that fails resolves to nothing: nil and its error.
---@param bufnr integer
---@return flemma.provider.Spec|nil
---@return string|nil err
function M.resolve_buffer(bufnr)
  local config, err = require("flemma.chat.frontmatter").config(bufnr)
  if not config then
    return nil, err
  end
  return M.resolve(config)
end

--- The Vertex AI URL of a model: `providers.<name>.endpoint` (default: Google's, by
--- location) with {project_id}, {location} and {model} filled in from parameters.vertex.
function H.vertex_endpoint(template, model, vp)
  local location = vp.location or "global"
  if not template then
    local host = location == "global" and "aiplatform.googleapis.com" or (location .. "-aiplatform.googleapis.com")
    template = "https://"
      .. host
      .. "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse"
  end
  if template:find("{project_id}", 1, true) and (type(vp.project_id) ~= "string" or vp.project_id == "") then
    return nil,
      "`parameters.vertex.project_id` is not set (the Google Cloud project to bill), e.g. :Flemma switch vertex vertex.project_id=my-project"
  end
  local values = { project_id = vp.project_id, location = location, model = model }
  return (template:gsub("{([%w_]+)}", function(k)
    return values[k] and tostring(values[k]) or nil
  end))
end

--- Whether an endpoint's host is this machine (a key is optional there).
---@param endpoint string
---@return boolean
function M.is_loopback(endpoint)
  local secrets = require("flemma.policy.secrets")
  local _, host = secrets.url_host(endpoint)
  return secrets.is_loopback_host(host)
end
H.is_loopback = M.is_loopback

--- The API key of a provider, looked up without waiting: nil (none needed, or a
--- loopback server without one) or the key (a key that flemma.secrets resolved and
--- cached, else the environment variable); raises when a key is needed and missing.
--- M.send resolves the whole chain (keyring, gcloud, custom resolvers) first.
---@param spec flemma.provider.Spec
---@return string|nil
function M.key(spec)
  if not H.needs_key(spec) then
    return nil
  end
  local key = require("flemma.policy.secrets").peek(H.secret_target(spec))
  if key then
    return key
  end
  if H.is_loopback(spec.endpoint) then
    return nil
  end
  util.error(
    ("%s: no API key: set the environment variable %s (e.g. `export %s=...` before starting Neovim)"):format(
      spec.name,
      spec.api_key_env,
      spec.api_key_env
    )
  )
end

--- Where the key of a provider goes: the endpoint's host, or nil (no key is sent)
--- and why not (nil too when the entry takes no key). See flemma.secrets.destination:
--- a key never goes over http:// to another machine, and the variable of a built-in
--- entry goes only to the hosts it belongs to unless setup() named it for the entry.
---@param spec flemma.provider.Spec
---@return string|nil host
---@return string|nil why
function M.key_destination(spec)
  return require("flemma.policy.secrets").destination(
    spec.api_key_env,
    spec.endpoint,
    require("flemma.core.config").key_configured(spec.name),
    spec.name
  )
end

--- Whether a provider is sent a key (an entry with `api_key_env` whose key may go to
--- its endpoint's host).
function H.needs_key(spec)
  return M.key_destination(spec) ~= nil
end

--- What flemma.secrets resolvers are told about a provider.
function H.secret_target(spec)
  return { name = spec.name, kind = spec.kind, api_key_env = spec.api_key_env, endpoint = spec.endpoint }
end

--- Tool definitions offered in a buffer.
function H.tools(bufnr)
  local tools = require("flemma.tools")
  local names = bufnr and tools.for_buffer(bufnr) or tools.list()
  local out = {}
  for _, name in ipairs(names) do
    local def = tools.get(name)
    if def then
      out[#out + 1] =
        { name = name, description = def.description, input_schema = def.input_schema, strict = def.strict }
    end
  end
  return out
end

--- Everything a kind needs to build a request.
---@param spec flemma.provider.Spec
---@param request table from document.to_messages
---@param o? { bufnr?: integer, parameters?: table, tools?: table[], key?: string }
---@return flemma.provider.Context
function M.context(spec, request, o)
  o = o or {}
  local params = o.parameters
  if not params then
    local ok, fm = pcall(require, "flemma.chat.frontmatter")
    if ok and type(fm) == "table" and fm.parameters and o.bufnr then
      params = fm.parameters(o.bufnr, spec.kind)
    else
      params = vim.deepcopy(require("flemma.core.config").get().parameters)
    end
  end
  return {
    spec = spec,
    model = spec.model,
    model_info = require("flemma.core.models").get(spec.kind, spec.model),
    parameters = params,
    request = request,
    tools = o.tools or H.tools(o.bufnr),
    key = o.key,
    bufnr = o.bufnr,
  }
end

--- The request body (a table) and headers of a context, the entry's own headers on top.
---@param ctx flemma.provider.Context
---@return table body
---@return table<string, string> headers
function M.build(ctx)
  local kind = assert(M.kind(ctx.spec.kind))
  local body, headers = kind.build(ctx)
  for k, v in pairs(ctx.spec.headers or {}) do
    headers[k:lower()] = v
  end
  return body, headers
end

--- The request body as JSON text (what goes on the wire) and the headers. Kinds with
--- an `encode` reuse the encoding of unchanged document messages.
---@param ctx flemma.provider.Context
---@return string body
---@return table<string, string> headers
function M.encode(ctx)
  local kind = assert(M.kind(ctx.spec.kind))
  local json, headers
  if kind.encode then
    json, headers = kind.encode(ctx)
  else
    local body
    body, headers = kind.build(ctx)
    json = vim.json.encode(body)
  end
  for k, v in pairs(ctx.spec.headers or {}) do
    headers[k:lower()] = v
  end
  return json, headers
end

--- The body of M.encode as a list of string pieces (concatenated: the JSON text),
--- so a large conversation is not copied into one string before it is written.
---@param ctx flemma.provider.Context
---@return string[] pieces
---@return table<string, string> headers
function H.encode_pieces(ctx)
  local kind = assert(M.kind(ctx.spec.kind))
  if not kind.encode_pieces then
    local json, headers = M.encode(ctx)
    return { json }, headers
  end
  local pieces, headers = kind.encode_pieces(ctx)
  for k, v in pairs(ctx.spec.headers or {}) do
    headers[k:lower()] = v
  end
  return pieces, headers
end

--- The system text of a document (as document.to_messages joins it).
function H.system_text(doc)
  local out = {}
  for _, msg in ipairs(doc.messages) do
    if msg.role == "system" then
      for _, p in ipairs(msg.parts) do
        if p.kind == "text" then
          out[#out + 1] = p.text
        end
      end
    end
  end
  return #out > 0 and table.concat(out, "\n\n") or nil
end

-- ---------------------------------------------------------------------------
-- Requests
-- ---------------------------------------------------------------------------

---@type table<integer, table> the running request of each buffer
H.active = {}

--- Whether a request of the buffer is running.
function M.is_active(bufnr)
  return H.active[bufnr] ~= nil
end

--- Cancels the buffer's request: curl is stopped at once, the text that arrived is
--- kept, an incomplete tool use is dropped and a cancelled line is left.
---@return boolean true when a request was running
function M.cancel(bufnr)
  local req = H.active[bufnr]
  if not req then
    return false
  end
  H.finish(req, "cancelled")
  return true
end

function H.set_status(req, text)
  text = text and util.redact(text)
  if vim.api.nvim_buf_is_valid(req.bufnr) then
    vim.b[req.bufnr].flemma_status = text
  end
  if req.writer then
    req.writer:set_status(text and text:gsub("^" .. vim.pesc(req.spec.name) .. ": ", "") or nil)
  end
end

--- Ends a request once: writes its end into the buffer, unlocks, reports. `o.note`:
--- the request was stopped (curl too): the text stays, an incomplete tool use is
--- dropped and `o.note` is the line left (as a cancel does).
---@param o? { note?: string }
function H.finish(req, status, err, o)
  o = o or {}
  if req.finished then
    return
  end
  req.finished = true
  err = err and util.redact(err)
  if H.active[req.bufnr] == req then
    H.active[req.bufnr] = nil
  end
  if req.unload_au then
    pcall(vim.api.nvim_del_autocmd, req.unload_au)
    req.unload_au = nil
  end
  if req.retry_timer then
    req.retry_timer:stop()
    req.retry_timer:close()
    req.retry_timer = nil
  end
  if req.handle and (status == "cancelled" or o.note) then
    pcall(req.handle.cancel, req.handle)
  end
  local ok, werr = pcall(req.writer.finish, req.writer, o.note and "cancelled" or status, o.note)
  if vim.api.nvim_buf_is_valid(req.bufnr) then
    vim.b[req.bufnr].flemma_status = nil
  end
  local usage
  if status ~= "error" or next(req.usage) ~= nil then
    local kind = M.kind(req.spec.kind)
    local raw = vim.deepcopy(req.usage)
    if kind and kind.normalize_usage then
      kind.normalize_usage(raw)
    end
    local u = require("flemma.provider.usage")
    usage = u.record(raw, {
      kind = req.spec.kind,
      provider = req.spec.name,
      model = req.model or req.spec.model,
      cache_retention = req.ctx.parameters.cache_retention,
    })
    if next(req.usage) ~= nil then
      u.add(req.bufnr, usage)
      if status == "completed" then
        -- One line that fits the message area: a longer one makes Neovim wait for
        -- <Enter> (and hold the screen) after every answer in a narrow terminal.
        local width = math.max(20, (tonumber(vim.v.echospace) or 80) - #"(flemma) " - 1)
        local model = req.model or req.spec.model
        util.notify(u.format_fit(usage, { req.spec.name .. " " .. model, model }, width))
      end
    end
  end
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

function H.hint(req, status, message)
  local spec = req.spec
  local m = (message or ""):lower()
  if status == 401 or status == 403 then
    local host, withheld = M.key_destination(spec)
    if not host and withheld then
      return withheld
    end
    if spec.api_key_env then
      return ("check the key in %s"):format(spec.api_key_env)
    end
    return ("the server wants a key: set `providers.%s.api_key_env` to the variable holding it"):format(spec.name)
  elseif status == 404 or m:find("model") and (m:find("not found") or m:find("does not exist")) then
    return ("check `model` (%s) and the endpoint %s"):format(spec.model, spec.endpoint)
  elseif
    status == 413
    or m:find("too long")
    or m:find("context") and (m:find("length") or m:find("window") or m:find("exceed"))
  then
    return "the conversation is too long for the model: shorten it or start a new chat"
  elseif status == 429 then
    return "rate limited: wait a little and press <C-]> again"
  elseif status and status >= 500 then
    return "the provider has a problem: try again later"
  elseif status == 400 then
    return "the provider refused the request"
  end
  return nil
end

--- The user-facing error of a failed attempt.
function H.describe(req, a)
  local spec = req.spec
  local where = spec.name
  if a.curl_code and a.curl_code ~= 0 and (not a.status or a.curl_code == 28) then
    local what = require("flemma.provider.transport").curl_errors[a.curl_code]
      or ("curl failed (exit %d)"):format(a.curl_code)
    local detail = vim.trim(a.stderr or "")
    local hint
    if a.curl_code == 28 then
      hint = ("no complete answer within parameters.timeout (%ss) / connect_timeout (%ss)"):format(
        tostring(req.ctx.parameters.timeout),
        tostring(req.ctx.parameters.connect_timeout)
      )
    elseif a.curl_code == 6 or a.curl_code == 7 then
      hint = H.is_loopback(spec.endpoint) and ("is the %s server running at %s?"):format(spec.name, spec.endpoint)
        or ("check the network and `providers.%s.endpoint` (%s)"):format(spec.name, spec.endpoint)
    end
    return ("%s: %s%s%s"):format(where, what, detail ~= "" and (": " .. detail) or "", hint and ("\n" .. hint) or "")
  end
  if a.status and a.status >= 400 then
    local msg = a.error_message
    if not msg and a.body and a.body:match("^%s*{") then
      local ok, decoded = pcall(vim.json.decode, a.body)
      local kind = M.kind(spec.kind)
      if ok and kind then
        local t
        msg, t = kind.error_message(decoded)
        a.error_type = a.error_type or t
      end
    end
    if not msg and a.body and a.body ~= "" then
      if a.body:match("^%s*<") then
        msg = ("the server answered with an HTML page instead of JSON (%s)"):format(
          (a.body:match("<title>%s*(.-)%s*</title>") or ""):sub(1, 120)
        )
      else
        msg = vim.trim(a.body:sub(1, 300))
      end
    end
    local hint = H.hint(req, a.status, msg)
    return ("%s: HTTP %d%s%s%s"):format(
      where,
      a.status,
      a.error_type and (" " .. a.error_type) or "",
      msg and (': "' .. msg .. '"') or "",
      hint and ("\n" .. hint) or ""
    )
  end
  if a.error_message or a.error_type then
    local hint = H.hint(req, a.status, a.error_message)
    return ('%s: the stream reported an error%s: "%s"%s'):format(
      where,
      a.error_type and (" (" .. a.error_type .. ")") or "",
      a.error_message or "",
      hint and ("\n" .. hint) or ""
    )
  end
  if a.status == 200 and a.body and a.body ~= "" and not a.sse then
    return ("%s: the answer is not an event stream%s\ncheck `providers.%s.endpoint` (%s)"):format(
      where,
      a.body:match("^%s*<") and " (an HTML page)" or (': "' .. vim.trim(a.body:sub(1, 200)) .. '"'),
      spec.name,
      spec.endpoint
    )
  end
  local detail = vim.trim(a.stderr or "")
  return ("%s: the stream ended before the response was complete%s\ntry again (<C-]>)"):format(
    where,
    detail ~= "" and (" (" .. detail .. ")")
      or (a.curl_code and a.curl_code ~= 0 and (" (curl exit " .. a.curl_code .. ")") or "")
  )
end

--- Error types of the native decoder that end a stream early: it broke a limit.
M.limit_errors = { response_too_large = true, limit_exceeded = true }

--- Stops a request whose stream broke a limit: what arrived stays, with a line
--- saying why it stopped, and an error names the limit.
function H.stop_at_limit(req, ev)
  local name = req.spec.name
  if ev.error_type == "response_too_large" then
    local size = require("flemma.native").format_size(tonumber(req.ctx.parameters.max_response_bytes) or 0)
    return H.finish(
      req,
      "error",
      ("%s: the response passed parameters.max_response_bytes (%s): the request was stopped\nraise the limit if the answer is expected to be that long"):format(
        name,
        size
      ),
      { note = ("<!-- flemma: stopped: the response passed parameters.max_response_bytes (%s) -->"):format(size) }
    )
  end
  -- The decoder's own limits (JSON nesting, line length): a broken or hostile server.
  return H.finish(
    req,
    "error",
    ("%s: %s\nis `providers.%s.endpoint` (%s) the right server?"):format(
      name,
      util.redact(ev.message or ""),
      name,
      req.spec.endpoint
    ),
    { note = "<!-- flemma: stopped: the stream broke a limit of the decoder (JSON nesting or line length) -->" }
  )
end

--- Handles one batch of decoded events of the current attempt.
function H.on_events(req, a, events)
  if req.finished or a ~= req.attempt then
    return
  end
  for _, ev in ipairs(events) do
    local t = ev.type
    if t == "error" and M.limit_errors[ev.error_type] then
      return H.stop_at_limit(req, ev)
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
        if not a.streamed then
          a.streamed = true
          req.streamed = true
          H.set_status(req, nil)
        end
        req.writer:apply(ev)
      end
    end
  end
  -- A stream faster than the buffer takes it is held back (curl waits on the pipe)
  -- until the writer caught up: the text waiting stays bounded, and so does the
  -- work of a cancel or quit.
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

function H.on_exit(req, a, result)
  if req.finished or a ~= req.attempt then
    return
  end
  req.handle = nil
  a.curl_code = result.code
  a.stderr = util.redact(result.stderr)
  if result.cancelled then
    return H.finish(req, "cancelled")
  end
  local ok_http = a.status and a.status >= 200 and a.status < 300
  if ok_http and a.complete and not a.error_message then
    if a.stop_reason == "max_tokens" or a.stop_reason == "length" then
      util.warn(("%s: the response stopped at the output limit (parameters.max_tokens)"):format(req.spec.name))
    elseif a.stop_reason == "refusal" then
      util.warn(("%s: the model refused to answer"):format(req.spec.name))
    end
    -- The rest of a fast answer goes in at the writer's pace, then the response ends.
    req.writer:push_tail()
    req.writer:when_drained(function()
      H.finish(req, "completed")
    end)
    return
  end
  -- A key from the keyring or another cached resolver that the provider refused:
  -- forgotten, resolved again and the request retried, once.
  if a.status == 401 and not req.streamed and not req.reauthed and req.ctx.key then
    local secrets = require("flemma.policy.secrets")
    if secrets.cached_source(req.spec.name) then
      req.reauthed = true
      return H.reauth(req)
    end
  end
  -- A failure: retry when nothing streamed yet and the cause is transient.
  local transient = M.retry_statuses[a.status]
    or (not a.status and require("flemma.provider.transport").reset_codes[a.curl_code])
    or (ok_http and M.retry_error_types[a.error_type])
  local max = tonumber(req.ctx.parameters.max_retries) or 3
  if transient and not req.streamed and req.retries < max then
    req.retries = req.retries + 1
    local delay = M.retry_delay(req.retries, a.headers)
    local why = a.status and ("HTTP " .. a.status) or (a.error_type or ("curl exit " .. tostring(a.curl_code)))
    H.set_status(
      req,
      ("%s: %s, retry %d/%d in %ss"):format(req.spec.name, why, req.retries, max, ("%.1f"):format(delay / 1000))
    )
    req.retry_timer = vim.uv.new_timer()
    req.retry_timer:start(
      delay,
      0,
      vim.schedule_wrap(function()
        if req.retry_timer then
          req.retry_timer:close()
          req.retry_timer = nil
        end
        if not req.finished then
          H.set_status(req, ("%s: retry %d/%d"):format(req.spec.name, req.retries, max))
          H.attempt(req)
        end
      end)
    )
    return
  end
  local err = H.describe(req, a)
  if transient and req.retries > 0 then
    local after = (" (after %d %s)"):format(req.retries, req.retries == 1 and "retry" or "retries")
    local first_nl = err:find("\n", 1, true)
    err = first_nl and (err:sub(1, first_nl - 1) .. after .. err:sub(first_nl)) or (err .. after)
  end
  H.finish(req, "error", err)
end

function H.attempt(req)
  local a = {}
  req.attempt = a
  local ok, handle = pcall(require("flemma.provider.transport").start, {
    endpoint = req.spec.endpoint,
    headers = req.headers,
    body = req.body,
    decoder = req.spec.kind,
    connect_timeout = tonumber(req.ctx.parameters.connect_timeout),
    timeout = tonumber(req.ctx.parameters.timeout),
    max_response_bytes = tonumber(req.ctx.parameters.max_response_bytes),
    on_events = function(events)
      H.on_events(req, a, events)
    end,
    on_exit = function(result)
      H.on_exit(req, a, result)
    end,
  })
  if not ok then
    H.finish(req, "error", ("%s: %s"):format(req.spec.name, util.message(handle)))
    return
  end
  req.handle = handle
  req.pid = handle.pid
end

--- Sends a conversation and streams the answer into the buffer (the send handler).
---@param bufnr integer
---@param request table from document.to_messages
---@param done fun(result: { status: "completed"|"cancelled"|"error", usage?: flemma.Usage, error?: string, notified?: boolean })
---@param extra? { doc?: flemma.document.Doc } the document (then `request` may be nil)
function M.send(bufnr, request, done, extra)
  local doc = extra and extra.doc
  if H.active[bufnr] then
    done({ status = "error", error = "a request of this buffer is already running: <C-c> cancels it" })
    return
  end
  local spec, err = M.resolve_buffer(bufnr)
  if not spec then
    done({ status = "error", error = err })
    return
  end
  local kind, kerr = M.kind(spec.kind)
  if not kind then
    done({ status = "error", error = ("%s: %s"):format(spec.name, kerr) })
    return
  end
  local ok, res = pcall(function()
    local key = M.key(spec)
    local doc_messages
    if kind.encode and doc then
      doc_messages = doc.messages
      request = request or { system = H.system_text(doc), messages = {} }
    elseif not request then
      request = require("flemma.chat.document").to_messages(doc)
    end
    local ctx = M.context(spec, request, { bufnr = bufnr, key = key })
    ctx.doc_messages = doc_messages
    local body, headers = H.encode_pieces(ctx)
    return { ctx = ctx, body = body, headers = headers }
  end)
  if not ok then
    done({ status = "error", error = util.message(res) })
    return
  end
  local req = {
    bufnr = bufnr,
    spec = spec,
    ctx = res.ctx,
    body = res.body,
    headers = res.headers,
    done = done,
    usage = {},
    retries = 0,
  }
  req.writer = require("flemma.provider.writer").new(bufnr, {
    provider = spec.kind,
    label = spec.name,
    max_tool_calls = require("flemma.core.config").get().tools.max_calls_per_answer,
  })
  H.active[bufnr] = req
  -- Removed when the request finishes (H.finish): left in place, it kept every
  -- finished request of the buffer (its body: the whole conversation) alive
  -- until the buffer was unloaded.
  req.unload_au = vim.api.nvim_create_autocmd({ "BufUnload", "BufWipeout" }, {
    buffer = bufnr,
    once = true,
    callback = function()
      if H.active[bufnr] == req then
        -- Cheap however fast the stream: the text waiting to be written is bounded
        -- (the stream is held back), so :qa! does not write a backlog of seconds.
        -- flemma.ui.quit writes the marker of a buffer :wq! wrote again.
        H.finish(req, "cancelled")
      end
    end,
  })
  H.attempt(req)
end

--- The running request of a buffer (for specs and :Flemma status): { pid, provider }.
function M.active(bufnr)
  local req = H.active[bufnr]
  return req and { pid = req.pid, provider = req.spec.name, retries = req.retries } or nil
end

--- Resolves the key again after a 401 and retries the request with it.
function H.reauth(req)
  local secrets = require("flemma.policy.secrets")
  local old = req.ctx.key
  secrets.invalidate(req.spec.name)
  H.set_status(req, ("%s: the key was refused, looking it up again"):format(req.spec.name))
  secrets.resolve(H.secret_target(req.spec), function(key, why)
    if req.finished then
      return
    end
    if not key then
      return H.finish(req, "error", why)
    end
    req.ctx.key = key
    local headers = {}
    for name, value in pairs(req.headers) do
      local from = value:find(old, 1, true)
      if from then
        value = value:sub(1, from - 1) .. key .. value:sub(from + #old)
      end
      headers[name] = value
    end
    req.headers = headers
    H.attempt(req)
  end)
end

--- Whether the native stream decoder reads a kind's streams (a decoder made and
--- dropped: one FFI call).
function H.can_decode(kind)
  local native = require("flemma.native")
  local ok, dec = pcall(function()
    return type(native.stream_new) == "function" and native.stream_new(kind) or nil
  end)
  return ok and dec ~= nil
end

-- Key resolution comes first: the environment and cached keys answer at once, the
-- keyring, gcloud and custom resolvers (flemma.secrets) asynchronously; then the
-- request is built and sent with the key M.key finds.
H.send_resolved = M.send
H.resolving = {}

---@param bufnr integer
---@param request table from document.to_messages
---@param done fun(result: { status: "completed"|"cancelled"|"error", usage?: flemma.Usage, error?: string, notified?: boolean })
function M.send(bufnr, request, done, ...)
  local extra = { ... }
  local n = select("#", ...)
  if H.resolving[bufnr] then
    done({ status = "error", error = "a request of this buffer is already running: <C-c> cancels it" })
    return
  end
  local spec = M.resolve_buffer(bufnr)
  if spec and not H.can_decode(spec.kind) then
    done({
      status = "error",
      error = ("%s: this build of Flemma cannot read %s streams yet (the native stream decoder has no `%s` kind): nothing was sent; `:Flemma switch` to another provider"):format(
        spec.name,
        spec.kind,
        spec.kind
      ),
    })
    return
  end
  local secrets = require("flemma.policy.secrets")
  if not spec or not H.needs_key(spec) or H.active[bufnr] or secrets.peek(H.secret_target(spec)) then
    return H.send_resolved(bufnr, request, done, unpack(extra, 1, n))
  end
  local state = { done = done }
  H.resolving[bufnr] = state
  vim.b[bufnr].flemma_status = ("%s: looking up the API key"):format(spec.name)
  secrets.resolve(H.secret_target(spec), function(key, why)
    if H.resolving[bufnr] ~= state then
      return -- cancelled meanwhile
    end
    H.resolving[bufnr] = nil
    if vim.api.nvim_buf_is_valid(bufnr) then
      vim.b[bufnr].flemma_status = nil
    end
    if not key and not H.is_loopback(spec.endpoint) then
      return done({ status = "error", error = why })
    end
    H.send_resolved(bufnr, request, done, unpack(extra, 1, n))
  end)
end

--- Resolves a provider's key through flemma.secrets: cb(key) (nil when none is
--- needed, or a loopback server goes without), or cb(nil, message) when one is
--- needed and no resolver had it.
---@param spec flemma.provider.Spec
---@param cb fun(key: string|nil, err: string|nil)
function M.resolve_key(spec, cb)
  if not H.needs_key(spec) then
    return cb(nil)
  end
  require("flemma.policy.secrets").resolve(H.secret_target(spec), function(key, why)
    if key then
      return cb(key)
    end
    if H.is_loopback(spec.endpoint) then
      return cb(nil)
    end
    cb(nil, why)
  end)
end

H.cancel_active = M.cancel
function M.cancel(bufnr)
  local state = H.resolving[bufnr]
  if state then
    H.resolving[bufnr] = nil
    if vim.api.nvim_buf_is_valid(bufnr) then
      vim.b[bufnr].flemma_status = nil
    end
    state.done({ status = "cancelled" })
    return true
  end
  return H.cancel_active(bufnr)
end

H.is_active_request = M.is_active
function M.is_active(bufnr)
  return H.resolving[bufnr] ~= nil or H.is_active_request(bufnr)
end

return M
