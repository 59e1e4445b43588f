--- Templates in @System: and @You: text, expanded in what is sent (never in the
--- buffer): `{{ expression }}` writes a value, `{% statements %}` runs Lua (loops,
--- conditions), and a `-` inside a tag (`{{-`, `-}}`, `{%-`, `-%}`) removes the
--- whitespace before or after it. A tag ends at the first closing outside the Lua
--- strings and comments of its code. The code runs in the isolated interpreter of the
--- frontmatter (flemma.frontmatter: same environment, same time and memory limits),
--- with the table the Lua frontmatter returns as variables, `__filename`, `__dirname`
--- and `include(path)`, which inlines another file (a template too; relative to the
--- file that includes it; `{ raw = true }` inlines it as written).
--- `include("flemma:project")` inlines the project's instruction files.
---
--- A template is compiled here into Lua code that calls `_lit(i)` for its literal
--- text and `_out(v)` for each value; the literal text of a message stays on this side
--- and the interpreter answers with a list of pieces (flemma/templates/runtime.lua).
--- An include of a file the interpreter does not have yet stops the rendering: the
--- file is read here, handed over, and the message rendered again.
local M = {}
local util = require("flemma.core.util")
local H = {}

--- Largest file include() reads (bytes).
M.MAX_FILE = 256 * 1024
--- Most files one send may include.
M.MAX_FILES = 64
--- The instruction files of `include("flemma:project")`, in the order they are joined.
M.PROJECT_FILES = { "AGENTS.md", "CLAUDE.md", ".cursorrules", ".github/copilot-instructions.md" }

---@class flemma.templates.Unit
---@field code string Lua code: `_lit(i)` for literal i, `_out(v)` for a value
---@field map integer[] the template line of each code line
---@field literals string[]
---@field chunk string the name errors use

---------------------------------------------------------------------------------------
-- Compiling
---------------------------------------------------------------------------------------

--- Whether text holds a template tag (a cheap scan).
---@param text string
---@return boolean
function M.has_tags(text)
  return text:find("{{", 1, true) ~= nil or text:find("{%", 1, true) ~= nil
end

local function count_nl(s)
  local _, n = s:gsub("\n", "")
  return n
end

