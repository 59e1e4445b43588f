--- Approval presets: named sets of tools to approve or deny, referenced as `$name` in
--- `tools.auto_approve` and `flemma.opt.tools.auto_approve`.

local M = {}
local H = {}

-- Errors as flemma.core.util.error raises them (this module cannot require it: it also
-- runs inside the frontmatter interpreter).
local util = {
  error = function(msg)
    error("(flemma) " .. msg, 0)
  end,
}

---@class flemma.approval.Preset
---@field approve? string[] tool names approved by the preset
---@field deny? string[] tool names denied by the preset (deny wins over approve)

--- The presets that ship with Flemma; `tools.presets` may override them by name.
---@type table<string, flemma.approval.Preset>
H.builtin = {
  ["$readonly"] = { approve = { "read", "grep", "glob", "find", "ls" } },
  -- The calculators only compute (no files, processes or network): nothing to ask about.
  -- `todo` changes only the chat's own task list (a result block), never a file; it is
  -- not in $readonly, whose tools change nothing at all.
  ["$default"] = {
    approve = { "read", "write", "edit", "grep", "glob", "find", "ls", "calculator", "calculator_async", "todo" },
  },
  -- Every tool whose risk level is safe (`:help flemma-risk`).
  ["$safe"] = { approve = { "risk:safe" } },
}

-- Risk levels an entry `risk:LEVEL` may name (flemma.tools.RISKS).
H.RISKS = { safe = true, medium = true, dangerous = true, destructive = true }

--- The risk level of an entry `risk:LEVEL`, or nil.
---@param entry string
---@return string|nil
function M.risk_entry(entry)
  return type(entry) == "string" and entry:match("^risk:(%a+)$") or nil
end

--- Checks an entry `risk:LEVEL`; raises on an unknown level.
function H.check_risk(entry, where)
  local level = M.risk_entry(entry)
  if type(entry) == "string" and entry:sub(1, 5) == "risk:" and not (level and H.RISKS[level]) then
    util.error(
      ("`%s`: %s names no risk level (risk:safe, risk:medium, risk:dangerous, risk:destructive)"):format(
        where,
        vim.inspect(entry)
      )
    )
  end
end

--- Checks the `risk:LEVEL` entries of a list; raises on an unknown level.
function M.check_risks(list, where)
  for i, entry in ipairs(type(list) == "table" and list or {}) do
    H.check_risk(entry, ("%s[%d]"):format(where, i))
  end
end

--- A copy of the built-in presets.
---@return table<string, flemma.approval.Preset>
function M.builtin()
  return vim.deepcopy(H.builtin)
end

--- The tool-name pattern of a dynamic entry, or nil: `$mcp` (every `server:tool`),
--- `$mcp:NAME` (the tools of one MCP server) and `"NAME:*"` (tools named `NAME:...`).
--- Tools from MCP servers are registered as `server:tool`; this module only knows
--- the naming rule.
---@param entry string
---@return string|nil prefix, "" for every name holding a `:`
function M.prefix(entry)
  if entry == "$mcp" then
    return ""
  end
  local server = entry:match("^%$mcp:([%w_%-]+)$") or entry:match("^([%w_%-]+):%*$")
  return server and (server .. ":") or nil
end

--- Whether tool `name` is one a dynamic entry (`$mcp`, `$mcp:NAME`, `NAME:*`) selects.
---@param entry string
---@param name string
---@return boolean
function M.matches(entry, name)
  local prefix = M.prefix(entry)
  return prefix ~= nil and H.prefixed({ prefix }, name)
end

