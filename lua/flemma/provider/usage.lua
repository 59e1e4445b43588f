--- Token usage and cost: the last request of each buffer, per-buffer totals and the
--- session's totals (all buffers since Neovim started).
local session = require("flemma.core.session")
local models = require("flemma.core.models")

local M = {}
local H = {}

M.fields = { "input_tokens", "output_tokens", "thinking_tokens", "cache_read_tokens", "cache_write_tokens" }

---@class flemma.Usage
---@field input_tokens integer
---@field output_tokens integer
---@field thinking_tokens integer
---@field cache_read_tokens integer
---@field cache_write_tokens integer
---@field cost number|nil dollars; nil when the model's prices are unknown
---@field requests integer
---@field provider? string
---@field model? string

function H.zero()
  return {
    input_tokens = 0,
    output_tokens = 0,
    thinking_tokens = 0,
    cache_read_tokens = 0,
    cache_write_tokens = 0,
    cost = 0,
    requests = 0,
  }
end

-- H.buffers: the `usage` field of each buffer's session record (flemma.core.session).
H.session = H.zero()
H.models = {} ---@type table<string, flemma.Usage> session totals per provider and model
H.last = nil ---@type flemma.Usage|nil the last response of any buffer

--- A usage record from the merged usage events of one response.
---@param raw table the provider's numbers (fields may be missing)
---@param o { kind: string, provider: string, model: string, cache_retention?: string }
---@return flemma.Usage
function M.record(raw, o)
  local u = H.zero()
  for _, f in ipairs(M.fields) do
    u[f] = tonumber(raw[f]) or 0
  end
  u.requests = 1
  u.provider = o.provider
  u.model = o.model
  u.cost = models.cost(o.kind, o.model, u, o.cache_retention)
  return u
end

function H.add(total, u)
  for _, f in ipairs(M.fields) do
    total[f] = total[f] + u[f]
  end
  total.requests = total.requests + 1
  if total.cost ~= nil and u.cost ~= nil then
    total.cost = total.cost + u.cost
  elseif u.cost == nil and u.input_tokens + u.output_tokens > 0 then
    total.cost_incomplete = true
    total.cost = total.cost or 0
  end
end

--- Adds a response's usage to the buffer's and the session's totals.
---@param bufnr integer
---@param u flemma.Usage
function M.add(bufnr, u)
  local b = session.field(bufnr, "usage")
  if not b then
    b = { total = H.zero() }
    session.get(bufnr).usage = b
  end
  b.last = u
  H.add(b.total, u)
  H.add(H.session, u)
  local key = tostring(u.provider) .. "\t" .. tostring(u.model)
  local m = H.models[key]
  if not m then
    m = H.zero()
    m.provider, m.model = u.provider, u.model
    H.models[key] = m
  end
  H.add(m, u)
  H.last = u
end

--- The session's cost so far (dollars) and whether some prices were unknown; no copy.
---@return number cost
---@return boolean|nil incomplete
function M.session_cost()
  return H.session.cost or 0, H.session.cost_incomplete
end

