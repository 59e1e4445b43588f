--- The layers of the Lua code and the edges between its modules, for
--- spec/architecture_spec.lua and `nvim -l spec/support/layers.lua` (prints the graph).
--- An edge is every `require("flemma...")`, `pcall(require, "flemma...")` and
--- `package.loaded["flemma..."]` in a file, at the top or inside a function; comments
--- and other strings are skipped by a small Lua tokenizer.
local M = {}

--- Bottom to top. A module may use modules of its own layer (without a cycle) and of
--- the layers below; never one above. A prefix names a folder (`flemma.core.` is
--- everything under lua/flemma/core/), a full name one module.
M.LAYERS = {
  {
    name = "isolated",
    what = "pure Lua that also runs inside the frontmatter interpreter: no Neovim API",
    modules = { "flemma.isolated." },
  },
  {
    name = "core",
    what = "util, log, config, the native binding, processes, files, the interpreter's host",
    modules = { "flemma.core." },
  },
  {
    name = "policy",
    what = "rules that need no chat: secrets, secret paths, reach, scope, sandbox, consent",
    modules = { "flemma.policy." },
  },
  {
    name = "chat",
    what = "the chat model: document, frontmatter and its trust, templates, attachments, the gate",
    modules = { "flemma.chat." },
  },
  {
    name = "tools",
    what = "the tool registry, approval, built-in tools, MCP, adapters",
    modules = { "flemma.tools", "flemma.tools.", "flemma.compat." },
  },
  {
    name = "provider",
    what = "requests: provider kinds, transport, the writer, usage, cost, key hosts, switching",
    modules = { "flemma.provider", "flemma.provider." },
  },
  { name = "cycle", what = "the three phases and sending", modules = { "flemma.cycle", "flemma.cycle." } },
  {
    name = "ui",
    what = "what the user sees and presses: view, folds, marks, previews, keys, status",
    modules = { "flemma.ui", "flemma.ui." },
  },
  {
    name = "entry",
    what = "setup, the :Flemma table, health, and the public entry modules",
    modules = {
      "flemma",
      "flemma.commands",
      "flemma.health",
      "flemma.document",
      "flemma.secrets",
      "lualine.components.flemma",
    },
  },
}

