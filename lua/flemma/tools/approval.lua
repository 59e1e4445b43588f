--- Who decides whether a tool call runs: a chain of resolvers evaluated by priority
--- (highest first, ties by name). The first resolver that returns a decision wins;
--- when none does, the call requires approval.
local util = require("flemma.core.util")
local presets = require("flemma.isolated.presets")

local M = {}
local H = {}

---@alias flemma.approval.Decision "approve"|"require_approval"|"deny"

---@class flemma.approval.Context
---@field bufnr integer
---@field tool_id string

---@class flemma.approval.Resolver
---@field name string
---@field description? string
---@field priority integer
---@field resolve fun(tool_name: string, input: table, ctx: flemma.approval.Context): flemma.approval.Decision|nil

M.DEFAULT_PRIORITY = 50

M.CONFIG = "urn:flemma:approval:config"
M.FRONTMATTER = "urn:flemma:approval:frontmatter"
M.SANDBOX = "urn:flemma:approval:sandbox"
M.CATCH_ALL = "urn:flemma:approval:catch-all"
-- Not resolvers of the chain: what the audit log names when `tools.deny` /
-- `flemma.opt.tools.deny` denied a call before the chain, or `tools.ask` /
-- `flemma.opt.tools.ask` held back an approval.
M.DENY_LIST = "urn:flemma:approval:deny"
M.ASK_LIST = "urn:flemma:approval:ask"

H.DECISIONS = { approve = true, require_approval = true, deny = true }

---@type table<string, flemma.approval.Resolver>
H.resolvers = {}
-- Names of the resolvers that setup() registered (removed again by the next setup()).
H.builtin = {}
---@type flemma.Config|nil
H.config = nil

--- Registers a resolver; a resolver with the same name is replaced.
---@param name string
---@param def { description?: string, resolve: function, priority?: integer }
function M.register(name, def)
  if type(name) ~= "string" or name == "" then
    util.error("approval.register() expects a resolver name (string), not " .. type(name))
  end
  if type(def) ~= "table" then
    util.error(
      ("approval.register(%q) expects a table { resolve = function, priority? }, not %s"):format(name, type(def))
    )
  end
  if type(def.resolve) ~= "function" then
    util.error(("approval resolver %q needs a `resolve` function"):format(name))
  end
  if def.priority ~= nil and type(def.priority) ~= "number" then
    util.error(("approval resolver %q: `priority` should be a number, not %s"):format(name, type(def.priority)))
  end
  if def.description ~= nil and type(def.description) ~= "string" then
    util.error(("approval resolver %q: `description` should be a string, not %s"):format(name, type(def.description)))
  end
  H.resolvers[name] = {
    name = name,
    description = def.description,
    priority = def.priority or M.DEFAULT_PRIORITY,
    resolve = def.resolve,
  }
end

--- Removes a resolver; true when it was registered.
---@param name string
---@return boolean
function M.unregister(name)
  local found = H.resolvers[name] ~= nil
  H.resolvers[name] = nil
  return found
end

--- A copy of the resolver entry, or nil.
---@param name string
---@return flemma.approval.Resolver|nil
function M.get(name)
  local r = H.resolvers[name]
  return r and vim.deepcopy(r) or nil
end

function H.sorted()
  local list = vim.tbl_values(H.resolvers)
  table.sort(list, function(a, b)
    if a.priority ~= b.priority then
      return a.priority > b.priority
    end
    return a.name < b.name
  end)
  return list
end

--- All resolvers, highest priority first (ties by name); a deep copy.
---@return flemma.approval.Resolver[]
function M.get_all()
  return vim.deepcopy(H.sorted())
end

--- How many resolvers are registered.
---@return integer
function M.count()
  return vim.tbl_count(H.resolvers)
end

-- The frontmatter options the built-in resolvers see during a chain: a table, or
-- false for "as if the buffer set nothing" (nil outside a chain: read the buffer).
H.active = nil

