--- "Approve and remember" (`:Flemma tool:approve always`): the narrowest allow rule
--- for one tool call, and adding it where the user chooses: this chat's frontmatter
--- (a buffer edit appending to `flemma.opt.tools.auto_approve`) or the user's
--- configuration (the file of remembered rules, flemma.policy.remembered).
---
--- The rule of a call: for a command tool (`bash`), per simple command of its line,
--- the words up to the first that looks like data (a path or file name, a URL, a
--- number, an option, a quoted string or any word with spaces or symbols), then `*`
--- (`git commit -m "x"` -> `bash(git commit *)`); for a tool that declares `paths`,
--- each path's folder relative to the project (`read(src/lib/*)`); else the tool's name.
local commands = require("flemma.policy.commands")
local presets = require("flemma.isolated.presets")

local M = {}
local H = {}

-- A word kept in a rule: letters, digits and `_ - + : @ ,`, not starting with `-` or
-- a digit (an option, a number), at most H.MAX_WORD bytes and not a secret (a key
-- Flemma resolved, a secret-looking environment value: util.redact), which the rule
-- would write into the frontmatter or the rules file. Anything else is data.
H.MAX_WORD = 40
function H.is_data(word, dynamic)
  if dynamic or word == "" then
    return true
  end
  if word:find("^[%-%d]") or #word > H.MAX_WORD or H.secret(word) then
    return true
  end
  return word:find("[^%w_%-%+:@,]") ~= nil
end

function H.secret(word)
  return require("flemma.core.util").redact(word) ~= word
end

-- A command word as the rule's pattern writes it (quoted when the shell would read it
-- otherwise).
function H.quote(word)
  if word:find("^[%w_%-%+:@,%./~=]+$") then
    return word
  end
  return "'" .. word:gsub("'", "'\\''") .. "'"
end

