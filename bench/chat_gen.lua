-- Generates long .chat conversations for the benchmarks: every line distinct,
-- assistant prose with nested code fences (a ````markdown block holding a
-- ```lua block), two tool uses per assistant turn and their two results in the
-- @You: message that follows. The last turn ends with two pending placeholders,
-- so an opened chat has tool previews to draw.
--   require("bench.chat_gen").generate(bytes) -> lines, { tools, bytes, turns }
local M = {}

local WORDS = {
  "parser",
  "buffer",
  "message",
  "fence",
  "marker",
  "placeholder",
  "preview",
  "cycle",
  "result",
  "approval",
  "sandbox",
  "process",
  "stream",
  "extmark",
  "window",
  "scroll",
  "native",
  "handle",
  "region",
  "state",
  "append",
  "delete",
  "insert",
  "undo",
}

-- One prose line, distinct through (turn, line).
local function prose(turn, line)
  local w = {}
  for j = 1, 9 do
    w[j] = WORDS[((turn * 31 + line * 17 + j * 7) % #WORDS) + 1]
  end
  return ("Turn %d, line %d: the %s."):format(turn, line, table.concat(w, " "))
end

--- About `bytes` bytes of conversation (lines joined by "\n").
---@param bytes integer
---@return string[] lines
---@return { tools: integer, bytes: integer, turns: integer }
function M.generate(bytes)
  local lines, size = {}, 0
  local function add(l)
    lines[#lines + 1] = l
    size = size + #l + 1
  end
  add("@System:")
  add("You are a careful assistant working on a large repository.")
  add("")
  add("@You:")
  add("Look around the repository and fix every failing test, one module at a time.")
  add("")
  local turn, tools = 0, 0
  local function assistant(t, last)
    local a, b = ("toolu_%06d_a"):format(t), ("toolu_%06d_b"):format(t)
    add("@Assistant:")
    for i = 1, 4 do
      add(prose(t, i))
    end
    add("")
    add("````markdown")
    add(("## Plan for step %d"):format(t))
    add("")
    add("```lua")
    for i = 1, 4 do
      add(("local value_%d_%d = compute(%d, %q) -- step %d"):format(t, i, t * i, "key" .. i, t))
    end
    add("```")
    add("````")
    add("")
    add(prose(t, 5))
    add("")
    add(("**Tool Use:** `bash` (`%s`)"):format(a))
    add("")
    add("```json")
    add(('{"command":"grep -rn \\"pattern_%d\\" src/ | head -20","label":"search %d","timeout":30}'):format(t, t))
    add("```")
    add("")
    add(("**Tool Use:** `read` (`%s`)"):format(b))
    add("")
    add("```json")
    add(('{"path":"src/module_%d/init.lua","offset":%d,"limit":40}'):format(t, t % 50))
    add("```")
    add("")
    add("@You:")
    tools = tools + 2
    if last then
      add(("**Tool Result:** `%s`"):format(a))
      add("")
      add("```flemma:tool status=pending")
      add("```")
      add("")
      add(("**Tool Result:** `%s`"):format(b))
      add("")
      add("```flemma:tool status=pending")
      add("```")
      return
    end
    add(("**Tool Result:** `%s`"):format(a))
    add("")
    add("```")
    for i = 1, 5 do
      add(("src/module_%d/file_%d.lua:%d:  local pattern_%d = require('m%d')"):format(t, i, i * 11, t, i))
    end
    add("```")
    add("")
    add(("**Tool Result:** `%s`"):format(b))
    add("")
    add("```")
    for i = 1, 5 do
      add(("%d  local function helper_%d_%d(x) return x + %d end"):format(i, t, i, i))
    end
    add("```")
    add("")
    add(("Thanks; step %d looks right, keep going with the next module."):format(t))
    add("")
  end
  while size < bytes do
    turn = turn + 1
    assistant(turn, false)
  end
  turn = turn + 1
  assistant(turn, true)
  return lines, { tools = tools, bytes = size, turns = turn }
end

--- Writes lines to path, one per line.
function M.write(path, lines)
  local f = assert(io.open(path, "wb"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end

return M
