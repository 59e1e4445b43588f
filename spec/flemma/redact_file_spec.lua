-- The whole output a tool keeps on disk (and an MCP result's text) is redacted as
-- util.redact redacts a text, by the library on a worker thread of its own
-- (process.redact_file -> flemma_procmgr_redact_file): the main loop only starts it.
local helpers = require("spec.support.helpers")
local util = require("flemma.core.util")
local process = require("flemma.core.process")

local KEY = "sk-flemma-redact-" .. tostring(math.random(1e9)) .. "-" .. tostring(math.random(1e9))

local anthropic_answer = helpers.anthropic_answer

-- Runs process.redact_file on a file holding `text`; returns what the file holds
-- then (nil when it was removed) and whether done() ran at once.
local function redact(dir, name, text)
  local path = dir .. "/" .. name
  helpers.write_file(path, text)
  local done = false
  process.redact_file(path, function()
    done = true
  end)
  local sync = done
  helpers.wait_for(function()
    return done
  end, 30000, "redact_file did not finish")
  local out = helpers.read_file(path)
  os.remove(path)
  return out, sync
end

describe("process.redact_file", function()
  local dir

  before_each(function()
    dir = helpers.tmpdir()
    util.add_secret(KEY)
    vim.env.FLEMMA_REDACT_SPEC_TOKEN = "env-token-" .. tostring(math.random(1e9))
  end)

  after_each(function()
    vim.env.FLEMMA_REDACT_SPEC_TOKEN = nil
  end)

  it("gives what util.redact gives, for the same texts", function()
    local env = vim.env.FLEMMA_REDACT_SPEC_TOKEN
    local json_form = vim.json.encode(KEY):sub(2, -2)
    local cases = {
      "",
      "plain text\n",
      "a " .. KEY .. " b " .. env .. "\n",
      "Authorization: Bearer abc\r\nX-Api-Key: k1\nx-goog-api-key:k2",
      'header = "Authorization: Bearer abc"\nurl = "x"\n',
      'HEADER="  x-api-key :abc\r\nnext',
      "authorization:\n\nfoo\nbar",
      'x-api-key: "quoted"',
      "authorizauthorization: v",
      "x-api-key: authorization: " .. KEY .. "\n",
      "\0\255 x-api-key: \1\2\0abc\n\0" .. KEY .. "\254",
      KEY:sub(1, 10) .. "[redacted]" .. KEY:sub(11),
      json_form .. "\n",
    }
    -- Random mixes of the pieces a header rule or a value is made of.
    local frags = {
      KEY,
      KEY:sub(1, 9),
      env,
      "Authorization",
      "x-api-key",
      "X-GOOG-API-KEY",
      "header",
      " = ",
      '"',
      ":",
      " ",
      "\n",
      "\r",
      "\t",
      "abc",
      "[redacted]",
      "\0",
    }
    math.randomseed(7)
    for _ = 1, 150 do
      local t = {}
      for _ = 1, math.random(0, 30) do
        t[#t + 1] = frags[math.random(#frags)]
      end
      cases[#cases + 1] = table.concat(t)
    end
    -- Longer than one read of the library (1 MiB), with keys and headers across the marks.
    local long = {}
    for i = 1, 3 * 1024 * 1024, 4096 do
      long[#long + 1] = string.rep("z", 4096 - 60 - (i % 7)) .. KEY .. " x-api-key: v" .. i .. "\n"
    end
    cases[#cases + 1] = table.concat(long)
    for i, text in ipairs(cases) do
      local got, sync = redact(dir, "case" .. i, text)
      assert.is_false(sync, "done() ran at once")
      local want = util.redact(text)
      if got ~= want then
        error(
          ("case %d differs:\n%s\n-- util.redact:\n%s\n-- file:\n%s"):format(
            i,
            vim.inspect(text:sub(1, 300)),
            vim.inspect(want:sub(1, 300)),
            vim.inspect((got or "<removed>"):sub(1, 300))
          )
        )
      end
    end
  end)

  it("leaves a file with nothing to redact as it is (only read), first use of the library included", function()
    local path = dir .. "/clean"
    helpers.write_file(path, string.rep("nothing secret here\n", 100000))
    local before = assert(vim.uv.fs_stat(path))
    local done = false
    process.redact_file(path, function()
      done = true
    end)
    assert.is_false(done)
    helpers.wait_for(function()
      return done
    end, 10000)
    local after = assert(vim.uv.fs_stat(path))
    assert.equals(before.ino, after.ino, "the file was rewritten")
    assert.equals(before.size, after.size)
  end)

  it("removes the file when it cannot be redacted (the temporary name is taken)", function()
    local path = dir .. "/taken"
    helpers.write_file(path, "a " .. KEY .. "\n")
    helpers.write_file(path .. ".redacted", "someone's")
    local done = false
    process.redact_file(path, function()
      done = true
    end)
    helpers.wait_for(function()
      return done
    end, 10000)
    assert.is_nil(vim.uv.fs_stat(path))
    assert.is_nil(vim.uv.fs_stat(path .. ".redacted"))
  end)

  it("keeps the main loop ticking while a big file is redacted", function()
    local path = dir .. "/big"
    local piece = string.rep("y", 1024 * 1024 - #KEY - 1) .. KEY .. "\n"
    local f = assert(io.open(path, "wb"))
    for _ = 1, 64 do
      f:write(piece)
    end
    f:close()
    local ticks, done = 0, false
    local timer = assert(vim.uv.new_timer())
    timer:start(1, 1, function()
      ticks = ticks + 1
    end)
    process.redact_file(path, function()
      done = true
    end)
    local at_start = ticks
    helpers.wait_for(function()
      return done
    end, 60000, "the redaction did not finish")
    timer:stop()
    timer:close()
    assert.equals(0, at_start, "the redaction held the loop")
    assert.truthy(ticks >= 10, "the timer ticked " .. ticks .. " times")
    local st = assert(vim.uv.fs_stat(path))
    assert.equals(64 * (1024 * 1024 - #KEY - 1 + #"[redacted]" + 1), st.size)
    local fh = assert(io.open(path, "rb"))
    local found = false
    while true do
      local chunk = fh:read(8 * 1024 * 1024)
      if not chunk then
        break
      end
      found = found or chunk:find(KEY, 1, true) ~= nil
    end
    fh:close()
    os.remove(path)
    assert.is_false(found, "the key is in the file")
  end)
end)

describe("a kept output", function()
  local h, server, saved, project

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    server = h.server
    saved = { cwd = vim.fn.getcwd() }
    project = vim.fs.normalize(assert(vim.uv.fs_realpath(assert(vim.uv.fs_mkdtemp("/var/tmp/flemma-redact-XXXXXX")))))
    vim.cmd.cd(project)
  end)

  after_each(function()
    h.teardown()
    vim.cmd.cd(saved.cwd)
    vim.fn.delete(project, "rf")
  end)

  it("of a real bash tool holds no secret: a key across a 256 KiB mark, a header value across another", function()
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", timeout = 30 },
      tools = { autopilot = { enabled = true }, auto_approve = { "bash" } },
    })
    local K = 256 * 1024
    local parts = {
      string.rep("a", K - 10),
      KEY, -- across the first 256 KiB mark
      "\n",
      string.rep("b", 2 * K - (K - 10 + #KEY + 1) - 100),
      -- a header whose value runs across the second mark (and far past it)
      "Authorization: Bearer " .. string.rep("h", 300 * 1024) .. "\r\n",
      'header = "x-api-key: curl-config-value"\n',
    }
    for i = 1, 3000 do
      parts[#parts + 1] = "line " .. i .. "\n"
    end
    local content = table.concat(parts)
    helpers.write_file(project .. "/big.txt", content)
    local use = { id = "toolu_big", name = "bash", input = { command = "cat big.txt" } }
    server:script({
      { body = anthropic_answer("Let me look.", { use }), content_type = "text/event-stream" },
      { body = anthropic_answer("Thanks."), content_type = "text/event-stream" },
    })
    local buf = helpers.edit(project .. "/talk.chat", { "@You:", "Hi" })
    helpers.press("<C-]>")
    assert.equals("completed", h.wait_finished(2, 60000).status)
    helpers.settle()
    local text = helpers.text(buf)
    assert.is_nil(text:find(KEY, 1, true), "the key is in the chat")
    local path = text:match("Full output: (/[^%s`%]]+)")
    assert.truthy(path, "the result names no file:\n" .. text:sub(1, 2000))
    local full = assert(helpers.read_file(path))
    os.remove(path)
    assert.is_nil(full:find(KEY, 1, true), "the key is in " .. path)
    assert.is_nil(full:find(KEY:sub(1, 12), 1, true), "a part of the key is in " .. path)
    assert.is_nil(full:find(KEY:sub(-10), 1, true), "a part of the key is in " .. path)
    assert.is_nil(full:find("hhhh", 1, true), "a part of the header's value is in " .. path)
    assert.is_nil(full:find("curl-config-value", 1, true))
    assert.truthy(full:find("Authorization: [redacted]\r\n", 1, true))
    assert.truthy(full:find('header = "x-api-key: [redacted]"\n', 1, true))
    -- Exactly what util.redact makes of the whole output.
    assert.equals(util.redact(content), full)
  end)
end)
