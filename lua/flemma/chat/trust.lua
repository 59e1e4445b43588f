--- Trusting a chat file's frontmatter, in the spirit of vim.secure.trust: a chat file
--- must not approve its own tool calls. Frontmatter may narrow the approval policy
--- freely; what widens it (approves a call the global policy would not, or any
--- auto_approve function) holds only once the user trusts that frontmatter in that
--- file. An answer is remembered for the chat file's real path (symlinks resolved)
--- together with the SHA-256 of its frontmatter text, in stdpath("state")/flemma/trust:
--- editing the conversation keeps it; editing the frontmatter, or the same text in
--- another file (a copy, a stranger's chat, the file moved or renamed), asks again.
--- A buffer without a file (unnamed) is answered for that buffer only, until Neovim
--- exits: nothing is written, and nothing carries over to a file it is saved as.
--- Entries of the older store, keyed by the text alone, no longer grant trust and are
--- dropped at the next write.
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@alias flemma.trust.State "trusted"|"denied"

-- The line format of the store: `v2 STATE HASH PATH` (one line per path).
H.VERSION = "v2"
-- Answers of this session that are not written (a prompt dismissed, or an unnamed
-- buffer): id -> state.
H.session = {}
-- The store as last read: { mtime, size, entries = path -> { state, hash } }.
H.store = nil
-- Per buffer: the frontmatter hash whose ignored widenings were reported, and which.
-- H.noticed: the `trust_noticed` field of each buffer's session record (flemma.core.session).
-- Buffers with a prompt open.
-- H.asking: the `trust_asking` field of each buffer's session record (flemma.core.session).

--- The file the answers are kept in.
---@return string
function M.file()
  return vim.fs.joinpath(vim.fn.stdpath("state"), "flemma", "trust")
end

function H.bufnr(bufnr)
  if type(bufnr) ~= "number" or bufnr == 0 then
    return vim.api.nvim_get_current_buf()
  end
  return bufnr
end

--- The SHA-256 of the buffer's frontmatter (its language and code), or nil when it
--- has none.
---@param bufnr? integer
---@return string|nil
function M.hash(bufnr)
  bufnr = H.bufnr(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return nil
  end
  local ok, doc = pcall(require("flemma.chat.document").get, bufnr)
  local fm = ok and type(doc) == "table" and doc.frontmatter or nil
  if not fm or type(fm.code) ~= "string" then
    return nil
  end
  return vim.fn.sha256(tostring(fm.lang) .. "\n" .. fm.code)
end

--- The real path of the buffer's file (symlinks resolved; for a file not written yet,
--- its directory's real path and its name), or nil for a buffer without a file.
---@param bufnr? integer
---@return string|nil
function M.path(bufnr)
  bufnr = H.bufnr(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= "" then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == "" or name:find("^%a[%w+.-]*://") then
    return nil
  end
  local abs = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local real = vim.uv.fs_realpath(abs)
  if not real then
    local dir = vim.uv.fs_realpath(vim.fs.dirname(abs))
    real = dir and vim.fs.joinpath(dir, vim.fs.basename(abs)) or abs
  end
  return real
end

--- What an answer about the buffer is kept under: { hash, path? , id }, or nil when
--- the buffer has no frontmatter. `id` names the pair in this session.
function H.key(bufnr)
  local hash = M.hash(bufnr)
  if not hash then
    return nil
  end
  local path = M.path(bufnr)
  if path and path:find("[\r\n]") then
    path = nil -- cannot be written on one line: answered for this buffer only
  end
  local id = path and ("file\0" .. path .. "\0" .. hash) or ("buffer\0" .. bufnr .. "\0" .. hash)
  return { hash = hash, path = path, id = id }
end

function H.read()
  local path = M.file()
  local stat = vim.uv.fs_stat(path)
  if not stat then
    H.store = { entries = {} }
    return H.store.entries
  end
  if H.store and H.store.mtime == stat.mtime.nsec + stat.mtime.sec * 1e9 and H.store.size == stat.size then
    return H.store.entries
  end
  local entries = {}
  local f = io.open(path, "r")
  if f then
    for line in f:lines() do
      -- Lines of another format (the text-only hashes of older versions) are ignored.
      local version, state, hash, file = line:match("^(%S+) (%a+) (%x+) (.+)$")
      if version == H.VERSION and #hash == 64 and (state == "trusted" or state == "denied") then
        entries[file] = { state = state, hash = hash }
      end
    end
    f:close()
  end
  H.store = { mtime = stat.mtime.nsec + stat.mtime.sec * 1e9, size = stat.size, entries = entries }
  return entries
end

-- Writes the answer for a path (nil removes it), merged with what other Neovims wrote
-- meanwhile.
function H.write(file, hash, state)
  local entries = vim.deepcopy(H.read())
  entries[file] = state and { state = state, hash = hash } or nil
  local paths = vim.tbl_keys(entries)
  table.sort(paths)
  local lines = {}
  for _, p in ipairs(paths) do
    lines[#lines + 1] = ("%s %s %s %s"):format(H.VERSION, entries[p].state, entries[p].hash, p)
  end
  local path = M.file()
  vim.fn.mkdir(vim.fs.dirname(path), "p")
  local tmp = path .. ".tmp" .. vim.uv.os_getpid()
  local f, err = io.open(tmp, "w")
  if not f then
    util.error(("cannot remember the answer in %s: %s"):format(path, tostring(err)))
  end
  f:write(table.concat(lines, "\n"), #lines > 0 and "\n" or "")
  f:close()
  local ok, rerr = vim.uv.fs_rename(tmp, path)
  if not ok then
    os.remove(tmp)
    util.error(("cannot remember the answer in %s: %s"):format(path, tostring(rerr)))
  end
  H.store = nil
end

--- The answer for the buffer's frontmatter: "trusted", "denied", or nil (not asked).
---@param bufnr? integer
---@return flemma.trust.State|nil
function M.state(bufnr)
  local key = H.key(H.bufnr(bufnr))
  if not key then
    return nil
  end
  if key.path then
    local ok, entries = pcall(H.read)
    local stored = ok and entries[key.path] or nil
    if stored and stored.hash == key.hash then
      return stored.state
    end
  end
  return H.session[key.id]
end

--- The remembered answer for another thing trusted by path and content hash (e.g.
--- a project's MCP server: flemma.mcp), kept in the same store: "trusted",
--- "denied", or nil when never answered or answered for other content. `key` must
--- not be an absolute path (those are chat files): give it a prefix ("mcp:...").
---@param key string
---@param hash string SHA-256 hex of the content
---@return flemma.trust.State|nil
function M.lookup(key, hash)
  if key:sub(1, 1) == "/" or key:find("[\r\n]") then
    util.error("trust.lookup: the key should be one line without a leading `/`")
  end
  local ok, entries = pcall(H.read)
  local stored = ok and entries[key] or nil
  if stored and stored.hash == hash then
    return stored.state
  end
  return nil
end

--- Remembers an answer for `key` and `hash` (see M.lookup); nil forgets it.
---@param key string
---@param hash string
---@param state flemma.trust.State|nil
function M.remember(key, hash, state)
  if key:sub(1, 1) == "/" or key:find("[\r\n]") then
    util.error("trust.remember: the key should be one line without a leading `/`")
  end
  H.write(key, hash, state)
end

--- Whether the buffer's frontmatter is trusted to widen the approval policy.
---@param bufnr? integer
---@return boolean
function M.is_trusted(bufnr)
  return M.state(bufnr) == "trusted"
end

--- Remembers an answer for the buffer's frontmatter; nil forgets it (ask again).
---@param bufnr? integer
---@param state flemma.trust.State|nil
---@return string|nil hash nil when the buffer has no frontmatter
function M.set(bufnr, state)
  bufnr = H.bufnr(bufnr)
  local key = H.key(bufnr)
  if not key then
    return nil
  end
  if key.path then
    H.session[key.id] = nil
    H.write(key.path, key.hash, state)
  else
    H.session[key.id] = state -- a buffer without a file: this buffer, this session
  end
  session.set(bufnr, "trust_noticed", nil)
  session.set(bufnr, "trust_asking", nil) -- an answer given by command ends a prompt left open
  return key.hash
end

---------------------------------------------------------------------------------------
-- What a frontmatter widens
---------------------------------------------------------------------------------------

---@class flemma.trust.Widening
---@field fn boolean the frontmatter approves with its own function
---@field tools string[] tools its list approves that the configuration's does not

--- What the frontmatter options would approve beyond the configuration: nil when
--- they only narrow it.
---@param opts flemma.frontmatter.Options|nil
---@param config? flemma.Config
---@return flemma.trust.Widening|nil
function M.widening(opts, config)
  if type(opts) ~= "table" or opts.auto_approve == nil then
    return nil
  end
  if type(opts.auto_approve) == "function" then
    return { fn = true, tools = {} }
  end
  if type(opts.auto_approve) ~= "table" then
    return nil
  end
  config = config or require("flemma.core.config").get()
  local tools_cfg = config.tools or {}
  local presets = require("flemma.isolated.presets")
  local ok, mine = pcall(presets.expand, opts.auto_approve, {
    presets = tools_cfg.presets,
    excluded = opts.auto_approve_excluded,
  })
  if not ok then
    return nil -- an unknown preset approves nothing (the frontmatter reports it)
  end
  local global
  if tools_cfg.require_approval == false then
    return nil -- the configuration approves every call already
  elseif type(tools_cfg.auto_approve) == "table" then
    global = presets.expand(tools_cfg.auto_approve, { presets = tools_cfg.presets })
  end
  local out = {}
  for tool in pairs(mine.approve) do
    if not mine.deny[tool] and (not global or presets.decide(global, tool) ~= "approve") then
      out[#out + 1] = tool
    end
  end
  -- Per-command and per-path rules (`bash(git status)`) the configuration has not.
  for tool, rules in pairs(mine.approve_rules or {}) do
    if not mine.deny[tool] and not (global and presets.decide(global, tool) == "approve") then
      local have = global and global.approve_rules and global.approve_rules[tool] or {}
      for _, rule in ipairs(rules) do
        if not vim.tbl_contains(have, rule) then
          out[#out + 1] = ("%s(%s)"):format(tool, rule)
        end
      end
    end
  end
  if #out == 0 then
    return nil
  end
  table.sort(out)
  return { fn = false, tools = out }
end

function H.describe(w)
  if w.fn then
    return "approves tool calls with its own function (any call it answers true for, outside the project too)"
  end
  return ("auto-approves %s, which your configuration does not"):format(table.concat(
    vim.tbl_map(function(t)
      return "`" .. t .. "`"
    end, w.tools),
    ", "
  ))
end

--- Says once per frontmatter text and file that an approval it gave was ignored (not trusted).
---@param bufnr integer|nil
---@param tool_name string
function M.ignored(bufnr, tool_name)
  bufnr = H.bufnr(bufnr)
  local key = H.key(bufnr)
  local id = key and key.id or ""
  local n = session.field(bufnr, "trust_noticed")
  if not n or n.id ~= id then
    n = { id = id, tools = {} }
    session.get(bufnr).trust_noticed = n
  end
  if n.tools[tool_name] then
    return
  end
  n.tools[tool_name] = true
  local why = M.state(bufnr) == "denied" and "you did not trust it" or "it is not trusted"
  util.warn(
    ("the frontmatter of %s approves `%s`, but %s, so the call waits for you (:Flemma trust to let it approve)"):format(
      util.buffer_name(bufnr),
      tool_name,
      why
    )
  )
end

---------------------------------------------------------------------------------------
-- Asking
---------------------------------------------------------------------------------------

M.CHOICES = { "Trust this frontmatter", "Do not trust it" }

--- Called before the cycle acts on a buffer whose frontmatter evaluated: when the
--- frontmatter widens the policy and was never answered, asks once (vim.ui.select)
--- and calls `resume` after the answer. Returns whether the cycle may go on now.
---@param bufnr integer
---@param opts flemma.frontmatter.Options
---@param resume? fun()
---@return boolean
function M.settle(bufnr, opts, resume)
  local w = M.widening(opts)
  if not w or M.state(bufnr) ~= nil then
    return true
  end
  if session.field(bufnr, "trust_asking") then
    util.notify("answer whether to trust this frontmatter first (or use :Flemma trust / :Flemma untrust)")
    return false
  end
  if not resume or not util.can_ask() then
    return true -- not asked: the widening is ignored (M.ignored says so)
  end
  local key = H.key(bufnr)
  session.get(bufnr).trust_asking = true
  local prompt = ("The frontmatter of %s %s. Trust it?"):format(util.buffer_name(bufnr), H.describe(w))
  local answered = false
  local ok, err = pcall(vim.ui.select, M.CHOICES, { prompt = prompt, kind = "flemma.trust" }, function(choice)
    if answered then
      return
    end
    answered = true
    vim.schedule(function()
      session.set(bufnr, "trust_asking", nil)
      local now = vim.api.nvim_buf_is_valid(bufnr) and H.key(bufnr) or nil
      if not now or not key or now.id ~= key.id then
        return -- the frontmatter or the file changed meanwhile: the answer was about another
      end
      if choice == M.CHOICES[1] then
        M.set(bufnr, "trusted")
        util.notify("trusted the frontmatter of " .. util.buffer_name(bufnr))
      elseif choice == M.CHOICES[2] then
        M.set(bufnr, "denied")
        util.notify(
          ("not trusted: the frontmatter of %s approves nothing beyond your configuration (its narrowing still applies; :Flemma trust to change it)"):format(
            util.buffer_name(bufnr)
          )
        )
      else
        H.session[key.id] = "denied" -- dismissed: not asked again in this session
      end
      resume()
    end)
  end)
  if not ok then
    session.set(bufnr, "trust_asking", nil)
    util.warn("cannot ask whether to trust the frontmatter: " .. util.message(err))
    return true
  end
  return false
end

---------------------------------------------------------------------------------------
-- :Flemma trust / untrust
---------------------------------------------------------------------------------------

function H.command(state)
  local bufnr = vim.api.nvim_get_current_buf()
  local opts, err = require("flemma.chat.frontmatter").get(bufnr)
  if not opts then
    util.error(("the frontmatter fails, so there is nothing to trust: %s"):format(err))
  end
  if not M.hash(bufnr) then
    util.error("this buffer has no frontmatter")
  end
  M.set(bufnr, state)
  local w = M.widening(opts)
  if state == "trusted" then
    util.notify(
      ("trusted the frontmatter of %s%s"):format(
        util.buffer_name(bufnr),
        w and (": it " .. H.describe(w)) or " (it only narrows the policy)"
      )
    )
  else
    util.notify(
      ("the frontmatter of %s is not trusted: it approves nothing beyond your configuration"):format(
        util.buffer_name(bufnr)
      )
    )
  end
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["trust"] = {
  chat = true,
  desc = "let this buffer's frontmatter approve tool calls beyond your configuration",
  run = function()
    H.command("trusted")
  end,
}
M.commands["untrust"] = {
  chat = true,
  desc = "stop trusting this buffer's frontmatter (its approvals beyond your configuration are ignored)",
  run = function()
    H.command("denied")
  end,
}

return M
