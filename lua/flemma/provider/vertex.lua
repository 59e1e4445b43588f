--- Provider kind `vertex`: Gemini on Vertex AI, `streamGenerateContent?alt=sse`.
--- Tool calls are `functionCall` parts (several in one turn), results
--- `functionResponse` parts in one user turn; thought signatures go back on the part
--- they came with (the writer keeps them on a `<thinking vertex:signature=...>` block
--- before it); thinking budget (Gemini 2.5) or level (Gemini 3) from `thinking`.
--- The access token is an OAuth bearer token (gcloud auth print-access-token).
local thinking = require("flemma.provider.thinking")

local common = require("flemma.provider.common")

local M = {}
local H = {}

M.kind = "vertex"
M.stream = "vertex"
M.key = { header = "authorization", prefix = "Bearer " }
M.parameters = { "max_tokens", "temperature", "thinking", "thinking_foreign", "extra", "vertex" }

--- The Vertex AI URL of a model: the entry's endpoint (default: Google's, by
--- location) with {project_id}, {location} and {model} filled in from
--- parameters.vertex; nil and why when the project is needed and not set.
---@param configured string|nil
---@param model string
---@param parameters? table
---@return string|nil
---@return string|nil err
function M.endpoint(configured, model, parameters)
  local vp = (parameters or {}).vertex or {}
  local location = vp.location or "global"
  local template = configured
  if not template then
    local host = location == "global" and "aiplatform.googleapis.com" or (location .. "-aiplatform.googleapis.com")
    template = "https://"
      .. host
      .. "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse"
  end
  if template:find("{project_id}", 1, true) and (type(vp.project_id) ~= "string" or vp.project_id == "") then
    return nil,
      "`parameters.vertex.project_id` is not set (the Google Cloud project to bill), e.g. :Flemma switch vertex vertex.project_id=my-project"
  end
  local values = { project_id = vp.project_id, location = location, model = model }
  return (template:gsub("{([%w_]+)}", function(k)
    return values[k] and tostring(values[k]) or nil
  end))
end

--- Thinking budgets (Gemini 2.5) of the unified levels.
M.budgets = { minimal = 128, low = 2048, medium = 8192, high = 24576, max = 32768 }
--- Thinking levels (Gemini 3) of the unified levels.
M.levels = { minimal = "low", low = "low", medium = "high", high = "high", max = "high" }

