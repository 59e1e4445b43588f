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
  execute = function(input, ctx)
    if input.old_string == "" then
      return { success = false, error = "`old_string` is empty: give the exact text to replace" }
    end
    if input.old_string == input.new_string then
      return { success = false, error = "`old_string` and `new_string` are the same: nothing to change" }
    end
    local path = ctx.path.resolve(input.path)
    local stat = vim.uv.fs_stat(path)
    if not stat then
      return { success = false, error = ("file not found: %s (use `write` to create a file)"):format(path) }
    elseif stat.type == "directory" then
      return { success = false, error = path .. " is a directory, not a file" }
    end
    local target = fs.write_target(path)
    for _, p in ipairs(target == path and { path } or { path, target }) do
      if not ctx.sandbox.is_path_writable(p) then
        return {
          success = false,
          error = ("sandbox: %s is outside the writable paths; edit files inside the project or /tmp, "
            .. "or turn the sandbox off with :Flemma sandbox:disable"):format(p),
        }
      end
    end
    local content, err = fs.read_all(target)
    if not content then
      return { success = false, error = ("cannot read %s: %s"):format(path, err) }
    end
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
  end,
}
