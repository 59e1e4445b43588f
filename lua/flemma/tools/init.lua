--- The tool registry: definitions, async definition sources, input validation and
--- execution. See `:help flemma-tools-register`.
local util = require("flemma.core.util")
local presets = require("flemma.isolated.presets")

local M = {}
local H = {}

---@class flemma.tools.Result
---@field success boolean
---@field output? string|table
---@field error? string
---@field info? string a success's result block info string: only one of document.RESULT_INFOS
--- (`flemma:todo`, the list of the `todo` tool); the cycle writes a plain block otherwise
---@field attachments? flemma.tools.Attachment[] files shown to the model with the result (a success's only)

---@class flemma.tools.Attachment an image (png, jpeg, gif, webp) or PDF a result hands to the model
---@field path string absolute path of the file (read when the request is built, flemma.attachments)
---@field mime string its MIME type

---@class flemma.tools.Definition
---@field name string
---@field description string
---@field input_schema table JSON schema of the input (type = "object")
---@field strict? boolean
---@field async? boolean execute(input, ctx, callback) -> cancel function
---@field capabilities? string[] e.g. { "can_auto_approve_if_sandboxed" }
---@field paths? fun(input: table): (string|{ path: string, write?: boolean })[] the files a call reads (a string) or writes (`write = true`); built-in and preset approvals apply only inside the project (flemma.tools.scope)
---@field format_preview? fun(input: table, max_length: integer): string
---@field execute? fun(input: table, ctx: flemma.tools.Context, callback?: fun(result: flemma.tools.Result)): flemma.tools.Result|function|nil
---@field enabled? boolean|fun(): boolean
---@field asks_user? boolean the call asks the user (the `ask` tool): no resolver approves it, it always waits
--- as a pending placeholder (a deny still holds), and autopilot stops there
---@field propose? fun(input: table, ctx: flemma.tools.Context, cb: fun(p: flemma.tools.review.Proposal|nil, err: string|nil)) the change a call would make to one file, for the diff review (flemma.tools.review); such a tool writes what the user accepted there (review.take) when the call runs

-- The message shown in a buffer whose send waits for async sources.
M.WAITING_MESSAGE = "Waiting for tool definitions to load..."

H.defs = {} ---@type table<string, flemma.tools.Definition>
H.sources = {} -- async sources not done yet (set)
H.source_log = {} -- every async source started: { label, state, error?, tools }
H.ready_callbacks = {}
H.running = 0 -- executions in flight
H.queue = {} -- executions waiting for a slot (tools.max_concurrent)

-- Optional fields and the types they accept.
H.optional = {
  strict = { "boolean" },
  async = { "boolean" },
  capabilities = { "table" },
  paths = { "function" },
  format_preview = { "function" },
  execute = { "function" },
  enabled = { "boolean", "function" },
  risk = { "string" },
  on_rejected = { "function" },
  asks_user = { "boolean" },
  propose = { "function" },
}

-- Risk levels (`:help flemma-risk`), least to most.
M.RISKS = { "safe", "medium", "dangerous", "destructive" }

-- The built-in tools (setup() registers each from flemma.tools.builtin.<name>) and
-- their risk, which also applies to a tool of the same name another module adds when
-- its definition does not say.
H.RISK = {
  bash = "dangerous",
  read = "safe",
  write = "medium",
  edit = "dangerous",
  grep = "safe",
  glob = "safe",
  find = "safe",
  ls = "safe",
  delete = "destructive",
  move = "medium",
  calculator = "safe",
  calculator_async = "safe",
  ask = "safe",
  todo = "safe",
  -- It can send what it read elsewhere in a URL.
  fetch = "dangerous",
}

--- The risk level of a tool: its definition's `risk`, else the built-in
--- classification, else nil (unclassified).
---@param name string
---@return string|nil
function M.risk(name)
  local def = H.defs[name]
  if def and def.risk ~= nil then
    return def.risk
  end
  return H.RISK[name]
end

---@param name string|nil the name given next to the definition
---@param def any
---@return flemma.tools.Definition
function H.check_definition(name, def)
  if type(def) ~= "table" then
    util.error(("tool definition%s should be a table, not %s"):format(name and (" `" .. name .. "`") or "", type(def)))
  end
  local dname = def.name
  if dname == nil then
    dname = name
  end
  local what = dname and ("tool `" .. tostring(dname) .. "`") or "tool definition"
  if type(dname) ~= "string" or dname == "" then
    util.error(what .. " is missing the required field `name` (a non-empty string)")
  end
  if name ~= nil and def.name ~= nil and def.name ~= name then
    util.error(("tool registered as `%s` has name `%s`: the two should match"):format(name, def.name))
  end
  if not dname:match("^[%w_%-%.:]+$") then
    util.error(("tool name `%s` may only hold letters, digits, `_`, `-`, `.` and `:`"):format(dname))
  end
  if type(def.description) ~= "string" or def.description == "" then
    util.error(what .. " is missing the required field `description` (a non-empty string)")
  end
  if type(def.input_schema) ~= "table" then
    util.error(what .. " is missing the required field `input_schema` (a JSON schema table)")
  end
  if def.input_schema.type ~= "object" then
    util.error(what .. ': `input_schema.type` should be "object", not ' .. vim.inspect(def.input_schema.type))
  end
  for field, types in pairs(H.optional) do
    local v = def[field]
    if v ~= nil and not vim.tbl_contains(types, type(v)) then
      util.error(("%s: `%s` should be a %s, not %s"):format(what, field, table.concat(types, " or "), type(v)))
    end
  end
  if def.risk ~= nil and not vim.tbl_contains(M.RISKS, def.risk) then
    util.error(
      ("%s: `risk` should be one of %s, not %s"):format(what, table.concat(M.RISKS, ", "), vim.inspect(def.risk))
    )
  end
  local copy = {}
  for k, v in pairs(def) do
    copy[k] = v
  end
  copy.name = dname
  return copy
end

function H.add(name, def)
  local checked = H.check_definition(name, def)
  H.defs[checked.name] = checked
  return checked.name
end

--- A readable name for a function: "file.lua:12".
function H.describe_fn(fn)
  local info = debug.getinfo(fn, "S")
  return ("%s:%d"):format(info.short_src or "?", info.linedefined or 0)
end

function H.fire_ready()
  if next(H.sources) ~= nil then
    return
  end
  local callbacks = H.ready_callbacks
  H.ready_callbacks = {}
  for _, fn in ipairs(callbacks) do
    util.safe(fn, "tool on_ready callback")()
  end
end

--- Starts one async definition source.
---@param label string how warnings name the source
---@param resolve fun(register: function, done: fun(err?: any))
---@param timeout number|nil seconds
function H.add_source(label, resolve, timeout)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout <= 0) then
    util.error(
      ("tool source %s: `timeout` should be a positive number of seconds, not %s"):format(label, vim.inspect(timeout))
    )
  end
  timeout = timeout or require("flemma.core.config").get().tools.default_timeout or 30
  local finished = false
  local timer = vim.uv.new_timer()
  local source = { label = label }
  H.sources[source] = true
  local entry = { label = label, state = "loading", tools = 0 }
  H.source_log[#H.source_log + 1] = entry

  local function finish(err)
    if finished then
      return
    end
    finished = true
    if timer and not timer:is_closing() then
      timer:stop()
      timer:close()
    end
    if err ~= nil then
      util.warn(("tool source %s failed: %s"):format(label, util.message(err)))
      entry.state, entry.error = "failed", util.message(err)
    else
      entry.state = "loaded"
    end
    H.sources[source] = nil
    if vim.in_fast_event() then
      vim.schedule(H.fire_ready)
    else
      H.fire_ready()
    end
  end

  local function register(name, def)
    local ok, err = pcall(H.add, name, def)
    if ok then
      entry.tools = entry.tools + 1
    else
      util.warn(("tool source %s: %s"):format(label, util.message(err)))
    end
    return ok
  end

  timer:start(math.max(1, math.floor(timeout * 1000)), 0, function()
    vim.schedule(function()
      finish(("timed out after %gs without calling done()"):format(timeout))
    end)
  end)

  local ok, err = xpcall(resolve, debug.traceback, register, finish)
  if not ok then
    finish(err)
  end
end

--- Registers tools. Forms:
--- - `register(name, definition)`
--- - `register(definition)` (a table with a `name`)
--- - `register({ def1, def2, ... })`
--- - `register("my.module")`: its `.definitions` array, or its `.resolve(register, done)`
---   as an async source with its optional `.timeout` (seconds)
--- - `register(function(register, done) ... end)`: an async source
--- - `register({ resolve = fn, timeout = seconds })`: an async source
---@param arg1 string|table|function
---@param arg2? table
---@return string[]|nil names registered synchronously
function M.register(arg1, arg2)
  local names = H.register(arg1, arg2)
  return H.handle(names)
end

--- The list of names register() returns, with a `:remove()` that unregisters those
--- tools (each only while it is still the definition registered by that call).
function H.handle(names)
  local defs = {}
  for i, n in ipairs(names) do
    defs[i] = H.defs[n]
  end
  return setmetatable(names, {
    __index = {
      remove = function()
        local any = false
        for i, n in ipairs(names) do
          if H.defs[n] ~= nil and H.defs[n] == defs[i] then
            H.defs[n] = nil
            any = true
          end
        end
        return any
      end,
    },
  })
end

function H.register(arg1, arg2)
  local t = type(arg1)
  if t == "string" and arg2 ~= nil then
    return { H.add(arg1, arg2) }
  elseif t == "string" then
    local ok, mod = pcall(require, arg1)
    if not ok then
      util.error(("cannot load tool module `%s`: %s"):format(arg1, util.message(mod)))
    end
    if type(mod) ~= "table" then
      util.error(("tool module `%s` should return a table, not %s"):format(arg1, type(mod)))
    end
    if type(mod.definitions) == "table" then
      if next(mod.definitions) == nil then
        return {}
      end
      return H.register(mod.definitions)
    elseif type(mod.resolve) == "function" then
      H.add_source(arg1, mod.resolve, mod.timeout)
      return {}
    elseif type(mod.name) == "string" and mod.input_schema then
      return { H.add(nil, mod) }
    end
    util.error(("tool module `%s` exports neither `definitions` (a list) nor `resolve` (a function)"):format(arg1))
  elseif t == "function" then
    H.add_source("function at " .. H.describe_fn(arg1), arg1, nil)
    return {}
  elseif t == "table" then
    if type(arg1.resolve) == "function" then
      H.add_source("function at " .. H.describe_fn(arg1.resolve), arg1.resolve, arg1.timeout)
      return {}
    elseif arg1.name ~= nil or arg1.input_schema ~= nil then
      return { H.add(nil, arg1) }
    elseif vim.islist(arg1) and #arg1 > 0 then
      -- Check everything first so that a bad entry registers nothing.
      local checked = {}
      for i, def in ipairs(arg1) do
        local ok, res = pcall(H.check_definition, nil, def)
        if not ok then
          util.error(("definition #%d: %s"):format(i, util.message(res)))
        end
        checked[i] = res
      end
      local names = {}
      for i, def in ipairs(checked) do
        H.defs[def.name] = def
        names[i] = def.name
      end
      return names
    end
    util.error("register() expects a definition, a list of definitions or { resolve = fn, timeout = n }")
  end
  util.error("register() expects a name and a definition, a module path, a list, or a function; not " .. t)
end

--- Removes a tool; true when it was registered.
---@param name string
---@return boolean
function M.unregister(name)
  if H.defs[name] == nil then
    return false
  end
  H.defs[name] = nil
  return true
end

--- The definition of a tool, or nil.
---@param name string
---@return flemma.tools.Definition|nil
function M.get(name)
  return H.defs[name]
end

function H.is_enabled(def)
  if type(def.enabled) == "function" then
    local ok, res = pcall(def.enabled)
    return ok and res ~= false and res ~= nil
  end
  return def.enabled ~= false
end

--- The names of the enabled tools, sorted.
---@return string[]
function M.list()
  local names = {}
  for name, def in pairs(H.defs) do
    if H.is_enabled(def) then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  return names
end

--- The async tool sources started so far and how each ended: `state` is
--- "loading", "loaded" or "failed" (with `error`); `tools` counts what it registered.
---@return { label: string, state: string, error?: string, tools: integer }[]
function M.sources()
  return vim.deepcopy(H.source_log)
end

--- The names of all registered tools, enabled or not, sorted.
---@return string[]
function M.registered()
  local names = vim.tbl_keys(H.defs)
  table.sort(names)
  return names
end

--- Whether every async source has finished (or timed out).
---@return boolean
function M.is_ready()
  return next(H.sources) == nil
end

--- Calls fn once all async sources are done; at once when they already are.
---@param fn function
function M.on_ready(fn)
  if next(H.sources) == nil then
    fn()
  else
    H.ready_callbacks[#H.ready_callbacks + 1] = fn
  end
end

--- The tools available in a buffer: the enabled ones, narrowed by the frontmatter's
--- `flemma.opt.tools` selection. A broken frontmatter leaves all tools and returns err.
---@param bufnr integer
---@return string[] names
---@return string|nil err
function M.for_buffer(bufnr)
  local names = M.list()
  local ok, frontmatter = pcall(require, "flemma.chat.frontmatter")
  if not ok or type(frontmatter) ~= "table" or type(frontmatter.get) ~= "function" then
    return names
  end
  local got, opts, err = pcall(frontmatter.get, bufnr)
  if not got then
    return names, util.message(opts)
  end
  if opts == nil or type(opts.tools) ~= "table" then
    return names, err
  end
  local selected, dynamic, excluded = {}, {}, {}
  for _, n in ipairs(opts.tools) do
    selected[n] = true
    if type(n) == "string" and presets.prefix(n) then
      dynamic[#dynamic + 1] = n
    end
  end
  for _, n in ipairs(opts.tools_excluded or {}) do
    excluded[n] = true
  end
  local out = {}
  for _, n in ipairs(names) do
    if selected[n] or (not excluded[n] and H.any_matches(dynamic, n)) then
      out[#out + 1] = n
    end
  end
  return out, err
end

-- Whether one of the `$mcp` / `NAME:*` entries selects tool `name` (a tool its server
-- registered after the frontmatter was read).
function H.any_matches(entries, name)
  for _, entry in ipairs(entries) do
    if presets.matches(entry, name) then
      return true
    end
  end
  return false
end

-- Input validation ---------------------------------------------------------------

function H.json_type(v)
  local t = type(v)
  if v == vim.NIL then
    return "null"
  elseif t == "string" or t == "boolean" then
    return t
  elseif t == "number" then
    return (v == math.floor(v) and v > -math.huge and v < math.huge) and "integer" or "number"
  elseif t == "table" then
    if next(v) == nil then
      return "empty"
    end
    return vim.islist(v) and "array" or "object"
  end
  return t
end

function H.type_ok(actual, allowed)
  for _, want in ipairs(allowed) do
    if want == actual then
      return true
    elseif want == "number" and actual == "integer" then
      return true
    elseif actual == "empty" and (want == "array" or want == "object") then
      return true
    end
  end
  return false
end

--- Checks value against schema; returns an error message naming the field, or nil.
function H.check_value(schema, value, path)
  if type(schema) ~= "table" then
    return nil
  end
  local allowed = schema.type
  if type(allowed) == "string" then
    allowed = { allowed }
  end
  local actual = H.json_type(value)
  if value == nil then
    actual = "null"
  end
  if type(allowed) == "table" and not H.type_ok(actual, allowed) then
    if value == nil or value == vim.NIL then
      return ("missing required field `%s`"):format(path)
    end
    return ("field `%s` should be %s, not %s"):format(
      path,
      table.concat(allowed, " or "),
      actual == "empty" and "an empty table" or actual
    )
  end
  if value == nil or value == vim.NIL then
    return nil
  end
  if type(schema.enum) == "table" and not vim.tbl_contains(schema.enum, value) then
    return ("field `%s` should be one of %s, not %s"):format(
      path,
      table.concat(vim.tbl_map(vim.inspect, schema.enum), ", "),
      vim.inspect(value)
    )
  end
  if type(value) == "table" then
    if actual == "array" or (actual == "empty" and schema.items) then
      for i, item in ipairs(value) do
        local err = H.check_value(schema.items, item, ("%s[%d]"):format(path, i))
        if err then
          return err
        end
      end
    elseif schema.properties or schema.required then
      return H.check_object(schema, value, path .. ".")
    end
  end
  return nil
end

function H.check_object(schema, value, prefix)
  local props = schema.properties or {}
  for _, key in ipairs(schema.required or {}) do
    if value[key] == nil or value[key] == vim.NIL then
      local prop = props[key]
      local types = prop and prop.type
      local nullable = types == "null" or (type(types) == "table" and vim.tbl_contains(types, "null"))
      if not nullable then
        return ("missing required field `%s%s`"):format(prefix, key)
      end
    end
  end
  for key, v in pairs(value) do
    local prop = props[key]
    if prop == nil then
      if schema.additionalProperties == false then
        return ("unknown field `%s%s`"):format(prefix, tostring(key))
      end
    else
      local err = H.check_value(prop, v, prefix .. key)
      if err then
        return err
      end
    end
  end
  return nil
end

--- Validates a tool input against a definition's schema.
---@param def flemma.tools.Definition
---@param input any
---@return string|nil err
function M.validate_input(def, input)
  if input == nil or input == vim.NIL then
    input = {}
  end
  if type(input) ~= "table" or (vim.islist(input) and next(input) ~= nil) then
    return "the input should be a JSON object, not " .. H.json_type(input)
  end
  return H.check_object(def.input_schema, input, "")
end

--- A copy of the input with JSON nulls turned into nil (tools write `input.x or default`).
function H.strip_nulls(v)
  if type(v) ~= "table" then
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    if x ~= vim.NIL then
      out[k] = H.strip_nulls(x)
    end
  end
  return out
end

-- Execution ------------------------------------------------------------------------

-- A copy of a result's output with every secret removed (util.redact), strings at
-- any depth of a table output.
-- `except`: the names of tools.env_passthrough (their values were given to tools on
-- purpose); a key Flemma resolved is removed all the same.
function H.redact(v, except, depth)
  if type(v) == "string" then
    return util.redact(v, except)
  end
  if type(v) ~= "table" or depth > 32 then
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    out[k] = H.redact(x, except, depth + 1)
  end
  -- vim.empty_dict() stays an object for vim.json.encode.
  local mt = getmetatable(v)
  if mt ~= nil and mt == getmetatable(vim.empty_dict()) then
    setmetatable(out, mt)
  end
  return out
end

--- The result as it is recorded: a table of success, output and error, with every
--- secret (a key Flemma resolved, a secret-looking environment value: util.redact)
--- taken out. A result is written into the chat file and sent to the provider, and
--- a tool that read `export OPENAI_API_KEY=...` from ~/.bashrc or a project script
--- must not carry the key there.
function H.normalize(name, result)
  if type(result) ~= "table" then
    return { success = false, error = ("tool `%s` returned %s instead of a result table"):format(name, type(result)) }
  end
  local except = {}
  for _, n in ipairs(require("flemma.core.config").get().tools.env_passthrough or {}) do
    except[n] = true
  end
  local out = { success = result.success == true, output = H.redact(result.output, except, 0), error = result.error }
  out.rate_limited = result.rate_limited == true or nil
  if out.success and type(result.info) == "string" and require("flemma.chat.document").RESULT_INFOS[result.info] then
    out.info = result.info
  end
  if out.success and result.attachments ~= nil then
    local list, bad = H.attachments(result.attachments)
    if not list then
      return { success = false, error = ("tool `%s` returned bad attachments: %s"):format(name, bad) }
    end
    out.attachments = list
  end
  if out.error ~= nil and type(out.error) ~= "string" then
    out.error = util.message(out.error)
  end
  if type(out.error) == "string" then
    out.error = util.redact(out.error, except)
  end
  if not out.success and (out.error == nil or out.error == "") then
    out.error = ("tool `%s` failed without a message"):format(name)
  end
  return out
end

-- Result attachments as the chat writes them: a list of { path, mime }, each path
-- absolute, without a backtick or a line break (it goes on the result's fence line).
function H.attachments(v)
  if type(v) ~= "table" or not vim.islist(v) then
    return nil, "`attachments` should be a list of { path, mime }"
  end
  if #v > 64 then
    return nil, ("%d attachments (at most 64)"):format(#v)
  end
  local out = {}
  for i, a in ipairs(v) do
    if type(a) ~= "table" or type(a.path) ~= "string" or type(a.mime) ~= "string" then
      return nil, ("attachment %d should be { path = string, mime = string }"):format(i)
    end
    if a.path:sub(1, 1) ~= "/" or a.path:find("[`\n\r]") or not a.mime:match("^[%w.+-]+/[%w.+-]+$") then
      return nil, ("attachment %d: %s (%s) is not an absolute path of a plain name and type"):format(i, a.path, a.mime)
    end
    out[i] = { path = a.path, mime = a.mime:lower() }
  end
  return out
end

function H.max_concurrent()
  local n = require("flemma.core.config").get().tools.max_concurrent
  return (type(n) == "number" and n >= 1) and n or math.huge
end

function H.pump()
  while #H.queue > 0 and H.running < H.max_concurrent() do
    local job = table.remove(H.queue, 1)
    job.start()
  end
end

--- The input a tool's execute (or propose) receives for a call's input: unwrapped
--- from a `params` object, checked against the schema, JSON nulls left out. nil and
--- why when it does not match.
---@param def flemma.tools.Definition
---@param input any
---@return table|nil
---@return string|nil err
function M.checked_input(def, input)
  local raw, norm_err = H.normalize_input(def, input)
  if norm_err then
    return nil, norm_err
  end
  local err = M.validate_input(def, raw)
  if err then
    return nil, err
  end
  return H.strip_nulls(raw or {})
end

--- Runs a tool call. `on_done(result)` is called exactly once, on the main thread and
--- never before execute() returns. Input that does not match the schema becomes an
--- error result naming the field, and nothing runs. Runs at most
--- `tools.max_concurrent` tools at once; the others wait in line.
---@param bufnr integer
---@param tool_use { id?: string, name: string, input: table }
---@param on_done fun(result: flemma.tools.Result)
---@param opts? { on_progress?: fun(progress: { bytes?: integer, lines?: integer, last_line?: string }) }
---@return { cancel: fun() }
function M.execute(bufnr, tool_use, on_done, opts)
  if type(on_done) ~= "function" then
    util.error("execute: `on_done` should be a function, not " .. type(on_done))
  end
  local name = type(tool_use) == "table" and tool_use.name or nil
  local state = { done = false, started = false, cancel_fn = nil }
  local job = {}
  local finish = H.finisher(name, state, job, on_done)
  local handle = {
    cancel = function()
      H.cancel(name, state, finish)
    end,
  }
  local def = name and H.defs[name]
  local input, refused = H.admit(bufnr, tool_use, name, def)
  if refused then
    finish(refused)
    return handle
  end
  job.start = function()
    H.start(bufnr, tool_use, name, def, input, opts, state, finish)
  end
  if opts and opts.nested then
    -- A call made by a running tool: its parent holds a slot already, so waiting in
    -- line behind it could never end.
    job.start()
  else
    H.queue[#H.queue + 1] = job
    H.pump()
  end
  return handle
end

--- The `finish(result)` of a call: the first result it is given ends the call (its
--- slot or its place in line freed, its frame settled, the after hooks run) and is
--- handed to on_done on the main loop; later ones are dropped.
function H.finisher(name, state, job, on_done)
  local function finish(result)
    if state.done then
      return
    end
    state.done = true
    if state.started then
      H.running = H.running - 1
    else
      for i, j in ipairs(H.queue) do
        if j == job then
          table.remove(H.queue, i)
          break
        end
      end
    end
    result = H.normalize(name or "?", result)
    local frame = state.frame
    if frame then
      if #frame.nested > 0 then
        result = H.normalize(name or "?", H.group_nested(frame, result))
      end
      if frame.id ~= nil and H.frames_by_id[frame.id] == frame then
        H.frames_by_id[frame.id] = nil
      end
      if H.call_host and frame.id ~= nil and type(frame.bufnr) == "number" then
        pcall(H.call_host.settle, frame.bufnr, frame.id)
      end
    end
    if state.mw_args ~= nil then
      result =
        H.normalize(name or "?", require("flemma.tools.middleware").after(name, state.mw_args, state.mw_ctx, result))
    end
    vim.schedule(function()
      util.safe(on_done, ("tool `%s` on_done"):format(name or "?"))(result)
      H.pump()
    end)
  end
  return finish
end

--- Cancels a call: it finishes as cancelled, then the tool's own cancel runs.
function H.cancel(name, state, finish)
  if state.done then
    return
  end
  local cancel_fn = state.cancel_fn
  finish({ success = false, error = ("tool `%s` was cancelled"):format(name or "?") })
  if cancel_fn then
    local ok, err = pcall(cancel_fn)
    if not ok then
      util.warn(("cancelling tool `%s` failed: %s"):format(name, util.message(err)))
    end
  end
end

--- Whether a call may run: its input (normalized, checked against the schema, nulls
--- taken out), or nil and the error result that ends it (an unknown tool, one the
--- buffer does not enable, the rate limit, invalid input).
function H.admit(bufnr, tool_use, name, def)
  if not def then
    return nil,
      {
        success = false,
        error = type(name) == "string" and ("unknown tool `%s`"):format(name) or "the tool call names no tool",
      }
  end
  if type(def.execute) ~= "function" then
    return nil, { success = false, error = ("tool `%s` has no execute function"):format(name) }
  end
  if type(bufnr) == "number" and bufnr > 0 and vim.api.nvim_buf_is_valid(bufnr) then
    local available, fm_err = M.for_buffer(bufnr)
    if fm_err then
      return nil, { success = false, error = ("not run: the buffer's frontmatter fails (%s)"):format(fm_err) }
    end
    if not vim.tbl_contains(available, name) then
      return nil,
        {
          success = false,
          error = ("tool `%s` is not enabled in this buffer (flemma.opt.tools selects: %s)"):format(
            name,
            table.concat(available, ", ")
          ),
        }
    end
  end
  local allowed, retry = require("flemma.tools.ratelimit").take(type(bufnr) == "number" and bufnr > 0 and bufnr or nil)
  if not allowed then
    local cfg = require("flemma.core.config").get().tools.rate_limit
    return nil,
      {
        success = false,
        rate_limited = true,
        error = ("rate limit: more than %d tool calls in this buffer (%g more per second); not run, retry in %.1fs"):format(
          cfg.burst or 20,
          cfg.per_second or 2,
          retry
        ),
      }
  end
  local input, err = M.checked_input(def, tool_use.input)
  if not input then
    return nil, { success = false, error = ("invalid input for `%s`: %s"):format(name, err) }
  end
  return input
end

--- Starts an admitted call when its turn comes: its context, the before hooks (which
--- may refuse it or change its input), then its frame.
function H.start(bufnr, tool_use, name, def, input, opts, state, finish)
  if state.done then
    return
  end
  state.started = true
  H.running = H.running + 1
  local ctx = require("flemma.tools.context").new(bufnr, name, opts)
  H.ctx_ids[ctx] = tool_use.id
  local middleware = require("flemma.tools.middleware")
  if middleware.any(name) then
    local mw_ctx = { tool_name = name, call_id = tool_use.id, bufnr = ctx.bufnr, cwd = ctx.cwd, context = ctx }
    local args, reason = middleware.before(name, input, mw_ctx)
    if args == nil then
      finish({ success = false, error = reason })
      return
    end
    if args ~= input then
      local bad = M.validate_input(def, args)
      if bad then
        finish({ success = false, error = ("a before hook gave `%s` invalid input: %s"):format(name, bad) })
        return
      end
      input = H.strip_nulls(args)
    end
    state.mw_args, state.mw_ctx = input, mw_ctx
  end
  H.start_frame(state, bufnr, tool_use.id, name, def, input, ctx, finish)
end

-- Calls made with tools.call() ------------------------------------------------------

H.ctx_ids = setmetatable({}, { __mode = "k" }) -- execution context -> call id

--- The id of the call an execution context belongs to (nil for a call without one).
---@param ctx flemma.tools.Context
---@return string|nil
function M.call_id(ctx)
  return H.ctx_ids[ctx]
end

H.frames = setmetatable({}, { __mode = "k" }) -- coroutine -> frame
H.frames_by_id = {} -- running call id -> frame
H.YIELD = {} -- what a frame's coroutine yields while it waits for a nested call
H.call_seq = 0

--- Runs a tool's execute in a coroutine of its own, so that tools.call() inside it
--- can wait for a nested call (and its approval) without blocking the editor.
function H.start_frame(state, bufnr, id, name, def, input, ctx, finish)
  local frame = { id = id, bufnr = bufnr, name = name, nested = {}, count = 0 }
  state.frame = frame
  if id ~= nil then
    H.frames_by_id[id] = frame
  end
  local callback
  if def.async then
    callback = function(result)
      if vim.in_fast_event() then
        vim.schedule(function()
          finish(result)
        end)
      else
        finish(result)
      end
    end
  end
  local co = coroutine.create(function()
    return xpcall(def.execute, debug.traceback, input, ctx, callback)
  end)
  H.frames[co] = frame
  frame.co = co
  local function handle_return(ok, res)
    if not ok then
      finish({ success = false, error = ("tool `%s` raised an error: %s"):format(name, util.message(res)) })
    elseif def.async then
      if type(res) == "function" then
        state.cancel_fn = res
      elseif type(res) == "table" and type(res.cancel) == "function" then
        state.cancel_fn = function()
          res.cancel()
        end
      end
    else
      finish(res)
    end
  end
  local function step(...)
    local resumed, a, b = coroutine.resume(co, ...)
    if not resumed then
      finish({ success = false, error = ("tool `%s` raised an error: %s"):format(name, util.message(a)) })
    elseif coroutine.status(co) == "dead" then
      frame.co = nil
      handle_return(a, b)
    elseif a ~= H.YIELD then
      frame.co = nil
      finish({ success = false, error = ("tool `%s` yielded outside of tools.call()"):format(name) })
    else
      -- Waiting for a nested call: b is how that call hands its result over.
      b.resume = function(pair)
        if state.done then
          return
        end
        step(pair)
      end
    end
  end
  step()
end

--- The parent's result with the nested calls' results grouped under it.
function H.group_nested(frame, result)
  if #frame.nested == 0 then
    return result
  end
  local parts = {}
  for _, n in ipairs(frame.nested) do
    parts[#parts + 1] = ("[nested call `%s` (`%s`)%s]\n%s"):format(
      n.name,
      n.id,
      n.is_error and " (error)" or "",
      n.content
    )
  end
  local group = table.concat(parts, "\n\n")
  local out = {}
  for k, v in pairs(result) do
    out[k] = v
  end
  if result.success then
    if type(result.output) == "table" then
      out.output = vim.deepcopy(result.output)
      if not vim.islist(out.output) then
        out.output.nested = vim.tbl_map(function(n)
          return { tool = n.name, id = n.id, content = n.content, is_error = n.is_error }
        end, frame.nested)
      end
    else
      local text = result.output == nil and "" or tostring(result.output)
      out.output = (text ~= "" and (text .. "\n\n") or "") .. group
    end
  else
    out.error = (result.error or "") .. "\n\n" .. group
  end
  return out
end

-- How a nested call is resolved: the approval chain (flemma.tools.approval, which sits
-- above this registry) gives it when it loads; without it every nested call needs the
-- user's approval.
H.resolve = nil

--- Sets the resolver of nested calls (flemma.tools.approval does, with its resolve).
---@param fn fun(name: string, args: table, ctx: table): string|nil
function M.set_resolver(fn)
  H.resolve = fn
end

-- How a nested call that needs the user's approval is shown and decided: set by the
-- chat cycle (flemma.cycle), which owns the buffer. nil: such a call is refused.
H.call_host = nil

--- Sets the host of nested calls that need approval (flemma.cycle does).
---@param host { pending: fun(bufnr: integer, parent_id: string, id: string, name: string, args: table, decide: fun(status: string, content?: string)), done: fun(bufnr: integer, id: string, pair: table), settle: fun(bufnr: integer, parent_id: string) }|nil
function M.set_call_host(host)
  H.call_host = host
end

--- Runs another registered tool from inside a tool's execute, through the approval
--- chain like any call; returns `{ content, is_error, metadata }`. Inside execute the
--- caller waits (its coroutine yields) until the call is decided and done; elsewhere
--- pass `on_result` and the result goes there (call() then returns nil).
---@param name string
---@param args? table
---@param parent_call_id? string
---@param on_result? fun(result: { content: string, is_error: boolean, metadata: table })
---@return { content: string, is_error: boolean, metadata: table }|nil
function M.call(name, args, parent_call_id, on_result)
  if type(name) ~= "string" or name == "" then
    util.error("tools.call() expects a tool name, not " .. type(name))
  end
  if args ~= nil and type(args) ~= "table" then
    util.error("tools.call(): `args` should be a table, not " .. type(args))
  end
  args = args or {}
  local co = coroutine.running()
  local frame
  if parent_call_id ~= nil then
    frame = H.frames_by_id[parent_call_id]
    if frame == nil then
      util.error(("tools.call(): no running call has the id `%s`"):format(tostring(parent_call_id)))
    end
  else
    frame = co and H.frames[co] or nil
  end
  local waiting = on_result == nil and co ~= nil and frame ~= nil and frame.co == co
  if on_result == nil and not waiting then
    util.error("tools.call() outside a tool's execute needs a callback (4th argument)")
  end
  local bufnr = frame and frame.bufnr or nil
  local id
  if frame and frame.id then
    frame.count = frame.count + 1
    id = ("%s.%d"):format(frame.id, frame.count)
  else
    H.call_seq = H.call_seq + 1
    id = ("call_%d"):format(H.call_seq)
  end
  local box = {}
  local function deliver(pair, status)
    pair.metadata = { call_id = id, tool = name, status = status }
    if frame then
      frame.nested[#frame.nested + 1] = { id = id, name = name, content = pair.content, is_error = pair.is_error }
    end
    if on_result then
      util.safe(on_result, "tools.call callback")(pair)
    elseif box.resume then
      box.resume(pair)
    else
      box.ready = pair
    end
  end
  local function run(status)
    M.execute(bufnr, { id = id, name = name, input = args }, function(result)
      local pair = require("flemma.tools.middleware").to_pair(result)
      if status == "approved_by_user" and H.call_host and bufnr then
        pcall(H.call_host.done, bufnr, id, pair)
      end
      deliver(pair, status == "approved_by_user" and "approved" or status)
    end, { nested = true })
  end
  local decide = H.resolve
  local ok, decision = false, nil
  if decide then
    ok, decision = pcall(decide, name, args, { bufnr = bufnr, tool_id = id })
  end
  if not ok then
    decision = "require_approval"
  end
  if decision == "approve" then
    run("approved")
  elseif decision == "deny" then
    vim.schedule(function()
      deliver({ content = "The tool call was denied by the approval policy.", is_error = true }, "denied")
    end)
  elseif H.call_host and type(bufnr) == "number" and frame and frame.id then
    H.call_host.pending(bufnr, frame.id, id, name, args, function(status, content)
      if status == "approved" then
        run("approved_by_user")
      else
        local text = type(content) == "string" and vim.trim(content) ~= "" and content
          or "The user rejected this tool call."
        local pair = { content = text, is_error = true }
        pcall(H.call_host.done, bufnr, id, pair)
        deliver(pair, "rejected")
      end
    end)
  else
    vim.schedule(function()
      deliver({
        content = ("tool `%s` needs the user's approval, and this call has no chat buffer to ask in"):format(name),
        is_error = true,
      }, "pending")
    end)
  end
  if on_result then
    return nil
  end
  if box.ready then
    return box.ready
  end
  return coroutine.yield(H.YIELD, box)
end

--- The default one-line summary of a call's arguments (`:help flemma-tools-api`).
---@param args table|nil
---@return string
function M.default_summary(args)
  return require("flemma.tools.summary").default_summary(args)
end

--- Adds middleware around the calls of tool `name` ("" for every tool); returns a
--- handle whose `:remove()` drops it.
---@param name string
---@param mw { before?: fun(args: table, ctx: table): table|nil, after?: fun(args: table, ctx: table, result: { content: string, is_error: boolean }): table|nil }
function M.middleware(name, mw)
  return require("flemma.tools.middleware").add(name, mw)
end

-- Input normalization ---------------------------------------------------------------

-- At most this many parameters in one call (every key and array element, at any depth).
M.MAX_PARAMETERS = 1000

function H.count_params(v, n, depth)
  if type(v) ~= "table" then
    return n
  end
  if depth > 64 then
    return math.huge
  end
  for _, x in pairs(v) do
    n = n + 1
    if n > M.MAX_PARAMETERS then
      return n
    end
    n = H.count_params(x, n, depth + 1)
  end
  return n
end

--- The input a call runs with: `{ params = {...} }` (with an optional `name` naming
--- the tool) is taken as its params, as is a direct input carrying the tool's `name`
--- when the schema has no such field. More than MAX_PARAMETERS parameters is refused.
---@return table|nil input
---@return string|nil err
function H.normalize_input(def, input)
  if type(input) ~= "table" then
    return input, nil
  end
  if H.count_params(input, 0, 0) > M.MAX_PARAMETERS then
    return nil, ("more than %d parameters: the call was refused"):format(M.MAX_PARAMETERS)
  end
  local props = type(def.input_schema.properties) == "table" and def.input_schema.properties or {}
  local extra = 0
  for k in pairs(input) do
    if k ~= "params" and k ~= "name" then
      extra = extra + 1
    end
  end
  local named = input.name == nil or (props.name == nil and input.name == def.name)
  if
    props.params == nil
    and type(input.params) == "table"
    and not vim.islist(input.params)
    and extra == 0
    and named
  then
    return input.params, nil
  end
  if props.name == nil and input.name == def.name then
    local out = {}
    for k, v in pairs(input) do
      if k ~= "name" then
        out[k] = v
      end
    end
    return out, nil
  end
  return input, nil
end

--- The one-line preview of a tool call (without the `name: ` prefix): the tool's
--- `format_preview`, or the generic `key="value"` summary. Not cut to the width.
--- With a buffer, a path of the call outside its project is marked
--- (`~/.bashrc (outside the project) (12 B)`).
---@param name string
---@param input table|nil
---@param max_length? integer width available after the `name: ` prefix
---@param bufnr? integer the chat buffer
---@return string
function M.preview(name, input, max_length, bufnr)
  local preview = require("flemma.tools.preview")
  local def = H.defs[name]
  max_length = max_length or 80
  local clean = H.strip_nulls(type(input) == "table" and input or {})
  local summary
  if def and def.format_preview then
    local ok, res = pcall(def.format_preview, clean, max_length)
    if ok and type(res) == "string" then
      summary = preview.one_line(res)
    end
  end
  if summary == nil then
    summary = preview.one_line(require("flemma.tools.summary").generic_preview(clean))
  end
  if bufnr ~= nil and def and def.paths then
    local scope = require("flemma.policy.scope")
    summary = scope.mark(summary, scope.outside(bufnr, M.get(name), clean))
  end
  return summary
end

--- Registers the built-in tools (those of H.RISK, in name order).
---@param config? flemma.Config
function M.setup(config)
  local _ = config
  local names = vim.tbl_keys(H.RISK)
  table.sort(names)
  for _, tool in ipairs(names) do
    H.add(nil, require("flemma.tools.builtin." .. tool))
  end
end

--- Forgets every tool and async source (for tests).
function M._reset()
  H.defs = {}
  H.sources = {}
  H.source_log = {}
  H.ready_callbacks = {}
  H.queue = {}
  H.running = 0
  H.frames_by_id = {}
  require("flemma.tools.middleware")._reset()
  require("flemma.tools.ratelimit").forget()
end

-- The policy presets (below this layer) ask tools' risk levels through this lookup.
presets.set_risk_lookup(M.risk)
-- Frontmatter checks tool names against this registry and tells its interpreter them.
require("flemma.chat.frontmatter").set_tools(M)

return M
