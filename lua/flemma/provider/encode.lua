--- What a request says: the context a kind builds from (conversation, tools,
--- parameters, key) and the body it builds, as a table or as the JSON text that goes
--- on the wire, the entry's own headers on top.
local kinds = require("flemma.provider.kinds")

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
---@field doc_messages? table[] the document's messages (system included): kinds with an `encode` encode them once per message

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

--- The context of a buffer's document: kinds with an `encode` read the document's
--- messages themselves (and encode only what changed), others get the conversation
--- of document.to_messages.
---@param spec flemma.provider.Spec
---@param doc flemma.document.Doc
---@param o { bufnr: integer, key?: string }
---@return flemma.provider.Context
function M.document_context(spec, doc, o)
  local kind = assert(kinds.get(spec.kind))
  local ctx
  if kind.encode then
    ctx = M.context(spec, { system = H.system_text(doc), messages = {} }, o)
    ctx.doc_messages = doc.messages
  else
    ctx = M.context(spec, require("flemma.chat.document").to_messages(doc), o)
  end
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
--- written; and the headers. Kinds with an `encode` reuse the encoding of unchanged
--- document messages.
---@param ctx flemma.provider.Context
---@return string[] pieces
---@return table<string, string> headers
function M.pieces(ctx)
  local kind = assert(kinds.get(ctx.spec.kind))
  local pieces, headers
  if kind.encode_pieces then
    pieces, headers = kind.encode_pieces(ctx)
  else
    local body
    body, headers = kind.build(ctx)
    pieces = { vim.json.encode(body) }
  end
  return pieces, H.entry_headers(ctx, headers)
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
