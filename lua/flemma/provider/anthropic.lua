--- Provider kind `anthropic`: the Messages API with streaming. Builds the request
--- (system, tools with input_schema, tool_use / tool_result blocks, thinking with
--- signatures and redacted thinking sent back as they came, prompt caching) and
--- reads the provider's error bodies. The decoded stream events are provider-neutral
--- (native decoder), so this module needs nothing to turn them into a response.
local M = {}
local H = {}

M.kind = "anthropic"
M.version = "2023-06-01"

--- Thinking budgets of the unified `parameters.thinking` levels.
M.budgets = { minimal = 1024, low = 4096, medium = 10000, high = 20000, max = 32000 }

--- The default max_tokens when neither `parameters.max_tokens` nor the model table says.
M.default_max_tokens = 8192

H.empty = vim.empty_dict

function H.schema(schema)
  local s = vim.deepcopy(schema)
  if type(s.properties) == "table" and next(s.properties) == nil then
    s.properties = H.empty()
  end
  return s
end

function H.input(input)
  if type(input) ~= "table" or next(input) == nil then
    return H.empty()
  end
  return input
end

--- The thinking budget for a `parameters.thinking` value (nil: thinking off).
---@param thinking any
---@return integer|nil
function M.budget(thinking)
  if thinking == nil or thinking == false or thinking == 0 then
    return nil
  end
  if type(thinking) == "number" then
    return math.max(1024, math.floor(thinking))
  end
  if thinking == true then
    return M.budgets.medium
  end
  local b = M.budgets[thinking]
  if not b then
    require("flemma.util").error(
      ("`parameters.thinking` should be false, a token budget or one of minimal, low, medium, high, max, not %s"):format(
        vim.inspect(thinking)
      )
    )
  end
  return b
end

--- Content blocks of one message.
function H.blocks(msg)
  local out = {}
  for _, p in ipairs(msg.parts) do
    if p.kind == "text" then
      if p.text:find("%S") then
        out[#out + 1] = { type = "text", text = p.text }
      end
    elseif p.kind == "thinking" and msg.role == "assistant" then
      if p.redacted then
        out[#out + 1] = { type = "redacted_thinking", data = p.text }
      elseif p.signature and (p.provider == nil or p.provider == "anthropic") then
        out[#out + 1] = { type = "thinking", thinking = p.text, signature = p.signature }
      end
      -- Thinking without a signature (another provider's) is not sent back.
    elseif p.kind == "tool_use" then
      out[#out + 1] = { type = "tool_use", id = p.id, name = p.name, input = H.input(p.input) }
    elseif p.kind == "tool_result" then
      local block = { type = "tool_result", tool_use_id = p.id }
      if p.content and p.content ~= "" then
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
  local cache
  if params.cache_retention == "short" then
    cache = { type = "ephemeral" }
  elseif params.cache_retention == "long" then
    cache = { type = "ephemeral", ttl = "1h" }
  end

  if ctx.request.system then
    body.system = { { type = "text", text = ctx.request.system } }
    if cache then
      body.system[1].cache_control = cache
    end
  end

  if #ctx.tools > 0 then
    body.tools = {}
    for i, def in ipairs(ctx.tools) do
      body.tools[i] = { name = def.name, description = def.description, input_schema = H.schema(def.input_schema) }
    end
    if cache then
      body.tools[#body.tools].cache_control = cache
    end
  end

  body.messages = {}
  for _, msg in ipairs(ctx.request.messages) do
    local blocks = H.blocks(msg)
    if #blocks > 0 then
      local last = body.messages[#body.messages]
      if last and last.role == msg.role then
        vim.list_extend(last.content, blocks)
      else
        body.messages[#body.messages + 1] = { role = msg.role, content = blocks }
      end
    end
  end
  local tail = body.messages[#body.messages]
  if cache and tail then
    -- The conversation tail: everything up to here is cached for the next turn.
    for i = #tail.content, 1, -1 do
      local t = tail.content[i].type
      if t ~= "thinking" and t ~= "redacted_thinking" then
        tail.content[i].cache_control = cache
        break
      end
    end
  end

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

  local headers = {
    ["content-type"] = "application/json",
    ["accept"] = "text/event-stream",
    ["anthropic-version"] = M.version,
  }
  if ctx.key then
    headers["x-api-key"] = ctx.key
  end
  return body, headers
end

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

return M
