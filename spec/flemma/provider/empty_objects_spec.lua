-- Issue 24 §13: a nested empty `properties = {}` in a tool's schema went out as
-- `"properties": []` (llama-server answers 400). Every empty object of every tool
-- schema and tool call input is encoded as `{}`, an empty array stays `[]`, for all
-- four provider kinds: <C-]> in a real chat, real curl, and the exact JSON the
-- loopback server received (its empty objects and arrays told apart when decoded).
local helpers = require("spec.support.helpers")

local KEY = "sk-empty-" .. tostring(math.random(1e9))

--- The JSON text of a decoded value with sorted keys: an empty object (a decoded
--- `{}` keeps a metatable) prints as {}, an empty array as [].
local function canon(v)
  if type(v) ~= "table" then
    return vim.json.encode(v)
  end
  if next(v) == nil then
    return getmetatable(v) ~= nil and "{}" or "[]"
  end
  if vim.islist(v) then
    return "[" .. table.concat(vim.tbl_map(canon, v), ",") .. "]"
  end
  local keys = vim.tbl_keys(v)
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    out[#out + 1] = vim.json.encode(k) .. ":" .. canon(v[k])
  end
  return "{" .. table.concat(out, ",") .. "}"
end

-- What a Lua tool definition holds: empty tables that are objects (a schema, the
-- `properties` of an object without any, `additionalProperties`, `$defs`) and one
-- that is an array (`required`).
local function schema()
  return {
    type = "object",
    properties = {
      options = { type = "object", properties = {} },
      filter = {
        type = "object",
        properties = { where = { type = "object", properties = {}, additionalProperties = {} } },
        required = {},
      },
      tags = { type = "array", items = {} },
      choice = { anyOf = { { type = "object", properties = {} }, { type = "null" } } },
      mode = { type = "object", default = {} },
    },
    ["$defs"] = { empty = { type = "object", properties = {} } },
    required = { "options" },
  }
end

local SCHEMA_JSON = '{"$defs":{"empty":{"properties":{},"type":"object"}},"properties":{'
  .. '"choice":{"anyOf":[{"properties":{},"type":"object"},{"type":"null"}]},'
  .. '"filter":{"properties":{"where":{"additionalProperties":{},"properties":{},"type":"object"}},"required":[],"type":"object"},'
  .. '"mode":{"default":{},"type":"object"},'
  .. '"options":{"properties":{},"type":"object"},'
  .. '"tags":{"items":{},"type":"array"}},'
  .. '"required":["options"],"type":"object"}'

local INPUT_JSON = '{"filter":{"where":{}},"options":{},"tags":[]}'

local kinds = {
  anthropic = {
    path = "/v1/messages",
    answer = { fixture = "anthropic_text.sse" },
    schema = function(j)
      for _, t in ipairs(j.tools) do
        if t.name == "nested" then
          return t.input_schema
        end
      end
    end,
    input = function(j)
      for _, m in ipairs(j.messages) do
        for _, c in ipairs(type(m.content) == "table" and m.content or {}) do
          if c.type == "tool_use" then
            return c.input
          end
        end
      end
    end,
  },
  openai = {
    path = "/v1/responses",
    answer = { body = helpers.sse_body("responses_reasoning_text.http"), content_type = "text/event-stream" },
    schema = function(j)
      for _, t in ipairs(j.tools) do
        if t.name == "nested" then
          return t.parameters
        end
      end
    end,
    input = function(j)
      for _, item in ipairs(j.input) do
        if item.type == "function_call" then
          return vim.json.decode(item.arguments)
        end
      end
    end,
  },
  openai_chat = {
    path = "/v1/chat/completions",
    model = "local-model",
    answer = { fixture = "openai_chat_text.sse" },
    schema = function(j)
      for _, t in ipairs(j.tools) do
        if t["function"].name == "nested" then
          return t["function"].parameters
        end
      end
    end,
    input = function(j)
      for _, m in ipairs(j.messages) do
        if m.tool_calls then
          return vim.json.decode(m.tool_calls[1]["function"].arguments)
        end
      end
    end,
  },
  vertex = {
    path = "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse",
    answer = { body = helpers.sse_body("vertex_thinking_text.http"), content_type = "text/event-stream" },
    schema = function(j)
      for _, d in ipairs(j.tools[1].functionDeclarations) do
        if d.name == "nested" then
          return d.parametersJsonSchema
        end
      end
    end,
    input = function(j)
      for _, c in ipairs(j.contents) do
        for _, p in ipairs(c.parts) do
          if p.functionCall then
            return p.functionCall.args
          end
        end
      end
    end,
  },
}

describe("empty objects in tool schemas and inputs", function()
  local h
  before_each(function()
    h = helpers.send_harness({ key = KEY })
  end)
  after_each(function()
    require("flemma.tools").unregister("nested")
    h.teardown()
  end)

  for _, kind in ipairs({ "anthropic", "openai", "openai_chat", "vertex" }) do
    it("are sent as {} to " .. kind, function()
      local k = kinds[kind]
      require("flemma").setup({
        provider = "test",
        providers = {
          test = { kind = kind, endpoint = h.server:url(k.path), api_key_env = "FLEMMA_SPEC_KEY", model = k.model },
        },
        parameters = { max_retries = 0, cache_retention = "none", vertex = { project_id = "proj-1" } },
        tools = { autopilot = { enabled = false } },
      })
      require("flemma.tools").register("nested", {
        name = "nested",
        description = "takes nested options",
        input_schema = schema(),
        execute = function()
          return { success = true, output = "ok" }
        end,
      })
      h.server:script({ k.answer })
      helpers.open_chat({
        "@You:",
        "Go.",
        "",
        "@Assistant:",
        "**Tool Use:** `nested` (`call_1`)",
        "",
        "```json",
        INPUT_JSON,
        "```",
        "",
        "@You:",
        "**Tool Result:** `call_1`",
        "",
        "```",
        "ok",
        "```",
      })
      helpers.press("<C-]>")
      h.wait_finished(1)
      local reqs = h.server:requests()
      assert.equals(1, #reqs, vim.inspect(h.notes))
      local j = assert(reqs[1].json, reqs[1].body)
      assert.equals(SCHEMA_JSON, canon(k.schema(j)))
      assert.equals(INPUT_JSON, canon(k.input(j)))
      -- Every built-in tool's schema too: no empty array where an object belongs.
      assert.is_nil(reqs[1].body:find('"properties":%[%]'), reqs[1].body)
    end)
  end
end)
