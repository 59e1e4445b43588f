-- The search and listing tools (issue 27): grep, glob, find and ls through the buffer
-- and <C-]> on real files in real directories, with rg / fd / git ls-files and with
-- the native search of the core (rg and fd hidden from PATH, or backend = "native").
local helpers = require("spec.support.helpers")

local approval = require("flemma.tools.approval")
local tools = require("flemma.tools")

local press, text = helpers.press, helpers.text

local project, home, elsewhere, saved

local function wait_text(buf, pattern)
  helpers.wait_for(function()
    return text(buf):find(pattern, 1, true) ~= nil
  end, 10000, "buffer never contained: " .. pattern .. "\n--- buffer:\n" .. text(buf))
end

local function status(buf)
  return text(buf):match("```flemma:tool status=(%a+)")
end

-- A chat in the project with tool calls { name, input } (ids toolu_01, ...).
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

local function grep_input(o)
  local input = {
    pattern = o.pattern,
    path = vim.NIL,
    glob = vim.NIL,
    fixed_strings = vim.NIL,
    ignore_case = vim.NIL,
    context = vim.NIL,
    max_results = vim.NIL,
  }
  for k, v in pairs(o) do
    input[k] = v
  end
  return input
end

-- The result text of a call run directly through the registry (for comparisons).
local function run(name, input, bufnr)
  local result
  tools.execute(bufnr or 0, { id = "x", name = name, input = input }, function(r)
    result = r
  end)
  helpers.wait_for(function()
    return result ~= nil
  end, 20000, name .. " never finished")
  return result
end

local function setup(extra)
  local opts = vim.tbl_deep_extend("force", { tools = { autopilot = { enabled = false } } }, extra or {})
  require("flemma").setup(opts)
end

-- The fixture tree: matches in plain, nested, ignored, hidden, binary, secret and
-- linked-out files.
local function fixture()
  helpers.write_file(project .. "/a.txt", "alpha\nneedle one\ngamma\n")
  helpers.write_file(project .. "/src/b.lua", "local x = 1\n-- needle two\nreturn x\nneedle three\n")
  helpers.write_file(project .. "/src/gen/c.lua", "needle generated\n")
  helpers.write_file(project .. "/src/.gitignore", "gen/\n")
  helpers.write_file(project .. "/.hidden/d.txt", "needle hidden\n")
  helpers.write_file(project .. "/skip.log", "needle log\n")
  helpers.write_file(project .. "/.ignore", "*.log\n")
  helpers.write_file(project .. "/.env", "API_KEY=needle-hidden-secret\n") -- hidden: never searched
  helpers.write_file(project .. "/certs/server.pem", "needle-secret-value\n")
  helpers.write_file(project .. "/keys/id_ed25519", "needle-local-secret\n")
  local f = assert(io.open(project .. "/bin.dat", "wb"))
  f:write("needle\0binary\n")
  f:close()
  helpers.write_file(elsewhere .. "/outside.txt", "needle outside\n")
  assert(vim.uv.fs_symlink(elsewhere, project .. "/linked"))
  assert(vim.uv.fs_symlink(elsewhere .. "/outside.txt", project .. "/linked.txt"))
end

local function result_block(buf)
  return text(buf):match("%*%*Tool Result:%*%* `toolu_01`.-\n```[^\n]*\n(.-)\n```") or ""
end

-- A PATH without rg and fd (and, unless `git`, without git).
local function hide_programs(keep_git)
  local bin = helpers.tmpdir()
  for _, p in ipairs(keep_git and { "git" } or {}) do
    assert(vim.uv.fs_symlink(vim.fn.exepath(p), bin .. "/" .. p))
  end
  vim.env.PATH = bin
end

