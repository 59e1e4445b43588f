--- The models an OpenAI-compatible server offers (`kind = "openai_chat"` entries: the
--- user's own, ollama, llama.cpp, ...): GET <endpoint without /chat/completions>/models,
--- fetched in the background with curl (flemma.provider.transport), the key sent as a
--- request's key is (on stdin, never in argv, only to the host the entry's key may go
--- to), bounded in size, count and time, and kept per URL for the session. Nothing
--- here waits: what is not known yet is offered as nothing (never another vendor's
--- models), and the list is there the next time it is asked for.
local util = require("flemma.core.util")

local M = {}
local H = {}

--- Bounds of an answer: bytes, models kept, seconds.
M.MAX_BYTES = 262144
M.MAX_MODELS = 1000
M.TIMEOUT = 10

---@class flemma.served.Entry
---@field state "pending"|"ok"|"failed"
---@field models string[] sorted, unique
---@field error? string why it failed

---@type table<string, flemma.served.Entry>
H.cache = {}

--- The model list URL of an endpoint: `…/chat/completions` becomes `…/models`; nil for
--- an endpoint of another shape.
---@param endpoint string|nil
---@return string|nil
function M.url(endpoint)
  if type(endpoint) ~= "string" then
    return nil
  end
  local base = endpoint:match("^(https?://[^?#]-)/chat/completions/?$")
  if not base then
    return nil
  end
  return base .. "/models"
end

--- The provider spec that fetches the list of entry `name` (the URL as its endpoint,
--- so the key goes where flemma.secrets.destination lets it for that URL).
function H.spec(name, config)
  config = config or require("flemma.core.config").get_setup()
  local entry = config.providers[name]
  if type(entry) ~= "table" or entry.kind ~= "openai_chat" then
    return nil
  end
  local url = M.url(entry.endpoint)
  if not url then
    return nil
  end
  return {
    name = name,
    kind = entry.kind,
    endpoint = url,
    api_key_env = entry.api_key_env,
    headers = entry.headers,
  }
end

--- The model ids of an answer: `{"data": [{"id": ...}, ...]}` (OpenAI, ollama,
--- llama.cpp, vLLM, ...). Ids that could not be a word of a command line are left out.
---@param body string
---@return string[]|nil
---@return string|nil err
function M.parse(body)
  local ok, doc = pcall(vim.json.decode, body)
  if not ok or type(doc) ~= "table" or type(doc.data) ~= "table" then
    return nil, "the answer is not a model list (`data` is missing)"
  end
  local seen, out = {}, {}
  for _, m in ipairs(doc.data) do
    local id = type(m) == "table" and m.id or nil
    if type(id) == "string" and #id <= 200 and id:match("^[%w._:/@+%-]+$") and not seen[id] then
      seen[id] = true
      out[#out + 1] = id
      if #out >= M.MAX_MODELS then
        break
      end
    end
  end
  table.sort(out)
  return out
end

--- Starts fetching the list of entry `name` (unless it is known or on its way, or
--- `force` after a failure). cb(models|nil, err) when it ends (at once when known).
---@param name string
---@param o? { config?: table, force?: boolean, cb?: fun(models: string[]|nil, err: string|nil) }
function M.fetch(name, o)
  o = o or {}
  local cb = o.cb or function() end
  local spec = H.spec(name, o.config)
  if not spec then
    return cb(nil, ("%s has no model list"):format(name))
  end
  local url = spec.endpoint
  local c = H.cache[url]
  if c and c.state == "ok" then
    return cb(c.models)
  end
  if c and c.state == "pending" then
    c.waiting[#c.waiting + 1] = cb
    return
  end
  if c and c.state == "failed" and not o.force then
    return cb(nil, c.error)
  end
  c = { state = "pending", models = {}, waiting = { cb } }
  H.cache[url] = c
  local function finish(models, err)
    c.state = models and "ok" or "failed"
    c.models = models or {}
    c.error = err and ("%s: the model list (%s): %s"):format(name, url, err) or nil
    if err then
      require("flemma.core.log").info("%s", c.error)
    end
    local waiting = c.waiting
    c.waiting = nil
    for _, w in ipairs(waiting) do
      pcall(w, models, c.error)
    end
  end
  local provider = require("flemma.provider.resolve")
  provider.resolve_key(spec, function(key, kerr)
    if kerr then
      return finish(nil, util.message(kerr))
    end
    local headers = { accept = "application/json" }
    if key then
      headers["authorization"] = "Bearer " .. key
    end
    for k, v in pairs(spec.headers or {}) do
      headers[k] = v
    end
    local ok, err = pcall(require("flemma.provider.transport").get, {
      url = url,
      headers = headers,
      timeout = M.TIMEOUT,
      max_bytes = M.MAX_BYTES,
    }, function(body, gerr)
      if not body then
        return finish(nil, gerr)
      end
      finish(M.parse(body))
    end)
    if not ok then
      finish(nil, util.message(err))
    end
  end)
end

--- The models of entry `name` known now: the list, or nil while it is not (then the
--- fetch starts, unless it failed: :Flemma switch fetches again, see M.refresh).
---@param name string
---@param config? table
---@return string[]|nil
function M.models(name, config)
  local spec = H.spec(name, config)
  if not spec then
    return nil
  end
  local c = H.cache[spec.endpoint]
  if c and c.state == "ok" then
    return c.models
  end
  if not c then
    M.fetch(name, { config = config })
  end
  return nil
end

--- Fetches the list of entry `name` again if the last try failed (:Flemma switch).
---@param name string
---@param config? table
function M.refresh(name, config)
  local spec = H.spec(name, config)
  if not spec then
    return
  end
  local c = H.cache[spec.endpoint]
  if c and c.state == "failed" then
    M.fetch(name, { config = config, force = true })
  end
end

--- Where the list of entry `name` is: nil (not asked for, or no list), "pending",
--- "ok" or "failed" (and why).
---@param name string
---@param config? table
---@return string|nil state
---@return string|nil err
function M.state(name, config)
  local spec = H.spec(name, config)
  local c = spec and H.cache[spec.endpoint]
  if not c then
    return nil
  end
  return c.state, c.error
end

--- Forgets every list (specs).
function M.clear()
  H.cache = {}
end

return M
