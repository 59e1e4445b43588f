--- What a request says: the context a kind builds from (conversation, tools,
--- parameters, key) and the body it builds, as a table or as the JSON text that goes
--- on the wire, the entry's own headers on top.
local kinds = require("flemma.provider.kinds")
local common = require("flemma.provider.common")

local M = {}
local H = {}

---@class flemma.provider.Context
---@field spec flemma.provider.Spec
---@field model string
---@field model_info? flemma.models.Model
---@field parameters table
---@field request { system?: string, messages: table[] }
---@field tools { name: string, description: string, input_schema: table }[]
---@field key? string
---@field bufnr? integer
---@field doc_messages? table[] the document's messages (system included): encoded once per message (M.pieces)

--- Tool definitions offered in a buffer.
function H.tools(bufnr)
  local tools = require("flemma.tools")
  local names = bufnr and tools.for_buffer(bufnr) or tools.list()
  local out = {}
  for _, name in ipairs(names) do
    local def = tools.get(name)
    if def then
      out[#out + 1] =
        { name = name, description = def.description, input_schema = def.input_schema, strict = def.strict }
    end
  end
  return out
end

--- Everything a kind needs to build a request.
---@param spec flemma.provider.Spec
---@param request table from document.to_messages
---@param o? { bufnr?: integer, parameters?: table, tools?: table[], key?: string }
---@return flemma.provider.Context
function M.context(spec, request, o)
  o = o or {}
  local params = o.parameters
  if not params then
    if o.bufnr then
      params = require("flemma.chat.frontmatter").parameters(o.bufnr, spec.kind)
    else
      params = vim.deepcopy(require("flemma.core.config").get().parameters)
    end
  end
  return {
    spec = spec,
    model = spec.model,
    model_info = require("flemma.core.models").get(spec.kind, spec.model),
    parameters = params,
    request = request,
    tools = o.tools or H.tools(o.bufnr),
    key = o.key,
    bufnr = o.bufnr,
  }
end

--- The context of a buffer's document: the kind reads the document's messages
--- itself (flemma.provider.encode encodes only what changed since the last send).
---@param spec flemma.provider.Spec
---@param doc flemma.document.Doc
---@param o { bufnr: integer, key?: string }
---@return flemma.provider.Context
function M.document_context(spec, doc, o)
  local ctx = M.context(spec, { system = H.system_text(doc), messages = {} }, o)
  ctx.doc_messages = doc.messages
  return ctx
end

--- The system text of a document (as document.to_messages joins it).
function H.system_text(doc)
  local out = {}
  for _, msg in ipairs(doc.messages) do
    if msg.role == "system" then
      for _, p in ipairs(msg.parts) do
        if p.kind == "text" then
          out[#out + 1] = p.text
        end
      end
    end
  end
  return #out > 0 and table.concat(out, "\n\n") or nil
end

--- The entry's own headers on top of the kind's.
function H.entry_headers(ctx, headers)
  for k, v in pairs(ctx.spec.headers or {}) do
    headers[k:lower()] = v
  end
  return headers
end

--- The request body (a table) and headers of a context.
---@param ctx flemma.provider.Context
---@return table body
---@return table<string, string> headers
function M.build(ctx)
  local kind = assert(kinds.get(ctx.spec.kind))
  local body, headers = kind.build(ctx)
  return body, H.entry_headers(ctx, headers)
end

--- The request body as a list of string pieces (concatenated: the JSON text that goes
--- on the wire), so a large conversation is not copied into one string before it is
--- written; and the headers. A context with the document's messages (doc_messages)
--- is encoded once per message: see H.incremental.
---@param ctx flemma.provider.Context
---@return string[] pieces
---@return table<string, string> headers
function M.pieces(ctx)
  local kind = assert(kinds.get(ctx.spec.kind))
  local msgs = ctx.doc_messages
  local pieces, headers
  if msgs and msgs[1] and H.seen[msgs[1]] then
    pieces, headers = H.incremental(kind, ctx)
  else
    if msgs then
      -- Message tables not seen before (a fresh full parse): one encode of the whole
      -- request is cheaper than one per message. Per-message encoding pays off once
      -- the document hands back the same tables for unchanged messages.
      if msgs[1] then
        H.seen[msgs[1]] = true
      end
      ctx = H.with(ctx, { request = require("flemma.chat.document").to_messages({ messages = msgs }) })
    end
    local body
    body, headers = kind.build(ctx)
    pieces = { vim.json.encode(body) }
  end
  return pieces, H.entry_headers(ctx, headers)
end

-- The shared per-message cache of every kind. The incremental document hands back the
-- same message table while a message is unchanged, so the encoding of a conversation
-- message (a run of document messages of one role, as document.to_messages joins
-- them) is kept under its first table: its JSON items, reused while the run has the
-- same tables, the kind and what else changes the items (parameters.thinking_foreign,
-- the kind's `variant`) are the same, and what the items looked up in the messages
-- before (refs) still answers the same.
H.entries = setmetatable({}, { __mode = "k" })
H.seen = setmetatable({}, { __mode = "k" })
H.SENTINEL = "\1flemma-conversation\1"

---@class flemma.provider.encode.Entry
---@field msgs table[] the run's document messages (weak)
---@field variant string
---@field role string the role on the wire
---@field json string the items as JSON, without the brackets ("" for none)
---@field reads? table<string, string|false> the refs the items looked up, and the answers

--- Whether a cached entry still holds the encoding of a run.
function H.valid(entry, run, variant, refs)
  if not entry or entry.variant ~= variant or #entry.msgs ~= #run.msgs then
    return false
  end
  for i, m in ipairs(run.msgs) do
    if entry.msgs[i] ~= m then
      return false
    end
  end
  if entry.reads then
    for id, name in pairs(entry.reads) do
      if (refs.tool_name(id) or false) ~= name then
        return false
      end
    end
  end
  return true
end

--- The items of a run: its conversation message encoded by the kind; the refs it
--- looks up are noted.
function H.items(conv, ctx, run, refs)
  local msg = require("flemma.chat.document").to_messages({ messages = run.msgs }).messages[1]
  local reads
  local noted = {
    tool_name = function(id)
      local name = refs.tool_name(id)
      reads = reads or {}
      reads[id] = name or false
      return name
    end,
  }
  return conv.items(msg, ctx, noted), reads
end

--- The cached entry of a run, made when there is none or it no longer holds.
function H.entry(conv, ctx, run, variant, refs)
  local entry = H.entries[run.msgs[1]]
  if H.valid(entry, run, variant, refs) then
    return entry
  end
  local items, reads = H.items(conv, ctx, run, refs)
  entry = {
    -- Weak: an entry never keeps a message alive (its key least of all, as a weak-keyed
    -- table whose value holds its key would never let go of either).
    msgs = setmetatable({ unpack(run.msgs) }, { __mode = "v" }),
    variant = variant,
    role = common.wire_role(conv, run.role),
    json = #items > 0 and vim.json.encode(items):sub(2, -2) or "",
    reads = reads,
  }
  H.entries[run.msgs[1]] = entry
  return entry
end

--- The opening and closing text of a turn of a role (split around a stand-in item),
--- made once per kind and role.
H.turns = setmetatable({}, { __mode = "k" })
function H.turn_text(conv, role)
  local by_role = H.turns[conv]
  if not by_role then
    by_role = {}
    H.turns[conv] = by_role
  end
  local t = by_role[role]
  if not t then
    local json = vim.json.encode(conv.turn(role, { H.SENTINEL }))
    local s, e = json:find(vim.json.encode(H.SENTINEL), 1, true)
    t = { json:sub(1, s - 1), json:sub(e + 1), "," .. json:sub(1, s - 1) }
    by_role[role] = t
  end
  return t[1], t[2], t[3]
end

--- The body of a context with doc_messages: the kind builds the body without the
--- conversation; the conversation's pieces are kept from the last encoding up to the
--- first document message that changed (another table at that place) and made from
--- there on of the cached items of each run (encoded afresh only for runs that
--- changed), in turns where the kind has them; the last run with items is encoded
--- afresh when the kind marks it (anthropic's cache breakpoint). One list of pieces
--- is kept (for the last buffer and kind that sent) and rewritten in place: a send
--- after an edit at the end does work only for the end.
function H.incremental(kind, ctx)
  local conv = kind.conversation
  local msgs = ctx.doc_messages
  local body, headers = kind.build(H.with(ctx, { request = { system = ctx.request.system, messages = {} } }))
  local lead = body[conv.field]
  body[conv.field] = H.SENTINEL
  local json = vim.json.encode(body)
  local s, e = json:find(vim.json.encode(H.SENTINEL), 1, true)
  local variant = kind.kind
    .. "\0"
    .. tostring(ctx.parameters.thinking_foreign or "text")
    .. "\0"
    .. (conv.variant and conv.variant(ctx) or "")

  ---@type table|nil the pieces of the last encoding, its messages and a mark per message
  local last = H.last
  if not last or last.bufnr ~= ctx.bufnr or last.variant ~= variant then
    last = { bufnr = ctx.bufnr, variant = variant, msgs = {}, marks = {}, out = {} }
    H.last = last
  end
  local prev, marks, out = last.msgs, last.marks, last.out
  local same, limit = 0, math.min(#msgs, #prev)
  while same < limit and msgs[same + 1] == prev[same + 1] do
    same = same + 1
  end
  -- The state of the assembly after message `same`: pieces written (out[2..n]), the
  -- open turn, whether anything was written, the run being gathered.
  local st = { n = 1, wrote = false }
  if same > 0 then
    local m = marks[same]
    st = {
      n = m.n,
      wrote = m.wrote,
      open_role = m.open_role,
      close = m.close,
      last_run = m.last_run,
      last_at = m.last_at,
    }
    if m.run then
      st.run = { role = m.run.role, at = m.run.at, msgs = { unpack(m.run.msgs, 1, m.run_len) } }
    end
  end
  if last.marked_at and last.marked_at <= st.n then
    out[last.marked_at] = last.marked_plain -- the breakpoint of the last encoding
  end
  last.marked_at = nil
  -- One lookup for every run, pointed at the run it serves (the messages before it).
  local refs = common.refs(msgs, 1)
  for i = same + 1, #msgs do
    local m = msgs[i]
    prev[i] = m
    if m.role ~= "system" and #m.parts > 0 then
      if st.run and st.run.role == m.role then
        st.run.msgs[#st.run.msgs + 1] = m
      else
        H.emit(conv, ctx, variant, refs, out, st)
        st.run = { role = m.role, at = i, msgs = { m } }
      end
    end
    local mark = marks[i] or {}
    marks[i] = mark
    mark.n, mark.wrote, mark.open_role, mark.close = st.n, st.wrote, st.open_role, st.close
    mark.last_run, mark.last_at = st.last_run, st.last_at
    mark.run, mark.run_len = st.run, st.run and #st.run.msgs or 0
  end
  for i = #msgs + 1, #prev do
    prev[i], marks[i] = nil, nil
  end
  H.emit(conv, ctx, variant, refs, out, st)

  local marker = st.last_run and conv.mark and conv.mark(ctx)
  if marker then
    refs.before = st.last_run.at
    local items = H.items(conv, ctx, st.last_run, refs)
    marker(items)
    last.marked_at, last.marked_plain = st.last_at, out[st.last_at]
    out[st.last_at] = vim.json.encode(items):sub(2, -2)
  end
  local n = st.n
  if st.close then
    n = n + 1
    out[n] = st.close
  end
  out[n + 1] = "]" .. json:sub(e + 1)
  for i = n + 2, #out do
    out[i] = nil
  end
  local head = json:sub(1, s - 1) .. "["
  if type(lead) == "table" and #lead > 0 then
    head = head .. vim.json.encode(lead):sub(2, -2) .. (st.wrote and "," or "")
  end
  out[1] = head
  return out, headers
end

--- Writes the gathered run (st.run) into the pieces: its cached items, opening a turn
--- when its role differs from the open one's.
function H.emit(conv, ctx, variant, refs, out, st)
  local run = st.run
  if not run then
    return
  end
  st.run = nil
  refs.before = run.at
  local entry = H.entry(conv, ctx, run, variant, refs)
  if entry.json == "" then
    return
  end
  local n = st.n
  if conv.turn and entry.role == st.open_role then
    n = n + 1
    out[n] = ","
  else
    if st.close then
      n = n + 1
      out[n] = st.close
    end
    local opening, after = "", ","
    if conv.turn then
      opening, st.close, after = H.turn_text(conv, entry.role)
      st.open_role = entry.role
    end
    n = n + 1
    out[n] = st.wrote and after or opening
  end
  n = n + 1
  out[n] = entry.json
  st.n, st.wrote, st.last_run, st.last_at = n, true, run, n
end

--- A shallow copy of a context with some fields replaced.
function H.with(ctx, fields)
  local out = {}
  for k, v in pairs(ctx) do
    out[k] = v
  end
  out.doc_messages = nil
  for k, v in pairs(fields) do
    out[k] = v
  end
  return out
end

--- The request body as JSON text and the headers.
---@param ctx flemma.provider.Context
---@return string body
---@return table<string, string> headers
function M.encode(ctx)
  local pieces, headers = M.pieces(ctx)
  return table.concat(pieces), headers
end

return M
