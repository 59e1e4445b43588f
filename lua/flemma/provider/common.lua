--- Small request-building helpers shared by the provider kinds.
local M = {}
local H = {}

-- JSON Schema keywords by the shape of their value (Lua cannot tell an empty object
-- from an empty array: the schema's own structure says which one is meant).
H.SCHEMA_MAPS =
  { properties = true, patternProperties = true, ["$defs"] = true, definitions = true, dependentSchemas = true }
H.SCHEMA_LISTS = { allOf = true, anyOf = true, oneOf = true, prefixItems = true }
H.SCHEMA_ONE = {
  items = true,
  additionalProperties = true,
  additionalItems = true,
  unevaluatedProperties = true,
  unevaluatedItems = true,
  contains = true,
  propertyNames = true,
  ["not"] = true,
  ["if"] = true,
  ["then"] = true,
  ["else"] = true,
  contentSchema = true,
}
H.VALUES = { default = true, const = true }

--- A schema's `default` or `const` value: an empty one is `{}` unless the schema's
--- type is "array".
function H.value(v, json_type)
  if type(v) == "table" and next(v) == nil and getmetatable(v) == nil and json_type ~= "array" then
    return vim.empty_dict()
  end
  return vim.deepcopy(v)
end

--- A JSON Schema node: every empty table in a schema position is `{}`.
function H.schema_node(s)
  if type(s) ~= "table" then
    return s -- true / false schemas
  end
  if next(s) == nil then
    return vim.empty_dict()
  end
  if vim.islist(s) then
    -- `items` as a list of schemas (tuple form of older drafts).
    return vim.tbl_map(H.schema_node, s)
  end
  local out = {}
  for k, v in pairs(s) do
    if H.SCHEMA_MAPS[k] and type(v) == "table" then
      local m = {}
      for name, sub in pairs(v) do
        m[name] = H.schema_node(sub)
      end
      out[k] = next(m) == nil and vim.empty_dict() or m
    elseif H.SCHEMA_LISTS[k] and type(v) == "table" then
      out[k] = vim.tbl_map(H.schema_node, v)
    elseif H.SCHEMA_ONE[k] then
      out[k] = H.schema_node(v)
    elseif H.VALUES[k] then
      out[k] = H.value(v, s.type)
    elseif k == "examples" and type(v) == "table" then
      out[k] = vim.tbl_map(function(x)
        return H.value(x, s.type)
      end, v)
    else
      -- required, enum, type, strings, numbers, extension keywords: as they are.
      out[k] = vim.deepcopy(v)
    end
  end
  return out
end

--- A tool's input schema as JSON wants it: a copy (nil: an object schema) in which
--- every empty table that stands for an object (a schema, `properties`, `$defs`,
--- `additionalProperties`, an object `default`, at any depth) is encoded as `{}`
--- rather than `[]`; `required`, `enum` and the like stay arrays. The one helper all
--- provider kinds use for schemas.
---@param schema table|nil
---@return table
function M.schema(schema)
  return H.schema_node(schema or { type = "object" })
end

--- A tool call's input as the request holds it: always an object (`{}` for none or
--- an empty one). Inside, an input decoded from the chat keeps its `{}` and `[]`
--- apart (a decoded empty object carries vim.empty_dict's metatable). The one helper
--- all provider kinds use for inputs.
---@param input table|nil
---@return table
function M.input(input)
  if type(input) ~= "table" or next(input) == nil then
    return vim.empty_dict()
  end
  return input
end

--- A tool call's input as a JSON text ("{}" for none or an empty one).
---@param input table|nil
---@return string
function M.arguments(input)
  return vim.json.encode(M.input(input))
end

-- Request fields that hold what Flemma builds (the conversation, the tools, the
-- model, streaming): never taken from `parameters.extra`, set or not.
M.RESERVED = {
  model = true,
  stream = true,
  messages = true,
  system = true,
  tools = true,
  input = true,
  contents = true,
  systemInstruction = true,
  instructions = true,
  store = true,
}

--- Merges one `extra` table into body: a key Flemma built (or reserved) is refused,
--- a table into a table Flemma built is merged key by key.
function H.merge_extra(body, extra, path)
  for k, v in pairs(extra) do
    local where = path .. "." .. tostring(k)
    if type(k) ~= "string" then
      require("flemma.core.util").error(("%s: a field name should be a string"):format(where))
    end
    local have = body[k]
    if path:find("%.extra$") and M.RESERVED[k] then
      require("flemma.core.util").error(
        ("%s: Flemma builds `%s` itself; parameters.extra adds fields it does not set"):format(where, k)
      )
    elseif have == nil then
      body[k] = vim.deepcopy(v)
    elseif type(have) == "table" and type(v) == "table" and not vim.islist(have) and not vim.islist(v) then
      H.merge_extra(have, v, where)
    else
      require("flemma.core.util").error(
        ("%s: Flemma sets `%s` itself (%s); use the parameter that sets it"):format(where, k, vim.json.encode(have))
      )
    end
  end
end

--- The request body with `parameters.extra` and then `parameters.<provider>.extra`
--- (the provider entry's name) merged in: fields Flemma does not know (`seed`,
--- `top_k`, `tool_choice`, a grammar, ...). A field Flemma builds or sets is refused
--- with an error naming it. The one helper all provider kinds' `build` use.
---@param body table
---@param ctx flemma.provider.Context
---@return table body
function M.extra(body, ctx)
  local params = ctx.parameters or {}
  local name = ctx.spec and ctx.spec.name or "?"
  local general = params.extra
  local specific = type(params[name]) == "table" and params[name].extra or nil
  for _, e in ipairs({ { general, "parameters.extra" }, { specific, ("parameters.%s.extra"):format(name) } }) do
    if e[1] ~= nil and type(e[1]) ~= "table" then
      require("flemma.core.util").error(("`%s` should be a table of request fields, not %s"):format(e[2], type(e[1])))
    end
  end
  -- The provider's own fields win over the general ones; each is checked under the
  -- name of the table it came from.
  local merged = vim.tbl_deep_extend("force", general or {}, specific or {})
  for k, v in pairs(merged) do
    local from = (specific and specific[k] ~= nil) and ("parameters.%s.extra"):format(name) or "parameters.extra"
    H.merge_extra(body, { [k] = v }, from)
  end
  return body
end

--- A kind's normalize_usage where the input tokens include the cached ones: they are
--- taken out, as usage keeps them apart.
---@param usage table
---@return table usage
function M.uncached_input(usage)
  if usage.input_tokens and usage.cache_read_tokens then
    usage.input_tokens = math.max(0, usage.input_tokens - usage.cache_read_tokens)
  end
  return usage
end

--- Whether an attached file part (flemma.attachments) is an image the providers take.
---@param part { mime: string }
---@return boolean
function M.is_image(part)
  return require("flemma.chat.attachments").IMAGE_TYPES[part.mime] == true
end

--- Whether an attached file part is a PDF.
---@param part { mime: string }
---@return boolean
function M.is_pdf(part)
  return part.mime == "application/pdf"
end

--- An attached file part as a data URL (data:MIME;base64,...).
---@param part { mime: string, data: string }
---@return string
function M.data_url(part)
  return "data:" .. part.mime .. ";base64," .. part.data
end

--- The file name of an attached file part (its path's last component).
---@param part { path: string }
---@return string
function M.filename(part)
  return vim.fs.basename(part.path)
end

--- The text that stands for an attached file a provider cannot take.
---@param part { path: string, mime: string, size: integer }
---@param why string
---@return string
function M.file_note(part, why)
  return require("flemma.chat.attachments").note(part, why)
end

--- The text put before the files of a tool result where a kind sends them outside
--- the result (openai_chat's tool messages and Gemini's function responses hold none):
--- it names the call and the files.
---@param p { id: string, files: { path: string }[] }
---@return string
function M.files_intro(p)
  local names = {}
  for i, f in ipairs(p.files) do
    names[i] = f.path
  end
  return ("The files returned by tool call %s (%s):"):format(p.id, table.concat(names, ", "))
end

--- The name a tool goes by in requests: providers allow letters, digits, `_` and `-`
--- in tool names, so an MCP tool's `server:tool` is sent as `server__tool`.
---@param name string
---@return string
function M.wire_name(name)
  return (name:gsub(":", "__"))
end

--- The tool name of a name the provider sent: `server__tool` back to `server:tool`
--- (the first `__`; server names never hold one). Other names as they are.
---@param name string|nil
---@return string|nil
function M.local_name(name)
  if type(name) ~= "string" or name:find(":", 1, true) then
    return name
  end
  local server, tool = name:match("^(.-)__(.+)$")
  if server == nil or server == "" then
    return name
  end
  return server .. ":" .. tool
end

--- What the items of a message may look up in the messages before it: `before` is
--- the index of the message in `messages` (each a table with `parts`); it may be set
--- again to serve another message of the same list.
---@param messages table[]
---@param before integer
---@return flemma.provider.Refs
function M.refs(messages, before)
  local refs = { before = before }
  function refs.tool_name(id)
    for j = refs.before - 1, 1, -1 do
      local parts = messages[j].parts
      for k = #parts, 1, -1 do
        local p = parts[k]
        if p.kind == "tool_use" and p.id == id then
          return p.name
        end
      end
    end
    return nil
  end
  return refs
end

--- The conversation of a request (ctx.request.messages, document.to_messages' shape)
--- as a kind's body holds it: each message's items (conv.items), in turns where the
--- kind has them (consecutive messages whose turns have one role share one), after
--- `lead` (items the kind puts first). The last message with items gets conv.mark.
--- The one builder of every kind's conversation; flemma.provider.encode encodes the
--- same items once per message.
---@param conv flemma.provider.Conversation
---@param ctx flemma.provider.Context
---@param lead? table[]
---@return table[]
function M.conversation(conv, ctx, lead)
  local out = lead or {}
  local msgs = ctx.request.messages
  local encoded, last = {}, nil
  local refs = M.refs(msgs, 1)
  for i, msg in ipairs(msgs) do
    refs.before = i
    encoded[i] = conv.items(msg, ctx, refs)
    if #encoded[i] > 0 then
      last = i
    end
  end
  local mark = last and conv.mark and conv.mark(ctx)
  if mark then
    mark(encoded[last])
  end
  local open_role, open_items
  for i, msg in ipairs(msgs) do
    local items = encoded[i]
    if #items > 0 then
      if conv.turn then
        local role = M.wire_role(conv, msg.role)
        if role == open_role then
          vim.list_extend(open_items, items)
        else
          open_role, open_items = role, items
          out[#out + 1] = conv.turn(role, items)
        end
      else
        vim.list_extend(out, items)
      end
    end
  end
  return out
end

--- The role of a turn on the wire.
---@param conv flemma.provider.Conversation
---@param role string
---@return string
function M.wire_role(conv, role)
  return conv.roles and conv.roles[role] or role
end

--- The headers of a streamed JSON request with the key as the kind sends it.
---@param key_spec flemma.provider.KeySpec
---@param key string|nil
---@return table<string, string>
function M.headers(key_spec, key)
  local headers = { ["content-type"] = "application/json", ["accept"] = "text/event-stream" }
  if key then
    headers[key_spec.header] = (key_spec.prefix or "") .. key
  end
  return headers
end

--- A kind's endpoint where the entry names it: the entry's own (no default of the kind).
---@param configured string|nil
---@return string|nil
function M.configured_endpoint(configured)
  return configured
end

--- A kind's normalize_usage where usage comes as it is kept.
---@param usage table
---@return table usage
function M.same_usage(usage)
  return usage
end

return M
