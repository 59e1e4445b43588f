--- MCP servers as Flemma tools (:help flemma-mcp). Each configured server starts
--- lazily, the first time a chat buffer needs its tools, as a flemma.mcp.client; its
--- tools are registered into the ordinary tool registry as `server:tool` (approval,
--- presets, frontmatter selection, previews, truncation all apply; MCP tools are
--- never approved by default). A server that crashes is restarted once; after that its
--- tools answer with an error naming the server and its last stderr lines.
local client = require("flemma.tools.mcp.client")
local consent = require("flemma.policy.consent")
local log = require("flemma.core.log")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.mcp.Server
---@field name string
---@field client flemma.mcp.Client
---@field registered table<string, true> tool names in the registry
---@field restarts integer
---@field waiting fun(err?: string)[] callbacks for the end of a start

H.servers = {} ---@type table<string, flemma.mcp.Server>
H.project = {} -- trusted servers of project .mcp.json files: name -> entry
H.cfg = nil

function H.config()
  return H.cfg or require("flemma.core.config").get().mcp or {}
end

--- Whether a tool name matches a pattern ("name:*", "name:tool", "*" anywhere).
function H.matches(pattern, name)
  local lua = "^" .. pattern:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
  return name:match(lua) ~= nil
end

function H.selected(full)
  local cfg = H.config()
  if type(cfg.include) == "table" then
    local any = false
    for _, p in ipairs(cfg.include) do
      any = any or H.matches(p, full)
    end
    if not any then
      return false
    end
  end
  for _, p in ipairs(type(cfg.exclude) == "table" and cfg.exclude or {}) do
    if H.matches(p, full) then
      return false
    end
  end
  return true
end

