-- File references (@./path) in @You: and @System: text: what counts as a reference,
-- and what each provider kind receives, checked on the requests the loopback server
-- records after <C-]> in a real chat buffer (real files, real curl).
local helpers = require("spec.support.helpers")
local attachments = require("flemma.chat.attachments")

local KEY = "sk-attach-spec-" .. tostring(math.random(1e9))

-- A real 1x1 PNG (red pixel) and a small, valid one-page PDF.
local PNG =
  vim.base64.decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
local PDF = table.concat({
  "%PDF-1.4",
  "1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj",
  "2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj",
  "3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 72 72] >> endobj",
  "trailer << /Root 1 0 R >>",
  "%%EOF",
  "",
}, "\n")

-- base64 as coreutils computes it (not the code under test).
local function b64(path)
  local res = vim.system({ "base64", "-w0", path }, { text = true }):wait()
  assert(res.code == 0, res.stderr)
  return vim.trim(res.stdout)
end

local sse_body = helpers.sse_body

local press = helpers.press

describe("flemma.attachments.references", function()
  local function paths(text)
    return vim.tbl_map(function(r)
      return r.path .. (r.type and (" " .. r.type) or "")
    end, attachments.references(text))
  end

  it("reads the four path forms and leaves trailing punctuation out", function()
    assert.same(
      { "./a.txt", "../b.md", "~/c.lua", "/abs/d.png" },
      paths("see @./a.txt, @../b.md; @~/c.lua! and @/abs/d.png.")
    )
    assert.same({ "./b.png", "./c.pdf", "./d.txt" }, paths("(@./b.png) [@./c.pdf] '@./d.txt'?"))
    assert.same({ "./dir/file.tar.gz" }, paths("@./dir/file.tar.gz..."))
  end)

  it("reads a space escaped by a backslash as part of the path", function()
    assert.same(
      { "./my notes.txt", "~/a b/c d.png image/png" },
      paths("see @./my\\ notes.txt, and @~/a\\ b/c\\ d.png;type=image/png.")
    )
    assert.same({ "./x\\y.txt" }, paths("@./x\\y.txt next"))
    local text = "(@./two\\ words.md) then"
    local refs = attachments.references(text)
    assert.equals("@./two\\ words.md", text:sub(refs[1].first, refs[1].last))
  end)

  it("reads ;type= after the path", function()
    assert.same(
      { "./data.bin text/plain", "./x image/png" },
      paths("@./data.bin;type=text/plain and @./x;type=image/png.")
    )
  end)

  it("gives the byte range of each reference", function()
    local refs = attachments.references("ab\n(@./x.txt).")
    assert.equals(5, refs[1].first)
    assert.equals(12, refs[1].last)
    assert.equals("@./x.txt", ("ab\n(@./x.txt)."):sub(refs[1].first, refs[1].last))
  end)

  it("does not take e-mail addresses, role markers, bare @ or other @words", function()
    assert.same({}, paths("mail bob@./x.org or me@example.com"))
    assert.same({}, paths("@You: @System: @Assistant: @ ./a @.hidden @//host/x @/ @./"))
    assert.same({}, paths("twice @@./a.txt"))
  end)

  it("skips fenced code blocks (``` and ~~~, closed by a fence at least as long) and inline code", function()
    local text = table.concat({
      "before @./one.txt",
      "````lua",
      "@./in_fence.txt",
      "```",
      "@./still_in_fence.txt",
      "````",
      "~~~",
      "@./tilde.txt",
      "~~~",
      "inline `@./code.txt` and ``x @./code2.txt`` but @./after.txt",
      "unclosed ` @./open.txt",
    }, "\n")
    assert.same({ "./one.txt", "./after.txt", "./open.txt" }, paths(text))
  end)
end)

describe("flemma.attachments.reference_at", function()
  it("finds the reference under a 0-based column, without its trailing punctuation", function()
    local line = "see (@./a.txt;type=text/plain). ok"
    assert.is_nil(attachments.reference_at(line, 3))
    local r = attachments.reference_at(line, 5)
    assert.same({ path = "./a.txt", type = "text/plain", first = 5, last = 28 }, r)
    assert.same(r, attachments.reference_at(line, 28))
    assert.is_nil(attachments.reference_at(line, 29))
    assert.is_nil(attachments.reference_at("me@example.com", 3))
    local spaced = attachments.reference_at("open @./my\\ notes.txt now", 12)
    assert.same({ path = "./my notes.txt", first = 5, last = 20 }, spaced)
  end)
end)

