--- The `ls` tool: the entries of one folder with their type and size, folders
--- first, then by name; hidden entries on request. Symbolic links are shown with
--- their target, never followed.
local preview = require("flemma.tools.preview")

local H = {}

H.MAX_ENTRIES = 1000

H.TYPES = { directory = "dir", file = "file", link = "link" }

---@type flemma.tools.Definition
return {
  name = "ls",
  description = "List one folder (default: the chat's folder): each entry with its type (dir, file, link, "
    .. "other) and size, folders first. Hidden entries (names starting with `.`) only with hidden = true. "
    .. "Symbolic links show their target.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = { "string", "null" }, description = "The folder to list (default: the chat's folder)" },
      hidden = { type = { "boolean", "null" }, description = "Also list hidden entries" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "hidden", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { input.path or "." }
  end,
  format_preview = function(input)
    return preview.with_comment((input.path or ".") .. (input.hidden and " (with hidden)" or ""), input.label)
  end,
  execute = function(input, ctx)
    local path = ctx.path.resolve(input.path or ".")
    local st = vim.uv.fs_stat(path)
    if not st then
      return { success = false, error = ("not found: %s"):format(input.path or path) }
    end
    if st.type ~= "directory" then
      return { success = false, error = ("%s is not a folder (read it with the read tool)"):format(input.path or path) }
    end
    local handle, err = vim.uv.fs_scandir(path)
    if not handle then
      return { success = false, error = ("cannot list %s: %s"):format(input.path or path, err) }
    end
    local entries, hidden_count = {}, 0
    while true do
      local name = vim.uv.fs_scandir_next(handle)
      if not name then
        break
      end
      if name:sub(1, 1) == "." and not input.hidden then
        hidden_count = hidden_count + 1
      else
        local full = path .. "/" .. name
        local lst = vim.uv.fs_lstat(full)
        local kind = lst and (H.TYPES[lst.type] or "other") or "other"
        local e = { name = name, kind = kind, size = lst and lst.size or 0 }
        if kind == "link" then
          e.target = vim.uv.fs_readlink(full) or "?"
          local tst = vim.uv.fs_stat(full)
          e.to_dir = tst and tst.type == "directory"
        end
        entries[#entries + 1] = e
      end
    end
    table.sort(entries, function(a, b)
      local da, db = a.kind == "dir", b.kind == "dir"
      if da ~= db then
        return da
      end
      local la, lb = a.name:lower(), b.name:lower()
      if la ~= lb then
        return la < lb
      end
      return a.name < b.name
    end)
    local out = {}
    local dirs, filesn = 0, 0
    for i, e in ipairs(entries) do
      if e.kind == "dir" then
        dirs = dirs + 1
      else
        filesn = filesn + 1
      end
      if i <= H.MAX_ENTRIES then
        local size = e.kind == "file" and ctx.truncate.format_size(e.size) or "-"
        local name = e.name .. (e.kind == "dir" and "/" or "")
        if e.kind == "link" then
          name = name .. " -> " .. e.target .. (e.to_dir and "/" or "")
        end
        out[#out + 1] = ("%-5s %8s  %s"):format(e.kind, size, name)
      end
    end
    local shown = require("flemma.tools.builtin.search").display(path, ctx)
    local head = ("%s: %d folder%s, %d other entr%s"):format(
      shown,
      dirs,
      dirs == 1 and "" or "s",
      filesn,
      filesn == 1 and "y" or "ies"
    )
    if hidden_count > 0 then
      head = head .. (" (%d hidden not shown: hidden = true lists them)"):format(hidden_count)
    end
    local text = head .. (#out > 0 and ("\n" .. table.concat(out, "\n")) or "\n(empty)")
    if #entries > H.MAX_ENTRIES then
      text = text .. ("\n\n[%d more entries not shown; narrow with glob or find.]"):format(#entries - H.MAX_ENTRIES)
    end
    return { success = true, output = text }
  end,
}