--- Where the tag whose body starts at `from` is closed by `close` ("}}" or "%}"):
--- the first `close` outside the body's Lua strings ('..', "..", [[..]], [=[..]=])
--- and long comments; a `--` comment ends at the end of its line or at `close`.
--- nil when a string or long comment is not closed (the caller then takes the
--- first `close`, and Lua reports the broken string).
function H.tag_end(text, from, close)
  local i = from
  local stops = "[\"'%[%-" .. close:sub(1, 1):gsub("%%", "%%%%") .. "]"
  while true do
    i = text:find(stops, i)
    if not i then
      return nil
    end
    local c = text:sub(i, i)
    if text:sub(i, i + 1) == close then
      return i
    elseif c == '"' or c == "'" then
      local j = i + 1
      while true do
        j = text:find("[\\\n" .. c .. "]", j)
        if not j or text:sub(j, j) == "\n" then
          return nil
        elseif text:sub(j, j) == "\\" then
          j = j + 2
        else
          break
        end
      end
      i = j + 1
    elseif c == "[" or (c == "-" and text:sub(i + 1, i + 1) == "-") then
      local long = c == "[" and text:match("^%[(=*)%[", i) or text:match("^%-%-%[(=*)%[", i)
      if long then
        local _, e = text:find("]" .. long .. "]", i, true)
        if not e then
          return nil
        end
        i = e + 1
      elseif c == "-" then
        local nl = text:find("\n", i, true) or (#text + 1)
        local cs = text:find(close, i + 2, true)
        if cs and cs < nl then
          return cs
        end
        i = nl
      else
        i = i + 1
      end
    else
      i = i + 1
    end
  end
end

--- Compiles template text.
---@param text string
---@param chunk string the name of the text in error messages
---@return flemma.templates.Unit|nil unit
---@return { line: integer, message: string }|nil err line is 1-based in text
function M.compile(text, chunk)
  local code, map, literals = {}, {}, {}
  local function emit(s, at)
    local k = 0
    for seg in (s .. "\n"):gmatch("([^\n]*)\n") do
      code[#code + 1] = seg
      map[#map + 1] = at + k
      k = k + 1
    end
  end
  local function literal(s, at)
    if s ~= "" then
      literals[#literals + 1] = s
      emit(("_lit(%d)"):format(#literals), at)
    end
  end
  local pos, line, trim_next = 1, 1, false
  while true do
    local s, e, kind = text:find("{([{%%])", pos)
    local before = text:sub(pos, s and s - 1 or #text)
    local open_line = line + count_nl(before)
    local trim_before = s ~= nil and text:sub(e + 1, e + 1) == "-"
    local lit_line = line
    if trim_next then
      local ws = before:match("^%s*")
      lit_line = lit_line + count_nl(ws)
      before = before:sub(#ws + 1)
    end
    if trim_before then
      before = before:gsub("%s+$", "")
    end
    literal(before, lit_line)
    if not s then
      break
    end
    local close = kind == "{" and "}}" or "%}"
    local body_start = e + 1 + (trim_before and 1 or 0)
    local cs = H.tag_end(text, body_start, close) or text:find(close, body_start, true)
    if not cs then
      return nil, { line = open_line, message = ("`{%s` is not closed by `%s`"):format(kind, close) }
    end
    local body_end = cs - 1
    trim_next = body_end >= body_start and text:sub(body_end, body_end) == "-"
    if trim_next then
      body_end = body_end - 1
    end
    local body = text:sub(body_start, body_end)
    if kind == "{" then
      if not body:find("%S") then
        return nil, { line = open_line, message = "`{{ }}` holds no expression" }
      end
      -- The closing parentheses on a line of their own: a `--` comment in the
      -- expression cannot hide them.
      emit("_out((" .. body, open_line)
      -- Lua names the line of the last token read for an error in an expression.
      code[#code + 1] = "))"
      map[#map + 1] = map[#map]
    else
      emit(body, open_line)
    end
    line = open_line + count_nl(text:sub(e + 1, cs + 1))
    pos = cs + 2
  end
  return { code = table.concat(code, "\n"), map = map, literals = literals, chunk = chunk }
end

---------------------------------------------------------------------------------------
-- Files
---------------------------------------------------------------------------------------

-- A file's identity for the cache: "mtime size inode", or "-" when it is not there.
function H.stamp(path)
  local st = vim.uv.fs_stat(path)
  if not st then
    return "-"
  end
  return ("%d.%d %d %d"):format(st.mtime.sec, st.mtime.nsec or 0, st.size, st.ino or 0)
end

-- A path as messages show it: relative to the chat's directory when inside it.
function H.display(path, dir)
  if dir and dir ~= "/" and path:sub(1, #dir + 1) == dir .. "/" then
    return path:sub(#dir + 2)
  end
  return path
end

H.REFUSED = { "/proc", "/sys", "/dev" }

-- The text of a file, or nil and why not.
function H.read(path, dir, bufnr)
  local shown = H.display(path, dir)
  local st, serr = vim.uv.fs_stat(path)
  if not st then
    return nil, ("cannot read %s: %s"):format(shown, (serr or "no such file"):gsub("^ENOENT:.*", "no such file"))
  elseif st.type ~= "file" then
    return nil, ("cannot read %s: it is %s"):format(shown, require("flemma.core.files").refusal(st.type))
  elseif st.size > M.MAX_FILE then
    return nil, ("%s is %d bytes; include() reads files of at most %d KB"):format(shown, st.size, M.MAX_FILE / 1024)
  end
  -- The kernel's files (/proc/self/environ holds the API keys) are not documents.
  local real = vim.uv.fs_realpath(path) or path
  for _, root in ipairs(H.REFUSED) do
    if real == root or real:sub(1, #root + 1) == root .. "/" then
      return nil, ("cannot read %s: files under %s are not included"):format(shown, root)
    end
  end
  -- A file outside the project is read only once the user allowed it (flemma.reach).
  local inside, rerr = require("flemma.policy.reach").check(bufnr, path, shown)
  if not inside then
    return nil, rerr
  end
  -- Without waiting for a FIFO swapped in since the stat (flemma.files).
  local fd, ferr = require("flemma.core.files").open_regular(path)
  if not fd then
    return nil, ("cannot read %s: %s"):format(shown, ferr)
  end
  local text = require("flemma.core.files").read_fd(fd, M.MAX_FILE)
  if #text > M.MAX_FILE then
    return nil, ("%s is %d bytes; include() reads files of at most %d KB"):format(shown, #text, M.MAX_FILE / 1024)
  end
  return (text:gsub("\r\n", "\n"))
end

--- The project's instruction files for `include("flemma:project")`: for each project
--- root (the cwd, then the chat's directory; the sandbox's writable roots while the
--- sandbox is on), each of M.PROJECT_FILES that exists, in that order. A file seen
--- before (the same file through a symlink, or the same text) is left out. The texts
--- are joined with a blank line between them; "" when there are none.
---@param bufnr integer
---@return string text
---@return string[] paths the files joined
---@return string[] candidates every path looked at (for the cache)
function M.project(bufnr)
  local roots = require("flemma.policy.scope").roots(bufnr)
  local texts, paths, candidates = {}, {}, {}
  local seen_real, seen_text = {}, {}
  for _, root in ipairs(roots) do
    for _, name in ipairs(M.PROJECT_FILES) do
      local path = root .. "/" .. name
      candidates[#candidates + 1] = path
      local st = vim.uv.fs_stat(path)
      if st and st.type == "file" then
        local real = vim.uv.fs_realpath(path) or path
        if not seen_real[real] then
          seen_real[real] = true
          local text, err = H.read(path, nil, bufnr)
          if not text then
            error(err, 0)
          end
          text = text:gsub("%s+$", "")
          if text ~= "" and not seen_text[text] then
            seen_text[text] = true
            texts[#texts + 1] = text
            paths[#paths + 1] = path
          end
        end
      end
    end
  end
  return table.concat(texts, "\n\n"), paths, candidates
end

---------------------------------------------------------------------------------------
-- The interpreter of one expansion
---------------------------------------------------------------------------------------

H.MODULES = {
  ["flemma.isolated.frontmatter"] = "isolated/frontmatter.lua",
  ["flemma.isolated.templates"] = "isolated/templates.lua",
}
H.RUNTIME = "flemma.isolated.templates"

-- One expansion: an interpreter made when first needed, the files handed to it.
local Session = {}
Session.__index = Session

function H.session(bufnr, vars, meta)
  return setmetatable({ bufnr = bufnr, vars = vars, meta = meta, files = {}, stamps = {}, count = 0 }, Session)
end

function Session:call(fn, ...)
  if not self.iso then
    self.iso = require("flemma.core.isolate").new(H.MODULES, H.RUNTIME)
    local res = self.iso:keep("setup", self.vars, self.meta)
    if not res.ok then
      self:close()
      return res
    end
    for key, unit in pairs(self.files) do
      self.iso:keep("add_file", key, unit)
    end
  end
  local res = fn == "add_file" and self.iso:keep(fn, ...) or self.iso:call(fn, ...)
  if not res.ok and res.limit then
    -- A limit was hit: the next message starts in a fresh interpreter.
    self:close()
  end
  return res
end

function Session:close()
  if self.iso then
    self.iso:close()
    self.iso = nil
  end
end

-- The unit for an include the interpreter asked for.
function Session:load(need)
  local dir = self.meta.dirname
  self.count = self.count + 1
  if self.count > M.MAX_FILES then
    return { error = ("more than %d files included"):format(M.MAX_FILES) }
  end
  if need.path == "flemma:project" then
    local ok, text, _, candidates = pcall(M.project, self.bufnr)
    if not ok then
      return { error = tostring(text) }
    end
    for _, p in ipairs(candidates) do
      self.stamps[p] = H.stamp(p)
    end
    if #text > M.MAX_FILE then
      return {
        error = ("the project's instruction files hold %d bytes, more than %d KB"):format(#text, M.MAX_FILE / 1024),
      }
    end
    return { code = "_lit(1)", map = { 1 }, literals = { text }, chunk = "flemma:project" }
  end
  self.stamps[need.path] = H.stamp(need.path)
  local text, err = H.read(need.path, dir, self.bufnr)
  if not text then
    return { error = err }
  end
  local shown = H.display(need.path, dir)
  if need.raw or not M.has_tags(text) then
    return { code = text == "" and "" or "_lit(1)", map = { 1 }, literals = { text }, chunk = shown }
  end
  local unit, cerr = M.compile(text, shown)
  if not unit then
    return { error = ("%s:%d: %s"):format(shown, cerr.line, cerr.message) }
  end
  return unit
end

--- Renders one unit: its pieces, or nil, message, template line (nil: unknown).
function Session:render(unit)
  for _ = 1, M.MAX_FILES + 1 do
    local res = self:call("render", unit)
    if not res.ok then
      return nil, res.error
    end
    local v = (res.values or {})[1] or {}
    if v.need then
      local key = (v.need.raw and "raw:" or "template:") .. v.need.path
      local file = self:load(v.need)
      self.files[key] = file
      local added = self:call("add_file", key, file)
      if not added.ok then
        return nil, added.error
      end
    elseif v.error then
      return nil, v.error, v.line
    else
      return v.pieces or {}
    end
  end
  return nil, ("more than %d files included"):format(M.MAX_FILES)
end

---------------------------------------------------------------------------------------
-- Expanding a document
---------------------------------------------------------------------------------------

-- Per text part (weak keys; the document keeps a part's table while it is unchanged):
-- whether it holds tags. Per message table: its last expansion { key, copy, stamps }.
H.tags = setmetatable({}, { __mode = "k" })
H.cache = setmetatable({}, { __mode = "k" })

-- Per message table: whether it is an @System:/@You: message with tags in its text
-- (one lookup per message on each send; the document keeps a message's table while
-- it is unchanged).
H.msg_tags = setmetatable({}, { __mode = "k" })

function H.message_has_tags(msg)
  if msg.role == "system" or msg.role == "user" then
    for _, p in ipairs(msg.parts) do
      if p.kind == "text" and H.part_has_tags(p) then
        return true
      end
    end
  end
  return false
end

function H.part_has_tags(p)
  local t = H.tags[p]
  if t == nil then
    t = type(p.text) == "string" and M.has_tags(p.text)
    H.tags[p] = t
  end
  return t
end

-- A kept copy of msg gets msg's current line numbers (the document moves an
-- unchanged message's table in place when lines above it change).
function H.refresh(copy, msg)
  for k, v in pairs(msg) do
    if k ~= "parts" then
      copy[k] = v
    end
  end
  for j, p in ipairs(msg.parts) do
    local c = copy.parts[j]
    if c ~= p then
      for k, v in pairs(p) do
        if k ~= "text" then
          c[k] = v
        end
      end
    end
  end
end

function H.fresh(entry, key)
  if not entry or entry.key ~= key then
    return false
  end
  for path, stamp in pairs(entry.stamps) do
    if H.stamp(path) ~= stamp then
      return false
    end
  end
  return true
end

function H.meta(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local meta = { home = vim.uv.os_homedir(), cwd = vim.fs.normalize(vim.fn.getcwd()) }
  if name ~= "" then
    local file = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
    meta.filename = file
    meta.dirname = vim.fs.dirname(file)
  else
    meta.dirname = meta.cwd
  end
  return meta
end

-- Expands one text part: the new text, or nil and a problem { line, message }.
function H.expand_part(session, p)
  local unit, cerr = M.compile(p.text, "template")
  if not unit then
    return nil, { line = p.first_line + cerr.line - 1, message = "template: " .. cerr.message }
  end
  local pieces, err, line = session:render(unit)
  if not pieces and not line and type(err) == "string" then
    -- a limit error raised by the interpreter itself: "template:N: ..."
    local n, rest = err:match("^template:(%d+): (.*)$")
    if n then
      line, err = unit.map[tonumber(n)], rest
    end
  end
  if not pieces then
    return nil, { line = p.first_line + (line or 1) - 1, message = "template: " .. tostring(err) }
  end
  local out = {}
  for i, piece in ipairs(pieces) do
    out[i] = type(piece) == "number" and unit.literals[piece] or piece
  end
  return table.concat(out)
end

--- The document as it is sent: @System: and @You: text parts with template tags
--- replaced by their expansion (in copies; the document itself and the buffer are
--- not touched). A document without tags is returned as it is. Problems name the
--- buffer line of each error; the send must not happen then.
---@param bufnr integer
---@param doc flemma.document.Doc
---@return flemma.document.Doc|nil doc
---@return { line: integer, message: string }[]|nil problems
function M.expand(bufnr, doc)
  local todo = nil
  local msg_tags = H.msg_tags
  for i, msg in ipairs(doc.messages) do
    local t = msg_tags[msg]
    if t == nil then
      t = H.message_has_tags(msg)
      msg_tags[msg] = t
    end
    if t then
      todo = todo or {}
      todo[#todo + 1] = i
    end
  end
  if not todo then
    return doc
  end
  local opts, ferr = require("flemma.chat.frontmatter").get(bufnr)
  if ferr then
    return nil, { { line = doc.frontmatter and doc.frontmatter.first_line or 1, message = ferr } }
  end
  local vars = opts and opts.variables or vim.empty_dict()
  local meta = H.meta(bufnr)
  local key = vim.json.encode({ vars, meta })
  local session = H.session(bufnr, vars, meta)
  local messages = table.move(doc.messages, 1, #doc.messages, 1, {})
  local problems = {}
  for _, i in ipairs(todo) do
    local msg = doc.messages[i]
    local entry = H.cache[msg]
    if H.fresh(entry, key) then
      -- The same table as last time (the providers and the attachments step keep
      -- their work per message table), its line numbers brought up to date.
      H.refresh(entry.copy, msg)
      messages[i] = entry.copy
    else
      local copy = util.copy(msg)
      copy.parts = {}
      local ok = true
      for j, p in ipairs(msg.parts) do
        copy.parts[j] = p
        if p.kind == "text" and H.part_has_tags(p) then
          local text, perr = H.expand_part(session, p)
          if text then
            local part = util.copy(p)
            part.text = text
            part.expanded = true -- its text is no longer the buffer's lines
            copy.parts[j] = part
          else
            ok = false
            problems[#problems + 1] = perr
          end
        end
      end
      if ok then
        H.cache[msg] = { key = key, copy = copy, stamps = vim.deepcopy(session.stamps) }
      end
      messages[i] = copy
    end
  end
  session:close()
  if #problems > 0 then
    return nil, problems
  end
  local out = util.copy(doc)
  out.messages = messages
  return out
end

---------------------------------------------------------------------------------------
-- :Flemma preview
---------------------------------------------------------------------------------------

H.MARKERS = { system = "@System:", user = "@You:", assistant = "@Assistant:" }

--- The lines of the conversation as it would be sent: the chat without its
--- frontmatter, templates expanded, the files it references attached (text
--- inlined, images and PDFs as one line naming them); nil and problems when a
--- template or a file fails. Files outside the project are not asked for: they
--- are problems.
---@param bufnr integer
---@return string[]|nil lines
---@return { line: integer, message: string }[]|nil problems
function M.preview_lines(bufnr)
  local doc = require("flemma.chat.document").get(bufnr)
  local expanded, problems = M.expand(bufnr, doc)
  if expanded then
    expanded, problems = require("flemma.chat.attachments").expand(bufnr, expanded)
    require("flemma.policy.reach").take_wanted(bufnr) -- a preview never asks
  end
  if not expanded then
    return nil, problems
  end
  local out = {}
  for _, msg in ipairs(expanded.messages) do
    if #out > 0 then
      out[#out + 1] = ""
    end
    out[#out + 1] = H.MARKERS[msg.role] or ("@" .. tostring(msg.role) .. ":")
    for _, p in ipairs(msg.parts) do
      if p.kind == "file" then
        out[#out + 1] = ("[attached: %s, %s, %s]"):format(
          p.path,
          p.mime,
          require("flemma.core.native").format_size(p.size)
        )
      elseif p.expanded or p.attached then
        vim.list_extend(out, vim.split(p.text, "\n", { plain = true }))
      else
        vim.list_extend(out, vim.api.nvim_buf_get_lines(bufnr, p.first_line - 1, p.last_line, false))
      end
    end
  end
  return out
end

return M
