-- Issue 27, "approve and remember ... to the user's config": the rules the user adds
-- to "my configuration" are kept in stdpath("config")/flemma/auto_approve.json,
-- written whole, read at every setup() and added to tools.auto_approve (deny and ask
-- lists of setup() still win), in a new Neovim too. A file that does not read fails
-- closed: none of its rules, one error line, :checkhealth flemma names the problem.
-- `:Flemma tool:rules` opens it; writing it there applies it. Real chat buffers,
-- real keys (gA, <C-]>), real bash, child Neovims with their own XDG folders.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local function chat_lines(calls)
  local lines = { "@You:", "Go.", "", "@Assistant:" }
  for _, c in ipairs(calls) do
    vim.list_extend(lines, {
      ("**Tool Use:** `bash` (`%s`)"):format(c[1]),
      "",
      "```json",
      vim.json.encode({ command = c[2], label = vim.NIL }),
      "```",
      "",
    })
  end
  return lines
end

local function status_of(t, id)
  local s = t:match("%*%*Tool Result:%*%* `" .. id .. "`[^\n]*\n\n```+flemma:tool status=(%a+)")
  if s then
    return s
  end
  return t:find("**Tool Result:** `" .. id .. "`", 1, true) and "result" or nil
end

describe("rules remembered in the user's configuration", function()
  local dir, saved, orig_select, notes

  before_each(function()
    dir = helpers.tmpdir()
    saved = {
      config = vim.env.XDG_CONFIG_HOME,
      state = vim.env.XDG_STATE_HOME,
      cwd = vim.fn.getcwd(),
      notify = vim.notify,
    }
    vim.env.XDG_CONFIG_HOME = dir .. "/config"
    vim.env.XDG_STATE_HOME = dir .. "/state"
    vim.fn.mkdir(dir .. "/project", "p")
    vim.fn.system({ "git", "init", "-q", dir .. "/project" })
    vim.cmd("cd " .. vim.fn.fnameescape(dir .. "/project"))
    require("flemma.policy.audit").set_path(dir .. "/state/audit.jsonl")
    orig_select = vim.ui.select
    notes = {}
    vim.notify = function(msg, level)
      notes[#notes + 1] = { msg = msg, level = level }
    end
  end)

  after_each(function()
    vim.ui.select = orig_select
    vim.notify = saved.notify
    vim.env.XDG_CONFIG_HOME = saved.config
    vim.env.XDG_STATE_HOME = saved.state
    require("flemma.policy.audit").set_path(nil)
    vim.cmd("cd " .. vim.fn.fnameescape(saved.cwd))
    vim.cmd("silent! %bwipeout!")
    require("flemma").setup({})
  end)

  local function rules_file()
    return dir .. "/config/nvim/flemma/auto_approve.json"
  end

  -- A new Neovim with the same XDG folders: setup(opts), the chat of `calls` opened,
  -- a real <C-]> (the chat's key), then the calls' statuses once `id` is decided
  -- (and ran, when approved). Returns the chat's text and what was said.
  local function child(opts, calls, id)
    local out = dir .. "/child.out"
    os.remove(out)
    local chat = dir .. "/project/child.chat"
    vim.fn.writefile(chat_lines(calls), chat)
    local res = helpers.run_nvim({
      rtp = helpers.root,
      cwd = dir .. "/project",
      env = { XDG_CONFIG_HOME = dir .. "/config", XDG_STATE_HOME = dir .. "/state" },
      lua = ([=[
        local said = {}
        vim.notify = function(msg) said[#said + 1] = msg end
        require("flemma").setup(vim.json.decode(%q))
        vim.cmd("edit " .. vim.fn.fnameescape(%q))
        vim.api.nvim_feedkeys(vim.keycode("<C-]>"), "mx", false)
        local header = "**Tool Result:** `" .. %q .. "`"
        vim.wait(15000, function()
          local t = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
          return t:find(header, 1, true) ~= nil and (t:find(header .. "\n\n```flemma:tool status=approved", 1, true) == nil)
        end, 20)
        local t = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
        vim.fn.writefile(vim.split(vim.json.encode({ text = t, said = said }), "\n"), %q)
      ]=]):format(vim.json.encode(opts), chat, id, out),
    })
    assert.equals(0, res.code, res.stderr)
    return vim.json.decode(table.concat(vim.fn.readfile(out), "\n"))
  end

  local AUTOPILOT_OFF = { tools = { autopilot = { enabled = false } } }

  it("gA into my configuration writes the file; a new Neovim approves the next such call on <C-]>", function()
    require("flemma").setup(AUTOPILOT_OFF)
    local buf = helpers.edit(dir .. "/project/first.chat", chat_lines({ { "toolu_1", "git log --oneline -3" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(text(buf), "toolu_1") == "pending"
    end, 5000, text(buf))
    vim.ui.select = function(items, _, on_choice)
      for i, item in ipairs(items) do
        if item:find("my configuration", 1, true) then
          return on_choice(item, i)
        end
      end
    end
    press("gA")
    assert.equals("approved", status_of(text(buf), "toolu_1"), text(buf))
    assert.same({ auto_approve = { "bash(git log *)" } }, vim.json.decode(helpers.read_file(rules_file())))
    local said = vim.tbl_filter(function(n)
      return n.msg:find("added bash(git log *) to your configuration's rules in ", 1, true)
        and n.msg:find("auto_approve.json (:Flemma tool:rules)", 1, true)
    end, notes)
    assert.equals(1, #said, vim.inspect(notes))
    -- No temporary file is left beside it.
    assert.same({ "auto_approve.json" }, vim.fn.readdir(dir .. "/config/nvim/flemma"))

    -- A new Neovim: the remembered rule approves `git log -1`, which runs on <C-]>;
    -- with `git push` (no rule) beside it, that waits.
    local calls = { { "toolu_a", "git log -1 --format=LOGGED-%s" } }
    local r = child(AUTOPILOT_OFF, calls, "toolu_a")
    assert.equals("result", status_of(r.text, "toolu_a"), r.text)
    r = child(AUTOPILOT_OFF, { calls[1], { "toolu_b", "git push" } }, "toolu_b")
    assert.equals("approved", status_of(r.text, "toolu_a"), r.text)
    assert.equals("pending", status_of(r.text, "toolu_b"), r.text)
    -- setup()'s deny list still wins over the remembered rule.
    r = child({ tools = { autopilot = { enabled = false }, deny = { "bash(git log *)" } } }, calls, "toolu_a")
    assert.equals("denied", status_of(r.text, "toolu_a"), r.text)

    -- A second rule joins the first in the same file.
    require("flemma.policy.remembered").add({ "bash(make)" })
    assert.same(
      { auto_approve = { "bash(git log *)", "bash(make)" } },
      vim.json.decode(helpers.read_file(rules_file()))
    )
  end)

  it("a malformed file fails closed: no rule of it applies, one error line, :checkhealth names it", function()
    vim.fn.mkdir(dir .. "/config/nvim/flemma", "p")
    local calls = { { "toolu_a", "git log -1" }, { "toolu_b", "git status" } }
    for _, case in ipairs({
      { '{ "auto_approve": [ "bash(git log *)", ', "is not valid JSON" },
      {
        '{ "auto_approve": [ "bash(git log *)", "bash(git status" ] }',
        '"auto_approve"[2]: the rule "bash(git status"',
      },
      { '{ "auto_approve": [ "bash(git log *)", "$default" ] }', '"auto_approve"[2]: "$default" is not a tool name' },
      { '{ "allow": [ "bash(git log *)" ] }', 'has the key "allow"' },
      { '[ "bash(git log *)" ]', "should be an object" },
    }) do
      helpers.write_file(rules_file(), case[1])
      local r = child(AUTOPILOT_OFF, calls, "toolu_a")
      assert.equals("pending", status_of(r.text, "toolu_a"), case[1] .. "\n" .. r.text)
      local errors = vim.tbl_filter(function(m)
        return m:find(rules_file(), 1, true) and m:find("none of its rules are applied", 1, true)
      end, r.said)
      assert.equals(1, #errors, case[1] .. "\n" .. vim.inspect(r.said))
      assert.truthy(errors[1]:find(case[2], 1, true), errors[1])
      assert.is_nil(errors[1]:find("\n", 1, true), errors[1])
    end
    -- Here: :checkhealth names the file and the problem; adding refuses, the file
    -- stays as the user wrote it.
    require("flemma").setup(AUTOPILOT_OFF)
    vim.cmd("checkhealth flemma")
    local report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    vim.cmd("bwipeout!")
    assert.truthy(report:find(rules_file() .. " should be an object", 1, true), report)
    local ok, err = pcall(require("flemma.policy.remembered").add, { "bash(make)" })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("nothing was added", 1, true), tostring(err))
    assert.equals('[ "bash(git log *)" ]', helpers.read_file(rules_file()))
    -- A good file: health counts its rules.
    helpers.write_file(rules_file(), '{ "auto_approve": [ "bash(git log *)", "read(src/*)" ] }')
    require("flemma").setup(AUTOPILOT_OFF)
    vim.cmd("checkhealth flemma")
    report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    vim.cmd("bwipeout!")
    assert.truthy(report:find(rules_file() .. ": 2 rules", 1, true), report)
  end)

  it(":Flemma tool:rules opens the file; a rule taken out there and written stops approving", function()
    vim.fn.mkdir(dir .. "/config/nvim/flemma", "p")
    helpers.write_file(rules_file(), '{ "auto_approve": [ "bash(git log *)", "bash(git status)" ] }')
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "calculator" } } })
    local aa = require("flemma.core.config").get().tools.auto_approve
    assert.same({ "calculator", "bash(git log *)", "bash(git status)" }, aa)
    vim.cmd("Flemma tool:rules")
    assert.equals(rules_file(), vim.fs.normalize(vim.api.nvim_buf_get_name(0)))
    assert.same({ '{ "auto_approve": [ "bash(git log *)", "bash(git status)" ] }' }, helpers.lines(0))
    vim.api.nvim_buf_set_lines(0, 0, -1, false, { "{", '  "auto_approve": [ "bash(git log *)" ]', "}" })
    vim.cmd("silent write")
    vim.cmd("close")
    assert.same({ "calculator", "bash(git log *)" }, require("flemma.core.config").get().tools.auto_approve)
    local buf =
      helpers.edit(dir .. "/project/c.chat", chat_lines({ { "toolu_1", "git status" }, { "toolu_2", "git log -1" } }))
    press("<C-]>")
    helpers.wait_for(function()
      return status_of(text(buf), "toolu_2") ~= nil
    end, 5000, text(buf))
    assert.equals("pending", status_of(text(buf), "toolu_1"), text(buf))
    assert.truthy(({ approved = true, result = true })[status_of(text(buf), "toolu_2")], text(buf))
    -- Written broken there: its rules go at once (fail closed), one error line.
    vim.cmd("Flemma tool:rules")
    vim.api.nvim_buf_set_lines(0, 0, -1, false, { "{ broken" })
    notes = {}
    vim.cmd("silent write")
    vim.cmd("close")
    assert.same({ "calculator" }, require("flemma.core.config").get().tools.auto_approve)
    assert.equals(1, #notes, vim.inspect(notes))
    assert.truthy(notes[1].msg:find("is not valid JSON", 1, true), notes[1].msg)
  end)
  it(
    "a tool call never writes the rules: a `write` $default would approve in a project that is the configuration waits",
    function()
      -- The user's project is their Neovim configuration (dotfiles): $default approves
      -- `write` inside a project, but not into the file that widens the policy later.
      local nvim_dir = dir .. "/config/nvim"
      vim.fn.mkdir(nvim_dir .. "/flemma", "p")
      vim.fn.system({ "git", "init", "-q", nvim_dir })
      vim.cmd("cd " .. vim.fn.fnameescape(nvim_dir))
      require("flemma").setup(AUTOPILOT_OFF)
      local function write_use(id, path)
        return {
          ("**Tool Use:** `write` (`%s`)"):format(id),
          "",
          "```json",
          vim.json.encode({ path = path, content = '{ "auto_approve": [ "bash" ] }\n', label = vim.NIL }),
          "```",
          "",
        }
      end
      local lines = { "@You:", "Go.", "", "@Assistant:" }
      vim.list_extend(lines, write_use("toolu_1", "flemma/auto_approve.json"))
      vim.list_extend(lines, write_use("toolu_2", "notes.json"))
      local buf = helpers.edit(nvim_dir .. "/c.chat", lines)
      press("<C-]>")
      helpers.wait_for(function()
        return status_of(text(buf), "toolu_1") ~= nil
      end, 5000, text(buf))
      helpers.settle()
      assert.equals("pending", status_of(text(buf), "toolu_1"), text(buf))
      -- The same write elsewhere in the project is approved (it runs once the other
      -- call is decided).
      assert.truthy(({ approved = true, result = true })[status_of(text(buf), "toolu_2")], text(buf))
      assert.is_nil(vim.uv.fs_stat(rules_file()), "the rules file was written")
    end
  )
end)
