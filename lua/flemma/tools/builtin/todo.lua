--- The `todo` tool: the model keeps a task list in the chat (`:help flemma-tools-todo`).
--- `{ action = "write", todos = { { content, status, id }, ... } }` replaces the list:
--- its result is the list's block (info string `flemma:todo`, one `- [ ] text (#id)`
--- line per item), written into the chat by the cycle as every result is.
--- `{ action = "read" }` returns the current list, the last such block, with the
--- user's own changes to it, and its counts. It touches no file and nothing but the
--- chat's own list.
local list = require("flemma.tools.builtin.todo_list")
local preview = require("flemma.tools.preview")

local H = {}

function H.write(input, ctx)
  local items, err = list.check(input.todos)
  if not items then
    return { success = false, error = err }
  end
  list.remember(ctx.bufnr, items)
  return { success = true, output = list.render(items), info = list.INFO }
end

function H.read(input, ctx)
  if input.todos ~= nil then
    return { success = false, error = '`todos` is only given with action = "write"; a read takes none' }
  end
  local doc = require("flemma.chat.document").get(ctx.bufnr)
  local items, err, none = list.read(ctx.bufnr, doc)
  if none then
    return { success = true, output = 'There is no list yet: write one with action = "write".' }
  end
  if not items then
    return { success = false, error = err }
  end
  if #items == 0 then
    return { success = true, output = "The list is empty." }
  end
  return { success = true, output = list.summary(items) .. "\n\n" .. list.render(items) }
end

---@type flemma.tools.Definition
return {
  name = "todo",
  description = 'Keep a task list for this chat. action = "write" replaces the whole list with `todos` '
    .. "(each { content: one line, status: pending | in_progress | completed, id: a short name or null }); "
    .. 'action = "read" returns the current list, including changes the user made to it by hand. '
    .. ("At most %d items of %d characters. Keep one item in_progress at a time and mark items completed "):format(
      list.MAX_ITEMS,
      list.MAX_CONTENT
    )
    .. "as soon as they are done.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      action = { type = "string", enum = { "read", "write" }, description = "read the list, or write (replace) it" },
      todos = {
        type = { "array", "null" },
        description = "write: the whole new list, in order (null for read)",
        items = {
          type = "object",
          properties = {
            content = { type = "string", description = "The task, one line" },
            status = { type = "string", enum = list.STATUSES },
            id = { type = { "string", "null" }, description = "A short name for the item (null: a number is given)" },
          },
          required = { "content", "status", "id" },
          additionalProperties = false,
        },
      },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "action", "todos", "label" },
    additionalProperties = false,
  },
  format_preview = function(input)
    if input.action ~= "write" then
      return preview.with_comment("read the list", input.label)
    end
    local todos = type(input.todos) == "table" and input.todos or {}
    local items = {}
    for _, t in ipairs(todos) do
      if type(t) == "table" and vim.tbl_contains(list.STATUSES, t.status) then
        items[#items + 1] = { status = t.status, content = "" }
      end
    end
    return preview.with_comment(("write %d item(s): %s"):format(#todos, list.summary(items)), input.label)
  end,
  execute = function(input, ctx)
    if input.action == "write" then
      return H.write(input, ctx)
    elseif input.action == "read" then
      return H.read(input, ctx)
    end
    return {
      success = false,
      error = ('`action` should be "read" or "write", not %s'):format(vim.inspect(input.action)),
    }
  end,
}