describe("sending file references", function()
  local h, server, notes, finished, dir

  local function setup(kind, path, extra)
    local providers = {
      test = { kind = kind, endpoint = server:url(path), api_key_env = "FLEMMA_SPEC_KEY" },
    }
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = providers,
      model = kind == "vertex" and "gemini-2.5-flash" or (kind == "openai_chat" and "qwen3" or nil),
      parameters = {
        max_retries = 0,
        cache_retention = "none",
        connect_timeout = 5,
        timeout = 30,
        vertex = { project_id = "proj-1" },
      },
      tools = { autopilot = { enabled = false } },
    }, extra or {}))
  end

  local function chat(lines)
    return helpers.edit(dir .. "/talk.chat", lines)
  end

  local function send_and_wait(answer)
    server:script({ answer })
    local before = #finished
    press("<C-]>")
    h.wait_finished(before + 1)
    local res = finished[#finished]
    assert.equals("completed", res.status, vim.inspect(notes))
    local reqs = server:requests()
    assert.equals(1, #reqs)
    return reqs[1].json
  end

  before_each(function()
    h = helpers.send_harness({ key = KEY, timeout = 15000 })
    server, notes, finished = h.server, h.notes, h.finished
    dir = helpers.tmpdir()
    helpers.write_file(dir .. "/notes.txt", "first line\nuses ``` inside\n")
    helpers.write_file(dir .. "/pixel.png", PNG)
    helpers.write_file(dir .. "/docs/paper.pdf", PDF)
  end)

  after_each(function()
    h.teardown()
  end)

  local USER = "Compare @./notes.txt with (@./pixel.png) and @./docs/paper.pdf."
  local INLINED = "File: ./notes.txt\n````\nfirst line\nuses ``` inside\n````"

  it("anthropic: text inlined, PNG as an image block, PDF as a document block (base64)", function()
    setup("anthropic", "/v1/messages")
    chat({ "@You:", USER })
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.same({
      {
        role = "user",
        content = {
          { type = "text", text = USER },
          { type = "text", text = INLINED },
          { type = "image", source = { type = "base64", media_type = "image/png", data = b64(dir .. "/pixel.png") } },
          {
            type = "document",
            title = "./docs/paper.pdf",
            source = { type = "base64", media_type = "application/pdf", data = b64(dir .. "/docs/paper.pdf") },
          },
        },
      },
    }, body.messages)
  end)

  it("openai (Responses): input_text, input_image and input_file with data URLs", function()
    setup("openai", "/v1/responses")
    chat({ "@You:", USER })
    local body = send_and_wait({ body = sse_body("responses_reasoning_text.http"), content_type = "text/event-stream" })
    assert.same({
      {
        role = "user",
        content = {
          { type = "input_text", text = USER .. "\n\n" .. INLINED },
          { type = "input_image", image_url = "data:image/png;base64," .. b64(dir .. "/pixel.png") },
          {
            type = "input_file",
            filename = "paper.pdf",
            file_data = "data:application/pdf;base64," .. b64(dir .. "/docs/paper.pdf"),
          },
        },
      },
    }, body.input)
  end)

  it("openai_chat: image_url data URL; a PDF to a local server as a text note", function()
    setup("openai_chat", "/v1/chat/completions")
    chat({ "@You:", USER })
    local body = send_and_wait({ fixture = "openai_chat_text.sse" })
    assert.same({
      {
        role = "user",
        content = {
          { type = "text", text = USER .. "\n\n" .. INLINED },
          { type = "image_url", image_url = { url = "data:image/png;base64," .. b64(dir .. "/pixel.png") } },
          {
            type = "text",
            text = ("[File ./docs/paper.pdf (application/pdf, %d bytes) is not included: this server does not take PDF files]"):format(
              #PDF
            ),
          },
        },
      },
    }, body.messages)
  end)

  it("openai_chat: a PDF to api.openai.com or openrouter.ai as a file part", function()
    local provider = require("flemma.provider")
    local document = require("flemma.chat.document")
    local buf = chat({ "@You:", "Read @./docs/paper.pdf" })
    local doc = assert(attachments.expand(buf, document.get(buf)))
    for _, endpoint in ipairs({
      "https://api.openai.com/v1/chat/completions",
      "https://openrouter.ai/api/v1/chat/completions",
    }) do
      local spec = { name = "x", kind = "openai_chat", endpoint = endpoint, model = "gpt-4o" }
      local ctx = provider.context(spec, document.to_messages(doc), { parameters = {}, tools = {} })
      local body = vim.json.decode((provider.encode(ctx)))
      assert.same({
        { type = "text", text = "Read @./docs/paper.pdf" },
        {
          type = "file",
          file = { filename = "paper.pdf", file_data = "data:application/pdf;base64," .. b64(dir .. "/docs/paper.pdf") },
        },
      }, body.messages[1].content)
    end
  end)

  it("vertex: inlineData parts", function()
    setup(
      "vertex",
      "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse"
    )
    chat({ "@You:", USER })
    local body = send_and_wait({ body = sse_body("vertex_thinking_text.http"), content_type = "text/event-stream" })
    assert.same({
      {
        role = "user",
        parts = {
          { text = USER },
          { text = INLINED },
          { inlineData = { mimeType = "image/png", data = b64(dir .. "/pixel.png") } },
          { inlineData = { mimeType = "application/pdf", data = b64(dir .. "/docs/paper.pdf") } },
        },
      },
    }, body.contents)
  end)

  it("@System: gets text files inlined and a note for an image; ;type= overrides the extension", function()
    setup("anthropic", "/v1/messages")
    helpers.write_file(dir .. "/data.bin", "plain words")
    chat({ "@System:", "Rules in @./notes.txt and @./pixel.png", "", "@You:", "Read @./data.bin;type=text/plain." })
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.same({
      {
        type = "text",
        text = "Rules in @./notes.txt and @./pixel.png\n\n"
          .. INLINED
          .. "\n\n"
          .. ("[File ./pixel.png (image/png, %d bytes) is not included: a system prompt takes text only]"):format(#PNG),
      },
    }, body.system)
    assert.same({
      { type = "text", text = "Read @./data.bin;type=text/plain." },
      { type = "text", text = "File: ./data.bin\n```\nplain words\n```" },
    }, body.messages[1].content)
    assert.truthy(
      vim.iter(notes):any(function(n)
        return n.level == vim.log.levels.WARN and n.msg:find("@./pixel.png in @System:", 1, true) ~= nil
      end),
      vim.inspect(notes)
    )
  end)

  it("a file changed between sends is read again", function()
    setup("anthropic", "/v1/messages")
    local buf = chat({ "@You:", "Look at @./notes.txt" })
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.equals(INLINED, body.messages[1].content[2].text)
    helpers.write_file(dir .. "/notes.txt", "changed, and longer than before\n")
    local n = vim.api.nvim_buf_line_count(buf)
    vim.api.nvim_buf_set_lines(buf, n, n, false, { "", "@You:", "Again @./notes.txt" })
    body = send_and_wait({ fixture = "anthropic_text.sse" })
    local want = "File: ./notes.txt\n```\nchanged, and longer than before\n```"
    assert.equals(want, body.messages[1].content[2].text)
    assert.equals(want, body.messages[3].content[2].text)
  end)

  it("hands back the same message tables while the message and its files are unchanged", function()
    setup("anthropic", "/v1/messages")
    local document = require("flemma.chat.document")
    local buf =
      chat({ "@You:", "Look at @./pixel.png", "", "@Assistant:", "A red pixel.", "", "@You:", "And @./notes.txt" })
    local a = assert(attachments.expand(buf, document.get(buf)))
    local b = assert(attachments.expand(buf, document.get(buf)))
    assert.equals(a.messages[1], b.messages[1])
    assert.equals(a.messages[3], b.messages[3])
    assert.equals("file", a.messages[1].parts[2].kind)
    helpers.write_file(dir .. "/notes.txt", "new content, new size\n")
    local c = assert(attachments.expand(buf, document.get(buf)))
    assert.equals(a.messages[1], c.messages[1])
    assert.are_not.equal(a.messages[3], c.messages[3])
    assert.equals("File: ./notes.txt\n```\nnew content, new size\n```", c.messages[3].parts[2].text)
    -- the document itself is not changed
    assert.equals(1, #document.get(buf).messages[1].parts)
  end)

  it("lets go of the files read for a chat once its buffer is wiped", function()
    setup("anthropic", "/v1/messages")
    local document = require("flemma.chat.document")
    -- 4 MB of PDF: 5.3 MB of base64 kept for the next send while the chat is open.
    helpers.write_file(dir .. "/big.pdf", "%PDF-1.4\n" .. string.rep("pdf bytes 0123456789 ", 200000))
    local buf = chat({ "@You:", "Read @./big.pdf" })
    local out = assert(attachments.expand(buf, document.get(buf)))
    assert.equals("file", out.messages[1].parts[2].kind)
    out = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    local open_kb = collectgarbage("count")
    vim.api.nvim_buf_delete(buf, { force = true })
    collectgarbage()
    collectgarbage()
    local freed_mb = (open_kb - collectgarbage("count")) / 1024
    assert.is_true(freed_mb > 4, ("only %.1f MB freed after the wipe"):format(freed_mb))
  end)

  local function blocked(lines, setup_extra)
    setup("anthropic", "/v1/messages", setup_extra)
    local buf = chat(lines)
    server:script({ { fixture = "anthropic_text.sse" } })
    press("<C-]>")
    vim.wait(300, function()
      return #finished > 0
    end)
    assert.same({}, server:requests(), "a request was sent")
    assert.same(lines, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    local diags = vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })
    return diags, buf
  end

  it("a missing file is a diagnostic on its line and blocks the send; the buffer is unchanged", function()
    local diags = blocked({ "@You:", "Fine @./notes.txt", "", "but not @./gone.txt." })
    assert.equals(1, #diags)
    assert.equals(3, diags[1].lnum)
    assert.truthy(
      diags[1].message:find("file @./gone.txt not found (" .. dir .. "/gone.txt)", 1, true),
      diags[1].message
    )
    assert.truthy(
      vim.iter(notes):any(function(n)
        return n.level == vim.log.levels.ERROR and n.msg:find("line 4: file @./gone.txt not found", 1, true) ~= nil
      end),
      vim.inspect(notes)
    )
  end)

  it("the diagnostics of a refused send follow the references as they are edited", function()
    local _, buf = blocked({ "@You:", "Fine @./notes.txt", "", "but not @./gone.txt." })
    local function shown()
      local out = {}
      for _, d in ipairs(vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })) do
        out[#out + 1] = (d.lnum + 1) .. " " .. d.message:match("^file (%S+)")
      end
      table.sort(out)
      return table.concat(out, "|")
    end
    assert.equals("4 @./gone.txt", shown())
    -- Another missing file on another line: the diagnostic moves there.
    vim.api.nvim_buf_set_lines(buf, 1, 4, false, { "Fine @./missing.md", "but @./notes.txt." })
    helpers.wait_for(function()
      return shown() == "2 @./missing.md"
    end, 2000, "the diagnostic did not follow: " .. shown())
    -- Fixed: nothing left, and later edits are not checked any more.
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "Fine @./docs/paper.pdf" })
    helpers.wait_for(function()
      return shown() == ""
    end, 2000, "the diagnostic stayed: " .. shown())
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "@./gone.txt" })
    vim.wait(100)
    assert.equals("", shown())
  end)

  it("after templates: a reference a template writes is attached; a problem names the buffer line", function()
    local diags = blocked({ "@You:", "{% for i = 1, 3 do %}", "row {{ i }}", "{% end %}", "then @./gone.txt" })
    assert.equals(1, #diags)
    assert.equals(4, diags[1].lnum, vim.inspect(diags))
    assert.truthy(diags[1].message:find("file @./gone.txt not found", 1, true), diags[1].message)

    vim.cmd("silent! %bwipeout!")
    chat({ "@You:", 'Read {{ "@./" .. "notes.txt" }}' })
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.same({
      { type = "text", text = "Read @./notes.txt" },
      { type = "text", text = INLINED },
    }, body.messages[1].content)
  end)

  it("a file over attachments.max_bytes is refused with its size", function()
    helpers.write_file(dir .. "/big.txt", string.rep("x", 2000) .. "\n")
    local diags = blocked({ "@You:", "", "Read @./big.txt" }, { attachments = { max_bytes = 1000 } })
    assert.equals(1, #diags)
    assert.equals(2, diags[1].lnum)
    assert.truthy(
      diags[1].message:find("file @./big.txt is 2.0 KB (2001 bytes), over attachments.max_bytes (1000 bytes)", 1, true),
      diags[1].message
    )
  end)

  it("a directory, a file type that cannot be sent and invalid UTF-8 are refused", function()
    helpers.write_file(dir .. "/blob.zip", "PK\3\4 not really")
    helpers.write_file(dir .. "/latin1.txt", "caf\233\n")
    local diags = blocked({ "@You:", "@./docs", "@./blob.zip", "@./latin1.txt" })
    assert.equals(3, #diags)
    assert.truthy(diags[1].message:find("@./docs is a directory", 1, true), diags[1].message)
    assert.truthy(diags[2].message:find("@./blob.zip is application/zip", 1, true), diags[2].message)
    assert.truthy(diags[3].message:find("@./latin1.txt is not UTF-8 text", 1, true), diags[3].message)
    assert.same({ 1, 2, 3 }, { diags[1].lnum, diags[2].lnum, diags[3].lnum })
  end)

  it("refuses devices, FIFOs and the kernel's files (/proc/self/environ holds the keys) without hanging", function()
    assert.equals(0, vim.fn.system({ "mkfifo", dir .. "/pipe" }) and vim.v.shell_error)
    vim.uv.fs_symlink("/proc/self/environ", dir .. "/env.txt")
    local diags = blocked({ "@You:", "@/dev/zero", "@./pipe", "@/proc/self/environ;type=text/plain", "@./env.txt" })
    assert.equals(4, #diags, vim.inspect(diags))
    assert.truthy(
      diags[1].message:find("@/dev/zero is not a regular file (/dev/zero, a char)", 1, true),
      diags[1].message
    )
    assert.truthy(diags[2].message:find("@./pipe is not a regular file", 1, true), diags[2].message)
    assert.truthy(diags[3].message:find("@/proc/self/environ is under /proc", 1, true), diags[3].message)
    assert.truthy(diags[4].message:find("@./env.txt is under /proc", 1, true), diags[4].message)
    assert.is_nil(vim.iter(notes):find(function(n)
      return n.msg:find(KEY, 1, true) ~= nil
    end))
  end)

  it("references in code, e-mail addresses and @Assistant: text are not read", function()
    setup("anthropic", "/v1/messages")
    local lines = {
      "@You:",
      "Write to me@example.com about `@./gone1.txt`:",
      "```",
      "@./gone2.txt",
      "```",
      "",
      "@Assistant:",
      "I read @./gone3.txt",
      "",
      "@You:",
      "ok",
    }
    chat(lines)
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.same({ { type = "text", text = table.concat(lines, "\n", 2, 5) } }, body.messages[1].content)
    assert.same({ { type = "text", text = "I read @./gone3.txt" } }, body.messages[2].content)
  end)

  it("a path with an escaped space is read from the file with the space", function()
    setup("anthropic", "/v1/messages")
    helpers.write_file(dir .. "/my notes.txt", "spaced\n")
    chat({ "@You:", "Read @./my\\ notes.txt." })
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.equals("File: ./my notes.txt\n```\nspaced\n```", body.messages[1].content[2].text)
  end)

  it("a file with an unknown extension gets its type from `file --mime-type`", function()
    setup("anthropic", "/v1/messages")
    helpers.write_file(dir .. "/IMAGE", PNG)
    helpers.write_file(dir .. "/README", "just text\n")
    chat({ "@You:", "@./IMAGE @./README" })
    local body = send_and_wait({ fixture = "anthropic_text.sse" })
    assert.same(
      { type = "base64", media_type = "image/png", data = b64(dir .. "/IMAGE") },
      body.messages[1].content[2].source
    )
    assert.equals("File: ./README\n```\njust text\n```", body.messages[1].content[3].text)
  end)
end)
