local helpers = require("spec.support.helpers")
local server_mod = require("spec.support.llm_server")
local transport = require("flemma.provider.transport")

describe("flemma.provider.transport", function()
  local server
  before_each(function()
    server = server_mod.start()
  end)
  after_each(function()
    server:stop()
    helpers.cleanup()
  end)

  it("passes headers through --config on stdin and never in argv", function()
    local argv =
      transport.args({ endpoint = "http://h/v1", body_path = "/tmp/x.json", connect_timeout = 10, timeout = 600 })
    assert.same({
      "curl",
      "-q",
      "--silent",
      "--show-error",
      "--no-buffer",
      "--dump-header",
      "-",
      "--config",
      "-",
      "--data-binary",
      "@/tmp/x.json",
      "--connect-timeout",
      "10",
      "--max-time",
      "600",
    }, argv)
    local text = transport.config_text({ ["x-api-key"] = 'k"e\\y', ["content-type"] = "application/json" })
    assert.equals(
      'header = "content-type: application/json"\nheader = "x-api-key: k\\"e\\\\y"\nheader = "Expect:"\n',
      text
    )
    assert.has_error(function()
      transport.config_text({ ["x-api-key"] = "a\nInjected: 1" })
    end)
  end)

  it(
    "sends the body from a 0600 file removed after, the key only on stdin (checked in /proc while curl runs)",
    function()
      server:script({ { status = 200, body = '{"ok":true}', hang_ms = 1500 } })
      local key = "sk-secret-" .. tostring(math.random(1e9))
      local exited, result
      local paths_seen = {}
      local orig = transport.write_body
      transport.write_body = function(body)
        local p = orig(body)
        paths_seen[#paths_seen + 1] = p
        return p
      end
      local handle = transport.start({
        endpoint = server:url("/v1/messages"),
        headers = { ["x-api-key"] = key, ["content-type"] = "application/json" },
        body = '{"hello":"wörld"}',
        decoder = "anthropic",
        connect_timeout = 5,
        timeout = 20,
        on_events = function() end,
        on_exit = function(r)
          exited, result = true, r
        end,
      })
      transport.write_body = orig
      local path = paths_seen[1]
      local st = assert(vim.uv.fs_stat(path))
      assert.equals(tonumber("600", 8), bit.band(st.mode, tonumber("777", 8)))
      helpers.wait_for(function()
        return #server:requests() == 1
      end, 5000, "no request arrived")
      local cmdline = helpers.read_file("/proc/" .. handle.pid .. "/cmdline")
      assert.truthy(cmdline and cmdline:find("curl", 1, true), cmdline)
      assert.is_nil(cmdline:find(key, 1, true))
      assert.truthy(cmdline:find(path, 1, true))
      local req = server:requests()[1]
      assert.equals(key, req.headers["x-api-key"])
      assert.equals("application/json", req.headers["content-type"])
      assert.is_nil(req.headers["expect"])
      assert.same({ hello = "wörld" }, req.json)
      helpers.wait_for(function()
        return exited
      end, 10000, "curl did not exit")
      assert.equals(0, result.code)
      assert.is_nil(vim.uv.fs_stat(path))
    end
  )

  it("names an endpoint in the log without its user info or query (a token)", function()
    local log = require("flemma.core.log")
    local saved = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    log.enable("info")
    server:script({ { status = 200, body = '{"ok":true}' }, { status = 200, body = "{}" } })
    local token = "tok-" .. tostring(math.random(1e9))
    local url = server:url("/v1/messages?key=" .. token):gsub("^http://", "http://user:" .. token .. "x@")
    local done, got = false, nil
    transport.start({
      endpoint = url,
      headers = { ["content-type"] = "application/json" },
      body = "{}",
      decoder = "anthropic",
      connect_timeout = 5,
      timeout = 20,
      on_events = function() end,
      on_exit = function()
        done = true
      end,
    })
    transport.get({ url = server:url("/v1/models?key=" .. token), headers = {} }, function(body)
      got = body or false
    end)
    helpers.wait_for(function()
      return done and got ~= nil
    end, 10000, "the requests did not end")
    local text = helpers.read_file(log.path()) or ""
    log.disable()
    os.remove(log.path())
    vim.env.XDG_STATE_HOME = saved
    assert.is_nil(text:find(token, 1, true), text)
    local host = server:url(""):gsub("^http://", "")
    assert.truthy(text:find("request POST http://" .. host .. "/v1/messages (", 1, true), text)
    assert.truthy(text:find("curl for http://" .. host .. "/v1/messages exited with 0", 1, true), text)
    assert.truthy(text:find("request GET http://" .. host .. "/v1/models (", 1, true), text)
    assert.truthy(text:find("curl GET http://" .. host .. "/v1/models exited with 0", 1, true), text)
  end)

  it("keeps an endpoint's user info, path and query (a token) out of curl's argv: they go on stdin", function()
    server:script({
      { status = 200, body = '{"ok":true}', hang_ms = 1500 },
      { status = 200, body = "{}", hang_ms = 1500 },
    })
    local token = "tok-" .. tostring(math.random(1e9))
    local handles = {}
    handles[1] = transport.start({
      endpoint = server:url("/v1/messages?key=" .. token),
      headers = { ["content-type"] = "application/json" },
      body = "{}",
      decoder = "anthropic",
      connect_timeout = 5,
      timeout = 20,
      on_events = function() end,
      on_exit = function() end,
    })
    local got
    handles[2] = transport.get({ url = server:url("/v1/models?key=" .. token), headers = {} }, function(body)
      got = body or false
    end)
    helpers.wait_for(function()
      return #server:requests() == 2
    end, 5000, "the requests did not arrive")
    for _, h in ipairs(handles) do
      local cmdline = helpers.read_file("/proc/" .. h.pid .. "/cmdline")
      assert.truthy(cmdline and cmdline:find("curl", 1, true), cmdline)
      assert.is_nil(cmdline:find(token, 1, true), cmdline)
      assert.is_nil(cmdline:find("/v1/", 1, true), cmdline)
    end
    local paths = {}
    for _, req in ipairs(server:requests()) do
      paths[#paths + 1] = req.path
    end
    table.sort(paths)
    assert.same({ "/v1/messages?key=" .. token, "/v1/models?key=" .. token }, paths)
    helpers.wait_for(function()
      return got ~= nil
    end, 10000, "the GET did not end")
  end)

  it("reads no ~/.curlrc: its header lines are not sent, its trace file never holds the key", function()
    local home = vim.fn.tempname()
    vim.fn.mkdir(home, "p")
    local trace = home .. "/trace.log"
    helpers.write_file(home .. "/.curlrc", ('header = "X-From-Curlrc: yes"\ntrace-ascii = "%s"\n'):format(trace))
    local saved = vim.env.CURL_HOME
    vim.env.CURL_HOME = home
    server:script({ { status = 200, body = '{"ok":true}' }, { status = 200, body = '{"data":[]}' } })
    local key = "sk-secret-" .. tostring(math.random(1e9))
    local exited, got
    local ok, err = pcall(function()
      transport.start({
        endpoint = server:url("/v1/messages"),
        headers = { ["x-api-key"] = key, ["content-type"] = "application/json" },
        body = "{}",
        decoder = "anthropic",
        connect_timeout = 5,
        timeout = 20,
        on_events = function() end,
        on_exit = function()
          exited = true
        end,
      })
      transport.get({ url = server:url("/v1/models"), headers = { ["x-api-key"] = key } }, function(body)
        got = body or false
      end)
    end)
    vim.env.CURL_HOME = saved
    assert(ok, err)
    helpers.wait_for(function()
      return exited and got ~= nil and #server:requests() == 2
    end, 10000, "the requests did not end")
    for _, req in ipairs(server:requests()) do
      assert.equals(key, req.headers["x-api-key"])
      assert.is_nil(req.headers["x-from-curlrc"], req.path)
    end
    assert.is_nil(vim.uv.fs_stat(trace), "curl wrote the trace file of ~/.curlrc")
    vim.fn.delete(home, "rf")
  end)

  it("sends a body given as a list of pieces (more than one writev's worth) exactly", function()
    server:script({ { status = 200, body = '{"ok":true}' } })
    local pieces, items = { '{"items":[' }, {}
    for i = 1, 3000 do
      pieces[#pieces + 1] = (i > 1 and "," or "") .. ('"piece %d ü"'):format(i)
      items[i] = ("piece %d ü"):format(i)
    end
    pieces[#pieces + 1] = "]}"
    local exited
    transport.start({
      endpoint = server:url("/v1/messages"),
      headers = { ["content-type"] = "application/json" },
      body = pieces,
      decoder = "anthropic",
      connect_timeout = 5,
      timeout = 20,
      on_events = function() end,
      on_exit = function()
        exited = true
      end,
    })
    helpers.wait_for(function()
      return #server:requests() == 1 and exited
    end, 10000, "no request arrived")
    local req = server:requests()[1]
    assert.equals(table.concat(pieces), req.body)
    assert.same({ items = items }, req.json)
    assert.equals(#req.body, transport.body_size(pieces))
  end)

  it("is a clear error when curl is missing", function()
    local saved = transport.program
    transport.program = "curl-that-does-not-exist"
    local ok, err = pcall(transport.start, {
      endpoint = server:url(),
      headers = {},
      body = "{}",
      decoder = "anthropic",
      on_events = function() end,
      on_exit = function() end,
    })
    transport.program = saved
    assert.is_false(ok)
    assert.truthy(err:find("is not installed", 1, true), err)
  end)
end)
