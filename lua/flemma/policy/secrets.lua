--- Credentials: where a provider's API key (or access token) comes from. A chain of
--- resolvers is tried in order of priority (highest first) until one gives a key:
---   env      (100) the environment variable named by `providers.<name>.api_key_env`
---   keyring   (50) the system keyring: `secret-tool lookup service <name> key api`
---                  (Linux), `security find-generic-password -s <name> -a api -w` (macOS)
---   gcloud    (10) vertex only: `gcloud auth print-access-token`, with the service
---                  account of $VERTEX_SERVICE_ACCOUNT (a JSON file or its text) if set
--- plus those registered with M.register (pass, 1Password, Bitwarden...). Resolvers that
--- run programs do so with vim.system and never block the editor. Keys found by a
--- resolver other than `env` are kept in memory for M.ttl seconds; a key that the
--- provider refused (HTTP 401) is forgotten once and resolved again. Keys are never
--- accepted in setup() or frontmatter, and never logged or shown.
local util = require("flemma.core.util")

local M = {}
local H = {}

--- Seconds a resolved key is kept in memory (access tokens of gcloud live an hour).
M.ttl = 50 * 60
--- Seconds a resolver may take before it counts as failed.
M.timeout = 15
--- The default priority of a registered resolver: after the environment, before the keyring.
M.default_priority = 75

---@class flemma.secrets.Provider
---@field name string the key in `providers`
---@field kind string
---@field api_key_env? string
---@field endpoint? string

---@class flemma.secrets.Resolver
---@field name string
---@field resolve fun(provider: flemma.secrets.Provider, cb: fun(key?: string, why?: string))
---@field priority integer
---@field description? string

---@type flemma.secrets.Resolver[]
H.resolvers = {}
---@type table<string, { key: string, source: string, expires: number }>
H.cache = {}
--- Every key handed out this session (also registered with util.add_secret).
H.seen = {}

function H.now()
  return vim.uv.now() / 1000
end

function H.sort()
  table.sort(H.resolvers, function(a, b)
    if a.priority ~= b.priority then
      return a.priority > b.priority
    end
    return a.name < b.name
  end)
end

--- Registers (or replaces) a resolver. `resolve(provider, cb)` calls `cb(key)` when it
--- has a key for `provider` (a table { name, kind, api_key_env?, endpoint? }) or
--- `cb(nil, why)` when it cannot help; it may answer at once or later (from a
--- vim.system callback, for instance), but must answer within M.timeout seconds.
---@param name string
---@param def { resolve: fun(provider: flemma.secrets.Provider, cb: fun(key?: string, why?: string)), priority?: integer, description?: string }
function M.register(name, def)
  if type(name) ~= "string" or name == "" then
    util.error("secrets.register: the name should be a non-empty string")
  end
  if type(def) ~= "table" or type(def.resolve) ~= "function" then
    util.error(("secrets.register(%q): expects { resolve = function(provider, cb), priority? }"):format(name))
  end
  if def.priority ~= nil and type(def.priority) ~= "number" then
    util.error(("secrets.register(%q): `priority` should be a number, not %s"):format(name, type(def.priority)))
  end
  M.unregister(name)
  H.resolvers[#H.resolvers + 1] = {
    name = name,
    resolve = def.resolve,
    priority = def.priority or M.default_priority,
    description = def.description,
  }
  H.sort()
end

--- Removes a resolver; true when there was one.
---@param name string
---@return boolean
function M.unregister(name)
  for i, r in ipairs(H.resolvers) do
    if r.name == name then
      table.remove(H.resolvers, i)
      return true
    end
  end
  return false
end

