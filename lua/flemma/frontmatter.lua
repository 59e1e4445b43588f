--- Per-buffer options from the frontmatter: a ```lua or ```json block opening on line 1.
--- Lua frontmatter runs in a restricted environment (string, table, math, os.time,
--- os.date and `flemma.opt`; nothing that reads or writes files, runs processes, loads
--- code or touches Neovim) under an instruction budget. Results are cached per buffer
--- by b:changedtick; each evaluation starts from the defaults.
local opt = require("flemma.opt")

local M = {}
local H = {}

--- Instructions a frontmatter (or a frontmatter auto_approve function call) may run.
M.BUDGET = 1000000
--- How much memory (KB) frontmatter code may hold on to; string.rep is refused
--- beyond it before it allocates.
M.MEMORY_BUDGET_KB = 64 * 1024
-- The count hook fires every STEP instructions.
H.STEP = 1000

---@class flemma.frontmatter.Options
---@field tools string[]|nil selected tools (nil: all enabled tools)
---@field auto_approve string[]|function|nil the buffer's approval policy (nil: not set)
---@field auto_approve_excluded string[] tools removed from presets in the buffer's list
---@field parameters table parameter overrides: general keys and provider tables

---------------------------------------------------------------------------------------
-- Running code under the instruction budget
---------------------------------------------------------------------------------------

H.exhausted = nil -- the budget message once the running code went over its budget

local function pack(...)
  return { n = select("#", ...), ... }
end

--- Runs fn(...) with the count hook installed; returns pcall-style results. Method
--- calls on strings (`s:find(p)`) go to the guarded string library meanwhile.
function H.run_limited(fn, ...)
  local string_mt = getmetatable("")
  local prev_index = string_mt.__index
  string_mt.__index = H.safe_string
  local prev_hook, prev_mask, prev_count = debug.gethook()
  local count = 0
  local mem0 = collectgarbage("count")
  H.exhausted = nil
  debug.sethook(function()
    count = count + H.STEP
    if count > M.BUDGET then
      if not H.exhausted then
        H.exhausted = ("ran more than %d instructions and was stopped (an endless loop?)"):format(M.BUDGET)
      end
      opt.fail(H.exhausted)
    end
    if collectgarbage("count") - mem0 > M.MEMORY_BUDGET_KB then
      collectgarbage()
      if collectgarbage("count") - mem0 > M.MEMORY_BUDGET_KB then
        if not H.exhausted then
          H.exhausted = ("used more than %d MB of memory and was stopped"):format(M.MEMORY_BUDGET_KB / 1024)
        end
        opt.fail(H.exhausted)
      end
    end
  end, "", H.STEP)
  local res = pack(pcall(fn, ...))
  if prev_hook then
    debug.sethook(prev_hook, prev_mask, prev_count)
  else
    debug.sethook()
  end
  string_mt.__index = prev_index
  if not res[1] and H.exhausted and not H.describe(res[2]):find(H.exhausted, 1, true) then
    res[2] = H.exhausted
  end
  H.exhausted = nil
  return res
end

-- A safe description of an error value (never runs a __tostring of the frontmatter).
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
-- Pattern matching under the budget
---------------------------------------------------------------------------------------

--- Pattern matching runs in C, where the count hook never fires: a pattern with many
--- repetitions can backtrack for hours over a long string. A call whose worst case is
--- above this many steps is refused.
M.PATTERN_BUDGET = 5e8

-- Counts the repetitions (`*`, `+`, `-`) and optional items (`?`) of a Lua pattern,
-- and whether it is anchored with `^`.
function H.pattern_shape(p)
  local reps, optional, n = 0, 0, #p
  local anchored = p:sub(1, 1) == "^"
  local i = anchored and 2 or 1
  while i <= n do
    local c = p:sub(i, i)
    local last -- last character of a single-character item that may be repeated
    if c == "%" then
      local d = p:sub(i + 1, i + 1)
      if d == "b" then
        i = i + 4
      elseif d == "f" then
        i = i + 2 -- the set that follows is read as an item below; it cannot repeat
        if p:sub(i, i) == "[" then
          local j = i + 1
          if p:sub(j, j) == "^" then
            j = j + 1
          end
          repeat
            if p:sub(j, j) == "%" then
              j = j + 1
            end
            j = j + 1
          until j > n or p:sub(j, j) == "]"
          i = j + 1
        end
      else
        last = i + 1
      end
    elseif c == "[" then
      local j = i + 1
      if p:sub(j, j) == "^" then
        j = j + 1
      end
      repeat
        if p:sub(j, j) == "%" then
          j = j + 1
        end
        j = j + 1
      until j > n or p:sub(j, j) == "]"
      last = j
    elseif c == "(" or c == ")" then
      i = i + 1
    else
      last = i
    end
    if last then
      local q = p:sub(last + 1, last + 1)
      if q == "*" or q == "+" or q == "-" then
        reps = reps + 1
        i = last + 2
      elseif q == "?" then
        optional = optional + 1
        i = last + 2
      else
        i = last + 1
      end
    end
  end
  return reps, optional, anchored
end

