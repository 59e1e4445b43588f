--- A selection of provider, model and parameters, as `:Flemma switch`, presets and
--- frontmatter's `$preset` write it: `{provider|$preset} [model] [key=value ...]`, or a
--- preset's table. Values are judged by the option schema, the same as setup() judges
--- them. The configuration is passed in (flemma.core.config calls check_presets).
local util = require("flemma.core.util")
local schema = require("flemma.isolated.schema")
local keys = require("flemma.isolated.keys")
local presets = require("flemma.isolated.presets")

local M = {}
local H = {}

--- Checks parameter values (vim.NIL: cleared, skipped) by the option schema; raises
--- "(flemma) `parameters.x` should be ..." on the first bad one.
---@param params table
function M.check_parameters(params)
  local names = {}
  for k in pairs(params) do
    names[#names + 1] = tostring(k)
  end
  table.sort(names)
  for _, k in ipairs(names) do
    local v = params[k]
    local path = "parameters." .. k
    local o = schema.get(path)
    if v ~= vim.NIL and o then
      if type(v) == "table" and o.type == "table" and not o.keys then
        for sk, sv in pairs(v) do
          local msg = sv ~= vim.NIL and schema.message(path .. "." .. tostring(sk), sv)
          if msg then
            util.error(msg)
          end
        end
      else
        local msg = schema.message(path, v)
        if msg then
          util.error(msg)
        end
      end
    end
  end
end

--- Parameter names that `key=value` accepts (dotted for a provider's own ones).
---@return string[]
function M.parameter_names()
  return schema.parameter_names()
end

--- A `key=value` value: true/false, a number, "" (clears: vim.NIL) or the text.
function H.value(s)
  if s == "" then
    return vim.NIL
  elseif s == "true" then
    return true
  elseif s == "false" then
    return false
  end
  local n = tonumber(s)
  if n and s:match("^[-+]?[%d.]+[eE]?[-+]?%d*$") then
    return n
  end
  return s
end

--- Sets `name` (maybe dotted) in a parameter table; raises on an unknown name.
function H.set(params, name, value, where)
  if keys.forbidden[name:match("[^.]+$")] then
    util.error(keys.refusal(where .. name))
  end
  local names = M.parameter_names()
  if not vim.tbl_contains(names, name) then
    local guess = presets.suggest(name, names)
    util.error(
      ("unknown parameter `%s`%s (parameters: %s)"):format(
        name,
        guess and ("; did you mean `%s`?"):format(guess) or "",
        table.concat(names, ", ")
      )
    )
  end
  local head, tail = name:match("^([^.]+)%.(.+)$")
  if head then
    params[head] = params[head] or {}
    params[head][tail] = value
  else
    params[name] = value
  end
end

---@class flemma.core.Selection
---@field provider string
---@field model? string
---@field parameters table values; vim.NIL clears one
---@field preset? string

--- Parses words: `{provider|$preset} [model] [key=value ...]`. A preset's own
--- selection comes first; a model or values after it replace its own.
---@param words string[]
---@param config flemma.Config
---@return flemma.core.Selection
function M.parse(words, config)
  local sel = { parameters = {} }
  local first = words[1]
  if not first or first:find("=", 1, true) then
    util.error(
      "switch: name a provider or a $preset first, e.g. `:Flemma switch anthropic claude-opus-4-6 thinking=high`"
    )
  end
  local i = 2
  if first:sub(1, 1) == "$" then
    local p = M.preset(first, config)
    sel.preset = first
    sel.provider, sel.model, sel.parameters = p.provider, p.model, p.parameters
  else
    if type(config.providers[first]) ~= "table" then
      local names = vim.tbl_keys(config.providers)
      table.sort(names)
      local guess = presets.suggest(first, names)
      util.error(
        ("unknown provider `%s`%s (providers: %s)"):format(
          first,
          guess and ("; did you mean `%s`?"):format(guess) or "",
          table.concat(names, ", ")
        )
      )
    end
    sel.provider = first
  end
  local w = words[i]
  if w and not w:find("=", 1, true) then
    sel.model = w
    i = i + 1
  end
  for j = i, #words do
    local k, v = words[j]:match("^([%w_.]+)=(.*)$")
    if not k then
      util.error(("switch: expected key=value, not `%s`"):format(words[j]))
    end
    H.set(sel.parameters, k, H.value(v), "parameters.")
  end
  -- The same checks as setup(), on the values that are set.
  M.check_parameters(sel.parameters)
  return sel
end

--- A preset by name: { provider, model?, parameters }; raises when unknown or bad.
---@param name string
---@param config flemma.Config
function M.preset(name, config)
  local p = (config.presets or {})[name]
  if p == nil then
    local names = vim.tbl_keys(config.presets or {})
    table.sort(names)
    local guess = presets.suggest(name, names)
    util.error(
      ("unknown preset `%s`%s%s"):format(
        name,
        guess and ("; did you mean `%s`?"):format(guess) or "",
        #names > 0 and (" (presets: " .. table.concat(names, ", ") .. ")")
          or " (none is defined: add `presets` in setup())"
      )
    )
  end
  if type(p) == "string" then
    local words = vim.split(vim.trim(p), "%s+", { trimempty = true })
    if words[1] and words[1]:sub(1, 1) == "$" then
      util.error(("preset `%s`: a preset cannot start with another preset"):format(name))
    end
    local ok, sel = pcall(M.parse, words, config)
    if not ok then
      util.error(("preset `%s`: %s"):format(name, util.message(sel):gsub("^%(flemma%) ", "")))
    end
    return { provider = sel.provider, model = sel.model, parameters = sel.parameters }
  end
  local words = { p.provider }
  if p.model then
    words[2] = p.model
  end
  local ok, sel = pcall(M.parse, words, config)
  if not ok then
    util.error(("preset `%s`: %s"):format(name, util.message(sel):gsub("^%(flemma%) ", "")))
  end
  local params = {}
  local function walk(t, prefix)
    for k, v in pairs(t) do
      if k == "extra" and type(v) == "table" then
        -- Request fields of their own (flemma.provider.common.extra), taken whole.
        local head = prefix:match("^([^.]+)%.$")
        if head then
          params[head] = params[head] or {}
          params[head].extra = vim.deepcopy(v)
        else
          params.extra = vim.deepcopy(v)
        end
      elseif type(v) == "table" then
        walk(v, prefix .. k .. ".")
      else
        local ok2, err = pcall(H.set, params, prefix .. k, v, "presets." .. name .. ".parameters.")
        if not ok2 then
          util.error(("preset `%s`: %s"):format(name, util.message(err):gsub("^%(flemma%) ", "")))
        end
      end
    end
  end
  walk(p.parameters or {}, "")
  local ok3, err = pcall(M.check_parameters, params)
  if not ok3 then
    util.error(("preset `%s`: %s"):format(name, util.message(err):gsub("^%(flemma%) ", "")))
  end
  return { provider = sel.provider, model = sel.model, parameters = params }
end

--- Validates `presets` of a merged configuration (config.setup calls it).
---@param list table
---@param config flemma.Config
function M.check_presets(list, config)
  if type(list) ~= "table" then
    util.error("`presets` should be a table, not " .. type(list))
  end
  for name, p in pairs(list) do
    if type(name) ~= "string" or not name:match("^%$[%w_.-]+$") then
      util.error(('`presets`: the name %s should start with $ (e.g. "$fast")'):format(vim.inspect(name)))
    end
    if type(p) == "table" then
      for k in pairs(p) do
        if k ~= "provider" and k ~= "model" and k ~= "parameters" then
          util.error(
            ("unknown option `presets.%s.%s` (a preset has provider, model, parameters)"):format(name, tostring(k))
          )
        end
      end
      if type(p.provider) ~= "string" then
        util.error(("`presets.%s.provider` should be a string, not %s"):format(name, type(p.provider)))
      end
      if p.model ~= nil and type(p.model) ~= "string" then
        util.error(("`presets.%s.model` should be a string, not %s"):format(name, type(p.model)))
      end
      if p.parameters ~= nil and type(p.parameters) ~= "table" then
        util.error(("`presets.%s.parameters` should be a table, not %s"):format(name, type(p.parameters)))
      end
    elseif type(p) ~= "string" then
      util.error(
        ('`presets.%s` should be a string "provider [model] [key=value ...]" or a table, not %s'):format(name, type(p))
      )
    end
    M.preset(name, config)
  end
end

return M
