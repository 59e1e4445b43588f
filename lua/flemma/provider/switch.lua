--- :Flemma switch: changes the provider, model and parameters for this Neovim session
--- (a layer above setup(), see config.set_session), by name, by `$preset` or by
--- picking from lists; presets are validated here. A buffer whose frontmatter selects
--- a provider or model keeps it (flemma.frontmatter.config): the switch says so.
local util = require("flemma.core.util")
local selection = require("flemma.core.selection")
local schema = require("flemma.isolated.schema")

local M = {}
local H = {}

-- Parsing a selection and checking presets live low, in flemma.core.selection (config
-- checks presets with them at setup).
M.parameter_names = selection.parameter_names

--- A preset by name: { provider, model?, parameters } (flemma.core.selection).
---@param name string
---@param config? flemma.Config
function M.preset(name, config)
  return selection.preset(name, config or require("flemma.core.config").get_setup())
end

--- Parses words: `{provider|$preset} [model] [key=value ...]` (flemma.core.selection),
--- under setup()'s configuration by default.
---@param words string[]
---@param config? flemma.Config
---@return flemma.core.Selection
function M.parse(words, config)
  return selection.parse(words, config or require("flemma.core.config").get_setup())
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
      -- The allowed values come from the option schema.
      local values = schema.values("parameters." .. key) or {}
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