--- The resolvers in the order they are tried: { name, priority, description }.
function M.list()
  local out = {}
  for _, r in ipairs(H.resolvers) do
    out[#out + 1] = { name = r.name, priority = r.priority, description = r.description }
  end
  return out
end

--- Forgets the cached key of a provider (all providers when nil).
---@param name? string
function M.invalidate(name)
  if name == nil then
    H.cache = {}
  else
    H.cache[name] = nil
  end
end

--- Where the cached key of a provider came from (nil when none is cached); never the key.
---@param name string
---@return string|nil
function M.cached_source(name)
  local c = H.cache[name]
  if c and c.expires > H.now() then
    return c.source
  end
  return nil
end

--- The key of a provider known without waiting: the cached one, else the environment
--- variable; nil when neither has it (M.resolve then tries the rest of the chain).
---@param provider flemma.secrets.Provider
---@return string|nil
function M.peek(provider)
  local c = H.cache[provider.name]
  if c and c.expires > H.now() then
    return c.key
  end
  local v = provider.api_key_env and H.clean(vim.env[provider.api_key_env])
  if v then
    H.seen[v] = true
    util.add_secret(v)
  end
  return v
end

--- The keys handed out this session (util.redact removes them from every message and
--- log line).
---@return string[]
function M.known_values()
  return vim.tbl_keys(H.seen)
end

function H.clean(key)
  if type(key) ~= "string" then
    return nil
  end
  key = key:gsub("^%s+", ""):gsub("%s+$", "")
  if key == "" or key:find("[\r\n%z]") then
    return nil
  end
  return key
end

--- Resolves the key of a provider, asynchronously: `cb(key, source)` with the key and
--- the resolver's name, or `cb(nil, message)` with one message naming each resolver
--- tried and why it could not help. May call cb before returning (a key from the
--- environment or the cache).
---@param provider flemma.secrets.Provider
---@param cb fun(key: string|nil, source_or_message: string)
function M.resolve(provider, cb)
  local cached = H.cache[provider.name]
  if cached and cached.expires > H.now() then
    return cb(cached.key, cached.source)
  end
  H.cache[provider.name] = nil
  local tried = {}
  local i = 0
  local function next_resolver()
    i = i + 1
    local r = H.resolvers[i]
    if not r then
      local lines = {}
      for _, t in ipairs(tried) do
        lines[#lines + 1] = ("  %s: %s"):format(t.name, t.why)
      end
      return cb(
        nil,
        ("%s: no API key found. Tried:\n%s\nset $%s, store the key in the keyring (secret-tool store --label=flemma service %s key api), or register a resolver with require('flemma.secrets').register; a local server needs no key: require('flemma').setup({ provider = \"ollama\", model = \"...\" })"):format(
          provider.name,
          table.concat(lines, "\n"),
          provider.api_key_env or (provider.name:upper() .. "_API_KEY"),
          provider.name
        )
      )
    end
    local answered = false
    local timer
    local function answer(key, why)
      if answered then
        return
      end
      answered = true
      if timer then
        timer:stop()
        timer:close()
        timer = nil
      end
      local function go()
        local k = H.clean(key)
        if k then
          H.seen[k] = true
          util.add_secret(k)
          if r.name ~= "env" then
            H.cache[provider.name] = { key = k, source = r.name, expires = H.now() + M.ttl }
          end
          return cb(k, r.name)
        end
        tried[#tried + 1] = { name = r.name, why = type(why) == "string" and why ~= "" and why or "gave no key" }
        return next_resolver()
      end
      if vim.in_fast_event() then
        vim.schedule(go)
      else
        go()
      end
    end
    timer = vim.uv.new_timer()
    timer:start(math.floor(M.timeout * 1000), 0, function()
      answer(nil, ("gave no answer within %g s"):format(M.timeout))
    end)
    local ok, err = pcall(r.resolve, vim.deepcopy(provider), answer)
    if not ok then
      answer(nil, "failed: " .. util.message(err))
    end
  end
  next_resolver()
end

-- ---------------------------------------------------------------------------
-- Built-in resolvers
-- ---------------------------------------------------------------------------

--- Runs a program without blocking; cb(stdout) on exit 0, else cb(nil, why).
function H.run(cmd, opts, what, cb)
  if vim.fn.executable(cmd[1]) ~= 1 then
    return cb(nil, ("`%s` is not installed"):format(cmd[1]))
  end
  local ok, err = pcall(vim.system, cmd, {
    text = true,
    env = opts.env,
    stdin = false,
    timeout = math.floor(M.timeout * 1000),
  }, function(res)
    if res.code == 0 and H.clean(res.stdout) then
      return cb(res.stdout)
    end
    local detail = vim.trim((res.stderr or ""):gsub("\n.*", ""))
    if res.code == 0 then
      return cb(nil, ("%s gave an empty answer"):format(what))
    end
    cb(nil, ("%s: exit %d%s"):format(what, res.code, detail ~= "" and (" (" .. detail:sub(1, 160) .. ")") or ""))
  end)
  if not ok then
    cb(nil, ("`%s` could not run: %s"):format(cmd[1], util.message(err)))
  end
end

M.register("env", {
  priority = 100,
  description = "the environment variable named by providers.<name>.api_key_env",
  resolve = function(provider, cb)
    if not provider.api_key_env then
      return cb(nil, ("providers.%s.api_key_env is not set"):format(provider.name))
    end
    local v = vim.env[provider.api_key_env]
    if v == nil or v == "" then
      return cb(nil, ("$%s is not set"):format(provider.api_key_env))
    end
    cb(v)
  end,
})

M.register("keyring", {
  priority = 50,
  description = "the system keyring (secret-tool on Linux, security on macOS)",
  resolve = function(provider, cb)
    if vim.fn.has("mac") == 1 then
      H.run(
        { "security", "find-generic-password", "-s", provider.name, "-a", "api", "-w" },
        {},
        ("no keychain entry -s %s -a api"):format(provider.name),
        cb
      )
    else
      H.run(
        { "secret-tool", "lookup", "service", provider.name, "key", "api" },
        {},
        ("secret-tool lookup service %s key api"):format(provider.name),
        cb
      )
    end
  end,
})

M.register("gcloud", {
  priority = 10,
  description = "vertex only: gcloud auth print-access-token ($VERTEX_SERVICE_ACCOUNT: a service account)",
  resolve = function(provider, cb)
    if provider.kind ~= "vertex" then
      return cb(nil, "only for vertex")
    end
    local env
    local tmp
    local sa = vim.env.VERTEX_SERVICE_ACCOUNT
    if sa and sa ~= "" then
      local path = sa
      if sa:match("^%s*{") then
        -- The account's JSON itself: handed to gcloud through a private file.
        tmp = vim.fn.tempname() .. "-sa.json"
        local fd = vim.uv.fs_open(tmp, "wx", tonumber("600", 8))
        if not fd then
          return cb(nil, "cannot write the service account of $VERTEX_SERVICE_ACCOUNT to a private file")
        end
        vim.uv.fs_write(fd, sa, 0)
        vim.uv.fs_close(fd)
        path = tmp
      elseif vim.fn.filereadable(sa) ~= 1 then
        return cb(nil, ("$VERTEX_SERVICE_ACCOUNT names %s, which cannot be read"):format(sa))
      end
      env = { CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE = path }
    end
    H.run(
      { "gcloud", "auth", "print-access-token" },
      { env = env },
      "gcloud auth print-access-token",
      function(key, why)
        if tmp then
          os.remove(tmp)
        end
        cb(key, why)
      end
    )
  end,
})

-- ---------------------------------------------------------------------------
-- Where a key may go
-- ---------------------------------------------------------------------------

--- The hosts each well-known key variable belongs to (a leading `*.` or `*-`
--- matches any name before it). The key of a built-in entry goes only there,
--- whatever endpoint the entry is given, unless the user named the variable for
--- that entry in setup() (M.destination's `configured`).
M.homes = {
  ANTHROPIC_API_KEY = { "api.anthropic.com" },
  OPENAI_API_KEY = { "api.openai.com" },
  VERTEX_ACCESS_TOKEN = { "aiplatform.googleapis.com", "*-aiplatform.googleapis.com" },
  OPENROUTER_API_KEY = { "openrouter.ai" },
  MOONSHOT_API_KEY = { "api.moonshot.ai", "api.moonshot.cn" },
  DEEPSEEK_API_KEY = { "api.deepseek.com" },
}

--- The scheme and host (both lower case) of a URL, or nil when the host cannot be
--- told for sure (user info before an `@`, a backslash, spaces or escapes in the
--- authority): such an endpoint never gets a key.
---@param url string
---@return string|nil scheme
---@return string|nil host
function M.url_host(url)
  if type(url) ~= "string" then
    return nil
  end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then
    return nil
  end
  local authority = rest:match("^[^/?#]*")
  local host, tail = authority:match("^%[([%x:.]+)%](.*)$")
  if not host then
    host, tail = authority:match("^([%w.-]+)(.*)$")
  end
  if not host or host == "" or not (tail == "" or tail:match("^:%d+$")) then
    return nil
  end
  return scheme:lower(), host:lower()
end

--- Whether a host is this machine.
---@param host string|nil
---@return boolean
function M.is_loopback_host(host)
  return host == "localhost" or host == "::1" or (host ~= nil and host:match("^127%.%d+%.%d+%.%d+$") ~= nil)
end

--- Whether `host` is one that the key variable `env` belongs to (M.homes).
---@param env string|nil
---@param host string|nil
---@return boolean
function M.is_home(env, host)
  for _, pattern in ipairs(env and M.homes[env] or {}) do
    local wild = pattern:match("^%*([.-].+)$")
    if
      host == pattern
      or (wild and #host > #wild and host:sub(-#wild) == wild and host:sub(1, -#wild - 1):match("^[%w-]+$"))
    then
      return true
    end
  end
  return false
end

--- Where the key of a provider entry may be sent: the endpoint's host, or nil and why
--- not (nil and nil when the entry takes no key). A key goes
---   never over http:// to another machine (only https, or http to this machine);
---   to any host when the user named `api_key_env` for this entry in setup()
---     (`configured`);
---   else (a variable of a built-in entry) only to the hosts it belongs to (M.homes).
---@param env string|nil the entry's api_key_env
---@param endpoint string
---@param configured boolean whether setup() named api_key_env for this entry
---@param name? string the entry's name (for the message)
---@return string|nil host
---@return string|nil why
function M.destination(env, endpoint, configured, name)
  if env == nil then
    return nil
  end
  local scheme, host = M.url_host(endpoint)
  if not host then
    return nil, ("the key in $%s is not sent: the host of %s cannot be told for sure"):format(env, tostring(endpoint))
  end
  if scheme ~= "https" and not M.is_loopback_host(host) then
    return nil,
      ("the key in $%s is not sent: a key never goes over %s:// to another machine (%s); use https"):format(
        env,
        scheme,
        host
      )
  end
  if configured or M.is_home(env, host) then
    return host
  end
  local homes = M.homes[env]
  return nil,
    ("the key in $%s is not sent to %s: %s; to send it there, name it for this entry in setup(): providers.%s.api_key_env = %q"):format(
      env,
      host,
      homes and ("it is the key of " .. table.concat(homes, ", ") .. " and goes only there")
        or "it belongs to a built-in entry",
      name or "<name>",
      env
    )
end

--- Names refused in setup() and frontmatter, and the message refusing them (flemma.isolated.keys).
M.forbidden = require("flemma.isolated.keys").forbidden
M.refusal = require("flemma.isolated.keys").refusal

function M._reset()
  H.cache = {}
  H.seen = {}
end

return M
