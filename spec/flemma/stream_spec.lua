local native = require("flemma.core.native")
local helpers = require("spec.support.helpers")

local FIXTURES = FLEMMA_ROOT .. "/spec/fixtures/stream/"

local function fixture(name)
  local s = helpers.read_file(FIXTURES .. name)
  assert(s, "missing fixture " .. name)
  return s
end

local function kind_of(name)
  if name:match("^responses") then
    return "openai"
  elseif name:match("^vertex") then
    return "vertex"
  end
  return name:match("^openai") and "openai_chat" or "anthropic"
end

-- All events of bytes fed in pieces of `size` bytes (all at once when nil).
local function decode(kind, bytes, size)
  local dec = assert(native.stream_new(kind))
  local events = {}
  local step = size or math.max(#bytes, 1)
  for pos = 1, #bytes, step do
    vim.list_extend(events, dec:feed(bytes:sub(pos, pos + step - 1)))
  end
  vim.list_extend(events, dec:finish())
  return events
end

local function of_type(events, t)
  return vim.tbl_filter(function(e)
    return e.type == t
  end, events)
end

describe("flemma.core.native stream", function()
  describe("stream_new", function()
    it("returns nil and a message naming the known kinds for an unknown kind", function()
      local dec, err = native.stream_new("gemini")
      assert.is_nil(dec)
      assert.matches("unknown kind `gemini`", err)
      assert.matches("openai_chat", err)
    end)

    it("refuses to feed a finished decoder", function()
      local dec = assert(native.stream_new("anthropic"))
      local events = dec:finish()
      assert.same({ { type = "end", complete = false } }, events)
      local ok, err = pcall(dec.feed, dec, "x")
      assert.is_false(ok)
      assert.matches("already finished", err)
    end)
  end)

  describe("feed", function()
    it("decodes an Anthropic stream with parallel tool use into the event tables", function()
      local events = decode("anthropic", fixture("anthropic_tool_use.http"))
      assert.equal("http", events[1].type)
      assert.equal(200, events[1].status)
      assert.equal("text/event-stream; charset=utf-8", events[1].headers["content-type"])
      assert.equal("req_011CSHoEeqs5C35K2UUqR7Fy", events[1].headers["request-id"])
      table.remove(events, 1)
      assert.same({
        { type = "message_start", id = "msg_014p7gG3wDgGV9EUtLvnow3U", model = "claude-sonnet-4-6" },
        { type = "usage", input_tokens = 472, output_tokens = 1, cache_read_tokens = 2048, cache_write_tokens = 1024 },
        { type = "text", index = 0, text = "I will check both files." },
        { type = "tool_use_start", index = 1, id = "toolu_01T1x1fJ34qAmk2tNTrN7Up6", name = "read" },
        { type = "tool_input_delta", index = 1, json = '{"path":' },
        { type = "tool_input_delta", index = 1, json = ' "READ' },
        { type = "tool_input_delta", index = 1, json = 'ME.md"}' },
        { type = "tool_use_stop", index = 1 },
        { type = "tool_use_start", index = 2, id = "toolu_01VgQeZ1FQ5vDd6Wr3mE2abc", name = "bash" },
        { type = "tool_input_delta", index = 2, json = '{"comm' },
        { type = "tool_input_delta", index = 2, json = 'and": "ls -la \\"src\\""' },
        { type = "tool_input_delta", index = 2, json = "}" },
        { type = "tool_use_stop", index = 2 },
        { type = "usage", output_tokens = 89 },
        { type = "stop", reason = "tool_use" },
        { type = "end", complete = true },
      }, events)
    end)

    it("decodes thinking with its signature and redacted thinking", function()
      local events = decode("anthropic", fixture("anthropic_redacted_thinking.http"))
      assert.same({
        type = "redacted_thinking",
        index = 0,
        data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
      }, events[4])
      assert.same({ type = "thinking", index = 1, text = "Continuing." }, events[5])
      assert.same({ type = "thinking_signature", index = 1, signature = "sig-2" }, events[6])
    end)

    it("decodes OpenAI tool calls interleaved by index, usage and [DONE]", function()
      local events = decode("openai_chat", fixture("openai_tool_calls.http"))
      table.remove(events, 1)
      assert.same({
        { type = "message_start", id = "chatcmpl-ToolCalls01", model = "gpt-4o-mini-2024-07-18" },
        { type = "tool_use_start", index = 0, id = "call_abc123", name = "read" },
        { type = "tool_use_start", index = 1, id = "call_def456", name = "bash" },
        { type = "tool_input_delta", index = 0, json = '{"path": ' },
        { type = "tool_input_delta", index = 1, json = '{"command"' },
        { type = "tool_input_delta", index = 0, json = '"a.txt"}' },
        { type = "tool_input_delta", index = 1, json = ': "pwd"}' },
        { type = "tool_use_stop", index = 0 },
        { type = "tool_use_stop", index = 1 },
        { type = "stop", reason = "tool_calls" },
        { type = "usage", input_tokens = 82, output_tokens = 41, cache_read_tokens = 64 },
        { type = "end", complete = true },
      }, events)
    end)

    it("reports an error body with the provider's message and keeps the body", function()
      local events = decode("anthropic", fixture("anthropic_rate_limit.http"))
      assert.equal(429, events[1].status)
      assert.equal("3", events[1].headers["retry-after"])
      assert.same({
        type = "error",
        error_type = "rate_limit_error",
        message = "Number of request tokens has exceeded your per-minute rate limit",
      }, events[2])
      assert.is_false(events[3].complete)
      assert.matches('^{"type":"error"', events[3].body)
    end)

    it("keeps an HTML error page as the body of an incomplete end", function()
      local events = decode("anthropic", fixture("html_bad_gateway.http"))
      assert.equal(2, #events)
      assert.equal(502, events[1].status)
      assert.equal("end", events[2].type)
      assert.is_false(events[2].complete)
      assert.matches("<h1>502 Bad Gateway</h1>", events[2].body)
    end)

    it("marks a truncated stream incomplete and keeps what arrived", function()
      local events = decode("anthropic", fixture("anthropic_truncated.http"))
      assert.same({ type = "text", index = 0, text = "The first part" }, events[#events - 1])
      assert.same({ type = "end", complete = false }, events[#events])
    end)

    it("gives the same events for every fixture fed one byte at a time", function()
      for _, name in ipairs(vim.fn.readdir(FIXTURES)) do
        if name:match("%.http$") or name:match("%.sse$") then
          local bytes = fixture(name)
          local whole = decode(kind_of(name), bytes)
          assert.same(whole, decode(kind_of(name), bytes, 1), name)
          assert.same(whole, decode(kind_of(name), bytes, 7), name)
          assert.equal("end", whole[#whole].type, name)
        end
      end
    end)

    it("never splits a UTF-8 sequence in a text when the bytes are split inside it", function()
      local bytes = fixture("anthropic_text.http")
      local texts = {}
      for _, e in ipairs(of_type(decode("anthropic", bytes, 1), "text")) do
        texts[#texts + 1] = e.text
      end
      assert.same(
        { "Hello", '! Here is "a quote"', " and a newline:\n", "café, naïve, 日本語", " 🌍 done." },
        texts
      )
    end)
  end)

  describe("process.spawn with a decoder", function()
    local process = require("flemma.core.process")

    after_each(function()
      helpers.cleanup()
    end)

    -- Merges consecutive deltas of one block, as the native batches do.
    local function coalesce(events)
      local out = {}
      local fields = { text = "text", thinking = "text", tool_input_delta = "json" }
      for _, e in ipairs(events) do
        local last = out[#out]
        local f = fields[e.type]
        if f and last and last.type == e.type and last.index == e.index then
          last[f] = last[f] .. e[f]
        else
          out[#out + 1] = vim.deepcopy(e)
        end
      end
      return out
    end

    local function run(opts)
      local log, batches, result = {}, 0, nil
      opts.on_events = function(events)
        assert.is_nil(result, "events after on_exit")
        batches = batches + 1
        vim.list_extend(log, events)
      end
      local h = process.spawn(opts, function(r)
        result = r
      end)
      return h,
        function()
          helpers.wait_for(function()
            return result ~= nil
          end, 10000, "the process did not finish")
          return log, result, batches
        end,
        log
    end

    it("delivers a child's decoded stdout in order, in batches, all before on_exit", function()
      for _, name in ipairs({ "anthropic_tool_use.http", "anthropic_thinking.http", "openai_tool_calls.http" }) do
        local path = FIXTURES .. name
        local _, wait = run({
          cmd = { "bash", "-c", 'head -c 400 "$1"; sleep 0.1; tail -c +401 "$1"; echo done >&2', "-", path },
          decoder = kind_of(name),
        })
        local log, result, batches = wait()
        assert.same(coalesce(decode(kind_of(name), fixture(name))), coalesce(log), name)
        assert.is_true(batches >= 2, name)
        assert.equal("end", log[#log].type)
        assert.is_true(log[#log].complete)
        assert.equal(0, result.code)
        assert.equal("done\n", result.stderr)
        assert.equal("", result.output)
        assert.equal(#fixture(name), result.total_bytes)
      end
    end)

    it("hands a long answer over in slices of whole UTF-8 characters, in order, before on_exit", function()
      -- 1.5 MB of text in 2 KB deltas of 1-, 2-, 3- and 4-byte characters, written at once.
      local piece = string.rep("aé日🌍", 205) -- 2,050 bytes
      local http = {
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        'event: message_start\ndata: {"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":1,"output_tokens":1}}}\n\n',
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
      }
      local n = 750
      for _ = 1, n do
        http[#http + 1] = 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"'
          .. piece
          .. '"}}\n\n'
      end
      http[#http + 1] = 'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
      http[#http + 1] =
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}\n\n'
      http[#http + 1] = 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
      local path = helpers.tmpdir() .. "/long.http"
      helpers.write_file(path, table.concat(http))
      local _, wait = run({ cmd = { "cat", path }, decoder = "anthropic" })
      -- The main loop busy meanwhile: the whole answer is decoded before Lua takes any.
      vim.uv.sleep(500)
      local log, result, batches = wait()
      assert.equal(0, result.code)
      local texts = of_type(log, "text")
      assert.equal(
        string.rep(piece, n),
        table.concat(vim.tbl_map(function(e)
          return e.text
        end, texts))
      )
      -- At most 64 KB of text per turn of the loop (flemma.process): 1.5 MB in 24 or more.
      assert.is_true(batches >= 24, "batches: " .. batches)
      for i, e in ipairs(texts) do
        assert.is_true(#e.text <= 64 * 1024, "text event " .. i .. " has " .. #e.text .. " bytes")
        assert.is_nil(e.text:find("^[\128-\191]"), "text event " .. i .. " starts inside a character")
        local lead, cont = e.text:match("([\192-\255])([\128-\191]*)$")
        if lead then
          local want = lead:byte() >= 240 and 3 or lead:byte() >= 224 and 2 or 1
          assert.equal(want, #cont, "text event " .. i .. " ends inside a character")
        end
      end
      assert.same({ "stop", "end" }, { log[#log - 1].type, log[#log].type })
    end)

    it("ends a cancelled stream with an incomplete end event, then on_exit", function()
      local h, wait, live = run({
        cmd = { "bash", "-c", 'head -c 1100 "$1"; exec sleep 30', "-", FIXTURES .. "anthropic_text.http" },
        decoder = "anthropic",
      })
      helpers.wait_for(function()
        return #of_type(live, "text") > 0
      end, 10000, "no text arrived before the cancel")
      h:cancel()
      local log, result = wait()
      assert.is_true(result.cancelled)
      assert.equal("http", log[1].type)
      assert.equal("Hello", of_type(log, "text")[1].text:sub(1, 5))
      assert.same({ type = "end", complete = false }, log[#log])
    end)

    it("refuses a decoder without on_events, with merged output, or of an unknown kind", function()
      local function err(opts)
        local ok, e = pcall(process.spawn, opts, function() end)
        assert.is_false(ok)
        return e
      end
      assert.matches("`decoder` needs `on_events`", err({ cmd = { "true" }, decoder = "anthropic" }))
      assert.matches(
        "leave `merge_output` unset",
        err({ cmd = { "true" }, decoder = "anthropic", on_events = function() end, merge_output = true })
      )
      assert.matches(
        "unknown decoder `gemini`",
        err({ cmd = { "true" }, decoder = "gemini", on_events = function() end })
      )
    end)
  end)
end)
