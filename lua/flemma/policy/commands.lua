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
function M.decide(line, allow, deny)
  if type(line) ~= "string" then
    return nil
  end
  local cmds = M.split(line)
  if not cmds or #cmds == 0 then
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
