--- SHA-256 (FIPS 180-4) of a string, in hex, in plain LuaJIT (the `bit` library): for
--- a libuv thread, which has no vim.fn.sha256 (flemma.policy.audit digests a long tool
--- input there). Loaded with dofile() by such a thread: M.hex(text). M.hex_async
--- runs it on one from the main loop.
local bit = require("bit")
local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local rshift, lshift, ror, tobit = bit.rshift, bit.lshift, bit.ror, bit.tobit
local byte, char = string.byte, string.char

local M = {}

local K = {
  0x428a2f98,
  0x71374491,
  0xb5c0fbcf,
  0xe9b5dba5,
  0x3956c25b,
  0x59f111f1,
  0x923f82a4,
  0xab1c5ed5,
  0xd807aa98,
  0x12835b01,
  0x243185be,
  0x550c7dc3,
  0x72be5d74,
  0x80deb1fe,
  0x9bdc06a7,
  0xc19bf174,
  0xe49b69c1,
  0xefbe4786,
  0x0fc19dc6,
  0x240ca1cc,
  0x2de92c6f,
  0x4a7484aa,
  0x5cb0a9dc,
  0x76f988da,
  0x983e5152,
  0xa831c66d,
  0xb00327c8,
  0xbf597fc7,
  0xc6e00bf3,
  0xd5a79147,
  0x06ca6351,
  0x14292967,
  0x27b70a85,
  0x2e1b2138,
  0x4d2c6dfc,
  0x53380d13,
  0x650a7354,
  0x766a0abb,
  0x81c2c92e,
  0x92722c85,
  0xa2bfe8a1,
  0xa81a664b,
  0xc24b8b70,
  0xc76c51a3,
  0xd192e819,
  0xd6990624,
  0xf40e3585,
  0x106aa070,
  0x19a4c116,
  0x1e376c08,
  0x2748774c,
  0x34b0bcb5,
  0x391c0cb3,
  0x4ed8aa4a,
  0x5b9cca4f,
  0x682e6ff3,
  0x748f82ee,
  0x78a5636f,
  0x84c87814,
  0x8cc70208,
  0x90befffa,
  0xa4506ceb,
  0xbef9a3f7,
  0xc67178f2,
}
for i = 1, 64 do
  K[i] = tobit(K[i])
end

local w = {}

-- One 64-byte block of `s` at `at` into the state `h` (8 words).
local function block(h, s, at)
  for j = 0, 15 do
    local a, b, c, d = byte(s, at + j * 4, at + j * 4 + 3)
    w[j] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
  end
  for j = 16, 63 do
    local x, y = w[j - 15], w[j - 2]
    local s0 = bxor(ror(x, 7), ror(x, 18), rshift(x, 3))
    local s1 = bxor(ror(y, 17), ror(y, 19), rshift(y, 10))
    w[j] = tobit(w[j - 16] + s0 + w[j - 7] + s1)
  end
  local a, b, c, d, e, f, g, hh = h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
  for j = 0, 63 do
    local S1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
    local ch = bxor(band(e, f), band(bnot(e), g))
    local t1 = tobit(hh + S1 + ch + K[j + 1] + w[j])
    local S0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
    local maj = bxor(band(a, b), band(a, c), band(b, c))
    hh, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + S0 + maj)
  end
  h[1], h[2], h[3], h[4] = tobit(h[1] + a), tobit(h[2] + b), tobit(h[3] + c), tobit(h[4] + d)
  h[5], h[6], h[7], h[8] = tobit(h[5] + e), tobit(h[6] + f), tobit(h[7] + g), tobit(h[8] + hh)
end

-- The bytes of a 32-bit word, big-endian.
local function be32(x)
  return char(band(rshift(x, 24), 255), band(rshift(x, 16), 255), band(rshift(x, 8), 255), band(x, 255))
end

--- The SHA-256 of `msg`, 64 hex digits.
---@param msg string
---@return string
function M.hex(msg)
  local n = #msg
  local tail = n % 64
  local bits = n * 8
  local last = msg:sub(n - tail + 1)
    .. "\128"
    .. string.rep("\0", tail < 56 and 55 - tail or 119 - tail)
    .. be32(tobit(math.floor(bits / 4294967296)))
    .. be32(tobit(bits % 4294967296))
  local h = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }
  for i = 1, 8 do
    h[i] = tobit(h[i])
  end
  for at = 1, n - tail, 64 do
    block(h, msg, at)
  end
  for at = 1, #last, 64 do
    block(h, last, at)
  end
  local out = {}
  for i = 1, 8 do
    out[i] = bit.tohex(h[i])
  end
  return table.concat(out)
end

-- This file's path (a thread loads it with dofile).
local function own_path()
  return (debug.getinfo(1, "S").source:gsub("^@", ""))
end

--- The SHA-256 of `text` computed on a libuv thread: `cb(hex)` in a later turn of the
--- main loop, which only copies the text to the thread (vim.fn.sha256 holds it about
--- 4 ms per MiB).
---@param text string
---@param cb fun(hex: string)
function M.hex_async(text, cb)
  local work = vim.uv.new_work(function(path, t)
    return dofile(path).hex(t)
  end, function(hex)
    vim.schedule(function()
      cb(hex)
    end)
  end)
  work:queue(own_path(), text)
end

return M
