--- Provider kind `openai_chat`: the Chat Completions API with streaming, spoken by
--- OpenAI-compatible servers (Ollama, llama.cpp, vLLM, LM Studio, OpenRouter,
--- Moonshot, DeepSeek, ...). Tool calls go out as `tool_calls`, results as `tool`
--- messages; thinking without a signature goes back as `reasoning_content`.
local thinking = require("flemma.provider.thinking")
local common = require("flemma.provider.common")

local M = {}
local H = {}

M.kind = "openai_chat"
M.stream = "openai_chat"
M.key = { header = "authorization", prefix = "Bearer " }
M.endpoint = common.configured_endpoint
M.parameters = { "max_tokens", "temperature", "thinking", "thinking_foreign", "extra" }

--- `parameters.thinking` levels as `reasoning_effort`.
M.efforts = { minimal = "minimal", low = "low", medium = "medium", high = "high", max = "high" }

--- Text put before the content of an error result (the API has no error flag).
M.error_prefix = "Error: "

H.schema = common.schema

H.arguments = common.arguments

function H.effort(value)
  if value == nil or value == false then
    return nil
  end
  if type(value) == "number" then
    if value <= 0 then
      return nil
    end
    return value <= 2048 and "low" or value <= 16384 and "medium" or "high"
  end
  return M.efforts[value] or (type(value) == "string" and value) or nil
end

--- Hosts whose Chat Completions endpoint takes PDFs as `file` parts.
M.file_hosts = { ["api.openai.com"] = true, ["openrouter.ai"] = true }

--- Whether an endpoint takes PDF `file` parts (others get a text note).
---@param endpoint string|nil
---@return boolean
function M.takes_files(endpoint)
  local host = type(endpoint) == "string" and endpoint:match("^https?://([^/:]+)") or nil
  return host ~= nil and M.file_hosts[host:lower()] == true
end

--- An attached image (image_url with a data URL) or PDF (`file` part where the
--- endpoint takes it, else a text note) as a user content part.
function H.file_part(p, files)
  if common.is_image(p) then
    return { type = "image_url", image_url = { url = common.data_url(p) } }
  elseif common.is_pdf(p) and files then
    return { type = "file", file = { filename = common.filename(p), file_data = common.data_url(p) } }
  end
  return {
    type = "text",
    text = common.file_note(p, "this server does not take " .. (common.is_pdf(p) and "PDF" or p.mime) .. " files"),
  }
end

