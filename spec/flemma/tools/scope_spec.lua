-- Built-in and preset approvals stay inside the project (issue 10 §3): real chat files
-- in real directories, real symlinks, <C-]> pressed; assertions on files, buffer text
-- and the preview shown in the placeholder.
local helpers = require("spec.support.helpers")

local approval = require("flemma.tools.approval")
local scope = require("flemma.policy.scope")
local preview = require("flemma.ui.preview")

local press, text = helpers.press, helpers.text

local function wait_text(buf, pattern)
  helpers.wait_for(function()
    return text(buf):find(pattern, 1, true) ~= nil
  end, 5000, "buffer never contained: " .. pattern .. "\n--- buffer:\n" .. text(buf))
end

local project, home, elsewhere, saved
-- A chat file in the project directory (also the cwd) with one tool call.
local function chat(name, input, file)
  return helpers.edit(file or (project .. "/test.chat"), {
    "@You:",
    "Go.",
    "",
    "@Assistant:",
    ("**Tool Use:** `%s` (`toolu_01`)"):format(name),
    "",
    "```json",
    vim.json.encode(input),
    "```",
  })
end

local function status(buf)
  return text(buf):match("```flemma:tool status=(%a+)")
end

local function read_input(path)
  return { path = path, offset = vim.NIL, limit = vim.NIL, label = vim.NIL }
end

local function write_input(path, content)
  return { path = path, content = content or "echo pwned", label = vim.NIL }
end

