--- File references in @System: and @You: text: `@./path`, `@../path`, `@~/path`,
--- `@/abs/path`, optionally followed by `;type=mime/type`. At send time each one
--- is read and attached to the message that names it, after the text part that
--- holds it: text files inlined as a fenced block naming the path, images (png,
--- jpeg, gif, webp) and PDFs as `file` parts that each provider kind encodes
--- natively (or as a text note where it cannot). The buffer is never changed.
---
--- A reference is `@` at the start of a line or after a character that is not a
--- word character (so e-mail addresses are not references), up to the next white
--- space not escaped by a backslash, without the punctuation that ends it
--- (`see @./a.txt.`, `(@./b.png)`).
--- References inside fenced code blocks and inline code spans are not read.
--- Relative paths start at the chat file's directory. See `:help flemma-attachments`.
local M = {}
local util = require("flemma.core.util")
local H = {}

local uv = vim.uv or vim.loop

--- MIME types sent as images.
M.IMAGE_TYPES = { ["image/png"] = true, ["image/jpeg"] = true, ["image/gif"] = true, ["image/webp"] = true }
--- The MIME type sent as a document.
M.PDF = "application/pdf"

---@class flemma.attachments.Reference
---@field path string as written after `@` (without `;type=`; `\ ` read as a space)
---@field type? string the `;type=` given, if any
---@field first integer 1-based byte offset of the `@`
---@field last integer 1-based byte offset of the reference's last character

---@class flemma.attachments.FilePart a part of kind "file" (images and PDFs)
---@field kind "file"
---@field path string the path as written
---@field mime string
---@field data string the content, base64
---@field size integer bytes

-- ---------------------------------------------------------------------------
-- Finding references
-- ---------------------------------------------------------------------------

-- Characters that end a sentence or close a bracket or quote around a reference:
-- not part of its path when they end it.
H.TRAILING = "[%.,;:!%?%)%]}>'\"`*]"

