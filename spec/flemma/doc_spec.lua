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
    local paths = require("flemma.config").option_paths()
    assert.is_true(#paths > 40, "too few option paths: " .. #paths)
    local missing = {}
    for _, path in ipairs(paths) do
      if not tags["flemma-config-" .. path] then
        missing[#missing + 1] = path
      end
    end
    assert.same({}, missing, "options of the default config without a help tag")
    assert.is_true(tags["FlemmaToolPreview"] or false)
    assert.is_true(tags["flemma-cycle"] or false)
  end)
end)
