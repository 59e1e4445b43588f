-- The help file: valid tags, and an entry for every subcommand and key option.
local helpers = require("spec.support.helpers")

describe(":help flemma", function()
  after_each(helpers.cleanup)

  it("builds its tags without errors and documents every :Flemma subcommand", function()
    local dir = helpers.tmpdir()
    vim.fn.mkdir(dir .. "/doc", "p")
    vim.fn.writefile(vim.fn.readfile(helpers.root .. "/doc/flemma.txt"), dir .. "/doc/flemma.txt")
    vim.v.errmsg = ""
    vim.cmd("helptags " .. vim.fn.fnameescape(dir .. "/doc"))
    assert.equals("", vim.v.errmsg)
    local tags = {}
    for _, line in ipairs(vim.fn.readfile(dir .. "/doc/tags")) do
      tags[line:match("^([^\t]+)")] = true
    end
    for _, name in ipairs(require("flemma.commands").names()) do
      local tag = ":Flemma-" .. name:gsub(":.*", "")
      local full = ":Flemma-" .. name
      assert.is_true(tags[tag] or tags[full] or false, "no help tag for :Flemma " .. name)
    end
    for _, key in ipairs({
      "tools.auto_approve",
      "tools.require_approval",
      "tools.presets",
      "tools.auto_approve_sandboxed",
      "tools.default_timeout",
      "tools.cursor_after_result",
      "tools.autopilot",
      "tools.max_concurrent",
      "tools.truncate",
      "tools.bash",
      "keymaps",
      "provider",
    }) do
      assert.is_true(tags["flemma-config-" .. key] or false, "no help tag for " .. key)
    end
    -- Every option of the schema (the one setup(), frontmatter and :Flemma switch use).
    local schema = require("flemma.isolated.schema")
    local paths = schema.paths()
    assert.same(paths, require("flemma.core.config").option_paths())
    assert.is_true(#paths > 40, "too few option paths: " .. #paths)
    local missing = {}
    for _, path in ipairs(paths) do
      if not tags["flemma-config-" .. path] then
        missing[#missing + 1] = path
      end
    end
    assert.same({}, missing, "options of the default config without a help tag")
    -- The help of an option with allowed values names each of them (near its tag).
    local lines = vim.fn.readfile(helpers.root .. "/doc/flemma.txt")
    local unnamed = {}
    for _, o in ipairs(schema.OPTIONS) do
      if o.enum then
        local at
        for i, line in ipairs(lines) do
          if line:find("*flemma-config-" .. o.path .. "*", 1, true) then
            at = i
            break
          end
        end
        local near = table.concat(lines, "\n", at, math.min(#lines, at + 40))
        for _, v in ipairs(o.enum) do
          if not near:find('"' .. v .. '"', 1, true) then
            unnamed[#unnamed + 1] = o.path .. " = " .. v
          end
        end
      end
    end
    assert.same({}, unnamed, "allowed values the help does not name")
    assert.is_true(tags["FlemmaToolPreview"] or false)
    assert.is_true(tags["flemma-cycle"] or false)
  end)

  it("has its doc/tags in the source, current with doc/flemma.txt (else: make helptags)", function()
    -- Plugin managers (lazy.nvim's dir spec, a plain rtp entry) never run :helptags:
    -- without a committed doc/tags, :help flemma is E149.
    local committed = helpers.read_file(helpers.root .. "/doc/tags")
    assert.is_not_nil(committed, "doc/tags is missing: run `make helptags` and commit it")
    local tracked = vim.system({ "git", "-C", helpers.root, "ls-files", "--error-unmatch", "doc/tags" }):wait()
    assert.equals(0, tracked.code, "doc/tags is not tracked by git (is it in .gitignore?)")
    local dir = helpers.tmpdir()
    vim.fn.mkdir(dir .. "/doc", "p")
    vim.fn.writefile(vim.fn.readfile(helpers.root .. "/doc/flemma.txt", "b"), dir .. "/doc/flemma.txt", "b")
    vim.cmd("helptags " .. vim.fn.fnameescape(dir .. "/doc"))
    local fresh = helpers.read_file(dir .. "/doc/tags")
    assert.equals(fresh, committed, "doc/tags is out of date with doc/flemma.txt: run `make helptags`")
  end)

  it("opens with :help flemma in a Neovim that only has the plugin on its runtimepath", function()
    local out = helpers.tmpdir() .. "/out.txt"
    helpers.run_nvim({
      args = { "--cmd", "set rtp^=" .. vim.fn.fnameescape(helpers.root) },
      lua = ([[
        vim.cmd("help flemma")
        local f = io.open(%q, "w")
        f:write(vim.fn.expand("%%:t"), "\n", vim.api.nvim_get_current_line(), "\n")
        f:close()
      ]]):format(out),
    })
    local text = helpers.read_file(out) or ""
    assert.matches("^flemma.txt\n", text)
    assert.matches("*flemma* *flemma-intro*", text, 1, true)
  end)
end)
