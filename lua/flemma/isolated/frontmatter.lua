--- The trusted half of frontmatter evaluation. This file never runs in Neovim's Lua:
--- flemma.frontmatter reads it (with flemma/opt.lua and flemma/tools/presets.lua) and
--- loads it into an isolated Lua 5.1 interpreter (native/src/isolate.cpp), which has
--- its own memory and deadline and shares nothing with Neovim. Data comes in and goes
--- out as JSON; an auto_approve function stays here and is called through
--- `auto_approve`.
---
--- Globals available here: Lua's safe base functions, math, the bounded string, table
--- and os (time, date) libraries of the isolate, debug.getinfo, require (for the
--- modules given to the isolate) and `isolate` (load, json_decode, null).
local M = {}
local H = {}

---------------------------------------------------------------------------------------
-- The few Neovim helpers that flemma.opt and flemma.tools.presets use
---------------------------------------------------------------------------------------

vim = {}

local function deepcopy(v, seen)
  if type(v) ~= "table" then
    return v
  end
  seen = seen or {}
  if seen[v] then
    return seen[v]
  end
  local out = {}
  seen[v] = out
  for k, x in pairs(v) do
    out[deepcopy(k, seen)] = deepcopy(x, seen)
  end
  return out
end
vim.deepcopy = function(v)
  return deepcopy(v)
end

function vim.tbl_contains(t, value)
  for _, v in pairs(t) do
    if v == value then
      return true
    end
  end
  return false
end

