-- Issue 27: the `fetch` tool. Off by default; on, its calls wait for approval. Each hop
-- is checked (http/https, no user info, the host's addresses public after DNS
-- resolution; curl pinned to the checked address), at most 5 redirects, a size cap
-- and a time limit; HTML comes back as Markdown, converted natively off the main loop.
-- The address table needs no network; the end-to-end cases fetch from a loopback
-- page server (spec/support/llm_server.py), which the address check refuses by
-- design: they exempt its exact host:port with tools.fetch.allow_hosts (setup only),
-- and check that a redirect anywhere else on this machine is still refused. Every
-- call goes through a real chat buffer, <C-]> and the loopback model server.
local helpers = require("spec.support.helpers")
local address = require("flemma.policy.address")

local press, text = helpers.press, helpers.text

local KEY = "sk-flemma-spec-fetch-" .. tostring(math.random(1e9))

describe("fetch: the address check", function()
  -- Checks a URL as the tool does (literals and localhost names need no DNS).
  local function verdict(url)
    local u, bad = address.parse_url(url)
    if not u then
      return "bad", bad
    end
    local got, why
    address.check(u, nil, function(addr, err)
      got, why = addr, err
    end)
    helpers.wait_for(function()
      return got ~= nil or why ~= nil
    end, 5000, "no verdict for " .. url)
    return got and "ok" or "refused", got and table.concat(got, ",") or why
  end

  -- { url, "refused" | "bad" | "ok", a piece of the reason or the address }
  local cases = {
    { "http://127.0.0.1/", "refused", "loopback" },
    { "http://127.1/", "refused", "loopback" },
    { "http://127.0.1/", "refused", "loopback" },
    { "http://2130706433/", "refused", "127.0.0.1 is loopback" },
    { "http://0x7f.1/", "refused", "127.0.0.1 is loopback" },
    { "http://0x7f000001/", "refused", "loopback" },
    { "http://0177.0.0.1/", "refused", "127.0.0.1 is loopback" },
    { "http://017700000001/", "refused", "loopback" },
    { "http://127.000.000.001/", "refused", "loopback" },
    { "http://[::1]/", "refused", "loopback (::1)" },
    { "http://[0:0:0:0:0:0:0:1]/", "refused", "loopback" },
    { "http://[::ffff:127.0.0.1]/", "refused", "IPv4-mapped loopback" },
    { "http://[::ffff:7f00:1]/", "refused", "IPv4-mapped loopback" },
    { "http://[::ffff:a9fe:a9fe]/", "refused", "IPv4-mapped link-local" },
    { "http://[::127.0.0.1]/", "refused", "IPv4-compatible" },
    { "http://[64:ff9b::10.0.0.1]/", "refused", "NAT64 private" },
    { "http://[2002:c0a8:0101::1]/", "refused", "6to4 private" },
    { "http://localhost/", "refused", "loopback" },
    { "http://localhost./", "refused", "loopback" },
    { "http://LOCALHOST:8080/", "refused", "loopback" },
    { "http://api.localhost/", "refused", "loopback" },
    { "http://10.1.2.3/", "refused", "private (10.0.0.0/8)" },
    { "http://172.16.0.1/", "refused", "private (172.16.0.0/12)" },
    { "http://172.31.255.255/", "refused", "private (172.16.0.0/12)" },
    { "http://192.168.1.1/", "refused", "private (192.168.0.0/16)" },
    { "http://169.254.169.254/latest/meta-data/", "refused", "link-local" },
    { "http://0xa9fea9fe/", "refused", "link-local" },
    { "http://[fe80::1]/", "refused", "link-local (fe80::/10)" },
    { "http://[fd00::1]/", "refused", "private (fc00::/7)" },
    { "http://[fc00::]/", "refused", "private (fc00::/7)" },
    { "http://0.0.0.0/", "refused", "unspecified" },
    { "http://0/", "refused", "unspecified" },
    { "http://[::]/", "refused", "unspecified" },
    { "http://100.64.0.1/", "refused", "carrier-grade NAT" },
    { "http://100.127.255.254/", "refused", "carrier-grade NAT" },
    { "http://224.0.0.1/", "refused", "multicast" },
    { "http://[ff02::1]/", "refused", "multicast" },
    { "http://255.255.255.255/", "refused", "reserved" },
    { "ftp://example.com/", "bad", "only http and https" },
    { "file:///etc/passwd", "bad", "only http and https" },
    { "gopher://127.0.0.1:70/", "bad", "only http and https" },
    { "http://user:pw@example.com/", "bad", "user name or password" },
    { "http://example.com@127.0.0.1/", "bad", "user name or password" },
    { "http://%31%32%37.0.0.1/", "bad", "percent-encoded" },
    { "http://[::1%25lo]/", "bad", "percent-encoded" },
    { "http://[::1::2]/", "bad", "IPv6 address is not valid" },
    { "http://[::ffff:127.0.0.1/", "bad", "not closed" },
    { "http://1.2.3.4.5/", "bad", "not a valid one" },
    { "http://256.0.0.1/", "bad", "not a valid one" },
    { "http://4294967296/", "bad", "not a valid one" },
    { "http://exa mple.com/", "bad", "space" },
    { "http://example.com\\@127.0.0.1/", "bad", "backslash" },
    { "http://example.com:0/", "bad", "port" },
    { "http://example.com:99999/", "bad", "port" },
    { "http:///path", "bad", "no host" },
    { "http://93.184.216.34/", "ok", "93.184.216.34" },
    { "http://1.1.1.1:8080/x", "ok", "1.1.1.1" },
    { "http://0x08080808/", "ok", "8.8.8.8" },
    { "https://[2606:4700:4700::1111]/", "ok", "2606:4700:4700:0:0:0:0:1111" },
    { "http://172.32.0.1/", "ok", "172.32.0.1" },
    { "http://100.128.0.1/", "ok", "100.128.0.1" },
  }

  it(("judges %d addresses and URLs (literal forms, IPv4 in IPv6, localhost names)"):format(#cases), function()
    assert.is_true(#cases >= 30)
    local wrong = {}
    for _, c in ipairs(cases) do
      local kind, detail = verdict(c[1])
      if kind ~= c[2] or not tostring(detail):find(c[3], 1, true) then
        wrong[#wrong + 1] = ("%s: expected %s (%s), got %s (%s)"):format(c[1], c[2], c[3], kind, tostring(detail))
      end
    end
    assert.same({}, wrong)
  end)

  describe("of names, after resolution", function()
    local orig
    before_each(function()
      orig = vim.uv.getaddrinfo
    end)
    after_each(function()
      vim.uv.getaddrinfo = orig
    end)
    -- The answers a DNS server would give (no DNS server runs here): the resolver is
    -- replaced by one that answers from this table, asynchronously as libuv's does.
    local function dns(answers)
      vim.uv.getaddrinfo = function(host, _, _, cb)
        vim.defer_fn(function()
          local a = answers[host]
          if not a then
            return cb("ENOTFOUND", nil)
          end
          cb(
            nil,
            vim.tbl_map(function(x)
              return { addr = x, family = x:find(":") and "inet6" or "inet" }
            end, a)
          )
        end, 1)
      end
    end

    it("refuses a name when any address it resolves to is refused, and keeps all when none is", function()
      dns({
        ["intranet.example"] = { "10.0.0.5" },
        ["mixed.example"] = { "93.184.216.34", "169.254.169.254" },
        ["mapped.example"] = { "::ffff:127.0.0.1" },
        ["public.example"] = { "93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946" },
      })
      local kind, detail = verdict("http://intranet.example/")
      assert.equals("refused", kind)
      assert.equals(
        "intranet.example resolves to 10.0.0.5, which is private (10.0.0.0/8): fetch never reaches it",
        detail
      )
      kind, detail = verdict("http://mixed.example/")
      assert.equals("refused", kind)
      assert.truthy(detail:find("169.254.169.254, which is link-local", 1, true), detail)
      kind, detail = verdict("http://mapped.example/")
      assert.equals("refused", kind)
      assert.truthy(detail:find("IPv4-mapped loopback", 1, true), detail)
      kind, detail = verdict("http://public.example./x")
      assert.equals("ok", kind)
      assert.equals("93.184.216.34,2606:2800:220:1:248:1893:25c8:1946", detail)
      kind, detail = verdict("http://unknown.example/")
      assert.equals("refused", kind)
      assert.truthy(detail:find("could not be resolved", 1, true), detail)
    end)
  end)

  it("rewrites an IP literal host to its plain form and resolves relative redirects", function()
    local u = assert(address.parse_url("http://0x5db8d822:8080/a/b?q=1#frag"))
    assert.equals("http://93.184.216.34:8080/a/b?q=1", u.url)
    assert.equals("http://93.184.216.34:8080/a/c", address.join(u, "c"))
    assert.equals("http://93.184.216.34:8080/x", address.join(u, "/x"))
    assert.equals("https://other.example/y", address.join(u, "//other.example/y"):gsub("^http:", "https:"))
    assert.equals("http://127.0.0.1/", address.join(u, "http://127.0.0.1/"))
  end)
end)

describe("fetch: the native HTML conversion", function()
  it("is reached through the header (flemma_html_convert): Markdown and plain text", function()
    local native = require("flemma.core.native")
    local html = '<h2>A &amp; B</h2><p>x <em>y</em> <a href="https://e.x/">z</a></p><script>no()</script>'
    assert.equals("## A & B\n\nx *y* [z](https://e.x/)\n", native.html_convert(html))
    assert.equals("A & B\n\nx y z\n", native.html_convert(html, "text"))
    assert.equals("", native.html_convert(""))
  end)
end)

describe("the fetch tool", function()
  local h, web

  local function setup(fetch, extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { autopilot = { enabled = false }, fetch = fetch },
    }, extra or {}))
  end
  local function allow()
    return { ("127.0.0.1:%d"):format(web.port) }
  end
  local function fetch_call(id, input)
    input = vim.tbl_extend("keep", input, { max_bytes = vim.NIL, format = vim.NIL, label = vim.NIL })
    return {
      body = helpers.anthropic_tool_stream({ { "fetch", id, vim.json.encode(input) } }),
      content_type = "text/event-stream",
    }
  end
  local function approve_all(buf)
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    for i, l in ipairs(lines) do
      if l == "```flemma:tool status=pending" then
        vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { "```flemma:tool status=approved" })
      end
    end
  end
  -- The model asks for `input`; the user approves; <C-]> runs it. Returns the buffer
  -- once the result of `id` is in.
  local function run(id, input, timeout)
    h.server:script({ fetch_call(id, input) })
    local buf = helpers.open_chat({ "@You:", "Fetch it." })
    press("<C-]>")
    h.wait_finished(1)
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("```flemma:tool status=pending", 1, true) ~= nil
    end, 10000, "no pending placeholder:\n" .. text(buf))
    approve_all(buf)
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("**Tool Result:** `" .. id .. "`", 1, true) ~= nil
        and not text(buf):find("status=approved", 1, true)
    end, timeout or 15000, "no result:\n" .. text(buf))
    return buf
  end
  local function result_of(buf, id)
    local t = text(buf)
    local s = t:find("**Tool Result:** `" .. id .. "`", 1, true)
    return t:sub(s)
  end
  local function request_tools(n)
    local req = h.server:requests()[n or 1].json
    local names = {}
    for _, t in ipairs(req.tools or {}) do
      names[#names + 1] = t.name
    end
    return names
  end

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    web = require("spec.support.llm_server").start()
  end)
  after_each(function()
    web:stop()
    h.teardown()
  end)

  it(
    "is off by default; enabled, it is offered and waits for approval under $default, $readonly and risk:safe",
    function()
      setup(nil, { tools = { auto_approve = { "$default", "$readonly", "$safe" } } })
      h.server:script({ { fixture = "anthropic_text.sse" } })
      local buf = helpers.open_chat({ "@You:", "Hi." })
      press("<C-]>")
      h.wait_finished(1)
      assert.is_nil(vim.tbl_contains(request_tools(), "fetch") or nil)
      vim.api.nvim_buf_delete(buf, { force = true })

      h.finished = {}
      setup({ enabled = true }, { tools = { auto_approve = { "$default", "$readonly", "$safe" } } })
      h.server:script({ fetch_call("toolu_f0", { url = web:url("/page") }) })
      buf = helpers.open_chat({ "@You:", "Fetch it." })
      press("<C-]>")
      h.wait_finished(1)
      assert.is_true(vim.tbl_contains(request_tools(), "fetch"))
      press("<C-]>")
      helpers.wait_for(function()
        return text(buf):find("```flemma:tool status=pending", 1, true) ~= nil
      end, 10000, "no pending placeholder:\n" .. text(buf))
      vim.wait(300)
      assert.same({}, web:requests())
    end
  )

  it("without allow_hosts the loopback page server is refused and never asked", function()
    setup({ enabled = true })
    web:script({ { body = "<p>secret admin page</p>", content_type = "text/html" } })
    local buf = run("toolu_f1", { url = web:url("/admin") })
    local r = result_of(buf, "toolu_f1")
    assert.truthy(r:find("`toolu_f1` (error)", 1, true), r)
    assert.truthy(r:find("127.0.0.1 is loopback (127.0.0.0/8): fetch never reaches it", 1, true), r)
    assert.same({}, web:requests())
  end)

  it("fetches a page as Markdown, sends no key, cookie or credentials, and the model gets it", function()
    setup({ enabled = true, allow_hosts = allow() })
    web:script({
      {
        body = "<html><head><title>T</title><script>var key='x'</script></head><body>"
          .. '<h1>Release notes</h1><p>Read <a href="/docs">the docs</a> &amp; <b>enjoy</b>.</p>'
          .. "<ul><li>one</li><li>two</li></ul><pre><code>make build</code></pre></body></html>",
        content_type = "text/html; charset=utf-8",
      },
    })
    local buf = run("toolu_f2", { url = web:url("/notes"), label = "notes" })
    local r = result_of(buf, "toolu_f2")
    assert.falsy(r:find("(error)", 1, true), r)
    assert.truthy(
      r:find("# Release notes\n\nRead [the docs](/docs) & **enjoy**.\n\n- one\n- two\n\n```\nmake build\n```", 1, true),
      r
    )
    assert.truthy(r:find(("[http://127.0.0.1:%d/notes: HTTP 200, text/html"):format(web.port), 1, true), r)
    assert.falsy(r:find("var key", 1, true), r)
    local reqs = web:requests()
    assert.equals(1, #reqs)
    assert.equals("GET", reqs[1].method)
    assert.equals("/notes", reqs[1].path)
    local seen = vim.inspect(reqs[1])
    assert.falsy(seen:find(KEY, 1, true), seen)
    for _, name in ipairs({ "authorization", "x-api-key", "cookie", "proxy-authorization" }) do
      assert.is_nil(reqs[1].headers[name], name)
    end
    -- The next <C-]> sends the page to the model.
    h.server:script({ { fixture = "anthropic_text.sse" } })
    press("<C-]>")
    h.wait_finished(2)
    local body = h.server:requests()[1].body
    assert.truthy(body:find("# Release notes", 1, true), body)
  end)

  it("follows 5 checked redirects, refuses a 6th, and a redirect elsewhere on this machine", function()
    setup({ enabled = true, allow_hosts = allow() })
    local hop = function(to)
      return { status = 302, headers = { Location = to }, body = "" }
    end
    web:script({
      hop("/1"),
      hop("2"),
      hop("/3"),
      hop(web:url("/4")),
      hop("/5"),
      { body = "<p>landed</p>", content_type = "text/html" },
    })
    local buf = run("toolu_f3", { url = web:url("/0") })
    local r = result_of(buf, "toolu_f3")
    assert.truthy(r:find("landed", 1, true), r)
    assert.truthy(r:find("after 5 redirects", 1, true), r)
    assert.equals(6, #web:requests())
    vim.api.nvim_buf_delete(buf, { force = true })

    h.finished = {}
    web:script({ hop("/1"), hop("/2"), hop("/3"), hop("/4"), hop("/5"), hop("/6"), { body = "<p>too far</p>" } })
    buf = run("toolu_f4", { url = web:url("/0") })
    r = result_of(buf, "toolu_f4")
    assert.truthy(r:find("`toolu_f4` (error)", 1, true), r)
    assert.truthy(r:find("more than 5 redirects (the last to /6): not followed", 1, true), r)
    assert.equals(6, #web:requests())
    vim.api.nvim_buf_delete(buf, { force = true })

    -- Another port of 127.0.0.1, and the same server by another name: both refused.
    for i, target in ipairs({ "http://127.0.0.1:1/internal", ("http://localhost:%d/x"):format(web.port) }) do
      h.finished = {}
      web:script({ hop(target), { body = "<p>inside</p>" } })
      local id = "toolu_f5" .. i
      buf = run(id, { url = web:url("/start") })
      r = result_of(buf, id)
      assert.truthy(r:find("`" .. id .. "` (error)", 1, true), r)
      assert.truthy(r:find("fetch never reaches it", 1, true), r)
      assert.equals(1, #web:requests())
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end)

  it("connects curl to the checked address only (--resolve): a name curl cannot resolve itself works", function()
    -- `.invalid` never resolves (RFC 6761); the check's resolver answers 127.0.0.1 for
    -- it (as a DNS server could, then answer curl differently). The page arrives, so
    -- curl used the checked address and looked up nothing itself.
    local orig = vim.uv.getaddrinfo
    vim.uv.getaddrinfo = function(host, service, hints, cb)
      if host == "pinned.invalid" then
        return vim.defer_fn(function()
          cb(nil, { { addr = "127.0.0.1", family = "inet" } })
        end, 1)
      end
      return orig(host, service, hints, cb)
    end
    local ok, err = pcall(function()
      setup({ enabled = true, allow_hosts = { ("pinned.invalid:%d"):format(web.port) } })
      web:script({ { body = "<p>pinned</p>", content_type = "text/html" } })
      local buf = run("toolu_fp", { url = ("http://pinned.invalid:%d/p"):format(web.port) })
      local r = result_of(buf, "toolu_fp")
      assert.falsy(r:find("(error)", 1, true), r)
      assert.truthy(r:find("\npinned\n", 1, true), r)
      assert.equals(("pinned.invalid:%d"):format(web.port), web:requests()[1].headers.host)
    end)
    vim.uv.getaddrinfo = orig
    assert(ok, err)
  end)

  it("stops a page past max_bytes, and refuses a binary one", function()
    setup({ enabled = true, allow_hosts = allow() })
    web:script({
      { gen = { head = "<p>", piece = "0123456789", count = 200000, tail = "</p>" }, content_type = "text/html" },
    })
    local buf = run("toolu_f6", { url = web:url("/big"), max_bytes = 100000 })
    local r = result_of(buf, "toolu_f6")
    assert.truthy(r:find("`toolu_f6` (error)", 1, true), r)
    assert.truthy(r:find("the page is larger than 100000 bytes (max_bytes)", 1, true), r)
    vim.api.nvim_buf_delete(buf, { force = true })

    h.finished = {}
    web:script({ { body = "GIF89a\0\0\1", content_type = "image/gif" } })
    buf = run("toolu_f7", { url = web:url("/img.gif") })
    r = result_of(buf, "toolu_f7")
    assert.truthy(r:find("the page is not text (content type: image/gif)", 1, true), r)
  end)

  it("keeps the head of a long page and saves the whole text to a private file", function()
    setup({ enabled = true, allow_hosts = allow() }, { tools = { truncate = { max_lines = 50, max_bytes = 51200 } } })
    web:script({
      {
        gen = { head = "<ol>", piece = "<li>item {n}</li>", count = 3000, tail = "</ol>" },
        content_type = "text/html",
      },
    })
    local buf = run("toolu_f8", { url = web:url("/long") })
    local r = result_of(buf, "toolu_f8")
    assert.truthy(r:find("1. item 0\n2. item 1\n", 1, true), r)
    assert.falsy(r:find("item 2999", 1, true), r)
    local path = r:match("Full text: (%S+)%]")
    assert.truthy(path, r)
    local data = table.concat(vim.fn.readfile(path), "\n")
    assert.truthy(data:find("3000. item 2999", 1, true))
    assert.equals(tonumber("600", 8), bit.band(vim.uv.fs_stat(path).mode, tonumber("777", 8)))
    os.remove(path)
  end)

  it("gives up on a slow server at the timeout while Neovim's loop keeps turning", function()
    setup({ enabled = true, allow_hosts = allow(), timeout = 2 })
    web:script({
      { body = "<p>late</p>", content_type = "text/html", hang_ms = 20000, no_chunked = true, truncate_at = 3 },
    })
    local ticks = 0
    local timer = vim.uv.new_timer()
    timer:start(20, 20, function()
      ticks = ticks + 1
    end)
    local started = vim.uv.now()
    local buf = run("toolu_f9", { url = web:url("/slow") }, 20000)
    timer:stop()
    timer:close()
    local r = result_of(buf, "toolu_f9")
    assert.truthy(r:find("`toolu_f9` (error)", 1, true), r)
    assert.truthy(r:find("no answer within 2 s", 1, true), r)
    assert.is_true(vim.uv.now() - started < 15000)
    -- The loop ran its timers all along (a blocked loop runs none until the end).
    assert.is_true(ticks >= 20, "timer ticks during the fetch: " .. ticks)
  end)

  it("cannot be enabled or opened up from frontmatter", function()
    setup({ enabled = false })
    h.server:script({ { fixture = "anthropic_text.sse" } })
    local buf = helpers.open_chat({
      "```lua",
      'flemma.opt.tools.fetch = { enabled = true, allow_hosts = { "127.0.0.1:1" } }',
      "```",
      "@You:",
      "Hi.",
    })
    press("<C-]>")
    -- The frontmatter fails to evaluate (tools.fetch is no field of flemma.opt.tools):
    -- nothing is sent, and the configuration is what setup() made it.
    helpers.wait_for(function()
      for _, n in ipairs(h.notes) do
        if n.msg:find("flemma.opt.tools.fetch", 1, true) then
          return true
        end
      end
      return false
    end, 10000, "no message about flemma.opt.tools.fetch: " .. vim.inspect(h.notes))
    vim.wait(300)
    assert.same({}, h.server:requests())
    assert.is_false(require("flemma.core.config").get().tools.fetch.enabled)
    assert.same({}, require("flemma.core.config").get().tools.fetch.allow_hosts)
    vim.api.nvim_buf_delete(buf, { force = true })
  end)
end)
