--- Small helpers shared by every module: errors, notifications, safe callbacks.
local M = {}
local H = {}

local PREFIX = "(flemma) "

--- Raises an error meant for the user: no file and line noise.
---@param msg string
function M.error(msg)
  error(PREFIX .. msg, 0)
end

-- ---------------------------------------------------------------------------
-- Redaction: secrets never reach a message, a notification, a diagnostic or a log
-- line. M.redact is the one function doing it; M.notify and the log writer apply
-- it, and so does every place that turns a provider's answer into text the user
-- sees (errors, statuses, diagnostics).
-- ---------------------------------------------------------------------------

--- Shortest value M.add_secret keeps (a shorter one would blank ordinary words).
M.SECRET_MIN = 4

---@type table<string, true> every form of every secret value registered
local secret_forms = {}
---@type table<string, true> the values registered, as given
local secret_values = {}
---@type string[]|nil the forms, longest first (rebuilt after a change)
local secret_sorted = nil

--- Registers a secret value (a resolved API key or token) so that M.redact removes it,
--- in the form it has and in the forms a server echoing it may give it (JSON-escaped,
--- percent-encoded), until Neovim exits.
---@param value string
function M.add_secret(value)
  if type(value) ~= "string" or #value < M.SECRET_MIN or secret_forms[value] then
    return
  end
  secret_forms[value] = true
  secret_values[value] = true
  local ok, json = pcall(vim.json.encode, value)
  if ok and type(json) == "string" then
    secret_forms[json:sub(2, -2)] = true
  end
  secret_forms[(value:gsub("[^%w%-%._~]", function(c)
    return ("%%%02X"):format(c:byte())
  end))] = true
  secret_sorted = nil
end

-- The environment's secret-looking variables ({ name, value } pairs), kept while the
-- process's environment is the same: H.env_same() compares the `environ` array (the
-- address of every "NAME=value" string; setenv and unsetenv change it, and glibc
-- never frees a string it set) with its copy from the last read. Where `environ`
-- cannot be read through the FFI, the environment is read at every call.
H.env_pairs, H.env_copy, H.env_count = nil, nil, -1
H.ffi_ok, H.ffi = pcall(require, "ffi")
if H.ffi_ok then
  H.ffi_ok = pcall(H.ffi.cdef, "extern char **environ;")
  H.ffi_ok = H.ffi_ok and pcall(function()
    return H.ffi.C.environ
  end)
end

function H.env_same()
  if not H.ffi_ok then
    return false
  end
  local env, copy = H.ffi.C.environ, H.env_copy
  local n = 0
  while env[n] ~= nil do
    n = n + 1
  end
  if n ~= H.env_count then
    H.env_count, H.env_copy = n, H.ffi.new("char *[?]", n + 1)
    H.ffi.copy(H.env_copy, env, H.ffi.sizeof("char *") * n)
    return false
  end
  for i = 0, n - 1 do
    if env[i] ~= copy[i] then
      H.ffi.copy(copy, env, H.ffi.sizeof("char *") * n)
      return false
    end
  end
  return true
end

