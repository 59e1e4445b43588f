-- Parsing a .chat document into the Lua model (flemma.document.parse), from a
-- list of lines as nvim_buf_get_lines returns them. The conversation is
-- generated: rounds of assistant prose with a code block and a tool use, then
-- a @You: message with the tool's result. The note splits runs into their
-- stages; "crossing FFI" is the share spent handing the lines to the native
-- parser and reading its items back into Lua tables.
local document = require("flemma.chat.document")
local native = require("flemma.core.native")

local H = {}

local words = {
  "the",
  "parser",
  "reads",
  "every",
  "line",
  "once",
  "and",
  "jumps",
  "over",
  "closed",
  "fences",
  "so",
  "that",
  "large",
  "buffers",
  "stay",
  "fast",
  "while",
  "tools",
  "run",
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
    add(
      ('{"command":"grep -rn \\"pattern_%d\\" src/ | head -20","label":"search %d","timeout":30}'):format(round, round)
    )
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
      -- Instrumented runs for the note (medians of 5): the stages of
      -- document.parse(lines) timed separately.
      local lines = state.lines
      local lib = native.lib()
      local text = table.concat(lines, "\n")
      local function median(f)
        local xs = {}
        for i = 1, 5 do
          xs[i] = f()
        end
        table.sort(xs)
        return xs[3]
      end
      local function ms(f)
        local t0 = vim.uv.hrtime()
        f()
        return (vim.uv.hrtime() - t0) / 1e6
      end
      local parse_only = median(function()
        return ms(function()
          lib.flemma_doc_free(lib.flemma_doc_new(text, #text))
        end)
      end)
      local raw, stats = nil, {}
      local to_native = median(function()
        raw = native.parse_document(lines, stats)
        return stats.to_native_ms
      end)
      local to_tables = median(function()
        native.parse_document(lines, stats)
        return stats.to_tables_ms
      end)
      local raw_total = median(function()
        return ms(function()
          native.parse_document(lines)
        end)
      end)
      local model
      local total = median(function()
        return ms(function()
          model = document.parse(lines)
        end)
      end)
      local inputs = #raw.tool_uses
      local handover = math.max(0, to_native - parse_only)
      local decode = math.max(0, total - raw_total)
      state.note = ("%.1f MB, %d lines, %d tool uses, %d messages; lines->C (pointer arrays, native join) %.1f ms, native parse %.1f ms, FFI items->tables %.1f ms, JSON decode %.1f ms; crossing FFI %.0f%% of %.1f ms"):format(
        state.size / 1e6,
        #lines,
        inputs,
        #model.messages,
        handover,
        parse_only,
        to_tables,
        decode,
        100 * (handover + to_tables) / total,
        total
      )
      assert(inputs == state.tools, "every generated tool use is parsed")
      state.lines = nil
      collectgarbage()
    end,
    run = function()
      -- The garbage of the generator and of the previous run is collected before the
      -- clock starts: the parse is measured with its own allocations and collections,
      -- not with the leftovers of the benchmark.
      collectgarbage()
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
