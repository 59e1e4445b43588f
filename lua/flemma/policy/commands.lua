--- Per-command approval rules: `"bash(git status)"`, `"bash(npm run *)"`, `"bash(git *)"`
--- in `auto_approve`, presets and deny lists. A command line is split by the native
--- shell-word parser into its simple commands (`a && b`, `;`, `|`, `$(...)`, backticks,
--- subshells, process substitutions each give their own); it is approved only when
--- every one of them matches an allow rule, and denied when any one matches a deny
--- rule. A line the parser cannot fully follow is approved by no rule (it waits).
---
--- A rule's words are compared with the command's words after quote removal: a word
--- `*` alone at the end matches any remaining words (none included), elsewhere any one
--- word; a word holding `*` matches as a glob within one word; any other word matches
--- itself. A command word holding an expansion (`$X`, `$(...)`, a glob) only matches
--- `*`. Redirections are words at the end of their command (`git log > out` is
--- `git log > out`).
local native = require("flemma.core.native")

local M = {}
local H = {}

--- The words of a rule's pattern, or nil and why it is not one simple command.
---@param pattern string
---@return { words: string[], dynamic: boolean[] }|nil
---@return string|nil err
function M.pattern(pattern)
  local cmds, why = native.shellwords(pattern)
  if not cmds then
    return nil, why
  end
  if #cmds ~= 1 then
    return nil, "a rule names one simple command"
  end
  return cmds[1]
end

--- The simple commands of a command line, or nil and why it is not understood.
---@param line string
---@return { words: string[], dynamic: boolean[] }[]|nil
---@return string|nil err
function M.split(line)
  return native.shellwords(line)
end

-- A glob word (`*` any run of characters) as an anchored Lua pattern.
function H.glob(word)
  return "^" .. word:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
end

--- Whether one simple command matches one rule pattern (both as M.split gives them).
---@param pat { words: string[], dynamic: boolean[] }
---@param cmd { words: string[], dynamic: boolean[] }
---@return boolean
function M.match_words(pat, cmd)
  local np, nc = #pat.words, #cmd.words
  for i = 1, np do
    local pw, wild = pat.words[i], pat.dynamic[i] and pat.words[i]:find("*", 1, true)
    if wild and pw == "*" and i == np then
      return true
    end
    local cw = cmd.words[i]
    if cw == nil then
      return false
    end
    if wild and pw == "*" then -- luacheck: ignore 542
      -- any one word
    elseif wild then
      if cmd.dynamic[i] or not cw:find(H.glob(pw)) then
        return false
      end
    elseif cmd.dynamic[i] or cw ~= pw then
      return false
    end
  end
  return np == nc
end

