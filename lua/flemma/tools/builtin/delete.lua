--- The `delete` tool: removes one file, symbolic link (not what it points to) or
--- empty folder. A file is backed up first (flemma.tools.builtin.backup); the
--- result says where the copy is. Refused outside the sandbox's writable paths
--- while the sandbox is on. Never approved by the presets: it waits for the user.
local backup = require("flemma.tools.builtin.backup")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "delete",
  description = "Delete one file, symbolic link or empty folder (never a folder with content). A file "
    .. "is backed up first and the result says where. Relative paths are resolved against the chat "
    .. "file's directory.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file, link or empty folder to delete" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { { path = input.path, write = true } }
  end,
  format_preview = function(input)
    return preview.with_comment(input.path or "?", input.label)
  end,
  execute = function(input, ctx)
    local path = ctx.path.resolve(input.path)
    local st = vim.uv.fs_lstat(path)
    if not st then
      return { success = false, error = ("not found: %s"):format(input.path) }
    end
    -- The folder the entry is removed from, and (but for a link) the entry itself.
    if
      not ctx.sandbox.is_path_writable(vim.fs.dirname(path))
      or (st.type ~= "link" and not ctx.sandbox.is_path_writable(path))
    then
      return {
        success = false,
        error = ("sandbox: %s is outside the writable paths (or turn the sandbox off with :Flemma sandbox:disable)"):format(
          input.path
        ),
      }
    end
    if st.type == "directory" then
      local ok, err = vim.uv.fs_rmdir(path)
      if not ok then
        return {
          success = false,
          error = ("cannot delete the folder %s: %s (only empty folders are deleted)"):format(input.path, err),
        }
      end
      return { success = true, output = ("Deleted the empty folder %s."):format(input.path) }
    end
    if st.type ~= "file" and st.type ~= "link" then
      return {
        success = false,
        error = ("%s is a %s: only files, links and empty folders are deleted"):format(input.path, st.type),
      }
    end
    local copy, berr
    if st.type == "file" then
      copy, berr = backup.save(path)
      if not copy then
        return { success = false, error = berr .. "; nothing was deleted" }
      end
    end
    local ok, err = vim.uv.fs_unlink(path)
    if not ok then
      return { success = false, error = ("cannot delete %s: %s"):format(input.path, err) }
    end
    if copy then
      backup.record("delete", ("Deleted %s"):format(input.path), { { path = path, copy = copy } }, ctx.__filename)
    end
    if st.type == "link" then
      return {
        success = true,
        output = ("Deleted the symbolic link %s (what it pointed to is untouched)."):format(input.path),
      }
    end
    return {
      success = true,
      output = ("Deleted %s (%s). A copy is kept in %s: to undo, move it back with the move tool, or :Flemma tool:undo."):format(
        input.path,
        ctx.truncate.format_size(st.size),
        copy
      ),
    }
  end,
}
