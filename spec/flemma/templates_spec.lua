-- Templates in @System: and @You: text: sent through the real send path to the
-- loopback server, asserting the exact request it received, the buffer (never
-- rewritten) and the diagnostics of errors.
local helpers = require("spec.support.helpers")

local templates = require("flemma.chat.templates")
local send = require("flemma.cycle.send")

local h, server, notes, finished, dir, saved_cwd

local function chat(lines, name)
  return helpers.edit(dir .. "/" .. (name or "test.chat"), lines)
end

local function write(path, content)
  helpers.write_file(dir .. "/" .. path, content)
end

-- Sends the buffer and waits for the answer; the request body the server received.
local function sent(buf)
  server:script({ { fixture = "anthropic_text.sse" } })
  local before = #finished
  assert.is_true(send.send(buf), "the send did not start: " .. vim.inspect(notes))
  h.wait_finished(before + 1)
  assert.equals("completed", finished[#finished].status)
  local reqs = server:requests()
  assert.equals(1, #reqs)
  return reqs[1].json
end

-- Sends a buffer that must be refused: the diagnostics and the notification.
local function refused(buf)
  server:script({ { fixture = "anthropic_text.sse" } })
  assert.is_false(send.send(buf))
  assert.equals(0, #server:requests(), "a request was sent")
  local diags = vim.diagnostic.get(buf, { namespace = send.ns })
  local msgs = {}
  for _, n in ipairs(notes) do
    if n.level == vim.log.levels.ERROR then
      msgs[#msgs + 1] = n.msg
    end
  end
  return diags, table.concat(msgs, "\n")
end

local function user_texts(body)
  local out = {}
  for _, m in ipairs(body.messages) do
    for _, b in ipairs(m.content) do
      if b.type == "text" then
        out[#out + 1] = b.text
      end
    end
  end
  return out
end

describe("templates", function()
  before_each(function()
    h = helpers.send_harness({ key = "sk-templates-spec" })
    server, notes, finished = h.server, h.notes, h.finished
    dir = helpers.tmpdir()
    saved_cwd = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(dir))
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false } },
    })
  end)
  after_each(function()
    vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
    h.teardown()
  end)

  it("sends expressions, statements and frontmatter variables expanded, the buffer unchanged", function()
    local lines = {
      "```lua",
      'return { name = "Ada", langs = { "Lua", "C++" }, n = 3 }',
      "```",
      "@System:",
      "You help {{ name }} ({{ #langs }} languages, file {{ __filename:match('[^/]*$') }}).",
      "",
      "@You:",
      "{% for i, l in ipairs(langs) do %}{{ i }}. {{ l:upper() }}; {% end %}",
      "{{ n * 2 }} {{ n > 2 }} {{ __dirname == vim_dir }}",
    }
    lines[9] = "{{ n * 2 }} {{ n > 2 }} {{ __dirname:sub(-#'" .. vim.fs.basename(dir) .. "') }}"
    local buf = chat(lines)
    local body = sent(buf)
    assert.same({ { type = "text", text = "You help Ada (2 languages, file test.chat)." } }, body.system)
    assert.same({
      {
        role = "user",
        content = { { type = "text", text = "1. LUA; 2. C++; \n6 true " .. vim.fs.basename(dir) } },
      },
    }, body.messages)
    local now = vim.api.nvim_buf_get_lines(buf, 0, #lines, false)
    assert.same(lines, now)
  end)

  it("sends the expansion to an OpenAI-compatible server too, through <C-]>", function()
    require("flemma").setup({
      provider = "local",
      providers = { ["local"] = { kind = "openai_chat", endpoint = server:url("/v1/chat/completions") } },
      model = "m",
      parameters = { max_retries = 0, connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false } },
    })
    server:script({ { fixture = "openai_chat_text.sse" } })
    chat({ "```lua", "return { n = 2 }", "```", "@System:", "n={{ n }}", "@You:", "{{ n + 1 }}!" })
    helpers.press("<C-]>")
    h.wait_finished(1)
    local body = server:requests()[1].json
    local got = {}
    for _, m in ipairs(body.messages) do
      got[#got + 1] = { m.role, m.content }
    end
    assert.same({ { "system", "n=2" }, { "user", "3!" } }, got)
  end)

  it("removes whitespace at the trim markers and keeps it elsewhere", function()
    local buf = chat({
      "@You:",
      "items:",
      "{%- for i = 1, 3 do -%}",
      "  [{{- i -}}]  ",
      "{%- end %}",
      "end {{ 'x' }}  {{- 'y' }}  {{ 'z' -}}  .",
    })
    local body = sent(buf)
    assert.same({ "items:[1][2][3]\nend xy  z." }, user_texts(body))
  end)

  it("ends a tag at its closing outside Lua strings and comments", function()
    local buf = chat({
      "@You:",
      [[a {{ "}}" }} b {{ '%}' .. "\"}}" }} c {{ [==[x}}]==] }}]],
      [=[{% local t = { "%}" } -- a comment's "quote %}d {{ t[1] --[[ }} ]] }}]=],
      [[{{ 1 -- note }}e]],
    })
    local body = sent(buf)
    assert.same({ 'a }} b %}"}} c x}}\nd %}\n1e' }, user_texts(body))
  end)

  it("includes files relative to the including file, recursively, raw on request", function()
    write("prompts/role.md", 'Role: {{ who }}.\n{{ include("parts/tone.md") }}')
    write("prompts/parts/tone.md", "Tone: dry {{ 1 + 1 }}.")
    write("raw.txt", "kept {{ as is }}")
    local buf = chat({
      "```lua",
      'return { who = "reviewer" }',
      "```",
      "@System:",
      '{{ include("prompts/role.md") }}',
      "@You:",
      '<{{ include("./raw.txt", { raw = true }) }}>',
    })
    local body = sent(buf)
    assert.same({ { type = "text", text = "Role: reviewer.\nTone: dry 2." } }, body.system)
    assert.same({ "<kept {{ as is }}>" }, user_texts(body))
  end)

  it("sends the included file as it is now (the cache follows the file)", function()
    write("p.md", "first")
    local buf = chat({ "@You:", 'say {{ include("p.md") }}' })
    assert.same("say first", user_texts(sent(buf))[1])
    write("p.md", "second version")
    assert.same("say second version", user_texts(sent(buf))[1])
  end)

  it("reports an include cycle with its chain on the line of the include, and sends nothing", function()
    write("a.md", 'A\n{{ include("b.md") }}')
    write("b.md", '{{ include("a.md") }}')
    local buf = chat({ "@You:", "hello", 'x {{ include("a.md") }}' })
    local diags, msg = refused(buf)
    assert.equals(1, #diags)
    assert.equals(2, diags[1].lnum)
    assert.matches("include cycle: test%.chat → a%.md → b%.md → a%.md", diags[1].message)
    assert.matches("line 3: template: ", msg)
    assert.same({ "@You:", "hello", 'x {{ include("a.md") }}' }, helpers.lines(buf))
  end)

  it("names the buffer line of each error: runtime, syntax, unclosed tag, missing include", function()
    local buf = chat({
      "@System:",
      "ok {{ 1 }}",
      "",
      "{{ missing_var }}",
      "@You:",
      "line",
      "{% for i = 1, 2 %}",
      "@Assistant:",
      "hi",
      "@You:",
      "a",
      "{{ 1 + }",
      "@You:",
      "",
      '{{ include("nope.md") }}',
    })
    local diags, msg = refused(buf)
    table.sort(diags, function(a, b)
      return a.lnum < b.lnum
    end)
    local got = {}
    for _, d in ipairs(diags) do
      got[#got + 1] = { d.lnum + 1, d.message }
    end
    assert.equals(4, #got, vim.inspect(got))
    assert.same(4, got[1][1])
    assert.matches("value of this {{ }} is nil", got[1][2])
    assert.same(7, got[2][1])
    assert.matches("'do' expected", got[2][2])
    assert.same(12, got[3][1])
    assert.matches("`{{` is not closed by `}}`", got[3][2])
    assert.same(15, got[4][1])
    assert.matches('include%("nope.md"%): cannot read nope%.md: no such file', got[4][2])
    assert.matches("line 4: template:", msg)
  end)

  it("keeps the diagnostic of a template error up to date with the text until it is fixed", function()
    local buf = chat({ "@You:", "a", "{{ nope }}" })
    local diags = refused(buf)
    assert.equals(1, #diags)
    assert.equals(2, diags[1].lnum)
    vim.api.nvim_buf_set_lines(buf, 1, 1, false, { "{{ }}" })
    helpers.wait_for(function()
      local d = vim.diagnostic.get(buf, { namespace = send.ns })
      return #d == 1 and d[1].lnum == 1
    end, 2000, "the diagnostic did not follow the new error")
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "{{ 'fixed' }}" })
    helpers.wait_for(function()
      return #vim.diagnostic.get(buf, { namespace = send.ns }) == 1
        and vim.diagnostic.get(buf, { namespace = send.ns })[1].lnum == 3
    end, 2000, "the diagnostic did not move back to {{ nope }}")
    vim.api.nvim_buf_set_lines(buf, 3, 4, false, { "{{ 2 }}" })
    helpers.wait_for(function()
      return #vim.diagnostic.get(buf, { namespace = send.ns }) == 0
    end, 2000, "the diagnostic stayed after the fix")
  end)

  it("refuses the kernel's files (the environment holds API keys)", function()
    vim.uv.fs_symlink("/proc/self/environ", dir .. "/env.txt")
    local buf =
      chat({ "@You:", '{{ include("env.txt", { raw = true }) }}', "@You:", '{{ include("/proc/self/environ") }}' })
    local diags = refused(buf)
    assert.equals(2, #diags)
    for _, d in ipairs(diags) do
      assert.matches("files under /proc are not included", d.message)
      assert.is_nil(d.message:find("sk-templates-spec", 1, true))
    end
  end)

  it("names the line inside an included file", function()
    write("inc.md", "one\ntwo {{ nil_value.x }}")
    local buf = chat({ "@You:", "a", "b", '{{ include("inc.md") }}' })
    local diags = refused(buf)
    assert.equals(1, #diags)
    assert.equals(3, diags[1].lnum)
    assert.matches("inc%.md:2: .*nil_value", diags[1].message)
  end)

  it("stops a template that loops forever or allocates without end", function()
    local buf = chat({ "@You:", "x", "{% while true do end %}" })
    local diags = refused(buf)
    assert.equals(1, #diags)
    assert.matches("ran longer than %d+ ms", diags[1].message)

    for i, code in ipairs({
      "{{ ('x'):rep(6e7) }}",
      "{% local s = ('x'):rep(4e5) %}{{ s .. s }}",
      "{{ table.concat({ ('x'):rep(4e5), ('y'):rep(4e5) }) }}",
    }) do
      h.forget_notes()
      local b = chat({ "@You:", "a", code }, ("mem%d.chat"):format(i))
      local d = refused(b)
      -- On a loaded machine the 35 ms deadline (wall clock) may come first: the
      -- memory limit is what this checks, so try again then.
      for _ = 1, 4 do
        if not (d[1] and d[1].message:find("ran longer than", 1, true)) then
          break
        end
        d = refused(b)
      end
      assert.equals(1, #d)
      assert.equals(2, d[1].lnum)
      assert.matches("512 KB", d[1].message)
    end
  end)

  it("expands flemma:project to the project's instruction files", function()
    write("AGENTS.md", "Use tabs.\n\n")
    vim.uv.fs_symlink(dir .. "/AGENTS.md", dir .. "/CLAUDE.md")
    write(".cursorrules", "No emojis.")
    write("sub/.github/copilot-instructions.md", "Write tests.")
    write("sub/AGENTS.md", "Use tabs.")
    local buf = chat({ "@System:", "Rules:", '{{ include("flemma:project") }}', "@You:", "go" }, "sub/c.chat")
    local body = sent(buf)
    assert.same({ { type = "text", text = "Rules:\nUse tabs.\n\nNo emojis.\n\nWrite tests." } }, body.system)
  end)

  it("hands back the same table for an unchanged templated message, with its current lines", function()
    write("p.md", "v1")
    local buf = chat({ "@You:", "zero", "@System:", 'sys {{ include("p.md") }}', "@You:", "hi" })
    local document = require("flemma.chat.document")
    local first = assert(templates.expand(buf, document.get(buf)))
    vim.api.nvim_buf_set_lines(buf, 5, 6, false, { "hi again" })
    local second = assert(templates.expand(buf, document.get(buf)))
    assert.equals(first.messages[2], second.messages[2])
    vim.api.nvim_buf_set_lines(buf, 1, 2, false, { "zero", "more", "lines" })
    local third = assert(templates.expand(buf, document.get(buf)))
    assert.equals(first.messages[2], third.messages[2])
    assert.equals(5, third.messages[2].first_line)
    assert.equals(6, third.messages[2].parts[1].first_line)
    assert.equals("sys v1", third.messages[2].parts[1].text)
    write("p.md", "v2 longer")
    local fourth = assert(templates.expand(buf, document.get(buf)))
    assert.are_not.equal(third.messages[2], fourth.messages[2])
    assert.equals("sys v2 longer", fourth.messages[2].parts[1].text)
  end)

  it("returns a document without tags as it is", function()
    local buf = chat({ "@System:", "plain { text } %", "@You:", "hi {x}" })
    local doc = require("flemma.chat.document").get(buf)
    assert.equals(doc, templates.expand(buf, doc))
  end)
end)

describe("templates.compile", function()
  it("maps every code line to its template line", function()
    local unit = assert(templates.compile("a\n{{ x\n + y }}\nb {% if c then %}\n{% end %}", "t"))
    assert.same({ "a\n", "\nb ", "\n" }, unit.literals)
    local lines = vim.split(unit.code, "\n")
    assert.equals(#lines, #unit.map)
    for i, l in ipairs(lines) do
      if l:find("if c then", 1, true) then
        assert.equals(4, unit.map[i])
      elseif l:find("end", 1, true) then
        assert.equals(5, unit.map[i])
      elseif l == "))" then
        assert.equals(3, unit.map[i])
      elseif l:find("+ y", 1, true) then
        assert.equals(3, unit.map[i])
      elseif l:find("_out((", 1, true) then
        assert.equals(2, unit.map[i])
      end
    end
  end)
end)

describe("frontmatter variables", function()
  it("are the plain data of the table a Lua frontmatter returns", function()
    local opts = assert(
      require("flemma.chat.frontmatter").evaluate(
        'flemma.opt.tools.auto_approve = { "read" }\nreturn { a = 1, s = "x", l = { 1, 2 }, f = function() end, t = { k = true, [3] = 1 } }',
        "lua",
        1
      )
    )
    assert.same({ a = 1, s = "x", l = { 1, 2 }, t = { k = true } }, opts.variables)
    assert.same({ "read" }, opts.auto_approve)
    local holes = assert(
      require("flemma.chat.frontmatter").evaluate(
        "return { l = { 1, function() end, 3, 0/0, 'x' }, [1] = 'dropped', n = { a = { b = {} } } }",
        "lua",
        1
      )
    )
    assert.same({ l = { 1, 3, "x" }, n = { a = { b = {} } } }, holes.variables)
    local none = assert(require("flemma.chat.frontmatter").evaluate("local x = 1", "lua", 1))
    assert.is_nil(none.variables)
  end)
end)

describe(":Flemma preview", function()
  local preview_dir, preview_notes
  before_each(function()
    preview_dir = helpers.tmpdir()
    h = helpers.send_harness({ server = false })
    preview_notes = h.notes
    require("flemma").setup({})
  end)
  after_each(function()
    h.teardown()
  end)

  it("shows the conversation as sent in a split, the chat unchanged", function()
    helpers.write_file(preview_dir .. "/inc.md", "included {{ 2 * 3 }}")
    vim.cmd("edit " .. vim.fn.fnameescape(preview_dir .. "/p.chat"))
    local buf = vim.api.nvim_get_current_buf()
    local lines = {
      "```lua",
      'return { who = "you" }',
      "```",
      "@System:",
      '{{ include("inc.md") }}',
      "@You:",
      "hi {{ who }}",
      "",
      "@Assistant:",
      "**Tool Use:** `echo` (`t1`)",
      "",
      "```json",
      '{ "text": "{{ x }}" }',
      "```",
      "",
      "@You:",
      "**Tool Result:** `t1`",
      "",
      "```",
      "{{ not expanded }}",
      "```",
    }
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.cmd("Flemma preview")
    local pbuf = vim.api.nvim_get_current_buf()
    assert.are_not.equal(buf, pbuf)
    assert.equals(2, #vim.api.nvim_tabpage_list_wins(0))
    assert.same({
      "@System:",
      "included 6",
      "",
      "@You:",
      "hi you",
      "",
      "@Assistant:",
      "**Tool Use:** `echo` (`t1`)",
      "",
      "```json",
      '{ "text": "{{ x }}" }',
      "```",
      "",
      "@You:",
      "**Tool Result:** `t1`",
      "",
      "```",
      "{{ not expanded }}",
      "```",
    }, helpers.lines(pbuf))
    assert.is_false(vim.bo[pbuf].modifiable)
    assert.same(lines, helpers.lines(buf))
  end)

  it("attaches the files the chat references: text inlined, an image named", function()
    helpers.write_file(preview_dir .. "/notes.txt", "note text\n")
    helpers.write_file(preview_dir .. "/dot.png", "\137PNG\r\n\26\n0123456789")
    vim.cmd("edit " .. vim.fn.fnameescape(preview_dir .. "/a.chat"))
    local buf = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "Read @./notes.txt and see @./dot.png." })
    vim.cmd("Flemma preview")
    local pbuf = vim.api.nvim_get_current_buf()
    assert.are_not.equal(buf, pbuf)
    assert.same({
      "@You:",
      "Read @./notes.txt and see @./dot.png.",
      "File: ./notes.txt",
      "```",
      "note text",
      "```",
      "[attached: ./dot.png, image/png, 18B]",
    }, helpers.lines(pbuf))
  end)

  it("shows a missing file or one outside the project as a diagnostic, without asking", function()
    local outside = helpers.tmpdir()
    helpers.write_file(outside .. "/secret.txt", "secret\n")
    local asked = 0
    local orig_select = vim.ui.select
    vim.ui.select = function(_, _, cb)
      asked = asked + 1
      cb(nil)
    end
    vim.cmd("edit " .. vim.fn.fnameescape(preview_dir .. "/m.chat"))
    local buf = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "see @./gone.txt", "and @" .. outside .. "/secret.txt" })
    local ok, err = pcall(vim.cmd, "Flemma preview")
    vim.ui.select = orig_select
    assert(ok, err)
    assert.equals(0, asked)
    assert.equals(buf, vim.api.nvim_get_current_buf())
    local diags = vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })
    table.sort(diags, function(a, b)
      return a.lnum < b.lnum
    end)
    assert.equals(2, #diags)
    assert.equals(1, diags[1].lnum)
    assert.equals(2, diags[2].lnum)
    assert.matches("outside the project", diags[2].message)
    assert.same({}, require("flemma.policy.reach").take_wanted(buf))
    assert.matches("cannot be sent as it is", preview_notes[#preview_notes].msg)
  end)

  it("puts a template error on its line instead", function()
    vim.cmd("edit " .. vim.fn.fnameescape(preview_dir .. "/e.chat"))
    local buf = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "@You:", "ok", "{{ nope }}" })
    vim.cmd("Flemma preview")
    assert.equals(buf, vim.api.nvim_get_current_buf())
    local diags = vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })
    assert.equals(1, #diags)
    assert.equals(2, diags[1].lnum)
    assert.matches("line 3: template: the value of this {{ }} is nil", preview_notes[#preview_notes].msg)
  end)
end)