function H.prefixed(prefixes, tool_name)
  for _, prefix in ipairs(prefixes) do
    if tool_name:find(":", 1, true) and tool_name:sub(1, #prefix) == prefix then
      return true
    end
  end
  return false
end

--- The tool and pattern of a per-command rule `"tool(pattern)"` (`"bash(git *)"`), or nil.
---@param entry string
---@return string|nil tool
---@return string|nil pattern
function M.rule(entry)
  if type(entry) ~= "string" then
    return nil
  end
  local tool, pattern = entry:match("^([%w_%-:%.]+)%((.*)%)$")
  return tool, pattern
end

--- Why an entry that looks like a per-command rule (it holds a parenthesis) is not a
--- well-formed one, or nil: `bash(git *` (unbalanced), `bash()` (empty pattern).
--- Only the form is checked here (the frontmatter interpreter has no shell parser);
--- flemma.policy.commands.problem also parses the pattern.
---@param entry any
---@return string|nil
function M.rule_problem(entry)
  if type(entry) ~= "string" or not entry:find("[()]") then
    return nil
  end
  local tool, pattern = M.rule(entry)
  if not tool then
    return "is not a rule TOOL(PATTERN) (unbalanced parentheses?), e.g. bash(git *)"
  end
  if pattern:match("^%s*$") then
    return "has an empty pattern; e.g. bash(git status)"
  end
  local depth = 0
  for c in pattern:gmatch("[()]") do
    depth = depth + (c == "(" and 1 or -1)
    if depth < 0 then
      break
    end
  end
  if depth ~= 0 then
    return "has unbalanced parentheses in its pattern"
  end
  return nil
end

--- Checks the rule entries of a list; raises naming the first malformed one.
---@param list any
---@param where string option path for messages
function M.check_rules(list, where)
  for i, entry in ipairs(type(list) == "table" and list or {}) do
    local problem = M.rule_problem(entry)
    if problem then
      util.error(("`%s[%d]`: the rule %q %s"):format(where, i, entry, problem))
    end
  end
end

function H.add_rule(rules, entry)
  local tool, pattern = M.rule(entry)
  rules[tool] = rules[tool] or {}
  table.insert(rules[tool], pattern)
end

--- Whether a list entry names a preset (starts with `$`).
---@param name string
---@return boolean
function M.is_preset(name)
  return type(name) == "string" and name:sub(1, 1) == "$"
end

--- Checks user presets (`tools.presets`); raises a util.error naming the bad entry.
---@param presets table|nil
---@param where? string option path for messages (default "tools.presets")
function M.validate(presets, where)
  where = where or "tools.presets"
  if presets == nil then
    return
  end
  if type(presets) ~= "table" then
    util.error(("`%s` should be a table, not %s"):format(where, type(presets)))
  end
  for name, preset in pairs(presets) do
    if not M.is_preset(name) then
      util.error(("`%s`: preset names start with `$`, not %s"):format(where, vim.inspect(name)))
    end
    local path = ("%s[%q]"):format(where, name)
    if type(preset) ~= "table" then
      util.error(("`%s` should be a table with `approve` and/or `deny` lists, not %s"):format(path, type(preset)))
    end
    for key, list in pairs(preset) do
      if key ~= "approve" and key ~= "deny" then
        util.error(("`%s`: unknown key %s; a preset has `approve` and `deny` lists"):format(path, vim.inspect(key)))
      end
      if type(list) ~= "table" or not vim.islist(list) then
        util.error(("`%s.%s` should be a list of tool names, not %s"):format(path, key, type(list)))
      end
      for _, tool in ipairs(list) do
        if type(tool) ~= "string" or M.is_preset(tool) then
          util.error(("`%s.%s` should hold tool names, not %s"):format(path, key, vim.inspect(tool)))
        end
        H.check_risk(tool, path .. "." .. key)
      end
      M.check_rules(list, path .. "." .. key)
    end
  end
end

--- All presets: the built-in ones with the user's added or overriding them by name.
---@param user? table<string, flemma.approval.Preset>
---@return table<string, flemma.approval.Preset>
function M.all(user)
  local out = vim.deepcopy(H.builtin)
  for name, preset in pairs(user or {}) do
    out[name] = vim.deepcopy(preset)
  end
  return out
end

--- Sorted names of all presets.
---@param user? table<string, flemma.approval.Preset>
---@return string[]
function M.names(user)
  local names = vim.tbl_keys(M.all(user))
  table.sort(names)
  return names
end

---@class flemma.approval.Policy
---@field approve table<string, true> tools approved
---@field deny table<string, true> tools denied (wins over approve)

--- Expands a list of tool names and `$presets` into approve and deny sets: the union of
--- every entry; `excluded` tools are filtered out of the approve set (a tool removed
--- from a list that still holds its preset). Raises on an unknown preset.
---@param list string[]
---@param opts? { presets?: table<string, flemma.approval.Preset>, excluded?: string[] }
---@return flemma.approval.Policy
function M.expand(list, opts)
  opts = opts or {}
  local all = M.all(opts.presets)
  local policy = {
    approve = {},
    deny = {},
    approve_prefixes = {},
    deny_prefixes = {},
    excluded = {},
    approve_risks = {},
    deny_risks = {},
    approve_rules = {},
    deny_rules = {},
  }
  for _, entry in ipairs(list or {}) do
    local prefix = type(entry) == "string" and M.prefix(entry) or nil
    if M.rule(entry) then
      H.add_rule(policy.approve_rules, entry)
    elseif M.risk_entry(entry) then
      policy.approve_risks[M.risk_entry(entry)] = true
    elseif prefix then
      policy.approve_prefixes[#policy.approve_prefixes + 1] = prefix
    elseif M.is_preset(entry) then
      local preset = all[entry]
      if not preset then
        util.error(M.unknown_message(entry, opts.presets))
      end
      for _, tool in ipairs(preset.approve or {}) do
        local p = M.prefix(tool)
        if M.rule(tool) then
          H.add_rule(policy.approve_rules, tool)
        elseif M.risk_entry(tool) then
          policy.approve_risks[M.risk_entry(tool)] = true
        elseif p then
          policy.approve_prefixes[#policy.approve_prefixes + 1] = p
        else
          policy.approve[tool] = true
        end
      end
      for _, tool in ipairs(preset.deny or {}) do
        local p = M.prefix(tool)
        if M.rule(tool) then
          H.add_rule(policy.deny_rules, tool)
        elseif M.risk_entry(tool) then
          policy.deny_risks[M.risk_entry(tool)] = true
        elseif p then
          policy.deny_prefixes[#policy.deny_prefixes + 1] = p
        else
          policy.deny[tool] = true
        end
      end
    elseif type(entry) == "string" then
      policy.approve[entry] = true
    end
  end
  for _, tool in ipairs(opts.excluded or {}) do
    policy.approve[tool] = nil
    policy.excluded[tool] = true
  end
  return policy
end

--- Where M.decide learns a tool's risk level: flemma.tools gives its lookup when it
--- loads (this module sits below it). Inside the frontmatter interpreter there is none:
--- a risk entry decides nothing there.
---@param fn fun(tool_name: string): string|nil
function M.set_risk_lookup(fn)
  H.risk_of = fn
end

--- The decision of an expanded policy for one tool: "deny", "approve" or nil.
--- Per-command rules (`"bash(git *)"`) decide only through `match`, the host's rule
--- matcher (flemma.policy.commands.matcher: native code, which the frontmatter
--- interpreter has not): without it they approve nothing.
---@param policy flemma.approval.Policy
---@param tool_name string
---@param input? table the call's input, for per-command rules
---@param match? fun(allow: string[], deny: string[], input: table, tool_name: string): "approve"|"deny"|nil
---@return "approve"|"deny"|nil
---@return string|nil rule the per-command rule that decided (`bash(git *)`), if one did
function M.decide(policy, tool_name, input, match)
  if policy.deny[tool_name] or H.prefixed(policy.deny_prefixes or {}, tool_name) then
    return "deny"
  end
  local allow_rules = (policy.approve_rules or {})[tool_name]
  local deny_rules = (policy.deny_rules or {})[tool_name]
  local by_rule, rule
  if match and (allow_rules or deny_rules) then
    local unsure
    by_rule, rule, unsure = match(allow_rules or {}, deny_rules or {}, input or {}, tool_name)
    rule = rule and ("%s(%s)"):format(tool_name, rule) or nil
    if by_rule == "deny" then
      return "deny", rule
    elseif unsure then
      -- Deny rules the call cannot be checked against: nothing approves it.
      return nil
    end
  end
  local risk
  if next(policy.deny_risks or {}) ~= nil or next(policy.approve_risks or {}) ~= nil then
    risk = H.risk_of and H.risk_of(tool_name) or nil
  end
  if risk and (policy.deny_risks or {})[risk] then
    return "deny"
  end
  if policy.approve[tool_name] then
    return "approve"
  end
  if by_rule == "approve" then
    return "approve", rule
  end
  -- A risk level approves only tools registered in Lua: the risk an MCP server
  -- (`server:tool`) gives its own tools is its own claim.
  if
    risk
    and (policy.approve_risks or {})[risk]
    and not (policy.excluded or {})[tool_name]
    and not tool_name:find(":", 1, true)
  then
    return "approve"
  end
  if H.prefixed(policy.approve_prefixes or {}, tool_name) and not (policy.excluded or {})[tool_name] then
    return "approve"
  end
  return nil
end

--- Whether a call is named by an ask or deny list (`tools.ask`, `tools.deny`, the
--- frontmatter's): a tool name, `risk:LEVEL`, `$mcp`, `$mcp:NAME`, `NAME:*`, or a rule
--- `TOOL(PATTERN)` that matches the call (for a compound command, any one of its
--- commands). Rules decide only through `match` (the host's matcher, as in M.decide).
---@param list string[]|nil
---@param tool_name string
---@param input? table
---@param match? fun(allow: string[], deny: string[], input: table, tool_name: string): "approve"|"deny"|nil, string|nil
---@return boolean
---@return string|nil entry the entry that named it
---@return boolean|nil unsure named only because the matcher could not read the call
function M.listed(list, tool_name, input, match)
  local rules = {}
  for _, entry in ipairs(type(list) == "table" and list or {}) do
    local tool, pattern = M.rule(entry)
    if tool then
      if tool == tool_name then
        rules[#rules + 1] = pattern
      end
    elseif entry == tool_name or M.matches(entry, tool_name) then
      return true, entry
    elseif M.risk_entry(entry) and H.risk_of and H.risk_of(tool_name) == M.risk_entry(entry) then
      return true, entry
    end
  end
  if #rules > 0 and match then
    local decision, rule, unsure = match({}, rules, input or {}, tool_name)
    if decision == "deny" then
      return true, ("%s(%s)"):format(tool_name, rule)
    elseif unsure then
      -- A call the matcher cannot read (a command line the parser does not follow)
      -- may hide what a rule names: it counts as named, and `unsure` says so.
      return true, ("%s(%s)"):format(tool_name, rules[1]), true
    end
  end
  return false
end

--- "unknown preset `$x`" with a "did you mean" suggestion when one is close.
---@param name string
---@param user? table<string, flemma.approval.Preset>
---@return string
function M.unknown_message(name, user)
  local names = M.names(user)
  local msg = ("unknown preset `%s`"):format(name)
  local close = M.suggest(name, names)
  if close then
    return msg .. ("; did you mean `%s`?"):format(close)
  end
  return msg .. "; known presets: " .. table.concat(names, ", ")
end

-- Levenshtein distance, small strings only.
function H.distance(a, b)
  local la, lb = #a, #b
  local prev = {}
  for j = 0, lb do
    prev[j] = j
  end
  for i = 1, la do
    local cur = { [0] = i }
    local ca = a:byte(i)
    for j = 1, lb do
      local cost = ca == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[lb]
end

--- The candidate closest to `name` (case-insensitive edit distance), or nil when none
--- is close enough to be a likely typo.
---@param name string
---@param candidates string[]
---@return string|nil
function M.suggest(name, candidates)
  local best, best_d
  local lname = name:lower()
  local limit = math.max(2, math.floor(#name / 3))
  for _, c in ipairs(candidates) do
    -- The distance is at least the difference in length: skip what cannot be close.
    if math.abs(#c - #name) <= limit then
      local d = H.distance(lname, c:lower())
      if best_d == nil or d < best_d or (d == best_d and c < best) then
        best, best_d = c, d
      end
    end
  end
  if best and best_d <= limit then
    return best
  end
  return nil
end

return M
