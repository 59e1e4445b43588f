-- Issue 24 §12 and §14: how an answer ends. A tool call cut by the output limit
-- (Anthropic `max_tokens`, OpenAI chat `length`, Responses `incomplete` with
-- max_output_tokens) was written with its broken input and every later send was
-- refused; a chat that holds such a call is now sent with its error result. An empty
-- answer left an empty `@Assistant:`, a timeout left no marker, and an HTML page on a
-- wrong port said "try again later". Real buffer, <C-]>, curl and the loopback server.
local helpers = require("spec.support.helpers")

local KEY = "sk-answer-end-" .. tostring(math.random(1e9))

local function sse(events)
  local out = {}
  for _, e in ipairs(events) do
    if e[1] then
      out[#out + 1] = "event: " .. e[1] .. "\n"
    end
    out[#out + 1] = "data: " .. (type(e[2]) == "string" and e[2] or vim.json.encode(e[2])) .. "\n\n"
  end
  return table.concat(out)
end

local PARTIAL = '{"text": "hel'

local kinds = {
  anthropic = {
    path = "/v1/messages",
    cut = function()
      return sse({
        {
          "message_start",
          {
            type = "message_start",
            message = {
              id = "msg_9",
              type = "message",
              role = "assistant",
              model = "claude-sonnet-4-6",
              content = {},
              usage = { input_tokens = 5, output_tokens = 1 },
            },
          },
        },
        {
          "content_block_start",
          { type = "content_block_start", index = 0, content_block = { type = "text", text = "" } },
        },
        {
          "content_block_delta",
          { type = "content_block_delta", index = 0, delta = { type = "text_delta", text = "Let me run it." } },
        },
        { "content_block_stop", { type = "content_block_stop", index = 0 } },
        {
          "content_block_start",
          {
            type = "content_block_start",
            index = 1,
            content_block = { type = "tool_use", id = "toolu_9", name = "echo", input = vim.empty_dict() },
          },
        },
        {
          "content_block_delta",
          { type = "content_block_delta", index = 1, delta = { type = "input_json_delta", partial_json = PARTIAL } },
        },
        { "content_block_stop", { type = "content_block_stop", index = 1 } },
        {
          "message_delta",
          { type = "message_delta", delta = { stop_reason = "max_tokens" }, usage = { output_tokens = 16 } },
        },
        { "message_stop", { type = "message_stop" } },
      })
    end,
  },
  openai_chat = {
    path = "/v1/chat/completions",
    model = "local-model",
    cut = function()
      local function chunk(delta, finish)
        return {
          nil,
          {
            id = "c1",
            object = "chat.completion.chunk",
            choices = { { index = 0, delta = delta, finish_reason = finish } },
          },
        }
      end
      return sse({
        chunk({ role = "assistant", content = "Let me run it." }),
        chunk({
          tool_calls = {
            { index = 0, id = "call_9", type = "function", ["function"] = { name = "echo", arguments = "" } },
          },
        }),
        chunk({ tool_calls = { { index = 0, ["function"] = { arguments = PARTIAL } } } }),
        chunk(vim.empty_dict(), "length"),
        { nil, "[DONE]" },
      })
    end,
  },
  openai = {
    path = "/v1/responses",
    model = "gpt-5",
    cut = function()
      local function ev(t, data)
        data.type = t
        return { t, data }
      end
      return sse({
        ev("response.created", { response = { id = "resp_9", model = "gpt-5" } }),
        ev("response.output_item.added", { output_index = 0, item = { type = "message" } }),
        ev("response.output_text.delta", { output_index = 0, delta = "Let me run it." }),
        ev("response.output_item.done", { output_index = 0, item = { type = "message" } }),
        ev(
          "response.output_item.added",
          { output_index = 1, item = { type = "function_call", call_id = "call_9", name = "echo", arguments = "" } }
        ),
        ev("response.function_call_arguments.delta", { output_index = 1, delta = PARTIAL }),
        ev("response.incomplete", {
          response = {
            id = "resp_9",
            incomplete_details = { reason = "max_output_tokens" },
            usage = { input_tokens = 5, output_tokens = 16 },
          },
        }),
      })
    end,
  },
  vertex = {
    path = "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse",
  },
}

local h

local function setup(kind, params)
  local k = kinds[kind]
  require("flemma").setup({
    provider = "test",
    providers = {
      test = { kind = kind, endpoint = h.server:url(k.path), api_key_env = "FLEMMA_SPEC_KEY", model = k.model },
    },
    parameters = vim.tbl_extend(
      "force",
      { max_retries = 0, cache_retention = "none", vertex = { project_id = "proj-1" } },
      params or {}
    ),
    tools = { autopilot = { enabled = false } },
  })
  require("flemma.tools").register("echo", {
    name = "echo",
    description = "returns its text",
    input_schema = { type = "object", properties = { text = { type = "string" } }, required = { "text" } },
    execute = function(input)
      return { success = true, output = "echo: " .. input.text }
    end,
  })
end

local function errors()
  return vim.tbl_filter(function(n)
    return n.level == vim.log.levels.ERROR
  end, h.notes)
end

describe("an answer", function()
  before_each(function()
    h = helpers.send_harness({ key = KEY })
  end)
  after_each(function()
    require("flemma.tools").unregister("echo")
    h.teardown()
  end)

  for _, kind in ipairs({ "anthropic", "openai_chat", "openai" }) do
    it("whose tool call the output limit cut drops the call and says which limit to raise (" .. kind .. ")", function()
      setup(kind)
      h.server:script({ { body = kinds[kind].cut(), content_type = "text/event-stream", chunk_seed = 3 } })
      local buf = helpers.open_chat({ "@You:", "Go." })
      helpers.press("<C-]>")
      assert.equals("error", h.wait_finished().status)
      assert.equals(
        "@You:\nGo.\n\n@Assistant:\nLet me run it.\n\n"
          .. "<!-- flemma: stopped: the answer hit the output limit; raise parameters.max_tokens -->\n\n@You:\n",
        helpers.text(buf)
      )
      local errs = errors()
      assert.equals(1, #errs, vim.inspect(h.notes))
      assert.truthy(errs[1].msg:find("output limit inside a tool call", 1, true), errs[1].msg)
      assert.truthy(errs[1].msg:find("parameters.max_tokens", 1, true), errs[1].msg)
      -- The chat goes on: the next message is sent.
      h.server:script({ { body = kinds[kind].cut(), content_type = "text/event-stream" } })
      vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "Shorter, please." })
      helpers.press("<C-]>")
      h.wait_finished(2)
      assert.equals(1, #h.server:requests())
    end)
  end

  for _, kind in ipairs({ "anthropic", "openai_chat", "openai", "vertex" }) do
    it(
      "is asked for when the chat holds a tool use with invalid input: it gets an error result (" .. kind .. ")",
      function()
        setup(kind)
        h.server:script({
          {
            body = helpers.sse_body("vertex_thinking_text.http"),
            content_type = "text/event-stream",
          },
        })
        local buf = helpers.open_chat({
          "@You:",
          "Go.",
          "",
          "@Assistant:",
          "**Tool Use:** `echo` (`call_1`)",
          "",
          "```json",
          PARTIAL,
          "```",
        })
        -- Phase 1 answers the call with an error; the send goes on (a second <C-]> at
        -- most, as for any call resolved without running).
        helpers.press("<C-]>")
        if #h.finished == 0 and #h.server:requests() == 0 then
          helpers.wait_for(function()
            return helpers.text(buf):find("**Tool Result:** `call_1` (error)", 1, true) ~= nil
          end, 5000, "no error result")
          helpers.press("<C-]>")
        end
        h.wait_finished(1)
        local reqs = h.server:requests()
        assert.equals(1, #reqs, vim.inspect(h.notes))
        assert.truthy(reqs[1].body:find("not a valid JSON object", 1, true), reqs[1].body)
        for _, n in ipairs(h.notes) do
          assert.is_nil(n.msg:find("is not valid", 1, true), n.msg)
        end
        assert.truthy(helpers.text(buf):find("**Tool Result:** `call_1` (error)", 1, true), helpers.text(buf))
      end
    )
  end

  it("that is empty is removed, with one line saying so", function()
    setup("anthropic")
    h.server:script({
      {
        content_type = "text/event-stream",
        body = sse({
          {
            "message_start",
            {
              type = "message_start",
              message = { id = "m", type = "message", role = "assistant", model = "claude-sonnet-4-6", content = {} },
            },
          },
          {
            "message_delta",
            { type = "message_delta", delta = { stop_reason = "end_turn" }, usage = { output_tokens = 0 } },
          },
          { "message_stop", { type = "message_stop" } },
        }),
      },
    })
    local buf = helpers.open_chat({ "@You:", "Hello" })
    helpers.press("<C-]>")
    assert.equals("error", h.wait_finished().status)
    assert.equals("@You:\nHello", helpers.text(buf))
    local errs = errors()
    assert.equals(1, #errs, vim.inspect(h.notes))
    assert.equals("(flemma) test: the provider sent an empty answer", errs[1].msg)
  end)

  it("cut by parameters.timeout keeps what arrived and is marked as a cancel is", function()
    setup("anthropic", { timeout = 1 })
    local body = helpers.read_file(helpers.root .. "/spec/fixtures/stream/anthropic_text.sse")
    local cut = assert(
      body:find(
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" ends',
        1,
        true
      )
    )
    h.server:script({ { body = body, content_type = "text/event-stream", truncate_at = cut - 1, hang_ms = 4000 } })
    local buf = helpers.open_chat({ "@You:", "Hello" })
    helpers.press("<C-]>")
    assert.equals("error", h.wait_finished(1, 20000).status)
    assert.equals(
      "@You:\nHello\n\n@Assistant:\nHello there, wörld ✓.\nSecond line\n\n<!-- flemma: timed out after 1s -->\n\n@You:\n",
      helpers.text(buf)
    )
    local errs = errors()
    assert.equals(1, #errs, vim.inspect(h.notes))
    assert.truthy(errs[1].msg:find("timed out", 1, true), errs[1].msg)
  end)

  for _, status in ipairs({ 200, 404 }) do
    it(("from a wrong port (an HTML page, HTTP %d) asks whether the endpoint is right"):format(status), function()
      setup("anthropic")
      h.server:script({
        {
          status = status,
          content_type = "text/html",
          body = "<!DOCTYPE html>\n<html><head><title>Directory listing</title></head><body><ul></ul></body></html>\n",
        },
      })
      local buf = helpers.open_chat({ "@You:", "Hello" })
      helpers.press("<C-]>")
      assert.equals("error", h.wait_finished().status)
      assert.equals("@You:\nHello", helpers.text(buf))
      local errs = errors()
      assert.equals(1, #errs, vim.inspect(h.notes))
      assert.equals(
        ('(flemma) test: HTTP %d: the server returned an HTML page ("Directory listing"): is this the right endpoint? (%s)'):format(
          status,
          h.server:url("/v1/messages")
        ),
        errs[1].msg
      )
    end)
  end
end)
