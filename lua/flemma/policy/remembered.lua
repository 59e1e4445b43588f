--- The approval rules remembered "in my configuration" (`:Flemma tool:approve always`,
--- issue 27): a JSON file, `stdpath("config")/flemma/auto_approve.json`,
--- `{ "auto_approve": [ "bash(git log *)", "read(src/lib/*)" ] }`, read at every
--- setup() and added to `tools.auto_approve` (the allow list only: the deny and ask
--- lists of setup() are checked first, as ever). It sits with the user's
--- configuration (not in the state folder) because it is configuration: rules the
--- user chose, kept with the dotfiles, reviewed and edited by hand
--- (`:Flemma tool:rules`).
---
--- Fails closed: a file that is not a regular file, is too large, is not JSON of that
--- shape or holds one entry that is not a tool name or a well-formed rule has none of
--- its rules applied, and says so in one error line at setup() and in
--- `:checkhealth flemma`. It is written whole (a temporary file renamed over it), and
--- never over a file that does not read: what the user wrote is not lost.
local config = require("flemma.core.config")
local util = require("flemma.core.util")

local M = {}
local H = {}

--- The largest file read, the most entries and the longest entry.
M.MAX_BYTES = 256 * 1024
M.MAX_RULES = 1000
M.MAX_ENTRY = 1000

-- The entries the last M.apply added to tools.auto_approve (not there before), the
-- list it added them to, and what it found: { path, count, problem, why_not }.
H.applied = {}
H.applied_to = nil
H.status = nil

--- The file's path.
---@return string
function M.path()
  return vim.fs.normalize(vim.fn.stdpath("config")) .. "/flemma/auto_approve.json"
end

-- Why an entry cannot be one of the file's: a tool name (MCP's `server:tool` too) or a
-- well-formed rule TOOL(PATTERN); presets, risk:LEVEL and NAME:* are setup()'s.
function H.entry_problem(entry, is_path)
  if type(entry) ~= "string" then
    return ("should be a string, not %s"):format(entry == vim.NIL and "null" or type(entry))
  end
  if entry == "" or #entry > M.MAX_ENTRY or entry:find("%c") then
    return ("should be a tool name or a rule of 1 to %d characters on one line"):format(M.MAX_ENTRY)
  end
  if entry:find("[()]") then
    local why = require("flemma.policy.commands").problem(entry, is_path)
    return why and ("the rule %q %s"):format(entry, why)
  end
  if not entry:find("^[%w_%-%.:]+$") or entry:find("^risk:") then
    return ("%q is not a tool name or a rule TOOL(PATTERN) (presets and risk levels go in setup())"):format(entry)
  end
  return nil
end

-- The file's text: the text, nil (no file) or false and why.
function H.text(path)
  local st = vim.uv.fs_stat(path)
  if not st then
    return nil
  end
  if st.type ~= "file" then
    return false, "is not a regular file"
  end
  if st.size > M.MAX_BYTES then
    return false, ("is larger than %s"):format(require("flemma.core.truncate").format_size(M.MAX_BYTES))
  end
  local fd, err = require("flemma.core.files").open_regular(path)
  if not fd then
    return false, ("cannot be read: %s"):format(err)
  end
  local data = vim.uv.fs_read(fd, M.MAX_BYTES + 1, 0)
  vim.uv.fs_close(fd)
  if not data then
    return false, "cannot be read"
  end
  return data
end