--- The layer index of a module name, or nil.
function M.layer_of(name)
  local best, best_len
  for i, layer in ipairs(M.LAYERS) do
    for _, p in ipairs(layer.modules) do
      local hit = (p:sub(-1) == "." and name:sub(1, #p) == p) or name == p
      if hit and (not best_len or #p > best_len) then
        best, best_len = i, #p
      end
    end
  end
  return best
end

--- Tokens of a Lua source: { kind = "name" | "string" | "op", value, line }, comments
--- dropped (line: where the token starts, 1-based).
function M.tokens(src)
  local out, i, n = {}, 1, #src
  local line, counted = 1, 1 -- the line of position `counted`
  local function emit(tok, at)
    local _, nl = src:sub(counted, at - 1):gsub("\n", "")
    line, counted = line + nl, at
    tok.line = line
    out[#out + 1] = tok
  end
  local function long_bracket(at)
    local eq = src:match("^%[(=*)%[", at)
    if not eq then
      return nil
    end
    local close = "]" .. eq .. "]"
    local s = at + #eq + 2
    local e = src:find(close, s, true)
    e = e or n + 1
    return src:sub(s, e - 1), e + #close
  end
  while i <= n do
    local c = src:sub(i, i)
    if c:match("%s") then
      i = i + 1
    elseif src:sub(i, i + 1) == "--" then
      local _, after = long_bracket(i + 2)
      if after then
        i = after
      else
        local e = src:find("\n", i, true)
        i = e and e + 1 or n + 1
      end
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then
          buf[#buf + 1] = src:sub(j, j + 1)
          j = j + 2
        elseif d == c then
          break
        else
          buf[#buf + 1] = d
          j = j + 1
        end
      end
      emit({ kind = "string", value = table.concat(buf) }, i)
      i = j + 1
    elseif c == "[" and src:match("^%[=*%[", i) then
      local s, after = long_bracket(i)
      emit({ kind = "string", value = s }, i)
      i = after
    elseif c:match("[%a_]") then
      local w = src:match("^[%w_]+", i)
      emit({ kind = "name", value = w }, i)
      i = i + #w
    elseif c:match("%d") then
      local w = src:match("^[%w_%.]+", i)
      i = i + #w
    else
      emit({ kind = "op", value = c }, i)
      i = i + 1
    end
  end
  return out
end

--- The flemma modules a source refers to: { { target, line? } ... } (line unknown: 0).
function M.refs(src)
  local t, refs = M.tokens(src), {}
  local function is(k, kind, value)
    local x = t[k]
    return x and x.kind == kind and (value == nil or x.value == value)
  end
  for k = 1, #t do
    local target
    if is(k, "name", "require") and k > 1 and not (is(k - 1, "op", ".") or is(k - 1, "op", ":")) then
      if is(k + 1, "string") then
        target = t[k + 1].value
      elseif is(k + 1, "op", "(") and is(k + 2, "string") then
        target = t[k + 2].value
      elseif is(k - 1, "op", ",") or is(k - 1, "op", "(") then
        -- pcall(require, "x") / xpcall(require, h, "x"): the next string argument
        if is(k + 1, "op", ",") and is(k + 2, "string") then
          target = t[k + 2].value
        end
      end
    elseif is(k, "name", "package") and is(k + 1, "op", ".") and is(k + 2, "name", "loaded") then
      if is(k + 3, "op", "[") and is(k + 4, "string") then
        target = t[k + 4].value
      end
    end
    if target and (target == "flemma" or target:match("^flemma%.")) then
      refs[#refs + 1] = target
    end
  end
  return refs
end

--- Every module below root/lua: name -> path.
function M.modules(root)
  local mods = {}
  local base = root .. "/lua/"
  for name, kind in vim.fs.dir(base, { depth = 10 }) do
    if kind == "file" and name:match("%.lua$") then
      local mod = name:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      mods[mod] = base .. name
    end
  end
  return mods
end

--- The graph: { modules = name -> path, edges = { from = { to = true } } }.
function M.graph(root)
  local mods = M.modules(root)
  local edges = {}
  for name, path in pairs(mods) do
    local f = assert(io.open(path, "rb"))
    local src = f:read("*a")
    f:close()
    edges[name] = {}
    for _, target in ipairs(M.refs(src)) do
      if target ~= name and mods[target] then
        edges[name][target] = true
      end
    end
  end
  return { modules = mods, edges = edges }
end

--- Edges that point up: "from (layer) -> to (layer)", sorted.
function M.upward(g)
  local out = {}
  for from, tos in pairs(g.edges) do
    for to in pairs(tos) do
      local a, b = M.layer_of(from), M.layer_of(to)
      if a and b and b > a then
        out[#out + 1] = ("%s (%s) -> %s (%s)"):format(from, M.LAYERS[a].name, to, M.LAYERS[b].name)
      end
    end
  end
  table.sort(out)
  return out
end

--- The functions a file defines at its top level more than once (`function M.f`, then
--- `M.f = ...` or `function M.f` again): the names, in order.
---@param path string
---@return string[]
function M.redefined(path)
  local seen, twice = {}, {}
  for line in io.lines(path) do
    local fn = line:match("^function ([%w_%.:]+)%(")
    local key = fn or line:match("^([MH]%.[%w_%.]+) = ")
    if key then
      if seen[key] and (fn or seen[key] == "function") then
        twice[#twice + 1] = key
      end
      seen[key] = (fn or line:match("= function")) and "function" or "value"
    end
  end
  return twice
end

--- The functions of a Lua source longer than `max` lines: { name, line, lines } in the
--- order they end. A function's length is the line of its `end` less the line of its
--- `function` (as clang-tidy's readability-function-size counts a C++ body, from `{` to
--- `}`). Blocks are followed by their keywords on the tokens (comments and strings
--- skipped): `function`, `do` (also of while and for), `if` and `repeat` open one, `end`
--- and `until` close it; so the layout does not matter and a nested function is measured
--- on its own as well as inside the one around it. The name is the one after
--- `function`, else the one assigned (`M.f = function`, `key = function`), else
--- "function".
---@param src string
---@param max integer
---@return { name: string, line: integer, lines: integer }[]
function M.long_functions(src, max)
  local t, stack, out = M.tokens(src), {}, {}
  local function is(k, kind, values)
    local x = t[k]
    return x ~= nil and x.kind == kind and (values == nil or values[x.value] == true)
  end
  local dot = { ["."] = true, [":"] = true }
  -- The name after `function` (a.b:c), else the one before `= function`.
  local function name_of(k)
    local j = k + 1
    local name
    if is(j, "name") then
      name = t[j].value
      while is(j + 1, "op", dot) and is(j + 2, "name") do
        name = name .. t[j + 1].value .. t[j + 2].value
        j = j + 2
      end
      return name
    end
    j = k - 2
    if not (is(k - 1, "op", { ["="] = true }) and is(j, "name")) then
      return "function"
    end
    name = t[j].value
    while is(j - 1, "op", dot) and is(j - 2, "name") do
      name = t[j - 2].value .. t[j - 1].value .. name
      j = j - 2
    end
    return name
  end
  local opens = { ["do"] = true, ["if"] = true, ["repeat"] = true }
  local closes = { ["end"] = true, ["until"] = true }
  for k = 1, #t do
    if is(k, "name", { ["function"] = true }) then
      stack[#stack + 1] = { name = name_of(k), line = t[k].line }
    elseif is(k, "name", opens) then
      stack[#stack + 1] = false
    elseif is(k, "name", closes) then
      local b = table.remove(stack)
      if b and t[k].line - b.line > max then
        out[#out + 1] = { name = b.name, line = b.line, lines = t[k].line - b.line }
      end
    end
  end
  return out
end

--- Modules no layer claims.
function M.unplaced(g)
  local out = {}
  for name in pairs(g.modules) do
    if not M.layer_of(name) then
      out[#out + 1] = name
    end
  end
  table.sort(out)
  return out
end

--- Cycles: each strongly connected component of more than one module, as a sorted
--- list of names, with one edge of it named ("a -> b").
function M.cycles(g)
  local index, low, stack, on, out, counter = {}, {}, {}, {}, {}, 0
  local names = vim.tbl_keys(g.modules)
  table.sort(names)
  local function connect(v)
    counter = counter + 1
    index[v], low[v] = counter, counter
    stack[#stack + 1], on[v] = v, true
    local tos = vim.tbl_keys(g.edges[v] or {})
    table.sort(tos)
    for _, w in ipairs(tos) do
      if not index[w] then
        connect(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        comp[#comp + 1] = w
      until w == v
      if #comp > 1 then
        table.sort(comp)
        out[#out + 1] = comp
      end
    end
  end
  for _, v in ipairs(names) do
    if not index[v] then
      connect(v)
    end
  end
  return out
end

if arg and arg[0] and arg[0]:match("layers%.lua$") then
  local root = vim.fn.fnamemodify(arg[0], ":p:h:h:h")
  local g = M.graph(root)
  for _, e in ipairs(M.upward(g)) do
    print("up: " .. e)
  end
  for _, c in ipairs(M.cycles(g)) do
    print(("cycle of %d: %s"):format(#c, table.concat(c, " ")))
  end
  for _, u in ipairs(M.unplaced(g)) do
    print("unplaced: " .. u)
  end
end

return M
