--- The `read` tool: the lines of a text file from `offset`, at most `limit` lines and
--- the `tools.truncate` limits, with a hint on how to read on. The file is streamed
--- line by line, so a huge file costs only the window that is shown. Binary files are
--- described, not dumped. The file is read on a native thread with the tool's
--- timeout (flemma.files): a FIFO, socket or device is refused, and a file that
--- never answers gives an error instead of freezing Neovim.
local fs = require("flemma.tools.builtin.fs")
local preview = require("flemma.tools.preview")

local H = {}

-- Lines longer than this (bytes) are shown cut, at a UTF-8 boundary, and the
-- result says which ones were.
H.MAX_LINE = 2000

-- Cuts s to at most n bytes without splitting a UTF-8 sequence.
function H.cut_utf8(s, n)
  if #s <= n then
    return s
  end
  local k = n
  while k > 0 and bit.band(s:byte(k + 1), 0xC0) == 0x80 do
    k = k - 1
  end
  return s:sub(1, k)
end

-- The shown text with long lines cut and, on request, numbered as `cat -n` does
-- (the number right-aligned in 6 columns, then a tab). Returns the text and the
-- numbers of the lines that were cut. Work proportional to the (bounded) text.
function H.shape(text, first, numbered)
  local out, cut = {}, {}
  local n = first
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if #line > H.MAX_LINE then
      line = H.cut_utf8(line, H.MAX_LINE) .. " …"
      cut[#cut + 1] = n
    end
    out[#out + 1] = numbered and ("%6d\t%s"):format(n, line) or line
    n = n + 1
  end
  return table.concat(out, "\n"), cut
end

function H.limits()
  local t = require("flemma.core.config").get().tools.truncate or {}
  return t.max_lines or 2000, t.max_bytes or 51200
end

--- An image (png, jpeg, gif, webp) or PDF: the result names it and carries it as an
--- attachment (the chat shows a reference; the bytes are read when the request is
--- built, through the checks of `@./file` references: flemma.attachments). A file over
--- attachments.max_bytes is an error the model can act on.
function H.media(input, ctx, path, mime, size)
  local what = mime == "application/pdf" and "a PDF document" or ("an image (%s)"):format(mime)
  local max = require("flemma.core.config").get().attachments.max_bytes
  if size > max then
    return {
      success = false,
      error = ("%s is %s of %s, over attachments.max_bytes (%s): it cannot be shown to the model (the user may raise the limit)"):format(
        input.path,
        what,
        ctx.truncate.format_size(size),
        ctx.truncate.format_size(max)
      ),
    }
  end
  return {
    success = true,
    output = ("%s is %s of %s; it is attached to this result."):format(
      input.path,
      what,
      ctx.truncate.format_size(size)
    ),
    attachments = { { path = path, mime = mime } },
  }
end

-- The tool's result from what the file reader gave.
function H.result(input, ctx, path, offset, max_lines, max_bytes, res)
  if not res.ok then
    if res.timed_out then
      return { success = false, error = res.message .. " (is it a pipe, or on a slow mount?)" }
    elseif res.type == "missing" then
      local lstat = vim.uv.fs_lstat(path)
      if lstat and lstat.type == "link" then
        return {
          success = false,
          error = ("%s is a broken symbolic link (to %s)"):format(path, vim.uv.fs_readlink(path) or "?"),
        }
      end
      return { success = false, error = ("file not found: %s"):format(path) }
    elseif res.type == "directory" then
      return { success = false, error = ("%s is a directory; list it with bash (`ls`)"):format(path) }
    elseif res.type ~= "file" and res.err_no == 0 then
      local why = require("flemma.core.files").refusal(res.type)
      return { success = false, error = ("%s is %s: only regular files can be read"):format(path, why) }
    end
    return { success = false, error = res.message }
  end
  local size = ctx.truncate.format_size(res.size)
  local mime = fs.media_type(res.head or "")
  if mime then
    return H.media(input, ctx, path, mime, res.size)
  end
  local binary, kind = fs.sniff(res.head)
  if binary then
    return {
      success = true,
      output = ("%s is a binary file (%s, %s); its content is not shown."):format(input.path, kind, size),
    }
  end
  local total, shown = res.total_lines, res.shown_lines
  if total == 0 then
    return { success = true, output = ("(%s is empty)"):format(input.path) }
  end
  if offset > total then
    return {
      success = false,
      error = ("`offset` %d is past the end of %s, which has %d lines"):format(offset, input.path, total),
    }
  end
  local cut_by = res.cut_by == 2 and "bytes" or res.cut_by == 1 and (shown >= max_lines and "lines" or "limit") or nil
  local text = res.text
  if res.long_line then
    shown = 1
  end
  local last = offset + shown - 1
  local cut
  text, cut = H.shape(text, offset, input.line_numbers == true)
  if #cut > 0 then
    local listed = {}
    for i = 1, math.min(#cut, 10) do
      listed[i] = tostring(cut[i])
    end
    text = text
      .. ("\n\n[%s %s %s longer than %d bytes and %s cut (marked …); read %s whole with bash, e.g. `sed -n '%dp' %s`.]"):format(
        #cut == 1 and "Line" or "Lines",
        table.concat(listed, ", ") .. (#cut > 10 and (", ... (%d in all)"):format(#cut) or ""),
        #cut == 1 and "is" or "are",
        H.MAX_LINE,
        #cut == 1 and "was" or "were",
        #cut == 1 and "it" or "one",
        cut[1],
        input.path
      )
  end
  if res.long_line then
    text = text
      .. (
        "\n\n[Line %d alone is over %s; only its start is shown. Read it in pieces with bash, e.g. "
        .. "`sed -n '%dp' %s | head -c 50000`.]"
      ):format(offset, ctx.truncate.format_size(max_bytes), offset, input.path)
    if last < total then
      text = text .. ("\n[Use offset=%d to continue.]"):format(last + 1)
    end
  elseif last < total then
    local why = cut_by == "bytes" and (" (" .. ctx.truncate.format_size(max_bytes) .. " limit)")
      or cut_by == "lines" and (" (" .. max_lines .. "-line limit)")
      or ""
    text = text
      .. ("\n\n[Showing lines %d-%d of %d%s. Use offset=%d to continue.]"):format(offset, last, total, why, last + 1)
  end
  return { success = true, output = text }
end

---@type flemma.tools.Definition
return {
  name = "read",
  description = "Read a text file. Returns at most `limit` (default 2000) lines or 50KB from `offset` "
    .. "(1-based line, default 1); when more remains, the result says which offset to continue from. "
    .. "`line_numbers = true` prefixes each line with its number (as `cat -n`). Lines over 2000 bytes "
    .. "are cut and the result says which. Images (png, jpeg, gif, webp) and PDFs are attached to the "
    .. "result for you to see (offset and limit do not apply). Other binary files are described, not shown. "
    .. "Relative paths are "
    .. "resolved against the chat file's directory.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file to read" },
      offset = { type = { "integer", "null" }, description = "First line to show, 1-based (default 1)" },
      limit = { type = { "integer", "null" }, description = "Maximum number of lines (default: all, up to the limits)" },
      line_numbers = {
        type = { "boolean", "null" },
        description = "Prefix each line with its 1-based number, as `cat -n` (default false)",
      },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "offset", "limit", "line_numbers", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { input.path }
  end,
  format_preview = function(input)
    local main = input.path or "?"
    if input.offset or input.limit then
      main = main .. " +" .. tostring(input.offset or 0)
      if input.limit then
        main = main .. "," .. tostring(input.limit)
      end
    end
    return preview.with_comment(main, input.label)
  end,
  async = true,
  execute = function(input, ctx, callback)
    local offset = input.offset or 1
    if offset < 0 then
      callback({ success = false, error = ("`offset` should be a line number from 1, not %d"):format(offset) })
      return
    end
    offset = math.max(offset, 1)
    if input.limit and input.limit < 1 then
      callback({ success = false, error = ("`limit` should be 1 or more lines, not %d"):format(input.limit) })
      return
    end
    local path = ctx.path.resolve(input.path)
    local max_lines, max_bytes = H.limits()
    local want = math.min(input.limit or math.huge, max_lines)
    -- Read on a native thread with a deadline: a FIFO, a device or a file that
    -- never answers gives an error, never a frozen editor (flemma.files).
    return require("flemma.core.files").read(path, {
      first_line = offset,
      max_lines = want == math.huge and 0 or want,
      max_bytes = max_bytes,
      head_bytes = 8192,
      max_line_bytes = H.MAX_LINE,
      timeout_ms = math.floor((ctx.timeout or 30) * 1000),
    }, function(res)
      callback(H.result(input, ctx, path, offset, max_lines, max_bytes, res))
    end)
  end,
}
