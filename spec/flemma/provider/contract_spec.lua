-- The provider contract (flemma.provider.Kind): every kind module is a table of the
-- same fields, and every kind's conversation is encoded by the shared per-message
-- cache of flemma.provider.encode exactly as its build() builds it.
local document = require("flemma.chat.document")
local provider = require("flemma.provider")
local kinds = require("flemma.provider.kinds")

local KINDS = { "anthropic", "openai", "openai_chat", "vertex" }

local ENDPOINTS = {
  anthropic = "http://127.0.0.1:1/v1/messages",
  openai = "http://127.0.0.1:1/v1/responses",
  openai_chat = "https://api.openai.com/v1/chat/completions", -- takes PDF files
  vertex = "http://127.0.0.1:1/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
}

local TOOLS = {
  { name = "bash", description = "Runs a command.", input_schema = { type = "object", properties = {} } },
}

-- Messages of every role and part: text, thinking of each provider (signed, redacted,
-- unsigned), tool uses and their results (a vertex result names its function from
-- the use before it), an error result, an empty message.
local POOL = {
  "@System:",
  "You are terse.",
  "@You:",
  "List the files.",
  "@Assistant:",
  '<thinking anthropic:signature="ANTH-SIG==">',
  "Two calls.",
  "</thinking>",
  "",
  "Both.",
  "",
  "**Tool Use:** `bash` (`toolu_01`)",
  "",
  "```json",
  '{ "command": "ls" }',
  "```",
  "",
  "**Tool Use:** `read` (`toolu_02`)",
  "",
  "```json",
  "{}",
  "```",
  "@You:",
  "**Tool Result:** `toolu_01`",
  "",
  "```",
  "a.txt",
  "```",
  "",
  "**Tool Result:** `toolu_02` (error)",
  "",
  "```",
  "no such file",
  "```",
  "@Assistant:",
  '<thinking openai:signature="gAAAA-ENC">',
  "Look at a.txt.",
  "</thinking>",
  "",
  "**Tool Use:** `read` (`call_A1`)",
  "",
  "```json",
  '{ "path": "a.txt" }',
  "```",
  "@You:",
  "**Tool Result:** `call_A1`",
  "",
  "```",
  "hello",
  "```",
  "@Assistant:",
  '<thinking vertex:signature="VTX-SIG">',
  "Done reading.",
  "</thinking>",
  "",
  "It says hello.",
  "@Assistant:",
  "<thinking>",
  "unsigned thoughts",
  "</thinking>",
  "",
  "<thinking redacted>",
  "UkVEQUNURUQ=",
  "</thinking>",
  "@You:",
  "one",
  "@You:",
  "two",
  "@Assistant:",
  "",
  "@System:",
  "Be brief.",
}

local function spec_of(kind)
  return { name = "t_" .. kind, kind = kind, endpoint = ENDPOINTS[kind], model = "gemini-2.5-pro" }
end

-- The body build() makes of the messages (through document.to_messages), decoded.
local function built(kind, msgs, params)
  local full =
    provider.context(spec_of(kind), document.to_messages({ messages = msgs }), { parameters = params, tools = TOOLS })
  return vim.json.decode(vim.json.encode((provider.build(full))))
end

-- The body encoded from the document's messages (the send path), decoded.
local function encoded(kind, msgs, params)
  local ctx = provider.context(
    spec_of(kind),
    { system = document.to_messages({ messages = msgs }).system, messages = {} },
    { parameters = params, tools = TOOLS }
  )
  ctx.doc_messages = msgs
  return vim.json.decode((provider.encode(ctx))), ctx
end