describe("approval inside the project", function()
  before_each(function()
    project = helpers.tmpdir()
    home = helpers.tmpdir()
    elsewhere = helpers.tmpdir()
    saved = { home = vim.env.HOME, cwd = vim.fn.getcwd() }
    vim.env.HOME = home
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    require("flemma").setup({ tools = { autopilot = { enabled = false } } })
    require("flemma.policy.sandbox").set_enabled(nil) -- follow the config (other specs toggle it)
    helpers.write_file(elsewhere .. "/secret.txt", "the secret\n")
    helpers.write_file(project .. "/notes.txt", "project notes\n")
  end)
  after_each(function()
    vim.env.HOME = saved.home
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    for _, r in ipairs(approval.get_all()) do
      if r.name:sub(1, 5) == "spec:" then
        approval.unregister(r.name)
      end
    end
    require("flemma.policy.sandbox").set_enabled(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("leaves a $default write to ~/.bashrc pending, its preview saying it is outside", function()
    local buf = chat("write", write_input("~/.bashrc"))
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(vim.uv.fs_stat(home .. "/.bashrc"), "~/.bashrc was written")
    local shown = preview.shown(buf)
    assert.equals(1, #shown)
    assert.equals("write: ~/.bashrc (outside the project) (10B)", shown[1].text)
  end)

  it("leaves a read of a file outside the project pending", function()
    local buf = chat("read", read_input(elsewhere .. "/secret.txt"))
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(text(buf):find("the secret", 1, true))
    assert.equals("read: " .. elsewhere .. "/secret.txt (outside the project)", preview.shown(buf)[1].text)
  end)

  it("auto-approves read and write inside the project (cwd and the chat file's directory)", function()
    local buf = chat("read", read_input("notes.txt"))
    press("<C-]>")
    wait_text(buf, "project notes")
    -- The chat file's directory counts even when the cwd is elsewhere.
    local chatdir = helpers.tmpdir()
    buf = chat("write", write_input("sub/new.txt", "fresh"), chatdir .. "/other.chat")
    press("<C-]>")
    wait_text(buf, "Wrote")
    assert.equals("fresh", helpers.read_file(chatdir .. "/sub/new.txt"))
  end)

  it("counts a symlink inside the project that points outside as outside", function()
    assert(vim.uv.fs_symlink(elsewhere, project .. "/link"))
    local buf = chat("read", read_input("link/secret.txt"))
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(text(buf):find("the secret", 1, true))
    assert.truthy(preview.shown(buf)[1].text:find("(outside the project)", 1, true))

    -- A dangling symlink leads a write to its target, outside.
    assert(vim.uv.fs_symlink(elsewhere .. "/planted.sh", project .. "/run.sh"))
    buf = chat("write", write_input("run.sh"), project .. "/two.chat")
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(vim.uv.fs_stat(elsewhere .. "/planted.sh"))
  end)

  it("counts a `..` path that escapes the project as outside", function()
    local sub = project .. "/sub"
    vim.fn.mkdir(sub, "p")
    helpers.write_file(vim.fs.dirname(project) .. "/escaped.txt", "x")
    local buf = chat("edit", {
      path = "../../" .. vim.fs.basename(project) .. "/../escaped.txt",
      old_string = "x",
      new_string = "y",
      label = vim.NIL,
    }, sub .. "/test.chat")
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.equals("x", helpers.read_file(vim.fs.dirname(project) .. "/escaped.txt"))
    vim.fn.delete(vim.fs.dirname(project) .. "/escaped.txt")
  end)

  it("resolves a path as the tool does: environment variables expanded", function()
    -- The tool's ctx.path.resolve expands $VARS (vim.fs.normalize); the check took
    -- `$X/secret.txt` literally, inside the project, while the read went elsewhere.
    vim.env.FLEMMA_SPEC_ELSEWHERE = elsewhere
    vim.env.FLEMMA_SPEC_UP = "../../../../../../../../.."
    local ok, err = pcall(function()
      for _, path in ipairs({ "/$FLEMMA_SPEC_ELSEWHERE/secret.txt", "$FLEMMA_SPEC_UP" .. elsewhere .. "/secret.txt" }) do
        local buf = chat("read", read_input(path))
        press("<C-]>")
        vim.wait(100)
        assert.equals("pending", status(buf), text(buf))
        assert.is_nil(text(buf):find("the secret", 1, true), text(buf))
        vim.cmd("silent! %bwipeout!")
      end
    end)
    vim.env.FLEMMA_SPEC_ELSEWHERE = nil
    vim.env.FLEMMA_SPEC_UP = nil
    assert(ok, err)
  end)

  it("leaves writes to protected paths inside the project pending", function()
    vim.fn.mkdir(project .. "/.git/hooks", "p")
    local buf = chat("write", write_input(".git/hooks/pre-commit"))
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(vim.uv.fs_stat(project .. "/.git/hooks/pre-commit"))
    assert.equals("write: .git/hooks/pre-commit (protected path) (10B)", preview.shown(buf)[1].text)
  end)

  it("lets an explicit user resolver approve outside the project", function()
    approval.register("spec:trust-reads", {
      resolve = function(tool_name, input)
        if tool_name == "read" and input.path:find("secret", 1, true) then
          return "approve"
        end
      end,
    })
    local buf = chat("read", read_input(elsewhere .. "/secret.txt"))
    press("<C-]>")
    wait_text(buf, "the secret")
  end)

  it("scopes tools.require_approval = false and named tools in the list as well", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, require_approval = false, auto_approve = {} } })
    assert.equals("require_approval", approval.resolve("write", write_input("~/.bashrc"), {}))
    assert.equals("approve", approval.resolve("write", write_input("inside.txt"), {}))
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "read" } } })
    assert.equals("require_approval", approval.resolve("read", read_input(elsewhere .. "/secret.txt"), {}))
    assert.equals("approve", approval.resolve("read", read_input("notes.txt"), {}))
  end)

  it("uses the sandbox's writable roots while the sandbox is on", function()
    require("flemma").setup({
      tools = { autopilot = { enabled = false } },
      sandbox = { enabled = true, policy = { rw_paths = { elsewhere } } },
    })
    local buf = chat("read", read_input(elsewhere .. "/secret.txt"))
    assert.same({ elsewhere }, scope.roots(buf))
    assert.equals("approve", approval.resolve("read", read_input(elsewhere .. "/secret.txt"), { bufnr = buf }))
    -- The project directory is not a writable root here.
    assert.equals("require_approval", approval.resolve("write", write_input("x.txt"), { bufnr = buf }))
  end)

  it("applies to any tool that declares `paths` in its definition", function()
    local tools = require("flemma.tools")
    tools.register("copy", {
      name = "copy",
      description = "copies a file",
      input_schema = {
        type = "object",
        properties = { from = { type = "string" }, to = { type = "string" } },
        required = { "from", "to" },
      },
      paths = function(input)
        return { input.from, { path = input.to, write = true } }
      end,
      execute = function()
        return { success = true }
      end,
    })
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "copy" } } })
    local ok, err = pcall(function()
      assert.equals("approve", approval.resolve("copy", { from = "notes.txt", to = "copy.txt" }, {}))
      assert.equals(
        "require_approval",
        approval.resolve("copy", { from = elsewhere .. "/secret.txt", to = "c.txt" }, {})
      )
      assert.equals("require_approval", approval.resolve("copy", { from = "notes.txt", to = home .. "/c.txt" }, {}))
      assert.same(
        { { path = home .. "/c.txt", reason = "outside" } },
        scope.outside(nil, tools.get("copy"), { from = "notes.txt", to = home .. "/c.txt" })
      )
    end)
    tools.unregister("copy")
    assert(ok, err)
  end)

  it("treats a `paths` that raises as outside", function()
    local tools = require("flemma.tools")
    tools.register("odd", {
      name = "odd",
      description = "odd",
      input_schema = { type = "object" },
      paths = function()
        error("no idea")
      end,
      execute = function()
        return { success = true }
      end,
    })
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "odd" } } })
    local result = approval.resolve("odd", {}, {})
    tools.unregister("odd")
    assert.equals("require_approval", result)
  end)
end)