function vim.tbl_filter(fn, t)
  local out = {}
  for _, v in pairs(t) do
    if fn(v) then
      out[#out + 1] = v
    end
  end
  return out
end

function vim.tbl_keys(t)
  local out = {}
  for k in pairs(t) do
    out[#out + 1] = k
  end
  return out
end

function vim.islist(t)
  if type(t) ~= "table" then
    return false
  end
  local n = 0
  for _ in pairs(t) do
    n = n + 1
  end
  return n == #t
end

function vim.inspect(v)
  if type(v) == "string" then
    return ("%q"):format(v)
  end
  return tostring(v)
end

---------------------------------------------------------------------------------------
-- Stand-ins for the Neovim-side modules, answering from the data of the evaluation
---------------------------------------------------------------------------------------

-- { tools = { enabled = string[], registered = set, ready = boolean }, config = {...} }
H.data = { tools = { enabled = {}, registered = {}, ready = false }, config = {} }

-- The tool registry flemma.opt checks names against.
H.tools = {
  list = function()
    return deepcopy(H.data.tools.enabled)
  end,
  get = function(name)
    return H.data.tools.registered[name] and {} or nil
  end,
  is_ready = function()
    return H.data.tools.ready
  end,
}

H.shims = {
  ["flemma.core.util"] = {
    error = function(msg)
      error("(flemma) " .. msg, 0)
    end,
  },
}

local c_require = require
function require(name)
  return H.shims[name] or c_require(name)
end

---------------------------------------------------------------------------------------
-- The environment of frontmatter code
---------------------------------------------------------------------------------------

local function copy_lib(lib)
  local out = {}
  for k, v in pairs(lib) do
    out[k] = v
  end
  return out
end

function H.foreach(t, fn)
  for k, v in pairs(t) do
    local r = fn(k, v)
    if r ~= nil then
      return r
    end
  end
end

function H.foreachi(t, fn)
  for i = 1, #t do
    local r = fn(i, t[i])
    if r ~= nil then
      return r
    end
  end
end

function H.env(flemma_opt)
  local env = {
    string = copy_lib(string),
    table = copy_lib(table),
    math = copy_lib(math),
    os = { time = os.time, date = os.date },
    flemma = { opt = flemma_opt },
    assert = assert,
    error = error,
    ipairs = ipairs,
    next = next,
    pairs = pairs,
    pcall = pcall,
    xpcall = xpcall,
    rawequal = rawequal,
    select = select,
    setmetatable = setmetatable,
    tonumber = tonumber,
    tostring = tostring,
    type = type,
    unpack = unpack,
    _VERSION = _VERSION,
  }
  env.table.foreach = H.foreach
  env.table.foreachi = H.foreachi
  -- Strings index the isolate's own string library; frontmatter sees a stand-in
  -- metatable pointing to its copy, so what it changes stays in its copy.
  local string_mt = { __index = env.string }
  env.getmetatable = function(v)
    if type(v) == "string" then
      return string_mt
    end
    return getmetatable(v)
  end
  env._G = env
  return env
end

--- A fresh environment like frontmatter code's (templates run in one).
M.env = H.env

---------------------------------------------------------------------------------------
-- Entry points
---------------------------------------------------------------------------------------

-- The auto_approve function of the last evaluation (it stays in this interpreter).
H.fn = nil

function H.set_data(data)
  data = type(data) == "table" and data or {}
  local tools = type(data.tools) == "table" and data.tools or {}
  local registered = {}
  for _, name in ipairs(tools.registered or {}) do
    registered[name] = true
  end
  for _, name in ipairs(tools.enabled or {}) do
    registered[name] = true
  end
  H.data = {
    tools = { enabled = tools.enabled or {}, registered = registered, ready = tools.ready == true },
    config = type(data.config) == "table" and data.config or {},
  }
end

-- A copy of v holding only what crosses as data (lists, or tables of string keys;
-- strings, finite numbers, booleans and tables of them); nil for anything else.
function H.plain(v, depth, seen)
  local t = type(v)
  if t == "string" or t == "boolean" then
    return v
  elseif t == "number" then
    return (v == v and v ~= math.huge and v ~= -math.huge) and v or nil
  elseif t == "table" and depth < 32 and not seen[v] then
    seen[v] = true
    local out, n, list = {}, #v, true
    for k in pairs(v) do
      if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
        list = false
        break
      end
    end
    if list then
      -- the items that are data, in order (a list stays a list without holes)
      for i = 1, n do
        out[#out + 1] = H.plain(v[i], depth + 1, seen)
      end
    else
      for k, x in pairs(v) do
        if type(k) == "string" then
          out[k] = H.plain(x, depth + 1, seen)
        end
      end
    end
    seen[v] = nil
    return out
  end
  return nil
end

-- What leaves the interpreter: plain data; a function policy as a flag.
function H.result(opts)
  if type(opts.auto_approve) == "function" then
    H.fn = opts.auto_approve
    opts.auto_approve = nil
    opts.auto_approve_function = true
  end
  return opts
end

function H.eval_lua(code)
  local opt = require("flemma.isolated.opt")
  local flemma_opt, collect = opt.new(H.data.config, H.tools)
  local chunk, err = isolate.load(code, opt.CHUNKNAME, H.env(flemma_opt))
  if not chunk then
    error(err, 0)
  end
  local returned = chunk()
  local opts = H.result(collect())
  if type(returned) == "table" then
    -- The variables of the chat's templates: plain data only.
    opts.variables = H.plain(returned, 0, {})
  end
  return opts
end

-- The buffer line of a JSON key (the first line that holds `"key"` then `:`).
function H.json_line(code, key, first_line)
  local n = 0
  local quoted = '"' .. key .. '"'
  for line in (code .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local _, e = line:find(quoted, 1, true)
    if e and line:find("^%s*:", e + 1) then
      return first_line + n
    end
  end
  return first_line + 1
end

H.JSON_KEYS = {
  "anthropic",
  "ask",
  "auto_approve",
  "deny",
  "cache_retention",
  "max_tokens",
  "model",
  "openai",
  "provider",
  "temperature",
  "thinking",
  "tools",
  "vertex",
}

-- Names the JSON keys, not the Lua paths they are set through.
function H.json_message(err)
  return (tostring(err):gsub("flemma%.opt%.tools%.auto_approve", "auto_approve"):gsub("flemma%.opt%.", ""))
end

function H.eval_json(code, first_line)
  local function fail(line, msg)
    return { error = ("frontmatter line %d: %s"):format(line, msg) }
  end
  if not code:find("^%s*{") then
    return fail(first_line + 1, "JSON frontmatter should be an object")
  end
  local data, derr = isolate.json_decode(code)
  if data == nil then
    return fail(first_line + 1, "invalid JSON: " .. tostring(derr))
  end
  if type(data) ~= "table" then
    return fail(first_line + 1, "JSON frontmatter should be an object")
  end
  local opt = require("flemma.isolated.opt")
  local presets = require("flemma.isolated.presets")
  local flemma_opt, collect = opt.new(H.data.config, H.tools)
  local keys = {}
  for k in pairs(data) do
    keys[#keys + 1] = k
  end
  -- `provider` first: a $preset it names sets parameters and a model that the
  -- object's own keys then override, whatever their order in the text.
  table.sort(keys, function(a, b)
    if (a == "provider") ~= (b == "provider") then
      return a == "provider"
    end
    return a < b
  end)
  for _, key in ipairs(keys) do
    local value = data[key]
    local ok, err = pcall(function()
      if value == isolate.null then
        opt.fail(("`%s` is null; remove the key to keep the default"):format(key))
      end
      if key == "auto_approve" or key == "ask" or key == "deny" then
        flemma_opt.tools[key] = value
      elseif key == "tools" or vim.tbl_contains(H.JSON_KEYS, key) then
        flemma_opt[key] = value
      elseif key == "providers" then
        flemma_opt.providers = value -- raises the transport error
      else
        local msg = ("unknown key `%s`"):format(key)
        local close = presets.suggest(key, H.JSON_KEYS)
        if close then
          msg = msg .. ("; did you mean `%s`?"):format(close)
        end
        opt.fail(msg)
      end
    end)
    if not ok then
      return fail(H.json_line(code, key, first_line), H.json_message(err))
    end
  end
  local ok, opts = pcall(collect)
  if not ok then
    -- The provider and model are checked together once every key is set.
    local msg = H.json_message(opts)
    local key = msg:find("^`model`") and "model" or "provider"
    return fail(H.json_line(code, key, first_line), msg)
  end
  return H.result(opts)
end

--- Evaluates frontmatter code. Returns the collected options (plain data; an
--- auto_approve function is kept here and flagged as auto_approve_function), or
--- { error = "frontmatter line N: ..." } for a JSON frontmatter that is not valid.
--- Errors of Lua code are raised ("frontmatter:LINE: msg").
function M.evaluate(lang, code, first_line, data)
  H.set_data(data)
  H.fn = nil
  if lang == "json" then
    return H.eval_json(code, first_line or 1)
  end
  return H.eval_lua(code)
end

--- Calls the frontmatter's auto_approve function with plain copies of the call.
function M.auto_approve(tool_name, input, ctx)
  if not H.fn then
    error("this frontmatter has no auto_approve function", 0)
  end
  local r = H.fn(tool_name, input or {}, ctx or {})
  local t = type(r)
  if t == "nil" or t == "boolean" or t == "string" or t == "number" then
    return r
  end
  error(('flemma.opt.tools.auto_approve returned %s; it should return true, false, "deny" or nil'):format(t), 0)
end

return M