--- The session's totals per provider and model, sorted by provider then model.
---@return flemma.Usage[]
function M.by_model()
  local out = {}
  for _, m in pairs(H.models) do
    out[#out + 1] = vim.deepcopy(m)
  end
  table.sort(out, function(a, b)
    if a.provider ~= b.provider then
      return tostring(a.provider) < tostring(b.provider)
    end
    return tostring(a.model) < tostring(b.model)
  end)
  return out
end

--- The share of prompt tokens read from the cache (0..1), nil when there were none.
---@param u flemma.Usage
---@return number|nil
function M.cache_hit_ratio(u)
  local prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
  if prompt == 0 then
    return nil
  end
  return u.cache_read_tokens / prompt
end

--- The lines of :Flemma usage for a buffer: the last response, the buffer, and the
--- session per provider and model (requests, tokens, cache hit ratio, cost).
---@param bufnr? integer
---@return string[]
function M.report(bufnr)
  local u = M.get(bufnr)
  local lines = {}
  local function hit(x)
    local r = (x.cache_read_tokens + x.cache_write_tokens > 0) and M.cache_hit_ratio(x) or nil
    return r and (" · cache hit %d%%"):format(math.floor(r * 100 + 0.5)) or ""
  end
  local format = M.format
  local function fmt(x)
    if x.cost_incomplete then
      x = vim.deepcopy(x)
      if x.cost == 0 then
        x.cost = nil
      end
      return format(x) .. (x.cost and " (some prices unknown)" or "")
    end
    return format(x)
  end
  if u.last then
    lines[#lines + 1] = ("last: %s %s: %s%s"):format(
      u.last.provider or "?",
      u.last.model or "?",
      fmt(u.last),
      hit(u.last)
    )
  else
    lines[#lines + 1] = "last: no response yet in this buffer"
  end
  lines[#lines + 1] = ("buffer: %d %s · %s%s"):format(
    u.buffer.requests,
    u.buffer.requests == 1 and "request" or "requests",
    fmt(u.buffer),
    hit(u.buffer)
  )
  lines[#lines + 1] = ("session: %d %s · %s%s"):format(
    u.session.requests,
    u.session.requests == 1 and "request" or "requests",
    fmt(u.session),
    hit(u.session)
  )
  for _, m in ipairs(M.by_model()) do
    lines[#lines + 1] = ("  %s %s: %d %s · %s%s"):format(
      m.provider or "?",
      m.model or "?",
      m.requests,
      m.requests == 1 and "request" or "requests",
      fmt(m),
      hit(m)
    )
  end
  return lines
end

--- `{ last, buffer, session }` for a buffer (copies).
---@param bufnr? integer
function M.get(bufnr)
  if bufnr == nil or bufnr == 0 then
    bufnr = vim.api.nvim_get_current_buf()
  end
  local b = session.field(bufnr, "usage")
  return vim.deepcopy({
    last = b and b.last or nil,
    buffer = b and b.total or H.zero(),
    session = H.session,
  })
end

function H.n(x)
  local s = tostring(math.floor(x))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

function H.money(c)
  if c == nil then
    return "cost unknown"
  end
  if c < 0.01 then
    return ("$%.4f"):format(c)
  end
  return ("$%.2f"):format(c)
end

--- A one-line summary: "1,204 in · 310 out (thinking 120) · cache 900 read, 0 written · $0.0081".
---@param u flemma.Usage
---@return string
function M.format(u)
  local parts = { ("%s in"):format(H.n(u.input_tokens)), ("%s out"):format(H.n(u.output_tokens)) }
  if u.thinking_tokens > 0 then
    parts[2] = parts[2] .. (" (thinking %s)"):format(H.n(u.thinking_tokens))
  end
  if u.cache_read_tokens > 0 or u.cache_write_tokens > 0 then
    parts[#parts + 1] = ("cache %s read, %s written"):format(H.n(u.cache_read_tokens), H.n(u.cache_write_tokens))
  end
  parts[#parts + 1] = H.money(u.cost)
  return table.concat(parts, " · ")
end

--- The usage line shown after a response, fitted into `width` display cells (so that
--- the message never needs a hit-enter prompt): the longest of "label: full",
--- "label: no cache details", "model-less" forms that fits, else cut with "…".
---@param u table a recorded usage
---@param labels string[] labels from the most to the least detailed ("anthropic claude-…", "claude-…")
---@param width integer
---@return string
function M.format_fit(u, labels, width)
  local full = M.format(u)
  local brief = { ("%s in"):format(H.n(u.input_tokens)), ("%s out"):format(H.n(u.output_tokens)), H.money(u.cost) }
  local candidates = {}
  for _, label in ipairs(labels) do
    candidates[#candidates + 1] = label .. ": " .. full
  end
  for _, label in ipairs(labels) do
    candidates[#candidates + 1] = label .. ": " .. table.concat(brief, " · ")
  end
  candidates[#candidates + 1] = table.concat(brief, " · ")
  for _, c in ipairs(candidates) do
    if vim.fn.strdisplaywidth(c) <= width then
      return c
    end
  end
  local last = candidates[#candidates]
  return vim.fn.strcharpart(last, 0, math.max(1, width - 1)) .. "…"
end

--- Forgets a buffer's numbers (the session totals stay).
function M.forget(bufnr)
  session.set(bufnr, "usage", nil)
end

function M._reset()
  for b in session.each("usage") do
    session.set(b, "usage", nil)
  end
  H.session = H.zero()
  H.models = {}
  H.last = nil
end

return M