--- The decision of allow and deny patterns for one command line: "deny" when a deny
--- pattern matches any of its simple commands, "approve" when each of them matches
--- an allow pattern, else nil. A line or pattern the parser does not follow decides
--- nothing (nil).
---@param line string
---@param allow string[]
---@param deny string[]
---@return "approve"|"deny"|nil
---@return string|nil rule the deny pattern that matched, or the allow patterns that did
---@return boolean|nil unsure true when deny patterns were given and the line is not understood
function M.decide(line, allow, deny)
  if type(line) ~= "string" then
    return nil
  end
  local cmds = M.split(line)
  if not cmds then
    -- Not understood: no rule approves it, and a deny rule may hide in it.
    return nil, nil, #(deny or {}) > 0
  end
  if #cmds == 0 then
    return nil
  end
  local function pats(list)
    local out = {}
    for _, p in ipairs(list or {}) do
      out[#out + 1] = M.pattern(p)
    end
    return out
  end
  local denies = pats(deny)
  for _, cmd in ipairs(cmds) do
    for j, p in ipairs(denies) do
      if M.match_words(p, cmd) then
        return "deny", deny[j]
      end
    end
  end
  local allows = pats(allow)
  if #allows == 0 then
    return nil
  end
  local used, seen = {}, {}
  for _, cmd in ipairs(cmds) do
    local ok = false
    for j, p in ipairs(allows) do
      if M.match_words(p, cmd) then
        ok = true
        if not seen[j] then
          seen[j] = true
          used[#used + 1] = allow[j]
        end
        break
      end
    end
    if not ok then
      return nil
    end
  end
  return "approve", table.concat(used, ", ")
end

-- A path pattern as an anchored Lua pattern: `**` any run of characters, `*` any run
-- without `/`.
function H.path_glob(pat)
  local out = pat:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0")
  out = out:gsub("%*%*", "\1"):gsub("%*", "[^/]*"):gsub("\1", ".*")
  return "^" .. out .. "$"
end

--- Whether an absolute path matches one path pattern: an absolute pattern (or `~/...`)
--- as it is, a relative one below any of `roots` (`src/*` is every file directly in
--- the project's `src`, `src/**` every file below it).
---@param path string absolute, normalized
---@param pattern string
---@param roots string[] absolute, normalized
---@return boolean
function M.match_path(path, pattern, roots)
  pattern = vim.trim(pattern)
  if pattern == "" then
    return false
  end
  if pattern:sub(1, 1) == "~" then
    pattern = vim.fs.normalize(pattern)
  end
  if pattern:sub(1, 1) == "/" then
    return path:find(H.path_glob(pattern)) ~= nil
  end
  for _, root in ipairs(roots) do
    local base = root == "/" and "" or root
    if path:find(H.path_glob(base .. "/" .. pattern)) then
      return true
    end
  end
  return false
end

--- The decision of path patterns for the paths of one call: "deny" when any path
--- matches a deny pattern, "approve" when each matches an allow pattern, else nil.
---@param paths string[] absolute, resolved
---@param roots string[] the project roots, resolved
---@param allow string[]
---@param deny string[]
---@return "approve"|"deny"|nil
---@return string|nil rule the deny pattern that matched, or the allow patterns that did
function M.decide_paths(paths, roots, allow, deny)
  if #paths == 0 then
    return nil
  end
  for _, path in ipairs(paths) do
    for _, p in ipairs(deny or {}) do
      if M.match_path(path, p, roots) then
        return "deny", p
      end
    end
  end
  if #(allow or {}) == 0 then
    return nil
  end
  local used, seen = {}, {}
  for _, path in ipairs(paths) do
    local hit
    for _, p in ipairs(allow) do
      if M.match_path(path, p, roots) then
        hit = p
        break
      end
    end
    if not hit then
      return nil
    end
    if not seen[hit] then
      seen[hit] = true
      used[#used + 1] = hit
    end
  end
  return "approve", table.concat(used, ", ")
end

--- Why the pattern of a rule `TOOL(PATTERN)` cannot be used, or nil: its form
--- (flemma.isolated.presets.rule_problem), then the shell-word parser (a pattern is
--- one simple command).
--- A rule of a tool that declares `paths` holds a path pattern (`read(src/*)`): only
--- its form is checked.
---@param entry string
---@param is_path? fun(tool: string): boolean whether the rule's tool takes path rules
---@return string|nil
function M.problem(entry, is_path)
  local presets = require("flemma.isolated.presets")
  local why = presets.rule_problem(entry)
  if why then
    return why
  end
  local tool, pattern = presets.rule(entry)
  if not tool or (is_path and is_path(tool)) then
    return nil
  end
  local ok, err = M.pattern(pattern)
  if not ok then
    return ("has a pattern the shell-word parser cannot read: %s"):format(err or "?")
  end
  return nil
end

--- The rule matcher presets.decide takes: the decision of a tool's rules for one call
--- (rules look at the input's `command`).
---@param allow string[]
---@param deny string[]
---@param input table
---@return "approve"|"deny"|nil
---@return string|nil rule
function M.matcher(allow, deny, input)
  return M.decide(type(input) == "table" and input.command or nil, allow, deny)
end

return M
