--- A safe arithmetic evaluator for the calculator tools: its own tokenizer and
--- recursive-descent parser, numbers, + - * / % ^ (or **), parentheses, and a fixed
--- set of math functions and constants. Nothing is ever passed to load().
local M = {}
local H = {}

H.constants = { pi = math.pi, e = math.exp(1), inf = math.huge, tau = 2 * math.pi }

function H.round(x, digits)
  local m = 10 ^ (digits or 0)
  local v = x * m
  v = v >= 0 and math.floor(v + 0.5) or math.ceil(v - 0.5)
  return v / m
end

-- name -> { fn, min_args, max_args }
H.functions = {
  sqrt = { math.sqrt, 1, 1 },
  abs = { math.abs, 1, 1 },
  floor = { math.floor, 1, 1 },
  ceil = { math.ceil, 1, 1 },
  round = { H.round, 1, 2 },
  exp = { math.exp, 1, 1 },
  log = {
    function(x, base)
      if base then
        return math.log(x) / math.log(base)
      end
      return math.log(x)
    end,
    1,
    2,
  },
  ln = { math.log, 1, 1 },
  log10 = { math.log10, 1, 1 },
  log2 = {
    function(x)
      return math.log(x) / math.log(2)
    end,
    1,
    1,
  },
  sin = { math.sin, 1, 1 },
  cos = { math.cos, 1, 1 },
  tan = { math.tan, 1, 1 },
  asin = { math.asin, 1, 1 },
  acos = { math.acos, 1, 1 },
  atan = { math.atan, 1, 1 },
  atan2 = { math.atan2, 2, 2 },
  sinh = { math.sinh, 1, 1 },
  cosh = { math.cosh, 1, 1 },
  tanh = { math.tanh, 1, 1 },
  pow = { math.pow, 2, 2 },
  min = { math.min, 1, math.huge },
  max = { math.max, 1, math.huge },
  hypot = {
    function(a, b)
      return math.sqrt(a * a + b * b)
    end,
    2,
    2,
  },
}

local function fail(msg, pos)
  error({ calc = true, msg = pos and (msg .. " at position " .. pos) or msg }, 0)
end

