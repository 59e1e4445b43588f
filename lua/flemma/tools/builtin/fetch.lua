--- The `fetch` tool (off unless `tools.fetch.enabled`): an HTTP(S) GET through curl
--- run by the native process manager. Each hop (the URL, then at most 5 redirects)
--- is checked before it is made: http or https only, no user info, and the host's
--- addresses after DNS resolution must not be loopback, private, link-local,
--- unspecified, multicast or the like (flemma.policy.address); curl connects to the
--- checked address only (`--resolve`), follows nothing by itself, reads no .curlrc,
--- .netrc, cookies or proxy and is given no key. The page is read up to `max_bytes`
--- and converted (HTML into Markdown or text), cut to its head within
--- `tools.truncate` and, when cut, saved whole to a private file named in the result,
--- all natively on the process manager's worker thread: Neovim's loop only gets the
--- head.
local address = require("flemma.policy.address")
local preview = require("flemma.tools.preview")

local H = {}

H.MAX_REDIRECTS = 5
H.REDIRECT = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }
H.FORMATS = { markdown = true, text = true, raw = true }
H.PROGRAM = "curl"

-- The tool's options (setup only: frontmatter cannot set tools.fetch).
function H.config()
  local tools = require("flemma.core.config").get().tools or {}
  return tools.fetch or {}
end

-- Whether the user exempted this exact host and port in setup (tools.fetch.allow_hosts).
function H.allowed(host, port)
  for _, entry in ipairs(H.config().allow_hosts or {}) do
    local h, p = tostring(entry):lower():match("^%[?([^%]]-)%]?:(%d+)$")
    if h and h:gsub("%.$", "") == host and tonumber(p) == port then
      return true
    end
  end
  return false
end

-- curl's config on stdin: what is sent besides the URL (no key, no cookie).
function H.config_text()
  return table.concat({
    'user-agent = "Flemma-fetch/1"',
    'header = "Accept: text/html, application/xhtml+xml, text/plain;q=0.9, */*;q=0.5"',
    'header = "Accept-Language: en;q=0.9, *;q=0.5"',
  }, "\n") .. "\n"
end

-- curl's argv for one hop: pinned to the checked address, no redirect followed.
function H.argv(u, addrs, seconds, max_bytes)
  local argv = {
    H.PROGRAM,
    "-q", -- first: no ~/.curlrc
    "--silent",
    "--show-error",
    "--no-netrc",
    "--dump-header",
    "-",
    "--proto",
    "=http,https",
    "--max-redirs",
    "0",
    "--noproxy",
    "*",
    "--compressed",
    "--max-filesize",
    tostring(max_bytes),
    "--connect-timeout",
    tostring(math.max(1, math.min(10, math.ceil(seconds)))),
    "--max-time",
    tostring(math.max(1, math.ceil(seconds))),
    "--config",
    "-",
  }
  if not u.ip then
    -- Every address was checked; curl tries them in order and resolves nothing.
    local shown = {}
    for i, a in ipairs(addrs) do
      shown[i] = a:find(":", 1, true) and ("[" .. a .. "]") or a
    end
    vim.list_extend(argv, { "--resolve", ("%s:%d:%s"):format(u.host, u.port, table.concat(shown, ",")) })
  end
  vim.list_extend(argv, { "--", u.url })
  return argv
end

-- The result text: a first line naming the page, then its head within
-- `tools.truncate` (the worker thread cut it and saved the whole text; a note says
-- where).
function H.result(ctx, page, callback)
  local size = ctx.truncate.format_size
  local head = ("[%s: HTTP %d%s, %s%s]"):format(
    page.url,
    page.status,
    page.content_type ~= "" and (", " .. page.content_type) or "",
    size(page.total_bytes),
    page.hops > 0 and (", after %d redirect%s"):format(page.hops, page.hops == 1 and "" or "s") or ""
  )
  local note = ""
  if page.cut then
    note = ("[Page truncated: showing the first %d of %d lines (%s of %s).%s]\n"):format(
      page.kept_lines,
      page.total_lines,
      size(page.kept_bytes),
      size(page.total_bytes),
      page.path and (" Full text: " .. page.path) or ""
    )
  end
  local out = head .. "\n" .. note .. "\n" .. (page.text ~= "" and page.text or "(the page is empty)")
  if page.status >= 400 then
    callback({ success = false, error = ("the server answered HTTP %d"):format(page.status), output = out })
  else
    callback({ success = true, output = out })
  end
end

-- The checked input: url, max_bytes (within the configured cap) and format.
function H.check(input, cfg)
  if type(input.url) ~= "string" or input.url == "" then
    return nil, "`url` should be a non-empty string"
  end
  local cap = cfg.max_bytes or 5 * 1024 * 1024
  local max = input.max_bytes
  if max ~= nil and (type(max) ~= "number" or max < 1 or max ~= math.floor(max)) then
    return nil, ("`max_bytes` should be a positive whole number of bytes, not %s"):format(vim.inspect(max))
  end
  local format = input.format or "markdown"
  if not H.FORMATS[format] then
    return nil, ('`format` should be "markdown", "text" or "raw", not %s'):format(vim.inspect(format))
  end
  return { url = input.url, max_bytes = math.min(max or cap, cap), format = format }
end