-- Values of the environment that look like secrets (names ending in _API_KEY,
-- _TOKEN, _SECRET, _ACCESS_KEY; 8 bytes or more), but those of the names in `except`.
local function env_secrets(out, except)
  if not (H.env_pairs and H.env_same()) then
    local pairs_ = {}
    for name, value in pairs(vim.uv.os_environ()) do
      local upper = name:upper()
      if
        type(value) == "string"
        and #value >= 8
        and (
          upper:match("_API_KEY$")
          or upper:match("_TOKEN$")
          or upper:match("_SECRET$")
          or upper:match("_ACCESS_KEY$")
        )
      then
        pairs_[#pairs_ + 1] = { name, value }
      end
    end
    H.env_pairs = pairs_
  end
  for _, p in ipairs(H.env_pairs) do
    if not (except and except[p[1]]) then
      out[#out + 1] = p[2]
    end
  end
end

local function replace_all(text, value)
  local from = 1
  local parts = nil
  while true do
    local s, e = text:find(value, from, true)
    if not s then
      break
    end
    parts = parts or {}
    parts[#parts + 1] = text:sub(from, s - 1)
    parts[#parts + 1] = "[redacted]"
    from = e + 1
  end
  if not parts then
    return text
  end
  parts[#parts + 1] = text:sub(from)
  return table.concat(parts)
end

--- The values M.redact removes (but the header rule), longest first.
---@param env_except? table<string, true>
---@return string[]
local function redact_values(env_except)
  if not secret_sorted then
    secret_sorted = vim.tbl_keys(secret_forms)
    table.sort(secret_sorted, function(a, b)
      return #a > #b
    end)
  end
  local values = {}
  env_secrets(values, env_except)
  vim.list_extend(values, secret_sorted)
  table.sort(values, function(a, b)
    return #a > #b
  end)
  return values
end

--- The literal values util.redact removes, longest first (then its header rules
--- run): what a native redaction of a file is given (process.redact_file).
---@param env_except? table<string, true>
---@return string[]
function M.redact_values(env_except)
  return redact_values(env_except)
end

--- A text without secrets: each registered secret (M.add_secret: every key Flemma
--- resolved) and each value of a secret-looking environment variable, longest first,
--- becomes `[redacted]`, as does the value of an authentication header
--- (`Authorization:`, `x-api-key:`, `x-goog-api-key:`, also in curl's config syntax).
--- `env_except`: names of environment variables whose values stay (a tool's output
--- keeps what `tools.env_passthrough` gave it); a registered key is removed anyway.
---@param text string
---@param env_except? table<string, true>
---@return string
function M.redact(text, env_except)
  if type(text) ~= "string" then
    return text
  end
  for _, value in ipairs(redact_values(env_except)) do
    text = replace_all(text, value)
  end
  -- The header rules only where a header name is (a plain search of the lowercased
  -- text, fast): their patterns cost ~25 ms per MiB of text that holds none.
  local lower = text:lower()
  if
    not (
      lower:find("x-api-key", 1, true)
      or lower:find("authorization", 1, true)
      or lower:find("x-goog-api-key", 1, true)
    )
  then
    return text
  end
  local function header(name)
    -- `name: value` and curl config `header = "name: value"`
    text = text:gsub('([Hh][Ee][Aa][Dd][Ee][Rr]%s*=%s*"%s*' .. name .. '%s*:%s*)[^"\n]*', "%1[redacted]")
    text = text:gsub("(" .. name .. '%s*:%s*)[^\r\n"]*', "%1[redacted]")
  end
  header("[Xx]%-[Aa][Pp][Ii]%-[Kk][Ee][Yy]")
  header("[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn]")
  header("[Xx]%-[Gg][Oo][Oo][Gg]%-[Aa][Pp][Ii]%-[Kk][Ee][Yy]")
  return text
end

--- A redactor of a stream given in pieces: a secret split between two pieces is
--- removed all the same. `push(piece)` returns the redacted text that is safe to
--- show now; what could be the start of a secret (at most the longest secret's
--- length less one byte, or a whole secret crossing that point) is held back until
--- the next piece, and `flush()` returns the rest. Work is linear in the pieces'
--- length times the number of secrets.
---@param env_except? table<string, true>
---@return { push: fun(piece: string): string, flush: fun(): string }
function M.redactor(env_except)
  local carry = ""
  local r = {}
  function r.push(piece)
    local s = carry .. (piece or "")
    local values = redact_values(env_except)
    local longest = values[1] and #values[1] or 0
    local cut = #s - math.max(longest - 1, 0)
    -- A secret crossing the cut moves the cut before it (until none does).
    local moved = true
    while moved and cut > 0 do
      moved = false
      for _, v in ipairs(values) do
        local from = math.max(1, cut - #v + 2)
        while true do
          local a, b = s:find(v, from, true)
          if not a or a > cut then
            break
          end
          if b > cut then
            cut = a - 1
            moved = true
            break
          end
          from = a + 1
        end
      end
    end
    if cut <= 0 then
      carry = s
      return ""
    end
    carry = s:sub(cut + 1)
    return M.redact(s:sub(1, cut), env_except)
  end
  function r.flush()
    local rest = carry
    carry = ""
    return M.redact(rest, env_except)
  end
  return r
end

--- The secret values registered (M.add_secret) this session, as given: what a tool's
--- environment must not carry.
---@return string[]
function M.secret_values()
  return vim.tbl_keys(secret_values)
end

--- Notifies the user with the plugin's prefix, secrets redacted (M.redact). Safe to
--- call from fast callbacks.
---
--- With Neovim's own vim.notify (messages in the command line, where a text longer
--- than `v:echospace` or of several lines waits for <Enter>), what is shown is one
--- line that fits, cut with "…", and the whole text goes first into the message
--- history (`:messages`). A vim.notify of the user's (a notification plugin, which
--- shows long texts without waiting) receives the whole text.
---@param msg string
---@param level? integer vim.log.levels.*
function M.notify(msg, level)
  level = level or vim.log.levels.INFO
  msg = M.redact(type(msg) == "string" and msg or tostring(msg))
  if vim.in_fast_event() then
    vim.schedule(function()
      H.show(PREFIX .. msg, level)
    end)
  else
    H.show(PREFIX .. msg, level)
  end
end

--- Whether vim.notify is Neovim's own (its runtime's code, whose debug information
--- is stripped in some builds), not a function of the user's or a plugin's.
function H.builtin_notify()
  local info = debug.getinfo(vim.notify, "S")
  local src = info and info.source or ""
  return src == "?" or src == "=[C]" or src:sub(1, 5) == "@vim/" or src:find("/runtime/lua/vim/", 1, true) ~= nil
end

--- The columns a message line may use without waiting for <Enter>.
function H.room()
  local room = tonumber(vim.v.echospace) or 0
  if room <= 0 then
    room = vim.o.columns - 12
  end
  return math.max(20, room - 1)
end

--- The first line of `text` cut to `room` display columns, ending in "…" when cut.
---@param text string
---@param room integer
---@return string
function M.fit(text, room)
  local first = text:match("^[^\n]*")
  if first == text and vim.fn.strdisplaywidth(text) <= room then
    return text
  end
  first = first:gsub("%s+$", "")
  local keep = room - 1
  if vim.fn.strdisplaywidth(first) > keep then
    -- Whole characters (never half of a multibyte one), by display width.
    local n = vim.fn.strchars(first)
    local lo, hi = 0, n
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if vim.fn.strdisplaywidth(vim.fn.strcharpart(first, 0, mid)) <= keep then
        lo = mid
      else
        hi = mid - 1
      end
    end
    first = vim.fn.strcharpart(first, 0, lo):gsub("%s+$", "")
  end
  return first .. "…"
end

H.pending = {}

function H.show(text, level)
  if not H.builtin_notify() then
    return vim.notify(text, level)
  end
  local short = M.fit(text, H.room())
  if short == text then
    return vim.notify(text, level)
  end
  if vim.fn.mode():sub(1, 1) == "c" then
    -- While a command line is being typed: after it (the lines would cover it).
    H.pending[#H.pending + 1] = { text, level }
    if #H.pending == 1 then
      vim.api.nvim_create_autocmd("CmdlineLeave", {
        once = true,
        callback = function()
          vim.schedule(function()
            local queued = H.pending
            H.pending = {}
            for _, q in ipairs(queued) do
              H.show(q[1], q[2])
            end
          end)
        end,
      })
    end
    return
  end
  local hl = level >= vim.log.levels.ERROR and "ErrorMsg" or level == vim.log.levels.WARN and "WarningMsg" or "None"
  -- The whole text (its lines joined) into the message history with :echomsg, which
  -- keeps it whole there and shows it cut to one line ('shortmess' "T")...
  local sm = vim.go.shortmess
  if not sm:find("T", 1, true) then
    pcall(vim.cmd, "noautocmd set shortmess+=T")
  end
  local ok, err =
    pcall(vim.cmd, ("echohl %s | echomsg %s | echohl None"):format(hl, vim.fn.string((text:gsub("\n", " · ")))))
  if vim.go.shortmess ~= sm then
    pcall(vim.cmd, "noautocmd let &shortmess = " .. vim.fn.string(sm))
  end
  if not ok then
    return vim.notify(text .. " (" .. tostring(err) .. ")", level)
  end
  -- ...then over that line the short one, as Neovim's vim.notify shows a message
  -- (an error through nvim_err_writeln would start a second line and wait).
  vim.api.nvim_echo({ { short, hl } }, true, {})
end

function M.warn(msg)
  M.notify(msg, vim.log.levels.WARN)
end

--- Whether Neovim has a tree-sitter parser for `lang` (0.10 raises without one,
--- 0.12 returns nil and a reason).
---@param lang string
---@return boolean
function M.has_parser(lang)
  local ok, res, why = pcall(vim.treesitter.language.add, lang)
  return ok and res ~= false and not (res == nil and why ~= nil)
end

--- Runs an Ex command that opens a file (`edit path`). Without the markdown parser,
--- Neovim 0.12's own markdown ftplugin raises after the file is open (it starts
--- tree-sitter unconditionally): that error is dropped and the buffer gets Vim's
--- markdown syntax instead; any other error is raised again.
---@param cmd string
function M.open(cmd)
  local ok, err = pcall(vim.cmd, cmd)
  if ok then
    return
  end
  local msg = tostring(err)
  if
    msg:find("markdown", 1, true)
    and (msg:find("Parser could not be created", 1, true) or msg:find("no parser", 1, true))
    and not M.has_parser("markdown")
  then
    vim.bo.syntax = "markdown"
    return
  end
  error(err, 0)
end

--- Strips the plugin prefix from an error value, for messages that get wrapped again.
---@param err any
---@return string
function M.message(err)
  local s = type(err) == "string" and err or vim.inspect(err)
  if s:sub(1, #PREFIX) == PREFIX then
    s = s:sub(#PREFIX + 1)
  end
  return s
end

--- Wraps fn so that an error inside it (e.g. in an event-loop callback) is reported
--- with a traceback instead of breaking the editor.
---@param fn function
---@param what string what was running, for the message
---@return function
function M.safe(fn, what)
  return function(...)
    local ok, err = xpcall(fn, debug.traceback, ...)
    if not ok then
      M.notify(what .. " failed: " .. tostring(err), vim.log.levels.ERROR)
    end
    return ok
  end
end

--- How a buffer is named in messages: its file relative to the cwd (or ~), else
--- "buffer N".
---@param bufnr integer
---@return string
function M.buffer_name(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  return name ~= "" and vim.fn.fnamemodify(name, ":~:.") or ("buffer " .. bufnr)
end

--- Whether vim.ui.select can ask someone: a UI is attached, or a plugin (or a
--- spec) replaced the built-in one, which would block on inputlist() without a UI.
---@return boolean
function M.can_ask()
  if #vim.api.nvim_list_uis() > 0 then
    return true
  end
  local info = debug.getinfo(vim.ui.select, "S")
  return not (info and info.source and info.source:match("[/\\]vim[/\\]ui%.lua$"))
end

--- The plugin's root directory (the folder holding lua/, plugin/ and build/).
---@return string
function M.root()
  local src = debug.getinfo(1, "S").source
  src = src:sub(1, 1) == "@" and src:sub(2) or src
  local dir = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(src, ":p"))) -- <root>/lua/flemma/core
  return vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(dir)))
end

--- A shallow copy of a table.
---@generic T: table
---@param t T
---@return T
function M.copy(t)
  local c = {}
  for k, v in pairs(t) do
    c[k] = v
  end
  return c
end

local sources_cache = {}

--- Lua files of this plugin as the JSON text an isolated interpreter loads
--- (`{ [module] = source }`), read once per set of modules.
---@param modules table<string, string> module name -> path below lua/flemma/
---@return string
function M.module_sources_json(modules)
  local names = vim.tbl_keys(modules)
  table.sort(names)
  local key = table.concat(names, "\0")
  if not sources_cache[key] then
    local dir = M.root() .. "/lua/flemma/"
    local sources = {}
    for name, file in pairs(modules) do
      local f = assert(io.open(dir .. file, "rb"))
      sources[name] = f:read("*a")
      f:close()
    end
    sources_cache[key] = vim.json.encode(sources)
  end
  return sources_cache[key]
end

return M