--- The thinkingConfig of a `thinking` value for a model (nil: the model's default).
function M.thinking_config(value, model)
  if value == nil then
    return nil
  end
  local gemini3 = model:match("^gemini%-3") ~= nil
  if value == false or value == 0 then
    if gemini3 then
      return { thinkingLevel = "low" }
    end
    return { thinkingBudget = model:find("pro", 1, true) and 128 or 0 }
  end
  if value == true then
    value = "medium"
  end
  if type(value) == "number" then
    if value < 0 then
      return { thinkingBudget = -1, includeThoughts = true }
    end
    return { thinkingBudget = math.floor(value), includeThoughts = true }
  end
  if not M.budgets[value] then
    require("flemma.core.util").error(
      ("`parameters.thinking` should be false, a token budget or one of minimal, low, medium, high, max, not %s"):format(
        vim.inspect(value)
      )
    )
  end
  if gemini3 then
    return { thinkingLevel = M.levels[value], includeThoughts = true }
  end
  return { thinkingBudget = M.budgets[value], includeThoughts = true }
end

H.args = common.input

H.schema = common.schema

--- The parts of one message. A functionResponse names its function: the name of the
--- tool use with its id in the messages before (refs).
function H.parts(msg, params, refs)
  local parts = {}
  if msg.role == "user" then
    local carried = {} -- the files of results, after the message's other parts
    for _, p in ipairs(msg.parts) do
      if p.kind == "tool_result" then
        local response = p.is_error and { error = p.content or "" } or { output = p.content or "" }
        parts[#parts + 1] = {
          functionResponse = { id = p.id, name = common.wire_name(refs.tool_name(p.id) or p.id), response = response },
        }
        if p.files and #p.files > 0 then
          carried[#carried + 1] = { text = common.files_intro(p) }
          for _, f in ipairs(p.files) do
            carried[#carried + 1] = { inlineData = { mimeType = f.mime, data = f.data } }
          end
        end
      elseif p.kind == "text" and p.text:find("%S") then
        parts[#parts + 1] = { text = p.text }
      elseif p.kind == "file" then
        -- an attached image or PDF, inline
        parts[#parts + 1] = { inlineData = { mimeType = p.mime, data = p.data } }
      end
    end
    vim.list_extend(parts, carried)
    return parts
  end
  local signature -- of our own thinking, waiting for the part it belongs to
  for _, p in ipairs(msg.parts) do
    if p.kind == "thinking" then
      local mode = thinking.mode(p, M.kind, params)
      if mode == "own" then
        if p.signature and p.signature ~= "" then
          signature = p.signature
        end
      elseif mode == "text" and p.text:find("%S") then
        parts[#parts + 1] = { text = thinking.as_text(p.text) }
      elseif mode == "preserve" and p.text:find("%S") then
        parts[#parts + 1] = { text = p.text, thought = true }
      end
    elseif p.kind == "text" and p.text:find("%S") then
      parts[#parts + 1] = { text = p.text, thoughtSignature = signature }
      signature = nil
    elseif p.kind == "tool_use" then
      parts[#parts + 1] = {
        functionCall = { id = p.id, name = common.wire_name(p.name), args = H.args(p.input) },
        thoughtSignature = signature,
      }
      signature = nil
    end
  end
  if signature then
    -- A signature with nothing after it: on an empty text part, as Gemini sends it.
    parts[#parts + 1] = { text = "", thoughtSignature = signature }
  end
  return parts
end

--- The conversation: `contents`, turns of parts (the assistant's role is "model").
---@type flemma.provider.Conversation
M.conversation = {
  field = "contents",
  items = function(msg, ctx, refs)
    return H.parts(msg, ctx.parameters, refs)
  end,
  turn = function(role, items)
    return { role = role, parts = items }
  end,
  roles = { assistant = "model" },
}

--- The request body and headers.
---@param ctx flemma.provider.Context
---@return table body
---@return table<string, string> headers
function M.build(ctx)
  local params = ctx.parameters
  local body = { contents = common.conversation(M.conversation, ctx) }
  if ctx.request.system then
    body.systemInstruction = { parts = { { text = ctx.request.system } } }
  end
  if #ctx.tools > 0 then
    local decls = {}
    for i, def in ipairs(ctx.tools) do
      decls[i] = {
        name = common.wire_name(def.name),
        description = def.description,
        parametersJsonSchema = H.schema(def.input_schema),
      }
    end
    body.tools = { { functionDeclarations = decls } }
  end
  local gen = {}
  if params.max_tokens then
    gen.maxOutputTokens = params.max_tokens
  end
  if params.temperature ~= nil then
    gen.temperature = params.temperature
  end
  local budget = (params.vertex or {}).thinking_budget
  local tc = M.thinking_config(budget ~= nil and budget or params.thinking, ctx.model)
  if tc then
    gen.thinkingConfig = tc
  end
  if next(gen) then
    body.generationConfig = gen
  end
  common.extra(body, ctx)
  return body, common.headers(M.key, ctx.key)
end

--- The message of an error body ({ error = { code, message, status } }, or a list of them).
---@param decoded table
---@return string|nil message
---@return string|nil error_type
function M.error_message(decoded)
  if type(decoded) == "table" and vim.islist(decoded) then
    decoded = decoded[1]
  end
  local e = type(decoded) == "table" and decoded.error
  if type(e) == "table" then
    local t = e.status or e.code
    return e.message, t ~= nil and t ~= vim.NIL and tostring(t) or nil
  end
  return nil
end

--- Token counting: models/{model}:countTokens next to models/{model}:streamGenerateContent.
---@type flemma.provider.Counter
M.counter = {
  endpoint = function(endpoint)
    local base, n = endpoint:gsub(":streamGenerateContent[^/]*$", ":countTokens")
    if n == 0 then
      return nil,
        ("cannot derive the token-counting endpoint from %s (it should end in :streamGenerateContent)"):format(endpoint)
    end
    return base
  end,
  body = function(body)
    return { contents = body.contents, systemInstruction = body.systemInstruction, tools = body.tools }
  end,
  tokens = function(decoded)
    return type(decoded) == "table" and tonumber(decoded.totalTokens) or nil
  end,
}

--- promptTokenCount includes the cached tokens here; usage keeps them apart.
M.normalize_usage = common.uncached_input

return M
