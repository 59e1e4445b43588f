--- Provider kind `anthropic`: the Messages API with streaming. Builds the request
--- (system, tools with input_schema, tool_use / tool_result blocks, thinking with
--- signatures and redacted thinking sent back as they came, prompt caching) and
--- reads the provider's error bodies. The decoded stream events are provider-neutral
--- (native decoder), so this module needs nothing to turn them into a response.
local thinking = require("flemma.provider.thinking")
local common = require("flemma.provider.common")

local M = {}
local H = {}

M.kind = "anthropic"
M.stream = "anthropic"
M.key = { header = "x-api-key" }
M.endpoint = common.configured_endpoint
M.parameters = { "max_tokens", "temperature", "thinking", "thinking_foreign", "cache_retention", "extra", "anthropic" }
M.version = "2023-06-01"

--- Thinking budgets of the unified `parameters.thinking` levels.
M.budgets = { minimal = 1024, low = 4096, medium = 10000, high = 20000, max = 32000 }

--- The default max_tokens when neither `parameters.max_tokens` nor the model table says.
M.default_max_tokens = 8192

H.schema = common.schema

H.input = common.input

--- The thinking budget for a `parameters.thinking` value (nil: thinking off).
---@param value any
---@return integer|nil
function M.budget(value)
  if value == nil or value == false or value == 0 then
    return nil
  end
  if type(value) == "number" then
    return math.max(1024, math.floor(value))
  end
  if value == true then
    return M.budgets.medium
  end
  local b = M.budgets[value]
  if not b then
    require("flemma.core.util").error(
      ("`parameters.thinking` should be false, a token budget or one of minimal, low, medium, high, max, not %s"):format(
        vim.inspect(value)
      )
    )
  end
  return b
end

function H.cache_control(retention)
  if retention == "short" then
    return { type = "ephemeral" }
  elseif retention == "long" then
    return { type = "ephemeral", ttl = "1h" }
  end
  return nil
end

--- An attached image (image block) or PDF (document block, titled with its path).
function H.file_block(p)
  local source = { type = "base64", media_type = p.mime, data = p.data }
  if common.is_image(p) then
    return { type = "image", source = source }
  elseif common.is_pdf(p) then
    return { type = "document", source = source, title = p.path }
  end
  return { type = "text", text = common.file_note(p, "this provider takes images and PDFs only") }
end

--- Content blocks of one message.
function H.blocks(msg, params)
  local out = {}
  for _, p in ipairs(msg.parts) do
    if p.kind == "text" then
      if p.text:find("%S") then
        out[#out + 1] = { type = "text", text = p.text }
      end
    elseif p.kind == "thinking" and msg.role == "assistant" then
      if p.redacted and (p.provider == nil or p.provider == "anthropic") then
        out[#out + 1] = { type = "redacted_thinking", data = p.text }
      elseif p.signature and (p.provider == nil or p.provider == "anthropic") then
        out[#out + 1] = { type = "thinking", thinking = p.text, signature = p.signature }
      else
        -- Another provider's thinking (or thinking without a signature): as text by
        -- default, never with its signature (parameters.thinking_foreign).
        local mode = thinking.mode(p, "anthropic", params)
        if (mode == "text" or mode == "preserve") and p.text:find("%S") then
          out[#out + 1] = { type = "text", text = thinking.as_text(p.text) }
        end
      end
    elseif p.kind == "file" then
      out[#out + 1] = H.file_block(p)
    elseif p.kind == "tool_use" then
      out[#out + 1] = { type = "tool_use", id = p.id, name = common.wire_name(p.name), input = H.input(p.input) }
    elseif p.kind == "tool_result" then
      local block = { type = "tool_result", tool_use_id = p.id }
      if p.files and #p.files > 0 then
        -- The files a result carries: image and document blocks in its content.
        block.content = {}
        if p.content and p.content ~= "" then
          block.content[1] = { type = "text", text = p.content }
        end
        for _, f in ipairs(p.files) do
          block.content[#block.content + 1] = H.file_block(f)
        end
      elseif p.content and p.content ~= "" then
        block.content = p.content
      end
      if p.is_error then
        block.is_error = true
      end
      out[#out + 1] = block
    end
  end
  return out
end

--- The conversation: `messages`, turns of content blocks; with caching on, the last
--- block that is not thinking carries the breakpoint (everything up to it is cached
--- for the next turn).
---@type flemma.provider.Conversation
M.conversation = {
  field = "messages",
  items = function(msg, ctx)
    return H.blocks(msg, ctx.parameters)
  end,
  turn = function(role, items)
    return { role = role, content = items }
  end,
  mark = function(ctx)
    local cache = H.cache_control(ctx.parameters.cache_retention)
    if not cache then
      return nil
    end
    return function(blocks)
      for i = #blocks, 1, -1 do
        local t = blocks[i].type
        if t ~= "thinking" and t ~= "redacted_thinking" then
          blocks[i].cache_control = cache
          break
        end
      end
    end
  end,
}

--- The request body and headers.
---@param ctx flemma.provider.Context
---@return table body
---@return table<string, string> headers
function M.build(ctx)
  local params = ctx.parameters
  local info = ctx.model_info
  local body = {
    model = ctx.model,
    max_tokens = params.max_tokens or (info and info.max_output) or M.default_max_tokens,
    stream = true,
  }
  local cache = H.cache_control(params.cache_retention)

  if ctx.request.system then
    body.system = { { type = "text", text = ctx.request.system } }
    if cache then
      body.system[1].cache_control = cache
    end
  end

  if #ctx.tools > 0 then
    body.tools = {}
    for i, def in ipairs(ctx.tools) do
      body.tools[i] =
        { name = common.wire_name(def.name), description = def.description, input_schema = H.schema(def.input_schema) }
    end
    if cache then
      body.tools[#body.tools].cache_control = cache
    end
  end

  body.messages = common.conversation(M.conversation, ctx)

  local budget = M.budget(params.thinking)
  if budget then
    if body.max_tokens <= budget then
      body.max_tokens = budget + M.default_max_tokens
    end
    body.thinking = { type = "enabled", budget_tokens = budget }
  elseif params.temperature ~= nil then
    -- The API accepts a temperature only without thinking.
    body.temperature = params.temperature
  end

  local headers = common.headers(M.key, ctx.key)
  headers["anthropic-version"] = M.version
  common.extra(body, ctx)
  return body, headers
end

--- Token counting: POST .../messages/count_tokens takes the request minus what only
--- shapes the answer.
---@type flemma.provider.Counter
M.counter = {
  endpoint = function(endpoint)
    local base = endpoint:gsub("[?#].*$", "")
    if not base:find("/messages$") then
      return nil, ("cannot derive the token-counting endpoint from %s (it should end in /messages)"):format(endpoint)
    end
    return base .. "/count_tokens"
  end,
  body = function(body)
    local out = vim.deepcopy(body)
    out.stream, out.max_tokens, out.temperature = nil, nil, nil
    return out
  end,
  tokens = function(decoded)
    return type(decoded) == "table" and tonumber(decoded.input_tokens) or nil
  end,
}

--- The message of an error body ({ type = "error", error = { type, message } }).
---@param decoded table
---@return string|nil message
---@return string|nil error_type
function M.error_message(decoded)
  local e = type(decoded) == "table" and decoded.error
  if type(e) == "table" then
    return e.message, e.type
  end
  return nil
end

--- Usage comes as it is kept (input_tokens without the cached ones).
M.normalize_usage = common.same_usage

return M
