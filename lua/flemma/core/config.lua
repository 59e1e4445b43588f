--- Configuration: the defaults (one comment per option) and all validation.
local util = require("flemma.core.util")
local schema = require("flemma.isolated.schema")
local selection = require("flemma.core.selection")

local M = {}
local H = {}

---@class flemma.Config
-- The defaults come from the option schema (one doc line per option there).
H.defaults = schema.defaults()

H.kinds = schema.PROVIDER_KINDS
H.provider_fields =
  { kind = "string", endpoint = "string", api_key_env = "string", model = "string", headers = "table" }

--- `providers`: a table of named entries, each { kind, endpoint, api_key_env?, model?, headers? }.
function H.check_providers(value)
  if type(value) ~= "table" then
    util.error("`providers` should be a table, not " .. type(value))
  end
  for name, entry in pairs(value) do
    local path = "providers." .. tostring(name)
    if type(name) ~= "string" or type(entry) ~= "table" then
      util.error(
        ("`%s` should be a table { kind, endpoint, api_key_env?, model?, headers? }, not %s"):format(path, type(entry))
      )
    end
    for k, v in pairs(entry) do
      local want = H.provider_fields[k]
      if require("flemma.isolated.keys").forbidden[k] then
        util.error(require("flemma.isolated.keys").refusal(path .. "." .. k))
      elseif not want then
        util.error(
          ("unknown option `%s.%s` (a provider has kind, endpoint, api_key_env, model, headers)"):format(
            path,
            tostring(k)
          )
        )
      elseif type(v) ~= want then
        util.error(("`%s.%s` should be a %s, not %s"):format(path, k, want, type(v)))
      end
    end
    if entry.kind ~= nil and not vim.tbl_contains(H.kinds, entry.kind) then
      util.error(
        ("`%s.kind` should be one of %s, not %s"):format(path, table.concat(H.kinds, ", "), vim.inspect(entry.kind))
      )
    end
    for k, v in pairs(entry.headers or {}) do
      if type(k) ~= "string" or type(v) ~= "string" then
        util.error(("`%s.headers` should map header names to strings"):format(path))
      end
    end
  end
end

H.mcp_fields = {
  command = "string",
  args = "table",
  env = "table",
  cwd = "string",
  url = "string",
  headers = "table",
  bearer_env = "string",
}
H.mcp_stdio = { command = true, args = true, env = true, cwd = true }

--- `mcp.servers`: named entries { command, args?, env?, cwd? } (stdio) or { url,
--- headers?, bearer_env? } (Streamable HTTP); names are what tools are called by
--- (`name:tool`, sent as `name__tool`): letters, digits, `-` and single `_`.
function H.check_mcp_servers(value)
  if type(value) ~= "table" then
    util.error("`mcp.servers` should be a table, not " .. type(value))
  end
  for name, entry in pairs(value) do
    local path = "mcp.servers." .. tostring(name)
    if
      type(name) ~= "string"
      or not name:match("^[%a][%w_%-]*$")
      or name:find("__", 1, true)
      or name:sub(-1) == "_"
    then
      util.error(
        ("`%s`: a server name should start with a letter and hold letters, digits, `-` and single `_`, not %s"):format(
          path,
          vim.inspect(name)
        )
      )
    end
    if type(entry) ~= "table" then
      util.error(
        ("`%s` should be a table { command, args?, env?, cwd? } or { url, headers?, bearer_env? }, not %s"):format(
          path,
          type(entry)
        )
      )
    end
    for k, v in pairs(entry) do
      local want = H.mcp_fields[k]
      if not want then
        util.error(
          ("unknown option `%s.%s` (a server has command, args, env, cwd, or url, headers, bearer_env)"):format(
            path,
            tostring(k)
          )
        )
      elseif type(v) ~= want then
        util.error(("`%s.%s` should be a %s, not %s"):format(path, k, want, type(v)))
      end
    end
    if entry.url ~= nil then
      H.check_mcp_http(path, entry)
    elseif entry.command == nil or entry.command == "" then
      util.error(("`%s.command` should be a string, not %s"):format(path, entry.command == nil and "nil" or "empty"))
    end
    for i, a in ipairs(entry.args or {}) do
      if type(a) ~= "string" then
        util.error(("`%s.args[%d]` should be a string, not %s"):format(path, i, type(a)))
      end
    end
    if entry.args and #entry.args ~= vim.tbl_count(entry.args) then
      util.error(("`%s.args` should be a list of strings"):format(path))
    end
    for k, v in pairs(entry.env or {}) do
      if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
        util.error(("`%s.env` keys should be variable names, not %s"):format(path, vim.inspect(k)))
      end
      if type(v) ~= "string" and type(v) ~= "number" then
        util.error(("`%s.env.%s` should be a string, not %s"):format(path, k, type(v)))
      end
    end
  end
