--- :Flemma status: the effective settings of a chat buffer as a tree, each value
--- marked with the layer that set it: `default`, `setup` (require("flemma").setup),
--- `switch` (:Flemma switch, for this session),
--- `command` (a :Flemma command of this session), `buffer` (a per-buffer toggle) or
--- `frontmatter` (the buffer's own frontmatter).
local util = require("flemma.core.util")

local M = {}
local H = {}

function H.get(t, path)
  for key in path:gmatch("[^.]+") do
    if type(t) ~= "table" then
      return nil
    end
    t = t[key]
  end
  return t
end

--- `default` when the active config holds the default value at `path`, else `setup`.
function H.config_layer(path)
  local config = require("flemma.core.config")
  local session = config.session()
  if session then
    local top = path:match("^[^.]+")
    if top == "provider" or top == "model" or (top == "parameters" and H.get(session, path) ~= nil) then
      return "switch"
    end
  end
  return vim.deep_equal(H.get(config.get_setup(), path), H.get(config.defaults(), path)) and "default" or "setup"
end

function H.show(v)
  if v == nil then
    return "nil"
  elseif type(v) == "string" then
    return v
  elseif type(v) == "function" then
    return "a function"
  elseif type(v) == "table" and vim.islist(v) then
    local out = {}
    for _, x in ipairs(v) do
      out[#out + 1] = H.show(x)
    end
    return "{ " .. table.concat(out, ", ") .. " }"
  end
  return vim.inspect(v, { newline = " ", indent = "" })
end

-- The sections of M.tree: each adds its rows through row(indent, text, layer).

function H.tree_provider(row, bufnr, config, fm_opts)
  -- Provider, model and transport: the frontmatter's selection wins.
  local sel_config = config
  if fm_opts.provider or fm_opts.model then
    local ok_c, cfg = pcall(require("flemma.chat.frontmatter").config, bufnr)
    if ok_c and cfg then
      sel_config = cfg
    end
  end
  if fm_opts.provider then
    local preset = fm_opts.preset and (" (preset " .. fm_opts.preset .. ")") or ""
    local over = config.provider ~= fm_opts.provider and ("; " .. config.provider .. " elsewhere") or ""
    row(0, "provider: " .. tostring(fm_opts.provider) .. preset .. over, "frontmatter")
  else
    row(0, "provider: " .. tostring(config.provider), H.config_layer("provider"))
  end
  local ok_p, spec, perr = pcall(function()
    return require("flemma.provider").resolve(sel_config)
  end)
  if ok_p and spec then
    local model_layer = require("flemma.core.config").session() and "switch"
      or config.model and "setup"
      or (
        H.get(config, "providers." .. spec.name .. ".model") and H.config_layer("providers." .. spec.name .. ".model")
        or "default"
      )
    if fm_opts.model then
      -- Set there, by its preset, or the default of the provider it selects.
      model_layer = "frontmatter"
    end
    row(1, "model: " .. tostring(spec.model), model_layer)
    row(1, "kind: " .. tostring(spec.kind), H.config_layer("providers." .. spec.name .. ".kind"))
    row(1, "endpoint: " .. tostring(spec.endpoint), H.config_layer("providers." .. spec.name .. ".endpoint"))
    if spec.api_key_env then
      local present = vim.env[spec.api_key_env] ~= nil and vim.env[spec.api_key_env] ~= ""
      local cached = require("flemma.policy.secrets").cached_source(spec.name)
      row(
        1,
        ("key: $%s %s"):format(
          spec.api_key_env,
          present and "is set"
            or cached and ("is not set; the key from `" .. cached .. "` is cached")
            or "is not set; the keyring and other resolvers are asked at send (:help flemma-secrets)"
        )
      )
    else
      row(1, "key: none needed")
    end
  else
    row(1, "unusable: " .. util.message(ok_p and perr or spec))
  end
end

function H.tree_parameters(row, config, fm_opts)
  -- Parameters: every key of the merged table, frontmatter overrides marked.
  row(0, "parameters:")
  local fm_params = fm_opts.parameters or {}
  local cleared = {}
  for _, path in ipairs(fm_opts.parameters_cleared or {}) do
    cleared[path] = true
  end
  local keys = vim.tbl_keys(config.parameters)
  for _, k in ipairs(vim.tbl_keys(fm_params)) do
    if config.parameters[k] == nil then
      keys[#keys + 1] = k
    end
  end
  for _, k in ipairs({ "max_tokens", "temperature", "thinking" }) do
    if config.parameters[k] == nil and fm_params[k] == nil then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v, fv = config.parameters[k], fm_params[k]
    local sub = (type(v) == "table" or type(fv) == "table")
      and vim.tbl_keys(vim.tbl_extend("force", {}, type(v) == "table" and v or {}, type(fv) == "table" and fv or {}))
    if sub and #sub == 0 then
      -- a provider table with nothing set: nothing to show
    elseif sub then
      row(1, k .. ":")
      table.sort(sub)
      for _, sk in ipairs(sub) do
        if type(fv) == "table" and fv[sk] ~= nil then
          row(2, ("%s: %s"):format(sk, H.show(fv[sk])), "frontmatter")
        elseif cleared[k .. "." .. sk] then
          row(2, ("%s: not set (cleared by %s)"):format(sk, fm_opts.preset or "the preset"), "frontmatter")
        else
          row(2, ("%s: %s"):format(sk, H.show(v[sk])), H.config_layer("parameters." .. k .. "." .. sk))
        end
      end
    elseif fv ~= nil then
      row(1, ("%s: %s"):format(k, H.show(fv)), "frontmatter")
    elseif cleared[k] then
      row(1, ("%s: not set (cleared by %s)"):format(k, fm_opts.preset or "the preset"), "frontmatter")
    elseif v == nil then
      row(1, ("%s: not set (the provider's default)"):format(k), H.config_layer("parameters." .. k))
    else
      row(1, ("%s: %s"):format(k, H.show(v)), H.config_layer("parameters." .. k))
    end
  end
end

function H.tree_sandbox(row, config)
  -- Sandbox.
  local sandbox = require("flemma.policy.sandbox")
  local enabled = sandbox.is_enabled()
  row(
    0,
    "sandbox: " .. (enabled and "enabled" or "disabled"),
    enabled ~= (config.sandbox.enabled == true) and "command" or H.config_layer("sandbox.enabled")
  )
  local backend, berr = sandbox.backend()
  row(1, "backend: " .. (backend or ("none (" .. tostring(berr) .. ")")), H.config_layer("sandbox.backend"))
  row(
    1,
    "network: " .. (config.sandbox.policy.network and "allowed" or "cut"),
    H.config_layer("sandbox.policy.network")
  )
  row(
    1,
    "writable roots: " .. (config.sandbox.policy.rw_paths and H.show(config.sandbox.policy.rw_paths) or "the defaults"),
    H.config_layer("sandbox.policy.rw_paths")
  )
end

function H.tree_tools(row, bufnr, config, fm_opts)
  -- Tools and approval.
  local tools = require("flemma.tools")
  if fm_opts.tools then
    row(0, "tools: " .. H.show(fm_opts.tools), "frontmatter")
  else
    row(0, "tools: " .. H.show(tools.list()), "default")
  end
  local by_risk, unclassified = {}, {}
  for _, name in ipairs(tools.list()) do
    local risk = tools.risk(name)
    if risk then
      by_risk[risk] = by_risk[risk] or {}
      table.insert(by_risk[risk], name)
    else
      unclassified[#unclassified + 1] = name
    end
  end
  local risk_parts = {}
  for _, level in ipairs(tools.RISKS) do
    if by_risk[level] then
      risk_parts[#risk_parts + 1] = level .. ": " .. table.concat(by_risk[level], ", ")
    end
  end
  if #unclassified > 0 then
    risk_parts[#risk_parts + 1] = "unclassified: " .. table.concat(unclassified, ", ")
  end
  row(1, "risk: " .. table.concat(risk_parts, "; "), "default")
  row(0, "approval:")
  row(1, "require_approval: " .. tostring(config.tools.require_approval), H.config_layer("tools.require_approval"))
  if fm_opts.auto_approve ~= nil then
    row(1, "auto_approve: " .. H.show(fm_opts.auto_approve), "frontmatter")
    local trust = require("flemma.chat.trust")
    if trust.widening(fm_opts) then
      -- What it approves beyond the global policy needs the user's trust.
      local state = trust.is_trusted(bufnr) and "trusted" or "ignored until trusted (:Flemma trust)"
      row(2, "beyond the global policy: " .. state, "frontmatter")
    end
  end
  row(
    1,
    (fm_opts.auto_approve ~= nil and "global auto_approve: " or "auto_approve: ") .. H.show(config.tools.auto_approve),
    H.config_layer("tools.auto_approve")
  )
  -- The ask and deny lists (checked before the chain's approvals): the setup's and
  -- this chat's.
  for _, key in ipairs({ "deny", "ask" }) do
    if next(config.tools[key] or {}) ~= nil then
      row(1, key .. ": " .. H.show(config.tools[key]), H.config_layer("tools." .. key))
    end
    if fm_opts[key] ~= nil and next(fm_opts[key]) ~= nil then
      row(1, key .. ": " .. H.show(fm_opts[key]), "frontmatter")
    end
  end
  row(
    1,
    "auto_approve_sandboxed: " .. tostring(config.tools.auto_approve_sandboxed),
    H.config_layer("tools.auto_approve_sandboxed")
  )
  local approval = require("flemma.tools.approval")
  -- The built-in resolvers by what they are to the user; the user's own by name.
  local labels = {
    [approval.CONFIG] = "your setup's auto_approve",
    [approval.FRONTMATTER] = "this chat's frontmatter auto_approve",
    [approval.SANDBOX] = "sandboxed tools (auto_approve_sandboxed)",
    [approval.CATCH_ALL] = "require_approval = false (approves the rest)",
  }
  if type(config.tools.auto_approve) == "string" then
    labels[config.tools.auto_approve] = ("your auto_approve module `%s`"):format(config.tools.auto_approve)
  end
  local resolvers = {}
  for _, r in ipairs(approval.get_all()) do
    resolvers[#resolvers + 1] = labels[r.name] or ("your resolver `%s` (priority %d)"):format(r.name, r.priority or 0)
  end
  row(1, "asked in turn: " .. table.concat(resolvers, ", ") .. "; then you are asked")
end

--- The status tree of a buffer as a list of { text, layer? } rows (depth in `indent`).
---@param bufnr integer
---@return { indent: integer, text: string, layer?: string }[]
function M.tree(bufnr)
  local rows = {}
  local function row(indent, text, layer)
    rows[#rows + 1] = { indent = indent, text = text, layer = layer }
  end
  local config = require("flemma.core.config").get()
  local fm_opts, fm_err
  do
    local ok, a, b = pcall(function()
      return require("flemma.chat.frontmatter").get(bufnr)
    end)
    if ok then
      fm_opts, fm_err = a, b
    else
      fm_err = util.message(a)
    end
  end
  fm_opts = fm_opts or {}

  H.tree_provider(row, bufnr, config, fm_opts)
  H.tree_parameters(row, config, fm_opts)
  H.tree_sandbox(row, config)
  H.tree_tools(row, bufnr, config, fm_opts)
  -- Autopilot.
  local cycle = require("flemma.cycle")
  local on = cycle.autopilot_enabled(bufnr)
  row(
    0,
    ("autopilot: %s (max %d turns)"):format(on and "on" or "off", config.tools.autopilot.max_turns),
    on ~= (config.tools.autopilot.enabled == true) and "buffer" or H.config_layer("tools.autopilot.enabled")
  )

  -- Frontmatter.
  if fm_err then
    row(0, "frontmatter: error: " .. util.message(fm_err))
  else
    row(0, "frontmatter: " .. (next(fm_opts) and "evaluated" or "none"))
  end
  return rows
end

--- The tree as text lines, layers aligned in a right-hand column.
---@param bufnr integer
---@return string[]
function M.lines(bufnr)
  local rows = M.tree(bufnr)
  local width = 0
  for _, r in ipairs(rows) do
    if r.layer then
      width = math.max(width, 2 * r.indent + vim.fn.strdisplaywidth(r.text))
    end
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  local out = {
    ("Flemma status of buffer %d%s"):format(
      bufnr,
      name ~= "" and (" (" .. vim.fn.fnamemodify(name, ":~:.") .. ")") or ""
    ),
  }
  local native = require("flemma.core.native")
  native.reset()
  local ok, err = native.available()
  out[#out + 1] = ok
      and ("native core %s (ABI %d) at %s"):format(native.version(), native.abi_version(), native.library_path())
    or ("native core unavailable: " .. tostring(err))
  out[#out + 1] = ""
  for _, r in ipairs(rows) do
    local text = string.rep("  ", r.indent) .. r.text
    if r.layer then
      text = text .. string.rep(" ", width - vim.fn.strdisplaywidth(text) + 2) .. "[" .. r.layer .. "]"
    end
    out[#out + 1] = text
  end
  return out
end

--- Shows the tree of `bufnr` in a scratch window (q closes it).
---@param bufnr integer
function M.show(bufnr)
  local lines = M.lines(bufnr)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "flemma-status"
  vim.cmd(("botright %dsplit"):format(math.min(#lines, math.max(5, math.floor(vim.o.lines / 2)))))
  vim.api.nvim_win_set_buf(0, buf)
  vim.keymap.set("n", "q", "<cmd>close<cr>", { buffer = buf, nowait = true, desc = "close the Flemma status" })
  return buf
end

return M
