--- The trusted half of template expansion. This file never runs in Neovim's Lua:
--- flemma.templates loads it (with flemma/frontmatter/runtime.lua, whose environment
--- templates share) into an isolated Lua 5.1 interpreter (native/src/isolate.cpp),
--- with its own memory and a deadline for each call, sharing nothing with Neovim.
---
--- A template arrives compiled (flemma.templates compiles it on the Neovim side):
--- `code` calls `_lit(i)` for its i-th piece of literal text and `_out(value)` for the
--- value of a `{{ }}` expression; `map[n]` is the template line of code line n. The
--- literal text of a message never enters the interpreter: its rendering is a list of
--- pieces, numbers naming literals and strings for expression values. Included files
--- come with their literals (`add_file`) and render to a string.
---
--- An include of a file not given yet stops the rendering with `need`; Neovim reads
--- the file, adds it and renders again (the result does not depend on the order).
local M = {}
local H = {}

local frontmatter = require("flemma.isolated.frontmatter")

-- Everything given with add_file: ["template:/abs/path" | "raw:/abs/path"] = unit.
H.files = {}
H.MAX_DEPTH = 16
H.MAX_OUTPUT = 256 * 1024

function H.deepcopy(v)
  if type(v) ~= "table" then
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    out[k] = H.deepcopy(x)
  end
  return out
end

