--- `flemma.opt`: the object that Lua frontmatter uses to set per-buffer options.
--- A fresh one is made for each evaluation (see flemma.frontmatter), starting from the
--- defaults: all enabled tools, the global `tools.auto_approve` list, the global
--- parameters and the active provider and model. `flemma.opt.provider` (a name of
--- `providers` or a `$preset`) and `flemma.opt.model` select them for the buffer.
--- ListOption values (`flemma.opt.tools`, `flemma.opt.tools.auto_approve`)
--- support assignment, `:append`, `:remove`, `:prepend`, `+` and `-`.
local presets = require("flemma.isolated.presets")
local schema = require("flemma.isolated.schema")

local M = {}
local H = {}

--- Chunk name of frontmatter code; errors inside it read "frontmatter:LINE: msg".
M.CHUNKNAME = "=frontmatter"
M.SOURCE_PREFIX = "frontmatter"

-- Built-in tool names, used when flemma.tools is not available.
H.BUILTIN_TOOLS = { "bash", "calculator", "calculator_async", "edit", "read", "write" }

-- The parameters flemma.opt sets (the option schema marks them): general ones, each
-- provider's own, and the provider parameters that make up an endpoint (the Vertex AI
-- URL's host is `<location>-aiplatform...`): transport, refused.
H.fm = schema.frontmatter_parameters()
H.params = H.fm.general
H.provider_params = H.fm.providers
H.PROVIDER_TRANSPORT = H.fm.transport
H.TRANSPORT_KEYS = { endpoint = true, api_key_env = true, providers = true, headers = true, kind = true }
-- API keys are refused too, with their own message (flemma.secrets).
for name in pairs(require("flemma.isolated.keys").forbidden) do
  H.TRANSPORT_KEYS[name] = true
end