-- One pass over the resolver chain; `fm` is what the built-in resolvers take as the
-- buffer's frontmatter (false: none). `warned` keeps one warning per resolver.
function H.chain(tool_name, input, context, fm, warned)
  local saved = H.active
  H.active = fm
  local decision = "require_approval"
  H.decider = { resolver = nil, rule = nil }
  for _, r in ipairs(H.sorted()) do
    H.rule = nil
    local ok, result = pcall(r.resolve, tool_name, input or {}, context)
    if not ok and r.name == M.FRONTMATTER then
      -- The buffer's own policy did not evaluate (its function failed or ran out of
      -- time): no later resolver decides in its place; the call waits.
      H.warn_frontmatter(util.message(result))
      decision = "require_approval"
      break
    elseif not ok then
      if not warned[r.name] then
        warned[r.name] = true
        util.warn(("approval resolver `%s` failed and was skipped: %s"):format(r.name, util.message(result)))
      end
    elseif result ~= nil then
      if H.DECISIONS[result] then
        decision = result
        H.decider = { resolver = r.name, rule = H.rule }
        break
      end
      if not warned[r.name] then
        warned[r.name] = true
        util.warn(
          ("approval resolver `%s` returned %s, which is not a decision (approve, require_approval, deny or nil); skipped"):format(
            r.name,
            type(result) == "string" and ("%q"):format(result) or type(result)
          )
        )
      end
    end
  end
  H.active = saved
  return decision
end

-- Warns that the frontmatter's policy failed, once per message and main-loop turn
-- (one <C-]> may ask it about many calls).
function H.warn_frontmatter(msg)
  if not H.fm_warned then
    H.fm_warned = {}
    vim.schedule(function()
      H.fm_warned = nil
    end)
  end
  if not H.fm_warned[msg] then
    H.fm_warned[msg] = true
    util.warn(("the frontmatter's auto_approve failed; the call waits for you: %s"):format(msg))
  end
end

--- Decides a tool call: the first non-nil result of the resolver chain, or
--- "require_approval". A resolver that raises (or returns something that is not a
--- decision) is logged and skipped, except the frontmatter's: when the buffer's own
--- policy fails (its auto_approve function raised or ran out of time), the call
--- requires approval. When the buffer's frontmatter sets its own
--- policy, the global policy (the chain as if it set nothing) is asked first: its
--- deny always wins, and an approval it would not give holds only when the user
--- trusts that frontmatter (flemma.trust); a frontmatter that fails to evaluate
--- approves nothing. A tool whose definition says `asks_user` (the `ask` tool) is
--- never approved: it waits for the user.
---@param tool_name string
---@param input table|nil
---@param ctx? { bufnr?: integer, tool_id?: string }
---@return flemma.approval.Decision
function M.resolve(tool_name, input, ctx)
  ctx = ctx or {}
  -- The deny lists come first (over every resolver), then the chain, then the ask
  -- lists, which hold back any approval.
  H.decider = {}
  local lists = H.lists(ctx)
  local denied, by, unsure = H.in_lists(lists.deny, tool_name, input, ctx)
  if denied then
    H.decider = { resolver = M.DENY_LIST, rule = by }
    -- A command line the deny rules cannot be checked against waits for the user.
    return unsure and "require_approval" or "deny"
  end
  local decision = H.resolve(tool_name, input, ctx)
  if decision ~= "approve" then
    return decision
  end
  local asked
  asked, by = H.in_lists(lists.ask, tool_name, input, ctx)
  if asked then
    H.decider = { resolver = M.ASK_LIST, rule = by }
    return "require_approval"
  end
  -- A call that asks the user (the `ask` tool) is never approved on the user's
  -- behalf: it waits for the user, whatever approved it; a deny still holds.
  local def = require("flemma.tools").get(tool_name)
  if type(def) == "table" and def.asks_user == true then
    H.decider = { resolver = "asks_user" }
    return "require_approval"
  end
  return decision
end

-- The ask and deny lists of a call: the configuration's and the buffer's frontmatter's
-- together (a frontmatter may only add to them: both narrow the policy). A
-- frontmatter that does not evaluate adds nothing here (the chain then waits).
function H.lists(ctx)
  local tools_cfg = H.tools_config()
  local out = { ask = { tools_cfg.ask }, deny = { tools_cfg.deny } }
  local fm = H.frontmatter({ bufnr = ctx.bufnr })
  if type(fm) == "table" then
    out.ask[2] = fm.ask
    out.deny[2] = fm.deny
  end
  return out
end