describe("the provider contract", function()
  it("is one table of the same fields in every kind module", function()
    local schema = require("flemma.isolated.schema")
    local paths = {}
    for _, e in ipairs(schema.OPTIONS) do
      if type(e) == "table" and e.path then
        paths[e.path] = true
      end
    end
    local native = require("flemma.core.native")
    for _, name in ipairs(KINDS) do
      local k = assert(kinds.get(name))
      assert.equals(name, k.kind)
      assert.is_string(k.stream, name)
      assert.truthy(native.stream_new(k.stream), name .. ": the native decoder has no " .. tostring(k.stream))
      assert.is_string(k.key.header, name)
      assert.is_function(k.endpoint, name)
      assert.is_table(k.parameters, name)
      for _, p in ipairs(k.parameters) do
        assert.is_true(
          paths["parameters." .. p] == true,
          name .. ": parameters." .. p .. " is not in the option schema"
        )
      end
      assert.is_true(k.counter == false or type(k.counter) == "table", name)
      if k.counter then
        assert.is_function(k.counter.endpoint, name)
        assert.is_function(k.counter.body, name)
        assert.is_function(k.counter.tokens, name)
      end
      assert.is_string(k.conversation.field, name)
      assert.is_function(k.conversation.items, name)
      assert.is_function(k.build, name)
      assert.is_function(k.error_message, name)
      assert.is_function(k.normalize_usage, name)
    end
  end)

  it("encodes a changed conversation of every kind exactly as build does, from the shared cache", function()
    local pool = document.parse(POOL).messages
    for _, kind in ipairs(KINDS) do
      math.randomseed(11)
      local msgs = vim.list_extend({}, pool)
      for step = 1, 80 do
        local r = math.random(4)
        local at = math.random(1, #msgs + 1)
        if r == 1 and #msgs > 1 then
          table.remove(msgs, math.min(at, #msgs))
        elseif r == 2 then
          table.insert(msgs, at, pool[math.random(#pool)])
        elseif r == 3 and #msgs > 0 then
          msgs[math.min(at, #msgs)] = pool[math.random(#pool)]
        end -- else: the same messages again
        local params = {
          cache_retention = ({ "none", "short" })[step % 2 + 1],
          thinking_foreign = ({ "text", "preserve", "drop" })[step % 3 + 1],
        }
        local list = vim.list_extend({}, msgs)
        assert.same(built(kind, list, params), (encoded(kind, list, params)), kind .. " step " .. step)
      end
    end
  end)

  it("encodes an unchanged message once, and again when what it looked up changed", function()
    for _, kind in ipairs(KINDS) do
      local conv = kinds.get(kind).conversation
      local items = conv.items
      local calls = 0
      conv.items = function(...)
        calls = calls + 1
        return items(...)
      end
      local ok, err = pcall(function()
        local msgs = document.parse(POOL).messages
        local params = { cache_retention = "none" }
        encoded(kind, msgs, params) -- fresh tables: one encode of the whole request
        encoded(kind, msgs, params) -- per message, cached
        local want = built(kind, msgs, params)
        calls = 0
        assert.same(want, (encoded(kind, msgs, params)))
        assert.equals(0, calls, kind .. ": unchanged messages encoded again")
        -- One message added at the end: only it is encoded.
        local more = vim.list_extend({}, msgs)
        more[#more + 1] = document.parse({ "@You:", "three" }).messages[1]
        want = built(kind, more, params)
        calls = 0
        assert.same(want, (encoded(kind, more, params)))
        assert.equals(1, calls, kind)
        -- Another thinking_foreign changes every message's items.
        calls = 0
        encoded(kind, more, { cache_retention = "none", thinking_foreign = "drop" })
        assert.is_true(calls > 1, kind)
        -- The tool use a result names is replaced: the result is encoded again.
        local renamed = vim.list_extend({}, msgs)
        local at
        for i, m in ipairs(renamed) do
          if m.role == "assistant" and not at then
            at = i
          end
        end
        local changed = vim.deepcopy(renamed[at])
        for _, p in ipairs(changed.parts) do
          if p.kind == "tool_use" and p.id == "toolu_01" then
            p.name = "shell"
          end
        end
        renamed[at] = changed
        want = built(kind, renamed, params)
        assert.same(want, (encoded(kind, renamed, params)), kind)
        if kind == "vertex" then
          local named
          for _, turn in ipairs(want.contents) do
            for _, part in ipairs(turn.parts) do
              if part.functionResponse and part.functionResponse.id == "toolu_01" then
                named = part.functionResponse.name
              end
            end
          end
          assert.equals("shell", named)
        end
      end)
      conv.items = items
      assert(ok, err)
    end
  end)
end)
