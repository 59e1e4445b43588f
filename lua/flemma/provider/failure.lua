--- What the user reads when a request fails: one line naming the provider and what
--- went wrong (curl's failure, the HTTP status with the server's own message, an
--- error event, a stream that ended early), and on the next line what to do.
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.provider.Attempt what one attempt learned (flemma.provider.request)
---@field status? integer the HTTP status
---@field headers? table<string, string>
---@field sse? boolean the answer is an event stream
---@field error_type? string
---@field error_message? string
---@field stop_reason? string
---@field complete? boolean the stream ended as it should
---@field body? string the body of an answer that was not an event stream
---@field curl_code? integer
---@field stderr? string

function H.hint(spec, status, message)
  local m = (message or ""):lower()
  if status == 401 or status == 403 then
    local resolve = require("flemma.provider.resolve")
    local host, withheld = resolve.key_destination(spec)
    if not host and withheld then
      return withheld
    end
    if spec.api_key_env then
      return ("check the key in %s"):format(spec.api_key_env)
    end
    return ("the server wants a key: set `providers.%s.api_key_env` to the variable holding it"):format(spec.name)
  elseif status == 404 or m:find("model") and (m:find("not found") or m:find("does not exist")) then
    return ("check `model` (%s) and the endpoint %s"):format(spec.model, spec.endpoint)
  elseif
    status == 413
    or m:find("too long")
    or m:find("context") and (m:find("length") or m:find("window") or m:find("exceed"))
  then
    return "the conversation is too long for the model: shorten it or start a new chat"
  elseif status == 429 then
    return "rate limited: wait a little and press <C-]> again"
  elseif status and status >= 500 then
    return "the provider has a problem: try again later"
  elseif status == 400 then
    return "the provider refused the request"
  end
  return nil
end

--- The user-facing error of a failed attempt.
---@param spec flemma.provider.Spec
---@param params table the request's parameters
---@param a flemma.provider.Attempt
---@return string
function M.describe(spec, params, a)
  local where = spec.name
  if a.curl_code and a.curl_code ~= 0 and (not a.status or a.curl_code == 28) then
    local what = require("flemma.provider.transport").curl_errors[a.curl_code]
      or ("curl failed (exit %d)"):format(a.curl_code)
    local detail = vim.trim(a.stderr or "")
    local hint
    if a.curl_code == 28 then
      hint = ("no complete answer within parameters.timeout (%ss) / connect_timeout (%ss)"):format(
        tostring(params.timeout),
        tostring(params.connect_timeout)
      )
    elseif a.curl_code == 6 or a.curl_code == 7 then
      hint = require("flemma.provider.resolve").is_loopback(spec.endpoint)
          and ("is the %s server running at %s?"):format(spec.name, spec.endpoint)
        or ("check the network and `providers.%s.endpoint` (%s)"):format(spec.name, spec.endpoint)
    end
    return ("%s: %s%s%s"):format(where, what, detail ~= "" and (": " .. detail) or "", hint and ("\n" .. hint) or "")
  end
  -- An HTML page (a web server or another program on that port): not the API.
  local ctype = a.headers and a.headers["content-type"] or ""
  if
    a.status
    and (a.status >= 400 or (a.status < 300 and not a.sse))
    and not a.error_message
    and (ctype:find("text/html", 1, true) or (a.body or ""):match("^%s*<"))
  then
    local title = (a.body or ""):match("<[Tt][Ii][Tt][Ll][Ee]>%s*(.-)%s*</") or ""
    return ("%s: HTTP %d: the server returned an HTML page%s: is this the right endpoint? (%s)"):format(
      where,
      a.status,
      title ~= "" and (' ("' .. title:sub(1, 80) .. '")') or "",
      spec.endpoint
    )
  end
  if a.status and a.status >= 400 then
    local msg = a.error_message
    if not msg and a.body and a.body:match("^%s*{") then
      local ok, decoded = pcall(vim.json.decode, a.body)
      local kind = require("flemma.provider.kinds").get(spec.kind)
      if ok and kind then
        local t
        msg, t = kind.error_message(decoded)
        a.error_type = a.error_type or t
      end
    end
    if not msg and a.body and a.body ~= "" then
      if a.body:match("^%s*<") then
        msg = ("the server answered with an HTML page instead of JSON (%s)"):format(
          (a.body:match("<title>%s*(.-)%s*</title>") or ""):sub(1, 120)
        )
      else
        msg = vim.trim(a.body:sub(1, 300))
      end
    end
    local hint = H.hint(spec, a.status, msg)
    return ("%s: HTTP %d%s%s%s"):format(
      where,
      a.status,
      a.error_type and (" " .. a.error_type) or "",
      msg and (': "' .. msg .. '"') or "",
      hint and ("\n" .. hint) or ""
    )
  end
  if a.error_message or a.error_type then
    local hint = H.hint(spec, a.status, a.error_message)
    return ('%s: the stream reported an error%s: "%s"%s'):format(
      where,
      a.error_type and (" (" .. a.error_type .. ")") or "",
      a.error_message or "",
      hint and ("\n" .. hint) or ""
    )
  end
  if a.status == 200 and a.body and a.body ~= "" and not a.sse then
    return ("%s: the answer is not an event stream%s\ncheck `providers.%s.endpoint` (%s)"):format(
      where,
      a.body:match("^%s*<") and " (an HTML page)" or (': "' .. vim.trim(a.body:sub(1, 200)) .. '"'),
      spec.name,
      spec.endpoint
    )
  end
  local detail = vim.trim(a.stderr or "")
  return ("%s: the stream ended before the response was complete%s\ntry again (<C-]>)"):format(
    where,
    detail ~= "" and (" (" .. detail .. ")")
      or (a.curl_code and a.curl_code ~= 0 and (" (curl exit " .. a.curl_code .. ")") or "")
  )
end

--- The error and the line left in the buffer when a stream broke a limit: the
--- response passed parameters.max_response_bytes, or the decoder's own limits (JSON
--- nesting, line length: a broken or hostile server).
---@param spec flemma.provider.Spec
---@param params table
---@param ev { error_type: string, message?: string }
---@return string err
---@return string note
function M.limit(spec, params, ev)
  local name = spec.name
  if ev.error_type == "response_too_large" then
    local size = require("flemma.core.native").format_size(tonumber(params.max_response_bytes) or 0)
    return ("%s: the response passed parameters.max_response_bytes (%s): the request was stopped\nraise the limit if the answer is expected to be that long"):format(
      name,
      size
    ),
      ("<!-- flemma: stopped: the response passed parameters.max_response_bytes (%s) -->"):format(size)
  end
  return ("%s: %s\nis `providers.%s.endpoint` (%s) the right server?"):format(
    name,
    util.redact(ev.message or ""),
    name,
    spec.endpoint
  ),
    "<!-- flemma: stopped: the stream broke a limit of the decoder (JSON nesting or line length) -->"
end

--- The error of a transient failure given up on after retries: the count goes on
--- the first line.
---@param err string
---@param retries integer
---@return string
function M.after_retries(err, retries)
  local after = (" (after %d %s)"):format(retries, retries == 1 and "retry" or "retries")
  local first_nl = err:find("\n", 1, true)
  return first_nl and (err:sub(1, first_nl - 1) .. after .. err:sub(first_nl)) or (err .. after)
end

return M
