-- MCP's Streamable HTTP transport (issue 26): the real everything server from npm
-- (.deps/npm) in its streamableHttp mode, reached through a recording loopback proxy
-- (spec/support/mcp_http_server.py proxy: it passes bytes on and writes down each
-- request's method and headers); the same script's small stub server only for what
-- the real server cannot show (garbage, a 50 MB body, no answer, a broken stream).
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local mcp = require("flemma.tools.mcp")

local press, text = helpers.press, helpers.text
local EVERYTHING = helpers.root .. "/.deps/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
local SCRIPT = helpers.root .. "/spec/support/mcp_http_server.py"
local BEARER = "sk-flemma-mcp-bearer-" .. tostring(math.random(1e9))
local HEADER = "hdr-secret-" .. tostring(math.random(1e9))

local procs = {}

--- Starts a process that prints "PORT n" (the python script) or listens on `port`.
local function start(cmd, env, port)
  local out = {}
  local p = vim.system(cmd, {
    env = env,
    stdout = function(_, d)
      if d then
        out[#out + 1] = d
      end
    end,
    stderr = function(_, d)
      if d then
        out[#out + 1] = d
      end
    end,
  })
  procs[#procs + 1] = p
  local ok = vim.wait(30000, function()
    local all = table.concat(out)
    if port then
      return all:find("listening on port " .. port, 1, true) ~= nil
    end
    port = tonumber(all:match("PORT (%d+)"))
    return port ~= nil
  end, 20)
  assert(ok, "did not start: " .. table.concat(cmd, " ") .. "\n" .. table.concat(out))
  return port
end

--- A free TCP port on 127.0.0.1.
local function free_port()
  local s = vim.uv.new_tcp()
  s:bind("127.0.0.1", 0)
  local port = s:getsockname().port
  s:close()
  return port
end

--- The real everything server over HTTP behind the recording proxy: its URL and the dir.
local function everything_http()
  local port = free_port()
  start({ "node", EVERYTHING, "streamableHttp" }, { PORT = tostring(port) }, port)
  local dir = helpers.tmpdir()
  local proxy = start({ "python3", SCRIPT, dir, "proxy", tostring(port) })
  return ("http://127.0.0.1:%d/mcp"):format(proxy), dir
end

local function stub(mode)
  local dir = helpers.tmpdir()
  local port = start({ "python3", SCRIPT, dir, mode })
  return ("http://127.0.0.1:%d/mcp"):format(port), dir
end

local function requests(dir)
  local list = {}
  local f = io.open(dir .. "/requests.jsonl", "r")
  if not f then
    return list
  end
  for line in f:lines() do
    list[#list + 1] = vim.json.decode(line)
  end
  f:close()
  return list
end

local function setup(servers, timeout)
  require("flemma").setup({
    tools = { autopilot = { enabled = false } },
    mcp = { servers = servers, timeout = timeout or 20 },
  })
end

local function wait_ready(timeout)
  helpers.wait_for(function()
    return tools.is_ready()
  end, timeout or 20000, "the MCP tool sources never finished: " .. vim.inspect(mcp.status()))
end

local function run(name, input, timeout)
  local result
  tools.execute(0, { id = "t1", name = name, input = input }, function(r)
    result = r
  end)
  helpers.wait_for(function()
    return result ~= nil
  end, timeout or 20000, "the tool never finished: " .. name)
  return result
end

-- Whether process `pid` runs below this Neovim (its parents, read from /proc).
local function below_us(pid)
  local me = vim.fn.getpid()
  for _ = 1, 10 do
    local f = io.open("/proc/" .. pid .. "/stat", "rb")
    local stat = f and f:read("*a") or ""
    if f then
      f:close()
    end
    local ppid = tonumber(stat:match("^%d+ %b() %a (%d+)"))
    if not ppid or ppid <= 1 then
      return false
    end
    if ppid == me then
      return true
    end
    pid = ppid
  end
  return false
end

--- The argv of every curl running below this Neovim (read from /proc while it runs).
local function curl_argvs()
  local out = {}
  for _, pid in ipairs(vim.fn.readdir("/proc")) do
    if pid:match("^%d+$") then
      local f = io.open("/proc/" .. pid .. "/cmdline", "rb")
      if f then
        local cmd = f:read("*a") or ""
        f:close()
        if cmd:match("^[^%z]*curl%z") and below_us(pid) then
          out[#out + 1] = cmd:gsub("%z", " ")
        end
      end
    end
  end
  return out
end

--- The curls of the one server a spec runs (its URL is not in their argv: it goes on
--- curl's stdin with the headers).
local function curls_of(_)
  return curl_argvs()
end

describe("mcp over Streamable HTTP", function()
  before_each(function()
    vim.env.FLEMMA_MCP_SPEC_BEARER = BEARER
  end)
  after_each(function()
    mcp.stop_all()
    for _, p in ipairs(procs) do
      p:kill(15)
      p:wait(3000)
    end
    procs = {}
    vim.env.FLEMMA_MCP_SPEC_BEARER = nil
    helpers.cleanup()
  end)

  it(
    "lists the everything server's tools, calls echo and get-sum; session id, protocol version and key on every later request, DELETE at stop, the key never in argv",
    function()
      local url, dir = everything_http()
      setup({
        everything = { url = url, headers = { ["X-Spec-Token"] = HEADER }, bearer_env = "FLEMMA_MCP_SPEC_BEARER" },
      })
      helpers.open_chat({ "@You:", "hi" })
      wait_ready()
      assert.equals("ready", mcp.status()[1].state, vim.inspect(mcp.status()))
      for _, n in ipairs({ "everything:echo", "everything:get-sum", "everything:trigger-long-running-operation" }) do
        assert.is_not_nil(tools.get(n), n)
      end
      assert.same(
        { success = true, output = "Echo: hello over http" },
        run("everything:echo", { message = "hello over http" })
      )
      local sum = run("everything:get-sum", { a = 2, b = 40 })
      assert.is_true(sum.success, vim.inspect(sum))
      assert.truthy(sum.output:find("42", 1, true), sum.output)

      -- A long call: its curl runs meanwhile; its argv holds no key.
      local result
      tools.execute(0, {
        id = "t2",
        name = "everything:trigger-long-running-operation",
        input = { duration = 2, steps = 2 },
      }, function(r)
        result = r
      end)
      local seen = {}
      helpers.wait_for(function()
        for _, a in ipairs(curls_of(url)) do
          seen[#seen + 1] = a
        end
        return result ~= nil
      end, 20000, "the long call never finished")
      assert.is_true(result.success, vim.inspect(result))
      assert.is_true(#seen > 0, "no curl of " .. url .. " was seen running")
      for _, a in ipairs(seen) do
        assert.is_nil(a:find(BEARER, 1, true), a)
        assert.is_nil(a:find(HEADER, 1, true), a)
      end

      local reqs = requests(dir)
      assert.is_true(#reqs >= 5, vim.inspect(reqs))
      assert.equals("POST", reqs[1].method)
      assert.is_nil(reqs[1].headers["mcp-session-id"])
      local sid
      for i, r in ipairs(reqs) do
        assert.equals("Bearer " .. BEARER, r.headers["authorization"], "request " .. i)
        assert.equals(HEADER, r.headers["x-spec-token"], "request " .. i)
        assert.truthy((r.headers["accept"] or ""):find("text/event-stream", 1, true), "request " .. i)
        if i > 1 then
          sid = sid or r.headers["mcp-session-id"]
          assert.is_not_nil(sid, "request " .. i .. " carries no session id")
          assert.equals(sid, r.headers["mcp-session-id"], "request " .. i)
          assert.equals(mcp.client("everything").protocol_version, r.headers["mcp-protocol-version"], "request " .. i)
        end
      end

      mcp.stop_all()
      helpers.wait_for(function()
        local last = requests(dir)
        return last[#last].method == "DELETE"
      end, 10000, "no DELETE: " .. vim.inspect(requests(dir)))
      local last = requests(dir)
      assert.equals(sid, last[#last].headers["mcp-session-id"])
      -- The session is gone on the server: a POST with its id is refused.
      assert.equals("stopped", mcp.status()[1].state)
    end
  )

  it("leaving Neovim ends the session with a DELETE", function()
    local url, dir = everything_http()
    helpers.run_nvim({
      rtp = helpers.root,
      lua = ([=[
        require("flemma").setup({ mcp = { servers = { everything = { url = %q } }, timeout = 20 } })
        require("flemma.tools.mcp").start({ "everything" })
        vim.wait(20000, function() return require("flemma.tools").is_ready() end, 10)
        assert(require("flemma.tools.mcp").status()[1].state == "ready", "not ready")
      ]=]):format(url),
      timeout = 40000,
    })
    local reqs = requests(dir)
    local last = reqs[#reqs]
    assert.equals("DELETE", last.method, vim.inspect(reqs))
    assert.is_not_nil(last.headers["mcp-session-id"])
    assert.equals(reqs[2].headers["mcp-session-id"], last.headers["mcp-session-id"])
  end)

  it(":Flemma mcp:status and :checkhealth show an HTTP server, its URL without user info or query", function()
    local url = everything_http()
    local shown = url:gsub("^http://", "http://user:pw-secret@") .. "?token=q-secret"
    setup({ everything = { url = shown } })
    local notes = {}
    local orig = vim.notify
    vim.notify = function(msg)
      notes[#notes + 1] = msg
    end
    helpers.open_chat({ "@You:", "hi" })
    local ok = pcall(wait_ready)
    vim.cmd("Flemma mcp:status")
    vim.notify = orig
    assert.is_true(ok)
    local all = table.concat(notes, "\n")
    assert.truthy(all:find("everything: ready, %d+ tools, " .. vim.pesc(url)), all)
    assert.is_nil(all:find("pw-secret", 1, true), all)
    assert.is_nil(all:find("q-secret", 1, true), all)
    vim.cmd("checkhealth flemma")
    local health = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    assert.truthy(health:find("everything: session open at " .. url, 1, true), health)
    assert.is_nil(health:find("pw-secret", 1, true), health)
    assert.is_nil(health:find("q-secret", 1, true), health)
    vim.cmd("bwipeout!")
  end)

  it("a URL's user info and query (a token) are never in a curl's argv", function()
    local url = everything_http()
    local secret_url = url:gsub("^http://", "http://user:pw-secret@") .. "?token=q-secret"
    setup({ everything = { url = secret_url } })
    helpers.open_chat({ "@You:", "hi" })
    wait_ready()
    assert.equals("ready", mcp.status()[1].state, vim.inspect(mcp.status()))
    local result
    tools.execute(0, {
      id = "t2",
      name = "everything:trigger-long-running-operation",
      input = { duration = 2, steps = 2 },
    }, function(r)
      result = r
    end)
    local seen = {}
    helpers.wait_for(function()
      vim.list_extend(seen, curl_argvs())
      return result ~= nil
    end, 20000, "the long call never finished")
    assert.is_true(result.success, vim.inspect(result))
    assert.is_true(#seen > 0, "no curl was seen running")
    for _, a in ipairs(seen) do
      assert.is_nil(a:find("pw-secret", 1, true), a)
      assert.is_nil(a:find("q-secret", 1, true), a)
    end
  end)

  it("a stream that breaks before it answers is resumed with Last-Event-ID", function()
    local url, dir = stub("resume")
    setup({ stub = { url = url } })
    helpers.open_chat({ "@You:", "hi" })
    wait_ready()
    assert.same({ success = true, output = "resumed after ev-1" }, run("stub:slow", {}))
    local reqs = requests(dir)
    local get = reqs[#reqs]
    assert.equals("GET", get.method, vim.inspect(reqs))
    assert.equals("ev-1", get.headers["last-event-id"])
    assert.equals("stub-session-1", get.headers["mcp-session-id"])
  end)

  it(
    "the standing GET stream: list_changed registers the new tool; a broken stream reopens with Last-Event-ID",
    function()
      local url, dir = stub("listen")
      setup({ stub = { url = url } })
      helpers.open_chat({ "@You:", "hi" })
      wait_ready()
      helpers.wait_for(function()
        return tools.get("stub:fresh") ~= nil
      end, 10000, "list_changed on the GET stream did not register the new tool")
      local gets
      helpers.wait_for(function()
        gets = vim.tbl_filter(function(r)
          return r.method == "GET"
        end, requests(dir))
        return #gets >= 2
      end, 10000, "the broken stream was not opened again")
      assert.is_nil(gets[1].headers["last-event-id"])
      assert.equals("text/event-stream", gets[1].headers["accept"])
      assert.equals("stub-session-1", gets[1].headers["mcp-session-id"])
      assert.truthy(gets[1].headers["mcp-protocol-version"])
      assert.equals("g-1", gets[2].headers["last-event-id"])
      assert.equals("stub-session-1", gets[2].headers["mcp-session-id"])
      -- Stopping the server stops its standing stream.
      assert.equals(1, #curls_of(url))
      mcp.stop_all()
      helpers.wait_for(function()
        return #curls_of(url) == 0
      end, 5000, "the standing stream's curl was left running")
    end
  )

  it("a standing stream that keeps failing is opened again with a growing wait, then given up", function()
    local http = require("flemma.tools.mcp.http")
    local saved = http.STREAM_RETRY_MS
    http.STREAM_RETRY_MS = 50
    local url, dir = stub("refuse")
    setup({ stub = { url = url } })
    helpers.open_chat({ "@You:", "hi" })
    wait_ready()
    local function gets()
      return #vim.tbl_filter(function(r)
        return r.method == "GET"
      end, requests(dir))
    end
    -- 1 + 5 reopenings after 50, 100, 200, 400, 800 ms: not all of them in the first 0.5 s.
    vim.wait(500)
    local early = gets()
    helpers.wait_for(function()
      return gets() >= 1 + http.STREAM_RETRIES
    end, 10000, "the failing stream was not opened again")
    vim.wait(2500)
    http.STREAM_RETRY_MS = saved
    assert.is_true(early < 1 + http.STREAM_RETRIES, tostring(early))
    assert.equals(1 + http.STREAM_RETRIES, gets())
    assert.equals("ready", mcp.status()[1].state)
    assert.equals(0, #curls_of(url))
  end)

  it("a server answering the GET with 405 has no standing stream: no error, no retry", function()
    local url, dir = stub("resume")
    local warned = {}
    local notify = vim.notify
    vim.notify = function(msg, level)
      if (level or 0) >= vim.log.levels.WARN then
        warned[#warned + 1] = msg
      end
    end
    setup({ stub = { url = url } })
    helpers.open_chat({ "@You:", "hi" })
    wait_ready()
    helpers.wait_for(function()
      return #vim.tbl_filter(function(r)
        return r.method == "GET"
      end, requests(dir)) > 0
    end, 10000, "no GET stream was asked for")
    vim.wait(1500)
    vim.notify = notify
    local gets = vim.tbl_filter(function(r)
      return r.method == "GET"
    end, requests(dir))
    assert.equals(1, #gets)
    local s = mcp.status()[1]
    assert.equals("ready", s.state)
    assert.is_nil(s.last_error)
    assert.same({}, warned)
    assert.equals(0, #curls_of(url))
  end)

  it("garbage from the server is one clear error; a 50 MB body is refused; neither blocks", function()
    local url = stub("garbage")
    setup({ junk = { url = url } })
    helpers.open_chat({ "@You:", "hi" })
    wait_ready()
    local s = mcp.status()[1]
    assert.equals("failed", s.state)
    assert.truthy(s.last_error:find("initialize failed: not JSON: <html>this is { not json", 1, true), s.last_error)

    local big = stub("huge")
    setup({ big = { url = big } })
    helpers.open_chat({ "@You:", "hi" }, "b.chat")
    wait_ready()
    local r = run("big:big", {}, 30000)
    assert.is_false(r.success)
    assert.truthy(r.error:find("larger than", 1, true), r.error)
    assert.is_true(#r.error < 300, r.error)
    helpers.wait_for(function()
      return #curls_of(big) == 0
    end, 5000, "a curl was left running")
  end)

  it("a server that never answers initialize times out; its curl is stopped", function()
    local url = stub("silent")
    setup({ mute = { url = url } }, 1)
    helpers.open_chat({ "@You:", "hi" })
    helpers.wait_for(function()
      return #curls_of(url) > 0
    end, 10000, "no curl started")
    wait_ready(15000)
    local s = mcp.status()[1]
    assert.equals("failed", s.state)
    assert.truthy(s.last_error:find("initialize timed out after 1s", 1, true), s.last_error)
    helpers.wait_for(function()
      return #curls_of(url) == 0
    end, 5000, "the curl of initialize was left running")
  end)

  it("an entry is checked: url with command, a bad URL; an unset bearer_env fails the start naming it", function()
    local ok, err = pcall(setup, { x = { url = "http://127.0.0.1:1/mcp", command = "node" } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("either `command`", 1, true), tostring(err))
    ok, err = pcall(setup, { x = { url = "ftp://example.com/mcp" } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("http:// or https:// URL", 1, true), tostring(err))
    ok, err = pcall(setup, { x = { url = "http://127.0.0.1:1/mcp", bearer_env = "A B" } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("should name an environment variable", 1, true), tostring(err))
    vim.env.FLEMMA_MCP_SPEC_BEARER = nil
    setup({ x = { url = "http://127.0.0.1:1/mcp", bearer_env = "FLEMMA_MCP_SPEC_BEARER" } })
    helpers.open_chat({ "@You:", "hi" })
    wait_ready()
    local s = mcp.status()[1]
    assert.equals("failed", s.state)
    assert.truthy(s.last_error:find("$FLEMMA_MCP_SPEC_BEARER (bearer_env) is not set", 1, true), s.last_error)
    -- A key never goes over plain http to another machine.
    vim.env.FLEMMA_MCP_SPEC_BEARER = BEARER
    setup({ y = { url = "http://example.invalid/mcp", bearer_env = "FLEMMA_MCP_SPEC_BEARER" } })
    helpers.open_chat({ "@You:", "hi" }, "y.chat")
    wait_ready()
    s = mcp.status()[1]
    assert.equals("failed", s.state)
    assert.truthy(s.last_error:find("keys never go over http://", 1, true), s.last_error)
  end)

  it("a project .mcp.json entry with a url asks naming it and is remembered; one naming keys is left out", function()
    local consent = require("flemma.policy.consent")
    local orig_select = vim.ui.select
    local asked = {}
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = opts.prompt
      on_choice(items[1], 1)
    end
    local url, sdir = stub("resume")
    local dir = helpers.tmpdir()
    helpers.write_file(
      dir .. "/.mcp.json",
      vim.json.encode({
        mcpServers = {
          remote = { url = url },
          keyed = { url = url, bearer_env = "FLEMMA_MCP_SPEC_BEARER" },
          headed = { url = url, headers = { ["X-Token"] = "from-the-file" } },
        },
      })
    )
    local file = vim.uv.fs_realpath(dir .. "/.mcp.json")
    local function open(name)
      require("flemma").setup({ tools = { autopilot = { enabled = false } }, mcp = { project_config = true } })
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/" .. name))
      vim.api.nvim_buf_set_lines(0, 0, -1, false, { "@You:", "hi" })
    end
    local notes = helpers.notifications(function()
      open("a.chat")
      helpers.wait_for(function()
        return tools.get("remote:slow") ~= nil
      end, 10000, "the trusted project server did not start: " .. vim.inspect(mcp.status()))
    end)
    assert.same(
      { ".mcp.json wants to start the MCP server `remote`: " .. url },
      (function()
        return vim.tbl_map(function(a)
          return (a:gsub("^.-%.mcp%.json", ".mcp.json"))
        end, asked)
      end)()
    )
    for _, name in ipairs({ "keyed", "headed" }) do
      local lines = vim.tbl_filter(function(n)
        return n.msg:find("`" .. name .. "` left out: a project file cannot name keys", 1, true) ~= nil
      end, notes)
      assert.equals(1, #lines, vim.inspect(notes))
      assert.is_nil(tools.get(name .. ":slow"))
    end
    for _, r in ipairs(requests(sdir)) do
      assert.is_nil(r.headers["authorization"], vim.inspect(r))
      assert.is_nil(r.headers["x-token"], vim.inspect(r))
    end
    -- Remembered by path and content: a new session starts it without asking.
    mcp.stop_all()
    open("b.chat")
    helpers.wait_for(function()
      return tools.get("remote:slow") ~= nil and tools.is_ready()
    end, 10000, "not started again")
    assert.equals(1, #asked)
    vim.ui.select = orig_select
    consent.set(nil, "mcp", file .. "#remote", nil, string.rep("0", 64))
  end)

  describe("through the <C-]> cycle", function()
    local h
    before_each(function()
      h = helpers.send_harness({ key = "sk-llm-spec-" .. tostring(math.random(1e9)), secrets = { BEARER } })
    end)
    after_each(function()
      h.teardown()
    end)

    it("the everything server's echo over HTTP asks first, then its result lands in the buffer", function()
      local url = everything_http()
      require("flemma").setup({
        provider = "test",
        providers = {
          test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        },
        parameters = { max_retries = 0, cache_retention = "none" },
        tools = { autopilot = { enabled = false } },
        mcp = { servers = { everything = { url = url, bearer_env = "FLEMMA_MCP_SPEC_BEARER" } }, timeout = 20 },
      })
      h.server:script({
        {
          body = helpers.anthropic_tool_stream({
            { "everything__echo", "toolu_h1", vim.json.encode({ message = "via http" }) },
          }),
          content_type = "text/event-stream",
        },
      })
      local buf = helpers.open_chat({ "@You:", "Echo something." })
      press("<C-]>")
      h.wait_finished(1, 30000)
      local sent = vim.tbl_map(function(t)
        return t.name
      end, h.server:requests()[1].json.tools or {})
      assert.truthy(vim.tbl_contains(sent, "everything__echo"), vim.inspect(sent))
      local t = text(buf)
      assert.truthy(t:find("**Tool Use:** `everything:echo` (`toolu_h1`)", 1, true), t)
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("```flemma:tool status=pending", 1, true) ~= nil
      end, 5000, "no pending placeholder:\n" .. text(buf))
      local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      for i, l in ipairs(lines) do
        if l == "```flemma:tool status=pending" then
          vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { "```flemma:tool status=approved" })
        end
      end
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("Echo: via http", 1, true) ~= nil
      end, 15000, "no result:\n" .. text(buf))
      t = text(buf)
      assert.truthy(t:find("**Tool Result:** `toolu_h1`\n", 1, true), t)
      assert.is_nil(t:find(BEARER, 1, true))
    end)
  end)
end)
