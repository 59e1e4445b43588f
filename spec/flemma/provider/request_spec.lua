-- The request of one buffer as a state machine (flemma.provider.request): the states
-- it passes, in order, against the loopback server with real curl, and what ending it
-- in each state leaves.
local helpers = require("spec.support.helpers")
local provider = require("flemma.provider")
local secrets = require("flemma.policy.secrets")

local KEY = "sk-request-spec-" .. tostring(math.random(1e9))

local request = { messages = { { role = "user", parts = { { kind = "text", text = "Hello" } } } } }

describe("the request state machine", function()
  local h, server, asked
  before_each(function()
    secrets._reset()
    vim.env.FLEMMA_SPEC_UNSET_KEY = nil
    h = helpers.send_harness({})
    server = h.server
    asked = 0
    -- A resolver that answers after 150 ms (as the keyring or gcloud do).
    secrets.register("spec_slow", {
      priority = 1000,
      resolve = function(_, cb)
        asked = asked + 1
        vim.defer_fn(function()
          cb(KEY)
        end, 150)
      end,
    })
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_UNSET_KEY" },
      },
      parameters = { max_retries = 2, cache_retention = "none", timeout = 30 },
    })
  end)
  after_each(function()
    secrets.unregister("spec_slow")
    secrets._reset()
    h.teardown()
  end)

  -- Sends and records every state the request is seen in until it finishes.
  local function run(buf)
    local res
    provider.send(buf, request, function(r)
      res = r
    end)
    local states = {}
    local ok = vim.wait(15000, function()
      local info = provider.active(buf)
      local state = info and info.state or "finished"
      if states[#states] ~= state then
        states[#states + 1] = state
      end
      return res ~= nil and info == nil
    end, 1)
    assert.is_true(ok, "the request never finished: " .. table.concat(states, " -> "))
    return res, states
  end

  it("passes resolving_key, attempting, waiting_retry, attempting again, streaming and finished, in order", function()
    server:script({
      {
        status = 503,
        headers = { ["retry-after-ms"] = "300" },
        body = '{"type":"error","error":{"type":"api_error","message":"unavailable"}}',
      },
      { fixture = "anthropic_text.sse", delay_ms = 80 },
    })
    local buf = helpers.buffer({ "@You:", "Hello" })
    local res, states = run(buf)
    assert.equals("completed", res.status, res.error)
    assert.same(
      { "resolving_key", "attempting", "waiting_retry", "attempting", "streaming", "finished" },
      states,
      table.concat(states, " -> ")
    )
    assert.equals(1, asked)
    local reqs = server:requests()
    assert.equals(2, #reqs)
    assert.equals(KEY, reqs[1].headers["x-api-key"])
    assert.equals(KEY, reqs[2].headers["x-api-key"])
    assert.is_false(provider.is_active(buf))
  end)

  it("cancels while the key is looked up when the buffer is unloaded: nothing is sent", function()
    server:script({ { fixture = "anthropic_text.sse" } })
    local buf = helpers.buffer({ "@You:", "Hello" })
    local res
    provider.send(buf, request, function(r)
      res = r
    end)
    assert.equals("resolving_key", provider.active(buf).state)
    assert.is_nil(provider.active(buf).pid)
    vim.api.nvim_buf_delete(buf, { force = true })
    assert.same({ status = "cancelled" }, res)
    assert.is_false(provider.is_active(buf))
    -- The resolver answers later: no request starts.
    vim.wait(400)
    assert.equals(1, asked)
    assert.equals(0, #server:requests())
    assert.is_nil(provider.active(buf))
  end)
end)
