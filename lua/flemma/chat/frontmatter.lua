--- Per-buffer options from the frontmatter: a ```lua or ```json block opening on line 1.
--- Frontmatter is evaluated in an isolated Lua 5.1 interpreter inside the native
--- library (native/src/isolate.cpp, made and called through flemma.isolate): its own
--- memory (64 MB in all, 512 KB for one string or table), a 35 ms deadline for the
--- evaluation and for each call of an auto_approve function, all of them within the
--- budget of the action (100 ms per key press), a library of bounded functions (string, table, math, os.time, os.date and
--- `flemma.opt`; nothing that reads or writes files, runs processes, loads code or
--- touches Neovim). Only plain data crosses: the options come back as data, and an
--- auto_approve function stays in the interpreter, called with plain copies of each
--- tool call. Results are cached per buffer by b:changedtick; each evaluation starts
--- from the defaults.
local session = require("flemma.core.session")
local opt = require("flemma.isolated.opt")

local M = {}
local H = {}

---@class flemma.frontmatter.Options
---@field tools string[]|nil selected tools (nil: all enabled tools)
---@field tools_excluded? string[] tools removed from the selection (kept out of its `$mcp` entries)
---@field auto_approve string[]|function|nil the buffer's approval policy (nil: not set)
---@field auto_approve_excluded string[] tools removed from presets in the buffer's list
---@field parameters table parameter overrides: general keys and provider tables
---@field variables table|nil the table a Lua frontmatter returns (plain data): the variables of the chat's templates
---@field provider? string the provider the buffer selects (`flemma.opt.provider`)
---@field model? string the model it selects (`flemma.opt.model`, a preset's, or the selected provider's default)
---@field preset? string the `$preset` selected through `flemma.opt.provider`
---@field parameters_cleared? string[] parameters the preset cleared (dotted names)

-- A safe description of an error value (never runs a __tostring).
function H.describe(err)
  if type(err) == "string" then
    return err
  elseif type(err) == "number" or type(err) == "boolean" or err == nil then
    return tostring(err)
  end
  return ("a %s was raised as an error"):format(type(err))
end