-- The rules of a command line, one per simple command.
function H.command_rules(name, line)
  local cmds, why = commands.split(line)
  if not cmds then
    return nil, ("the command line is one no rule can approve (%s)"):format(why or "not understood")
  end
  if #cmds == 0 then
    return nil, "the command line is empty"
  end
  local out = {}
  for _, cmd in ipairs(cmds) do
    local words, dynamic = cmd.words, cmd.dynamic
    if #words == 0 or dynamic[1] then
      return nil, "a command word is an expansion"
    end
    if H.secret(words[1]) then
      return nil, "a command word holds a secret"
    end
    local kept, cut = { H.quote(words[1]) }, false
    for i = 2, #words do
      if H.is_data(words[i], dynamic[i]) then
        cut = true
        break
      end
      kept[#kept + 1] = words[i]
    end
    out[#out + 1] = ("%s(%s%s)"):format(name, table.concat(kept, " "), cut and " *" or "")
  end
  return out
end

-- The rules of a call of a tool that declares `paths`: each path's folder, relative
-- to the project root that holds it.
function H.path_rules(bufnr, name, def, input)
  local scope = require("flemma.policy.scope")
  local ok, paths, roots = pcall(scope.real_paths, bufnr, def, input)
  if not ok then
    return nil, ("its paths cannot be resolved (%s)"):format(tostring(paths))
  end
  if not paths or #paths == 0 then
    return { name }
  end
  local out = {}
  for _, path in ipairs(paths) do
    local rel
    for _, root in ipairs(roots) do
      if path ~= root and scope.inside(path, root) then
        rel = path:sub(#root + 2)
        break
      end
    end
    if not rel then
      return nil, ("%s is outside the project, where no list approves"):format(path)
    end
    local dir = rel:match("^(.*)/[^/]*$")
    if dir and dir:find("[%*%(%)]") then
      return nil, ("the folder of %s holds characters a rule cannot name"):format(path)
    end
    out[#out + 1] = ("%s(%s)"):format(name, dir and (dir .. "/*") or "*")
  end
  return out
end

--- The narrowest allow rules for one call (deduplicated, in order), or nil and why
--- none can be made.
---@param bufnr integer
---@param name string the tool's name
---@param input table|nil the call's input
---@return string[]|nil rules
---@return string|nil why
function M.rules(bufnr, name, input)
  if type(input) ~= "table" then
    return nil, "its input is not a JSON object"
  end
  local def = require("flemma.tools").get(name)
  local rules, why
  if type(input.command) == "string" and not (type(def) == "table" and def.paths) then
    rules, why = H.command_rules(name, input.command)
  elseif type(def) == "table" and def.paths then
    rules, why = H.path_rules(bufnr, name, def, input)
  else
    rules = { name }
  end
  if not rules then
    return nil, why
  end
  local out, seen = {}, {}
  for _, r in ipairs(rules) do
    if presets.rule_problem(r) then
      return nil, ("the rule %s would not be well-formed"):format(r)
    end
    if not seen[r] then
      seen[r] = true
      out[#out + 1] = r
    end
  end
  return out
end

--- Why the rules cannot go into the buffer's frontmatter, or nil: a JSON frontmatter,
--- one whose auto_approve is a function, or one that does not evaluate.
---@param bufnr integer
---@return string|nil
function M.frontmatter_problem(bufnr)
  local fm = require("flemma.chat.document").get(bufnr).frontmatter
  if not fm then
    return nil
  end
  if fm.lang ~= "lua" then
    return "this chat's frontmatter is not Lua"
  end
  local opts, err = require("flemma.chat.frontmatter").get(bufnr)
  if opts == nil then
    return "this chat's frontmatter does not evaluate: " .. tostring(err)
  end
  if type(opts.auto_approve) == "function" then
    return "this chat's auto_approve is a function"
  end
  return nil
end

--- Appends the rules to the buffer's Lua frontmatter as one line
--- `flemma.opt.tools.auto_approve:append({ ... })` before its closing fence (a
--- frontmatter is made at the top when there is none): one buffer edit, undone by `u`.
--- A frontmatter Flemma makes, or one trusted before, is trusted after the edit: the
--- user chose what it adds. Another is not: code that widens nothing now may widen
--- later (`os.time()`), and the user never read it; the trust question comes when it
--- widens. Raises when M.frontmatter_problem says why not.
---@param bufnr integer
---@param rules string[]
function M.add_to_frontmatter(bufnr, rules)
  local problem = M.frontmatter_problem(bufnr)
  if problem then
    require("flemma.core.util").error(problem)
  end
  local trust = require("flemma.chat.trust")
  local fm = require("flemma.chat.document").get(bufnr).frontmatter
  local was_fine = not fm or trust.is_trusted(bufnr)
  local quoted = {}
  for i, r in ipairs(rules) do
    quoted[i] = ("%q"):format(r)
  end
  local line = ("flemma.opt.tools.auto_approve:append({ %s })"):format(table.concat(quoted, ", "))
  if fm then
    local close = fm.last_line
    vim.api.nvim_buf_set_lines(bufnr, close - 1, close - 1, false, { line })
  else
    vim.api.nvim_buf_set_lines(bufnr, 0, 0, false, { "```lua", line, "```", "" })
  end
  if was_fine then
    trust.set(bufnr, "trusted")
  end
end

--- Adds the rules to the user's configuration: the file of remembered rules
--- (flemma.policy.remembered, `stdpath("config")/flemma/auto_approve.json`, read at
--- every setup()) and `tools.auto_approve` now. Raises, adding nothing, when that
--- file does not read or cannot be written, or `tools.auto_approve` is a function or
--- a module. Returns the file's path.
---@param rules string[]
---@return string path
function M.add_to_config(rules)
  return require("flemma.policy.remembered").add(rules, function(tool)
    local def = require("flemma.tools").get(tool)
    return type(def) == "table" and def.paths ~= nil
  end)
end

return M