--- The messages of one conversation message: a user message (its text and files),
--- with a `tool` message before it per result; an assistant message with its text,
--- reasoning and tool calls.
function H.messages(msg, params, files)
  local out = {}
  if msg.role == "user" then
    local texts, content = {}, nil -- content: the parts list once a file is attached
    for _, p in ipairs(msg.parts) do
      if p.kind == "file" then
        content = content or {}
        if #texts > 0 then
          content[#content + 1] = { type = "text", text = table.concat(texts, "\n\n") }
          texts = {}
        end
        content[#content + 1] = H.file_part(p, files)
      elseif p.kind == "tool_result" then
        local result = p.content or ""
        if p.is_error then
          result = M.error_prefix .. result
        end
        out[#out + 1] = { role = "tool", tool_call_id = p.id, content = result }
        if p.files and #p.files > 0 then
          -- A tool message holds text only: the files a result carries go in the user
          -- message after the tool messages, introduced by a line naming the call.
          content = content or {}
          if #texts > 0 then
            content[#content + 1] = { type = "text", text = table.concat(texts, "\n\n") }
            texts = {}
          end
          content[#content + 1] = { type = "text", text = common.files_intro(p) }
          for _, f in ipairs(p.files) do
            content[#content + 1] = H.file_part(f, files)
          end
        end
      elseif p.kind == "text" and p.text:find("%S") then
        texts[#texts + 1] = p.text
      end
    end
    if content then
      if #texts > 0 then
        content[#content + 1] = { type = "text", text = table.concat(texts, "\n\n") }
      end
      out[#out + 1] = { role = "user", content = content }
    elseif #texts > 0 then
      out[#out + 1] = { role = "user", content = table.concat(texts, "\n\n") }
    end
    return out
  end
  local texts, reasoning, calls = {}, {}, {}
  for _, p in ipairs(msg.parts) do
    if p.kind == "text" and p.text:find("%S") then
      texts[#texts + 1] = p.text
    elseif p.kind == "thinking" and not p.redacted and not p.signature then
      reasoning[#reasoning + 1] = p.text
    elseif p.kind == "thinking" and p.text:find("%S") then
      -- Another provider's signed thinking: as text by default, never with its
      -- signature (parameters.thinking_foreign).
      local mode = thinking.mode(p, M.kind, params)
      if mode == "text" then
        texts[#texts + 1] = thinking.as_text(p.text)
      elseif mode == "preserve" then
        reasoning[#reasoning + 1] = p.text
      end
    elseif p.kind == "tool_use" then
      calls[#calls + 1] = {
        id = p.id,
        type = "function",
        ["function"] = { name = common.wire_name(p.name), arguments = H.arguments(p.input) },
      }
    end
  end
  local m = { role = "assistant", content = #texts > 0 and table.concat(texts, "\n\n") or vim.NIL }
  if #reasoning > 0 then
    m.reasoning_content = table.concat(reasoning, "\n\n")
  end
  if #calls > 0 then
    m.tool_calls = calls
  end
  if m.content ~= vim.NIL or m.tool_calls then
    out[#out + 1] = m
  end
  return out
end

--- The conversation: `messages`, a flat list after the system message. Whether the
--- endpoint takes PDF files changes a message's items.
---@type flemma.provider.Conversation
M.conversation = {
  field = "messages",
  items = function(msg, ctx)
    return H.messages(msg, ctx.parameters, M.takes_files(ctx.spec and ctx.spec.endpoint))
  end,
  variant = function(ctx)
    return M.takes_files(ctx.spec and ctx.spec.endpoint) and "files" or ""
  end,
}

--- The request body and headers.
---@param ctx flemma.provider.Context
---@return table body
---@return table<string, string> headers
function M.build(ctx)
  local params = ctx.parameters
  local body = {
    model = ctx.model,
    messages = common.conversation(
      M.conversation,
      ctx,
      ctx.request.system and { { role = "system", content = ctx.request.system } } or nil
    ),
    stream = true,
    stream_options = { include_usage = true },
  }
  if #ctx.tools > 0 then
    body.tools = {}
    for i, def in ipairs(ctx.tools) do
      body.tools[i] = {
        type = "function",
        ["function"] = {
          name = common.wire_name(def.name),
          description = def.description,
          parameters = H.schema(def.input_schema),
        },
      }
    end
  end
  if params.max_tokens then
    body.max_tokens = params.max_tokens
  end
  if params.temperature ~= nil then
    body.temperature = params.temperature
  end
  local effort = H.effort(params.thinking)
  if effort then
    body.reasoning_effort = effort
  end
  common.extra(body, ctx)
  return body, common.headers(M.key, ctx.key)
end

--- The message of an error body ({ error = { message, type, code } }, some servers
--- { error = "text" } or { message = "..." }).
---@param decoded table
---@return string|nil message
---@return string|nil error_type
function M.error_message(decoded)
  if type(decoded) ~= "table" then
    return nil
  end
  local e = decoded.error
  if type(e) == "table" then
    local t = e.type or e.code
    return e.message, t ~= nil and tostring(t) or nil
  elseif type(e) == "string" then
    return e
  end
  if type(decoded.message) == "string" then
    return decoded.message
  end
  return nil
end

--- The Chat Completions API has no token-counting endpoint.
M.counter = false

--- Prompt tokens include the cached ones here; usage keeps them apart.
M.normalize_usage = common.uncached_input

return M
