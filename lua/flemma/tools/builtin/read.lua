--- The `read` tool: the lines of a text file from `offset`, at most `limit` lines and
--- the `tools.truncate` limits, with a hint on how to read on. The file is streamed
--- line by line, so a huge file costs only the window that is shown. Binary files are
--- described, not dumped.
local fs = require("flemma.tools.builtin.fs")
local preview = require("flemma.tools.preview")

local H = {}

function H.limits()
  local t = require("flemma.config").get().tools.truncate or {}
  return t.max_lines or 2000, t.max_bytes or 51200
end

--- Cuts s to at most n bytes without splitting a UTF-8 sequence.
function H.cut_utf8(s, n)
  if #s <= n then
    return s
  end
  local i = n + 1
  while i > 1 and s:byte(i) and s:byte(i) >= 0x80 and s:byte(i) < 0xC0 do
    i = i - 1
  end
  return s:sub(1, i - 1)
end

---@type flemma.tools.Definition
return {
  name = "read",
  description = "Read a text file. Returns at most 2000 lines or 50KB from `offset` (1-based line, "
    .. "default 1); when more remains, the result says which offset to continue from. Binary "
    .. "files are described, not shown. Relative paths are resolved against the chat file's directory.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file to read" },
      offset = { type = { "integer", "null" }, description = "First line to show, 1-based (default 1)" },
      limit = { type = { "integer", "null" }, description = "Maximum number of lines (default: all, up to the limits)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "offset", "limit", "label" },
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
  execute = function(input, ctx)
    local offset = input.offset or 1
    if offset < 0 then
      return { success = false, error = ("`offset` should be a line number from 1, not %d"):format(offset) }
    end
    offset = math.max(offset, 1)
    if input.limit and input.limit < 1 then
      return { success = false, error = ("`limit` should be 1 or more lines, not %d"):format(input.limit) }
    end
    local path = ctx.path.resolve(input.path)
    local stat = vim.uv.fs_stat(path)
    if not stat then
      local lstat = vim.uv.fs_lstat(path)
      if lstat and lstat.type == "link" then
        return { success = false, error = ("%s is a broken symbolic link (to %s)"):format(path, vim.uv.fs_readlink(path) or "?") }
      end
      return { success = false, error = ("file not found: %s"):format(path) }
    elseif stat.type == "directory" then
      return { success = false, error = ("%s is a directory; list it with bash (`ls`)"):format(path) }
    end
    local f, err = io.open(path, "rb")
    if not f then
      return { success = false, error = ("cannot read %s: %s"):format(path, err) }
    end
    local size = ctx.truncate.format_size(stat.size)
    local binary, kind = fs.sniff(f:read(8192) or "")
    if binary then
      f:close()
      return {
        success = true,
        output = ("%s is a binary file (%s, %s); its content is not shown."):format(input.path, kind, size),
      }
    end
    f:seek("set", 0)

    local max_lines, max_bytes = H.limits()
    local want = math.min(input.limit or math.huge, max_lines)
    local shown, bytes, total = {}, 0, 0
    local cut_by, long_line = nil, false
    for line in f:lines() do
      total = total + 1
      if total >= offset and not cut_by then
        if #shown >= want then
          cut_by = #shown >= max_lines and "lines" or "limit"
        else
          local cost = #line + (#shown > 0 and 1 or 0)
          if bytes + cost > max_bytes then
            if #shown == 0 then
              shown[1] = H.cut_utf8(line, max_bytes)
              long_line = true
            end
            cut_by = "bytes"
          else
            shown[#shown + 1] = line
            bytes = bytes + cost
          end
        end
      end
    end
    f:close()

    if total == 0 then
      return { success = true, output = ("(%s is empty)"):format(input.path) }
    end
    if offset > total then
      return {
        success = false,
        error = ("`offset` %d is past the end of %s, which has %d lines"):format(offset, input.path, total),
      }
    end
    local text = table.concat(shown, "\n")
    local last = offset + #shown - 1
    if long_line then
      text = text
        .. ("\n\n[Line %d alone is over %s; only its start is shown. Read it in pieces with bash, e.g. "
          .. "`sed -n '%dp' %s | head -c 50000`.]"):format(offset, ctx.truncate.format_size(max_bytes), offset, input.path)
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
  end,
}
