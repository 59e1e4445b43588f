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

-- JSON with the keys of every object sorted: the same input gives the same text.
function H.canonical(v, out)
  if type(v) == "table" and v ~= vim.NIL then
    if vim.islist(v) and (next(v) ~= nil or getmetatable(v) ~= vim._empty_dict_mt) then
      out[#out + 1] = "["
      for i, x in ipairs(v) do
        out[#out + 1] = i > 1 and "," or ""
        H.canonical(x, out)
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
        H.canonical(x, out)
      end
      out[#out + 1] = "}"
    end
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
  if entry.input ~= nil then
    e.input = nil
    e.input_sha256 = M.digest(entry.input)
  end
  if type(e.rule) == "string" then
    e.rule = util.redact(e.rule)
  end
  if type(e.resolver) == "string" then
    e.resolver = util.redact(e.resolver)
  end
  e.time = os.date("!%Y-%m-%dT%H:%M:%SZ")
  local ok, line = pcall(vim.json.encode, e)
  if not ok then
    return
  end
  H.queue[#H.queue + 1] = line .. "\n"
  H.pump()
end

-- Writes what is queued, one batch at a time, on libuv's thread pool.
function H.pump()
  if H.busy or #H.queue == 0 then
    return
  end
  H.busy = true
  local data = table.concat(H.queue)
  H.queue = {}
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
