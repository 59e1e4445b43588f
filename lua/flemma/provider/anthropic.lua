--- Provider kind `anthropic`: the Messages API with streaming. Builds the request
--- (system, tools with input_schema, tool_use / tool_result blocks, thinking with
--- signatures and redacted thinking sent back as they came, prompt caching) and
--- reads the provider's error bodies. The decoded stream events are provider-neutral
--- (native decoder), so this module needs nothing to turn them into a response.
local M = {}
local H = {}
local common = require("flemma.provider.common")

M.kind = "anthropic"
M.version = "2023-06-01"

--- Thinking budgets of the unified `parameters.thinking` levels.
M.budgets = { minimal = 1024, low = 4096, medium = 10000, high = 20000, max = 32000 }

--- The default max_tokens when neither `parameters.max_tokens` nor the model table says.
M.default_max_tokens = 8192

H.schema = common.schema

H.input = common.input

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
    require("flemma.core.util").error(
      ("`parameters.thinking` should be false, a token budget or one of minimal, low, medium, high, max, not %s"):format(
        vim.inspect(thinking)
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
function H.blocks(msg)
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
        local mode = require("flemma.provider.thinking").mode(p, "anthropic", H.params)
        if (mode == "text" or mode == "preserve") and p.text:find("%S") then
          out[#out + 1] = { type = "text", text = require("flemma.provider.thinking").as_text(p.text) }
        end
      end
    elseif p.kind == "file" then
      out[#out + 1] = H.file_block(p)
    elseif p.kind == "tool_use" then
      out[#out + 1] = { type = "tool_use", id = p.id, name = common.wire_name(p.name), input = H.input(p.input) }
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
  H.params = params
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
  common.extra(body, ctx)
  return body, headers
end

-- Encoded content blocks of unchanged document messages (the incremental document
-- model hands back the same message table while a message is unchanged), so a send
-- encodes only what changed since the last one.
H.fragments = setmetatable({}, { __mode = "k" })
H.seen = setmetatable({}, { __mode = "k" })

function H.fragment(msg)
  local f = H.fragments[msg]
  if f == nil then
    local blocks = H.blocks(msg)
    f = #blocks > 0 and vim.json.encode(blocks):sub(2, -2) or ""
    H.fragments[msg] = f
  end
  return f
end

H.SENTINEL = "\1flemma-messages\1"

--- The request body as JSON text: the same request as `build`, with the messages of
--- `ctx.doc_messages` (document messages, system included) encoded once per message.
---@param ctx flemma.provider.Context
---@return string body
---@return table<string, string> headers
function M.encode(ctx)
  local pieces, headers = M.encode_pieces(ctx)
  return table.concat(pieces), headers
end

--- The body of M.encode as a list of pieces (their concatenation is the JSON text):
--- the cached encodings of unchanged messages are listed, not copied into one
--- large string (the transport writes the list as it is).
---@param ctx flemma.provider.Context
---@return string[] pieces
---@return table<string, string> headers
function M.encode_pieces(ctx)
  local msgs = ctx.doc_messages
  H.params = ctx.parameters
  local foreign = ctx.parameters.thinking_foreign or "text"
  if H.fragments_foreign ~= foreign then
    -- encoded fragments depend on how foreign thinking is sent
    H.fragments = setmetatable({}, { __mode = "k" })
    H.fragments_foreign = foreign
  end
  local first = msgs and msgs[1]
  if first and not H.seen[first] then
    -- Message tables not seen before (a fresh full parse): one encode of the whole
    -- request is cheaper than one per message. Per-message encoding pays off once
    -- the document hands back the same tables for unchanged messages.
    H.seen[first] = true
    local full = {}
    for k, v in pairs(ctx) do
      full[k] = v
    end
    full.request = require("flemma.chat.document").to_messages({ messages = msgs })
    msgs = nil
    ctx = full
  end
  if not msgs then
    local body, headers = M.build(ctx)
    return { vim.json.encode(body) }, headers
  end
  -- The pieces of the messages, in order: a message that starts a conversation
  -- message opens it, the next one of the same role joins it. One list per buffer
  -- is kept and rewritten in place from the first message that changed since the
  -- last encoding (another table at that place): the pieces before it stay, so a
  -- send after an edit at the end allocates only for the end.
  local last = H.last
  if not last or last.bufnr ~= ctx.bufnr or last.fragments ~= H.fragments then
    last = { bufnr = ctx.bufnr, fragments = H.fragments, msgs = {}, marks = {}, out = {} }
    H.last = last
  end
  local prev, marks, out = last.msgs, last.marks, last.out
  local same, limit = 0, math.min(#msgs, #prev)
  while same < limit and msgs[same + 1] == prev[same + 1] do
    same = same + 1
  end
  local n, role, conv_n, last_msg = 1, nil, 0, nil -- role: of the open conversation message
  if same > 0 then
    local m = marks[same]
    n, role, conv_n, last_msg = m[1], m[2], m[3], m[4]
  end
  if last.tail_at and last.tail_at <= n then
    out[last.tail_at] = last.tail_plain -- the cache breakpoint of the last send
  end
  last.tail_at = nil
  for i = same + 1, #msgs do
    local msg = msgs[i]
    prev[i] = msg
    if msg.role ~= "system" then
      local f = H.fragment(msg)
      if f ~= "" then
        if role == msg.role then
          out[n + 1] = ","
        else
          if role then
            n = n + 1
            out[n] = "]}"
          end
          conv_n = conv_n + 1
          role = msg.role
          out[n + 1] = (conv_n > 1 and ',{"role":"' or '{"role":"') .. role .. '","content":['
        end
        out[n + 2] = f
        n = n + 2
        last_msg = msg
      end
    end
    local m = marks[i]
    if m then
      m[1], m[2], m[3], m[4] = n, role, conv_n, last_msg
    else
      marks[i] = { n, role, conv_n, last_msg }
    end
  end
  for i = #msgs + 1, #prev do
    prev[i], marks[i] = nil, nil
  end
  local skeleton = {}
  for k, v in pairs(ctx) do
    skeleton[k] = v
  end
  skeleton.doc_messages = nil
  skeleton.request = { system = ctx.request.system, messages = {} }
  local body, headers = M.build(skeleton)
  local cache = H.cache_control(ctx.parameters.cache_retention)
  local pieces = out
  if cache and last_msg then
    -- The conversation tail carries the breakpoint: its last message encoded afresh
    -- (out[n] is its fragment; the plain one is put back by the next encoding).
    local blocks = H.blocks(last_msg)
    for i = #blocks, 1, -1 do
      local t = blocks[i].type
      if t ~= "thinking" and t ~= "redacted_thinking" then
        blocks[i].cache_control = cache
        break
      end
    end
    last.tail_at, last.tail_plain = n, out[n]
    out[n] = vim.json.encode(blocks):sub(2, -2)
  end
  body.messages = H.SENTINEL
  local json = vim.json.encode(body)
  local quoted = vim.json.encode(H.SENTINEL)
  local s, e = json:find(quoted, 1, true)
  pieces[1] = json:sub(1, s - 1) .. "["
  if role then
    pieces[n + 1] = "]}"
    n = n + 1
  end
  pieces[n + 1] = "]" .. json:sub(e + 1)
  for i = n + 2, #pieces do
    pieces[i] = nil
  end
  return pieces, headers
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
