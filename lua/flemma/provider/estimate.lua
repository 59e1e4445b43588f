--- :Flemma usage:estimate: counts a buffer's input tokens with its provider's
--- token-counting endpoint (through the same curl transport as a request, the key on
--- stdin) and prices them before anything is sent.
local util = require("flemma.core.util")

local M = {}
local H = {}

function H.n(x)
  local s = tostring(math.floor(x))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

--- The headers and body of curl's `--dump-header -` output: the last header block
--- (1xx blocks skipped) and what follows it.
function H.split_http(out)
  local status, body = nil, out
  while true do
    local code = body:match("^HTTP/[%d.]+ (%d%d%d)")
    if not code then
      break
    end
    local e = body:find("\r?\n\r?\n")
    if not e then
      return tonumber(code), ""
    end
    status = tonumber(code)
    local _, stop = body:find("\r?\n\r?\n")
    body = body:sub(stop + 1)
  end
  return status, body
end

--- The message of an estimate.
---@param spec flemma.provider.Spec
---@param tokens integer
function M.describe(spec, tokens)
  local info = require("flemma.core.models").get(spec.kind, spec.model)
  if not info then
    return ("%s %s: %s input tokens (the model's price is unknown)"):format(spec.name, spec.model, H.n(tokens))
  end
  local cost = tokens * info.input / 1e6
  return ("%s %s: %s input tokens · about %s to send (at $%s per million input tokens, before output and caching)"):format(
    spec.name,
    spec.model,
    H.n(tokens),
    cost < 0.01 and ("$%.4f"):format(cost) or ("$%.2f"):format(cost),
    tostring(info.input)
  )
end

--- Counts the input tokens of a buffer's conversation. cb(result) with
--- { tokens, cost?, message } or { error }.
---@param bufnr integer
---@param cb fun(result: { tokens?: integer, cost?: number, message?: string, error?: string })
function M.estimate(bufnr, cb)
  local provider = require("flemma.provider")
  -- The buffer's own provider and model when its frontmatter selects them.
  local spec, err = provider.resolve_buffer(bufnr)
  if not spec then
    return cb({ error = err and err:find("^frontmatter line") and ("nothing counted: " .. err) or err })
  end
  local kind = provider.kind(spec.kind)
  local counter = kind and kind.counter
  if not counter then
    return cb({
      error = ("%s: the %s API has no token-counting endpoint that Flemma knows; nothing was counted"):format(
        spec.name,
        spec.kind
      ),
    })
  end
  local endpoint, eerr = counter.endpoint(spec.endpoint)
  if not endpoint then
    return cb({ error = ("%s: %s"):format(spec.name, eerr) })
  end
  local document = require("flemma.chat.document")
  local doc = document.get(bufnr)
  local ok_doc, problems = document.validate_for_send(doc)
  if ok_doc then
    -- counted as it would be sent: templates expanded
    local expanded
    expanded, problems = require("flemma.chat.templates").expand(bufnr, doc)
    ok_doc, doc = expanded ~= nil, expanded or doc
  end
  if ok_doc then
    -- and the files it references attached
    local attached
    attached, problems = require("flemma.chat.attachments").expand(bufnr, doc)
    ok_doc, doc = attached ~= nil, attached or doc
  end
  if not ok_doc then
    local msgs = {}
    for _, p in ipairs(problems) do
      msgs[#msgs + 1] = ("line %d: %s"):format(p.line or 0, p.message)
    end
    return cb({ error = "nothing counted: the conversation cannot be sent as it is:\n" .. table.concat(msgs, "\n") })
  end
  -- A key that the frontmatter's provider would send to a new host: asked first
  -- (flemma.keyhost), counted after a yes.
  if
    not require("flemma.provider.keyhost").settle(bufnr, function()
      M.estimate(bufnr, cb)
    end, function(message)
      cb({ error = (message:gsub("^not sent: ", "nothing counted: ")) })
    end)
  then
    return
  end
  provider.resolve_key(spec, function(key, kerr)
    if kerr then
      return cb({ error = kerr })
    end
    local ok, res = pcall(function()
      local ctx = provider.context(spec, document.to_messages(doc), { bufnr = bufnr, key = key })
      local body, headers = provider.build(ctx)
      headers.accept = "application/json"
      return { body = vim.json.encode(counter.body(body)), headers = headers }
    end)
    if not ok then
      return cb({ error = util.message(res) })
    end
    H.count(bufnr, spec, kind, endpoint, res, cb)
  end)
end

--- Sends the counting request and reads the answer: cb({ tokens, cost?, message }) or
--- cb({ error }).
function H.count(bufnr, spec, kind, endpoint, req, cb)
  local counter = kind.counter
  local params = require("flemma.chat.frontmatter").parameters(bufnr, spec.kind)
  local started, handle = pcall(require("flemma.provider.transport").start, {
    endpoint = endpoint,
    headers = req.headers,
    body = req.body,
    connect_timeout = tonumber(params.connect_timeout),
    timeout = tonumber(params.connect_timeout) and (tonumber(params.connect_timeout) + 30) or 60,
    on_exit = function(result)
      vim.schedule(function()
        if result.code ~= 0 then
          local what = require("flemma.provider.transport").curl_errors[result.code]
            or ("curl failed (exit %d)"):format(result.code)
          return cb({ error = ("%s: counting tokens failed: %s"):format(spec.name, what) })
        end
        local status, text = H.split_http(result.output or "")
        local dok, decoded = pcall(vim.json.decode, text)
        if status ~= 200 or not dok then
          local msg = dok and kind.error_message(decoded) or vim.trim(text:sub(1, 200))
          return cb({
            error = ("%s: counting tokens failed: HTTP %s%s"):format(
              spec.name,
              tostring(status),
              msg and msg ~= "" and (': "' .. msg .. '"') or ""
            ),
          })
        end
        local tokens = counter.tokens(decoded)
        if not tokens then
          return cb({ error = ("%s: the token count answer has no input_tokens"):format(spec.name) })
        end
        local info = require("flemma.core.models").get(spec.kind, spec.model)
        cb({ tokens = tokens, cost = info and tokens * info.input / 1e6 or nil, message = M.describe(spec, tokens) })
      end)
    end,
  })
  if not started then
    cb({ error = ("%s: %s"):format(spec.name, util.message(handle)) })
  end
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["usage:estimate"] = {
  chat = true,
  desc = "count the buffer's input tokens with the provider's token-counting endpoint and show the estimated cost before sending",
  run = function()
    local bufnr = vim.api.nvim_get_current_buf()
    util.notify("counting tokens...")
    M.estimate(bufnr, function(r)
      if r.error then
        util.notify(r.error, vim.log.levels.ERROR)
      else
        util.notify(r.message)
      end
    end)
  end,
}

return M
