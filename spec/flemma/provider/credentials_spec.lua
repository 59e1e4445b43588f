-- The send path with the credential chain: a fake `secret-tool` on $PATH, real curl
-- against the loopback server; the key must reach the server as a header and never
-- curl's argv, a notification or the log.
local helpers = require("spec.support.helpers")
local provider = require("flemma.provider")
local secrets = require("flemma.policy.secrets")

local KEY1 = "sk-keyring-first-" .. tostring(math.random(1e9))
local KEY2 = "sk-keyring-second-" .. tostring(math.random(1e9))

local saved_path, bin, state, h

local function fake_secret_tool()
  local path = bin .. "/secret-tool"
  helpers.write_file(
    path,
    ([[#!/bin/sh
echo "$*" >> %q/calls
[ -f %q/sleep ] && sleep "$(cat %q/sleep)"
[ -f %q/key ] || { echo "No such secret" >&2; exit 1; }
cat %q/key
]]):format(state, state, state, state, state)
  )
  vim.uv.fs_chmod(path, tonumber("755", 8))
end

local function set_key(k)
  helpers.write_file(state .. "/key", k .. "\n")
end

local function calls()
  local s = helpers.read_file(state .. "/calls")
  return s and #vim.split(vim.trim(s), "\n") or 0
end

local request = { messages = { { role = "user", parts = { { kind = "text", text = "Hello" } } } } }

local function setup(endpoint)
  require("flemma").setup({
    provider = "test",
    providers = { test = { kind = "anthropic", endpoint = endpoint, api_key_env = "FLEMMA_SPEC_UNSET_KEY" } },
    parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
  })
end

local function send(buf)
  local res
  provider.send(buf, request, function(r)
    res = r
  end)
  return function()
    return res
  end
end

-- For before_each: no key in the environment, the fake secret-tool first on $PATH, the
-- send harness (a loopback server unless server = false); no key in a notification.
local function start(server)
  secrets._reset()
  vim.env.FLEMMA_SPEC_UNSET_KEY = nil
  saved_path = vim.env.PATH
  bin, state = helpers.tmpdir(), helpers.tmpdir()
  vim.env.PATH = bin .. ":" .. saved_path
  fake_secret_tool()
  h = helpers.send_harness({ server = server, secrets = { KEY1, KEY2 } })
end

local function stop()
  vim.env.PATH = saved_path
  secrets._reset()
  h.teardown()
end

describe("credentials on the send path", function()
  before_each(function()
    start(false)
  end)
  after_each(stop)

  it("reports every resolver tried, once, and starts no curl when no key is found", function()
    setup("https://flemma.invalid/v1/messages")
    local buf = helpers.buffer({ "@You:", "Hello" })
    local result = send(buf)
    helpers.wait_for(result, 5000)
    local r = result()
    assert.equals("error", r.status)
    assert.truthy(r.error:find("test: no API key found", 1, true), r.error)
    assert.truthy(r.error:find("env: $FLEMMA_SPEC_UNSET_KEY is not set", 1, true), r.error)
    assert.truthy(r.error:find("keyring: secret-tool lookup service test key api: exit 1", 1, true), r.error)
    assert.is_nil(provider.active(buf))
    assert.is_false(provider.is_active(buf))
  end)

  it("is cancellable while a slow resolver runs", function()
    setup("https://flemma.invalid/v1/messages")
    helpers.write_file(state .. "/sleep", "0.5")
    set_key(KEY1)
    local buf = helpers.buffer({ "@You:", "Hello" })
    local result = send(buf)
    assert.is_nil(result())
    assert.is_true(provider.is_active(buf))
    assert.is_true(provider.cancel(buf))
    assert.equals("cancelled", result().status)
    assert.is_false(provider.is_active(buf))
    vim.wait(800)
    assert.is_nil(provider.active(buf), "a request started after the cancel")
  end)
end)

describe("credentials against the loopback server", function()
  local server
  before_each(function()
    start(true)
    server = h.server
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    require("flemma.core.log").enable("debug")
  end)
  after_each(function()
    local log = helpers.read_file(require("flemma.core.log").path()) or ""
    require("flemma.core.log").disable()
    stop()
    assert.is_nil(log:find(KEY1, 1, true), "a key in the log")
    assert.is_nil(log:find(KEY2, 1, true), "a key in the log")
  end)

  it("sends the keyring's key as a header, never in curl's argv", function()
    setup(server:url("/v1/messages"))
    set_key(KEY1)
    helpers.write_file(state .. "/sleep", "0.2")
    server:script({ { fixture = "anthropic_text.sse", delay_ms = 60, chunk_seed = 3, max_chunk = 40 } })
    local buf = helpers.buffer({ "@You:", "Hello" })
    local result = send(buf)
    -- The argv of the process (curl, or the reaper that runs it) and of its children.
    local argv = ""
    helpers.wait_for(function()
      local a = provider.active(buf)
      if not (a and a.pid) then
        return false
      end
      local pids = { tostring(a.pid) }
      vim.list_extend(
        pids,
        vim.split(
          vim.trim(helpers.read_file(("/proc/%d/task/%d/children"):format(a.pid, a.pid)) or ""),
          " ",
          { trimempty = true }
        )
      )
      argv = ""
      for _, p in ipairs(pids) do
        argv = argv .. (helpers.read_file("/proc/" .. p .. "/cmdline") or ""):gsub("%z", " ") .. "\n"
      end
      return argv:find("curl", 1, true) ~= nil
    end, 5000, "curl never ran")
    assert.is_nil(argv:find(KEY1, 1, true), "the key is in curl's argv")
    helpers.wait_for(result, 10000)
    assert.equals("completed", result().status)
    local reqs = server:requests()
    assert.equals(1, #reqs)
    assert.equals(KEY1, reqs[1].headers["x-api-key"])
  end)

  it("on a 401 forgets the cached key, looks it up again and retries once", function()
    setup(server:url("/v1/messages"))
    set_key(KEY1)
    server:script({
      { status = 401, body = '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}' },
      { fixture = "anthropic_text.sse" },
    })
    -- The first lookup caches KEY1; the keyring then holds a rotated key.
    local buf = helpers.buffer({ "@You:", "Hello" })
    secrets.resolve({ name = "test", kind = "anthropic", api_key_env = "FLEMMA_SPEC_UNSET_KEY" }, function() end)
    helpers.wait_for(function()
      return secrets.cached_source("test") ~= nil
    end)
    set_key(KEY2)
    local result = send(buf)
    helpers.wait_for(result, 10000)
    assert.equals("completed", result().status)
    local reqs = server:requests()
    assert.equals(2, #reqs)
    assert.equals(KEY1, reqs[1].headers["x-api-key"])
    assert.equals(KEY2, reqs[2].headers["x-api-key"])
    assert.equals(2, calls())
  end)

  it("retries a 401 only once", function()
    setup(server:url("/v1/messages"))
    set_key(KEY1)
    server:script({
      { status = 401, body = '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}' },
    })
    local buf = helpers.buffer({ "@You:", "Hello" })
    local result = send(buf)
    helpers.wait_for(result, 10000)
    assert.equals("error", result().status)
    assert.truthy(result().error:find("HTTP 401", 1, true), result().error)
    assert.equals(2, #server:requests())
  end)
end)
