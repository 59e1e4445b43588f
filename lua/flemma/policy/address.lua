--- Addresses the `fetch` tool may reach (SSRF): a URL is parsed strictly (http and
--- https only, no user info, no percent-encoded or non-ASCII host), its host read the
--- way the C library reads numbers (`127.1`, `0x7f.1`, `2130706433`, `0177.0.0.1` are
--- all 127.0.0.1) or resolved through DNS, and every address it gives is classified:
--- loopback, private, link-local (169.254.169.254, the cloud metadata service, among
--- them), unspecified, multicast, carrier-grade NAT, reserved and documentation ranges,
--- and the IPv6 forms that carry an IPv4 address (mapped `::ffff:a.b.c.d`, compatible
--- `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) as the address they carry. The
--- caller connects to the checked address only (curl --resolve), so a DNS answer that
--- changes between the check and the connection cannot move it.
local M = {}
local H = {}

-- IPv4 ranges refused: { first octets as a prefix, prefix length, why }.
H.V4 = {
  { { 0, 0, 0, 0 }, 8, "unspecified (0.0.0.0/8)" },
  { { 10, 0, 0, 0 }, 8, "private (10.0.0.0/8)" },
  { { 100, 64, 0, 0 }, 10, "carrier-grade NAT (100.64.0.0/10)" },
  { { 127, 0, 0, 0 }, 8, "loopback (127.0.0.0/8)" },
  { { 169, 254, 0, 0 }, 16, "link-local (169.254.0.0/16, cloud metadata)" },
  { { 172, 16, 0, 0 }, 12, "private (172.16.0.0/12)" },
  { { 192, 0, 0, 0 }, 24, "reserved (192.0.0.0/24)" },
  { { 192, 0, 2, 0 }, 24, "documentation (192.0.2.0/24)" },
  { { 192, 88, 99, 0 }, 24, "reserved (192.88.99.0/24)" },
  { { 192, 168, 0, 0 }, 16, "private (192.168.0.0/16)" },
  { { 198, 18, 0, 0 }, 15, "reserved (198.18.0.0/15)" },
  { { 198, 51, 100, 0 }, 24, "documentation (198.51.100.0/24)" },
  { { 203, 0, 113, 0 }, 24, "documentation (203.0.113.0/24)" },
  { { 224, 0, 0, 0 }, 4, "multicast (224.0.0.0/4)" },
  { { 240, 0, 0, 0 }, 4, "reserved (240.0.0.0/4, broadcast)" },
}

--- The four bytes of an IPv4 address written as the C library's inet_aton reads it
--- (1 to 4 parts, each decimal, 0x-hex or 0-octal; the last fills the bytes left), or
--- nil when the text is not one.
---@param s string
---@return integer[]|nil
function M.ipv4(s)
  if type(s) ~= "string" or s == "" or #s > 64 or s:find("[^%w%.]") then
    return nil
  end
  local parts = vim.split(s, ".", { plain = true })
  if #parts > 4 then
    return nil
  end
  local nums = {}
  for i, p in ipairs(parts) do
    local v
    if p:match("^0[xX]%x*$") then
      v = #p == 2 and 0 or tonumber(p:sub(3), 16)
    elseif p:match("^0[0-7]*$") then
      v = tonumber(p, 8)
    elseif p:match("^[1-9]%d*$") then
      v = tonumber(p, 10)
    else
      return nil
    end
    if v == nil then
      return nil
    end
    nums[i] = v
  end
  local bytes = {}
  for i = 1, #nums - 1 do
    if nums[i] > 255 then
      return nil
    end
    bytes[i] = nums[i]
  end
  local last = nums[#nums]
  local room = 5 - #nums -- bytes the last part fills
  if last >= 256 ^ room then
    return nil
  end
  for k = room - 1, 0, -1 do
    local d = 256 ^ k
    bytes[#bytes + 1] = math.floor(last / d) % 256
  end
  return bytes
end

--- The sixteen bytes of an IPv6 address (RFC 4291 text form, an embedded IPv4 in the
--- last 32 bits allowed; no zone), or nil.
---@param s string
---@return integer[]|nil
function M.ipv6(s)
  if type(s) ~= "string" or s == "" or #s > 64 or s:find("[^%x:%.]") then
    return nil
  end
  local tail4
  local v4 = s:match(":([%d%.]+)$")
  if v4 and v4:find("%.") then
    if not v4:match("^%d+%.%d+%.%d+%.%d+$") then
      return nil
    end
    local b = {}
    for p in v4:gmatch("%d+") do
      local n = tonumber(p)
      if #p > 3 or n > 255 or (#p > 1 and p:sub(1, 1) == "0") then
        return nil
      end
      b[#b + 1] = n
    end
    tail4 = b
    s = s:sub(1, #s - #v4) .. "0:0"
  end
  local double = s:find("::", 1, true)
  if double and s:find("::", double + 1, true) then
    return nil
  end
  local function groups(part)
    if part == "" then
      return {}
    end
    local out = {}
    for g in (part .. ":"):gmatch("([^:]*):") do
      if not g:match("^%x%x?%x?%x?$") then
        return nil
      end
      out[#out + 1] = tonumber(g, 16)
    end
    return out
  end
  local all
  if double then
    local left, right = groups(s:sub(1, double - 1)), groups(s:sub(double + 2))
    if not left or not right or #left + #right > 7 then
      return nil
    end
    all = {}
    vim.list_extend(all, left)
    for _ = 1, 8 - #left - #right do
      all[#all + 1] = 0
    end
    vim.list_extend(all, right)
  else
    all = groups(s)
    if not all or #all ~= 8 then
      return nil
    end
  end
  local bytes = {}
  for _, g in ipairs(all) do
    bytes[#bytes + 1] = math.floor(g / 256)
    bytes[#bytes + 1] = g % 256
  end
  if tail4 then
    for i = 1, 4 do
      bytes[12 + i] = tail4[i]
    end
  end
  return bytes
end

function H.in_v4(b, prefix, len)
  for i = 1, 4 do
    local bits = math.min(8, math.max(0, len - (i - 1) * 8))
    if bits == 0 then
      return true
    end
    local d = 2 ^ (8 - bits)
    if math.floor(b[i] / d) ~= math.floor(prefix[i] / d) then
      return false
    end
  end
  return true
end

--- Why an IPv4 address (four bytes) may not be fetched, or nil when it may.
---@param b integer[]
---@return string|nil
function M.classify_v4(b)
  for _, r in ipairs(H.V4) do
    if H.in_v4(b, r[1], r[2]) then
      return r[3]
    end
  end
  return nil
end

function H.zero(b, from, to)
  for i = from, to do
    if b[i] ~= 0 then
      return false
    end
  end
  return true
end

--- Why an IPv6 address (sixteen bytes) may not be fetched, or nil when it may. The
--- forms that carry an IPv4 address are judged by it.
---@param b integer[]
---@return string|nil
function M.classify_v6(b)
  local v4 = { b[13], b[14], b[15], b[16] }
  if H.zero(b, 1, 15) and b[16] == 0 then
    return "unspecified (::)"
  end
  if H.zero(b, 1, 15) and b[16] == 1 then
    return "loopback (::1)"
  end
  if H.zero(b, 1, 10) and b[11] == 0xff and b[12] == 0xff then
    local why = M.classify_v4(v4)
    return why and ("IPv4-mapped " .. why) or nil
  end
  if H.zero(b, 1, 12) then -- IPv4-compatible (deprecated): judged by the IPv4 address
    return "IPv4-compatible " .. (M.classify_v4(v4) or "address (::a.b.c.d)")
  end
  if b[1] == 0x00 and b[2] == 0x64 and b[3] == 0xff and b[4] == 0x9b and H.zero(b, 5, 12) then
    local why = M.classify_v4(v4)
    return why and ("NAT64 " .. why) or nil
  end
  if b[1] == 0x20 and b[2] == 0x02 then
    local why = M.classify_v4({ b[3], b[4], b[5], b[6] })
    return why and ("6to4 " .. why) or nil
  end
  if b[1] >= 0xfc and b[1] <= 0xfd then
    return "private (fc00::/7)"
  end
  if b[1] == 0xfe and b[2] >= 0x80 and b[2] <= 0xbf then
    return "link-local (fe80::/10)"
  end
  if b[1] == 0xfe and b[2] >= 0xc0 then
    return "site-local (fec0::/10)"
  end
  if b[1] == 0xff then
    return "multicast (ff00::/8)"
  end
  if b[1] == 0x20 and b[2] == 0x01 and b[3] == 0x0d and b[4] == 0xb8 then
    return "documentation (2001:db8::/32)"
  end
  if b[1] == 0x01 and b[2] == 0x00 and H.zero(b, 3, 8) then
    return "discard (100::/64)"
  end
  return nil
end

--- The text form of an address's bytes: dotted IPv4, or IPv6 in full hex groups.
---@param b integer[]
---@return string
function M.format(b)
  if #b == 4 then
    return table.concat(b, ".")
  end
  local g = {}
  for i = 1, 16, 2 do
    g[#g + 1] = ("%x"):format(b[i] * 256 + b[i + 1])
  end
  return table.concat(g, ":")
end

--- Why an address (text, as getaddrinfo gives it) may not be fetched, or nil.
---@param addr string
---@return string|nil
function M.classify(addr)
  local b4 = M.ipv4(addr)
  if b4 and addr:match("^%d+%.%d+%.%d+%.%d+$") then
    return M.classify_v4(b4)
  end
  local b6 = M.ipv6(addr)
  if b6 then
    return M.classify_v6(b6)
  end
  return "not an IP address"
end

---@class flemma.address.Url
---@field scheme "http"|"https"
---@field host string the host as written, lower-cased, without a trailing dot or brackets
---@field port integer
---@field path string path and query ("/" at least); the fragment is dropped
---@field ip? integer[] the address, when the host is an IP literal (any form)
---@field url string the URL to request: an IP literal host in its plain form

--- Parses a URL the way the fetch tool accepts it, or returns nil and why not.
---@param url string
---@return flemma.address.Url|nil
---@return string|nil
function M.parse_url(url)
  if type(url) ~= "string" or url == "" then
    return nil, "the URL should be a non-empty string"
  end
  if #url > 8192 then
    return nil, "the URL is longer than 8192 bytes"
  end
  if url:find("[%z\1-\32\127\\]") then
    return nil, "the URL holds a space, a control character or a backslash"
  end
  if url:find("[\128-\255]") then
    return nil, "the URL holds non-ASCII characters: percent-encode them (and write the host in punycode)"
  end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  if not scheme then
    return nil, "the URL should start with http:// or https://"
  end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    return nil, ("only http and https URLs are fetched, not %s"):format(scheme)
  end
  local authority, path = rest:match("^([^/?#]*)(.*)$")
  path = path:gsub("#.*$", "")
  if path == "" or path:sub(1, 1) == "?" then
    path = "/" .. path
  end
  if authority:find("@", 1, true) then
    return nil, "the URL holds a user name or password (user@host): they are never sent"
  end
  local host, port
  if authority:sub(1, 1) == "[" then
    host, port = authority:match("^%[([^%]]+)%](.*)$")
    if not host then
      return nil, "the URL's IPv6 address is not closed with ]"
    end
  else
    host, port = authority:match("^([^:]*)(.*)$")
  end
  local port_text = port
  port = scheme == "https" and 443 or 80
  if port_text ~= "" and port_text ~= ":" then
    local digits = port_text:match("^:(%d+)$")
    if not digits or #digits > 5 or tonumber(digits) < 1 or tonumber(digits) > 65535 then
      return nil, ("the URL's port is not a number from 1 to 65535: %s"):format(port_text)
    end
    port = tonumber(digits)
  end
  host = host:lower()
  if host == "" then
    return nil, "the URL has no host"
  end
  if host:find("%%") then
    return nil, "the URL's host is percent-encoded: write it plainly"
  end
  local ip, literal
  if authority:sub(1, 1) == "[" then
    ip = M.ipv6(host)
    if not ip then
      return nil, ("the URL's IPv6 address is not valid: [%s]"):format(host)
    end
    literal = "[" .. M.format(ip) .. "]"
  else
    if not host:match("^[%w%-%._]+$") then
      return nil, ("the URL's host holds characters a host name has not: %s"):format(host)
    end
    host = host:gsub("%.$", "")
    if host == "" or host:find("..", 1, true) or host:sub(1, 1) == "." then
      return nil, "the URL's host is not a valid name"
    end
    ip = M.ipv4(host)
    if ip then
      literal = M.format(ip)
    elseif H.numeric_labels(host) then
      return nil, ("the URL's host looks like an IPv4 address but is not a valid one: %s"):format(host)
    end
  end
  local shown_host = literal or host
  local default_port = (scheme == "https" and port == 443) or (scheme == "http" and port == 80)
  return {
    scheme = scheme,
    host = host,
    port = port,
    path = path,
    ip = ip,
    url = scheme .. "://" .. shown_host .. (default_port and "" or (":" .. port)) .. path,
  }
end

-- Every label is a number (decimal, 0x-hex): the C library would read it as an
-- IPv4 address, which it is not (too many parts, a part too large).
function H.numeric_labels(host)
  for label in (host .. "."):gmatch("([^.]*)%.") do
    if not (label:match("^%d+$") or label:match("^0[xX]%x*$")) then
      return false
    end
  end
  return true
end

--- A URL given relative to `base` (a Location header) made absolute.
---@param base flemma.address.Url
---@param ref string
---@return string
function M.join(base, ref)
  ref = vim.trim(ref)
  if ref:match("^%a[%w+.-]*:") then
    return ref
  end
  local host = base.ip and (#base.ip == 16 and ("[" .. M.format(base.ip) .. "]") or M.format(base.ip)) or base.host
  local origin = base.scheme .. "://" .. host .. ":" .. base.port
  if ref:sub(1, 2) == "//" then
    return base.scheme .. ":" .. ref
  end
  if ref:sub(1, 1) == "/" then
    return origin .. ref
  end
  local path = base.path:gsub("[?#].*$", "")
  if ref == "" then
    return origin .. base.path
  end
  if ref:sub(1, 1) == "?" then
    return origin .. path .. ref
  end
  return origin .. path:gsub("[^/]*$", "") .. ref
end

--- Whether a host name is this machine's by its name alone (RFC 6761: localhost and
--- *.localhost), refused before any lookup.
---@param host string lower-case, without a trailing dot
---@return boolean
function M.is_localhost_name(host)
  return host == "localhost" or host:sub(-10) == ".localhost"
end

--- Checks where a parsed URL would connect: an IP literal is classified at once; a
--- name is resolved (libuv's getaddrinfo, off the main loop) and every address it
--- gives is classified: one refused address refuses the URL. `allowed(host, port)`
--- (optional) exempts an exact host and port the user named in setup.
--- cb(addrs, nil) with the addresses to connect to (text, at least one), or
--- cb(nil, why), on the main loop.
---@param u flemma.address.Url
---@param allowed? fun(host: string, port: integer): boolean
---@param cb fun(addrs: string[]|nil, why: string|nil)
function M.check(u, allowed, cb)
  local exempt = allowed ~= nil and allowed(u.host, u.port)
  if u.ip then
    local why = (#u.ip == 4 and M.classify_v4(u.ip) or (#u.ip == 16 and M.classify_v6(u.ip)))
    if why and not exempt then
      return cb(nil, ("%s is %s: fetch never reaches it"):format(M.format(u.ip), why))
    end
    return cb({ M.format(u.ip) }, nil)
  end
  if M.is_localhost_name(u.host) and not exempt then
    return cb(nil, ("%s is loopback (this machine): fetch never reaches it"):format(u.host))
  end
  vim.uv.getaddrinfo(u.host, nil, { socktype = "stream" }, function(err, res)
    vim.schedule(function()
      if err or type(res) ~= "table" or #res == 0 then
        return cb(nil, ("the host %s could not be resolved%s"):format(u.host, err and (": " .. err) or ""))
      end
      local addrs, seen = {}, {}
      for _, r in ipairs(res) do
        local why = M.classify(r.addr)
        if why and not exempt then
          return cb(nil, ("%s resolves to %s, which is %s: fetch never reaches it"):format(u.host, r.addr, why))
        end
        if not seen[r.addr] then
          seen[r.addr] = true
          addrs[#addrs + 1] = r.addr
        end
      end
      cb(addrs, nil)
    end)
  end)
end

return M
