--- Asking once before something a chat file chose happens: the one helper behind
--- every such question of Flemma: an expensive provider and model (flemma.cost), a key
--- sent to a new host (flemma.keyhost), files from outside the project
--- (flemma.reach), a frontmatter that widens the approval policy (flemma.trust), a
--- project's MCP server (flemma.mcp).
---
--- A question is asked with vim.ui.select, at most one open per kind and buffer.
--- Nobody to ask (no UI, headless with Neovim's own vim.ui.select), a question that
--- waits already, or vim.ui.select raising: nothing is asked, and the caller is told
--- why at once (it fails closed: nothing goes out, nothing is trusted). An answer
--- (the first choice says yes, the second no, anything else dismisses) is remembered:
--- - without `hash`, for the buffer until it is wiped (its session record);
--- - with `hash` (the SHA-256 of the content the question is about), in the store
---   file stdpath("state")/flemma/trust, for the key and that hash: it holds in
---   every Neovim while the content is the same. One line per key:
---   `v2 trusted|denied HASH KEY`; the key of a chat file (topic "trust") is its real
---   path, any other topic's key is written `topic:key`. Lines of another format
---   (the text-only hashes of older versions) grant nothing and are dropped at the
---   next write.
--- `keep` says which answers are remembered: "yes" (the default: a no asks again
--- next time), "answer" (yes and no), "all" (yes and no; a dismissal counts as no
--- until Neovim exits, not written).
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@alias flemma.consent.Answer "yes"|"no"
---@alias flemma.consent.Refusal "busy"|"no_ui"|"failed"

-- The line format of the store: `v2 STATE HASH KEY` (one line per key).
H.VERSION = "v2"
H.WORD = { yes = "trusted", no = "denied" }
H.ANSWER = { trusted = "yes", denied = "no" }
-- The store as last read: { mtime, size, entries = key -> { state, hash } }.
H.store = nil
-- Dismissals of questions kept in the store, counted as no until Neovim exits:
-- "KEY\0HASH" -> "no".
H.dismissed = {}
-- Per buffer, the session record's `consent` field: topic -> key -> answer, and its
-- `consent_open` field: kind -> a token for the question waiting for an answer.

--- The file the answers with a hash are kept in.
---@return string
function M.file()
  return vim.fs.joinpath(vim.fn.stdpath("state"), "flemma", "trust")
end

-- The key of a topic as the store writes it.
function H.stored_key(topic, key)
  if type(key) ~= "string" or key == "" or key:find("[\r\n]") then
    util.error(("consent: the key of a remembered %s answer should be one line"):format(topic))
  end
  if topic == "trust" then
    if key:sub(1, 1) ~= "/" then
      util.error("consent: the key of a chat file's answer should be its absolute path")
    end
    return key
  end
  return topic .. ":" .. key
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
      local version, state, hash, key = line:match("^(%S+) (%a+) (%x+) (.+)$")
      if version == H.VERSION and #hash == 64 and H.ANSWER[state] then
        entries[key] = { state = state, hash = hash }
      end
    end
    f:close()
  end
  H.store = { mtime = stat.mtime.nsec + stat.mtime.sec * 1e9, size = stat.size, entries = entries }
  return entries
end

-- Writes the answer for a key (nil removes it), merged with what other Neovims wrote
-- meanwhile.
function H.write(key, hash, answer)
  local entries = vim.deepcopy(H.read())
  entries[key] = answer and { state = H.WORD[answer], hash = hash } or nil
  local keys = vim.tbl_keys(entries)
  table.sort(keys)
  local lines = {}
  for _, k in ipairs(keys) do
    lines[#lines + 1] = ("%s %s %s %s"):format(H.VERSION, entries[k].state, entries[k].hash, k)
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

--- The remembered answer: "yes", "no", or nil when never answered (or, with `hash`,
--- answered about other content). With `hash` the store is read (and the dismissals
--- of this Neovim), and bufnr is not used; without it, what bufnr's user answered.
---@param bufnr integer|nil
---@param topic string
---@param key string
---@param hash? string
---@return flemma.consent.Answer|nil
function M.answer(bufnr, topic, key, hash)
  if hash then
    local stored_key = H.stored_key(topic, key)
    local ok, entries = pcall(H.read)
    local stored = ok and entries[stored_key] or nil
    if stored and stored.hash == hash then
      return H.ANSWER[stored.state]
    end
    return H.dismissed[stored_key .. "\0" .. hash]
  end
  local mine = bufnr and session.field(bufnr, "consent")
  return mine and mine[topic] and mine[topic][key] or nil
end

--- Whether the user said yes to `key` of `topic` for bufnr (until the buffer is wiped).
---@param bufnr integer
---@param topic string
---@param key string
---@return boolean
function M.approved(bufnr, topic, key)
  return M.answer(bufnr, topic, key) == "yes"
end

--- Remembers an answer without asking (a command gave it); nil forgets it. With
--- `hash` it is written to the store (for every Neovim; bufnr is not used), else kept
--- for bufnr until the buffer is wiped.
---@param bufnr integer|nil
---@param topic string
---@param key string
---@param answer flemma.consent.Answer|nil
---@param hash? string
function M.set(bufnr, topic, key, answer, hash)
  if hash then
    local stored_key = H.stored_key(topic, key)
    H.dismissed[stored_key .. "\0" .. hash] = nil
    H.write(stored_key, hash, answer)
    return
  end
  local mine = session.field(bufnr, "consent")
  if answer == nil then
    if mine and mine[topic] then
      mine[topic][key] = nil
    end
    return
  end
  mine = mine or {}
  session.get(bufnr).consent = mine
  mine[topic] = mine[topic] or {}
  mine[topic][key] = answer
end

--- Forgets the answers kept for buffers (not the store): of a topic (every topic
--- when nil), of bufnr (every buffer when nil).
---@param topic? string
---@param bufnr? integer
function M.reset(topic, bufnr)
  local function forget(b, mine)
    if topic then
      mine[topic] = nil
    else
      session.set(b, "consent", nil)
    end
  end
  if bufnr then
    local mine = session.field(bufnr, "consent")
    if mine then
      forget(bufnr, mine)
    end
    return
  end
  for b, mine in session.each("consent") do
    forget(b, mine)
  end
end

---------------------------------------------------------------------------------------
-- Asking
---------------------------------------------------------------------------------------

---@class flemma.consent.Question
---@field topic string e.g. "cost", "keyhost", "reach", "trust", "mcp"
---@field key string|string[] what the answer is remembered for (a list: each of them)
---@field hash? string with it, the answer is kept in the store for key and this content
---@field keep? "yes"|"answer"|"all" which answers are remembered (default "yes")
---@field prompt string
---@field choices string[] the first says yes, the second no
---@field kind? string vim.ui.select's `kind` (default "flemma.<topic>"): one open per buffer
---@field still? fun(): boolean asked when the answer comes: false drops it (what was asked changed)
---@field answered fun(answer: flemma.consent.Answer|nil) after the answer was remembered (scheduled; nil: dismissed)
---@field refused? fun(reason: flemma.consent.Refusal, err?: string) nothing was asked (called at once)

-- Remembers an answer as q.keep says.
function H.keep(bufnr, q, answer)
  local keep = q.keep or "yes"
  if answer == nil and keep == "all" then
    answer = "no"
    if q.hash then
      for _, key in ipairs(type(q.key) == "table" and q.key or { q.key }) do
        H.dismissed[H.stored_key(q.topic, key) .. "\0" .. q.hash] = "no"
      end
      return
    end
  end
  if answer == nil or (answer == "no" and keep == "yes") then
    return
  end
  for _, key in ipairs(type(q.key) == "table" and q.key or { q.key }) do
    M.set(bufnr, q.topic, key, answer, q.hash)
  end
end

--- Whether a question of `kind` waits for an answer in bufnr.
---@param bufnr integer
---@param kind string
---@return boolean
function M.waiting(bufnr, kind)
  local open = session.field(bufnr, "consent_open")
  return open ~= nil and open[kind] ~= nil
end

--- Ends the wait for the open question of `kind` in bufnr (an answer was given
--- otherwise): another may be asked. The open one's answer is still taken.
---@param bufnr integer
---@param kind string
---@param token? table only when it is still this question
function M.close(bufnr, kind, token)
  local open = session.field(bufnr, "consent_open")
  if open and (token == nil or open[kind] == token) then
    open[kind] = nil
  end
end

--- Asks the question for bufnr. Returns "asked" (q.answered is called, scheduled,
--- once the user answered, while the buffer is valid and q.still agrees), or why it
--- asked nothing: "busy" (a question of that kind waits in the buffer), "no_ui"
--- (util.can_ask), "failed" and the error (vim.ui.select raised); q.refused is
--- called with the same at once. The caller does nothing now in every case: after a
--- refusal nothing happens at all.
---@param bufnr integer
---@param q flemma.consent.Question
---@return "asked"|flemma.consent.Refusal state
---@return string|nil err
function M.ask(bufnr, q)
  local kind = q.kind or ("flemma." .. q.topic)
  local function refuse(reason, err)
    if q.refused then
      q.refused(reason, err)
    end
    return reason, err
  end
  if M.waiting(bufnr, kind) then
    return refuse("busy")
  end
  if not util.can_ask() then
    return refuse("no_ui")
  end
  local token = {}
  local open = session.field(bufnr, "consent_open") or {}
  session.get(bufnr).consent_open = open
  open[kind] = token
  local answered = false
  local ok, err = pcall(vim.ui.select, q.choices, { prompt = q.prompt, kind = kind }, function(choice)
    if answered then
      return
    end
    answered = true
    vim.schedule(function()
      M.close(bufnr, kind, token)
      if not vim.api.nvim_buf_is_valid(bufnr) or (q.still and not q.still()) then
        return
      end
      local answer = (choice == q.choices[1] and "yes") or (choice == q.choices[2] and "no") or nil
      H.keep(bufnr, q, answer)
      q.answered(answer)
    end)
  end)
  if not ok then
    M.close(bufnr, kind, token)
    answered = true
    return refuse("failed", util.message(err))
  end
  return "asked"
end

---@class flemma.consent.Gate: flemma.consent.Question
---@field resume fun() called (scheduled) after a yes, to go on
---@field say fun(outcome: flemma.consent.Refusal|"declined", err?: string) says in one line why nothing happens

--- Asks before something that must wait for a yes (a send): q.resume runs after a
--- yes; any other outcome is told to q.say: "busy", "no_ui", "failed" (at once, with
--- the error) or "declined" (a no or a dismissal, after the answer). Returns false:
--- the caller goes on only through q.resume.
---@param bufnr integer
---@param q flemma.consent.Gate
---@return false
function M.gate(bufnr, q)
  q.answered = function(answer)
    if answer == "yes" then
      q.resume()
    else
      q.say("declined")
    end
  end
  q.refused = q.say
  M.ask(bufnr, q)
  return false
end

return M
