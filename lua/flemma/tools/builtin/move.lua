--- The `move` tool: renames a file, link or folder (a single rename: atomic, on one
--- file system). An existing destination is never replaced without
--- `overwrite = true`, and then only a file, backed up first. Missing parent
--- folders of the destination are created. Refused outside the sandbox's writable
--- paths while the sandbox is on. Never approved by the presets.
local backup = require("flemma.tools.builtin.backup")
local fs = require("flemma.tools.builtin.fs")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "move",
  description = "Move or rename a file, link or folder. An existing destination is an error unless "
    .. "overwrite is true (then only a file is replaced, and it is backed up first). Relative paths are "
    .. "resolved against the chat file's directory.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      source = { type = "string", description = "What to move" },
      destination = { type = "string", description = "The new path" },
      overwrite = { type = { "boolean", "null" }, description = "Replace an existing destination file" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "source", "destination", "overwrite", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { { path = input.source, write = true }, { path = input.destination, write = true } }
  end,
  format_preview = function(input)
    return preview.with_comment(
      ("%s -> %s%s"):format(input.source or "?", input.destination or "?", input.overwrite and " (overwrite)" or ""),
      input.label
    )
  end,
  execute = function(input, ctx)
    local src = ctx.path.resolve(input.source)
    local dst = ctx.path.resolve(input.destination)
    local sst = vim.uv.fs_lstat(src)
    if not sst then
      return { success = false, error = ("not found: %s"):format(input.source) }
    end
    if src == dst then
      return { success = false, error = "the source and the destination are the same" }
    end
    if sst.type == "directory" and (dst .. "/"):sub(1, #src + 1) == src .. "/" then
      return { success = false, error = ("cannot move the folder %s into itself"):format(input.source) }
    end
    for _, p in ipairs({ vim.fs.dirname(src), dst }) do
      if not ctx.sandbox.is_path_writable(p) then
        return {
          success = false,
          error = ("sandbox: %s is outside the writable paths (or turn the sandbox off with :Flemma sandbox:disable)"):format(
            p
          ),
        }
      end
    end
    local dstat = vim.uv.fs_lstat(dst)
    local copy
    if dstat then
      if not input.overwrite then
        return {
          success = false,
          error = ("%s already exists: nothing was moved (set overwrite = true to replace a file)"):format(
            input.destination
          ),
        }
      end
      if dstat.type ~= "file" then
        return { success = false, error = ("%s is a %s: only a file is replaced"):format(input.destination, dstat.type) }
      end
      local berr
      copy, berr = backup.save(dst)
      if not copy then
        return { success = false, error = berr .. "; nothing was moved" }
      end
    end
    local ok, err = fs.mkdir_p(vim.fs.dirname(dst))
    if not ok then
      return { success = false, error = err }
    end
    local renamed, rerr, code = vim.uv.fs_rename(src, dst)
    if not renamed then
      local why = code == "EXDEV" and "they are on different file systems" or rerr
      return { success = false, error = ("cannot move %s to %s: %s"):format(input.source, input.destination, why) }
    end
    backup.record(
      "move",
      ("Moved %s to %s"):format(input.source, input.destination),
      { { path = dst, copy = copy or false, moved_from = src } },
      ctx.__filename
    )
    local out = ("Moved %s to %s."):format(input.source, input.destination)
    if copy then
      out = out
        .. (" The replaced file is kept in %s: to undo, move %s back and that copy to %s."):format(
          copy,
          input.destination,
          input.destination
        )
    else
      out = out .. (" To undo, move it back to %s."):format(input.source)
    end
    return { success = true, output = out .. " Or: :Flemma tool:undo." }
  end,
}