-- Names readable and settable on flemma.opt itself.
H.ROOT_NAMES = { "model", "provider", "tools" }
for name in pairs(H.params) do
  H.ROOT_NAMES[#H.ROOT_NAMES + 1] = name
end
for name in pairs(H.provider_params) do
  H.ROOT_NAMES[#H.ROOT_NAMES + 1] = name
end
table.sort(H.ROOT_NAMES)

--- Raises an error from code that frontmatter called: the message names the line of
--- the frontmatter that made the call ("frontmatter:LINE: msg"), when there is one.
---@param msg string
function M.fail(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then
      break
    end
    if info.source == M.CHUNKNAME and (info.currentline or 0) > 0 then
      error(("%s:%d: %s"):format(M.SOURCE_PREFIX, info.currentline, msg), 0)
    end
    level = level + 1
  end
  error(msg, 0)
end

--- The line of frontmatter code running now (the innermost frontmatter frame), or nil
--- outside frontmatter.
---@return integer|nil
function M.line()
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then
      return nil
    end
    if info.source == M.CHUNKNAME and (info.currentline or 0) > 0 then
      return info.currentline
    end
    level = level + 1
  end
end

local function show(v)
  if type(v) == "string" then
    return ("%q"):format(v)
  end
  return type(v)
end

---------------------------------------------------------------------------------------
-- Known tools
---------------------------------------------------------------------------------------

--- Tool names known right now: { enabled = string[] (sorted), is_known = fn(name),
--- ready = boolean (false while async tool sources are still loading) }, from a tool
--- registry { list, get?, is_ready? } (flemma.tools, or the interpreter's data); the
--- built-in names without one.
---@param tools? table
function M.known_tools(tools)
  if type(tools) == "table" and type(tools.list) == "function" then
    local ok_list, names = pcall(tools.list)
    if ok_list and type(names) == "table" then
      -- Nothing registered yet (before setup): names cannot be checked.
      local ready = #names > 0
      if ready and type(tools.is_ready) == "function" then
        local ok_ready, r = pcall(tools.is_ready)
        ready = not ok_ready or r ~= false
      end
      local set = {}
      for _, n in ipairs(names) do
        set[n] = true
      end
      return {
        enabled = vim.deepcopy(names),
        ready = ready,
        is_known = function(name)
          if set[name] then
            return true
          end
          if type(tools.get) == "function" then
            local ok_get, def = pcall(tools.get, name)
            return ok_get and def ~= nil
          end
          return false
        end,
      }
    end
  end
  local set = {}
  for _, n in ipairs(H.BUILTIN_TOOLS) do
    set[n] = true
  end
  return {
    enabled = vim.deepcopy(H.BUILTIN_TOOLS),
    ready = true,
    is_known = function(name)
      return set[name] == true
    end,
  }
end

---------------------------------------------------------------------------------------
-- ListOption
---------------------------------------------------------------------------------------

---@class flemma.opt.ListOption
---@field append fun(self: flemma.opt.ListOption, v: string|string[]|flemma.opt.ListOption): flemma.opt.ListOption
---@field prepend fun(self: flemma.opt.ListOption, v: string|string[]|flemma.opt.ListOption): flemma.opt.ListOption
---@field remove fun(self: flemma.opt.ListOption, v: string|string[]|flemma.opt.ListOption): flemma.opt.ListOption
---@field get fun(self: flemma.opt.ListOption): string[]

-- Private state of each ListOption (weak keys): { items, excluded, check, what, on_change,
-- index, newindex }.
H.lists = setmetatable({}, { __mode = "k" })

local List = {}
local ListMT = { __metatable = "flemma.opt.ListOption" }

function H.is_list(v)
  return type(v) == "table" and H.lists[v] ~= nil
end

-- The items of an operand: a string, a plain list of strings, or a ListOption.
function H.operand(st, v, op)
  if type(v) == "string" then
    return { v }
  end
  if H.is_list(v) then
    return vim.deepcopy(H.lists[v].items)
  end
  if type(v) == "table" then
    local out = {}
    local n = 0
    for k in pairs(v) do
      if type(k) ~= "number" then
        M.fail(("%s: %s expects a list of names, not a table with the key %s"):format(st.what, op, show(k)))
      end
      n = n + 1
    end
    for i = 1, n do
      local item = v[i]
      if type(item) ~= "string" then
        M.fail(("%s: %s expects tool names, not %s"):format(st.what, op, show(item)))
      end
      out[i] = item
    end
    return out
  end
  M.fail(("%s: %s expects a name or a list of names, not %s"):format(st.what, op, type(v)))
end

function H.new_list(items, excluded, opts)
  local obj = setmetatable({}, ListMT)
  H.lists[obj] = {
    items = items,
    excluded = excluded or {},
    check = opts.check,
    what = opts.what,
    on_change = opts.on_change,
    index = opts.index,
    newindex = opts.newindex,
  }
  return obj
end

function H.detached(st)
  return H.new_list(vim.deepcopy(st.items), vim.deepcopy(st.excluded), { check = st.check, what = st.what })
end

function H.changed(st)
  if st.on_change then
    st.on_change()
  end
end

local function state(self, method)
  local st = H.lists[self]
  if not st then
    M.fail(("ListOption:%s() must be called with `:`"):format(method))
  end
  return st
end

-- Adds names, at the end or (front) at the front in their order; names already
-- present stay where they are, and none stays excluded.
local function add(self, v, op, front)
  local st = state(self, op)
  local pos = front and 1 or nil
  for _, item in ipairs(H.operand(st, v, op)) do
    st.check(item)
    if not vim.tbl_contains(st.items, item) then
      if pos then
        table.insert(st.items, pos, item)
        pos = pos + 1
      else
        table.insert(st.items, item)
      end
    end
    st.excluded = vim.tbl_filter(function(x)
      return x ~= item
    end, st.excluded)
  end
  H.changed(st)
  return self
end

--- Adds names at the end (names already present stay where they are).
function List.append(self, v)
  return add(self, v, "append", false)
end

--- Adds names at the front (names already present stay where they are).
function List.prepend(self, v)
  return add(self, v, "prepend", true)
end

--- Removes names. A tool name is also remembered as excluded, so that a preset still
--- in the list does not bring it back when it is expanded.
function List.remove(self, v)
  local st = state(self, "remove")
  for _, item in ipairs(H.operand(st, v, "remove")) do
    st.check(item)
    st.items = vim.tbl_filter(function(x)
      return x ~= item
    end, st.items)
    if not presets.is_preset(item) and not vim.tbl_contains(st.excluded, item) then
      table.insert(st.excluded, item)
    end
  end
  H.changed(st)
  return self
end

--- A plain copy of the names.
function List.get(self)
  return vim.deepcopy(state(self, "get").items)
end

function ListMT.__index(self, k)
  if List[k] then
    return List[k]
  end
  local st = H.lists[self]
  if type(k) == "number" then
    return st.items[k]
  end
  if st.index then
    return st.index(k)
  end
  M.fail(("%s has no field %s"):format(st.what, show(k)))
end

function ListMT.__newindex(self, k, v)
  local st = H.lists[self]
  if st.newindex then
    return st.newindex(k, v)
  end
  M.fail(("%s: cannot set field %s; use assignment, :append(), :remove() or :prepend()"):format(st.what, show(k)))
end

function ListMT.__add(a, b)
  if H.is_list(a) then
    return List.append(H.detached(H.lists[a]), b)
  end
  return List.prepend(H.detached(H.lists[b]), a)
end

function ListMT.__sub(a, b)
  if not H.is_list(a) then
    M.fail("`-` needs a ListOption on its left")
  end
  return List.remove(H.detached(H.lists[a]), b)
end

function ListMT.__tostring(self)
  local items = H.lists[self].items
  local quoted = {}
  for i, item in ipairs(items) do
    quoted[i] = ("%q"):format(item)
  end
  return "{ " .. table.concat(quoted, ", ") .. " }"
end

-- Replaces a live list's content with a plain list or another ListOption's.
function H.assign(obj, v)
  local st = H.lists[obj]
  if H.is_list(v) then
    local src = H.lists[v]
    for _, item in ipairs(src.items) do
      st.check(item)
    end
    st.items = vim.deepcopy(src.items)
    st.excluded = vim.deepcopy(src.excluded)
  elseif type(v) == "table" then
    local items = H.operand(st, v, "assignment")
    for _, item in ipairs(items) do
      st.check(item)
    end
    st.items = {}
    for _, item in ipairs(items) do
      if not vim.tbl_contains(st.items, item) then
        table.insert(st.items, item)
      end
    end
    st.excluded = {}
  else
    M.fail(("%s should be a list of names, not %s"):format(st.what, show(v)))
  end
  H.changed(st)
end

---------------------------------------------------------------------------------------
-- flemma.opt
---------------------------------------------------------------------------------------

function H.unknown(name, candidates, prefix)
  local msg = ("unknown option `%s%s`"):format(prefix, name)
  local close = type(name) == "string" and presets.suggest(name, candidates) or nil
  if close then
    msg = msg .. ("; did you mean `%s%s`?"):format(prefix, close)
  end
  return msg
end

function H.transport(path)
  local secrets = require("flemma.isolated.keys")
  if secrets.forbidden[path:match("[^.]+$")] then
    return secrets.refusal(path)
  end
  local what = "transport settings (`providers.*`: endpoints, headers, keys)"
  local provider, key = path:match("^flemma%.opt%.(%w+)%.([%w_]+)$")
  if provider and (H.PROVIDER_TRANSPORT[provider] or {})[key] then
    what = ("transport settings (`parameters.%s.%s` makes up the %s endpoint)"):format(provider, key, provider)
  end
  return (
    "`%s`: %s cannot be set from frontmatter: a chat file must not choose where the conversation and your keys are sent; "
    .. "configure them in setup() (or a preset) and select a provider with `flemma.opt.provider`"
  ):format(path, what)
end

---------------------------------------------------------------------------------------
-- Provider, model and presets
---------------------------------------------------------------------------------------

---@class flemma.opt.Selection what frontmatter may select, as plain data (computed in
--- Neovim by flemma.chat.frontmatter, which knows the models and presets)
---@field provider string the active provider (setup() or :Flemma switch)
---@field model? string the active model (nil: the provider's default)
---@field providers table<string, { kind: string, default_model?: string, any_model: boolean, models?: table<string, boolean> }>
---@field presets table<string, { provider: string, model?: string, parameters: table, cleared: string[] }>

-- Where flemma.opt.new() without arguments gets the configuration and the tools:
-- flemma.chat.frontmatter fills it when it loads (it sits above this module).
H.context = nil

--- Sets the function that gives the configuration (with its `selection`) and the
--- tool registry for flemma.opt.new() called without them.
---@param fn fun(): table, table
function M.set_context(fn)
  H.context = fn
end

function H.sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

---@class flemma.opt.Result
---@field tools string[]|nil selected tools; nil = all enabled tools
---@field auto_approve string[]|function|nil the buffer's policy; nil = not set
---@field auto_approve_excluded string[] tools removed from presets in the buffer's list
---@field tools_excluded? string[] tools removed from `tools` (kept out of its `$mcp` entries)
---@field parameters table parameter overrides (general keys and provider tables)
---@field provider? string the provider the buffer selects (a name of `providers`)
---@field model? string the model it selects (nil: the active one)
---@field preset? string the `$preset` it selected through `flemma.opt.provider`
---@field parameters_cleared? string[] parameters a preset cleared (`key=`), dotted

-- The pieces of M.new. B is the object being built: the frontmatter's state (B.S), the
-- configuration it reads (B.config, B.params_cfg, B.sel), the known tools (B.known)
-- and the lists and proxies made from them.

-- Checks of tool names in flemma.opt.tools and its auto_approve: B.check_selected, B.check_aa.
function H.tool_checks(B)
  local known, user_presets = B.known, B.user_presets
  local function check_tool(what)
    return function(name)
      if type(name) ~= "string" then
        M.fail(("%s: expected a tool name, not %s"):format(what, show(name)))
      end
      if known.is_known(name) or not known.ready then
        return
      end
      local msg = ("unknown tool `%s` in %s"):format(name, what)
      local close = presets.suggest(name, known.enabled)
      if close then
        msg = msg .. ("; did you mean `%s`?"):format(close)
      elseif #known.enabled > 0 then
        msg = msg .. "; available tools: " .. table.concat(known.enabled, ", ")
      end
      M.fail(msg)
    end
  end

  local check_selected_tool = check_tool("flemma.opt.tools")
  -- `$mcp`, `$mcp:NAME` and `NAME:*` select tools by their server, also those whose
  -- server has not started yet (H.collect expands them with the tools known now and
  -- keeps them, so that flemma.tools.for_buffer matches tools registered later).
  function B.check_selected(name)
    if type(name) == "string" and presets.prefix(name) then
      return
    end
    check_selected_tool(name)
  end
  local check_aa_tool = check_tool("flemma.opt.tools.auto_approve")
  local all_presets = presets.all(user_presets)
  function B.check_aa(name)
    local problem = presets.rule_problem(name)
    if problem then
      M.fail(("flemma.opt.tools.auto_approve: the rule %q %s"):format(name, problem))
    end
    -- A rule `TOOL(PATTERN)` names its tool.
    name = presets.rule(name) or name
    -- `risk:LEVEL` (a known level) and `$mcp`, `$mcp:NAME`, `NAME:*` name tools by
    -- their risk or their server, also tools not registered yet.
    if type(name) == "string" and (presets.risk_entry(name) or name:sub(1, 5) == "risk:") then
      presets.check_risks({ name }, "flemma.opt.tools.auto_approve")
      return
    end
    if type(name) == "string" and presets.prefix(name) then
      return
    end
    if presets.is_preset(name) then
      if not all_presets[name] then
        M.fail(presets.unknown_message(name, user_presets) .. " in flemma.opt.tools.auto_approve")
      end
      return
    end
    -- A tool named in a preset is a tool the user knows about, even if not registered.
    for _, p in pairs(all_presets) do
      if vim.tbl_contains(p.approve or {}, name) or vim.tbl_contains(p.deny or {}, name) then
        return
      end
    end
    check_aa_tool(name)
  end
end

-- flemma.opt.tools.ask and .deny: lists that only narrow the policy (they add to
-- tools.ask and tools.deny); they start empty.
function H.side_list(B, key)
  local what = "flemma.opt.tools." .. key
  return H.new_list({}, {}, {
    what = what,
    check = function(name)
      if type(name) ~= "string" or (presets.is_preset(name) and not presets.prefix(name)) then
        M.fail(
          ("%s: expected a tool name, a rule TOOL(PATTERN), risk:LEVEL or NAME:*, not %s"):format(what, show(name))
        )
      end
      local problem = presets.rule_problem(name)
      if problem then
        M.fail(("%s: the rule %q %s"):format(what, name, problem))
      end
      presets.check_risks({ name }, what)
    end,
    on_change = function()
      B.S[key .. "_touched"] = true
    end,
  })
end

H.TOOLS_KEYS = { "auto_approve", "ask", "deny" }

-- flemma.opt.tools and flemma.opt.tools.auto_approve: B.tools_list, B.aa_list.
function H.tool_lists(B)
  local S, tools_cfg, known = B.S, B.config.tools or {}, B.known
  local check_aa, check_selected = B.check_aa, B.check_selected
  local aa_default = {}
  if type(tools_cfg.auto_approve) == "table" then
    aa_default = vim.deepcopy(tools_cfg.auto_approve)
  end
  local aa_list = H.new_list(aa_default, {}, {
    check = check_aa,
    what = "flemma.opt.tools.auto_approve",
    on_change = function()
      S.aa_touched = true
      S.aa_fn = nil
    end,
  })

  local function set_auto_approve(v)
    if type(v) == "function" then
      S.aa_fn = v
      S.aa_touched = true
    else
      H.assign(aa_list, v)
    end
  end

  local tools_list
  tools_list = H.new_list(vim.deepcopy(known.enabled), {}, {
    check = check_selected,
    what = "flemma.opt.tools",
    on_change = function()
      S.tools_touched = true
    end,
    index = function(k)
      if k == "auto_approve" then
        return S.aa_fn or aa_list
      elseif B.side[k] then
        return B.side[k]
      end
      M.fail(H.unknown(k, H.TOOLS_KEYS, "flemma.opt.tools."))
    end,
    newindex = function(k, v)
      if k == "auto_approve" then
        return set_auto_approve(v)
      elseif B.side[k] then
        H.assign(B.side[k], v)
        S[k .. "_touched"] = true
        return
      end
      M.fail(H.unknown(k, H.TOOLS_KEYS, "flemma.opt.tools."))
    end,
  })
  B.side = { ask = H.side_list(B, "ask"), deny = H.side_list(B, "deny") }
  B.aa_list, B.tools_list = aa_list, tools_list
end

-- A bad value: the option schema's message, naming what the frontmatter set.
function H.check_param(label, name, v)
  local msg = schema.message("parameters." .. name, v, label)
  if msg then
    M.fail(msg)
  end
end

-- The tables flemma.opt.<provider> (anthropic, openai, vertex): B.proxies.
function H.provider_proxies(B)
  local S, params_cfg, check_param = B.S, B.params_cfg, H.check_param
  local provider_proxies = {}
  for provider, specs in pairs(H.provider_params) do
    local names = vim.tbl_keys(specs)
    table.sort(names)
    local prefix = "flemma.opt." .. provider .. "."
    local function lookup(k)
      if H.TRANSPORT_KEYS[k] or (H.PROVIDER_TRANSPORT[provider] or {})[k] then
        M.fail(H.transport(prefix .. k))
      end
      if not specs[k] then
        M.fail(H.unknown(k, names, prefix))
      end
    end
    provider_proxies[provider] = setmetatable({}, {
      __metatable = "flemma.opt." .. provider,
      __index = function(_, k)
        lookup(k)
        local v = S.provider[provider][k]
        if v == nil and not S.cleared[provider .. "." .. k] then
          v = (params_cfg[provider] or {})[k]
        end
        return v
      end,
      __newindex = function(_, k, v)
        lookup(k)
        check_param(prefix .. k, provider .. "." .. k, v)
        S.provider[provider][k] = v
        S.cleared[provider .. "." .. k] = nil
      end,
    })
  end
  B.proxies = provider_proxies
end

-- The model a request of the buffer would use (nil: the configured one when the
-- provider is the configured one, else none is known).
function H.effective_model(B)
  local S, sel = B.S, B.sel
  local name = S.selected or sel.provider
  local p = sel.providers[name]
  if S.model_set then
    return S.model or (p and p.default_model)
  end
  if name == sel.provider then
    return sel.model or (p and p.default_model)
  end
  return p and p.default_model
end

function H.provider_names(B)
  local sel = B.sel
  local names = H.sorted_keys(sel.providers)
  return names
end

-- flemma.opt.provider = "name" | "$preset": a preset sets provider, model and
-- parameters as `:Flemma switch $preset` does; what the code sets after it wins.
function H.select_provider(B, v)
  local S, sel = B.S, B.sel
  if type(v) ~= "string" or v == "" then
    M.fail(("`flemma.opt.provider` should be a provider name or a $preset, not %s"):format(v == "" and '""' or show(v)))
  end
  if presets.is_preset(v) then
    local p = sel.presets[v]
    if not p then
      local names = H.sorted_keys(sel.presets)
      local close = presets.suggest(v, names)
      M.fail(
        ("`flemma.opt.provider`: unknown preset `%s`%s%s"):format(
          v,
          close and ("; did you mean `%s`?"):format(close) or "",
          #names > 0 and (" (presets: " .. table.concat(names, ", ") .. ")")
            or " (none is defined: add `presets` in setup())"
        )
      )
    end
    S.selected, S.selected_line, S.preset = p.provider, M.line(), v
    S.model_set, S.model, S.model_line = true, p.model, M.line()
    for k, value in pairs(p.parameters or {}) do
      if type(value) == "table" then
        S.provider[k] = S.provider[k] or {}
        for sk, sv in pairs(value) do
          S.provider[k][sk] = sv
          S.cleared[k .. "." .. sk] = nil
        end
      else
        S.params[k] = value
        S.cleared[k] = nil
      end
    end
    for _, path in ipairs(p.cleared or {}) do
      local head, tail = path:match("^([^.]+)%.(.+)$")
      if head then
        if S.provider[head] then
          S.provider[head][tail] = nil
        end
      else
        S.params[path] = nil
      end
      S.cleared[path] = true
    end
    return
  end
  if not sel.providers[v] then
    local names = H.provider_names(B)
    local close = presets.suggest(v, names)
    M.fail(
      ("`flemma.opt.provider`: unknown provider `%s`%s (providers: %s)"):format(
        v,
        close and ("; did you mean `%s`?"):format(close) or "",
        table.concat(names, ", ")
      )
    )
  end
  S.selected, S.selected_line = v, M.line()
end

-- Raises "frontmatter:LINE: msg" for a line recorded earlier (or msg alone).
function H.fail_at(line, msg)
  if line then
    error(("%s:%d: %s"):format(M.SOURCE_PREFIX, line, msg), 0)
  end
  error(msg, 0)
end

-- The provider and model the frontmatter selects, checked once it has run (the
-- model may be set before the provider it belongs to).
function H.selection_result(B)
  local S, sel = B.S, B.sel
  if not S.selected and not S.model_set then
    return nil, nil
  end
  local name = S.selected or sel.provider
  local p = sel.providers[name]
  local model = H.effective_model(B)
  if not model then
    H.fail_at(
      S.selected_line,
      ("`flemma.opt.provider`: %s has no default model: set `flemma.opt.model` too (a name from the server's model list)"):format(
        name
      )
    )
  end
  if S.model_set and S.model ~= nil and p and not p.any_model and not p.models[S.model] then
    local names = H.sorted_keys(p.models)
    local close = presets.suggest(S.model, names)
    H.fail_at(
      S.model_line,
      ("`flemma.opt.model`: unknown model `%s` for %s%s (models: %s); a model newer than Flemma's table: set `providers.%s.model` in setup()"):format(
        S.model,
        name,
        close and ("; did you mean `%s`?"):format(close) or "",
        table.concat(names, ", "),
        name
      )
    )
  end
  return S.selected, model
end

-- The flemma.opt object itself.
function H.opt_object(B)
  local S, sel, params_cfg = B.S, B.sel, B.params_cfg
  local tools_list, provider_proxies, check_param = B.tools_list, B.proxies, H.check_param
  return setmetatable({}, {
    __metatable = "flemma.opt",
    __index = function(_, k)
      if k == "tools" then
        return tools_list
      elseif provider_proxies[k] then
        return provider_proxies[k]
      elseif k == "provider" then
        return S.selected or sel.provider
      elseif k == "model" then
        return H.effective_model(B)
      elseif H.params[k] then
        local v = S.params[k]
        if v == nil and not S.cleared[k] then
          v = params_cfg[k]
        end
        return v
      elseif H.TRANSPORT_KEYS[k] then
        M.fail(H.transport("flemma.opt." .. k))
      end
      M.fail(H.unknown(k, H.ROOT_NAMES, "flemma.opt."))
    end,
    __newindex = function(_, k, v)
      if k == "tools" then
        H.assign(tools_list, v)
      elseif provider_proxies[k] then
        if type(v) ~= "table" or H.is_list(v) then
          M.fail(("`flemma.opt.%s` should be a table of parameters, not %s"):format(k, show(v)))
        end
        local proxy = provider_proxies[k]
        local copy = {}
        for key, value in pairs(v) do
          copy[key] = value
        end
        S.provider[k] = {}
        for path in pairs(S.cleared) do
          if path:sub(1, #k + 1) == k .. "." then
            S.cleared[path] = nil
          end
        end
        for key, value in pairs(copy) do
          proxy[key] = value
        end
      elseif k == "provider" then
        H.select_provider(B, v)
      elseif k == "model" then
        if v ~= nil and (type(v) ~= "string" or v == "") then
          M.fail(("`flemma.opt.model` should be a model name, not %s"):format(v == "" and '""' or show(v)))
        end
        S.model_set, S.model, S.model_line = true, v, M.line()
      elseif H.params[k] then
        check_param("flemma.opt." .. k, k, v)
        S.params[k] = v
        S.cleared[k] = nil
      elseif H.TRANSPORT_KEYS[k] then
        M.fail(H.transport("flemma.opt." .. k))
      else
        M.fail(H.unknown(k, H.ROOT_NAMES, "flemma.opt."))
      end
    end,
  })
end

-- The selected tools: the names in order, each `$mcp`, `$mcp:NAME` or `NAME:*` entry
-- followed by the known tools it matches (but those removed from the list); the
-- entries themselves stay, for tools their server registers later.
function H.expand_tools(items, excluded, known)
  local out, seen, skip = {}, {}, {}
  for _, n in ipairs(excluded) do
    skip[n] = true
  end
  local function keep(n)
    if not seen[n] then
      seen[n] = true
      out[#out + 1] = n
    end
  end
  for _, item in ipairs(items) do
    keep(item)
    if presets.prefix(item) then
      for _, n in ipairs(known) do
        if not skip[n] and presets.matches(item, n) then
          keep(n)
        end
      end
    end
  end
  return out
end

-- What the frontmatter set, once it has run.
function H.collect(B)
  local S, aa_list, tools_list = B.S, B.aa_list, B.tools_list
  local parameters = vim.deepcopy(S.params)
  for provider, values in pairs(S.provider) do
    if next(values) ~= nil then
      parameters[provider] = vim.deepcopy(values)
    end
  end
  local aa_state = H.lists[aa_list]
  local auto_approve
  if S.aa_fn then
    auto_approve = S.aa_fn
  elseif S.aa_touched then
    auto_approve = vim.deepcopy(aa_state.items)
  end
  local provider, model = H.selection_result(B)
  local cleared = H.sorted_keys(S.cleared)
  local tools_state = H.lists[tools_list]
  return {
    tools = S.tools_touched and H.expand_tools(tools_state.items, tools_state.excluded, B.known.enabled) or nil,
    tools_excluded = S.tools_touched and vim.deepcopy(tools_state.excluded) or nil,
    auto_approve = auto_approve,
    auto_approve_excluded = (S.aa_touched and not S.aa_fn) and vim.deepcopy(aa_state.excluded) or {},
    ask = S.ask_touched and vim.deepcopy(H.lists[B.side.ask].items) or nil,
    deny = S.deny_touched and vim.deepcopy(H.lists[B.side.deny].items) or nil,
    parameters = parameters,
    provider = provider,
    model = model,
    preset = S.preset,
    parameters_cleared = #cleared > 0 and cleared or nil,
  }
end

--- A fresh `flemma.opt` object and a function that collects what the frontmatter set.
---@param config? table the configuration as data: tools, parameters, selection (default: the context's)
---@param tools? table the tool registry { list, get?, is_ready? } (default: the context's)
---@return table opt, fun(): flemma.opt.Result collect
function M.new(config, tools)
  if config == nil and H.context then
    config, tools = H.context()
  end
  config = config or {}
  local tools_cfg = config.tools or {}
  local params_cfg = config.parameters or {}
  local user_presets = tools_cfg.presets
  local known = M.known_tools(tools)

  local B = {
    config = config,
    params_cfg = params_cfg,
    known = known,
    user_presets = user_presets,
  }
  B.S = {
    tools_touched = false,
    aa_touched = false,
    aa_fn = nil,
    params = {},
    provider = { anthropic = {}, openai = {}, vertex = {} },
    cleared = {}, -- dotted parameter names a preset cleared
    selected = nil, -- the provider frontmatter selected
    selected_line = nil,
    preset = nil,
    model_set = false, -- the model was chosen (by flemma.opt.model or a preset)
    model = nil,
    model_line = nil,
  }
  B.sel = config.selection
    or { provider = config.provider or "anthropic", model = config.model, providers = {}, presets = {} }
  H.tool_checks(B)
  H.tool_lists(B)
  H.provider_proxies(B)
  return H.opt_object(B), function()
    return H.collect(B)
  end
end

--- Names of the options frontmatter can set on flemma.opt (for JSON frontmatter).
M.ROOT_NAMES = H.ROOT_NAMES

return M
