--- The `write` tool: creates or replaces a file atomically, creating missing parent
--- directories; refused outside the sandbox's writable paths while the sandbox is on.
local backup = require("flemma.tools.builtin.backup")
local fs = require("flemma.tools.builtin.fs")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "write",
  description = "Write a file (created, or replaced entirely). Missing parent directories are "
    .. "created. Relative paths are resolved against the chat file's directory.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file to write" },
      content = { type = "string", description = "The complete new content" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "content", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { { path = input.path, write = true } }
  end,
  format_preview = function(input)
    local size = require("flemma.core.native").format_size(#(input.content or ""))
    return preview.with_comment(("%s (%s)"):format(input.path or "?", size), input.label)
  end,
  execute = function(input, ctx)
    local path = ctx.path.resolve(input.path)
    local target = fs.write_target(path)
    -- A FIFO, socket or device is not replaced by a file (nor written to: that blocks).
    local existing = vim.uv.fs_stat(target)
    if existing and existing.type ~= "directory" and existing.type ~= "file" then
      return {
        success = false,
        error = ("%s is %s: only regular files are written"):format(
          path,
          require("flemma.core.files").refusal(existing.type)
        ),
      }
    end
    for _, p in ipairs(target == path and { path } or { path, target }) do
      if not ctx.sandbox.is_path_writable(p) then
        return {
          success = false,
          error = (
            "sandbox: %s is outside the writable paths; write inside the project or /tmp, "
            .. "or turn the sandbox off with :Flemma sandbox:disable"
          ):format(p),
        }
      end
    end
    -- What is replaced is backed up first (flemma.tools.builtin.backup).
    local copy = false
    if existing and existing.type == "file" then
      local berr
      copy, berr = backup.save(target)
      if not copy then
        return { success = false, error = berr .. "; nothing was written" }
      end
    end
    local ok, err = ctx.sandbox.write_file(target, input.content)
    if not ok then
      return { success = false, error = err }
    end
    local summary = ("Wrote %s (%d lines) to %s"):format(
      ctx.truncate.format_size(#input.content),
      fs.count_lines(input.content),
      input.path
    )
    backup.record("write", summary, { { path = target, copy = copy } }, ctx.__filename)
    return {
      success = true,
      output = summary
        .. (copy and (". The previous content is kept in %s. "):format(copy) or " (a new file). ")
        .. backup.hint(),
    }
  end,
}
