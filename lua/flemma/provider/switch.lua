--- :Flemma switch: changes the provider, model and parameters for this Neovim session
--- (a layer above setup(), see config.set_session), by name, by `$preset` or by
--- picking from lists; presets are validated here. A buffer whose frontmatter selects
--- a provider or model keeps it (flemma.frontmatter.config): the switch says so.
local util = require("flemma.core.util")

local M = {}
local H = {}

--- Parameter names that `key=value` accepts (dotted for a provider's own ones).
---@return string[]
function M.parameter_names()
  local names = {}
  local defaults = require("flemma.core.config").defaults().parameters
  for k, v in pairs(defaults) do
    if type(v) == "table" then
      for sk in pairs(v) do
        names[#names + 1] = k .. "." .. sk
      end
    else
      names[#names + 1] = k
    end
  end
  for _, k in ipairs({
    "max_tokens",
    "temperature",
    "thinking",
    "anthropic.thinking_budget",
    "openai.reasoning",
    "vertex.project_id",
    "vertex.thinking_budget",
  }) do
    if not vim.tbl_contains(names, k) then
      names[#names + 1] = k
    end
  end
  table.sort(names)
  return names
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
  if require("flemma.policy.secrets").forbidden[name:match("[^.]+$")] then
    util.error(require("flemma.policy.secrets").refusal(where .. name))
  end
  local names = M.parameter_names()
  if not vim.tbl_contains(names, name) then
    local guess = require("flemma.isolated.presets").suggest(name, names)
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

---@class flemma.switch.Selection
---@field provider string
---@field model? string
---@field parameters table values; vim.NIL clears one
---@field preset? string

--- Parses words: `{provider|$preset} [model] [key=value ...]`. A preset's own
--- selection comes first; a model or values after it replace its own.
---@param words string[]
---@param config? flemma.Config
---@return flemma.switch.Selection
function M.parse(words, config)
  config = config or require("flemma.core.config").get_setup()
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
      local guess = require("flemma.isolated.presets").suggest(first, names)
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
  local check = vim.deepcopy(sel.parameters)
  local function strip(t)
    for k, v in pairs(t) do
      if v == vim.NIL then
        t[k] = nil
      elseif type(v) == "table" then
        strip(v)
      end
    end
  end
  strip(check)
  require("flemma.core.config").validate({ parameters = check })
  return sel
end

--- A preset by name: { provider, model?, parameters }; raises when unknown or bad.
---@param name string
---@param config? flemma.Config
function M.preset(name, config)
  config = config or require("flemma.core.config").get_setup()
  local p = (config.presets or {})[name]
  if p == nil then
    local names = vim.tbl_keys(config.presets or {})
    table.sort(names)
    local guess = require("flemma.isolated.presets").suggest(name, names)
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
  local ok3, err = pcall(require("flemma.core.config").validate, { parameters = params })
  if not ok3 then
    util.error(("preset `%s`: %s"):format(name, util.message(err):gsub("^%(flemma%) ", "")))
  end
  return { provider = sel.provider, model = sel.model, parameters = params }
end

--- Validates `presets` of a merged configuration (called by config.setup).
---@param presets table
---@param config flemma.Config
function M.check_presets(presets, config)
  if type(presets) ~= "table" then
    util.error("`presets` should be a table, not " .. type(presets))
  end
  for name, p in pairs(presets) do
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

-- ---------------------------------------------------------------------------
-- Applying a selection
-- ---------------------------------------------------------------------------

function H.money(x)
  if x == math.floor(x) then
    return ("$%d"):format(x)
  end
  return ("$%.3f"):format(x):gsub("0+$", "")
end

function H.show_params(params, prefix, out)
  local keys = vim.tbl_keys(params)
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = params[k]
    if type(v) == "table" and v ~= vim.NIL then
      H.show_params(v, prefix .. k .. ".", out)
    else
      out[#out + 1] = ("%s%s=%s"):format(prefix, k, v == vim.NIL and "" or tostring(v))
    end
  end
  return out
end

--- The confirmation of a selection (and a warning when the model is expensive).
---@return string message
---@return string|nil warning
function M.describe(spec, params)
  local config = require("flemma.core.config").get()
  local info = require("flemma.core.models").get(spec.kind, spec.model)
  local shown = H.show_params(params or {}, "", {})
  local msg = ("switched to %s %s%s"):format(
    spec.name,
    spec.model,
    #shown > 0 and (" (" .. table.concat(shown, " ") .. ")") or ""
  )
  local warning
  if info then
    msg = msg .. (" · %s in / %s out per million tokens"):format(H.money(info.input), H.money(info.output))
    local limit = config.ui.high_cost_threshold
    if require("flemma.provider.cost").above(info, limit) then
      warning = ("%s costs %s per million output tokens, above ui.high_cost_threshold (%s)"):format(
        spec.model,
        H.money(info.output),
        H.money(limit)
      )
    end
  else
    msg = msg .. " · not in the model table: cost unknown"
  end
  return msg, warning
end

--- A chat buffer whose frontmatter selects its provider or model keeps them: the
--- frontmatter wins over :Flemma switch (which still applies to the other buffers).
--- Says so when the buffer where the switch happened is one of them.
function H.frontmatter_note(bufnr, spec)
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].filetype ~= "chat" then
    return
  end
  local fm = require("flemma.chat.frontmatter")
  local sel, err = fm.selection(bufnr)
  if not sel then
    util.warn(("this buffer sends nothing while its frontmatter fails: %s"):format(util.message(err)))
    return
  end
  if not sel.provider and not sel.model then
    return
  end
  local provider = sel.provider or spec.name
  local model = sel.model or spec.model
  if provider == spec.name and model == spec.model then
    return
  end
  util.warn(
    ("this buffer's frontmatter selects %s %s%s, and the frontmatter wins: this buffer keeps it, other buffers switch; edit `flemma.opt.%s` in the frontmatter to change this one"):format(
      provider,
      model,
      sel.preset and (" (" .. sel.preset .. ")") or "",
      sel.provider and "provider" or "model"
    )
  )
end

--- Makes a selection the session layer and confirms it.
---@param sel flemma.switch.Selection
function M.apply(sel)
  local config = require("flemma.core.config")
  config.set_session({ provider = sel.provider, model = sel.model, parameters = sel.parameters })
  local spec, err = require("flemma.provider").resolve(config.get())
  if not spec then
    -- Kept: the missing piece (a project, an endpoint) may come next.
    util.warn(("switched to %s, but it cannot send yet: %s"):format(sel.provider, util.message(err)))
    return nil
  end
  local msg, warning = M.describe(spec, sel.parameters)
  if sel.preset then
    msg = msg .. (" [%s]"):format(sel.preset)
  end
  util.notify(msg)
  if warning then
    util.warn(warning)
  end
  H.frontmatter_note(vim.api.nvim_get_current_buf(), spec)
  vim.api.nvim_exec_autocmds(
    "User",
    { pattern = "FlemmaSwitched", modeline = false, data = { provider = spec.name, model = spec.model } }
  )
  return spec
end

--- `:Flemma switch` arguments.
---@param words string[]
function M.run(words)
  if #words == 0 then
    return M.pick()
  end
  local sel = M.parse(words)
  -- A server's model list that could not be fetched is tried again.
  require("flemma.provider.served").refresh(sel.provider)
  return M.apply(sel)
end

--- Models to offer for a provider: its own default first, then the model table's.
--- An OpenAI-compatible server (`kind = "openai_chat"`) offers what it lists at
--- /models (flemma.provider.served): until that list is known (it is fetched in the
--- background, nothing waits), only the entry's own model: never another vendor's.
function M.models(name, config)
  config = config or require("flemma.core.config").get_setup()
  local entry = config.providers[name]
  if not entry then
    return {}
  end
  local models = require("flemma.core.models")
  local out = {}
  local first = entry.model or models.defaults[name] or models.defaults[entry.kind]
  if first then
    out[1] = first
  end
  local names
  if entry.kind == "openai_chat" then
    names = require("flemma.provider.served").models(name, config) or {}
  else
    names = vim.tbl_keys(models.by_kind[entry.kind] or {})
    table.sort(names)
  end
  for _, m in ipairs(names) do
    if m ~= first then
      out[#out + 1] = m
    end
  end
  return out
end

--- vim.ui.select of a provider, then of a model.
function M.pick()
  local config = require("flemma.core.config").get_setup()
  local names = vim.tbl_keys(config.providers)
  table.sort(names)
  vim.ui.select(names, {
    prompt = "Provider",
    format_item = function(n)
      return ("%s (%s)"):format(n, config.providers[n].kind)
    end,
  }, function(name)
    if not name then
      return
    end
    local function done(model)
      local ok, err = pcall(M.apply, { provider = name, model = model, parameters = {} })
      if not ok then
        util.notify(util.message(err), vim.log.levels.ERROR)
      end
    end
    local kind = config.providers[name].kind
    local function choose()
      local models = M.models(name, config)
      if #models == 0 then
        return done(nil)
      end
      vim.ui.select(models, {
        prompt = "Model of " .. name,
        format_item = function(m)
          local info = require("flemma.core.models").get(kind, m)
          return info and ("%s  (%s in / %s out per Mtok)"):format(m, H.money(info.input), H.money(info.output)) or m
        end,
      }, function(model)
        if model then
          done(model)
        end
      end)
    end
    if kind == "openai_chat" then
      -- The server's list first (at once when known; a failed one is tried again).
      return require("flemma.provider.served").fetch(name, {
        config = config,
        force = true,
        cb = vim.schedule_wrap(choose),
      })
    end
    choose()
  end)
end

--- Completion of `:Flemma switch` arguments (`args`: the words so far, the last one
--- being completed).
function M.complete(arglead, args)
  local config = require("flemma.core.config").get_setup()
  local n = #args
  local out = {}
  if n <= 1 then
    vim.list_extend(out, vim.tbl_keys(config.providers))
    vim.list_extend(out, vim.tbl_keys(config.presets or {}))
  else
    local first = args[1]
    local provider = first
    if first:sub(1, 1) == "$" then
      local p = (config.presets or {})[first]
      provider = type(p) == "table" and p.provider or (type(p) == "string" and p:match("^%s*(%S+)")) or nil
    end
    local key = arglead:match("^([%w_.]+)=")
    if key then
      local values = ({
        thinking = { "false", "minimal", "low", "medium", "high", "max" },
        cache_retention = { "none", "short", "long" },
        thinking_foreign = { "text", "preserve", "drop" },
        ["openai.reasoning"] = { "none", "minimal", "low", "medium", "high" },
      })[key] or {}
      for _, v in ipairs(values) do
        out[#out + 1] = key .. "=" .. v
      end
    else
      if n == 2 and provider then
        vim.list_extend(out, M.models(provider, config))
      end
      for _, p in ipairs(M.parameter_names()) do
        out[#out + 1] = p .. "="
      end
    end
  end
  out = vim.tbl_filter(function(c)
    return c:sub(1, #arglead) == arglead
  end, out)
  table.sort(out)
  return out
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["switch"] = {
  desc = "switch provider, model and parameters for this session: {provider|$preset} [model] [key=value ...]; no argument: pick from lists",
  run = function(args)
    M.run(args)
  end,
  complete = function(arglead, args)
    return M.complete(arglead, args)
  end,
}

return M
