--- The `edit` tool: replaces one exact, unique occurrence of a text in a file.
local fs = require("flemma.tools.builtin.fs")
local preview = require("flemma.tools.preview")

local H = {}

--- Start offsets of every plain occurrence of needle (non-overlapping).
function H.find_all(haystack, needle)
  local found, init = {}, 1
  while true do
    local s, e = haystack:find(needle, init, true)
    if not s then
      return found
    end
    found[#found + 1] = s
    init = e + 1
  end
end

function H.line_at(text, offset)
  local _, n = text:sub(1, offset - 1):gsub("\n", "")
  return n + 1
end

-- The largest file `edit` changes (bytes).
H.MAX_BYTES = 64 * 1024 * 1024

-- The edit, once the file was read.
function H.apply(input, ctx, path, target, res)
  if not res.ok then
    if res.timed_out then
      return { success = false, error = res.message .. " (is it a pipe, or on a slow mount?)" }
    elseif res.type == "missing" then
      return { success = false, error = ("file not found: %s (use `write` to create a file)"):format(path) }
    elseif res.type == "directory" then
      return { success = false, error = path .. " is a directory, not a file" }
    elseif res.type ~= "file" and res.err_no == 0 then
      return {
        success = false,
        error = ("%s is %s: only regular files can be edited"):format(path, require("flemma.files").refusal(res.type)),
      }
    end
    return { success = false, error = res.message }
  end
  if res.cut_by ~= 0 then
    return {
      success = false,
      error = ("%s is over %s: `edit` changes smaller files (use bash, e.g. sed)"):format(
        path,
        ctx.truncate.format_size(H.MAX_BYTES)
      ),
    }
  end
  local content = res.text
  if fs.sniff(content:sub(1, 8192)) then
    return { success = false, error = path .. " is a binary file; `edit` changes text files only" }
  end
  local found = H.find_all(content, input.old_string)
  if #found == 0 then
    return {
      success = false,
      error = ("`old_string` was found 0 times in %s; it must match exactly (check whitespace and "
        .. "indentation; read the file again)"):format(input.path),
    }
  elseif #found > 1 then
    local lines = {}
    for i, s in ipairs(found) do
      if i > 20 then
        lines[#lines + 1] = "..."
        break
      end
      lines[#lines + 1] = tostring(H.line_at(content, s))
    end
    return {
      success = false,
      error = ("`old_string` was found %d times in %s (at lines %s); include more surrounding "
        .. "context so that it matches exactly once"):format(#found, input.path, table.concat(lines, ", ")),
    }
  end
  local s = found[1]
  local updated = content:sub(1, s - 1) .. input.new_string .. content:sub(s + #input.old_string)
  local ok, werr = ctx.sandbox.write_file(target, updated)
  if not ok then
    return { success = false, error = werr }
  end
  local line = H.line_at(content, s)
  return {
    success = true,
    output = ("Edited %s at line %d: replaced %d line%s with %d"):format(
      input.path,
      line,
      fs.count_lines(input.old_string),
      fs.count_lines(input.old_string) == 1 and "" or "s",
      fs.count_lines(input.new_string)
    ),
  }
end

---@type flemma.tools.Definition
return {
  name = "edit",
  description = "Replace one exact occurrence of `old_string` in a file with `new_string`. "
    .. "`old_string` must match the file byte for byte (whitespace included) and occur exactly "
    .. "once: include enough surrounding lines to make it unique.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file to edit" },
      old_string = { type = "string", description = "The exact text to replace (must be unique)" },
      new_string = { type = "string", description = "The replacement text" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "old_string", "new_string", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { { path = input.path, write = true } }
  end,
  format_preview = function(input)
    return preview.with_comment(input.path or "?", input.label)
  end,
  async = true,
  execute = function(input, ctx, callback)
    if input.old_string == "" then
      return callback({ success = false, error = "`old_string` is empty: give the exact text to replace" })
    end
    if input.old_string == input.new_string then
      return callback({ success = false, error = "`old_string` and `new_string` are the same: nothing to change" })
    end
    local path = ctx.path.resolve(input.path)
    local target = fs.write_target(path)
    for _, p in ipairs(target == path and { path } or { path, target }) do
      if not ctx.sandbox.is_path_writable(p) then
        return callback({
          success = false,
          error = ("sandbox: %s is outside the writable paths; edit files inside the project or /tmp, "
            .. "or turn the sandbox off with :Flemma sandbox:disable"):format(p),
        })
      end
    end
    -- Read on a native thread with a deadline (flemma.files): a FIFO or a device is
    -- refused, a file that never answers gives an error instead of a frozen editor.
    return require("flemma.files").read(target, {
      whole = true,
      max_bytes = H.MAX_BYTES,
      head_bytes = 8192,
      timeout_ms = math.floor((ctx.timeout or 30) * 1000),
    }, function(res)
      callback(H.apply(input, ctx, path, target, res))
    end)
  end,
}
