-- MCP messages with long strings (issue 26: "framing and JSON decoded natively, off the
-- main thread"): the native decoders take every string value over 64 KiB out of a
-- message and hand it on after it with its path; the main loop decodes only the small
-- rest and puts each string back. A real stdio server (spec/support/mcp_blob_server.py)
-- answers a 10 MB text, a 6 MB base64 PNG and long strings deep in structuredContent,
-- and writes down what it sent: what arrives must be byte for byte the same, through
-- the tool registry, through a chat's <C-]>, and over Streamable HTTP (the same
-- payloads from spec/support/mcp_http_server.py's mode `blobs`).
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local mcp = require("flemma.tools.mcp")
local messages = require("flemma.tools.mcp.messages")

local press, text = helpers.press, helpers.text
local SERVER = helpers.root .. "/spec/support/mcp_blob_server.py"
local HTTP_SERVER = helpers.root .. "/spec/support/mcp_http_server.py"
local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

local procs = {}

local function setup(servers, extra)
  require("flemma").setup(vim.tbl_deep_extend("force", {
    tools = { autopilot = { enabled = false } },
    mcp = { servers = servers, timeout = 30 },
  }, extra or {}))
end

local function wait_ready()
  helpers.wait_for(function()
    return tools.is_ready()
  end, 30000, "the MCP tool sources never finished: " .. vim.inspect(mcp.status()))
end

local function run(name, input)
  local result
  tools.execute(0, { id = "t1", name = name, input = input }, function(r)
    result = r
  end)
  helpers.wait_for(function()
    return result ~= nil
  end, 60000, "the tool never finished: " .. name)
  return result
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

--- The stdio server, writing what it sends into a new directory.
local function blob_server()
  local dir = helpers.tmpdir()
  return { command = "python3", args = { SERVER, dir } }, dir
end

--- The HTTP stub in mode `blobs`: its URL and the directory it writes to.
local function blob_http()
  local dir = helpers.tmpdir()
  local out = {}
  local p = vim.system({ "python3", HTTP_SERVER, dir, "blobs" }, {
    stdout = function(_, d)
      out[#out + 1] = d
    end,
  })
  procs[#procs + 1] = p
  local port
  helpers.wait_for(function()
    port = tonumber(table.concat(out):match("PORT (%d+)"))
    return port ~= nil
  end, 20000, "the HTTP stub did not start")
  return ("http://127.0.0.1:%d/mcp"):format(port), dir
end

--- Checks a text result cut to tools.truncate: its full text's file holds exactly
--- what the server sent.
local function check_text(r, dir)
  assert.is_true(r.success, vim.inspect(r.error))
  local first = r.output:match("^[^\n]*")
  local path = first:match("Full text: (%S+)%]$")
  assert.truthy(path, first)
  local sent = read(dir .. "/text.txt")
  assert.is_true(#sent >= 10000000, tostring(#sent))
  local got = read(path)
  os.remove(path)
  assert.equals(#sent, #got)
  assert.is_true(sent == got, "the saved text differs from the one the server sent")
  assert.truthy(r.output:find('\nline 0000000: "quoted" back\\slash\ttab \1 été € 😀 {[,:]}\n', 1, true), first)
end

describe("mcp: long strings in a message", function()
  after_each(function()
    mcp.stop_all()
    for _, p in ipairs(procs) do
      p:kill(9)
      p:wait(2000)
    end
    procs = {}
    require("flemma").setup({})
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("a 10 MB text, a 6 MB base64 image and nested long strings arrive byte for byte over stdio", function()
    local server, dir = blob_server()
    setup({ blobs = server })
    mcp.start()
    wait_ready()
    check_text(run("blobs:text", { bytes = 10000000 }), dir)

    local r = run("blobs:image", { bytes = 4500000 })
    assert.is_true(r.success, vim.inspect(r.error))
    local path = r.output:match("attached; saved as (%S+%.png)%]")
    assert.truthy(path, r.output)
    local sent = read(dir .. "/image.png")
    assert.equals(4500000, #sent)
    assert.is_true(read(path) == sent, "the saved image differs from the one the server sent")
    assert.equals(vim.fn.sha256(vim.base64.encode(sent)) .. ".png", vim.fs.basename(path))
    os.remove(path)

    -- The raw result of tools/call: every long string back at its place.
    local res, err
    mcp.client("blobs"):request("tools/call", { name = "nested", arguments = { bytes = 300000 } }, function(x, e)
      res, err = x, e
    end)
    helpers.wait_for(function()
      return res ~= nil or err ~= nil
    end, 30000, "nested never answered")
    assert.is_nil(err)
    local want = vim.json.decode(read(dir .. "/nested.json"))
    assert.is_true(#want.structuredContent.deep[1].a[1] >= 300000)
    assert.is_true(vim.deep_equal(want, res), "the nested result differs from the one the server sent")
    assert.equals("short", res.structuredContent.deep[1].a[2])
    assert.equals(want.structuredContent.deep[1].a[3].b[1][1], res.structuredContent.deep[1].a[3].b[1][1])
    assert.equals(want.structuredContent['k"ey'], res.structuredContent['k"ey'])
    -- And as a tool result: the structuredContent as JSON, whole in the saved text.
    r = run("blobs:nested", { bytes = 300000 })
    assert.is_true(r.success, vim.inspect(r.error))
    local full = r.output:match("^[^\n]*Full text: (%S+)%]")
    assert.truthy(full, r.output:sub(1, 200))
    local saved = read(full)
    os.remove(full)
    assert.is_true(vim.deep_equal(want.structuredContent, vim.json.decode(saved:match("^nested\n(.*)$"))))
  end)

  it("over Streamable HTTP: a JSON body and an SSE stream with long strings arrive whole", function()
    local url, dir = blob_http()
    setup({ web = { url = url } })
    mcp.start()
    wait_ready()
    check_text(run("web:text", { bytes = 10000000 }), dir)
    local res, err
    mcp.client("web"):request("tools/call", { name = "nested", arguments = { bytes = 300000 } }, function(x, e)
      res, err = x, e
    end)
    helpers.wait_for(function()
      return res ~= nil or err ~= nil
    end, 30000, "nested never answered")
    assert.is_nil(err)
    assert.is_true(vim.deep_equal(vim.json.decode(read(dir .. "/nested.json")), res), "the nested result differs")
  end)

  it("after <C-]>, the text's saved file and the image sent to the model are what the server sent", function()
    local h = helpers.send_harness({ key = KEY })
    local ok, e = pcall(function()
      local server, dir = blob_server()
      setup({ blobs = server }, {
        provider = "test",
        providers = {
          test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
        },
        parameters = { max_retries = 0, cache_retention = "none" },
        tools = { autopilot = { enabled = true }, auto_approve = { "blobs:text", "blobs:image" } },
      })
      h.server:script({
        {
          body = helpers.anthropic_tool_stream({
            { "blobs__text", "toolu_text", '{"bytes":10000000}' },
            { "blobs__image", "toolu_img", '{"bytes":4500000}' },
          }),
          content_type = "text/event-stream",
        },
        { body = helpers.sse_body("anthropic_text.http"), content_type = "text/event-stream" },
      })
      local buf = helpers.open_chat({ "@You:", "A long text and a large image, please." })
      press("<C-]>")
      h.wait_finished(1, 30000)
      helpers.wait_for(function()
        if text(buf):find("status=approved", 1, true) then
          press("<C-]>")
        end
        return #h.finished >= 2
      end, 60000, "the results were never sent:\n" .. text(buf):sub(1, 2000))
      assert.equals("completed", h.finished[2].status, vim.inspect(h.notes))
      local t = text(buf)
      local path = t:match("Full text: (%S+)%]")
      assert.truthy(path, t:sub(1, 2000))
      local sent = read(dir .. "/text.txt")
      assert.is_true(read(path) == sent, "the saved text differs from the one the server sent")
      os.remove(path)
      local img = read(dir .. "/image.png")
      local req = h.server:requests()[2].json
      local image
      for _, block in ipairs(req.messages[#req.messages].content) do
        for _, b in ipairs(type(block.content) == "table" and block.content or {}) do
          if b.type == "image" then
            image = b
          end
        end
      end
      assert.truthy(image, "no image reached the model")
      assert.is_true(image.source.data == vim.base64.encode(img), "the image the model got differs")
    end)
    h.teardown()
    assert(ok, e)
  end)

  describe("the assembler of a message and its blobs", function()
    local function collect()
      local drops, got = {}, {}
      local a = messages.new(function(why)
        drops[#drops + 1] = why
      end)
      local function feed(evs)
        for _, ev in ipairs(evs) do
          local msg, kind = a:feed(ev)
          if msg then
            got[#got + 1] = { kind = kind, msg = msg }
          end
        end
      end
      return feed, got, drops
    end

    it("puts each blob back at its path, across batches", function()
      local feed, got, drops = collect()
      feed({
        { type = "jsonrpc", kind = "result", json = '{"id":1,"result":{"a":["",{"b":""}],"k":""}}', blobs = 3 },
        { type = "blob", path = '["result","a",0]', data = "one" },
      })
      assert.same({}, got)
      feed({
        { type = "blob", path = '["result","a",1,"b"]', data = "two" },
        { type = "blob", path = '["result","k"]', data = "three" },
        { type = "jsonrpc", kind = "notification", json = '{"method":"m"}', blobs = 0 },
      })
      assert.same({
        { kind = "result", msg = { id = 1, result = { a = { "one", { b = "two" } }, k = "three" } } },
        { kind = "notification", msg = { method = "m" } },
      }, got)
      assert.same({}, drops)
    end)

    it("drops a message whose blob's path leads nowhere or to a wrong type, with one line each", function()
      local feed, got, drops = collect()
      local bad = {
        '["result","missing"]', -- no such key
        '["result","a",5]', -- past the array
        '["result",0]', -- an index into an object
        '["result","a","x"]', -- a key into an array
        '["result","n"]', -- not the "" the decoder left
        '["result","n","x"]', -- through a number
        "[]",
        "not json",
      }
      for _, path in ipairs(bad) do
        feed({
          { type = "jsonrpc", kind = "result", json = '{"id":1,"result":{"a":[""],"n":5}}', blobs = 2 },
          { type = "blob", path = path, data = "x" },
          { type = "blob", path = '["result","a",0]', data = "y" },
        })
      end
      assert.same({}, got)
      assert.equals(#bad, #drops)
      for _, d in ipairs(drops) do
        assert.truthy(d:find("^a result message was dropped: a blob's path"), d)
        assert.is_nil(d:find("\n"), d)
      end
      -- A blob with no message before it is dropped too; the next message is whole.
      feed({
        { type = "blob", path = '["x"]', data = "z" },
        { type = "jsonrpc", kind = "result", json = '{"id":2,"result":""}', blobs = 1 },
        { type = "blob", path = '["result"]', data = "fine" },
      })
      assert.same({ { kind = "result", msg = { id = 2, result = "fine" } } }, got)
      assert.equals("a long string came without its message", drops[#drops])
    end)
  end)
end)
