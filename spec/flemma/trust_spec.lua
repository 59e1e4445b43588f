-- A chat file must not approve its own tool calls (issue 11 §12): real chat files, real
-- bash, <C-]> pressed; vim.ui.select (the user-facing extension point) replaced to
-- answer; trust answers in an isolated XDG_STATE_HOME, read again by a child Neovim.
local helpers = require("spec.support.helpers")

local trust = require("flemma.chat.trust")

local press, text = helpers.press, helpers.text

local dir, state, saved, orig_select, orig_notify, asked, messages

-- The lines of a chat file: the frontmatter, then a bash call that creates `marker`
-- in the chat file's directory.
local function chat_lines(frontmatter, marker)
  local lines = { "```lua" }
  vim.list_extend(lines, frontmatter)
  vim.list_extend(lines, {
    "```",
    "@You:",
    "Go.",
    "",
    "@Assistant:",
    "**Tool Use:** `bash` (`toolu_01`)",
    "",
    "```json",
    vim.json.encode({ command = "touch " .. marker, label = vim.NIL, timeout = vim.NIL }),
    "```",
  })
  return lines
end

local function chat(frontmatter, name)
  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/" .. (name or "test.chat")))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, chat_lines(frontmatter, dir .. "/marker"))
  return buf
end

-- vim.ui.select answers `choice` (an index into the items, or nil to dismiss).
local function answer(choice)
  vim.ui.select = function(items, opts, on_choice)
    asked[#asked + 1] = { items = items, prompt = opts.prompt }
    on_choice(choice and items[choice] or nil, choice)
  end
end

local function status(buf)
  return text(buf):match("```flemma:tool status=(%a+)")
end

local function settle()
  vim.wait(300, function()
    return vim.uv.fs_stat(dir .. "/marker") ~= nil
  end, 10)
end

local function warned(pattern)
  return #vim.tbl_filter(function(m)
    return m.msg:find(pattern, 1, true) ~= nil
  end, messages)
end