--- The file's entries, checked: the list (empty when there is no file), or nil and
--- why not (one line).
---@param is_path? fun(tool: string): boolean whether a tool's rules are path patterns
---@return string[]|nil entries
---@return string|nil problem
function M.read(is_path)
  local text, why = H.text(M.path())
  if text == nil then
    return {}
  elseif text == false then
    return nil, why
  end
  local ok, data = pcall(vim.json.decode, text, { luanil = { object = true, array = true } })
  if not ok then
    return nil, ("is not valid JSON (%s)"):format((tostring(data):gsub("%s+", " ")))
  end
  if type(data) ~= "table" or (next(data) ~= nil and vim.islist(data)) then
    return nil, 'should be an object { "auto_approve": [ ... ] }'
  end
  for k in pairs(data) do
    if k ~= "auto_approve" then
      return nil, ('has the key %s; only "auto_approve" is read'):format(vim.json.encode(tostring(k)))
    end
  end
  local list = data.auto_approve or {}
  if type(list) ~= "table" or (next(list) ~= nil and not vim.islist(list)) then
    return nil, '"auto_approve" should be a list of tool names and rules'
  end
  if #list > M.MAX_RULES then
    return nil, ('"auto_approve" has %d entries, more than %d'):format(#list, M.MAX_RULES)
  end
  for i, entry in ipairs(list) do
    local problem = H.entry_problem(entry, is_path)
    if problem then
      return nil, ('"auto_approve"[%d]: %s'):format(i, problem)
    end
  end
  return list
end

--- Adds the file's entries to `tools.auto_approve` of the configuration (taking out
--- first those an earlier call added), after setup() and when the file is written
--- in Neovim. A file that does not read adds nothing and says why in one error line;
--- a `tools.auto_approve` that is a function or a module takes none.
---@param is_path? fun(tool: string): boolean
function M.apply(is_path)
  -- What an earlier apply added to this same list (a setup() makes a new one).
  if H.applied_to == config.get_setup().tools.auto_approve then
    config.remove_auto_approve(H.applied)
  end
  H.applied, H.applied_to = {}, nil
  local path = M.path()
  local entries, problem = M.read(is_path)
  H.status = { path = path, count = entries and #entries or 0, problem = problem }
  if problem then
    util.notify(("%s %s: none of its rules are applied"):format(path, problem), vim.log.levels.ERROR)
    return
  end
  if #entries == 0 then
    return
  end
  if type(config.get_setup().tools.auto_approve) ~= "table" then
    H.status.why_not = "tools.auto_approve is a function or a module: its rules are not added to it"
    return
  end
  H.applied = config.add_auto_approve(entries)
  H.applied_to = config.get_setup().tools.auto_approve
end

--- What the last M.apply found: { path, count, problem?, why_not? }, or nil before it.
---@return { path: string, count: integer, problem?: string, why_not?: string }|nil
function M.status()
  return H.status and vim.deepcopy(H.status)
end

--- Adds rules to the file (made when missing) and to `tools.auto_approve`. Raises,
--- adding nothing, when the file does not read (it is left as it is) or cannot be
--- written. Returns the file's path.
---@param rules string[]
---@param is_path? fun(tool: string): boolean
---@return string path
function M.add(rules, is_path)
  local path = M.path()
  local entries, problem = M.read(is_path)
  if not entries then
    util.error(("%s %s; fix it (:Flemma tool:rules) or remove it, nothing was added"):format(path, problem))
  end
  if type(config.get_setup().tools.auto_approve) ~= "table" then
    util.error("`tools.auto_approve` is a function or a module; add the rule to it yourself")
  end
  local out = vim.deepcopy(entries)
  for _, r in ipairs(rules) do
    if not vim.tbl_contains(out, r) then
      out[#out + 1] = r
    end
  end
  H.write(path, out)
  M.apply(is_path)
  return path
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["tool:rules"] = {
  desc = "open the approval rules remembered in your configuration (auto_approve.json)",
  run = function()
    local path = M.path()
    local exists = vim.uv.fs_stat(path) ~= nil
    vim.fn.mkdir(vim.fs.dirname(path), "p")
    vim.cmd("split " .. vim.fn.fnameescape(path))
    if not exists then
      vim.api.nvim_buf_set_lines(0, 0, -1, false, { "{", '  "auto_approve": [', "  ]", "}" })
      util.notify(("no rules remembered yet; :w makes %s (read at setup() and on :w)"):format(path))
    end
  end,
}

-- Writes the file whole: a temporary file in its folder, renamed over it.
function H.write(path, entries)
  local lines = { "{", '  "auto_approve": [' }
  for i, e in ipairs(entries) do
    lines[#lines + 1] = "    " .. vim.json.encode(e) .. (i < #entries and "," or "")
  end
  vim.list_extend(lines, { "  ]", "}", "" })
  local dir = vim.fs.dirname(path)
  if vim.fn.isdirectory(dir) == 0 and vim.fn.mkdir(dir, "p") == 0 then
    util.error(("cannot make the folder %s; nothing was added"):format(dir))
  end
  local tmp = ("%s.%d.tmp"):format(path, vim.uv.os_getpid())
  local fd, err = vim.uv.fs_open(tmp, "w", 420) -- 0644
  local ok = fd and vim.uv.fs_write(fd, table.concat(lines, "\n"), 0)
  if fd then
    ok = vim.uv.fs_fsync(fd) and ok
    vim.uv.fs_close(fd)
  end
  local renamed, rerr = false, nil
  if ok then
    renamed, rerr = vim.uv.fs_rename(tmp, path)
  end
  if not renamed then
    os.remove(tmp)
    util.error(("cannot write %s: %s; nothing was added"):format(path, tostring(rerr or err or "write failed")))
  end
end

return M
