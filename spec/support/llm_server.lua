-- The loopback HTTP server of the provider specs (spec/support/llm_server.py): a
-- real server on 127.0.0.1 that replays scripted answers and records requests.
local M = {}
M.__index = M

local here = debug.getinfo(1, "S").source:sub(2)
local script_path = vim.fs.dirname(vim.fn.fnamemodify(here, ":p")) .. "/llm_server.py"

--- Starts a server; stop it with :stop(). `opts.host`: the address it listens on and
--- its URLs name (default 127.0.0.1).
---@param opts? { host?: string }
function M.start(opts)
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  local host = opts and opts.host or "127.0.0.1"
  local self = setmetatable({ dir = dir, host = host }, M)
  local out, err = {}, {}
  self.proc = vim.system({ "python3", script_path, dir }, {
    env = { LLM_SERVER_HOST = host },
    stdout = function(_, data)
      if data then
        out[#out + 1] = data
      end
    end,
    stderr = function(_, data)
      if data then
        err[#err + 1] = data
      end
    end,
  })
  -- Generous: python3 starts in well under a second, but not on a machine shared by a
  -- whole team running suites at once.
  local ok = vim.wait(30000, function()
    local port = table.concat(out):match("PORT (%d+)")
    if port then
      self.port = tonumber(port)
    end
    return self.port ~= nil
  end, 10)
  if not ok then
    self.proc:kill("sigkill")
    error("the loopback server did not start within 30 s; its stderr: " .. table.concat(err), 2)
  end
  return self
end

--- The URL of a path on the server.
function M:url(path)
  return ("http://%s:%d%s"):format(self.host, self.port, path or "/v1/messages")
end

--- Sets the answers of the next requests (a list of entries, see llm_server.py).
function M:script(entries)
  local f = assert(io.open(self.dir .. "/script.json", "w"))
  f:write(vim.json.encode(entries))
  f:close()
  os.remove(self.dir .. "/requests.jsonl")
end

--- The requests received since the last :script(): { method, path, headers, body, json }.
function M:requests()
  local f = io.open(self.dir .. "/requests.jsonl", "r")
  if not f then
    return {}
  end
  local list = {}
  for line in f:lines() do
    local r = vim.json.decode(line)
    local ok, decoded = pcall(vim.json.decode, r.body)
    r.json = ok and decoded or nil
    list[#list + 1] = r
  end
  f:close()
  return list
end

function M:stop()
  if self.proc then
    self.proc:kill(15)
    self.proc:wait(2000)
    self.proc = nil
  end
  vim.fn.delete(self.dir, "rf")
end

return M