describe("trusting a chat file's frontmatter", function()
  before_each(function()
    dir = helpers.tmpdir()
    state = helpers.tmpdir()
    saved = { state = vim.env.XDG_STATE_HOME }
    vim.env.XDG_STATE_HOME = state
    orig_select = vim.ui.select
    orig_notify = vim.notify
    asked, messages = {}, {}
    vim.notify = function(msg, level)
      messages[#messages + 1] = { msg = msg, level = level }
    end
    require("flemma").setup({ tools = { autopilot = { enabled = false } } })
  end)
  after_each(function()
    vim.ui.select = orig_select
    vim.notify = orig_notify
    vim.env.XDG_STATE_HOME = saved.state
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("does not run bash that an untrusted frontmatter auto-approves (declined)", function()
    answer(2)
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    press("<C-]>")
    settle()
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"), "bash ran")
    assert.equals("pending", status(buf), text(buf))
    assert.equals(1, #asked)
    assert.truthy(asked[1].prompt:find("`bash`", 1, true), asked[1].prompt)
    assert.equals(1, warned("approves `bash`, but you did not trust it"), vim.inspect(messages))
    -- Remembered: the next press does not ask again.
    press("<C-]>")
    assert.equals(1, #asked)
  end)

  it("does not ask without a UI and ignores the widening, saying so", function()
    -- The built-in vim.ui.select and no UI attached (headless): nobody to ask.
    vim.ui.select = orig_select
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    press("<C-]>")
    settle()
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"), "bash ran")
    assert.equals("pending", status(buf))
    assert.equals(1, warned("approves `bash`, but it is not trusted"), vim.inspect(messages))
  end)

  it("runs bash once the frontmatter is trusted, and editing the conversation keeps the trust", function()
    answer(1)
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    press("<C-]>")
    helpers.wait_for(function()
      return vim.uv.fs_stat(dir .. "/marker") ~= nil
    end, 5000, "bash did not run after trusting")
    helpers.wait_for(function()
      return #require("flemma.cycle").running(buf) == 0
    end, 5000)
    assert.equals(1, #asked)
    assert.equals("trusted", trust.state(buf))
    -- The answer is in stdpath("state"), by the chat file's real path and the
    -- frontmatter's hash.
    local stored = helpers.read_file(state .. "/nvim/flemma/trust")
    local real = vim.uv.fs_realpath(dir) .. "/test.chat"
    assert.equals("v2 trusted " .. trust.hash(buf) .. " " .. real .. "\n", stored)
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, { "", "@You:", "thanks" })
    assert.equals("trusted", trust.state(buf))
    -- Editing the frontmatter asks again.
    vim.api.nvim_buf_set_lines(buf, 1, 1, false, { "-- edited" })
    assert.is_nil(trust.state(buf))
  end)

  it("trusts the file, not the text: a copy elsewhere is not trusted, a renamed file asks again", function()
    answer(1)
    local a = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' }, "a.chat")
    vim.cmd("silent write")
    press("<C-]>")
    helpers.wait_for(function()
      return vim.uv.fs_stat(dir .. "/marker") ~= nil
    end, 5000, "bash did not run after trusting chat A")
    helpers.wait_for(function()
      return #require("flemma.cycle").running(a) == 0
    end, 5000)
    assert.equals(1, #asked)
    assert.equals("trusted", trust.state(a))
    os.remove(dir .. "/marker")

    -- The same bytes at another path (a stranger's chat, a copy): not trusted, asked,
    -- and declining leaves the call pending.
    local other = helpers.tmpdir()
    local lines = vim.fn.readfile(dir .. "/a.chat")
    vim.fn.writefile(lines, other .. "/b.chat")
    vim.cmd("edit " .. vim.fn.fnameescape(other .. "/b.chat"))
    local b = vim.api.nvim_get_current_buf()
    assert.equals(trust.hash(a), trust.hash(b))
    assert.is_nil(trust.state(b))
    answer(2)
    press("<C-]>")
    settle()
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"), "bash ran for the copy")
    assert.equals("pending", status(b), text(b))
    assert.equals(2, #asked)
    assert.truthy(asked[2].prompt:find("b.chat", 1, true), asked[2].prompt)
    assert.equals("denied", trust.state(b))
    -- Chat A is still trusted.
    assert.equals("trusted", trust.state(a))

    -- A symlink to chat A is chat A.
    vim.uv.fs_symlink(dir .. "/a.chat", other .. "/link.chat")
    vim.cmd("edit " .. vim.fn.fnameescape(other .. "/link.chat"))
    assert.equals("trusted", trust.state(vim.api.nvim_get_current_buf()))

    -- Chat A moved: asked again (declined: the call stays pending).
    vim.cmd("silent! %bwipeout!")
    assert.is_true(vim.uv.fs_rename(dir .. "/a.chat", dir .. "/moved.chat"))
    vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/moved.chat"))
    local moved = vim.api.nvim_get_current_buf()
    assert.is_nil(trust.state(moved))
    press("<C-]>")
    settle()
    assert.equals(3, #asked)
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"), "bash ran for the moved file")
    assert.equals("pending", status(moved), text(moved))
  end)

  it("an entry of the older store, keyed by the text alone, grants no trust", function()
    answer(2)
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    vim.fn.mkdir(state .. "/nvim/flemma", "p")
    local name = vim.api.nvim_buf_get_name(buf)
    vim.fn.writefile({ trust.hash(buf) .. " trusted " .. name }, state .. "/nvim/flemma/trust")
    assert.is_nil(trust.state(buf))
    press("<C-]>")
    settle()
    assert.equals(1, #asked)
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"), "bash ran")
    assert.equals("pending", status(buf))
    -- The answer replaced the old line.
    local stored = vim.fn.readfile(state .. "/nvim/flemma/trust")
    assert.equals(1, #stored)
    assert.matches("^v2 denied %x+ .*test%.chat$", stored[1])
  end)

  it("answers for a buffer without a file hold for that buffer only, and are not written", function()
    answer(1)
    vim.cmd("enew")
    local buf = vim.api.nvim_get_current_buf()
    vim.bo[buf].filetype = "chat"
    vim.api.nvim_buf_set_lines(
      buf,
      0,
      -1,
      false,
      chat_lines({ 'flemma.opt.tools.auto_approve = { "bash" }' }, dir .. "/marker")
    )
    press("<C-]>")
    helpers.wait_for(function()
      return vim.uv.fs_stat(dir .. "/marker") ~= nil
    end, 5000, "bash did not run after trusting the unnamed buffer")
    assert.equals("trusted", trust.state(buf))
    assert.is_nil(vim.uv.fs_stat(state .. "/nvim/flemma/trust"))
    -- Another unnamed buffer with the same text is not trusted.
    vim.cmd("enew")
    local buf2 = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf2, 0, -1, false, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
    assert.is_nil(trust.state(buf2))
    -- Saved as a file: asked again.
    vim.cmd("silent saveas " .. vim.fn.fnameescape(dir .. "/saved.chat"))
    assert.is_nil(trust.state(buf2))
  end)

  it("asks once while an asynchronous prompt is open, then goes on after the answer", function()
    local pending
    vim.ui.select = function(items, opts, on_choice)
      asked[#asked + 1] = { items = items, prompt = opts.prompt }
      pending = function()
        on_choice(items[1])
      end
    end
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    local before = text(buf)
    press("<C-]>")
    press("<C-]>")
    assert.equals(1, #asked)
    assert.equals(before, text(buf)) -- nothing injected before the answer
    assert.equals(1, warned("answer whether to trust this frontmatter first"), vim.inspect(messages))
    pending()
    helpers.wait_for(function()
      return vim.uv.fs_stat(dir .. "/marker") ~= nil
    end, 5000, "bash did not run after the answer")
    helpers.wait_for(function()
      return #require("flemma.cycle").running(buf) == 0
    end, 5000)
    assert.equals(1, select(2, text(buf):gsub("%*%*Tool Result:%*%*", "")))
  end)

  it("asks about an auto_approve function, which approves only once trusted", function()
    answer(2)
    local fm = { "flemma.opt.tools.auto_approve = function() return true end" }
    local buf = chat(fm)
    press("<C-]>")
    settle()
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"))
    assert.equals("pending", status(buf))
    assert.truthy(asked[1].prompt:find("its own function", 1, true), asked[1].prompt)
    vim.cmd("Flemma trust")
    -- A trusted buffer function may approve outside the project too.
    local outside = helpers.tmpdir() .. "/f.txt"
    assert.equals(
      "approve",
      require("flemma.tools.approval").resolve("write", { path = outside, content = "x" }, { bufnr = buf })
    )
  end)

  it("lets a frontmatter narrow the policy without asking", function()
    answer(1)
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "$readonly" }' })
    vim.api.nvim_buf_set_lines(buf, -3, -2, false, {
      vim.json.encode({ command = "touch " .. dir .. "/marker", label = vim.NIL, timeout = vim.NIL }),
    })
    local approval = require("flemma.tools.approval")
    assert.equals("require_approval", approval.resolve("write", { path = "x.txt", content = "" }, { bufnr = buf }))
    assert.equals("approve", approval.resolve("read", { path = "x.txt" }, { bufnr = buf }))
    press("<C-]>")
    assert.equals(0, #asked)
    assert.is_nil(trust.state(buf))
    -- An untrusted list keeps its narrowing while its widening is ignored.
    buf = chat({ 'flemma.opt.tools.auto_approve = { "$readonly", "bash" }' }, "two.chat")
    trust.set(buf, "denied")
    assert.equals("require_approval", approval.resolve("write", { path = "x.txt", content = "" }, { bufnr = buf }))
    assert.equals("approve", approval.resolve("read", { path = "x.txt" }, { bufnr = buf }))
    assert.equals("require_approval", approval.resolve("bash", { command = "true" }, { bufnr = buf }))
  end)

  it("lets a global deny win over a trusted frontmatter", function()
    require("flemma").setup({
      tools = {
        autopilot = { enabled = false },
        presets = { ["$no-bash"] = { deny = { "bash" } } },
        auto_approve = { "$default", "$no-bash" },
      },
    })
    answer(1)
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    trust.set(buf, "trusted")
    press("<C-]>")
    helpers.wait_for(function()
      return text(buf):find("`toolu_01` (error)", 1, true) ~= nil
    end, 3000, "no denial was written:\n" .. text(buf))
    assert.truthy(text(buf):find("denied by the approval policy", 1, true))
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"), "bash ran")
    -- A deny of a user resolver below the frontmatter's priority wins as well.
    require("flemma").setup({ tools = { autopilot = { enabled = false } } })
    require("flemma.tools.approval").register("spec:no-bash", {
      resolve = function(name)
        return name == "bash" and "deny" or nil
      end,
    })
    local decision = require("flemma.tools.approval").resolve("bash", { command = "true" }, { bufnr = buf })
    require("flemma.tools.approval").unregister("spec:no-bash")
    assert.equals("deny", decision)
  end)

  it(":Flemma untrust and :Flemma trust answer without a prompt", function()
    answer(1)
    local buf = chat({ 'flemma.opt.tools.auto_approve = { "bash" }' })
    vim.cmd("Flemma untrust")
    press("<C-]>")
    settle()
    assert.equals(0, #asked)
    assert.is_nil(vim.uv.fs_stat(dir .. "/marker"))
    assert.equals("denied", trust.state(buf))
    vim.cmd("Flemma trust")
    assert.equals("trusted", trust.state(buf))
    local l = vim.api.nvim_buf_line_count(buf)
    vim.api.nvim_win_set_cursor(0, { l, 0 })
    vim.cmd("Flemma tool:approve") -- the pending placeholder from before
    press("<C-]>")
    helpers.wait_for(function()
      return vim.uv.fs_stat(dir .. "/marker") ~= nil
    end, 5000, "bash did not run")
    assert.same({ "trust" }, vim.fn.getcompletion("Flemma trus", "cmdline"))
    assert.same({ "untrust" }, vim.fn.getcompletion("Flemma untr", "cmdline"))
  end)

  it("remembers the answer in a new Neovim, until the frontmatter is edited", function()
    local file = dir .. "/persist.chat"
    vim.fn.writefile(chat_lines({ 'flemma.opt.tools.auto_approve = { "bash" }' }, dir .. "/marker"), file)
    -- In a child Neovim: each run presses <C-]> and records whether it was asked.
    local function child(choice, edit_frontmatter)
      local out = helpers.tmpdir() .. "/out"
      local res = helpers.run_nvim({
        rtp = helpers.root,
        env = { XDG_STATE_HOME = state },
        lua = ([=[
          require("flemma").setup({ tools = { autopilot = { enabled = false } } })
          local asked = 0
          vim.ui.select = function(items, _, on_choice)
            asked = asked + 1
            on_choice(items[%d])
          end
          vim.cmd("edit " .. vim.fn.fnameescape(%q))
          if %s then
            vim.api.nvim_buf_set_lines(0, 1, 1, false, { "-- edited" })
          end
          require("flemma.cycle").advance(0)
          vim.wait(3000, function() return vim.uv.fs_stat(%q) ~= nil end, 20)
          vim.fn.writefile({ tostring(asked), tostring(vim.uv.fs_stat(%q) ~= nil) }, %q)
        ]=]):format(choice, file, tostring(edit_frontmatter), dir .. "/marker", dir .. "/marker", out),
      })
      assert.equals(0, res.code, res.stderr)
      local lines = vim.fn.readfile(out)
      os.remove(dir .. "/marker")
      return { asked = tonumber(lines[1]), ran = lines[2] == "true" }
    end
    assert.same({ asked = 1, ran = true }, child(1, false)) -- asked, trusted
    assert.same({ asked = 0, ran = true }, child(2, false)) -- remembered
    assert.same({ asked = 1, ran = false }, child(2, true)) -- edited: asked again, declined
  end)
end)