--- The reference whose `@` is at byte s of line (1-based), or nil.
---@return flemma.attachments.Reference|nil ref
---@return integer e the end of the token looked at
function H.token_at(line, s)
  -- Up to the next white space not escaped by a backslash (`@./my\ notes.md`).
  local e = s
  repeat
    e = line:find("%s", e + 1) or (#line + 1)
  until e > #line or line:sub(e - 1, e - 1) ~= "\\"
  e = e - 1
  if s > 1 and line:sub(s - 1, s - 1):match("[%w_@]") then
    return nil, e
  end
  local token = line:sub(s + 1, e)
  while #token > 0 and token:sub(-1):match(H.TRAILING) do
    token = token:sub(1, -2)
  end
  local path, mime = token, nil
  local cut = token:find(";type=", 1, true)
  if cut then
    path, mime = token:sub(1, cut - 1), token:sub(cut + 6)
    if mime == "" then
      mime = nil
    end
  end
  if not (path:match("^%.%.?/.") or path:match("^~/.") or path:match("^/[^/]")) then
    return nil, e
  end
  if path:find("\\", 1, true) then
    path = path:gsub("\\(%s)", "%1")
  end
  return { path = path, type = mime, first = s, last = s + #token }, e
end

--- Byte ranges of the inline code spans of a line (a run of n backticks up to the
--- next run of exactly n).
function H.code_spans(line)
  if not line:find("`", 1, true) then
    return nil
  end
  local spans = {}
  local i = 1
  while true do
    local s, e = line:find("`+", i)
    if not s then
      break
    end
    local n = e - s + 1
    local j = e + 1
    local closed = false
    while true do
      local s2, e2 = line:find("`+", j)
      if not s2 then
        break
      end
      if e2 - s2 + 1 == n then
        spans[#spans + 1] = { s, e2 }
        i = e2 + 1
        closed = true
        break
      end
      j = e2 + 1
    end
    if not closed then
      i = e + 1
    end
  end
  return spans
end

function H.in_spans(spans, pos)
  if spans then
    for _, sp in ipairs(spans) do
      if pos >= sp[1] and pos <= sp[2] then
        return true
      end
    end
  end
  return false
end

--- The references of one line outside code spans; offsets shifted by base.
function H.line_refs(line, base, out)
  local spans
  local init = 1
  while true do
    local s = line:find("@", init, true)
    if not s then
      return
    end
    local ref, e = H.token_at(line, s)
    if ref then
      spans = spans or H.code_spans(line) or false
      if not H.in_spans(spans, s) then
        ref.first, ref.last = ref.first + base, ref.last + base
        out[#out + 1] = ref
      end
    end
    init = math.max(e, s) + 1
  end
end

--- Whether text has an `@` followed by `.`, `/` or `~` (a plain search: a pattern
--- search tries every position and is ten times slower on long texts).
function H.may_refer(text)
  local i = 1
  while true do
    i = text:find("@", i, true)
    if not i then
      return false
    end
    local c = text:byte(i + 1)
    if c == 46 or c == 47 or c == 126 then -- . / ~
      return true
    end
    i = i + 1
  end
end

--- The file references of a text, in order. References inside fenced code blocks
--- (``` or ~~~, closed by a fence of the same character at least as long) and
--- inline code spans are not references.
---@param text string
---@return flemma.attachments.Reference[]
function M.references(text)
  local out = {}
  if not H.may_refer(text) then
    return out
  end
  local pos, n = 1, #text
  local fence_char, fence_len = nil, 0
  while pos <= n do
    local nl = text:find("\n", pos, true) or (n + 1)
    local line = text:sub(pos, nl - 1)
    local indent, run = line:match("^( ? ? ?)([`~][`~][`~]+)")
    if run then
      local c = run:sub(1, 1)
      run = run:match("^" .. (c == "`" and "`+" or "~+"))
      if #run < 3 then
        run = nil
      end
    end
    if fence_char then
      if run and run:sub(1, 1) == fence_char and #run >= fence_len and line:sub(#indent + #run + 1):match("^%s*$") then
        fence_char = nil
      end
    elseif run and not (run:sub(1, 1) == "`" and line:sub(#indent + #run + 1):find("`", 1, true)) then
      fence_char, fence_len = run:sub(1, 1), #run
    elseif line:find("@", 1, true) then
      H.line_refs(line, pos - 1, out)
    end
    pos = nl + 1
  end
  return out
end

--- The file references of one line outside its inline code spans (the line is
--- not known to be inside a fenced block or not), for highlighting.
---@param line string
---@return flemma.attachments.Reference[]
function M.line_references(line)
  local out = {}
  if line:find("@", 1, true) then
    H.line_refs(line, 0, out)
  end
  return out
end

--- The file reference of a line under byte column col (0-based), for `gf`: path
--- (as written), type (or nil), first and last columns (0-based, inclusive); nil
--- when the column is not on one.
---@param line string
---@param col integer
---@return { path: string, type?: string, first: integer, last: integer }|nil
function M.reference_at(line, col)
  local init = 1
  while true do
    local s = line:find("@", init, true)
    if not s or s > col + 1 then
      return nil
    end
    local ref, e = H.token_at(line, s)
    if ref and col + 1 <= ref.last then
      return { path = ref.path, type = ref.type, first = ref.first - 1, last = ref.last - 1 }
    end
    init = math.max(e, s) + 1
  end
end

--- The directory relative references start from: the chat file's, else the
--- working directory.
---@param bufnr integer
---@return string
function M.base_dir(bufnr)
  local name = bufnr and vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_name(bufnr) or ""
  if name ~= "" then
    return vim.fn.fnamemodify(name, ":p:h")
  end
  return vim.fn.getcwd()
end

--- The absolute path of a reference's path (as written after `@`).
---@param bufnr integer|nil the chat buffer (relative paths start at its file's directory)
---@param path string
---@return string
function M.resolve(bufnr, path)
  if path:sub(1, 2) == "~/" then
    return vim.fs.normalize(vim.fn.simplify((uv.os_homedir() or vim.env.HOME or "~") .. path:sub(2)))
  end
  if path:sub(1, 1) == "/" then
    return vim.fs.normalize(vim.fn.simplify(path))
  end
  return vim.fs.normalize(vim.fn.simplify(M.base_dir(bufnr) .. "/" .. path))
end

--- How the chat names an absolute path: `./...` below the chat file's directory,
--- `~/...` below the home directory, else the path itself (M.resolve reads it back).
---@param bufnr integer|nil
---@param abs string
---@return string
function M.written(bufnr, abs)
  abs = vim.fs.normalize(abs)
  local base = M.base_dir(bufnr)
  if abs:sub(1, #base + 1) == base .. "/" and #abs > #base + 1 then
    return "./" .. abs:sub(#base + 2)
  end
  local home = vim.fs.normalize(uv.os_homedir() or vim.env.HOME or "")
  if home ~= "" and home ~= "/" and abs:sub(1, #home + 1) == home .. "/" and #abs > #home + 1 then
    return "~/" .. abs:sub(#home + 2)
  end
  return abs
end

--- The files a tool result's fence line names (`flemma:attach @./a.png;type=image/png
--- @~/b\ c.pdf;type=application/pdf`, flemma.document.attach_info): { path, type }
--- each, `\ ` read as a space and `\\` as a backslash; nil when the info string is
--- not of a result with files.
---@param info string|nil
---@return { path: string, type?: string }[]|nil
function M.result_files(info)
  local tag = require("flemma.chat.document").ATTACH_TAG
  if
    type(info) ~= "string"
    or info:sub(1, #tag) ~= tag
    or not (#info == #tag or info:sub(#tag + 1, #tag + 1):match("%s"))
  then
    return nil
  end
  local out = {}
  local i, n = #tag + 1, #info
  while i <= n do
    local c = info:sub(i, i)
    if c:match("%s") then
      i = i + 1
    else
      local buf = {}
      while i <= n do
        c = info:sub(i, i)
        if c == "\\" and i < n then
          buf[#buf + 1] = info:sub(i + 1, i + 1)
          i = i + 2
        elseif c:match("%s") then
          break
        else
          buf[#buf + 1] = c
          i = i + 1
        end
      end
      local token = table.concat(buf)
      local path, mime = token, nil
      local cut = token:find(";type=", 1, true)
      if cut then
        path, mime = token:sub(1, cut - 1), token:sub(cut + 6)
      end
      if path:sub(1, 1) == "@" then
        path = path:sub(2)
      end
      out[#out + 1] = { path = path, type = mime ~= "" and mime or nil }
    end
  end
  return out
end

-- ---------------------------------------------------------------------------
-- Reading files
-- ---------------------------------------------------------------------------

H.EXT = {
  png = "image/png",
  jpg = "image/jpeg",
  jpeg = "image/jpeg",
  gif = "image/gif",
  webp = "image/webp",
  pdf = "application/pdf",
  txt = "text/plain",
  text = "text/plain",
  log = "text/plain",
  md = "text/markdown",
  markdown = "text/markdown",
  rst = "text/x-rst",
  csv = "text/csv",
  tsv = "text/tab-separated-values",
  html = "text/html",
  htm = "text/html",
  css = "text/css",
  xml = "application/xml",
  svg = "image/svg+xml",
  json = "application/json",
  jsonl = "application/x-ndjson",
  yaml = "application/yaml",
  yml = "application/yaml",
  toml = "application/toml",
  ini = "text/plain",
  cfg = "text/plain",
  conf = "text/plain",
  js = "text/javascript",
  mjs = "text/javascript",
  ts = "text/x-typescript",
  tsx = "text/x-typescript",
  jsx = "text/javascript",
  lua = "text/x-lua",
  py = "text/x-python",
  rb = "text/x-ruby",
  go = "text/x-go",
  rs = "text/x-rust",
  c = "text/x-c",
  h = "text/x-c",
  cc = "text/x-c++",
  cpp = "text/x-c++",
  cxx = "text/x-c++",
  hpp = "text/x-c++",
  java = "text/x-java",
  kt = "text/x-kotlin",
  swift = "text/x-swift",
  sh = "text/x-shellscript",
  bash = "text/x-shellscript",
  zsh = "text/x-shellscript",
  fish = "text/x-shellscript",
  vim = "text/x-vim",
  sql = "application/sql",
  diff = "text/x-diff",
  patch = "text/x-diff",
  chat = "text/plain",
  zip = "application/zip",
  gz = "application/gzip",
  tar = "application/x-tar",
}

H.TEXT_APPLICATION = {
  ["application/json"] = true,
  ["application/xml"] = true,
  ["application/javascript"] = true,
  ["application/x-ndjson"] = true,
  ["application/yaml"] = true,
  ["application/x-yaml"] = true,
  ["application/toml"] = true,
  ["application/sql"] = true,
  ["application/x-sh"] = true,
  ["application/x-shellscript"] = true,
  ["inode/x-empty"] = true,
}

--- Whether a MIME type is sent as inlined text.
---@param mime string
---@return boolean
function M.is_text(mime)
  return mime:sub(1, 5) == "text/"
    or H.TEXT_APPLICATION[mime] == true
    or mime:sub(-5) == "+json"
    or mime:sub(-4) == "+xml"
end

--- The MIME type of a path from its extension (nil when unknown).
---@param path string
---@return string|nil
function M.mime_from_extension(path)
  local ext = vim.fs.basename(path):match("%.([^.]+)$")
  return ext and H.EXT[ext:lower()] or nil
end

--- The MIME type `file --mime-type` reports (nil when it cannot run), else a
--- guess from the first bytes: text when valid UTF-8 without NUL bytes.
function H.sniff(abs, head)
  if vim.fn.executable("file") == 1 then
    local ok, res = pcall(function()
      return vim.system({ "file", "--brief", "--mime-type", "--", abs }, { text = true }):wait(3000)
    end)
    if ok and res and res.code == 0 then
      local mime = vim.trim(res.stdout or "")
      if mime:match("^[%w.+-]+/[%w.+-]+$") then
        return mime
      end
    end
  end
  if head:find("\0", 1, true) or not H.utf8_valid(head, true) then
    return "application/octet-stream"
  end
  return "text/plain"
end

--- Whether s is valid UTF-8. partial: a sequence cut at the end is accepted.
function H.utf8_valid(s, partial)
  local i, n = 1, #s
  local byte = string.byte
  while true do
    i = s:find("[\128-\255]", i)
    if not i then
      return true
    end
    local c = byte(s, i)
    local len = c >= 0xF0 and c <= 0xF4 and 4 or c >= 0xE0 and 3 or c >= 0xC2 and c <= 0xDF and 2 or 0
    if len == 0 then
      return false
    end
    if i + len - 1 > n then
      return partial == true
    end
    for k = i + 1, i + len - 1 do
      local b = byte(s, k)
      if b < 0x80 or b > 0xBF then
        return false
      end
    end
    local b2 = byte(s, i + 1)
    if
      (c == 0xE0 and b2 < 0xA0)
      or (c == 0xED and b2 > 0x9F)
      or (c == 0xF0 and b2 < 0x90)
      or (c == 0xF4 and b2 > 0x8F)
    then
      return false
    end
    i = i + len
  end
end

function H.read_all(abs, limit)
  -- Without waiting for a FIFO swapped in since the stat (flemma.files).
  local fd, err = require("flemma.core.files").open_regular(abs)
  if not fd then
    return nil, err
  end
  -- At most limit + 1 bytes, whatever stat said (a file may grow while it is read).
  local chunks, got = {}, 0
  while got <= limit do
    local data, rerr = uv.fs_read(fd, math.min(1024 * 1024, limit + 1 - got), got)
    if not data then
      uv.fs_close(fd)
      return nil, rerr
    end
    if data == "" then
      break
    end
    chunks[#chunks + 1] = data
    got = got + #data
  end
  uv.fs_close(fd)
  return table.concat(chunks)
end

-- Trees whose files are the kernel's (sizes that lie, secrets such as /proc/self/environ).
H.KERNEL = { "/proc", "/sys", "/dev" }

-- Files read, per chat buffer (0: none), by absolute path: { stamp, forced, file }.
-- A buffer's files are dropped with the buffer: a global cache kept the content
-- of every file ever attached (a 5 MB PDF: 6.7 MB of base64) until Neovim exited.
H.files = {}

--- The file cache of bufnr (made on first use; dropped when the buffer is
--- unloaded or wiped).
function H.files_of(bufnr)
  local key = bufnr or 0
  local c = H.files[key]
  if not c then
    c = {}
    H.files[key] = c
    if key ~= 0 and vim.api.nvim_buf_is_valid(key) then
      vim.api.nvim_create_autocmd({ "BufUnload", "BufWipeout" }, {
        buffer = key,
        once = true,
        callback = function()
          H.files[key] = nil
        end,
      })
    end
  end
  return c
end

function H.stamp(st)
  return ("%d:%d:%d:%d"):format(st.size, st.mtime.sec, st.mtime.nsec or 0, st.ino or 0)
end

function H.human(bytes)
  if bytes >= 1024 * 1024 then
    return ("%.1f MB"):format(bytes / (1024 * 1024))
  elseif bytes >= 1024 then
    return ("%.1f KB"):format(bytes / 1024)
  end
  return ("%d bytes"):format(bytes)
end

--- Reads the file a reference names.
---@param abs string absolute path
---@param ref { path: string, type?: string }
---@param max_bytes integer
---@param bufnr integer|nil the chat buffer (whose project roots bound what is read)
---@return { mime: string, size: integer, text?: string, data?: string, stamp: string }|nil file
---@return string|nil err why it cannot be attached
function H.load(abs, ref, max_bytes, bufnr)
  local display = "@" .. ref.path
  local st = uv.fs_stat(abs)
  if not st then
    return nil,
      ("file %s not found (%s): fix the path (relative paths start at the chat file's directory), or write it as `code` if it is not a file reference"):format(
        display,
        abs
      )
  end
  if st.type == "directory" then
    return nil, ("%s is a directory (%s): reference the files in it one by one"):format(display, abs)
  end
  local refused = require("flemma.core.files").refusal(st.type)
  if refused then
    return nil, ("%s is not a regular file (%s, a %s): only files can be attached"):format(display, abs, st.type)
  end
  local real = uv.fs_realpath(abs) or abs
  for _, root in ipairs(H.KERNEL) do
    if real == root or real:sub(1, #root + 1) == root .. "/" then
      -- /proc/self/environ holds the API keys.
      return nil, ("%s is under %s (%s): files of the kernel are not attached"):format(display, root, real)
    end
  end
  -- A file outside the project is read only once the user allowed it (flemma.reach).
  local inside, rerr = require("flemma.policy.reach").check(bufnr, abs, display)
  if not inside then
    return nil, rerr
  end
  if st.size > max_bytes then
    return nil,
      ("file %s is %s (%d bytes), over attachments.max_bytes (%d bytes): attach a smaller file or raise the limit"):format(
        display,
        H.human(st.size),
        st.size,
        max_bytes
      )
  end
  local stamp = H.stamp(st)
  local cache = H.files_of(bufnr)
  local cached = cache[abs]
  if cached and cached.stamp == stamp and cached.forced == ref.type then
    return cached.file
  end
  local content, read_err = H.read_all(abs, max_bytes)
  if not content then
    return nil, ("file %s cannot be read (%s): %s"):format(display, abs, tostring(read_err))
  end
  if #content > max_bytes then
    return nil,
      ("file %s is %s (%d bytes), over attachments.max_bytes (%d bytes): attach a smaller file or raise the limit"):format(
        display,
        H.human(#content),
        #content,
        max_bytes
      )
  end
  local mime = ref.type or M.mime_from_extension(abs) or H.sniff(abs, content:sub(1, 8192))
  mime = mime:lower()
  local file = { mime = mime, size = #content, stamp = stamp }
  if M.is_text(mime) then
    if content:find("\0", 1, true) or not H.utf8_valid(content) then
      return nil,
        ("file %s is not UTF-8 text (%s): only UTF-8 text, images (png, jpeg, gif, webp) and PDFs can be attached"):format(
          display,
          mime
        )
    end
    file.text = content
  elseif M.IMAGE_TYPES[mime] or mime == M.PDF then
    file.data = vim.base64.encode(content)
  else
    return nil,
      ("file %s is %s: only text files, images (png, jpeg, gif, webp) and PDFs can be attached (add ;type=text/plain to send a text file as text)"):format(
        display,
        mime
      )
  end
  cache[abs] = { stamp = stamp, forced = ref.type, file = file }
  return file
end

--- The inlined form of a text file: its path, then its content in a fence longer
--- than any backtick run inside.
---@param path string as written after `@`
---@param text string
---@return string
function M.inline_text(path, text)
  text = text:gsub("\n$", "")
  local fence = require("flemma.chat.document").fence_for(text)
  if text == "" then
    return ("File: %s\n%s\n%s"):format(path, fence, fence)
  end
  return ("File: %s\n%s\n%s\n%s"):format(path, fence, text, fence)
end

--- The text that stands for an image or PDF where it cannot be sent.
---@param part { path: string, mime: string, size: integer }
---@param why string
---@return string
function M.note(part, why)
  return ("[File %s (%s, %d bytes) is not included: %s]"):format(part.path, part.mime, part.size, why)
end

-- ---------------------------------------------------------------------------
-- Expanding a document
-- ---------------------------------------------------------------------------

-- References of text parts, by part table (a part's table is kept while its text
-- is unchanged): { text, refs }.
H.scans = setmetatable({}, { __mode = "k" })

function H.refs_of(p)
  local s = H.scans[p]
  if s and s.text == p.text then
    return s.refs
  end
  local refs = M.references(p.text)
  H.scans[p] = { text = p.text, refs = refs }
  return refs
end

-- Whether a message names files, by message table (kept while the message is unchanged,
-- so a send without references costs one lookup per message).
H.named = setmetatable({}, { __mode = "k" })

function H.message_refs(msg)
  local v = H.named[msg]
  if v == nil then
    v = false
    for _, p in ipairs(msg.role ~= "assistant" and msg.parts or {}) do
      if p.kind == "text" and type(p.text) == "string" and #H.refs_of(p) > 0 then
        v = true
        break
      elseif p.kind == "tool_result" and p.status == nil and M.result_files(p.info) then
        v = true
        break
      end
    end
    H.named[msg] = v
  end
  return v
end

-- Expanded messages, by message table: { key, copy } (key: the files' stamps and
-- the limit), so an unchanged message with attachments keeps its table and the
-- providers' per-message encodings stay valid.
H.expanded = setmetatable({}, { __mode = "k" })

--- The buffer line of a reference: the line of its offset in the part, checked
--- against the buffer (a template may have changed the text), else searched in
--- the part's lines.
function H.line_of(bufnr, p, ref)
  local _, nl = p.text:sub(1, ref.first - 1):gsub("\n", "")
  local line = p.first_line + nl
  if not (bufnr and vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_is_loaded(bufnr)) then
    return line
  end
  local needle = "@" .. ref.path
  local lines = vim.api.nvim_buf_get_lines(bufnr, p.first_line - 1, p.last_line, false)
  if lines[line - p.first_line + 1] and lines[line - p.first_line + 1]:find(needle, 1, true) then
    return line
  end
  for i, l in ipairs(lines) do
    if l:find(needle, 1, true) then
      return p.first_line + i - 1
    end
  end
  return p.first_line
end

--- An attached part: the lines of the text part that names it, marked as not the
--- buffer's text (`attached`).
function H.placed(part, from)
  part.first_line, part.last_line, part.attached = from.first_line, from.last_line, true
  return part
end

--- The parts a text part stands for: itself, then one part per file it names.
function H.expand_part(bufnr, msg, p, refs, max_bytes, problems, stamps, warnings)
  local out = { p }
  local seen = {}
  for _, ref in ipairs(refs) do
    local abs = M.resolve(bufnr, ref.path)
    local key = abs .. "\0" .. (ref.type or "")
    if not seen[key] then
      seen[key] = true
      local file, err = H.load(abs, ref, max_bytes, bufnr)
      if not file then
        problems[#problems + 1] = { line = H.line_of(bufnr, p, ref), message = err }
      else
        stamps[#stamps + 1] = abs .. "\0" .. file.stamp .. "\0" .. (ref.type or "")
        if file.text then
          out[#out + 1] = H.placed({ kind = "text", text = M.inline_text(ref.path, file.text), file = ref.path }, p)
        else
          local part =
            H.placed({ kind = "file", path = ref.path, mime = file.mime, data = file.data, size = file.size }, p)
          if msg.role == "system" then
            out[#out + 1] =
              H.placed({ kind = "text", text = M.note(part, "a system prompt takes text only"), file = ref.path }, p)
            warnings[#warnings + 1] = ("@%s in @System: is sent as a text note (a system prompt takes text only): reference it from an @You: message"):format(
              ref.path
            )
          else
            out[#out + 1] = part
          end
        end
      end
    end
  end
  return out
end

--- A tool result whose fence line names files, with the files read: a copy of the
--- part whose `files` are `file` parts (images and PDFs only). A file is read as a
--- reference in the text is: inside the project or allowed (flemma.reach: secret
--- files and files outside the project are asked about), not the kernel's, within
--- attachments.max_bytes, and of the type its content has.
function H.expand_result(bufnr, p, max_bytes, problems, stamps)
  local files = {}
  local line = p.fence_line or p.first_line
  for _, ref in ipairs(M.result_files(p.info) or {}) do
    if not (ref.path:match("^%.%.?/.") or ref.path:match("^~/.") or ref.path:match("^/.")) then
      problems[#problems + 1] = {
        line = line,
        message = ("the result `%s` names %s: a file it carries should be a ./, ../, ~/ or / path"):format(
          p.id,
          vim.inspect(ref.path)
        ),
      }
    else
      local abs = M.resolve(bufnr, ref.path)
      local file, err = H.load(abs, { path = ref.path, type = ref.type }, max_bytes, bufnr)
      if not file then
        problems[#problems + 1] = { line = line, message = ("the result `%s`: %s"):format(p.id, err) }
      elseif not (M.IMAGE_TYPES[file.mime] or file.mime == M.PDF) or not file.data then
        problems[#problems + 1] = {
          line = line,
          message = ("the result `%s` carries @%s, which is %s: a result carries images (png, jpeg, gif, webp) and PDFs only"):format(
            p.id,
            ref.path,
            file.mime
          ),
        }
      else
        stamps[#stamps + 1] = abs .. "\0" .. file.stamp .. "\0" .. (ref.type or "")
        files[#files + 1] = { kind = "file", path = ref.path, mime = file.mime, data = file.data, size = file.size }
      end
    end
  end
  local copy = util.copy(p)
  copy.files = files
  return copy
end

--- The document as it is sent: after each @System: and @You: text part that names
--- files, the files it names (text inlined, images and PDFs as `file` parts; in
--- @System: a text note for those). The document and the buffer are not touched;
--- a document without references is returned as it is. Problems (a file missing,
--- too large, of a type that cannot be sent) name their buffer line; the send must
--- not happen then.
---@param bufnr integer
---@param doc flemma.document.Doc
---@return flemma.document.Doc|nil doc
---@return { line: integer, message: string }[]|nil problems
function M.expand(bufnr, doc)
  local messages, changed = nil, false
  local problems, warnings = {}, {}
  local max_bytes
  local named = H.named
  for i, msg in ipairs(doc.messages) do
    local refers = named[msg]
    if refers == nil then
      refers = H.message_refs(msg)
    end
    if refers then
      local found = nil
      for j, p in ipairs(msg.parts) do
        if p.kind == "text" and p.text and #H.refs_of(p) > 0 then
          found = found or {}
          found[#found + 1] = j
        elseif p.kind == "tool_result" and p.status == nil and msg.role == "user" and M.result_files(p.info) then
          found = found or {}
          found[#found + 1] = j
        end
      end
      if found then
        max_bytes = max_bytes or require("flemma.core.config").get().attachments.max_bytes
        local stamps, new_parts = {}, {}
        local before = #problems
        for j, p in ipairs(msg.parts) do
          if p.kind == "text" and p.text and vim.tbl_contains(found, j) then
            vim.list_extend(
              new_parts,
              H.expand_part(bufnr, msg, p, H.refs_of(p), max_bytes, problems, stamps, warnings)
            )
          elseif p.kind == "tool_result" and vim.tbl_contains(found, j) then
            new_parts[#new_parts + 1] = H.expand_result(bufnr, p, max_bytes, problems, stamps)
          else
            new_parts[#new_parts + 1] = p
          end
        end
        if #problems == before then
          local key = max_bytes .. "\0" .. table.concat(stamps, "\1")
          local entry = H.expanded[msg]
          local copy
          if entry and entry.key == key then
            copy = entry.copy
          else
            copy = util.copy(msg)
            copy.parts = new_parts
            H.expanded[msg] = { key = key, copy = copy }
          end
          messages = messages or table.move(doc.messages, 1, i - 1, 1, {})
          messages[i] = copy
          changed = true
        elseif messages then
          messages[i] = msg
        end
      elseif messages then
        messages[i] = msg
      end
    elseif messages then
      messages[i] = msg
    end
  end
  if #problems > 0 then
    for k, p in ipairs(problems) do
      p.order = k
    end
    table.sort(problems, function(a, b)
      if a.line ~= b.line then
        return a.line < b.line
      end
      return a.order < b.order
    end)
    for _, p in ipairs(problems) do
      p.order = nil
    end
    return nil, problems
  end
  if #warnings > 0 then
    require("flemma.core.util").warn(table.concat(warnings, "\n"))
  end
  if not changed then
    return doc
  end
  local out = util.copy(doc)
  out.messages = messages
  return out
end

return M
