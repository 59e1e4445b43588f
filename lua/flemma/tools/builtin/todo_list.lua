--- The task list of the `todo` tool (`:help flemma-tools-todo`): its text form in the
--- chat, one item a line inside the result block of a `todo` write (a fenced block
--- whose info string is `flemma:todo`), how that text is read back and counted, and
--- where a buffer's current list is: the last such block of a `todo` call's result.
---
---   - [ ] Write the parser (#1)        pending
---   - [~] Add the tests (#2)           in progress
---   - [x] Update the docs (#3)         completed
---
--- The buffer is the truth: what the user changed in that block by hand is the list.
--- Model text never makes such a block: a result block only follows a
--- `**Tool Result:**` line, which streamed text cannot write (the writer escapes it,
--- and a fence with a `flemma:` info string, `:help flemma-escaping`).
local session = require("flemma.core.session")

local M = {}
local H = {}

--- The info string of the list's block (a result block of a `todo` write).
M.INFO = "flemma:todo"
--- The tool's name: only the result of a call of this tool holds the list.
M.TOOL = "todo"

-- Bounds: items in a list, characters in an item, characters in an id.
M.MAX_ITEMS = 100
M.MAX_CONTENT = 500
M.MAX_ID = 64

M.STATUSES = { "pending", "in_progress", "completed" }
H.box_of = { pending = " ", in_progress = "~", completed = "x" }
H.status_of = { [" "] = "pending", ["~"] = "in_progress", x = "completed", X = "completed" }
H.ID_PATTERN = "^[%w_%.%-]+$"

---@class flemma.todo.Item
---@field content string
---@field status "pending"|"in_progress"|"completed"
---@field id? string

-- A line cut to 60 characters, for a message.
function H.quote(s)
  if vim.fn.strchars(s) > 60 then
    s = vim.fn.strcharpart(s, 0, 60) .. "…"
  end
  return vim.inspect(s)
end

--- Checks the `todos` of a write; returns the items (ids given to those without one:
--- the smallest whole number not taken) or nil and one line saying what is wrong.
---@param todos any
---@return flemma.todo.Item[]|nil
---@return string|nil err
function M.check(todos)
  if todos == nil or todos == vim.NIL then
    return nil, '`todos` is missing: a write gives the whole list ({ action = "write", todos = { ... } })'
  end
  if type(todos) ~= "table" or (next(todos) ~= nil and not vim.islist(todos)) then
    return nil, "`todos` should be a list of { content, status, id } items"
  end
  if #todos > M.MAX_ITEMS then
    return nil, ("`todos` holds %d items; at most %d"):format(#todos, M.MAX_ITEMS)
  end
  local items, taken = {}, {}
  for i, t in ipairs(todos) do
    local where = ("`todos[%d]`"):format(i)
    if type(t) ~= "table" then
      return nil, where .. " should be an object { content, status, id }"
    end
    local content = t.content
    if type(content) ~= "string" or vim.trim(content) == "" then
      return nil, where .. ".content should be a non-empty string"
    end
    if content:find("%c") then
      return nil, where .. ".content holds a line break or another control character: one line per item"
    end
    content = vim.trim(content)
    if vim.fn.strchars(content) > M.MAX_CONTENT then
      return nil,
        ("%s.content is %d characters long; at most %d"):format(where, vim.fn.strchars(content), M.MAX_CONTENT)
    end
    if not H.box_of[t.status] then
      return nil,
        ("%s.status should be one of pending, in_progress, completed, not %s"):format(where, vim.inspect(t.status))
    end
    local id = t.id
    if id == vim.NIL then
      id = nil
    end
    if id ~= nil then
      if type(id) ~= "string" or #id > M.MAX_ID or not id:find(H.ID_PATTERN) then
        return nil,
          ("%s.id should be up to %d letters, digits, `_`, `-` or `.`, not %s"):format(where, M.MAX_ID, vim.inspect(id))
      end
      if taken[id] then
        return nil, ("%s.id %s is used twice: ids name one item each"):format(where, vim.inspect(id))
      end
      taken[id] = true
    end
    items[i] = { content = content, status = t.status, id = id }
  end
  local n = 0
  for _, item in ipairs(items) do
    if item.id == nil then
      repeat
        n = n + 1
      until not taken[tostring(n)]
      item.id = tostring(n)
      taken[item.id] = true
    end
  end
  return items
end

--- The text of a list: one `- [ ] content (#id)` line per item ("" for none).
---@param items flemma.todo.Item[]
---@return string
function M.render(items)
  local lines = {}
  for i, item in ipairs(items) do
    local line = ("- [%s] %s"):format(H.box_of[item.status], item.content)
    if item.id then
      line = line .. (" (#%s)"):format(item.id)
    end
    lines[i] = line
  end
  return table.concat(lines, "\n")
end

--- Reads the text of a list block back: the items, or nil and one line naming the
--- first line that is not an item. Blank lines are skipped.
---@param text string
---@return flemma.todo.Item[]|nil
---@return string|nil err
function M.parse(text)
  local items, n, lnum = {}, 0, 0
  for line in ((text or "") .. "\n"):gmatch("([^\n]*)\n") do
    lnum = lnum + 1
    if line:find("%S") then
      local box, rest = line:match("^%s*[-*]%s+%[(.)%]%s+(.-)%s*$")
      local status = box and H.status_of[box]
      if not status or rest == "" then
        return nil,
          ("line %d of the list is not an item (write `- [ ] text`, `- [~] text` or `- [x] text`): %s"):format(
            lnum,
            H.quote(line)
          )
      end
      local content, id = rest:match("^(.-)%s+%(#([%w_%.%-]+)%)$")
      if not content or content == "" or #id > M.MAX_ID then
        content, id = rest, nil
      end
      n = n + 1
      if n > M.MAX_ITEMS then
        return nil, ("the list holds more than %d items"):format(M.MAX_ITEMS)
      end
      if vim.fn.strchars(content) > M.MAX_CONTENT then
        return nil, ("item %d of the list is longer than %d characters"):format(n, M.MAX_CONTENT)
      end
      items[n] = { content = content, status = status, id = id }
    end
  end
  return items
end

--- How many items have each status: { pending, in_progress, completed }.
---@param items flemma.todo.Item[]
---@return { pending: integer, in_progress: integer, completed: integer }
function M.counts(items)
  local c = { pending = 0, in_progress = 0, completed = 0 }
  for _, item in ipairs(items) do
    c[item.status] = c[item.status] + 1
  end
  return c
end

--- The counts as one line: "3 pending · 1 in progress · 2 done".
---@param items flemma.todo.Item[]
---@return string
function M.summary(items)
  local c = M.counts(items)
  return ("%d pending · %d in progress · %d done"):format(c.pending, c.in_progress, c.completed)
end

--- Whether a tool_result part is a list block: the successful result of a `todo`
--- call (`uses` maps ids to tool_use parts) whose fence says `flemma:todo`.
---@param part flemma.document.Part
---@param uses table<string, flemma.document.Part>
---@return boolean
function M.is_list(part, uses)
  if part.kind ~= "tool_result" or part.info ~= M.INFO or part.status ~= nil or part.is_error then
    return false
  end
  local use = uses[part.id]
  return use ~= nil and use.name == M.TOOL
end

--- The current list of a parsed document: the last list block (see M.is_list), or
--- nil when there is none.
---@param doc flemma.document.Doc
---@return flemma.document.Part|nil
function M.current(doc)
  local uses = {}
  for _, msg in ipairs(doc.messages) do
    for _, part in ipairs(msg.parts) do
      if part.kind == "tool_use" then
        uses[part.id] = part
      end
    end
  end
  for m = #doc.messages, 1, -1 do
    local parts = doc.messages[m].parts
    for k = #parts, 1, -1 do
      if M.is_list(parts[k], uses) then
        return parts[k]
      end
    end
  end
  return nil
end

--- Notes a list a `todo` write returned, for a read started before the cycle writes
--- its block (calls of one turn start together, their results are written after):
--- kept in the chat's session record with the buffer's changedtick, and good only
--- while the buffer has not changed since. Never instead of the buffer.
---@param bufnr integer
---@param items flemma.todo.Item[]
function M.remember(bufnr, items)
  session.get(bufnr).todo = { tick = vim.api.nvim_buf_get_changedtick(bufnr), items = items }
end

--- The list a read sees: the items of the document's current list, or of a write
--- whose block is not written yet (M.remember); nil and a message when the list
--- cannot be read, nil, nil, true when there is none.
---@param bufnr integer
---@param doc flemma.document.Doc
---@return flemma.todo.Item[]|nil
---@return string|nil err
---@return boolean|nil none
function M.read(bufnr, doc)
  local noted = session.field(bufnr, "todo")
  if noted then
    if noted.tick == vim.api.nvim_buf_get_changedtick(bufnr) then
      return vim.deepcopy(noted.items)
    end
    session.set(bufnr, "todo", nil) -- the buffer changed since: it says
  end
  local part = M.current(doc)
  if not part then
    return nil, nil, true
  end
  local items, err = M.parse(part.content)
  if not items then
    return nil, ("the list (line %d) cannot be read: %s"):format(part.fence_line or part.first_line, err)
  end
  return items
end

return M
