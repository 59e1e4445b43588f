-- The delete and move tools (issue 27) through the buffer and <C-]> with real files:
-- pending by default, backups (at most 10 per file), never overwriting without
-- overwrite = true, and paths leading out of the project left pending.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local project, elsewhere, state, saved

local function chat(calls, file)
  local lines = { "@You:", "Go.", "", "@Assistant:" }
  for i, c in ipairs(calls) do
    vim.list_extend(
      lines,
      { ("**Tool Use:** `%s` (`toolu_%02d`)"):format(c[1], i), "", "```json", vim.json.encode(c[2]), "```", "" }
    )
  end
  return helpers.edit(file or (project .. "/test.chat"), lines)
end

local function wait_text(buf, s)
  helpers.wait_for(function()
    return text(buf):find(s, 1, true) ~= nil
  end, 10000, "buffer never contained: " .. s .. "\n--- buffer:\n" .. text(buf))
end

local function status(buf)
  return text(buf):match("```flemma:tool status=(%a+)")
end

local function del(path)
  return { "delete", { path = path, label = vim.NIL } }
end

local function move(src, dst, overwrite)
  return {
    "move",
    { source = src, destination = dst, overwrite = overwrite == nil and vim.NIL or overwrite, label = vim.NIL },
  }
end

local function setup(approve)
  require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = approve } })
end

describe("delete and move", function()
  before_each(function()
    project = helpers.tmpdir()
    elsewhere = helpers.tmpdir()
    state = helpers.tmpdir()
    saved = { cwd = vim.fn.getcwd(), state = vim.env.XDG_STATE_HOME }
    vim.env.XDG_STATE_HOME = state
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    setup({ "$default", "delete", "move" })
  end)
  after_each(function()
    vim.env.XDG_STATE_HOME = saved.state
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("waits for the user under the default policy", function()
    setup({ "$default" })
    helpers.write_file(project .. "/a.txt", "keep me\n")
    local buf = chat({ del("a.txt"), move("a.txt", "b.txt") })
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.equals("keep me\n", helpers.read_file(project .. "/a.txt"))
    assert.is_nil(vim.uv.fs_stat(project .. "/b.txt"))
  end)

  it("deletes a file after backing it up, and keeps at most 10 copies of a file", function()
    helpers.write_file(project .. "/a.txt", "precious\n")
    local buf = chat({ del("a.txt") })
    press("<C-]>")
    wait_text(buf, "Deleted a.txt")
    assert.is_nil(vim.uv.fs_stat(project .. "/a.txt"))
    local copy = text(buf):match("A copy is kept in (%S+):")
    assert.truthy(copy, text(buf))
    assert.equals("precious\n", helpers.read_file(copy))
    assert.truthy(copy:find(state .. "/nvim/flemma/backups/", 1, true), copy)
    local backup = require("flemma.tools.builtin.backup")
    for i = 1, 12 do
      helpers.write_file(project .. "/a.txt", "v" .. i)
      assert(backup.save(project .. "/a.txt"))
    end
    local names = {}
    for name in vim.fs.dir(backup.dir(project .. "/a.txt")) do
      names[#names + 1] = helpers.read_file(backup.dir(project .. "/a.txt") .. "/" .. name)
    end
    table.sort(names)
    assert.equals(10, #names)
    assert.is_true(vim.tbl_contains(names, "v12"))
    assert.is_false(vim.tbl_contains(names, "precious\n"))
  end)

  it("deletes an empty folder and a link (not its target), refuses a folder with content", function()
    vim.fn.mkdir(project .. "/empty", "p")
    helpers.write_file(project .. "/full/x", "x")
    helpers.write_file(project .. "/target.txt", "t")
    assert(vim.uv.fs_symlink(project .. "/target.txt", project .. "/link"))
    local buf = chat({ del("empty"), del("full"), del("link") })
    press("<C-]>")
    wait_text(buf, "toolu_03`")
    helpers.wait_for(function()
      return not text(buf):find("flemma:tool", 1, true)
    end, 10000, text(buf))
    assert.is_nil(vim.uv.fs_stat(project .. "/empty"))
    assert.equals("x", helpers.read_file(project .. "/full/x"))
    assert.truthy(text(buf):find("only empty folders are deleted", 1, true), text(buf))
    assert.is_nil(vim.uv.fs_lstat(project .. "/link"))
    assert.equals("t", helpers.read_file(project .. "/target.txt"))
  end)

  it("never overwrites without overwrite = true; with it, backs the replaced file up", function()
    helpers.write_file(project .. "/a.txt", "new\n")
    helpers.write_file(project .. "/b.txt", "old\n")
    local buf = chat({ move("a.txt", "b.txt") })
    press("<C-]>")
    wait_text(buf, "already exists")
    assert.equals("new\n", helpers.read_file(project .. "/a.txt"))
    assert.equals("old\n", helpers.read_file(project .. "/b.txt"))
    buf = chat({ move("a.txt", "b.txt", true), move("b.txt", "sub/dir/c.txt") }, project .. "/two.chat")
    press("<C-]>")
    wait_text(buf, "Moved b.txt to sub/dir/c.txt")
    assert.is_nil(vim.uv.fs_stat(project .. "/a.txt"))
    assert.equals("new\n", helpers.read_file(project .. "/sub/dir/c.txt"))
    local copy = text(buf):match("The replaced file is kept in (%S+):")
    assert.equals("old\n", helpers.read_file(copy))
  end)

  it("leaves a move out of the project, or a delete through a link leading out, pending", function()
    helpers.write_file(project .. "/a.txt", "a\n")
    helpers.write_file(elsewhere .. "/far.txt", "far\n")
    assert(vim.uv.fs_symlink(elsewhere, project .. "/out"))
    local buf = chat({ move("a.txt", elsewhere .. "/a.txt") })
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.equals("a\n", helpers.read_file(project .. "/a.txt"))
    buf = chat({ del("out/far.txt") }, project .. "/two.chat")
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.equals("far\n", helpers.read_file(elsewhere .. "/far.txt"))
  end)
end)
