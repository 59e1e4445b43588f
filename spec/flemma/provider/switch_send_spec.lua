-- One conversation sent to openai (Responses), then vertex (Gemini), then anthropic,
-- switched with :Flemma switch between turns: real curl against the loopback server
-- replaying the decoder fixtures; the buffer keeps every provider's thinking with its
-- own signature and every tool pair, and each request carries only its own signatures.
local helpers = require("spec.support.helpers")
local provider = require("flemma.provider")
local document = require("flemma.chat.document")

local KEY = "sk-switch-" .. tostring(math.random(1e9))

local sse_body = helpers.sse_body

local text = helpers.text

local function send(buf)
  local res
  provider.send(buf, document.to_messages(document.get(buf)), function(r)
    res = r
  end)
  helpers.wait_for(function()
    return res ~= nil
  end, 15000, "the request never finished")
  return res
end

local function append(buf, lines)
  local n = vim.api.nvim_buf_line_count(buf)
  vim.api.nvim_buf_set_lines(buf, n, n, false, lines)
end

describe("a conversation switched between providers mid-file", function()
  local h, server
  before_each(function()
    require("flemma.provider.usage")._reset()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    require("flemma").setup({
      provider = "oai",
      parameters = { cache_retention = "none", max_retries = 0, timeout = 30, vertex = { project_id = "proj-1" } },
      providers = {
        oai = { kind = "openai", endpoint = server:url("/v1/responses"), api_key_env = "FLEMMA_SPEC_KEY" },
        gem = {
          kind = "vertex",
          endpoint = server:url(
            "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse"
          ),
          api_key_env = "FLEMMA_SPEC_KEY",
        },
        ant = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      tools = { autopilot = { enabled = false } },
    })
  end)
  after_each(function()
    h.teardown()
  end)

  it("round-trips thinking and tool pairs from openai to vertex to anthropic", function()
    local buf = helpers.edit(helpers.tmpdir() .. "/switch.chat", { "@You:", "Hello" })

    -- 1. openai (Responses API)
    server:script({
      {
        body = sse_body("responses_reasoning_text.http"),
        content_type = "text/event-stream",
        chunk_seed = 4,
        max_chunk = 9,
      },
    })
    assert.equals("completed", send(buf).status)
    local t = text(buf)
    assert.truthy(
      t:find(
        '<thinking openai:signature="gAAAAABpENCRYPTEDxyz==">\n**Plan**\nGreet briefly.\n\nMention wörld.\n</thinking>',
        1,
        true
      ),
      t
    )
    assert.truthy(t:find("Hello, wörld ✓.", 1, true), t)
    local req = server:requests()[1]
    assert.equals("/v1/responses", req.path)
    assert.equals("Bearer " .. KEY, req.headers["authorization"])
    assert.is_false(req.json.store)
    assert.same({ { role = "user", content = "Hello" } }, req.json.input)

    -- 2. vertex (Gemini), after :Flemma switch
    vim.cmd("Flemma switch gem gemini-2.5-flash")
    append(buf, { "Read a.txt and list files." })
    server:script({
      {
        body = sse_body("vertex_function_calls.http"),
        content_type = "text/event-stream",
        chunk_seed = 5,
        max_chunk = 11,
      },
    })
    assert.equals("completed", send(buf).status)
    t = text(buf)
    assert.truthy(t:find('<thinking vertex:signature="CiQB0SIG-call==">', 1, true), t)
    assert.truthy(t:find("**Tool Use:** `read` (`gemini_resp-gem-01_1`)", 1, true), t)
    assert.truthy(t:find("**Tool Use:** `bash` (`gemini_resp-gem-01_2`)", 1, true), t)
    req = server:requests()[1]
    assert.equals(
      "/v1/projects/proj-1/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent",
      req.path:gsub("%?.*", "")
    )
    local wire = vim.json.encode(req.json)
    assert.is_nil(wire:find("gAAAAABpENCRYPTEDxyz", 1, true), "openai's signature went to vertex")
    assert.same(
      { text = "<thinking>\n**Plan**\nGreet briefly.\n\nMention wörld.\n</thinking>" },
      req.json.contents[2].parts[1]
    )

    -- 3. the tool results, then anthropic
    append(buf, {
      "**Tool Result:** `gemini_resp-gem-01_1`",
      "",
      "```",
      "hello",
      "```",
      "",
      "**Tool Result:** `gemini_resp-gem-01_2`",
      "",
      "```",
      "a.txt",
      "```",
    })
    vim.cmd("Flemma switch ant")
    server:script({ { fixture = "anthropic_text.sse" } })
    assert.equals("completed", send(buf).status)
    req = server:requests()[1]
    assert.equals("/v1/messages", req.path)
    wire = vim.json.encode(req.json)
    assert.is_nil(wire:find("CiQB0SIG", 1, true), "vertex's signature went to anthropic")
    assert.is_nil(wire:find("gAAAAABpENCRYPTEDxyz", 1, true), "openai's signature went to anthropic")
    local uses, results = {}, {}
    for _, m in ipairs(req.json.messages) do
      for _, b in ipairs(m.content) do
        if b.type == "tool_use" then
          uses[#uses + 1] = b.id
        elseif b.type == "tool_result" then
          results[#results + 1] = b.tool_use_id
        end
      end
    end
    assert.same({ "gemini_resp-gem-01_1", "gemini_resp-gem-01_2" }, uses)
    assert.same(uses, results)
    -- usage of all three, per provider and model
    local by = require("flemma.provider.usage").by_model()
    local names = vim.tbl_map(function(u)
      return u.provider .. " " .. u.model
    end, by)
    assert.same({ "ant claude-sonnet-4-6", "gem gemini-3.1-pro-preview", "oai gpt-5.4-2026-03-05" }, names)
  end)
end)
