--- The rate limit of tool calls per buffer (`tools.rate_limit`): a token bucket that
--- holds up to `burst` calls and refills at `per_second`. Each call takes one token;
--- a call finding none is refused with the time until the next token.
local session = require("flemma.core.session")
local M = {}
local H = {}

-- H.buckets: the `ratelimit` field of each buffer's session record (flemma.core.session).

function H.now()
  return vim.uv.hrtime() / 1e9
end

--- Takes a token for a call in `bufnr`. Returns true, or false and the seconds until a
--- token is there again.
---@param bufnr integer|nil
---@return boolean ok
---@return number|nil retry_after seconds
function M.take(bufnr)
  local cfg = require("flemma.core.config").get().tools.rate_limit
  if type(bufnr) ~= "number" or type(cfg) ~= "table" then
    return true
  end
  local burst, rate = cfg.burst or 20, cfg.per_second or 2
  local now = H.now()
  local b = session.field(bufnr, "ratelimit")
  if not b or b.burst ~= burst or b.rate ~= rate then
    b = { tokens = burst, at = now, burst = burst, rate = rate }
    session.get(bufnr).ratelimit = b
  end
  b.tokens = math.min(burst, b.tokens + (now - b.at) * rate)
  b.at = now
  if b.tokens >= 1 then
    b.tokens = b.tokens - 1
    return true
  end
  return false, (1 - b.tokens) / rate
end

--- Forgets a buffer's bucket (a wiped buffer; tests).
function M.forget(bufnr)
  if bufnr == nil then
    for b in session.each("ratelimit") do
      session.set(b, "ratelimit", nil)
    end
  else
    session.set(bufnr, "ratelimit", nil)
  end
end

return M
