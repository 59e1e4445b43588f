-- A chat's own text (@/path references, include() in templates) sends a file from
-- outside the project only after the user confirmed it: checked on the requests the
-- loopback server records after <C-]> (real files, real curl).
local helpers = require("spec.support.helpers")

local KEY = "sk-reach-spec-" .. tostring(math.random(1e9))

local press = helpers.press

describe("files outside the project", function()
  local h, server, notes, finished, orig_select, project, outside, saved_cwd, prompts, answer

  before_each(function()
    orig_select = vim.ui.select
    h = helpers.send_harness({ key = KEY, timeout = 15000 })
    server, notes, finished = h.server, h.notes, h.finished
    prompts = {}
    vim.ui.select = function(items, o, cb)
      prompts[#prompts + 1] = { items = items, prompt = o.prompt }
      cb(answer)
    end
    project, outside = helpers.tmpdir(), helpers.tmpdir()
    helpers.write_file(project .. "/inside.txt", "inside text\n")
    helpers.write_file(outside .. "/secret.txt", "SECRET-CONTENT\n")
    helpers.write_file(outside .. "/prompt.md", "OUTSIDE-PROMPT")
    vim.uv.fs_symlink(outside .. "/secret.txt", project .. "/link.txt")
    saved_cwd = vim.fn.getcwd()
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    require("flemma.policy.reach").reset()
    require("flemma").setup({
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none", connect_timeout = 5, timeout = 30 },
      tools = { autopilot = { enabled = false } },
    })
    server:script({ { fixture = "anthropic_text.sse" }, { fixture = "anthropic_text.sse" } })
  end)

  after_each(function()
    vim.ui.select = orig_select
    vim.cmd("cd " .. vim.fn.fnameescape(saved_cwd))
    require("flemma.policy.reach").reset()
    h.teardown()
  end)

  local function chat(lines)
    return helpers.edit(project .. "/talk.chat", lines)
  end

  local function user_text(req)
    local out = {}
    for _, m in ipairs(req.json.messages) do
      for _, c in ipairs(m.content) do
        out[#out + 1] = c.text or ""
      end
    end
    if type(req.json.system) == "table" then
      for _, c in ipairs(req.json.system) do
        out[#out + 1] = c.text
      end
    elseif req.json.system then
      out[#out + 1] = req.json.system
    end
    return table.concat(out, "\n")
  end

  it("asks before a reference sends a file from outside; no answer yes, nothing sent", function()
    local buf = chat({ "@You:", "Look at @" .. outside .. "/secret.txt please." })
    answer = "Do not send"
    press("<C-]>")
    vim.wait(300)
    assert.equals(1, #prompts)
    assert.matches("from outside the project", prompts[1].prompt, 1, true)
    assert.matches("secret.txt", prompts[1].prompt, 1, true)
    assert.same({}, server:requests())
    local diags = vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns })
    assert.equals(1, #diags)
    assert.equals(1, diags[1].lnum)
    assert.matches("outside the project", diags[1].message, 1, true)
    assert.same({ "@You:", "Look at @" .. outside .. "/secret.txt please." }, helpers.lines(buf))
  end)

  it("sends it once the user confirmed, and does not ask again for that buffer", function()
    chat({ "@You:", "Look at @" .. outside .. "/secret.txt please." })
    answer = "Send"
    press("<C-]>")
    h.wait_finished(1)
    assert.equals("completed", finished[1].status)
    assert.equals(1, #prompts)
    local reqs = server:requests()
    assert.equals(1, #reqs)
    assert.matches("SECRET-CONTENT", user_text(reqs[1]), 1, true)
    -- Again: allowed for this buffer now.
    server:script({ { fixture = "anthropic_text.sse" } })
    vim.api.nvim_buf_set_lines(0, -1, -1, false, { "", "@You:", "again" })
    press("<C-]>")
    h.wait_finished(2)
    assert.equals(1, #prompts)
  end)

  it("reads files inside the project without asking, but not a symlink that leads outside", function()
    chat({ "@You:", "Here: @./inside.txt" })
    answer = nil
    press("<C-]>")
    h.wait_finished(1)
    assert.equals(0, #prompts)
    assert.matches("inside text", user_text(server:requests()[1]), 1, true)
    vim.cmd("silent! %bwipeout!")
    server:script({ { fixture = "anthropic_text.sse" } })
    chat({ "@You:", "Here: @./link.txt" })
    answer = nil -- the prompt dismissed
    press("<C-]>")
    vim.wait(300)
    assert.equals(1, #prompts)
    assert.same({}, server:requests())
  end)

  it("asks before include() in a template reads a file from outside", function()
    local buf = chat({ "@System:", '{{ include("' .. outside .. '/prompt.md") }}', "", "@You:", "hi" })
    answer = "Do not send"
    press("<C-]>")
    vim.wait(300)
    assert.equals(1, #prompts)
    assert.matches("prompt.md", prompts[1].prompt, 1, true)
    assert.same({}, server:requests())
    assert.equals(1, #vim.diagnostic.get(buf, { namespace = require("flemma.cycle.send").ns }))
    answer = "Send"
    press("<C-]>")
    h.wait_finished(1)
    assert.equals(2, #prompts)
    assert.matches("OUTSIDE-PROMPT", user_text(server:requests()[1]), 1, true)
  end)

  it("still refuses the kernel's files without asking", function()
    chat({ "@You:", "@/proc/self/environ" })
    answer = "Send"
    press("<C-]>")
    vim.wait(300)
    assert.equals(0, #prompts)
    assert.same({}, server:requests())
    for _, n in ipairs(notes) do
      assert.is_nil(n.msg:find(KEY, 1, true))
    end
  end)
end)