-- The worst-case steps of matching pattern p against a subject of len bytes: the ways
-- to share the subject among the repetitions, times the optional items' choices, times
-- the start positions of an unanchored search.
function H.pattern_cost(len, p, honours_anchor)
  local reps, optional, anchored = H.pattern_shape(p)
  local cost = 2 ^ optional
  for r = 1, reps do
    cost = cost * (len + r) / r
    if cost > M.PATTERN_BUDGET then
      return cost
    end
  end
  if not (anchored and honours_anchor) then
    cost = cost * (len + 1)
  end
  return cost
end

function H.guard_pattern(name, fn, honours_anchor)
  return function(s, p, ...)
    local ts = type(s)
    if type(p) == "string" and (ts == "string" or ts == "number") then
      local plain = name == "find" and select(2, ...)
      if not plain then
        local len = #tostring(s)
        if H.pattern_cost(len, p, honours_anchor) > M.PATTERN_BUDGET then
          opt.fail(
            ("string.%s: the pattern %q could backtrack for more than %d steps over a %d-byte string; use fewer repetitions (*, +, -) or a shorter string"):format(
              name,
              p,
              M.PATTERN_BUDGET,
              len
            )
          )
        end
      end
    end
    return fn(s, p, ...)
  end
end

-- The string library of frontmatter: no `dump`, pattern functions guarded. Also what
-- string methods resolve to while frontmatter code runs; frontmatter cannot reach it.
H.safe_string = {}
for k, v in pairs(string) do
  if k ~= "dump" then
    H.safe_string[k] = v
  end