--- The preview of an MCP tool call: its annotations, then the generic summary.
function H.preview(tool)
  local ann = type(tool.annotations) == "table" and tool.annotations or {}
  local marks = {}
  if ann.readOnlyHint == true then
    marks[#marks + 1] = "read-only"
  end
  if ann.destructiveHint == true and ann.readOnlyHint ~= true then
    marks[#marks + 1] = "destructive"
  end
  return function(input)
    local text = require("flemma.tools.preview").generic(input)
    if #marks > 0 then
      text = ("[%s] %s"):format(table.concat(marks, ", "), text)
    end
    return text
  end
end

-- Largest image or audio a result may save (bytes of base64).
H.MAX_MEDIA = 16 * 1024 * 1024
H.EXT = {
  ["image/png"] = "png",
  ["image/jpeg"] = "jpg",
  ["image/gif"] = "gif",
  ["image/webp"] = "webp",
  ["audio/wav"] = "wav",
  ["audio/x-wav"] = "wav",
  ["audio/mpeg"] = "mp3",
  ["audio/ogg"] = "ogg",
  ["audio/flac"] = "flac",
}

--- An image or audio block of a result: saved into Flemma's media directory
--- (flemma.files.save_media, named by its content) and a line naming it. An image
--- whose bytes are a png, jpeg, gif or webp is also added to `attachments`: the
--- result carries it to the model as a `read` of an image does. Audio is saved and
--- named only (no provider kind takes it in a tool result).
function H.media(server, c, attachments, digests)
  local mime = type(c.mimeType) == "string" and c.mimeType:lower() or "application/octet-stream"
  if type(c.data) ~= "string" or #c.data > H.MAX_MEDIA then
    return ("[%s from %s (%s) left out: missing or over %s]"):format(c.type, server, mime, "16 MiB")
  end
  local ok, bytes = pcall(vim.base64.decode, c.data)
  if not ok then
    return ("[%s from %s (%s) left out: not valid base64]"):format(c.type, server, mime)
  end
  -- The type its bytes have, whatever the server said.
  local found = c.type == "image" and require("flemma.tools.builtin.fs").media_type(bytes:sub(1, 16)) or nil
  if found == "application/pdf" then
    found = nil
  end
  local ext = H.EXT[found or mime] or "bin"
  local path, err = require("flemma.core.files").save_media(c.data, bytes, ext, digests and digests[c.data])
  if not path then
    return ("[%s from %s (%s) left out: %s]"):format(c.type, server, mime, tostring(err))
  end
  local max = require("flemma.core.config").get().attachments.max_bytes
  if found and #bytes > max then
    return ("[image %s, %d bytes, saved to %s; not shown to the model: over attachments.max_bytes (%d bytes)]"):format(
      found,
      #bytes,
      path,
      max
    )
  elseif found then
    attachments[#attachments + 1] = { path = path, mime = found }
    return ("[image %s, %d bytes, attached; saved as %s]"):format(found, #bytes, path)
  end
  return ("[%s %s, %d bytes, saved to %s%s]"):format(
    c.type,
    mime,
    #bytes,
    path,
    c.type == "image" and " (not a png, jpeg, gif or webp: not shown to the model)" or ""
  )
end

--- A resource link: its name, URI, type and description (no content is fetched).
function H.resource_link(c)
  local name = type(c.name) == "string" and c.name or type(c.title) == "string" and c.title or nil
  local line = ("[resource link] %s%s"):format(name and (name .. ": ") or "", tostring(c.uri))
  if type(c.mimeType) == "string" then
    line = line .. " (" .. c.mimeType .. ")"
  end
  if type(c.description) == "string" and c.description ~= "" then
    line = line .. " - " .. c.description
  end
  return line
end

--- The tool result of a tools/call result. `digests` (base64 data -> its sha256)
--- names media whose digest was computed already (M.result_async).
---@param server string
---@param res any
---@param digests? table<string, string>
---@param later? { files: string[] } when given, a long text's file is written as it is and
--- named here, to be redacted (core/process.redact_file) before the result is handed on
function M.result(server, res, digests, later)
  if type(res) ~= "table" then
    return { success = false, error = ("server `%s` answered tools/call with %s"):format(server, type(res)) }
  end
  local parts, attachments = {}, {}
  for _, c in ipairs(type(res.content) == "table" and res.content or {}) do
    if type(c) == "table" then
      if c.type == "text" and type(c.text) == "string" then
        parts[#parts + 1] = c.text
      elseif c.type == "image" or c.type == "audio" then
        parts[#parts + 1] = H.media(server, c, attachments, digests)
      elseif c.type == "resource_link" then
        parts[#parts + 1] = H.resource_link(c)
      elseif c.type == "resource" and type(c.resource) == "table" then
        local r = c.resource
        if type(r.text) == "string" then
          parts[#parts + 1] = r.text
        else
          parts[#parts + 1] = ("resource: %s (%s)"):format(tostring(r.uri), tostring(r.mimeType))
        end
      end
    end
  end
  if res.structuredContent ~= nil and res.structuredContent ~= vim.NIL then
    local same = false
    for _, p in ipairs(parts) do
      local ok, v = pcall(vim.json.decode, p)
      same = same or (ok and vim.deep_equal(v, res.structuredContent))
    end
    if not same then
      parts[#parts + 1] = vim.json.encode(res.structuredContent)
    end
  end
  local text = H.bounded(server, table.concat(parts, "\n"), later)
  if res.isError == true then
    return { success = false, error = text ~= "" and text or ("server `%s` reported an error"):format(server) }
  end
  return { success = true, output = text, attachments = #attachments > 0 and attachments or nil }
end

-- Characters of a server's progress message shown under the spinner.
H.MAX_PROGRESS = 200

--- The line shown under a call's spinner for a server's notifications/progress: one
--- line (control characters as spaces), at most H.MAX_PROGRESS characters, redacted
--- as a result is. The server's message is its own text of any size (a 16 MiB one
--- was drawn as virtual text at every spinner tick, a key it held shown as it was).
function H.progress_line(p)
  local function num(v)
    return (type(v) == "number" or type(v) == "string") and tostring(v):sub(1, 20) or "?"
  end
  local msg = type(p.message) == "string" and p.message or ""
  if #msg > H.MAX_PROGRESS * 4 then
    msg = msg:sub(1, H.MAX_PROGRESS * 4)
  end
  msg = vim.fn.strcharpart(util.redact((msg:gsub("%c", " "))), 0, H.MAX_PROGRESS)
  return ("progress %s%s%s"):format(
    num(p.progress),
    p.total ~= nil and ("/" .. num(p.total)) or "",
    msg ~= "" and (" " .. msg) or ""
  )
end

--- M.result, `cb(result)` in a later turn when the result holds images or audio: the
--- sha256 naming each (flemma.files.save_media) is computed on a libuv thread
--- (vim.fn.sha256 of a 5 MB image held the main loop about 20 ms, twice); or a text
--- longer than `tools.truncate`: its whole text's file is redacted a piece per turn
--- (util.redact of 10 MB held it 12 ms) before the result is handed on.
---@param server string
---@param res any
---@param cb fun(result: table)
function M.result_async(server, res, cb)
  local datas, seen = {}, {}
  for _, c in ipairs(type(res) == "table" and type(res.content) == "table" and res.content or {}) do
    if
      type(c) == "table"
      and (c.type == "image" or c.type == "audio")
      and type(c.data) == "string"
      and #c.data <= H.MAX_MEDIA
      and not seen[c.data]
    then
      seen[c.data] = true
      datas[#datas + 1] = c.data
    end
  end
  local function finish(digests)
    local later = { files = {} }
    local result = M.result(server, res, digests, later)
    local left = #later.files
    if left == 0 then
      return cb(result)
    end
    local function one_done()
      left = left - 1
      if left == 0 then
        cb(result)
      end
    end
    for _, f in ipairs(later.files) do
      H.write_async(f.path, f.text, function(ok)
        if not ok then
          os.remove(f.path)
          return one_done()
        end
        require("flemma.core.process").redact_file(f.path, one_done)
      end)
    end
  end
  if #datas == 0 then
    return finish(nil)
  end
  local digests, left = {}, #datas
  for _, data in ipairs(datas) do
    require("flemma.core.sha256").hex_async(data, function(hex)
      digests[data] = hex
      left = left - 1
      if left == 0 then
        finish(digests)
      end
    end)
  end
end

-- Writes a new private file (0600) on libuv's thread pool; done(ok) on the main loop.
function H.write_async(path, text, done)
  local function finish(ok)
    vim.schedule(function()
      done(ok)
    end)
  end
  vim.uv.fs_open(path, "wx", 384, function(err, fd)
    if err or not fd then
      return finish(false)
    end
    vim.uv.fs_write(fd, text, 0, function(werr)
      vim.uv.fs_close(fd, function()
        finish(not werr)
      end)
    end)
  end)
end

--- A result's text within `tools.truncate` (as every tool's output): a longer one
--- keeps its head after a note naming a private file (0600) that holds the whole
--- text, redacted as the result is. A server's 16 MiB answer never goes whole into
--- the chat, nor into every later request.
function H.bounded(server, text, later)
  local t = require("flemma.core.config").get().tools.truncate or {}
  local cut = require("flemma.core.truncate").truncate_head(text, { max_lines = t.max_lines, max_bytes = t.max_bytes })
  if not cut.truncated then
    return text
  end
  local size = require("flemma.core.truncate").format_size
  local path = vim.fn.tempname() .. "-mcp-result.txt"
  local saved = false
  if later then
    -- Written (libuv's thread pool) and redacted by M.result_async.
    later.files[#later.files + 1] = { path = path, text = text }
    saved = true
  else
    local fd = vim.uv.fs_open(path, "wx", 384) -- 0600
    if fd then
      saved = vim.uv.fs_write(fd, util.redact(text), 0) ~= nil
      vim.uv.fs_close(fd)
      if not saved then
        os.remove(path)
      end
    end
  end
  return ("[Result of %s truncated: showing the first %d of %d lines (%s of %s).%s]\n%s"):format(
    server,
    cut.output_lines,
    cut.total_lines,
    size(cut.output_bytes),
    size(cut.total_bytes),
    saved and (" Full text: " .. path) or "",
    cut.content
  )
end

--- Calls fn(err) once the server is ready (starting or restarting it as needed).
function H.when_ready(s, fn)
  local c = s.client
  if c.state == "ready" and c:running() then
    return fn(nil)
  end
  if c.state == "starting" then
    s.waiting[#s.waiting + 1] = fn
    return
  end
  if s.gave_up then
    return fn(H.down(s))
  end
  s.waiting[#s.waiting + 1] = fn
  H.start(s)
end

function H.down(s)
  return ("MCP server `%s` is not running: %s"):format(s.name, s.client.last_error or "stopped")
end

function H.definition(s, tool)
  local full = s.name .. ":" .. tool.name
  local schema = type(tool.inputSchema) == "table" and vim.deepcopy(tool.inputSchema) or {}
  if schema.type ~= "object" then
    schema = { type = "object", properties = vim.empty_dict() }
  end
  local description = type(tool.description) == "string" and tool.description ~= "" and tool.description
    or (type(tool.title) == "string" and tool.title ~= "" and tool.title)
    or ("MCP tool " .. full)
  return {
    name = full,
    description = description,
    input_schema = schema,
    async = true,
    mcp = { server = s.name, tool = tool.name, annotations = tool.annotations },
    format_preview = H.preview(tool),
    execute = function(input, ctx, callback)
      local cancel, cancelled = nil, false
      H.when_ready(s, function(err)
        if cancelled then
          return
        end
        if err then
          return callback({ success = false, error = err })
        end
        local listener = require("flemma.tools.context").progress_listener(ctx)
        cancel = s.client:request(
          "tools/call",
          { name = tool.name, arguments = next(input) and input or vim.empty_dict() },
          function(res, rerr)
            if rerr then
              return callback({ success = false, error = ("MCP server `%s`: %s"):format(s.name, rerr) })
            end
            M.result_async(s.name, res, function(result)
              if not cancelled then
                callback(result)
              end
            end)
          end,
          {
            timeout = ctx.timeout,
            on_progress = function(p)
              if listener then
                listener({ last_line = H.progress_line(p) })
              end
            end,
          }
        )
      end)
      return function()
        cancelled = true
        if cancel then
          cancel()
        end
      end
    end,
  }
end

--- Brings the registry in line with the server's tools.
function H.sync(s)
  local tools = require("flemma.tools")
  local wanted = {}
  for _, t in ipairs(s.client.tools) do
    local full = s.name .. ":" .. t.name
    local wire = s.name .. "__" .. t.name
    if not wire:match("^[%w_%-]+$") or #wire > 64 then
      log.warn(
        "mcp %s: tool %q left out: providers take names of at most 64 letters, digits, `_` and `-`",
        s.name,
        t.name
      )
    elseif H.selected(full) then
      local ok, err = pcall(tools.register, H.definition(s, t))
      if ok then
        wanted[full] = true
      else
        log.warn("mcp %s: tool %q left out: %s", s.name, t.name, util.message(err))
      end
    end
  end
  for name in pairs(s.registered) do
    if not wanted[name] then
      tools.unregister(name)
    end
  end
  s.registered = wanted
end

function H.start(s, on_done)
  s.client:start(function(err)
    if on_done then
      on_done(err)
    end
    local waiting = s.waiting
    s.waiting = {}
    for _, fn in ipairs(waiting) do
      fn(err and H.down(s) or nil)
    end
  end)
end

function H.on_exit(c)
  local s = H.servers[c.name]
  if not s or s.client ~= c then
    return
  end
  if s.restarts < 1 then
    s.restarts = s.restarts + 1
    log.warn("mcp %s: crashed (%s); restarting it once", s.name, c.last_error or "?")
    H.start(s)
  else
    s.gave_up = true
    log.warn("mcp %s: crashed again; its tools now answer with an error", s.name)
  end
end

function H.server(name)
  local s = H.servers[name]
  if s then
    return s
  end
  local spec = H.spec(name)
  if not spec then
    return nil
  end
  s = { name = name, registered = {}, restarts = 0, waiting = {} }
  s.client = client.new(name, spec, {
    timeout = H.config().timeout or 60,
    on_tools = function()
      H.sync(s)
    end,
    on_exit = H.on_exit,
  })
  H.servers[name] = s
  return s
end

--- The configured server names, sorted.
---@return string[]
function M.names()
  local set = {}
  for name in pairs(H.config().servers or {}) do
    set[name] = true
  end
  for name in pairs(H.project) do
    set[name] = true
  end
  local names = vim.tbl_keys(set)
  table.sort(names)
  return names
end

--- The entry of a server: the configuration's, else a trusted project server's.
function H.spec(name)
  return (H.config().servers or {})[name] or H.project[name]
end

--- Starts the servers not started yet; their tools load as an async tool source (a
--- send waits for them, at most `mcp.timeout` seconds). Each server starts in a
--- turn of the loop of its own (its spawn is the native worker's), so that many
--- servers never hold the loop long.
---@param names? string[] default: every configured server
function M.start(names)
  for _, name in ipairs(names or M.names()) do
    local s = H.server(name)
    if s and s.client.state == "stopped" and not s.source_started then
      s.source_started = true
      require("flemma.tools").register({
        timeout = (H.config().timeout or 60) + 1,
        resolve = function(_, done)
          local function finish(err)
            done(err and ("MCP server `%s`: %s"):format(name, err) or nil)
          end
          vim.schedule(function()
            if H.servers[name] ~= s then
              return done(nil) -- setup() replaced it meanwhile
            elseif s.client.state == "starting" then
              -- Started meanwhile (a call of one of its tools, mcp:restart): its
              -- error names the server.
              s.waiting[#s.waiting + 1] = done
            elseif s.client.state == "stopped" then
              H.start(s, finish)
            else
              finish(s.client.state == "failed" and (s.client.last_error or "failed") or nil)
            end
          end)
        end,
      })
    end
  end
end

--- Whether a chat buffer needs MCP tools: servers are configured and its frontmatter
--- selects no tools or some `server:tool` (or `$mcp`).
---@param bufnr integer
---@return boolean
function M.needed(bufnr)
  if next(H.config().servers or {}) == nil and next(H.project) == nil then
    return false
  end
  local ok, fm = pcall(require, "flemma.chat.frontmatter")
  if not ok or type(fm) ~= "table" or type(fm.get) ~= "function" then
    return true
  end
  local got, opts = pcall(fm.get, bufnr)
  if not got or type(opts) ~= "table" or type(opts.tools) ~= "table" then
    return true
  end
  for _, n in ipairs(opts.tools) do
    if type(n) == "string" and (n:find(":", 1, true) or n:sub(1, 4) == "$mcp") then
      return true
    end
  end
  return false
end

--- State of every configured server: { name, state, tools, last_error, restarts, pid
--- (stdio), command (stdio) or url (Streamable HTTP, without user info or query) }.
---@return table[]
function M.status()
  local out = {}
  for _, name in ipairs(M.names()) do
    local s = H.servers[name]
    out[#out + 1] = {
      name = name,
      state = s and s.client.state or "stopped",
      tools = s and vim.tbl_count(s.registered) or 0,
      last_error = s and s.client.last_error or nil,
      restarts = s and s.restarts or 0,
      pid = s and s.client.handle and s.client.handle.pid or nil,
      command = (H.spec(name) or {}).command,
      url = (H.spec(name) or {}).url and client.display_url((H.spec(name) or {}).url) or nil,
      project = H.project[name] ~= nil and not (H.config().servers or {})[name] or nil,
    }
  end
  return out
end

--- The client of a server (for tests and status), or nil.
function M.client(name)
  return H.servers[name] and H.servers[name].client
end

--- Stops every server (their whole process groups).
---@param at_exit? boolean Neovim exits: the sessions' DELETEs are waited for (at most 2 s)
function M.stop_all(at_exit)
  local procs = {}
  for _, s in pairs(H.servers) do
    procs[#procs + 1] = s.client:stop(at_exit)
  end
  if at_exit and #procs > 0 then
    client.wait_all(procs)
  end
end

--- The status as text, one line per server:
--- `name: state, N tools[, pid P | , URL][, restarted Nx][; last error: ...]`.
---@return string
function M.status_text()
  local rows = M.status()
  if #rows == 0 then
    return "no MCP servers configured (mcp.servers)"
  end
  local lines = {}
  for _, r in ipairs(rows) do
    local line = ("%s: %s, %d tool%s"):format(r.name, r.state, r.tools, r.tools == 1 and "" or "s")
    if r.pid then
      line = line .. ", pid " .. r.pid
    end
    if r.url then
      line = line .. ", " .. r.url
    end
    if r.restarts > 0 then
      line = line .. ", restarted " .. r.restarts .. "x"
    end
    if r.last_error then
      line = line .. "; last error: " .. (r.last_error:gsub("\n.*", " ..."))
    end
    lines[#lines + 1] = line
  end
  return table.concat(lines, "\n")
end

--- Stops a server and starts it again (its restart count is reset); cb(err) once it
--- is ready or failed.
---@param name string
---@param cb? fun(err?: string)
function M.restart(name, cb)
  if not H.spec(name) then
    util.error(("mcp:restart: no MCP server `%s` (configured: %s)"):format(name, table.concat(M.names(), ", ")))
  end
  local s = H.server(name)
  s.restarts, s.gave_up = 0, false
  local function go()
    H.start(s, function(err)
      if cb then
        cb(err)
      end
    end)
  end
  if s.client:running() then
    s.client:stop()
    -- Started again once the old process is gone (its exit settles what was pending).
    local timer = vim.uv.new_timer()
    timer:start(
      20,
      20,
      vim.schedule_wrap(function()
        if not s.client:running() and not timer:is_closing() then
          timer:stop()
          timer:close()
          go()
        end
      end)
    )
  elseif s.client.state ~= "starting" then
    go()
  end
end

--- Reads `mcp` from the configuration; chat buffers that need MCP tools start the servers.
---@param config flemma.Config
function M.setup(config)
  M.stop_all()
  local tools = package.loaded["flemma.tools"]
  for _, s in pairs(H.servers) do
    for name in pairs(s.registered) do
      if tools then
        tools.unregister(name)
      end
    end
  end
  H.servers = {}
  H.project = {}
  H.project_files = {}
  H.cfg = config.mcp or {}
  local group = vim.api.nvim_create_augroup("flemma.tools.mcp", { clear = true })
  if next(H.cfg.servers or {}) == nil and not H.cfg.project_config then
    return
  end
  vim.api.nvim_create_autocmd("VimLeavePre", {
    group = group,
    desc = "Flemma: end the sessions of MCP servers over HTTP",
    callback = function()
      M.stop_all(true)
    end,
  })
  local function opened(buf)
    if H.cfg.project_config then
      M.project(buf)
    end
    if M.needed(buf) then
      M.start()
    end
  end
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = "chat",
    desc = "Flemma: start the MCP servers a chat needs",
    callback = function(ev)
      opened(ev.buf)
    end,
  })
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].filetype == "chat" then
      opened(buf)
    end
  end
end

-- Project servers ------------------------------------------------------------------

H.project_files = {} -- .mcp.json real paths read in this session
H.MAX_PROJECT_FILE = 1024 * 1024
M.TRUST_CHOICES = { "Trust it and start it", "Do not start it" }

--- The .mcp.json that applies to a buffer: the nearest one in its directory or above.
---@param bufnr integer
---@return string|nil real path
function M.project_file(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local dir = name ~= "" and vim.fs.dirname(vim.fn.fnamemodify(name, ":p")) or vim.fn.getcwd()
  local found = vim.fs.find(".mcp.json", { upward = true, path = dir, type = "file" })[1]
  return found and vim.uv.fs_realpath(found) or nil
end

--- The servers of a .mcp.json ({ mcpServers = { name = { command, args, env, cwd } } }
--- or { url }), or nil and why not. Relative `cwd` is taken from the file's directory.
--- A url entry naming `bearer_env` or `headers` is left out (one warning): keys come
--- from the user's own configuration only.
---@param path string
---@return table<string, table>|nil
---@return string|nil err
function M.read_project(path)
  local stat = vim.uv.fs_stat(path)
  if not stat or stat.type ~= "file" then
    return nil, "not a regular file"
  end
  if stat.size > H.MAX_PROJECT_FILE then
    return nil, "larger than 1 MiB"
  end
  local f = io.open(path, "rb")
  if not f then
    return nil, "cannot be read"
  end
  local text = f:read("*a")
  f:close()
  local ok, data = pcall(vim.json.decode, text)
  if not ok or type(data) ~= "table" or type(data.mcpServers) ~= "table" then
    return nil, "no `mcpServers` object"
  end
  local dir = vim.fs.dirname(path)
  local out = {}
  for name, e in pairs(data.mcpServers) do
    local valid = type(name) == "string"
      and name:match("^[%a][%w_%-]*$")
      and not name:find("__", 1, true)
      and name:sub(-1) ~= "_"
    local url = valid and type(e) == "table" and e.command == nil and e.url or nil
    if url ~= nil and (e.bearer_env ~= nil or e.headers ~= nil) then
      -- A stranger's file never chooses which of the user's keys go to its host.
      util.warn(
        ("%s: project MCP server `%s` left out: a project file cannot name keys (`bearer_env`, `headers`); configure it in setup()"):format(
          vim.fn.fnamemodify(path, ":~:."),
          name
        )
      )
    elseif url ~= nil then
      local scheme = type(url) == "string" and url:match("^(%a[%w+.-]*)://[^%s]+$") or nil
      if scheme == "http" or scheme == "https" then
        out[name] = { url = url }
      else
        log.warn("mcp: %s: server %s left out (`url` is not an http:// or https:// URL)", path, vim.inspect(name))
      end
    elseif valid and type(e) == "table" and type(e.command) == "string" and e.command ~= "" then
      local spec = { command = e.command, args = {}, env = nil, cwd = dir }
      for _, a in ipairs(type(e.args) == "table" and e.args or {}) do
        spec.args[#spec.args + 1] = tostring(a)
      end
      if type(e.env) == "table" then
        spec.env = {}
        for k, v in pairs(e.env) do
          if type(k) == "string" and k:match("^[%a_][%w_]*$") and (type(v) == "string" or type(v) == "number") then
            spec.env[k] = tostring(v)
          end
        end
      end
      if type(e.cwd) == "string" and e.cwd ~= "" then
        spec.cwd = e.cwd:sub(1, 1) == "/" and e.cwd or vim.fs.joinpath(dir, e.cwd)
      end
      out[name] = spec
    else
      log.warn(
        "mcp: %s: server %s left out (needs a name of letters, digits, - and _, and a command or a url)",
        path,
        vim.inspect(name)
      )
    end
  end
  return out
end

--- The command line of an entry (or its URL, without user info or query), as the
--- question shows it.
--- Control characters show as \xHH: a line break or a terminal escape in a stranger's
--- file never shapes the question (a line of its own under the real command line).
function H.command_line(spec)
  if spec.url then
    return H.visible(client.display_url(spec.url))
  end
  local parts = { H.visible(spec.command) }
  for _, a in ipairs(spec.args or {}) do
    a = H.visible(a)
    parts[#parts + 1] = a:find("[%s'\"]") and ("'" .. a:gsub("'", "'\\''") .. "'") or a
  end
  local env = vim.tbl_keys(spec.env or {})
  table.sort(env)
  local prefix = #env > 0 and ("(env " .. table.concat(env, ", ") .. ") ") or ""
  return prefix .. table.concat(parts, " ")
end

function H.visible(s)
  return (s:gsub("%c", function(c)
    return ("\\x%02x"):format(c:byte())
  end))
end

--- What an answer is kept under (flemma.consent's store, topic "mcp"): the file's
--- real path and the server's name, and the SHA-256 of everything that decides what
--- runs.
function H.trust_key(path, name, spec)
  if spec.url then
    return path .. "#" .. name, vim.fn.sha256(vim.json.encode({ "url", spec.url }))
  end
  local env = {}
  for k, v in pairs(spec.env or {}) do
    env[#env + 1] = k .. "=" .. v
  end
  table.sort(env)
  -- Lists only (their order is fixed): the same entry always gives the same text.
  local content = vim.json.encode({ spec.command, spec.args or {}, env, spec.cwd or "" })
  return path .. "#" .. name, vim.fn.sha256(content)
end

--- Reads the buffer's project .mcp.json (mcp.project_config): trusted servers are
--- added (started with the chats that need them), denied ones stay off, and for each
--- one not answered yet the user is asked (vim.ui.select naming its command line).
--- `again`: ask also for those answered before (:Flemma mcp:trust).
---@param bufnr integer
---@param again? boolean
function M.project(bufnr, again)
  local path = M.project_file(bufnr)
  if not path or (H.project_files[path] and not again) then
    return
  end
  H.project_files[path] = true
  local servers, err = M.read_project(path)
  if not servers then
    util.warn(("%s: %s; no project MCP server started"):format(vim.fn.fnamemodify(path, ":~:."), err))
    return
  end
  local names = vim.tbl_keys(servers)
  table.sort(names)
  for _, name in ipairs(names) do
    local spec = servers[name]
    if (H.config().servers or {})[name] then
      log.info("mcp: %s: server %s is configured in setup(); the project's entry is ignored", path, name)
    else
      local key, hash = H.trust_key(path, name, spec)
      local answer = consent.answer(nil, "mcp", key, hash)
      if answer == "yes" and not again then
        H.project[name] = spec
      elseif answer == nil or again then
        consent.ask(bufnr, {
          topic = "mcp",
          key = key,
          hash = hash,
          keep = "answer", -- dismissed: asked again next session
          prompt = ("%s wants to start the MCP server `%s`: %s"):format(
            vim.fn.fnamemodify(path, ":~:."),
            name,
            H.command_line(spec)
          ),
          choices = M.TRUST_CHOICES,
          kind = "flemma.mcp:" .. name,
          answered = function(trusted)
            if trusted == "yes" then
              H.project[name] = spec
              if M.needed(bufnr) then
                M.start({ name })
              end
            elseif trusted == "no" then
              H.project[name] = nil
            end
          end,
          refused = function(reason, aerr)
            if reason == "no_ui" then
              util.warn(
                ("project MCP server `%s` not started: it needs your trust and there is no UI to ask"):format(name)
              )
            elseif reason == "failed" then
              util.warn(("project MCP server `%s` not started: %s"):format(name, tostring(aerr)))
            end
          end,
        })
      end
    end
  end
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["mcp:trust"] = {
  desc = "ask again whether to trust the servers of the project's .mcp.json",
  run = function()
    local buf = vim.api.nvim_get_current_buf()
    if not M.project_file(buf) then
      util.warn("mcp:trust: no .mcp.json in this buffer's directory or above")
      return
    end
    M.project(buf, true)
  end,
}
M.commands["mcp:status"] = {
  desc = "show each MCP server: state, tool count, last error",
  run = function()
    util.notify(M.status_text())
  end,
}
M.commands["mcp:restart"] = {
  desc = "stop an MCP server and start it again",
  complete = function(arglead)
    return vim.tbl_filter(function(n)
      return n:sub(1, #arglead) == arglead
    end, M.names())
  end,
  run = function(args)
    local name = args[1]
    if not name or name == "" then
      util.warn("mcp:restart needs a server name: " .. table.concat(M.names(), ", "))
      return
    end
    if not H.spec(name) then
      util.warn(("mcp:restart: no MCP server `%s` (configured: %s)"):format(name, table.concat(M.names(), ", ")))
      return
    end
    M.restart(name, function(err)
      if err then
        util.warn(("MCP server `%s` did not start: %s"):format(name, err))
      else
        util.notify(("MCP server `%s` restarted (%d tools)"):format(name, #H.servers[name].client.tools))
      end
    end)
  end,
}

return M