function H.tokenize(src)
  local tokens, i, n = {}, 1, #src
  while i <= n do
    local c = src:sub(i, i)
    if c:match("%s") then
      i = i + 1
    elseif c:match("%d") or (c == "." and src:sub(i + 1, i + 1):match("%d")) then
      local num = src:match("^%d*%.?%d*[eE][%+%-]?%d+", i) or src:match("^%d*%.?%d*", i)
      local value = tonumber(num)
      if not value then
        fail(("invalid number `%s`"):format(num), i)
      end
      tokens[#tokens + 1] = { kind = "num", value = value, pos = i }
      i = i + #num
    elseif c:match("[%a_]") then
      local id = src:match("^[%a_][%w_]*", i)
      tokens[#tokens + 1] = { kind = "id", value = id, pos = i }
      i = i + #id
    elseif src:sub(i, i + 1) == "**" then
      tokens[#tokens + 1] = { kind = "op", value = "^", pos = i }
      i = i + 2
    elseif c:match("[%+%-%*/%%%^%(%),]") then
      tokens[#tokens + 1] = { kind = "op", value = c, pos = i }
      i = i + 1
    else
      fail(("unexpected character `%s`"):format(c), i)
    end
  end
  tokens[#tokens + 1] = { kind = "eof", pos = n + 1 }
  return tokens
end

--- A recursive-descent parser over the tokens that evaluates as it goes: one method per
--- level of precedence, lowest first (expr, term, unary, power, primary).
H.Parser = {}
H.Parser.__index = H.Parser

--- The parser of tokens: a function that evaluates them (raises on an error).
function H.parser(tokens)
  local p = setmetatable({ tokens = tokens, i = 1 }, H.Parser)
  return function()
    local v = p:expr()
    local t = p:peek()
    if t.kind ~= "eof" then
      fail(("unexpected `%s`"):format(tostring(t.value)), t.pos)
    end
    return v
  end
end

function H.Parser:peek()
  return self.tokens[self.i]
end

function H.Parser:take()
  local t = self.tokens[self.i]
  self.i = self.i + 1
  return t
end

local function is_op(t, v)
  return t.kind == "op" and t.value == v
end

function H.Parser:expect(v)
  local t = self:take()
  if not is_op(t, v) then
    fail(("expected `%s`"):format(v), t.pos)
  end
end

function H.Parser:expr()
  local v = self:term()
  while true do
    local t = self:peek()
    if is_op(t, "+") then
      self:take()
      v = v + self:term()
    elseif is_op(t, "-") then
      self:take()
      v = v - self:term()
    else
      return v
    end
  end
end

function H.Parser:term()
  local v = self:unary()
  while true do
    local t = self:peek()
    if is_op(t, "*") then
      self:take()
      v = v * self:unary()
    elseif is_op(t, "/") or is_op(t, "%") then
      self:take()
      local rhs = self:unary()
      if rhs == 0 then
        fail(t.value == "/" and "division by zero" or "modulo by zero", t.pos)
      end
      v = t.value == "/" and v / rhs or math.fmod(v, rhs)
    else
      return v
    end
  end
end

function H.Parser:unary()
  local t = self:peek()
  if is_op(t, "-") then
    self:take()
    return -self:unary()
  elseif is_op(t, "+") then
    self:take()
    return self:unary()
  end
  return self:power()
end

-- power is right-associative and binds tighter than unary minus: -2^2 = -4.
function H.Parser:power()
  local base = self:primary()
  if is_op(self:peek(), "^") then
    self:take()
    return base ^ self:unary()
  end
  return base
end

function H.Parser:primary()
  local t = self:take()
  if t.kind == "num" then
    return t.value
  elseif is_op(t, "(") then
    local v = self:expr()
    self:expect(")")
    return v
  elseif t.kind == "id" then
    if is_op(self:peek(), "(") then
      return self:call(t)
    end
    local c = H.constants[t.value:lower()]
    if c == nil then
      fail(("unknown name `%s` (constants: e, inf, pi, tau)"):format(t.value), t.pos)
    end
    return c
  elseif t.kind == "eof" then
    fail("unexpected end of expression")
  end
  fail(("unexpected `%s`"):format(t.value), t.pos)
end

--- A call of the function named by token t (its "(" next).
function H.Parser:call(t)
  local name = t.value:lower()
  local f = H.functions[name]
  if not f then
    fail(("unknown function `%s`"):format(t.value), t.pos)
  end
  self:take()
  local args = {}
  if not is_op(self:peek(), ")") then
    args[1] = self:expr()
    while is_op(self:peek(), ",") do
      self:take()
      args[#args + 1] = self:expr()
    end
  end
  self:expect(")")
  if #args < f[2] or #args > f[3] then
    local want = f[2] == f[3] and tostring(f[2])
      or (f[3] == math.huge and ("at least " .. f[2]) or (f[2] .. " or " .. f[3]))
    fail(("`%s` takes %s argument%s, got %d"):format(name, want, want == "1" and "" or "s", #args), t.pos)
  end
  return f[1](unpack(args))
end

--- Evaluates an arithmetic expression.
---@param src string
---@return number|nil value
---@return string|nil err
function M.evaluate(src)
  if type(src) ~= "string" or src:match("^%s*$") then
    return nil, "empty expression"
  end
  local ok, res = pcall(function()
    return H.parser(H.tokenize(src))()
  end)
  if not ok then
    if type(res) == "table" and res.calc then
      return nil, res.msg
    end
    return nil, tostring(res)
  end
  if res ~= res then
    return nil, "the result is not a number (e.g. sqrt of a negative number or log of 0)"
  end
  return res
end

--- A number as the calculator prints it: integers without a decimal point.
---@param x number
---@return string
function M.format(x)
  if x == math.huge then
    return "inf"
  elseif x == -math.huge then
    return "-inf"
  elseif x == math.floor(x) and math.abs(x) < 1e15 then
    return ("%d"):format(x)
  end
  return (("%.15g"):format(x))
end

return M