end
H.safe_string.find = H.guard_pattern("find", string.find, true)
H.safe_string.match = H.guard_pattern("match", string.match, true)
H.safe_string.gmatch = H.guard_pattern("gmatch", string.gmatch, false)
H.safe_string.gsub = H.guard_pattern("gsub", string.gsub, true)
H.safe_string.rep = function(str, n, sep)
  local size = (tonumber(n) or 0) * (#tostring(str) + #tostring(sep or ""))
  if size > M.MEMORY_BUDGET_KB * 1024 then
    error(("string.rep: the result would be %d bytes, over the frontmatter's %d MB"):format(
      size,
      M.MEMORY_BUDGET_KB / 1024
    ), 2)
  end
  return string.rep(str, n, sep)
end

---------------------------------------------------------------------------------------
-- The restricted environment
---------------------------------------------------------------------------------------

local function copy_lib(lib, without)
  local out = {}
  for k, v in pairs(lib) do
    if not (without and without[k]) then
      out[k] = v
    end
  end
  return out
end

function H.env(flemma_opt)
  local env = {
    string = copy_lib(H.safe_string),
    table = copy_lib(table),
    math = copy_lib(math),
    os = { time = os.time, date = os.date },
    flemma = { opt = flemma_opt },
    assert = assert,
    error = error,
    ipairs = ipairs,
    next = next,
    pairs = pairs,
    rawequal = rawequal,
    select = select,
    setmetatable = setmetatable,
    tonumber = tonumber,
    tostring = tostring,
    type = type,
    unpack = unpack,
    _VERSION = _VERSION,
  }
  env.table.unpack = env.table.unpack or unpack
  -- Strings share one metatable whose __index is the real `string` table: hand out a
  -- stand-in that points to the environment's copy instead.
  local string_mt = { __index = env.string }
  env.getmetatable = function(v)
    if type(v) == "string" then
      return string_mt
    end
    return getmetatable(v)
  end
  -- pcall/xpcall must not swallow the budget error.
  env.pcall = function(f, ...)
    local res = pack(pcall(f, ...))
    if H.exhausted then
      error(res[2], 0)
    end
    return unpack(res, 1, res.n)
  end
  env.xpcall = function(f, handler, ...)
    local res = pack(xpcall(f, handler, ...))
    if H.exhausted then
      opt.fail(H.exhausted)
    end
    return unpack(res, 1, res.n)
  end
  env._G = env
  return env
end

---------------------------------------------------------------------------------------
-- Evaluation
---------------------------------------------------------------------------------------

-- Wraps a frontmatter auto_approve function: it runs under the budget, with copies of
-- its arguments, and its errors name the frontmatter line.
function H.wrap_function(fn, first_line)
  return function(tool_name, input, ctx)
    local res = H.run_limited(fn, tool_name, vim.deepcopy(input), vim.deepcopy(ctx))
    if not res[1] then
      error(H.located(res[2], first_line), 0)
    end
    return res[2]
  end
end

function H.eval_lua(code, first_line, config)
  if code:byte(1) == 27 then
    return nil, ("frontmatter line %d: precompiled chunks are not accepted"):format(first_line + 1)
  end
  local flemma_opt, collect = opt.new(config)
  local env = H.env(flemma_opt)
  local chunk, perr = load(code, opt.CHUNKNAME, "t", env)
  if not chunk then
    return nil, H.located(perr, first_line)
  end
  if jit then
    -- Compiled loops do not check the count hook: keep the frontmatter interpreted.
    jit.off(chunk, true)
  end
  local res = H.run_limited(chunk)
  if not res[1] then
    return nil, H.located(res[2], first_line)
  end
  local opts = collect()
  if type(opts.auto_approve) == "function" then
    opts.auto_approve = H.wrap_function(opts.auto_approve, first_line)
  end
  return opts
end

-- The buffer line of a JSON key (the first line that holds `"key":`).
function H.json_line(code, key, first_line)
  local n = 0
  for line in (code .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:find('"' .. vim.pesc(key) .. '"%s*:') then
      return first_line + n
    end
  end
  return first_line + 1
end

H.JSON_KEYS = { "anthropic", "auto_approve", "cache_retention", "max_tokens", "openai", "temperature", "thinking", "tools", "vertex" }

function H.eval_json(code, first_line, config)
  if not code:match("^%s*{") then
    return nil, ("frontmatter line %d: JSON frontmatter should be an object"):format(first_line + 1)
  end
  local ok, data = pcall(vim.json.decode, code)
  if not ok then
    return nil, ("frontmatter line %d: invalid JSON: %s"):format(first_line + 1, H.describe(data))
  end
  if type(data) ~= "table" then
    return nil, ("frontmatter line %d: JSON frontmatter should be an object"):format(first_line + 1)
  end
  local flemma_opt, collect = opt.new(config)
  local keys = vim.tbl_keys(data)
  table.sort(keys)
  for _, key in ipairs(keys) do
    local value = data[key]
    local line = H.json_line(code, key, first_line)
    local set_ok, err = pcall(function()
      if value == vim.NIL then
        opt.fail(("`%s` is null; remove the key to keep the default"):format(key))
      end
      if key == "auto_approve" then
        flemma_opt.tools.auto_approve = value
      elseif key == "tools" or vim.tbl_contains(H.JSON_KEYS, key) then
        flemma_opt[key] = value
      elseif key == "providers" then
        flemma_opt.providers = value -- raises the transport error
      else
        local msg = ("unknown key `%s`"):format(key)
        local close = require("flemma.tools.presets").suggest(key, H.JSON_KEYS)
        if close then
          msg = msg .. ("; did you mean `%s`?"):format(close)
        end
        opt.fail(msg)
      end
    end)
    if not set_ok then
      -- Name the JSON keys, not the Lua paths they are set through.
      local msg = H.describe(err):gsub("flemma%.opt%.tools%.auto_approve", "auto_approve"):gsub("flemma%.opt%.", "")
      return nil, ("frontmatter line %d: %s"):format(line, msg)
    end
  end
  return collect()
end

--- Evaluates frontmatter code (pure: no buffer involved).
---@param code string the text between the fences
---@param lang string "lua" | "json"
---@param first_line? integer buffer line of the opening fence (default 1); code line L is buffer line first_line + L
---@param config? flemma.Config default: the active configuration
---@return flemma.frontmatter.Options|nil opts
---@return string|nil err "frontmatter line N: ..." naming the buffer line
function M.evaluate(code, lang, first_line, config)
  first_line = first_line or 1
  config = config or require("flemma.config").get()
  if type(code) ~= "string" then
    return nil, ("frontmatter line %d: expected code, not %s"):format(first_line, type(code))
  end
  if lang == "lua" then
    return H.eval_lua(code, first_line, config)
  elseif lang == "json" then
    return H.eval_json(code, first_line, config)
  end
  return nil, ("frontmatter line %d: unsupported frontmatter language %q; use lua or json"):format(first_line, tostring(lang))
end

---------------------------------------------------------------------------------------
-- Buffers
---------------------------------------------------------------------------------------

-- Per buffer: { tick, config, tools, opts, err }.
H.cache = {}

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
  local ok, document = pcall(require, "flemma.document")
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
  local config = require("flemma.config").get()
  local tools = table.concat(opt.known_tools().enabled, ",")
  local c = H.cache[bufnr]
  if not (c and c.tick == tick and c.config == config and c.tools == tools) then
    local opts, err
    local fm, ferr = H.extract(bufnr)
    if ferr then
      err = ferr
    elseif fm == nil or fm.code == nil then
      opts = H.defaults()
    else
      opts, err = M.evaluate(fm.code, fm.lang, fm.first_line or 1, config)
    end
    c = { tick = tick, config = config, tools = tools, opts = opts, err = err }
    H.cache[bufnr] = c
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
  if bufnr then
    H.cache[H.resolve_buf(bufnr)] = nil
  else
    H.cache = {}
  end
end

function H.watch()
  if H.watching then
    return
  end
  H.watching = true
  vim.api.nvim_create_autocmd({ "BufWipeout", "BufDelete" }, {
    group = vim.api.nvim_create_augroup("flemma.frontmatter", { clear = true }),
    callback = function(ev)
      H.cache[ev.buf] = nil
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
  local params = vim.deepcopy(require("flemma.config").get().parameters or {})
  local opts = bufnr ~= nil and M.get(bufnr) or nil
  for k, v in pairs(opts and opts.parameters or {}) do
    if type(v) == "table" then
      params[k] = vim.tbl_extend("force", params[k] or {}, v)
    else
      params[k] = v
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

return M
