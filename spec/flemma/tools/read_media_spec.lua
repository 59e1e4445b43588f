-- `read` of an image or PDF (issue 27): the result carries the file. The chat shows a
-- reference on the result's fence line (never the bytes); the request built at send
-- time holds the file as each provider kind takes it in a tool result. Real files,
-- real <C-]> cycles (categorize, run, autopilot send) and the loopback server as the
-- model; what is checked is the JSON body the server received.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local KEY = "sk-read-media-spec-" .. tostring(math.random(1e9))

-- A real 1x1 PNG and a small one-page PDF.
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

local ENDPOINTS = {
  anthropic = "/v1/messages",
  openai = "/v1/responses",
  openai_chat = "/v1/chat/completions",
  vertex = "/v1/projects/{project_id}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse",
}

local ANSWERS = {
  anthropic = { fixture = "anthropic_text.sse" },
  openai = { body = sse_body("responses_reasoning_text.http"), content_type = "text/event-stream" },
  openai_chat = { fixture = "openai_chat_text.sse" },
  vertex = { body = sse_body("vertex_thinking_text.http"), content_type = "text/event-stream" },
}

describe("read of an image or PDF", function()
  local h, project, saved_cwd

  local function setup(kind, extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = { test = { kind = kind, endpoint = h.server:url(ENDPOINTS[kind]), api_key_env = "FLEMMA_SPEC_KEY" } },
      model = kind == "vertex" and "gemini-2.5-flash" or (kind == "openai_chat" and "qwen3" or nil),
      parameters = {
        max_retries = 0,
        cache_retention = "none",
        connect_timeout = 5,
        timeout = 30,
        vertex = { project_id = "proj-1" },
      },
      tools = { autopilot = { enabled = true }, auto_approve = { "$default" } },
    }, extra or {}))
    h.server:script({ ANSWERS[kind] })
  end

  local function read_use(id, path)
    return {
      "**Tool Use:** `read` (`" .. id .. "`)",
      "",
      "```json",
      vim.json.encode({ path = path, offset = vim.NIL, limit = vim.NIL, line_numbers = vim.NIL, label = vim.NIL }),
      "```",
    }
  end

  local function chat(lines)
    return helpers.edit(project .. "/talk.chat", lines)
  end

  -- <C-]> until a request finished: the first press categorizes and runs the read,
  -- autopilot sends its result (an approved call waiting for a press gets one).
  local function cycle_until_sent(buf)
    press("<C-]>")
    helpers.wait_for(function()
      if text(buf):find("status=approved", 1, true) then
        press("<C-]>")
      end
      return #h.finished >= 1
    end, 20000, "nothing was sent; buffer:\n" .. text(buf))
    assert.equals("completed", h.finished[1].status, vim.inspect(h.notes))
    local reqs = h.server:requests()
    assert.equals(1, #reqs)
    return reqs[1].json
  end

  before_each(function()
    h = helpers.send_harness({ key = KEY, timeout = 20000 })
    project = helpers.tmpdir()
    saved_cwd = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    helpers.write_file(project .. "/pixel.png", PNG)
    helpers.write_file(project .. "/docs/paper.pdf", PDF)
  end)

  after_each(function()
    vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
    h.teardown()
  end)

  local INTRO = "The files returned by tool call toolu_img (./pixel.png):"

  -- The chat after the read ran: the result's fence line names the file, its text
  -- says what it is, and no byte of the file is in the buffer.
  local function assert_reference(buf)
    local t = text(buf)
    assert.truthy(
      t:find(
        "**Tool Result:** `toolu_img`\n\n```flemma:attach @./pixel.png;type=image/png\n./pixel.png is an image (image/png) of ",
        1,
        true
      ),
      t
    )
    assert.is_nil(t:find(b64(project .. "/pixel.png"), 1, true), t)
    assert.is_nil(t:find("\137PNG", 1, true), t)
  end

  local function start(kind)
    setup(kind)
    local lines = { "@You:", "What colour is the pixel?", "", "@Assistant:" }
    vim.list_extend(lines, read_use("toolu_img", "./pixel.png"))
    return chat(lines)
  end

  it("anthropic: an image block in the tool_result's content", function()
    local buf = start("anthropic")
    local body = cycle_until_sent(buf)
    assert_reference(buf)
    local last = body.messages[#body.messages]
    assert.equals("user", last.role)
    assert.equals(1, #last.content)
    local block = last.content[1]
    assert.equals("tool_result", block.type)
    assert.equals("toolu_img", block.tool_use_id)
    assert.is_nil(block.is_error)
    assert.equals("text", block.content[1].type)
    assert.truthy(block.content[1].text:find("./pixel.png is an image (image/png)", 1, true), block.content[1].text)
    assert.same(
      { type = "image", source = { type = "base64", media_type = "image/png", data = b64(project .. "/pixel.png") } },
      block.content[2]
    )
    assert.equals(2, #block.content)
  end)

  it("anthropic: a PDF as a document block", function()
    setup("anthropic")
    local lines = { "@You:", "Summarize the paper.", "", "@Assistant:" }
    vim.list_extend(lines, read_use("toolu_pdf", "docs/paper.pdf"))
    local buf = chat(lines)
    local body = cycle_until_sent(buf)
    assert.truthy(
      text(buf):find(
        "```flemma:attach @./docs/paper.pdf;type=application/pdf\ndocs/paper.pdf is a PDF document",
        1,
        true
      ),
      text(buf)
    )
    local block = body.messages[#body.messages].content[1]
    assert.same({
      type = "document",
      title = "./docs/paper.pdf",
      source = { type = "base64", media_type = "application/pdf", data = b64(project .. "/docs/paper.pdf") },
    }, block.content[2])
  end)

  it("openai (Responses): input_image in the function_call_output's output", function()
    local buf = start("openai")
    local body = cycle_until_sent(buf)
    assert_reference(buf)
    local out
    for _, item in ipairs(body.input) do
      if item.type == "function_call_output" then
        out = item
      end
    end
    assert.truthy(out, vim.inspect(body.input))
    assert.equals("toolu_img", out.call_id)
    assert.equals("input_text", out.output[1].type)
    assert.same(
      { type = "input_image", image_url = "data:image/png;base64," .. b64(project .. "/pixel.png") },
      out.output[2]
    )
  end)

  it("openai_chat: the tool message's text, then the image in a user message after it", function()
    local buf = start("openai_chat")
    local body = cycle_until_sent(buf)
    assert_reference(buf)
    local n = #body.messages
    local tool, user = body.messages[n - 1], body.messages[n]
    assert.equals("tool", tool.role)
    assert.equals("toolu_img", tool.tool_call_id)
    assert.truthy(tool.content:find("./pixel.png is an image (image/png)", 1, true), tool.content)
    assert.same({
      role = "user",
      content = {
        { type = "text", text = INTRO },
        { type = "image_url", image_url = { url = "data:image/png;base64," .. b64(project .. "/pixel.png") } },
      },
    }, user)
  end)

  it("vertex: inlineData after the functionResponse in the same turn", function()
    local buf = start("vertex")
    local body = cycle_until_sent(buf)
    assert_reference(buf)
    local last = body.contents[#body.contents]
    assert.equals("user", last.role)
    assert.equals(3, #last.parts, vim.inspect(last.parts))
    assert.equals("read", last.parts[1].functionResponse.name)
    assert.equals("toolu_img", last.parts[1].functionResponse.id)
    assert.same({ text = INTRO }, last.parts[2])
    assert.same({ inlineData = { mimeType = "image/png", data = b64(project .. "/pixel.png") } }, last.parts[3])
  end)

  it("an image over attachments.max_bytes is an error result saying so; nothing is attached", function()
    setup("anthropic", { attachments = { max_bytes = 40 } })
    local lines = { "@You:", "Look.", "", "@Assistant:" }
    vim.list_extend(lines, read_use("toolu_img", "./pixel.png"))
    local buf = chat(lines)
    local body = cycle_until_sent(buf)
    local t = text(buf)
    assert.truthy(
      t:find(
        "**Tool Result:** `toolu_img` (error)\n\n```\n./pixel.png is an image (image/png) of "
          .. #PNG
          .. "B, over attachments.max_bytes (40B): it cannot be shown to the model",
        1,
        true
      ),
      t
    )
    assert.is_nil(t:find("flemma:attach", 1, true), t)
    local block = body.messages[#body.messages].content[1]
    assert.is_true(block.is_error)
    assert.equals("string", type(block.content))
  end)

  -- A result written before (or by hand) whose file is a secret one: the send asks,
  -- and a "no" sends nothing; a "yes" sends it.
  it("a secret file a result names (.env.png) is sent only after the user says so", function()
    setup("anthropic")
    helpers.write_file(project .. "/.env.png", PNG)
    local lines = { "@You:", "Look.", "", "@Assistant:" }
    vim.list_extend(lines, read_use("toolu_sec", "./.env.png"))
    vim.list_extend(lines, {
      "",
      "@You:",
      "**Tool Result:** `toolu_sec`",
      "",
      "```flemma:attach @./.env.png;type=image/png",
      "./.env.png is an image",
      "```",
    })
    local buf = chat(lines)
    local asked = {}
    local answer = "Do not send"
    local orig = vim.ui.select
    vim.ui.select = function(_, opts, on_choice)
      asked[#asked + 1] = opts.prompt
      on_choice(answer)
    end
    local ok, err = pcall(function()
      press("<C-]>")
      helpers.wait_for(function()
        return #asked >= 1
      end, 10000, "the send never asked about the secret file")
      vim.wait(300)
      assert.truthy(asked[1]:find(".env.png", 1, true), asked[1])
      assert.truthy(asked[1]:find("secret", 1, true), asked[1])
      assert.equals(0, #h.server:requests())
      assert.equals(0, #h.finished)
      answer = "Send"
      press("<C-]>")
      h.wait_finished(1)
    end)
    vim.ui.select = orig
    assert(ok, err)
    local reqs = h.server:requests()
    assert.equals(1, #reqs)
    local block = reqs[1].json.messages[#reqs[1].json.messages].content[1]
    assert.equals(b64(project .. "/.env.png"), block.content[2].source.data)
    assert.equals(lines[#lines - 2], text(buf):match("```flemma:attach [^\n]*"))
  end)

  it("a file grown past attachments.max_bytes since the result is a diagnostic on its line, not sent", function()
    setup("anthropic", { attachments = { max_bytes = 200 } })
    local lines = { "@You:", "Look.", "", "@Assistant:" }
    vim.list_extend(lines, read_use("toolu_img", "./pixel.png"))
    vim.list_extend(lines, {
      "",
      "@You:",
      "**Tool Result:** `toolu_img`",
      "",
      "```flemma:attach @./pixel.png;type=image/png",
      "./pixel.png is an image",
      "```",
    })
    helpers.write_file(project .. "/pixel.png", PNG .. string.rep("\0", 500))
    local buf = chat(lines)
    press("<C-]>")
    local diags
    helpers.wait_for(function()
      diags = vim.diagnostic.get(buf)
      return #diags > 0
    end, 10000, "no diagnostic")
    vim.wait(200)
    assert.equals(0, #h.server:requests())
    assert.equals(#lines - 2, diags[1].lnum + 1, vim.inspect(diags))
    assert.truthy(diags[1].message:find("attachments.max_bytes", 1, true), diags[1].message)
    assert.truthy(diags[1].message:find("toolu_img", 1, true), diags[1].message)
  end)

  it("a result's reference is read relative to the chat file, with an escaped space", function()
    setup("anthropic")
    helpers.write_file(project .. "/my pics/dot.gif", "GIF89a" .. string.rep("\1", 20))
    local lines = { "@You:", "Look.", "", "@Assistant:" }
    vim.list_extend(lines, read_use("toolu_gif", project .. "/my pics/dot.gif"))
    local buf = chat(lines)
    local body = cycle_until_sent(buf)
    assert.truthy(text(buf):find("```flemma:attach @./my\\ pics/dot.gif;type=image/gif\n", 1, true), text(buf))
    local block = body.messages[#body.messages].content[1]
    assert.equals("image/gif", block.content[2].source.media_type)
    assert.equals(b64(project .. "/my pics/dot.gif"), block.content[2].source.data)
  end)
end)
