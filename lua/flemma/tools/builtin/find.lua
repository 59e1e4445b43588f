--- The `find` tool: files and folders whose name matches a glob, newest first
--- (see files.lua).
local files = require("flemma.tools.builtin.files")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "find",
  description = "Find files and folders by name: `pattern` is a glob on the name (`*.lua`, `Makefile`, "
    .. '`test_*`), at any depth under `path` (default: the chat\'s folder); `type` is "file" or '
    .. '"directory" (default both). Newest first, at most max_results (default 100). Skips hidden, '
    .. ".gitignore'd and build or dependency folders.",
  strict = true,
  async = true,
  input_schema = {
    type = "object",
    properties = {
      pattern = { type = "string", description = "A glob on the name, e.g. `*.lua`" },
      path = { type = { "string", "null" }, description = "Folder to search (default: the chat's folder)" },
      type = {
        type = { "string", "null" },
        enum = { "file", "directory", vim.NIL },
        description = '"file" or "directory" (default: both)',
      },
      max_results = { type = { "integer", "null" }, description = "Most entries to list (default 100, at most 1000)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "pattern", "path", "type", "max_results", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { input.path or "." }
  end,
  format_preview = function(input)
    local s = (input.pattern or "?") .. " in " .. (input.path or ".")
    if input.type then
      s = s .. " (" .. input.type .. ")"
    end
    return preview.with_comment(s, input.label)
  end,
  execute = function(input, ctx, callback)
    return files.execute("find", input, ctx, callback)
  end,
}
