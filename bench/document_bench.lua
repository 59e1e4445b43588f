-- Parsing a .chat document into the Lua model (flemma.document.parse), from a
-- list of lines as nvim_buf_get_lines returns them. The conversation is
-- generated: rounds of assistant prose with a code block and a tool use, then
-- a @You: message with the tool's result. The note splits one run into its
-- stages; "FFI" is the share spent reading the native items into Lua tables.
local document = require("flemma.document")
local native = require("flemma.native")

local H = {}

local words = {
  "the", "parser", "reads", "every", "line", "once", "and", "jumps", "over", "closed",
  "fences", "so", "that", "large", "buffers", "stay", "fast", "while", "tools", "run",
}

function H.prose(seed, n)
  local out = {}
  for i = 1, n do
    local w = {}
    for j = 1, 10 do
      w[j] = words[((seed * 7 + i * 13 + j * 3) % #words) + 1]
    end
    out[i] = table.concat(w, " ") .. "."
  end
  return out
end

--- About `bytes` bytes of conversation, in rounds of ~50 lines with one tool
--- use and its result each.
function H.generate(bytes)
  local lines = {}
  local size = 0
  local function add(l)
    lines[#lines + 1] = l
    size = size + #l + 1
  end
  add("@System:")
  add("You are a careful assistant.")
  add("")
  add("@You:")
  add("Look around the repository and fix the failing test.")
  add("")
  local round = 0
  local tools = 0
  while size < bytes do
    round = round + 1
    local id = ("toolu_%06d"):format(round)
    add("@Assistant:")
    for _, l in ipairs(H.prose(round, 8)) do
      add(l)
    end
    add("")
    add("```lua")
    for i = 1, 8 do
      add(("local value_%d = compute(%d, %q) -- step %d"):format(i, round * i, "key" .. i, i))
    end
    add("```")
    add("")
    add(("**Tool Use:** `bash` (`%s`)"):format(id))
    add("")
    add("```json")
    add(('{"command":"grep -rn \\"pattern_%d\\" src/ | head -20","label":"search %d","timeout":30}'):format(round, round))
    add("```")
    add("")
    add("@You:")
    add(("**Tool Result:** `%s`"):format(id))
    add("")
    add("```")
    for i = 1, 20 do
      add(("src/module_%d/file_%d.lua:%d:  local pattern_%d = require('x')"):format(round % 97, i, i * 11, round))
    end
    add("```")
    add("")
    tools = tools + 1
  end
  return lines, tools, size
end

H.cases = {}

function H.case(name, bytes, target)
  local state = {}
  return {
    name = name,
    unit = "ms",
    target = target,
    op = "<=",
    runs = 11,
    warmup = 2,
    setup = function()
      state.lines, state.tools, state.size = H.generate(bytes)
    end,
    teardown = function()
      -- One instrumented run for the note: stages timed separately.
      local lines = state.lines
      local lib = native.lib()
      local t0 = vim.uv.hrtime()
      local text = table.concat(lines, "\n")
      local t1 = vim.uv.hrtime()
      local doc = lib.flemma_doc_new(text, #text)
      lib.flemma_doc_free(doc)
      local t2 = vim.uv.hrtime()
      local raw = native.parse_document(text)
      local t3 = vim.uv.hrtime()
      local inputs = #raw.tool_uses
      local t4 = vim.uv.hrtime()
      local model = document.parse_text(text)
      local t5 = vim.uv.hrtime()
      local parse_only = t2 - t1
      local convert = (t3 - t2) - parse_only
      local decode = (t5 - t4) - (t3 - t2)
      local total = (t1 - t0) + (t5 - t4)
      state.note = (
        "%.1f MB, %d lines, %d tool uses, %d messages; concat %.1f ms, native parse %.1f ms, FFI items->tables %.1f ms (%.0f%% of %.1f ms), JSON decode %.1f ms"
      ):format(
        state.size / 1e6,
        #lines,
        inputs,
        #model.messages,
        (t1 - t0) / 1e6,
        parse_only / 1e6,
        convert / 1e6,
        100 * convert / total,
        total / 1e6,
        decode / 1e6
      )
      assert(inputs == state.tools, "every generated tool use is parsed")
      state.lines = nil
      collectgarbage()
    end,
    run = function()
      local t0 = vim.uv.hrtime()
      local doc = document.parse(state.lines)
      local dt = (vim.uv.hrtime() - t0) / 1e6
      assert(#doc.messages > 0)
      return dt
    end,
    note = function()
      return state.note or ""
    end,
  }
end

return {
  H.case("document_parse_10mb", 10 * 1000 * 1000, 40),
  H.case("document_parse_1mb", 1000 * 1000, 4),
}
