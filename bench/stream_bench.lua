-- Decoding a 50 MB Anthropic stream, as curl --dump-header - prints it (a
-- header block, then SSE): a recorded-style answer with thinking, long prose in
-- text deltas of a few words (some non-ASCII, some escapes), pings and tool uses
-- with input JSON deltas. Fed in 64 KiB pieces (curl's read size); rates over CPU time:
--   stream_decode_c_api  the C API alone (flemma_stream_feed called through the
--                        FFI on slices of one buffer; the events are counted)
--   stream_decode_lua    native.stream_new():feed(), events as Lua tables
local ffi = require("ffi")
local native = require("flemma.core.native")

local H = {}
local SIZE = 50 * 1024 * 1024
local CHUNK = 64 * 1024

local words = {
  "the",
  "decoder",
  "reads",
  "each",
  "line",
  "once",
  "and",
  "hands",
  "events",
  "to",
  "Lua",
  "in",
  "batches",
  "so",
  "that",
  "long",
  "answers",
  "stream",
  "without",
  "stalls",
  "café",
  "naïve",
  "日本語",
  "→",
  "“quoted”",
  "\\n",
  '\\"x\\"',
  "self.value",
  "x = 1;",
  "🌍",
}

function H.event(name, json)
  return "event: " .. name .. "\ndata: " .. json .. "\n\n"
end

function H.generate()
  local parts = {
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n"
      .. "request-id: req_011CSHoEeqs5C35K2UUqR7Fy\r\nconnection: close\r\n\r\n",
    H.event(
      "message_start",
      '{"type":"message_start","message":{"id":"msg_01Bench","type":"message","role":"assistant","content":[],'
        .. '"model":"claude-sonnet-4-6","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,'
        .. '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}'
    ),
  }
  local size = #parts[1] + #parts[2]
  local function add(s)
    parts[#parts + 1] = s
    size = size + #s
  end
  local block, seed = 0, 1
  local function rnd(n)
    seed = (seed * 1103515245 + 12345) % 2147483648
    return seed % n
  end
  local function phrase()
    local w = {}
    for i = 1, 2 + rnd(5) do
      w[i] = words[1 + rnd(#words)]
    end
    return " " .. table.concat(w, " ")
  end
  while size < SIZE do
    -- A thinking block, a long text block, a tool use: one "turn" of ~60 KB.
    add(
      H.event(
        "content_block_start",
        ('{"type":"content_block_start","index":%d,"content_block":{"type":"thinking","thinking":""}}'):format(block)
      )
    )
    for _ = 1, 60 do
      add(
        H.event(
          "content_block_delta",
          ('{"type":"content_block_delta","index":%d,"delta":{"type":"thinking_delta","thinking":"%s"}}'):format(
            block,
            phrase()
          )
        )
      )
    end
    add(
      H.event(
        "content_block_delta",
        ('{"type":"content_block_delta","index":%d,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}'):format(
          block
        )
      )
    )
    add(H.event("content_block_stop", ('{"type":"content_block_stop","index":%d}'):format(block)))
    block = block + 1
    add(
      H.event(
        "content_block_start",
        ('{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}'):format(block)
      )
    )
    for i = 1, 400 do
      add(
        H.event(
          "content_block_delta",
          ('{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"%s"}}'):format(
            block,
            phrase()
          )
        )
      )
      if i % 100 == 0 then
        add(H.event("ping", '{"type": "ping"}'))
      end
    end
    add(H.event("content_block_stop", ('{"type":"content_block_stop","index":%d}'):format(block)))
    block = block + 1
    add(
      H.event(
        "content_block_start",
        ('{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":"toolu_01Bench%06d","name":"bash","input":{}}}'):format(
          block,
          block
        )
      )
    )
    for _ = 1, 20 do
      add(
        H.event(
          "content_block_delta",
          ('{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":"{\\"command\\": \\"echo %s\\"}"}}'):format(
            block,
            rnd(100000)
          )
        )
      )
    end
    add(H.event("content_block_stop", ('{"type":"content_block_stop","index":%d}'):format(block)))
    block = block + 1
  end
  add(
    H.event(
      "message_delta",
      '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5000000}}'
    )
  )
  add(H.event("message_stop", '{"type":"message_stop"}'))
  return table.concat(parts)
end

H.data = nil
function H.setup()
  H.data = H.data or H.generate()
end

local function mb_per_s(bytes, ns)
  return bytes / (1024 * 1024) / (ns / 1e9)
end

-- CPU time of this process in ns. The rates are taken over CPU time: the VM's 2
-- cores are shared by several developers' builds and tests, so wall time mostly
-- measures the neighbours. The note gives the wall-clock median too.
local function cpu_ns()
  local r = vim.uv.getrusage()
  return (r.utime.sec + r.stime.sec) * 1e9 + (r.utime.usec + r.stime.usec) * 1e3
end

local function median(xs)
  local t = vim.deepcopy(xs)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)] or 0
end

H.wall = { c = {}, lua = {} }
local function note(which)
  return function()
    local m = median(H.wall[which])
    H.wall[which] = {}
    return ("wall clock: %.0f MB/s median (CPU time measured; the machine's cores are shared)"):format(m)
  end
end

local list = {
  {
    name = "stream_decode_c_api",
    unit = "MB/s",
    target = 500,
    op = ">=",
    runs = 7,
    setup = H.setup,
    note = note("c"),
    run = function()
      local lib = native.lib()
      local data = H.data
      local base = ffi.cast("const char *", data)
      local out = ffi.new("const flemma_stream_event *[1]")
      local count = ffi.new("size_t[1]")
      local s = lib.flemma_stream_new("anthropic")
      local n = 0
      local t0, c0 = vim.uv.hrtime(), cpu_ns()
      for pos = 0, #data - 1, CHUNK do
        assert(lib.flemma_stream_feed(s, base + pos, math.min(CHUNK, #data - pos), out, count) == 0)
        n = n + tonumber(count[0])
      end
      assert(lib.flemma_stream_finish(s, out, count) == 0)
      local ns = cpu_ns() - c0
      table.insert(H.wall.c, mb_per_s(#data, vim.uv.hrtime() - t0))
      assert(out[0][tonumber(count[0]) - 1].status == 1, "the stream did not decode to its end")
      lib.flemma_stream_free(s)
      assert(n > 100000)
      return mb_per_s(#data, ns)
    end,
  },
  {
    -- Uncoalesced: one Lua table per SSE event. The target keeps the decode of
    -- one 64 KiB read under 10% of a 16 ms frame (through the process manager
    -- the batches are coalesced, so Lua sees far fewer tables).
    name = "stream_decode_lua",
    unit = "MB/s",
    target = 40,
    op = ">=",
    runs = 5,
    setup = H.setup,
    note = note("lua"),
    teardown = function()
      H.data = nil
      collectgarbage()
    end,
    run = function()
      local data = H.data
      local dec = native.stream_new("anthropic")
      local n = 0
      local t0, c0 = vim.uv.hrtime(), cpu_ns()
      for pos = 1, #data, CHUNK do
        n = n + #dec:feed(data:sub(pos, pos + CHUNK - 1))
      end
      local last = dec:finish()
      local ns = cpu_ns() - c0
      table.insert(H.wall.lua, mb_per_s(#data, vim.uv.hrtime() - t0))
      assert(last[#last].complete, "the stream did not decode to its end")
      assert(n > 100000)
      return mb_per_s(#data, ns)
    end,
  },
}
-- The generator, for profiling outside Neovim (not a benchmark: ipairs skips it).
list.generate = H.generate
return list
