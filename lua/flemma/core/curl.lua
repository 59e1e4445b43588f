--- What every curl Flemma runs shares (provider requests, MCP's Streamable HTTP):
--- headers, keys among them, reach curl through `--config -` on stdin, never argv
--- (visible in `ps`); a request body goes through a private temp file (0600). The
--- process itself is run by the native process manager (core/process).
local util = require("flemma.core.util")

local M = {}
local H = {}

--- curl exit codes (see `man curl`, EXIT CODES).
M.errors = {
  [5] = "the proxy's host name could not be resolved",
  [6] = "the host name could not be resolved",
  [7] = "could not connect",
  [28] = "timed out",
  [35] = "the TLS handshake failed",
  [52] = "the server closed the connection without answering",
  [55] = "sending the request failed (connection reset)",
  [56] = "receiving the answer failed (connection reset)",
  [60] = "the server's TLS certificate could not be verified",
}

--- Quotes a value for curl's config file syntax.
function H.quote(s)
  return '"' .. s:gsub("\\", "\\\\"):gsub('"', '\\"') .. '"'
end

--- The `--config -` text: one `header = "name: value"` line per header. Header names
--- and values must not contain line breaks (they would end the header).
---@param headers table<string, string>
---@return string
function M.config_text(headers)
  local names = vim.tbl_keys(headers)
  table.sort(names)
  local lines = {}
  for _, name in ipairs(names) do
    local value = headers[name]
    if type(name) ~= "string" or not name:match("^[%w!#$%%&'*+.^_`|~-]+$") then
      util.error(("header name %s is not a valid HTTP header name"):format(vim.inspect(name)))
    end
    if type(value) ~= "string" or value:find("[\r\n%z]") then
      util.error(("the value of header `%s` should be a string without line breaks"):format(name))
    end
    lines[#lines + 1] = "header = " .. H.quote(name .. ": " .. value)
  end
  -- No "Expect: 100-continue" wait before large bodies.
  lines[#lines + 1] = 'header = "Expect:"'
  return table.concat(lines, "\n") .. "\n"
end

--- The `--config -` line giving curl its URL: a URL may carry a secret (user info,
--- a token in its path or query), and argv is visible in `ps` (/proc/PID/cmdline).
---@param url string
---@return string
function M.config_url(url)
  if type(url) ~= "string" or url:find("[\r\n%z]") then
    util.error("the URL should be a string without line breaks")
  end
  return "url = " .. H.quote(url) .. "\n"
end

--- The URL as logs and status show it: no user info, no query or fragment (either may
--- hold a key or a token).
---@param url string
---@return string
function M.display_url(url)
  local scheme, rest = tostring(url):match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then
    return "(not a URL)"
  end
  local authority = rest:match("^[^/?#]*")
  local path = rest:sub(#authority + 1):match("^[^?#]*")
  authority = authority:gsub("^.*@", "")
  return scheme .. "://" .. authority .. path
end

--- The size in bytes of a body given as a string or a list of pieces.
---@param body string|string[]
---@return integer
function M.body_size(body)
  if type(body) == "string" then
    return #body
  end
  local n = 0
  for i = 1, #body do
    n = n + #body[i]
  end
  return n
end

--- Writes the body (a string, or a list of pieces written one after the other)
--- into a new private file (mode 0600) and returns its path.
---@param body string|string[]
---@return string path
function M.write_body(body)
  local path = vim.fn.tempname() .. "-request.json"
  local fd, err = vim.uv.fs_open(path, "wx", tonumber("600", 8))
  if not fd then
    util.error("cannot create the request file: " .. tostring(err))
  end
  local ok, werr = vim.uv.fs_write(fd, body, 0)
  if ok and ok ~= M.body_size(body) then
    ok, werr = nil, ("%d of %d bytes written"):format(ok, M.body_size(body))
  end
  vim.uv.fs_close(fd)
  if not ok then
    os.remove(path)
    util.error("cannot write the request file: " .. tostring(werr))
  end
  return path
end

return M