-- Whether any of the lists names the call; the entry that did.
function H.in_lists(lists, tool_name, input, ctx)
  for i = 1, 2 do
    local ok, hit, entry, unsure = pcall(presets.listed, lists[i], tool_name, input or {}, H.matcher(ctx))
    if not ok then
      -- A list that cannot be read names the call (the call waits).
      return true, util.message(hit), true
    end
    if hit then
      return true, entry, unsure
    end
  end
  return false
end

-- The rule matcher of a call (presets.decide, presets.listed): a tool with a
-- `command` (bash) is matched by its command line, a tool that declares `paths` by
-- where they lead (`read(src/*)`), relative to the project roots of the buffer.
function H.matcher(ctx)
  local commands = require("flemma.policy.commands")
  return function(allow, deny, input, tool_name)
    local def = tool_name and require("flemma.tools").get(tool_name)
    if type(input) == "table" and type(input.command) ~= "string" and type(def) == "table" and def.paths then
      local ok, paths, roots = pcall(require("flemma.policy.scope").real_paths, ctx.bufnr, def, input)
      if not ok or not paths then
        return nil, nil, #deny > 0
      end
      return commands.decide_paths(paths, roots, allow, deny)
    end
    return commands.matcher(allow, deny, input)
  end
end

function H.resolve(tool_name, input, ctx)
  ctx = ctx or {}
  local context = { bufnr = ctx.bufnr, tool_id = ctx.tool_id }
  local fm, fm_err = H.frontmatter(context)
  if fm_err then
    -- No decision on a policy that did not evaluate: the call waits.
    return "require_approval"
  end
  local warned = {}
  if not fm or fm.auto_approve == nil then
    return H.chain(tool_name, input, context, fm or false, warned)
  end
  local global = H.chain(tool_name, input, context, false, warned)
  local global_decider = H.decider
  if global == "deny" then
    return "deny"
  end
  local decision = H.chain(tool_name, input, context, fm, warned)
  if decision == "approve" and global ~= "approve" and not require("flemma.chat.trust").is_trusted(context.bufnr) then
    require("flemma.chat.trust").ignored(context.bufnr, tool_name)
    -- The global policy decided: the log names its resolver, not the frontmatter's.
    H.decider = global_decider
    return global
  end
  return decision
end

--- Who made the last decision of M.resolve: the resolver's name (nil: none decided)
--- and the per-command rule that decided, if one did (for the audit log).
---@return { resolver: string|nil, rule: string|nil }
function M.last_decider()
  return vim.deepcopy(H.decider or {})
end

---------------------------------------------------------------------------------------
-- Built-in resolvers
---------------------------------------------------------------------------------------

-- The result of an auto_approve function: true, false, "deny" or nil (the resolver
-- decisions are accepted as well).
function H.from_function(result, what)
  if result == true then
    return "approve"
  elseif result == false then
    return "require_approval"
  elseif result == nil then
    return nil
  elseif type(result) == "string" and H.DECISIONS[result] then
    return result
  end
  error(
    ('%s returned %s; it should return true, false, "deny" or nil'):format(
      what,
      type(result) == "string" and ("%q"):format(result) or type(result)
    ),
    0
  )
end

-- A built-in approval holds only inside the project: a call of a file tool with a
-- path outside the project roots is passed on (the next resolver may approve it; if
-- none does, it waits for the user). See flemma.tools.scope.
function H.scoped(decision, tool_name, input, ctx)
  if decision ~= "approve" then
    return decision
  end
  local ok, inside =
    pcall(require("flemma.policy.scope").is_inside, ctx.bufnr, require("flemma.tools").get(tool_name), input)
  if ok and inside then
    return decision
  end
  return nil
end

-- A policy (list of names and presets, or a function) applied to one call. A list's
-- approvals are scoped to the project; a function is the user's own and is not.
function H.apply(policy, excluded, tool_name, input, ctx, what)
  if type(policy) == "function" then
    return H.from_function(policy(tool_name, input, ctx), what)
  elseif type(policy) == "table" then
    local expanded = presets.expand(policy, { presets = H.tools_config().presets, excluded = excluded })
    local decision, rule = presets.decide(expanded, tool_name, input, H.matcher(ctx))
    decision = H.scoped(decision, tool_name, input, ctx)
    H.rule = decision and rule or nil
    return decision
  end
  return nil
