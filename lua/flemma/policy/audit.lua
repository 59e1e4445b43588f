--- The audit log: every approval decision and every tool run, one JSON object a line in
--- stdpath("state")/flemma/audit.jsonl (`:Flemma tool:log` opens it). Lines are queued
--- and appended off the main loop (libuv's file requests run on its thread pool), so
--- recording never blocks; the file is rotated at 10 MB (one `.1` kept). It holds no
--- secrets: a tool's input only as its sha256, rule text redacted.
local util = require("flemma.core.util")

local M = {}
local H = {}

M.MAX_BYTES = 10 * 1024 * 1024

H.queue = {}
H.busy = false
H.path = nil

--- The file the log is appended to.
---@return string
function M.path()
  return H.path or (vim.fn.stdpath("state") .. "/flemma/audit.jsonl")
end

--- Points the log at another file (nil: the default); for specs.
---@param path string|nil
function M.set_path(path)
  H.path = path
end

-- A string longer than this in a tool's input is escaped and hashed off the main loop
-- (a 10 MB `write` took 70-90 ms per line through vim.json.encode and vim.fn.sha256).
M.BIG_STRING = 64 * 1024

-- JSON with the keys of every object sorted: the same input gives the same text. With
-- `big`, a string longer than M.BIG_STRING is left unencoded as { text } in `out`.
function H.canonical(v, out, big)
  if type(v) == "table" and v ~= vim.NIL then
    if vim.islist(v) and (next(v) ~= nil or getmetatable(v) ~= vim._empty_dict_mt) then
      out[#out + 1] = "["
      for i, x in ipairs(v) do
        out[#out + 1] = i > 1 and "," or ""
        H.canonical(x, out, big)
      end
      out[#out + 1] = "]"
    else
      local keys = {}
      for k in pairs(v) do
        keys[#keys + 1] = tostring(k)
      end
      table.sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        out[#out + 1] = (i > 1 and "," or "") .. vim.json.encode(k) .. ":"
        local x = v[k]
        if x == nil then
          x = v[tonumber(k)]
        end
        H.canonical(x, out, big)
      end
      out[#out + 1] = "}"
    end
  elseif big and type(v) == "string" and #v > M.BIG_STRING then
    out[#out + 1] = { v }
  else
    local ok, text = pcall(vim.json.encode, v == nil and vim.NIL or v)
    out[#out + 1] = ok and text or "null"
  end
  return out
end

--- The digest a line holds instead of a tool's input: sha256 of its JSON with sorted
--- keys (`{"command":"ls","label":"x"}`).
---@param input any
---@return string
function M.digest(input)
  return "sha256:" .. vim.fn.sha256(table.concat(H.canonical(input, {})))
end

--- Queues one entry: `event` ("decision" | "run"), `tool`, `id`, and what the event has
--- (`decision`, `resolver`, `rule`, `status`, `duration_ms`, `input`: digested here).
--- The time is added; the line is written in the background.
---@param entry table
function M.record(entry)
  local e = {}
  for k, v in pairs(entry) do
    e[k] = v
  end
  if type(e.rule) == "string" then
    e.rule = util.redact(e.rule)
  end
  if type(e.resolver) == "string" then
    e.resolver = util.redact(e.resolver)
  end
  e.time = os.date("!%Y-%m-%dT%H:%M:%SZ")
  local item = {}
  H.queue[#H.queue + 1] = item
  local function ready(digest)
    if digest then
      e.input_sha256 = digest
    end
    local ok, line = pcall(vim.json.encode, e)
    item.line = ok and (line .. "\n") or ""
    H.pump()
  end
  if entry.input == nil then
    return ready(nil)
  end
  e.input = nil
  M.digest_async(entry.input, ready)
end

--- M.digest, with `cb(digest)` called on the main loop: now for an input without a
--- long string, else once a libuv thread has escaped and hashed it (the main loop
--- only copies the long strings to it).
---@param input any
---@param cb fun(digest: string)
function M.digest_async(input, cb)
  local out = H.canonical(input, {}, true)
  local flags, args, plain = {}, {}, {}
  for _, piece in ipairs(out) do
    if type(piece) == "table" then
      if #plain > 0 then
        flags[#flags + 1], args[#args + 1], plain = "r", table.concat(plain), {}
      end
      flags[#flags + 1], args[#args + 1] = "e", piece[1]
    else
      plain[#plain + 1] = piece
    end
  end
  if #flags == 0 then
    return cb("sha256:" .. vim.fn.sha256(table.concat(plain)))
  end
  if #plain > 0 then
    flags[#flags + 1], args[#args + 1] = "r", table.concat(plain)
  end
  -- vim.json.encode writes `/` as `\/` in Neovim 0.10, as `/` in 0.11 and later.
  H.slash = H.slash or vim.json.encode("/"):sub(2, -2)
  local work = vim.uv.new_work(H.work, function(hex)
    -- A libuv callback is a fast event: the rest runs in the next turn.
    vim.schedule(function()
      cb("sha256:" .. hex)
    end)
  end)
  H.sha_file = H.sha_file or H.sha_path()
  work:queue(table.concat(flags), H.slash, H.sha_file, unpack(args))
end

-- The work of M.digest_async on a libuv thread (a Lua state of its own: no vim.*, no
-- upvalues): the pieces of a canonical JSON text joined, those flagged "e" (a long
-- string's bytes) escaped first as vim.json.encode escapes them (`slash`: how it
-- writes `/`), then SHA-256 of the whole in hex (flemma.core.sha256, loaded from
-- `sha_path`).
function H.work(flags, slash, sha_path, ...)
  local esc = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n" }
  esc["\r"], esc["\t"], esc["/"], esc["\127"] = "\\r", "\\t", slash, "\\u007f"
  for c = 0, 31 do
    esc[string.char(c)] = esc[string.char(c)] or string.format("\\u%04x", c)
  end
  local parts = { ... }
  for i = 1, #parts do
    if flags:sub(i, i) == "e" then
      parts[i] = '"' .. parts[i]:gsub('[%c"\\/\127]', esc) .. '"'
    end
  end
  return dofile(sha_path).hex(table.concat(parts))
end

-- The file of flemma.core.sha256 (next to this module's folder).
function H.sha_path()
  local here = debug.getinfo(1, "S").source:gsub("^@", "")
  return vim.fs.normalize(vim.fs.dirname(here) .. "/../core/sha256.lua")
end

-- Writes what is queued, one batch at a time, on libuv's thread pool.
function H.pump()
  if H.busy or #H.queue == 0 then
    return
  end
  -- Lines go out in the order they were recorded: up to the first whose digest is
  -- still being computed.
  local lines, n = {}, 0
  while n < #H.queue and H.queue[n + 1].line do
    n = n + 1
    lines[n] = H.queue[n].line
  end
  if n == 0 then
    return
  end
  H.queue = { unpack(H.queue, n + 1) }
  H.busy = true
  local data = table.concat(lines)
  local path = M.path()
  local uv = vim.uv or vim.loop
  local function done()
    H.busy = false
    vim.schedule(H.pump)
  end
  vim.fn.mkdir(vim.fs.dirname(path), "p")
  uv.fs_stat(path, function(_, st)
    local function append()
      uv.fs_open(path, "a", 384, function(err, fd)
        if err or not fd then
          return done()
        end
        uv.fs_write(fd, data, -1, function()
          uv.fs_close(fd, done)
        end)
      end)
    end
    if st and st.size + #data > M.MAX_BYTES then
      uv.fs_rename(path, path .. ".1", append)
    else
      append()
    end
  end)
end

--- Whether lines are still queued or being written.
---@return boolean
function M.pending()
  return H.busy or #H.queue > 0
end

M.commands = {}

M.commands["tool:log"] = {
  desc = "open the audit log of approval decisions and tool runs",
  run = function()
    local path = M.path()
    if vim.fn.filereadable(path) == 0 then
      util.notify("the audit log is empty: " .. path)
      return
    end
    vim.cmd("split " .. vim.fn.fnameescape(path))
    vim.bo.readonly = true
  end,
}

return M
