--- The `glob` tool: files whose path matches a glob, newest first (see files.lua).
local files = require("flemma.tools.builtin.files")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "glob",
  description = "List files whose path matches a glob (`**/*.lua`, `src/**/*.ts`; a pattern without `/` "
    .. "such as `*.md` matches file names at any depth), newest first, at most max_results (default 100). "
    .. "Skips hidden, .gitignore'd and build or dependency folders (node_modules, .git, build, target, ...). "
    .. "`path` is the folder to search (default: the chat's folder).",
  strict = true,
  async = true,
  input_schema = {
    type = "object",
    properties = {
      pattern = { type = "string", description = "The glob, e.g. `**/*.lua`" },
      path = { type = { "string", "null" }, description = "Folder to search (default: the chat's folder)" },
      max_results = { type = { "integer", "null" }, description = "Most files to list (default 100, at most 1000)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "pattern", "path", "max_results", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { input.path or "." }
  end,
  format_preview = function(input)
    return preview.with_comment((input.pattern or "?") .. " in " .. (input.path or "."), input.label)
  end,
  execute = function(input, ctx, callback)
    return files.execute("glob", input, ctx, callback)
  end,
}
