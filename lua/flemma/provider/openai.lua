--- Provider kind `openai`: the Responses API with streaming and `store = false` (the
--- conversation lives in the buffer, not on OpenAI's servers). Function tools
--- (`strict` only when a tool asks for it, else omitted), `function_call` / `function_call_output`
--- items, reasoning effort from `parameters.thinking` (or `parameters.openai.reasoning`)
--- with the encrypted reasoning items sent back as they came, and `prompt_cache_key`
--- from the buffer's path while caching is on.
local thinking = require("flemma.provider.thinking")

local M = {}
local H = {}
local common = require("flemma.provider.common")

M.kind = "openai"
M.stream = "openai"
M.key = { header = "authorization", prefix = "Bearer " }
M.endpoint = common.configured_endpoint
M.parameters = { "max_tokens", "temperature", "thinking", "thinking_foreign", "cache_retention", "extra", "openai" }

--- `parameters.thinking` levels as `reasoning.effort`.
M.efforts = { minimal = "minimal", low = "low", medium = "medium", high = "high", max = "xhigh" }

--- Text put before the output of an error result (the API has no error flag).
M.error_prefix = "Error: "

H.schema = common.schema

H.arguments = common.arguments

--- The reasoning effort of a `parameters.thinking` value (nil: none asked).
function M.effort(value)
  if value == nil then
    return nil
  end
  if value == false or value == 0 then
    return "none"
  end
  if value == true then
    return "medium"
  end
  if type(value) == "number" then
    return value <= 2048 and "low" or value <= 16384 and "medium" or "high"
  end
  if value == "none" or value == "xhigh" then
    return value
  end
  local e = M.efforts[value]
  if not e then
    require("flemma.core.util").error(
      ("`parameters.thinking` should be false, a token budget or one of minimal, low, medium, high, max, not %s"):format(
        vim.inspect(value)
      )
    )
  end
  return e
end

--- An attached image (input_image) or PDF (input_file) as a user content item.
function H.file_item(p)
  if common.is_image(p) then
    return { type = "input_image", image_url = common.data_url(p) }
  elseif common.is_pdf(p) then
    return { type = "input_file", filename = common.filename(p), file_data = common.data_url(p) }
  end
  return { type = "input_text", text = common.file_note(p, "this provider takes images and PDFs only") }
end

--- The `input` items of one message.
function H.items(msg, params)
  local out = {}
  if msg.role == "user" then
    local texts, content = {}, nil -- content: the input_* list once a file is attached
    local function flush_texts()
      if #texts > 0 and content then
        content[#content + 1] = { type = "input_text", text = table.concat(texts, "\n\n") }
        texts = {}
      end
    end
    local function flush()
      flush_texts()
      if content then
        out[#out + 1] = { role = "user", content = content }
      elseif #texts > 0 then
        out[#out + 1] = { role = "user", content = table.concat(texts, "\n\n") }
      end
      texts, content = {}, nil
    end
    for _, p in ipairs(msg.parts) do
      if p.kind == "file" then
        content = content or {}
        flush_texts()
        content[#content + 1] = H.file_item(p)
      elseif p.kind == "tool_result" then
        flush()
        local output = p.content or ""
        if p.is_error then
          output = M.error_prefix .. output
        end
        if p.files and #p.files > 0 then
          -- The files a result carries: input_image / input_file items of its output.
          local items = {}
          if output ~= "" then
            items[1] = { type = "input_text", text = output }
          end
          for _, f in ipairs(p.files) do
            items[#items + 1] = H.file_item(f)
          end
          out[#out + 1] = { type = "function_call_output", call_id = p.id, output = items }
        else
          out[#out + 1] = { type = "function_call_output", call_id = p.id, output = output }
        end
      elseif p.kind == "text" and p.text:find("%S") then
        texts[#texts + 1] = p.text
      end
    end
    flush()
    return out
  end
  local texts = {}
  local function flush()
    if #texts > 0 then
      out[#out + 1] = { role = "assistant", content = table.concat(texts, "\n\n") }
      texts = {}
    end
  end
  for _, p in ipairs(msg.parts) do
    if p.kind == "text" and p.text:find("%S") then
      texts[#texts + 1] = p.text
    elseif p.kind == "thinking" then
      local mode = thinking.mode(p, M.kind, params)
      if mode == "own" then
        if p.signature and p.signature ~= "" then
          flush()
          local item = { type = "reasoning", summary = {}, encrypted_content = p.signature }
          if p.text:find("%S") then
            item.summary[1] = { type = "summary_text", text = p.text }
          end
          out[#out + 1] = item
        end
        -- a summary without its encrypted item cannot be sent back
      elseif mode == "text" or mode == "preserve" then
        if p.text:find("%S") then
          texts[#texts + 1] = thinking.as_text(p.text)
        end
      end
    elseif p.kind == "tool_use" then
      flush()
      out[#out + 1] = {
        type = "function_call",
        call_id = p.id,
        name = common.wire_name(p.name),
        arguments = H.arguments(p.input),
      }
    end
  end
  flush()
  return out
end

--- The conversation: `input`, a flat list of items.
---@type flemma.provider.Conversation
M.conversation = {
  field = "input",
  items = function(msg, ctx)
    return H.items(msg, ctx.parameters)
  end,
}

--- The key that keeps one buffer's requests on the same prompt cache.
function M.cache_key(bufnr)
  local name = bufnr and vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_name(bufnr) or ""
  if name == "" then
    return nil
  end
  return "flemma-" .. vim.fn.sha256(vim.fn.fnamemodify(name, ":p")):sub(1, 32)
end

--- The request body and headers.
---@param ctx flemma.provider.Context
---@return table body
---@return table<string, string> headers
function M.build(ctx)
  local params = ctx.parameters
  local body = {
    model = ctx.model,
    stream = true,
    store = false,
  }
  body.input = common.conversation(M.conversation, ctx)
  if ctx.request.system then
    body.instructions = ctx.request.system
  end
  if #ctx.tools > 0 then
    body.tools = {}
    for i, def in ipairs(ctx.tools) do
      body.tools[i] = {
        type = "function",
        name = common.wire_name(def.name),
        description = def.description,
        parameters = H.schema(def.input_schema),
        -- Only a tool that asks for it (its schema then meets strict mode's rules).
        strict = def.strict == true or nil,
      }
    end
  end
  if params.max_tokens then
    body.max_output_tokens = params.max_tokens
  end
  local reasoning = (params.openai or {}).reasoning
  local effort = M.effort(reasoning ~= nil and reasoning or params.thinking)
  if effort then
    body.reasoning = { effort = effort }
    if effort ~= "none" then
      body.reasoning.summary = "auto"
      body.include = { "reasoning.encrypted_content" }
    end
  end
  if params.temperature ~= nil and (effort == nil or effort == "none") then
    -- Reasoning models take no temperature.
    body.temperature = params.temperature
  end
  if params.cache_retention ~= "none" then
    body.prompt_cache_key = M.cache_key(ctx.bufnr)
    if params.cache_retention == "long" then
      body.prompt_cache_retention = "24h"
    end
  end
  common.extra(body, ctx)
  return body, common.headers(M.key, ctx.key)
end

--- The message of an error body ({ error = { message, type, code } }).
---@param decoded table
---@return string|nil message
---@return string|nil error_type
function M.error_message(decoded)
  local e = type(decoded) == "table" and decoded.error
  if type(e) == "table" then
    local t = e.type or e.code
    return e.message, t ~= nil and t ~= vim.NIL and tostring(t) or nil
  end
  return nil
end

--- Token counting: POST .../responses/input_tokens takes the request's model, input,
--- instructions, tools and reasoning.
---@type flemma.provider.Counter
M.counter = {
  endpoint = function(endpoint)
    local base = endpoint:gsub("[?#].*$", "")
    if not base:find("/responses$") then
      return nil, ("cannot derive the token-counting endpoint from %s (it should end in /responses)"):format(endpoint)
    end
    return base .. "/input_tokens"
  end,
  body = function(body)
    local out = {}
    for _, k in ipairs({ "model", "input", "instructions", "tools", "reasoning" }) do
      out[k] = body[k]
    end
    return out
  end,
  tokens = function(decoded)
    return type(decoded) == "table" and tonumber(decoded.input_tokens) or nil
  end,
}

--- input_tokens include the cached ones here; usage keeps them apart.
M.normalize_usage = common.uncached_input

return M
