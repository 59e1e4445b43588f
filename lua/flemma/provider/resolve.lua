--- Which provider sends and with which key: the named entry of `providers` with its
--- model and endpoint (the buffer's frontmatter on top of the active choice), and where
--- its key may go and how it is found (flemma.secrets).
local util = require("flemma.core.util")

local M = {}

---@class flemma.provider.Spec
---@field name string the key in `providers`
---@field kind string
---@field endpoint string
---@field api_key_env? string
---@field model string
---@field headers? table<string, string>

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
  local kind = require("flemma.provider.kinds").get(entry.kind)
  if kind then
    local eerr
    endpoint, eerr = kind.endpoint(entry.endpoint, model, config.parameters)
    if eerr then
      return nil, ("%s: %s"):format(name, eerr)
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

--- Whether an endpoint's host is this machine (a key is optional there).
---@param endpoint string
---@return boolean
function M.is_loopback(endpoint)
  local secrets = require("flemma.policy.secrets")
  local _, host = secrets.url_host(endpoint)
  return secrets.is_loopback_host(host)
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
---@param spec flemma.provider.Spec
---@return boolean
function M.needs_key(spec)
  return M.key_destination(spec) ~= nil
end

--- What flemma.secrets resolvers are told about a provider.
---@param spec flemma.provider.Spec
---@return flemma.secrets.Provider
function M.secret_target(spec)
  return { name = spec.name, kind = spec.kind, api_key_env = spec.api_key_env, endpoint = spec.endpoint }
end

--- The API key of a provider, looked up without waiting: nil (none needed, or a
--- loopback server without one) or the key (a key that flemma.secrets resolved and
--- cached, else the environment variable); raises when a key is needed and missing.
--- M.resolve_key resolves the whole chain (keyring, gcloud, custom resolvers).
---@param spec flemma.provider.Spec
---@return string|nil
function M.key(spec)
  if not M.needs_key(spec) then
    return nil
  end
  local key = require("flemma.policy.secrets").peek(M.secret_target(spec))
  if key then
    return key
  end
  if M.is_loopback(spec.endpoint) then
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

--- Resolves a provider's key through flemma.secrets: cb(key) (nil when none is
--- needed, or a loopback server goes without), or cb(nil, message) when one is
--- needed and no resolver had it. May call cb before returning.
---@param spec flemma.provider.Spec
---@param cb fun(key: string|nil, err: string|nil)
function M.resolve_key(spec, cb)
  if not M.needs_key(spec) then
    return cb(nil)
  end
  require("flemma.policy.secrets").resolve(M.secret_target(spec), function(key, why)
    if key then
      return cb(key)
    end
    if M.is_loopback(spec.endpoint) then
      return cb(nil)
    end
    cb(nil, why)
  end)
end

return M