end

function H.tools_config()
  return (H.config or require("flemma.core.config").get()).tools or {}
end

-- The frontmatter the built-in resolvers act on: the one of the running chain, else
-- the buffer's.
function H.buffer_fm(ctx)
  if H.active ~= nil then
    return H.active or nil
  end
  return (H.frontmatter(ctx))
end

-- The buffer's frontmatter options, or nil (no buffer), or nil and the error of a
-- frontmatter that does not evaluate.
function H.frontmatter(ctx)
  if type(ctx.bufnr) ~= "number" or not vim.api.nvim_buf_is_valid(ctx.bufnr) then
    return nil
  end
  local ok, opts, err = pcall(require("flemma.chat.frontmatter").get, ctx.bufnr)
  if not ok then
    return nil, util.message(opts)
  end
  if opts == nil then
    return nil, err or "the frontmatter did not evaluate"
  end
  return opts
end

function H.config_resolver(tool_name, input, ctx)
  local fm = H.buffer_fm(ctx)
  if fm and fm.auto_approve ~= nil then
    return nil -- the buffer sets its own policy; the frontmatter resolver decides
  end
  return H.apply(H.tools_config().auto_approve, nil, tool_name, input, ctx, "tools.auto_approve")
end

function H.frontmatter_resolver(tool_name, input, ctx)
  local fm = H.buffer_fm(ctx)
  if not fm or fm.auto_approve == nil then
    return nil
  end
  return H.apply(fm.auto_approve, fm.auto_approve_excluded, tool_name, input, ctx, "flemma.opt.tools.auto_approve")
end

-- A resolver that loads `tools.auto_approve` given as a module path: the module returns
-- a function(tool_name, input, ctx) or a table with such a `resolve` function.
function H.module_resolver(path)
  return function(tool_name, input, ctx)
    local fm = H.buffer_fm(ctx)
    if fm and fm.auto_approve ~= nil then
      return nil
    end
    local ok, mod = pcall(require, path)
    if not ok then
      error(("cannot load approval module `%s` (tools.auto_approve): %s"):format(path, util.message(mod)), 0)
    end
    local fn = type(mod) == "function" and mod or (type(mod) == "table" and mod.resolve)
    if type(fn) ~= "function" then
      error(("approval module `%s` should return a function or a table with a `resolve` function"):format(path), 0)
    end
    return H.from_function(fn(tool_name, input, ctx), "approval module `" .. path .. "`")
  end
end

function H.configured(policy)
  if type(policy) == "table" then
    return next(policy) ~= nil
  end
  return policy ~= nil
end

function H.sandbox_resolver(tool_name, input, ctx)
  local tools_cfg = H.tools_config()
  if tools_cfg.auto_approve_sandboxed == false then
    return nil
  end
  local fm = H.buffer_fm(ctx)
  local policy = tools_cfg.auto_approve
  if fm and fm.auto_approve ~= nil then
    policy = fm.auto_approve
    if vim.tbl_contains(fm.auto_approve_excluded or {}, tool_name) then
      return nil
    end
  end
  if not H.configured(policy) then
    return nil
  end
  local ok_tools, tools = pcall(require, "flemma.tools")
  if not ok_tools or type(tools) ~= "table" or type(tools.get) ~= "function" then
    return nil
  end
  local def = tools.get(tool_name)
  if type(def) ~= "table" or not vim.tbl_contains(def.capabilities or {}, "can_auto_approve_if_sandboxed") then
    return nil
  end
  local ok_sb, sandbox = pcall(require, "flemma.policy.sandbox")
  if not ok_sb or type(sandbox) ~= "table" then
    return nil
  end
  if not sandbox.is_enabled() then
    return nil
  end
  if not sandbox.is_available() then
    return nil
  end
  return H.scoped("approve", tool_name, input, ctx)
end

-- Whether a tool's rules are path patterns (it declares `paths` and is not bash).
function H.is_path_tool(name)
  local def = require("flemma.tools").get(name)
  return type(def) == "table" and def.paths ~= nil
end