end

--- A Streamable HTTP entry: an http(s) URL, header names and string values, a
--- variable name in bearer_env; none of the stdio fields.
function H.check_mcp_http(path, entry)
  for k in pairs(entry) do
    if H.mcp_stdio[k] then
      util.error(("`%s.%s`: a server has either `command` (stdio) or `url` (HTTP), not both"):format(path, k))
    end
  end
  if not entry.url:match("^[Hh][Tt][Tt][Pp][Ss]?://[^/?#%s]+") or entry.url:find("[%s%z]") then
    util.error(("`%s.url` should be an http:// or https:// URL"):format(path))
  end
  for k, v in pairs(entry.headers or {}) do
    if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+.^_`|~-]+$") then
      util.error(("`%s.headers` keys should be HTTP header names, not %s"):format(path, vim.inspect(k)))
    end
    if type(v) ~= "string" or v:find("[\r\n%z]") then
      util.error(("`%s.headers.%s` should be a string without line breaks"):format(path, k))
    end
  end
  if entry.bearer_env ~= nil and not entry.bearer_env:match("^[%a_][%w_]*$") then
    util.error(("`%s.bearer_env` should name an environment variable"):format(path))
  end
end

function H.check_patterns(value, path)
  for i, p in ipairs(value) do
    if type(p) ~= "string" or not p:find(":", 1, true) then
      util.error(
        ('`%s[%d]` should be a tool pattern like "name:*" or "name:tool", not %s'):format(path, i, vim.inspect(p))
      )
    end
  end
end

--- `sandbox.deny_read`: a list of "$default", paths ("~/x", "/x", "$VAR/x") and
--- "!path" (taking a path out).
function H.check_deny_read(value)
  if type(value) ~= "table" then
    return -- the type check names it
  end
  if #value ~= vim.tbl_count(value) then
    util.error("`sandbox.deny_read` should be a list of paths")
  end
  for i, entry in ipairs(value) do
    local p = type(entry) == "string" and entry:gsub("^!", "") or nil
    if
      type(entry) ~= "string"
      or entry:find("[%z\n]")
      or not (
        entry == "$default"
        or p == "~"
        or (p and (p:match("^~/.") or p:match("^/.") or p:match("^%$%{?[%a_][%w_]*%}?/.")))
      )
    then
      util.error(
        ('`sandbox.deny_read[%d]` should be "$default", an absolute path, "~/path" or "$VAR/path" (with "!" in front to take it out), not %s'):format(
          i,
          vim.inspect(entry)
        )
      )
    end
  end
end

--- `tools.rate_limit`: false, or { burst, per_second } (their values: the schema).
function H.check_rate_limit(value)
  if type(value) ~= "table" then
    return
  end
  for k in pairs(value) do
    if k ~= "burst" and k ~= "per_second" then
      util.error(("unknown option `tools.rate_limit.%s` (it has burst and per_second)"):format(tostring(k)))
    end
  end
end

-- Lists of environment variable names.
H.name_lists = { ["tools.env_passthrough"] = true }

-- Options whose value is one or two display cells.
H.cells = { ["ui.ruler.char"] = true, ["ui.signs.streaming"] = true, ["ui.signs.pending"] = true }

function H.check(value, path)
  if path == "providers" then
    return H.check_providers(value)
  end
  if path == "mcp.servers" then
    return H.check_mcp_servers(value)
  end
  local problem = schema.problem(path, value)
  if problem then
    util.error(("`%s` %s"):format(path, problem))
  end
  if (path == "mcp.include" or path == "mcp.exclude") and type(value) == "table" then
    H.check_patterns(value, path)
  end
  if H.name_lists[path] and type(value) == "table" then
    for i, name in ipairs(value) do
      if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
        util.error(("`%s[%d]` should be a variable name, not %s"):format(path, i, vim.inspect(name)))
      end
    end
    if #value ~= vim.tbl_count(value) then
      util.error(("`%s` should be a list of variable names"):format(path))
    end
  end
  if path == "sandbox.deny_read" then
    H.check_deny_read(value)
  end
  if path == "tools.rate_limit" then
    H.check_rate_limit(value)
  end
  if path == "tools.search.skip_dirs" and type(value) == "table" then
    for i, name in ipairs(value) do
      if type(name) ~= "string" or name == "" or name:find("/", 1, true) or name == "." or name == ".." then
        util.error(("`%s[%d]` should be a folder name (no `/`), not %s"):format(path, i, vim.inspect(name)))
      end
    end
    if #value ~= vim.tbl_count(value) then
      util.error(("`%s` should be a list of folder names"):format(path))
    end
  end
  if
    H.cells[path] and (vim.fn.strdisplaywidth(value) < 1 or vim.fn.strdisplaywidth(value) > 2 or value:find("[%c]"))
  then
    util.error(
      ("`%s` should be one or two display cells (e.g. %q), not %s"):format(
        path,
        schema.get(path).default,
        vim.inspect(value)
      )
    )
  end
  -- A subtree: its known options are checked; an unknown key is refused unless the
  -- subtree's keys are free.
  local o = schema.get(path)
  if type(value) == "table" and o and o.keys ~= "user" and not vim.islist(value) then
    local types = type(o.type) == "table" and o.type or { o.type }
    if #types == 1 then
      for k, v in pairs(value) do
        local sub = path .. "." .. tostring(k)
        if schema.get(sub) then
          H.check(v, sub)
        elseif o.keys ~= "open" then
          util.error(("unknown option `%s`"):format(sub))
        end
      end
    elseif path == "tools.rate_limit" then
      for k, v in pairs(value) do
        H.check(v, path .. "." .. tostring(k))
      end
    end
  end
end

--- Keys (api_key, token, ...) at the top, in `parameters` or a provider's parameters: refused.
function H.refuse_keys(opts)
  local secrets = require("flemma.isolated.keys")
  local function scan(t, prefix)
    for k, v in pairs(t) do
      if secrets.forbidden[k] then
        util.error(secrets.refusal(prefix .. k))
      end
      if prefix == "parameters." and type(v) == "table" then
        scan(v, prefix .. k .. ".")
      end
    end
  end
  scan(opts, "")
  if type(opts.parameters) == "table" then
    scan(opts.parameters, "parameters.")
  end
end

--- Validates user options against the defaults; raises "(flemma) `x` should be ..." errors.
---@param opts table
function M.validate(opts)
  if opts == nil then
    return
  end
  if type(opts) ~= "table" then
    util.error("setup() expects a table, not " .. type(opts))
  end
  H.refuse_keys(opts)
  for k, v in pairs(opts) do
    local path = tostring(k)
    if schema.get(path) == nil then
      util.error(("unknown option `%s`"):format(path))
    end
    H.check(v, path)
  end
end

-- Lists replace lists (auto_approve = { "$readonly" } must not keep "$default").
function H.merge(base, over)
  if type(over) ~= "table" or (vim.islist(over) and next(over) ~= nil) then
    return vim.deepcopy(over)
  end
  if type(base) ~= "table" or (vim.islist(base) and next(base) ~= nil) then
    return vim.deepcopy(over)
  end
  local out = vim.deepcopy(base)
  for k, v in pairs(over) do
    out[k] = H.merge(base[k], v)
  end
  return out
end

H.current = vim.deepcopy(H.defaults)
H.key_configured = {}

--- Applies user options on top of the defaults.
---@param opts? table
---@return flemma.Config
function M.setup(opts)
  M.validate(opts)
  local merged = H.merge(H.defaults, opts or {})
  for name, entry in pairs(merged.providers) do
    if entry.kind == nil then
      util.error(("`providers.%s.kind` is missing: one of %s"):format(name, table.concat(H.kinds, ", ")))
    end
  end
  if merged.providers[merged.provider] == nil then
    local names = vim.tbl_keys(merged.providers)
    table.sort(names)
    util.error(
      ("`provider` should be one of %s, not %s"):format(table.concat(names, ", "), vim.inspect(merged.provider))
    )
  end
  selection.check_presets(merged.presets, merged)
  -- Entries whose key variable the user named: their key may go to their endpoint
  -- (flemma.secrets.destination); the variable of a built-in entry goes only to
  -- the hosts it belongs to.
  local configured = {}
  for name, entry in pairs(type(opts) == "table" and type(opts.providers) == "table" and opts.providers or {}) do
    if type(entry) == "table" and entry.api_key_env ~= nil then
      configured[name] = true
    end
  end
  H.key_configured = configured
  H.current = merged
  H.session = nil
  H.effective = nil
  return H.current
end

--- The active configuration (do not modify; use setup()): setup()'s options with the
--- session layer of :Flemma switch on top (provider, model, parameters).
---@return flemma.Config
function M.get()
  if not H.session then
    return H.current
  end
  if not H.effective then
    local eff = vim.deepcopy(H.current)
    eff.provider = H.session.provider
    eff.model = H.session.model
    local function apply(dst, src)
      for k, v in pairs(src) do
        if v == vim.NIL then
          dst[k] = nil
        elseif type(v) == "table" then
          dst[k] = type(dst[k]) == "table" and dst[k] or {}
          apply(dst[k], v)
        else
          dst[k] = v
        end
      end
    end
    apply(eff.parameters, H.session.parameters or {})
    H.effective = eff
  end
  return H.effective
end

--- Whether setup() named `api_key_env` for the provider entry `name` (then its key
--- may go to the entry's endpoint; else only to the hosts the variable belongs to).
---@param name string
---@return boolean
function M.key_configured(name)
  return H.key_configured[name] == true
end

--- setup()'s options without the session layer.
---@return flemma.Config
function M.get_setup()
  return H.current
end

--- Sets (or with nil removes) the session layer that :Flemma switch keeps above
--- setup(): { provider, model?, parameters? } (a parameter set to vim.NIL is cleared).
--- setup() removes it.
---@param layer? { provider: string, model?: string, parameters?: table }
function M.set_session(layer)
  H.session = layer and vim.deepcopy(layer) or nil
  H.effective = nil
end

--- Adds entries to `tools.auto_approve` until the next setup() (the "my configuration"
--- choice of `:Flemma tool:approve always`); entries already there are not repeated.
--- Raises when `tools.auto_approve` is a function or a module path.
--- Returns the entries it added (those not there before).
---@param entries string[]
---@return string[] added
function M.add_auto_approve(entries)
  local aa = H.current.tools.auto_approve
  if type(aa) ~= "table" then
    util.error(
      ("`tools.auto_approve` is a %s; add the rule to it yourself"):format(
        type(aa) == "function" and "function" or "module"
      )
    )
  end
  local added = {}
  for _, e in ipairs(entries) do
    if not vim.tbl_contains(aa, e) then
      aa[#aa + 1] = e
      added[#added + 1] = e
    end
  end
  H.effective = nil
  return added
end

--- Takes entries out of `tools.auto_approve` (when it is a list): what
--- M.add_auto_approve added, when its source changed.
---@param entries string[]
function M.remove_auto_approve(entries)
  local aa = H.current.tools.auto_approve
  if type(aa) ~= "table" or #entries == 0 then
    return
  end
  local drop = {}
  for _, e in ipairs(entries) do
    drop[e] = true
  end
  local kept = {}
  for _, e in ipairs(aa) do
    if not drop[e] then
      kept[#kept + 1] = e
    end
  end
  for i = #aa, 1, -1 do
    aa[i] = nil
  end
  for i, e in ipairs(kept) do
    aa[i] = e
  end
  H.effective = nil
end

--- The session layer (a copy) or nil.
function M.session()
  return H.session and vim.deepcopy(H.session) or nil
end

--- A deep copy of the defaults.
---@return flemma.Config
function M.defaults()
  return vim.deepcopy(H.defaults)
end

--- Merges `over` into `base` the way setup() does (lists replace lists).
M.merge = H.merge

--- Every option path (the schema's), sorted. `:help flemma-config-<path>` documents each.
---@return string[]
function M.option_paths()
  return schema.paths()
end

return M