--- "frontmatter line N: msg" from an error raised while running frontmatter code.
function H.located(err, first_line)
  local msg = H.describe(err)
  local line, rest = msg:match("^" .. opt.SOURCE_PREFIX .. ":(%d+): (.*)$")
  if not line then
    -- multi-line messages: match the first line only
    line = msg:match("^" .. opt.SOURCE_PREFIX .. ":(%d+): ")
    if line then
      rest = msg:sub(#opt.SOURCE_PREFIX + #line + 4)
    end
  end
  if line then
    return ("frontmatter line %d: %s"):format(first_line + tonumber(line), rest)
  end
  return ("frontmatter line %d: %s"):format(first_line, msg)
end

---------------------------------------------------------------------------------------
-- The isolated interpreter
---------------------------------------------------------------------------------------

-- The modules loaded into each interpreter (Lua files of this plugin), as JSON text.
H.MODULES = {
  ["flemma.isolated.opt"] = "isolated/opt.lua",
  ["flemma.isolated.schema"] = "isolated/schema.lua",
  ["flemma.isolated.keys"] = "isolated/keys.lua",
  ["flemma.isolated.presets"] = "isolated/presets.lua",
  ["flemma.isolated.frontmatter"] = "isolated/frontmatter.lua",
}
H.RUNTIME = "flemma.isolated.frontmatter"

-- A plain copy of data for the interpreter: strings, finite numbers, booleans and
-- tables of them; vim.NIL and everything else (functions, userdata, metatables) is
-- left out.
function H.plain(v, depth)
  local t = type(v)
  if t == "string" or t == "boolean" then
    return v
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      return nil
    end
    return v
  elseif t == "table" and (depth or 0) < 64 then
    local out = {}
    for k, x in pairs(v) do
      if type(k) == "string" or type(k) == "number" then
        out[k] = H.plain(x, (depth or 0) + 1)
      end
    end
    return out
  end
  return nil
end

--- The tool registry frontmatter checks names against: flemma.tools gives itself when
--- it loads (it sits above this module): { list, get, is_ready, registered }.
---@param tools table
function M.set_tools(tools)
  H.tools = tools
end

-- The tools known now (flemma.isolated.opt.known_tools of the registry).
function H.known_tools()
  return opt.known_tools(H.tools)
end

-- What the interpreter needs to know: tool names and the configuration it reads.
function H.data(config)
  local known = H.known_tools()
  local registered = H.tools and H.tools.registered and H.tools.registered() or {}
  local tools_cfg = config.tools or {}
  return {
    tools = { enabled = known.enabled, registered = registered, ready = known.ready },
    config = {
      tools = {
        auto_approve = type(tools_cfg.auto_approve) == "table" and H.plain(tools_cfg.auto_approve) or nil,
        presets = H.plain(tools_cfg.presets or {}),
      },
      parameters = H.plain(config.parameters or {}),
      selection = H.selection(config),
    },
  }
end

-- What frontmatter may select under a configuration (flemma.opt.Selection): the
-- providers (with the models each accepts) and the presets, resolved. Computed here
-- (flemma.core.models and flemma.core.selection are not in the interpreter) and handed
-- to flemma.opt as data.
function H.compute_selection(config)
  local models = require("flemma.core.models")
  local presets_out = {}
  for name in pairs(config.presets or {}) do
    local ok, p = pcall(require("flemma.core.selection").preset, name, config)
    if ok and type(p) == "table" then
      local params, cleared = {}, {}
      for k, v in pairs(p.parameters or {}) do
        if v == vim.NIL then
          cleared[#cleared + 1] = k
        elseif type(v) == "table" then
          params[k] = {}
          for sk, sv in pairs(v) do
            if sv == vim.NIL then
              cleared[#cleared + 1] = k .. "." .. sk
            else
              params[k][sk] = sv
            end
          end
        else
          params[k] = v
        end
      end
      table.sort(cleared)
      presets_out[name] = { provider = p.provider, model = p.model, parameters = params, cleared = cleared }
    end
  end
  local providers = {}
  for name, entry in pairs(config.providers or {}) do
    if type(entry) == "table" and type(entry.kind) == "string" then
      local table_of_kind = models.by_kind[entry.kind]
      local accepted = {}
      for m in pairs(table_of_kind or {}) do
        accepted[m] = true
      end
      local default = entry.model or models.defaults[name] or models.defaults[entry.kind]
      for _, m in ipairs({ entry.model or false, default or false, name == config.provider and config.model or false }) do
        if m then
          accepted[m] = true
        end
      end
      for _, p in pairs(presets_out) do
        if p.provider == name and p.model then
          accepted[p.model] = true
        end
      end
      -- OpenAI-compatible servers (ollama, llama.cpp, ...) serve models of the
      -- user's choosing: any name is theirs to judge.
      local any = entry.kind == "openai_chat" or table_of_kind == nil
      providers[name] =
        { kind = entry.kind, default_model = default, any_model = any, models = not any and accepted or nil }
    end
  end
  return { provider = config.provider, model = config.model, providers = providers, presets = presets_out }
end

-- The providers, models and presets frontmatter may select, once per configuration.
H.selections = setmetatable({}, { __mode = "k" })
function H.selection(config)
  local sel = H.selections[config]
  if not sel then
    sel = H.plain(H.compute_selection(config))
    H.selections[config] = sel
  end
  return sel
end

-- An interpreter handle that can be freed at once (and then refuses calls). It may
-- be freed while idle and made again (flemma.isolate): its evaluation is replayed.
function H.new_isolate()
  return { interp = require("flemma.core.isolate").new(H.MODULES, H.RUNTIME) }
end

function H.free(box)
  if box and box.interp then
    box.interp:close()
    box.interp = nil
  end
end

-- The frontmatter's auto_approve function, called in its interpreter with plain
-- copies of the call, under the same limits per call and the budget of the action.
function H.wrap_function(box, first_line)
  return function(tool_name, input, ctx)
    if not box.interp then
      error(
        ("frontmatter line %d: this auto_approve function belongs to a frontmatter that changed; evaluate it again"):format(
          first_line
        ),
        0
      )
    end
    local res = box.interp:call("auto_approve", H.plain(tool_name), H.plain(input) or {}, H.plain(ctx) or {})
    if not res.ok then
      error(H.located(res.error, first_line), 0)
    end
    return (res.values or {})[1]
  end
end

function H.evaluate(code, lang, first_line, config)
  local box = H.new_isolate()
  local res = box.interp:keep("evaluate", lang, code, first_line, H.data(config))
  if not res.ok then
    H.free(box)
    return nil, H.located(res.error, first_line), res.limit
  end
  local v = (res.values or {})[1]
  if type(v) ~= "table" or type(v.error) == "string" then
    H.free(box)
    return nil,
      type(v) == "table" and v.error or ("frontmatter line %d: the evaluation returned no options"):format(first_line)
  end
  local bad = H.rule_error(v, first_line)
  if bad then
    H.free(box)
    return nil, bad
  end
  local opts = {
    tools = v.tools,
    tools_excluded = v.tools_excluded,
    auto_approve = v.auto_approve,
    auto_approve_excluded = v.auto_approve_excluded or {},
    ask = v.ask,
    deny = v.deny,
    parameters = v.parameters or {},
    variables = v.variables,
    provider = v.provider,
    model = v.model,
    preset = v.preset,
    parameters_cleared = v.parameters_cleared,
  }
  if v.auto_approve_function then
    opts.auto_approve = H.wrap_function(box, first_line)
    H.boxes[opts.auto_approve] = box
  else
    H.free(box)
  end
  return opts
end

-- Whether a tool's rules are path patterns (it declares `paths`).
function H.is_path_tool(name)
  local ok, def = pcall(function()
    return H.tools and H.tools.get and H.tools.get(name)
  end)
  return ok and type(def) == "table" and def.paths ~= nil
end

-- The first rule of the frontmatter's auto_approve, ask or deny list whose pattern
-- the shell-word parser cannot read (the interpreter checked only their form), as
-- the frontmatter's error; nil when all can be used.
function H.rule_error(v, first_line)
  local commands = require("flemma.policy.commands")
  for _, key in ipairs({ "auto_approve", "ask", "deny" }) do
    local list = v[key]
    for _, entry in ipairs(type(list) == "table" and list or {}) do
      local problem = type(entry) == "string" and commands.problem(entry, H.is_path_tool)
      if problem then
        return ("frontmatter line %d: flemma.opt.tools.%s: the rule %q %s"):format(first_line, key, entry, problem)
      end
    end
  end
  return nil
end

-- The interpreter behind each auto_approve function (weak keys: freed with it).
H.boxes = setmetatable({}, { __mode = "k" })

--- Evaluates frontmatter code (pure: no buffer involved).
---@param code string the text between the fences
---@param lang string "lua" | "json"
---@param first_line? integer buffer line of the opening fence (default 1); code line L is buffer line first_line + L
---@param config? flemma.Config default: the active configuration
---@return flemma.frontmatter.Options|nil opts
---@return string|nil err "frontmatter line N: ..." naming the buffer line
---@return string|nil limit the limit that stopped it: "time", "budget" (the action's), "memory"
function M.evaluate(code, lang, first_line, config)
  first_line = first_line or 1
  config = config or require("flemma.core.config").get()
  if type(code) ~= "string" then
    return nil, ("frontmatter line %d: expected code, not %s"):format(first_line, type(code))
  end
  if lang == "lua" and code:byte(1) == 27 then
    return nil, ("frontmatter line %d: precompiled chunks are not accepted"):format(first_line + 1)
  end
  if lang == "lua" or lang == "json" then
    return H.evaluate(code, lang, first_line, config)
  end
  return nil,
    ("frontmatter line %d: unsupported frontmatter language %q; use lua or json"):format(first_line, tostring(lang))
end

--- Frees the interpreter kept for an auto_approve function of an evaluation (its
--- calls fail from then on). Nothing happens for any other value.
---@param opts flemma.frontmatter.Options|nil
function M.release(opts)
  local fn = type(opts) == "table" and opts.auto_approve or nil
  if type(fn) == "function" and H.boxes[fn] then
    H.free(H.boxes[fn])
    H.boxes[fn] = nil
  end
end

---------------------------------------------------------------------------------------
-- Buffers
---------------------------------------------------------------------------------------

-- Per buffer: { tick, config, tools, opts, err }.
-- H.cache: the `frontmatter` field of each buffer's session record (flemma.core.session).

function H.defaults()
  return { tools = nil, auto_approve = nil, auto_approve_excluded = {}, parameters = {} }
end

-- Fallback when flemma.document is not available: a ```lua/```json block on line 1.
function H.extract_fallback(bufnr)
  local first = vim.api.nvim_buf_get_lines(bufnr, 0, 1, false)[1] or ""
  local ticks, lang = first:match("^(```+)%s*(%a+)%s*$")
  if not ticks or (lang ~= "lua" and lang ~= "json") then
    return nil
  end
  local lines = vim.api.nvim_buf_get_lines(bufnr, 1, -1, false)
  for i, line in ipairs(lines) do
    local close = line:match("^(```+)%s*$")
    if close and #close >= #ticks then
      return { lang = lang, code = table.concat(lines, "\n", 1, i - 1), first_line = 1, last_line = i + 1 }
    end
  end
  return nil, ("frontmatter line 1: the %s%s block is not closed"):format(ticks, lang)
end

function H.extract(bufnr)
  local ok, document = pcall(require, "flemma.chat.document")
  if ok and type(document) == "table" and type(document.get) == "function" then
    local ok_doc, doc = pcall(document.get, bufnr)
    if ok_doc and type(doc) == "table" then
      if doc.frontmatter == nil then
        -- A frontmatter never closed is an error, not "no frontmatter": its policy
        -- must not silently give way to the global one.
        for _, d in ipairs(doc.diagnostics or {}) do
          if d.line == 1 and type(d.message) == "string" and d.message:find("frontmatter", 1, true) then
            return nil, "frontmatter line 1: " .. d.message
          end
        end
      end
      return doc.frontmatter
    end
  end
  return H.extract_fallback(bufnr)
end

function H.resolve_buf(bufnr)
  if bufnr == nil or bufnr == 0 then
    return vim.api.nvim_get_current_buf()
  end
  return bufnr
end

--- The buffer's frontmatter options, evaluated once per change of the buffer (and of
--- the configuration or the set of registered tools). A buffer without frontmatter
--- gets the defaults.
---@param bufnr? integer 0 or nil: the current buffer
---@return flemma.frontmatter.Options|nil opts
---@return string|nil err names the frontmatter line; the send must not happen
function M.get(bufnr)
  bufnr = H.resolve_buf(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return nil, ("buffer %s is not valid"):format(tostring(bufnr))
  end
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local config = require("flemma.core.config").get()
  local tools = table.concat(H.known_tools().enabled, ",")
  local c = session.field(bufnr, "frontmatter")
  if not (c and c.tick == tick and c.config == config and c.tools == tools) then
    local opts, err, limit
    local fm, ferr = H.extract(bufnr)
    if ferr then
      err = ferr
    elseif fm == nil or fm.code == nil then
      opts = H.defaults()
    else
      opts, err, limit = M.evaluate(fm.code, fm.lang, fm.first_line or 1, config)
    end
    if session.field(bufnr, "frontmatter") then
      M.release(session.field(bufnr, "frontmatter").opts)
    end
    c = { tick = tick, config = config, tools = tools, opts = opts, err = err }
    -- Stopped because the action's budget was spent: not kept, the next action
    -- evaluates it again.
    session.get(bufnr).frontmatter = limit ~= "budget" and c or nil
    H.watch()
  end
  if c.err then
    return nil, c.err
  end
  return vim.deepcopy(c.opts), nil
end

--- Forgets cached results (of one buffer, or all).
---@param bufnr? integer
function M.invalidate(bufnr)
  local dropped = {}
  if bufnr then
    bufnr = H.resolve_buf(bufnr)
    dropped[1] = session.field(bufnr, "frontmatter")
    session.set(bufnr, "frontmatter", nil)
  else
    for b, c in session.each("frontmatter") do
      dropped[#dropped + 1] = c
      session.set(b, "frontmatter", nil)
    end
  end
  for _, c in ipairs(dropped) do
    M.release(c.opts)
  end
end

function H.watch()
  if H.watching then
    return
  end
  H.watching = true
  local group = vim.api.nvim_create_augroup("flemma.chat.frontmatter", { clear = true })
  session.on("wipe", "frontmatter", function(bufnr)
    M.invalidate(bufnr)
  end)
  session.on("unload", "frontmatter", function(bufnr)
    M.invalidate(bufnr)
  end)
  -- A hidden or unloaded chat keeps its options, not its interpreter: the one of its
  -- auto_approve function is made again by the next call (flemma.isolate).
  vim.api.nvim_create_autocmd({ "BufHidden", "BufUnload" }, {
    group = group,
    callback = function(ev)
      local c = session.field(ev.buf, "frontmatter")
      local box = c and c.opts and H.boxes[c.opts.auto_approve]
      if box and box.interp then
        box.interp:unload()
      end
    end,
  })
end

--- The effective parameters for a request from the buffer: config.parameters merged
--- with the frontmatter's overrides. Provider-specific values win: for `provider`,
--- a set `anthropic.thinking_budget` / `vertex.thinking_budget` / `openai.reasoning`
--- becomes `thinking`. A buffer whose frontmatter fails gets the config's parameters.
---@param bufnr? integer
---@param provider? string
---@return table
function M.parameters(bufnr, provider)
  local params = vim.deepcopy(require("flemma.core.config").get().parameters or {})
  local opts = bufnr ~= nil and M.get(bufnr) or nil
  for k, v in pairs(opts and opts.parameters or {}) do
    if type(v) == "table" then
      params[k] = vim.tbl_extend("force", params[k] or {}, v)
    else
      params[k] = v
    end
  end
  for _, path in ipairs(opts and opts.parameters_cleared or {}) do
    local head, tail = path:match("^([^.]+)%.(.+)$")
    if head then
      if type(params[head]) == "table" then
        params[head][tail] = nil
      end
    else
      params[path] = nil
    end
  end
  local specific = params[provider or ""]
  if type(specific) == "table" then
    if (provider == "anthropic" or provider == "vertex") and specific.thinking_budget ~= nil then
      params.thinking = specific.thinking_budget
    elseif provider == "openai" and specific.reasoning ~= nil then
      params.thinking = specific.reasoning
    end
  end
  return params
end

--- The configuration the buffer's requests use: the active one (setup() and
--- :Flemma switch) with the frontmatter's provider, model and parameters on top. The
--- frontmatter wins: a buffer that selects a provider keeps it whatever is switched.
--- A model set in setup() or switched to belongs to the active provider: a buffer
--- that selects another provider gets that provider's model (its own or default).
--- Cached per change of the buffer; do not modify the result.
---@param bufnr? integer 0 or nil: the current buffer
---@return flemma.Config|nil config
---@return string|nil err the frontmatter's error ("frontmatter line N: ..."): nothing may be sent
function M.config(bufnr)
  bufnr = H.resolve_buf(bufnr)
  local opts, err = M.get(bufnr)
  if not opts then
    return nil, err
  end
  local c = session.field(bufnr, "frontmatter")
  local config = require("flemma.core.config").get()
  if c and c.effective and c.effective_config == config then
    return c.effective
  end
  local eff = {}
  for k, v in pairs(config) do
    eff[k] = v
  end
  if opts.provider then
    eff.provider = opts.provider
    eff.model = opts.model
  elseif opts.model then
    eff.model = opts.model
  end
  eff.parameters = M.parameters(bufnr)
  if c then
    c.effective, c.effective_config = eff, config
  end
  return eff
end

--- What the buffer's frontmatter selects: { provider?, model?, preset? } (all nil
--- when it selects nothing), or nil and the frontmatter's error.
---@param bufnr? integer
---@return { provider?: string, model?: string, preset?: string }|nil
---@return string|nil err
function M.selection(bufnr)
  local opts, err = M.get(bufnr)
  if not opts then
    return nil, err
  end
  return { provider = opts.provider, model = opts.model, preset = opts.preset }
end

-- flemma.opt.new() without arguments (in Neovim) evaluates under the active
-- configuration and the registered tools.
opt.set_context(function()
  return H.data(require("flemma.core.config").get()).config, H.tools
end)

return M