--- "a/./b/../c" -> "a/c"; keeps a leading "/".
function H.normalize(path)
  local parts = {}
  for seg in path:gmatch("[^/]+") do
    if seg == ".." then
      if #parts > 0 and parts[#parts] ~= ".." then
        parts[#parts] = nil
      elseif path:sub(1, 1) ~= "/" then
        parts[#parts + 1] = ".."
      end
    elseif seg ~= "." then
      parts[#parts + 1] = seg
    end
  end
  local out = table.concat(parts, "/")
  if path:sub(1, 1) == "/" then
    return "/" .. out
  end
  return out
end

function H.dirname(path)
  local d = path:match("^(.*)/[^/]*$")
  if d == nil then
    return "."
  end
  return d == "" and "/" or d
end

-- A path as messages show it: relative to the chat's directory when inside it.
function H.display(path)
  local base = H.meta.dirname
  if base and base ~= "/" and path:sub(1, #base + 1) == base .. "/" then
    return path:sub(#base + 2)
  end
  return path
end

-- "code:LINE: msg" of a unit -> "NAME:TEMPLATE_LINE: msg"; the template line.
function H.locate(msg, unit)
  if type(msg) ~= "string" then
    if msg == nil then
      return "an error without a message (nil)"
    end
    return ("a %s was raised as an error"):format(type(msg))
  end
  local prefix = unit.chunk .. ":"
  if msg:sub(1, #prefix) == prefix then
    local n, rest = msg:sub(#prefix + 1):match("^(%d+): (.*)$")
    if n then
      local line = unit.map[tonumber(n)] or unit.map[#unit.map] or 1
      return rest, line
    end
  end
  return msg, nil
end

-- Renders a unit into a list of pieces (a literal as its index, or as its text
-- when `inline`). Errors are raised as { message, line } tables.
function H.render(unit, inline, include)
  local out = {}
  local literals = unit.literals
  local env = frontmatter.env()
  env.flemma = nil
  for k, v in pairs(H.vars) do
    env[k] = H.deepcopy(v)
  end
  env.include = include
  env.__filename = H.meta.filename
  env.__dirname = H.meta.dirname
  env._lit = inline and function(i)
    out[#out + 1] = literals[i]
  end or function(i)
    out[#out + 1] = i
  end
  env._out = function(v)
    local t = type(v)
    if t == "string" then
      out[#out + 1] = v
    elseif t == "number" or t == "boolean" then
      out[#out + 1] = tostring(v)
    elseif t == "nil" then
      error('the value of this {{ }} is nil (an undefined variable?); write {{ "{{" }} for literal braces', 2)
    else
      error(("the value of this {{ }} is a %s; only strings, numbers and booleans are written"):format(t), 2)
    end
  end
  local chunk, err = isolate.load(unit.code, "=" .. unit.chunk, env)
  if not chunk then
    local msg, line = H.locate(err, unit)
    error({ message = msg, line = line }, 0)
  end
  local ok, rerr = pcall(chunk)
  if not ok then
    if type(rerr) == "table" and rerr.message then
      error(rerr, 0)
    end
    local msg, line = H.locate(rerr, unit)
    error({ message = msg, line = line }, 0)
  end
  return out
end

-- The include() of templates rendered for the file `dir`/… on top of `stack`.
function H.include_fn(stack)
  return function(path, opts)
    if type(path) ~= "string" or path == "" then
      error("include() wants a path (a string)", 2)
    end
    local raw = type(opts) == "table" and opts.raw == true
    local abs
    if path == "flemma:project" then
      abs, raw = path, true
    elseif path:sub(1, 2) == "~/" and H.meta.home then
      abs = H.normalize(H.meta.home .. path:sub(2))
    elseif path:sub(1, 1) == "/" then
      abs = H.normalize(path)
    else
      abs = H.normalize(stack[#stack].dir .. "/" .. path)
    end
    for _, s in ipairs(stack) do
      if s.path == abs then
        local chain = {}
        for j = 1, #stack do
          chain[#chain + 1] = H.display(stack[j].path)
        end
        chain[#chain + 1] = H.display(abs)
        error("include cycle: " .. table.concat(chain, " → "), 2)
      end
    end
    if #stack > H.MAX_DEPTH then
      error(("includes nested deeper than %d files"):format(H.MAX_DEPTH), 2)
    end
    local key = (raw and "raw:" or "template:") .. abs
    local unit = H.files[key]
    if unit == nil then
      H.need = H.need or { path = abs, raw = raw, from = stack[#stack].path }
      error({ message = "(needs " .. abs .. ")", need = true }, 0)
    end
    if unit.error then
      error(("include(%q): %s"):format(path, unit.error), 2)
    end
    local inner = {}
    for i, s in ipairs(stack) do
      inner[i] = s
    end
    inner[#inner + 1] = { path = abs, dir = H.dirname(abs) }
    local ok, pieces = pcall(H.render, unit, true, H.include_fn(inner))
    if not ok then
      if type(pieces) == "table" and pieces.need then
        error(pieces, 0)
      end
      local msg = type(pieces) == "table" and tostring(pieces.message) or tostring(pieces)
      local line = type(pieces) == "table" and pieces.line
      error(line and ("%s:%d: %s"):format(H.display(abs), line, msg) or ("%s: %s"):format(H.display(abs), msg), 2)
    end
    local n = 0
    for _, p in ipairs(pieces) do
      n = n + #p
      if n > H.MAX_OUTPUT then
        error(("include(%q) expands to more than %d KB"):format(path, H.MAX_OUTPUT / 1024), 2)
      end
    end
    return table.concat(pieces)
  end
end

---------------------------------------------------------------------------------------
-- Entry points
---------------------------------------------------------------------------------------

--- The variables and names of the chat: vars (the frontmatter's returned table, plain
--- data), meta = { filename, dirname, home }.
function M.setup(vars, meta)
  H.vars = type(vars) == "table" and vars or {}
  H.meta = type(meta) == "table" and meta or {}
  H.files = {}
  return true
end

--- Adds an included file: unit = { code, map, literals, chunk } or { error = msg }.
function M.add_file(key, unit)
  H.files[key] = unit
  return true
end

--- Renders a message's template: { pieces = {...} }, { need = { path, raw } }, or
--- { error = msg, line = template line | nil }.
function M.render(unit)
  H.need = nil
  local stack = { { path = H.meta.filename or "(this chat)", dir = H.meta.dirname or "." } }
  local ok, res = pcall(H.render, unit, false, H.include_fn(stack))
  if H.need then
    return { need = H.need }
  end
  if ok then
    return { pieces = res }
  end
  if type(res) == "table" then
    return { error = tostring(res.message), line = res.line }
  end
  return { error = tostring(res) }
end

return M