-- Raises one line naming the first malformed rule of a list (`bash(git *`, `bash()`,
-- a pattern the shell-word parser cannot read).
function H.check_rules(list, where)
  for i, entry in ipairs(type(list) == "table" and list or {}) do
    local problem = type(entry) == "string" and require("flemma.policy.commands").problem(entry, H.is_path_tool)
    if problem then
      util.error(("`%s[%d]`: the rule %q %s"):format(where, i, entry, problem))
    end
  end
end

--- Registers the built-in resolvers for `config` (replacing those of an earlier setup;
--- resolvers registered by others stay).
---@param config flemma.Config
function M.setup(config)
  local tools_cfg = config.tools or {}
  presets.validate(tools_cfg.presets)
  -- The rules remembered in the user's configuration join the allow list, read now
  -- and again when the file is written in Neovim (:Flemma tool:rules).
  local remembered = require("flemma.policy.remembered")
  remembered.apply(H.is_path_tool)
  vim.api.nvim_create_autocmd("BufWritePost", {
    group = vim.api.nvim_create_augroup("flemma.remembered", { clear = true }),
    pattern = "auto_approve.json",
    callback = function(ev)
      if vim.fs.normalize(vim.fn.fnamemodify(ev.file, ":p")) == remembered.path() then
        remembered.apply(H.is_path_tool)
      end
    end,
  })
  local aa = tools_cfg.auto_approve
  presets.check_risks(type(aa) == "table" and aa or nil, "tools.auto_approve")
  H.check_rules(type(aa) == "table" and aa or nil, "tools.auto_approve")
  for name, preset in pairs(type(tools_cfg.presets) == "table" and tools_cfg.presets or {}) do
    for key, list in pairs(preset) do
      H.check_rules(list, ("tools.presets[%q].%s"):format(name, key))
    end
  end
  for _, key in ipairs({ "ask", "deny" }) do
    local list = tools_cfg[key]
    for i, entry in ipairs(type(list) == "table" and list or {}) do
      if type(entry) ~= "string" or (presets.is_preset(entry) and not presets.prefix(entry)) then
        util.error(
          ("`tools.%s[%d]` should be a tool name, a rule TOOL(PATTERN), risk:LEVEL or NAME:*, not %s"):format(
            key,
            i,
            vim.inspect(entry)
          )
        )
      end
    end
    presets.check_risks(list, "tools." .. key)
    H.check_rules(list, "tools." .. key)
  end
  if type(aa) == "table" then
    for i, entry in ipairs(aa) do
      if type(entry) ~= "string" then
        util.error(("`tools.auto_approve[%d]` should be a tool name or a $preset, not %s"):format(i, type(entry)))
      end
      if presets.is_preset(entry) and not presets.prefix(entry) and not presets.all(tools_cfg.presets)[entry] then
        util.error(presets.unknown_message(entry, tools_cfg.presets) .. " in `tools.auto_approve`")
      end
    end
  end
  for _, name in ipairs(H.builtin) do
    H.resolvers[name] = nil
  end
  H.builtin = {}
  H.config = config

  local function builtin(name, def)
    M.register(name, def)
    table.insert(H.builtin, name)
  end

  if type(aa) == "string" then
    builtin(aa, {
      description = "tools.auto_approve module",
      priority = 100,
      resolve = H.module_resolver(aa),
    })
  else
    builtin(M.CONFIG, {
      description = "tools.auto_approve from the configuration (list or function)",
      priority = 100,
      resolve = H.config_resolver,
    })
  end
  builtin(M.FRONTMATTER, {
    description = "flemma.opt.tools.auto_approve from the buffer's frontmatter",
    priority = 90,
    resolve = H.frontmatter_resolver,
  })
  builtin(M.SANDBOX, {
    description = "tools that can_auto_approve_if_sandboxed, while the sandbox is enabled and available",
    priority = 25,
    resolve = H.sandbox_resolver,
  })
  if tools_cfg.require_approval == false then
    builtin(M.CATCH_ALL, {
      description = "tools.require_approval = false: approve every tool call (file tools inside the project)",
      priority = 0,
      resolve = function(tool_name, input, ctx)
        return H.scoped("approve", tool_name, input, ctx)
      end,
    })
  end
end

-- Nested calls (flemma.tools.call) go through this chain as well.
require("flemma.tools").set_resolver(function(name, args, ctx)
  return M.resolve(name, args, ctx)
end)

return M