describe("grep, glob, find and ls", function()
  before_each(function()
    project = helpers.tmpdir()
    home = helpers.tmpdir()
    elsewhere = helpers.tmpdir()
    saved = { home = vim.env.HOME, cwd = vim.fn.getcwd(), path = vim.env.PATH }
    vim.env.HOME = home
    vim.cmd("cd " .. vim.fn.fnameescape(project))
    setup()
    require("flemma.policy.sandbox").set_enabled(nil)
  end)
  after_each(function()
    vim.env.HOME = saved.home
    vim.env.PATH = saved.path
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

  for _, backend in ipairs({ "rg", "native" }) do
    describe("grep with " .. backend, function()
      before_each(function()
        if backend == "native" then
          hide_programs(false)
        else
          assert.equals(1, vim.fn.executable("rg"), "ripgrep is not installed (make deps)")
        end
      end)

      it("is auto-approved inside the project and prints path:line:text, skipping what it must", function()
        fixture()
        local buf = chat({ { "grep", grep_input({ pattern = "needle" }) } })
        press("<C-]>")
        wait_text(buf, "needle one")
        local out = result_block(buf)
        assert.equals(
          table.concat({
            "a.txt:2:needle one",
            "",
            "src/b.lua:2:-- needle two",
            "src/b.lua:4:needle three",
            "",
            "[2 secret files left out (certs/server.pem, keys/id_ed25519): read one explicitly if you need it.]",
            "[1 binary file with a match skipped.]",
          }, "\n"),
          out
        )
        assert.is_nil(text(buf):find("secret-value", 1, true))
        assert.is_nil(text(buf):find("needle-local", 1, true))
        assert.is_nil(text(buf):find("outside", 1, true)) -- links are not followed
        assert.is_nil(text(buf):find("generated", 1, true)) -- .gitignore'd
        assert.is_nil(text(buf):find("needle log", 1, true)) -- .ignore'd
        assert.is_nil(text(buf):find("hidden", 1, true))
      end)

      it("counts the matches max_results leaves out, and truncates like bash", function()
        local many = {}
        for i = 1, 50 do
          many[i] = "match " .. i
        end
        helpers.write_file(project .. "/many.txt", table.concat(many, "\n") .. "\n")
        local r = run("grep", grep_input({ pattern = "match", max_results = 5 }))
        assert.is_true(r.success, r.error)
        assert.truthy(
          r.output:find("many.txt:5:match 5\n\n[45 more matches not shown (max_results = 5 of 50 in all)", 1, true),
          r.output
        )
        setup({ tools = { truncate = { max_lines = 3, max_bytes = 51200 } } })
        r = run("grep", grep_input({ pattern = "match", max_results = 10 }))
        assert.truthy(
          r.output:find("many.txt:3:match 3\n\n[Output truncated: showing the first 3 of 10 lines", 1, true),
          r.output
        )
        assert.truthy(r.output:find("[40 more matches not shown", 1, true), r.output)
      end)

      it("shows context lines, ignores case, filters by glob and takes literals", function()
        fixture()
        local r = run("grep", grep_input({ pattern = "NEEDLE T", ignore_case = true, context = 1, glob = "*.lua" }))
        assert.equals(
          "src/b.lua-1-local x = 1\nsrc/b.lua:2:-- needle two\nsrc/b.lua-3-return x\nsrc/b.lua:4:needle three",
          r.output
        )
        r = run("grep", grep_input({ pattern = "x = (", fixed_strings = true }))
        assert.equals("No matches for `x = (` in ..", r.output)
        helpers.write_file(project .. "/p.txt", "f(a+b)\n")
        r = run("grep", grep_input({ pattern = "(a+b)", fixed_strings = true, path = "p.txt" }))
        assert.equals("p.txt:1:f(a+b)", r.output)
      end)
    end)
  end

  it("gives the same results with rg and with the native search on a fixture tree", function()
    fixture()
    for i = 1, 30 do
      helpers.write_file(
        ("%s/tree/d%d/f%d.c"):format(project, i % 4, i),
        ("int f%d(void) { return %d; }\n// todo: fix %d\n"):format(i, i, i)
      )
    end
    helpers.write_file(project .. "/tree/.gitignore", "d3/\n!d3/keep.c\n")
    helpers.write_file(project .. "/tree/notes.md", "TODO: Fix it\nnot this\nTodo later\n")
    local cases = {
      grep_input({ pattern = "needle" }),
      grep_input({ pattern = "todo", ignore_case = true }),
      grep_input({ pattern = "f[0-9]+\\(void\\)", path = "tree" }),
      grep_input({ pattern = "return 1[0-9];", path = "tree", context = 1 }),
      grep_input({ pattern = "^Todo|fix 2\\b", path = "tree", glob = "*.md" }),
    }
    for _, input in ipairs(cases) do
      setup({ tools = { search = { backend = "auto" } } })
      local with_rg = run("grep", input)
      setup({ tools = { search = { backend = "native" } } })
      local native = run("grep", input)
      assert.is_true(with_rg.success, with_rg.error)
      assert.equals(with_rg.output, native.output, vim.inspect(input))
      assert.is_nil(with_rg.output:find("No matches", 1, true), vim.inspect(input))
    end
    -- Past max_results, which matches are shown depends on the order the files are
    -- searched in (rg searches in parallel); the counts are the same.
    local input = grep_input({ pattern = "int", path = "tree", max_results = 7 })
    setup({ tools = { search = { backend = "auto" } } })
    local with_rg = run("grep", input).output
    setup({ tools = { search = { backend = "native" } } })
    local native = run("grep", input).output
    local note = "[16 more matches not shown (max_results = 7 of 23 in all)"
    assert.truthy(with_rg:find(note, 1, true), with_rg)
    assert.truthy(native:find(note, 1, true), native)
    assert.equals(select(2, with_rg:gsub(":1:int ", "")), select(2, native:gsub(":1:int ", "")))
  end)

  it("refuses each ReDoS pattern class, and overlong patterns, with a message", function()
    helpers.write_file(project .. "/x.txt", "aaaa\n")
    local buf = chat({
      { "grep", grep_input({ pattern = "(a+)+$" }) },
      { "grep", grep_input({ pattern = "(x*y)*z" }) },
      { "grep", grep_input({ pattern = "a*a*b" }) },
      { "grep", grep_input({ pattern = ".*.*=" }) },
      { "grep", grep_input({ pattern = "\\w+\\d+x" }) },
      { "grep", grep_input({ pattern = string.rep("a", 1001) }) },
      { "grep", grep_input({ pattern = "(?=a)" }) },
    })
    press("<C-]>")
    wait_text(buf, "toolu_07` (error)")
    local t = text(buf)
    local _, nested = t:gsub("pattern refused: it nests an unbounded quantifier", "")
    local _, adjacent = t:gsub("pattern refused: it has two unbounded quantifiers side by side", "")
    assert.equals(2, nested, t)
    assert.equals(3, adjacent, t)
    assert.truthy(t:find("pattern refused: the pattern is longer than 1000 bytes (1001)", 1, true), t)
    assert.truthy(t:find("pattern refused: only non-capturing groups", 1, true), t)
  end)

  it("leaves a search outside the project, or through a link leading out, pending", function()
    fixture()
    local buf = chat({ { "grep", grep_input({ pattern = "needle", path = elsewhere }) } })
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.is_nil(text(buf):find("needle outside", 1, true))
    buf = chat({ { "grep", grep_input({ pattern = "needle", path = "linked" }) } }, project .. "/two.chat")
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
    assert.truthy(require("flemma.ui.preview").shown(buf)[1].text:find("(outside the project)", 1, true))
    buf = chat({ { "ls", { path = "~/.ssh", hidden = vim.NIL } } }, project .. "/three.chat")
    press("<C-]>")
    vim.wait(100)
    assert.equals("pending", status(buf), text(buf))
  end)

  it("runs rg inside the sandbox (real bwrap) with the same results, and the native search with it on", function()
    if require("flemma.policy.sandbox").is_available("bwrap") ~= true then
      error("bwrap is not usable here")
    end
    fixture()
    setup({ sandbox = { enabled = true, backend = "bwrap" } })
    require("flemma.policy.sandbox").set_enabled(true)
    local sandboxed = run("grep", grep_input({ pattern = "needle" }))
    require("flemma.policy.sandbox").set_enabled(false)
    local plain = run("grep", grep_input({ pattern = "needle" }))
    assert.is_true(sandboxed.success, sandboxed.error)
    -- The same matches; the sandbox hides the project's secret files from rg, which
    -- says it cannot read them (outside it, grep reads and leaves them out).
    local matches = "a.txt:2:needle one\n\nsrc/b.lua:2:-- needle two\nsrc/b.lua:4:needle three\n\n"
    assert.equals(
      matches
        .. "[2 secret files left out (certs/server.pem, keys/id_ed25519): read one explicitly if you need it.]\n[1 binary file with a match skipped.]",
      plain.output
    )
    assert.equals(
      matches .. "[1 binary file with a match skipped.]\n[2 files or folders could not be read.]",
      sandboxed.output
    )
    require("flemma.policy.sandbox").set_enabled(true)
    setup({ sandbox = { enabled = true, backend = "bwrap" }, tools = { search = { backend = "native" } } })
    local native = run("grep", grep_input({ pattern = "needle" }))
    assert.equals(plain.output, native.output)
  end)

  it("says what it could not read", function()
    if vim.uv.getuid() == 0 then
      pending("root reads files without permissions: run the specs as another user for this one")
      return
    end
    helpers.write_file(project .. "/locked/x.txt", "needle\n")
    vim.uv.fs_chmod(project .. "/locked", 0)
    for _, b in ipairs({ "auto", "native" }) do
      setup({ tools = { search = { backend = b } } })
      local r = run("grep", grep_input({ pattern = "needle" }))
      assert.truthy(r.output:find("[1 file or folder could not be read.]", 1, true), r.output)
    end
    vim.uv.fs_chmod(project .. "/locked", 448)
  end)

  describe("glob and find", function()
    local function tree()
      helpers.write_file(project .. "/old.lua", "")
      helpers.write_file(project .. "/src/new.lua", "")
      helpers.write_file(project .. "/src/deep/mid.lua", "")
      helpers.write_file(project .. "/src/x.c", "")
      helpers.write_file(project .. "/node_modules/m.lua", "")
      helpers.write_file(project .. "/build/b.lua", "")
      helpers.write_file(project .. "/.hidden/h.lua", "")
      helpers.write_file(project .. "/ignored/i.lua", "")
      helpers.write_file(project .. "/.gitignore", "ignored/\n")
      vim.uv.fs_utime(project .. "/old.lua", 1000, 1000)
      vim.uv.fs_utime(project .. "/src/deep/mid.lua", 2000, 2000)
      vim.uv.fs_utime(project .. "/src/new.lua", 3000, 3000)
      assert(vim.uv.fs_symlink(elsewhere, project .. "/out"))
      helpers.write_file(elsewhere .. "/far.lua", "")
      vim.system({ "git", "init", "-q", project }):wait()
    end
    local want = "src/new.lua\nsrc/deep/mid.lua\nold.lua"

    for _, backend in ipairs({ "fd", "git", "native" }) do
      it(
        "lists **/*.lua newest first, skipping build, dependency, hidden and ignored folders (" .. backend .. ")",
        function()
          tree()
          if backend == "git" then
            hide_programs(true)
          elseif backend == "native" then
            hide_programs(false)
          else
            assert.is_true(vim.fn.executable("fdfind") == 1 or vim.fn.executable("fd") == 1, "fd-find is not installed")
          end
          local buf = chat({ { "glob", { pattern = "**/*.lua", path = vim.NIL, max_results = vim.NIL } } })
          press("<C-]>")
          wait_text(buf, "old.lua")
          assert.equals(want, result_block(buf))
          local r = run("glob", { pattern = "*.lua", path = "src", max_results = 1 })
          assert.equals(
            "src/new.lua\n\n[Showing the 1 newest of 2 files (max_results = 1); narrow the pattern or path, or raise max_results (at most 1000).]",
            r.output
          )
          r = run("glob", { pattern = "src/*.c", path = vim.NIL, max_results = vim.NIL })
          assert.equals("src/x.c", r.output)
          r = run("find", { pattern = "de*", path = vim.NIL, type = "directory", max_results = vim.NIL })
          assert.equals("src/deep/", r.output)
          r = run("find", { pattern = "*.zig", path = vim.NIL, type = vim.NIL, max_results = vim.NIL })
          assert.equals("No entries match `*.zig` in ..", r.output)
        end
      )
    end

    it("skips the folders of tools.search.skip_dirs (validated)", function()
      tree()
      setup({ tools = { search = { skip_dirs = { "src" } } } })
      local r = run("glob", { pattern = "**/*.lua", path = vim.NIL, max_results = vim.NIL })
      -- The list replaces the default one: build and node_modules are walked now.
      assert.equals("build/b.lua\nnode_modules/m.lua\nold.lua", r.output)
      local ok, err = pcall(setup, { tools = { search = { skip_dirs = { "a/b" } } } })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("`tools.search.skip_dirs[1]` should be a folder name", 1, true), err)
      ok, err = pcall(setup, { tools = { search = { backend = "fd" } } })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("`tools.search.backend` should be one of auto, native", 1, true), err)
    end)
  end)

  describe("ls", function()
    it("lists one folder, folders first, with type and size, hidden on request", function()
      helpers.write_file(project .. "/b.txt", "12345")
      helpers.write_file(project .. "/A.md", "")
      helpers.write_file(project .. "/zdir/x", "")
      helpers.write_file(project .. "/.secret", "x")
      assert(vim.uv.fs_symlink(elsewhere, project .. "/link"))
      local buf = chat({ { "ls", { path = vim.NIL, hidden = vim.NIL } } })
      press("<C-]>")
      wait_text(buf, "b.txt")
      assert.equals(
        table.concat({
          ".: 1 folder, 3 other entries (1 hidden not shown: hidden = true lists them)",
          "dir          -  zdir/",
          "file        0B  A.md",
          "file        5B  b.txt",
          "link         -  link -> " .. elsewhere .. "/",
        }, "\n"),
        result_block(buf)
      )
      local r = run("ls", { path = vim.NIL, hidden = true })
      assert.truthy(r.output:find("\nfile        1B  .secret\n", 1, true), r.output)
      r = run("ls", { path = "b.txt", hidden = vim.NIL })
      assert.is_false(r.success)
      assert.equals("b.txt is not a folder (read it with the read tool)", r.error)
    end)
  end)
end)