-- One hop: checks the URL's address, runs curl and hands over what it read:
-- done(nil, page) or done(why).
function H.hop(state, url, done)
  local u, bad = address.parse_url(url)
  if not u then
    return done(bad)
  end
  address.check(u, H.allowed, function(addrs, why)
    if state.cancelled then
      return
    end
    if not addrs then
      return done(why)
    end
    local left = state.deadline - vim.uv.now()
    if left <= 0 then
      return done(("no answer within %g s"):format(state.timeout))
    end
    local page = { url = u.url, parsed = u, status = 0, headers = {}, errors = {} }
    local ok, handle = pcall(require("flemma.core.process").spawn, {
      cmd = H.argv(u, addrs, left / 1000, state.max_bytes),
      stdin = H.config_text(),
      merge_output = false,
      decoder = vim.json.encode({
        kind = "fetch",
        format = state.format,
        max = state.max_bytes,
        head_lines = state.head_lines,
        head_bytes = state.head_bytes,
        save = vim.fn.tempname() .. "-fetch.txt",
      }),
      max_bytes = 4096,
      max_lines = 50,
      timeout = math.floor(left) + 2000,
      kill_grace = 300,
      on_events = function(events)
        for _, ev in ipairs(events) do
          if ev.type == "http" then
            page.status = ev.status or 0
            page.headers = ev.headers or {}
          elseif ev.type == "page" then
            page.body = ev
          elseif ev.type == "error" then
            page.errors[#page.errors + 1] = ev
          end
        end
      end,
    }, function(res)
      state.handle = nil
      if state.cancelled then
        return
      end
      for _, e in ipairs(page.errors) do
        if e.error_type == "response_too_large" then
          return done(("the page is larger than %d bytes (max_bytes)"):format(state.max_bytes))
        end
      end
      if res.timed_out or res.code == 28 then
        return done(("no answer within %g s"):format(state.timeout))
      end
      if res.code == 63 then
        return done(("the page is larger than %d bytes (max_bytes)"):format(state.max_bytes))
      end
      if res.code ~= 0 and page.status == 0 then
        local msg = vim.trim(res.stderr or ""):gsub("^curl: %(%d+%) ", "")
        return done(msg ~= "" and msg or ("curl exited with %s"):format(tostring(res.code)))
      end
      if #page.errors > 0 then
        local e = page.errors[1]
        return done(e.message or "the page could not be read")
      end
      done(nil, page)
    end)
    if not ok then
      return done((tostring(handle):gsub("^%(flemma%) ", "")))
    end
    state.handle = handle
  end)
end

-- Follows the hops: at most H.MAX_REDIRECTS redirects, each checked as the first.
function H.run(state, url, callback)
  H.hop(state, url, function(why, page)
    if why then
      return callback({ success = false, error = why })
    end
    if H.REDIRECT[page.status] then
      local location = page.headers.location
      if not location or location == "" then
        return callback({ success = false, error = ("HTTP %d without a Location"):format(page.status) })
      end
      if state.hops >= H.MAX_REDIRECTS then
        return callback({
          success = false,
          error = ("more than %d redirects (the last to %s): not followed"):format(H.MAX_REDIRECTS, location),
        })
      end
      state.hops = state.hops + 1
      return H.run(state, address.join(page.parsed, location), callback)
    end
    page.hops = state.hops
    local body = page.body or { text = "", total_lines = 0, total_bytes = 0, kept_lines = 0, kept_bytes = 0 }
    for k, v in pairs(body) do
      if k ~= "type" then
        page[k] = v
      end
    end
    page.content_type = (page.headers["content-type"] or ""):gsub(";.*$", "")
    state.result(page)
  end)
end

---@type flemma.tools.Definition
return {
  name = "fetch",
  description = 'Fetch a web page (HTTP or HTTPS GET) and return it as Markdown (format = "text": plain '
    .. 'text, "raw": the body as sent). Follows at most 5 redirects; never reaches private, loopback '
    .. "or link-local addresses. Long pages keep their first 2000 lines or 50KB; the whole text is "
    .. "saved to a file named in the result.",
  strict = true,
  async = true,
  enabled = function()
    return H.config().enabled == true
  end,
  input_schema = {
    type = "object",
    properties = {
      url = { type = "string", description = "The http:// or https:// URL" },
      max_bytes = {
        type = { "integer", "null" },
        description = "Largest body to read, in bytes (default and most: tools.fetch.max_bytes, 5 MB)",
      },
      format = {
        type = { "string", "null" },
        enum = { "markdown", "text", "raw", vim.NIL },
        description = 'What to return: "markdown" (default), "text" or "raw"',
      },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "url", "max_bytes", "format", "label" },
    additionalProperties = false,
  },
  format_preview = function(input)
    local url = type(input.url) == "string" and input.url or ""
    local fmt = type(input.format) == "string" and input.format ~= "markdown" and (" (" .. input.format .. ")") or ""
    return preview.with_comment("GET " .. url .. fmt, input.label)
  end,
  execute = function(input, ctx, callback)
    local cfg = H.config()
    local checked, err = H.check(input, cfg)
    if not checked then
      callback({ success = false, error = err })
      return
    end
    if vim.fn.executable(H.PROGRAM) ~= 1 then
      callback({ success = false, error = "`curl` is not installed (or not in $PATH)" })
      return
    end
    local timeout = cfg.timeout or ctx.timeout or 30
    local finished = false
    local function done(result)
      if not finished then
        finished = true
        callback(result)
      end
    end
    local t = require("flemma.core.config").get().tools.truncate or {}
    local state = {
      head_lines = t.max_lines or 2000,
      head_bytes = t.max_bytes or 51200,
      format = checked.format,
      max_bytes = checked.max_bytes,
      timeout = timeout,
      deadline = vim.uv.now() + timeout * 1000,
      hops = 0,
    }
    state.result = function(page)
      H.result(ctx, page, done)
    end
    H.run(state, checked.url, done)
    return function()
      state.cancelled = true
      if state.handle then
        state.handle:cancel()
      end
      done({ success = false, error = "the fetch was cancelled" })
    end
  end,
}
