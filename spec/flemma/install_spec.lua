-- How Flemma is found and loaded by plugin managers, and what a chat opened before the
-- native library is built says. Each case runs a child Neovim.
local helpers = require("spec.support.helpers")

-- Runs a child `nvim --headless --clean <args>` with the Lua; returns what it wrote with out().
local function run_child(args, lua)
  local out = helpers.tmpdir() .. "/out.txt"
  local prelude = ("local function out(s) local f = io.open(%q, 'a'); f:write(s, '\\n'); f:close() end\n"):format(out)
  -- run_nvim fails the test when the child crashes, exits non-zero or raises.
  local res = helpers.run_nvim({ args = args, lua = prelude .. lua })
  return helpers.read_file(out) or "", res
end

describe("filetype detection", function()
  after_each(helpers.cleanup)

  it("comes from ftdetect/ alone, before the plugin is loaded (how lazy.nvim loads on ft)", function()
    -- lazy.nvim sources ftdetect/ of a plugin lazy-loaded on `ft` at startup, inside
    -- the filetypedetect group, and loads plugin/ only on the FileType event.
    local chat = helpers.tmpdir() .. "/notes.chat"
    local text = run_child(
      {
        "--clean",
        "--cmd",
        "augroup filetypedetect",
        "--cmd",
        "source " .. vim.fn.fnameescape(helpers.root .. "/ftdetect/chat.lua"),
        "--cmd",
        "augroup END",
      },
      ([[
      vim.cmd.edit(%q)
      out("filetype=" .. vim.bo.filetype)
      out("loaded=" .. tostring(vim.g.loaded_flemma))
    ]]):format(chat)
    )
    assert.matches("filetype=chat\n", text, 1, true)
    assert.matches("loaded=nil\n", text, 1, true)
  end)

  it("works for a package in start/ and for one added later with :packadd", function()
    local pack = helpers.tmpdir()
    vim.fn.mkdir(pack .. "/pack/t/start", "p")
    vim.fn.mkdir(pack .. "/pack/u/opt", "p")
    vim.uv.fs_symlink(helpers.root, pack .. "/pack/t/start/flemma")
    local chat = helpers.tmpdir() .. "/notes.chat"
    local text = run_child(
      { "--clean", "--cmd", "set packpath^=" .. vim.fn.fnameescape(pack) },
      ([[
      vim.cmd.edit(%q)
      out("filetype=" .. vim.bo.filetype)
      out("mapped=" .. tostring(vim.fn.maparg("<C-]>", "n") ~= ""))
    ]]):format(chat)
    )
    assert.matches("filetype=chat\nmapped=true\n", text, 1, true)

    vim.fn.delete(pack .. "/pack/t/start/flemma")
    vim.uv.fs_symlink(helpers.root, pack .. "/pack/u/opt/flemma")
    text = run_child(
      { "--clean", "--cmd", "set packpath^=" .. vim.fn.fnameescape(pack) },
      ([[
      vim.cmd.edit(%q)
      out("before=" .. vim.bo.filetype)
      vim.cmd("packadd flemma")
      vim.cmd.edit(%q)
      out("after=" .. vim.bo.filetype)
    ]]):format(chat, chat .. "2.chat")
    )
    assert.matches("before=\nafter=chat\n", text, 1, true)
  end)
end)

-- A copy of the plugin as a user's clone has it: every file git tracks (and new ones
-- not ignored), no build/ and no .deps/.
local function plugin_copy()
  local dir = helpers.tmpdir() .. "/flemma"
  vim.fn.mkdir(dir, "p")
  local ls = vim.system({ "git", "-C", helpers.root, "ls-files", "-co", "--exclude-standard", "-z" }):wait()
  assert(ls.code == 0, ls.stderr)
  local list = helpers.tmpdir() .. "/files"
  helpers.write_file(list, ls.stdout)
  local tar = ("tar -C %s --null -T %s -cf - | tar -C %s -xf -"):format(
    vim.fn.shellescape(helpers.root),
    vim.fn.shellescape(list),
    vim.fn.shellescape(dir)
  )
  local res = vim.system({ "bash", "-c", "set -o pipefail; " .. tar }):wait()
  assert(res.code == 0, res.stderr)
  return dir
end

-- The copy made a git repository (what a plugin manager clones from).
local function plugin_repo(dir)
  local res = vim
    .system({ "bash", "-c", "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm v1" }, { cwd = dir })
    :wait()
  assert(res.code == 0, res.stderr)
  return dir
end

-- A build that fails: CMake stops at configure time (a real make, failing fast).
local function break_build(dir)
  local f = assert(io.open(dir .. "/CMakeLists.txt", "a"))
  f:write('\nmessage(FATAL_ERROR "broken on purpose")\n')
  f:close()
end

-- The Lua block of README.md's install section that follows `label`, as written.
local function readme_block(label)
  local text = helpers.read_file(helpers.root .. "/README.md")
  local install = assert(text:match("\n## Install\n(.-)\n## "), "README.md has no install section")
  local at = assert(install:find(label, 1, true), "README's install section has no " .. label)
  local block = assert(install:match("```lua\n(.-)```", at), "no lua block after " .. label)
  return block
end

-- A tmux Neovim (80x24, as a small terminal) with its own HOME and XDG directories.
local sessions = 0
local function tmux_user(opts)
  local home = opts.home or helpers.tmpdir()
  sessions = sessions + 1
  local env = ("HOME=%s XDG_CONFIG_HOME=%s/config XDG_DATA_HOME=%s/data XDG_STATE_HOME=%s/state"):format(
    home,
    home,
    home,
    home
  )
  local child = helpers.tmux_nvim({
    socket = ("flemma-install-%d-%d"):format(vim.fn.getpid(), sessions),
    width = 80,
    height = 24,
    command = function(nvim)
      local words = vim.tbl_map(vim.fn.shellescape, opts.args)
      return ("cd %s && %s %s %s"):format(
        vim.fn.shellescape(opts.cwd or home),
        env,
        table.concat(vim.tbl_map(vim.fn.shellescape, nvim), " "),
        table.concat(words, " ")
      )
    end,
  })
  return child, home
end

local function keys(child, ...)
  child.tmux(vim.list_extend({ "send-keys", "-t", "flemma" }, { ... }))
end

-- The screen holds none of what an error in an autocommand or a long message brings.
local function assert_quiet(screen)
  assert.is_nil(screen:find("Press ENTER", 1, true), screen)
  assert.is_nil(screen:find("Error", 1, true), screen)
  assert.is_nil(screen:find("stack traceback", 1, true), screen)
end

local NOT_BUILT = "(flemma) the native library is not built yet: run :Flemma build"
local BUILD_TIMEOUT = 15 * 60 * 1000 -- a whole clean build, on a loaded 2-core machine

describe(":Flemma build", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    helpers.cleanup()
  end)

  it("says once, in one line, what to run; builds in the background with progress and loads the library", function()
    local dir = plugin_copy()
    local work = helpers.tmpdir()
    vim.fn.writefile(vim.fn.readfile(helpers.root .. "/spec/fixtures/chat/basic.chat"), work .. "/basic.chat")
    child = tmux_user({
      cwd = work,
      args = { "--clean", "--cmd", "set rtp^=" .. dir, "--cmd", "lua require('flemma').setup({})", "basic.chat" },
    })
    local s = child.wait_screen(NOT_BUILT, 20000)
    assert_quiet(s)
    assert.is_nil(s:find("─", 1, true), "rulers before the library is built?\n" .. s)
    -- Once: moving around and sending does not say it again.
    keys(child, "j", "k", "G")
    vim.wait(300)
    keys(child, ":Flemma build", "Enter")
    child.wait_screen("(flemma) make: ", 20000)
    -- Neovim answers while make runs: the library is not there yet.
    -- (In the winbar, which the build's progress messages do not overwrite.)
    keys(child, ":setlocal winbar=typing\\ while\\ it\\ builds", "Enter")
    child.wait_screen("typing while it builds", 120000)
    assert.is_nil(vim.uv.fs_stat(dir .. "/build/libflemma_core.so"), "the build was over before Neovim answered")
    -- The progress is make's last line: a file being compiled.
    child.wait_screen("(flemma) make: [flemma] [", BUILD_TIMEOUT)
    s = child.wait_screen("(flemma) native library built and loaded", BUILD_TIMEOUT)
    assert_quiet(s)
    assert.is_not_nil(vim.uv.fs_stat(dir .. "/build/libflemma_core.so"))
    -- The chat already open is decorated now (rulers between messages), no restart.
    helpers.wait_for(function()
      s = child.screen()
      return s:find("─", 1, true) ~= nil
    end, 10000, "no ruler after the build:\n" .. s)
    assert.is_nil(s:find(NOT_BUILT, 1, true), s)
  end)

  it("says in one line that the build failed, with where its output is", function()
    local dir = plugin_copy()
    break_build(dir)
    local state = helpers.tmpdir()
    local out = helpers.tmpdir() .. "/out.txt"
    helpers.run_nvim({
      args = { "--cmd", "set rtp^=" .. vim.fn.fnameescape(dir) },
      env = { XDG_STATE_HOME = state },
      timeout = 120000,
      lua = ([[
        local seen = {}
        vim.notify = function(msg, level) seen[#seen + 1] = (level or 0) .. ":" .. msg end
        require("flemma").setup({})
        vim.cmd("Flemma build")
        local done = vim.wait(110000, function()
          for _, m in ipairs(seen) do
            if m:find("build", 1, true) then return true end
          end
        end, 50)
        local f = io.open(%q, "w")
        f:write(table.concat(seen, "\n"), "\n", tostring(done), "\n")
        f:close()
      ]]):format(out),
    })
    local text = helpers.read_file(out)
    local log = state .. "/nvim/flemma-build.log"
    assert.matches("4:(flemma) build failed (make exited with 2): the output is in " .. log .. "\n", text, 1, true)
    assert.matches("broken on purpose", helpers.read_file(log) or "", 1, true)
  end)
end)

describe("README's install section, run as written", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop)
      child = nil
    end
    helpers.cleanup()
  end)

  -- vim.pack: the snippet as an init.lua, the clone a file:// git source.
  local function pack_init(dir)
    local init = helpers.tmpdir() .. "/init.lua"
    helpers.write_file(init, (readme_block("`vim.pack`"):gsub("/path/to/flemma", dir)))
    return init
  end

  local function pack_start(init, cwd)
    local c, home = tmux_user({ cwd = cwd, args = { "-u", init } })
    -- vim.pack asks before it installs: the user says yes.
    c.wait_screen("Proceed?", 30000)
    keys(c, "y")
    return c, home
  end

  it("vim.pack: make runs in the background after the install; the next start has the library", function()
    if vim.fn.has("nvim-0.12") == 0 then
      pending("vim.pack needs Neovim 0.12")
      return
    end
    local dir = plugin_repo(plugin_copy())
    local init = pack_init(dir)
    local work = helpers.tmpdir()
    vim.fn.writefile(vim.fn.readfile(helpers.root .. "/spec/fixtures/chat/basic.chat"), work .. "/basic.chat")
    local home
    child, home = pack_start(init, work)
    local installed = home .. "/data/nvim/site/pack/core/opt/flemma"
    helpers.wait_for(function()
      return vim.uv.fs_stat(installed .. "/build") ~= nil
    end, 60000, "make never started in " .. installed)
    -- Neovim answers while make runs.
    keys(child, ":echo 'typing while it builds'", "Enter")
    local s = child.wait_screen("typing while it builds", 120000)
    assert.is_nil(vim.uv.fs_stat(installed .. "/build/libflemma_core.so"), "the build was over before Neovim answered")
    assert_quiet(s)
    helpers.wait_for(function()
      return vim.uv.fs_stat(installed .. "/build/libflemma_core.so") ~= nil
    end, BUILD_TIMEOUT, "make never built the library in " .. installed)
    -- make is done once the library is linked and its last line printed.
    vim.wait(2000)
    s = child.screen()
    assert.is_nil(s:find("make failed", 1, true), s)
    local c = child
    child = nil
    c.stop()
    -- The next start: a chat is decorated at once.
    child = tmux_user({ home = home, cwd = work, args = { "-u", init, "basic.chat" } })
    helpers.wait_for(function()
      s = child.screen()
      return s:find("─", 1, true) ~= nil
    end, 20000, "no ruler in the chat:\n" .. s)
    assert_quiet(s)
  end)

  it("vim.pack: a failed make says so, with its error", function()
    if vim.fn.has("nvim-0.12") == 0 then
      pending("vim.pack needs Neovim 0.12")
      return
    end
    local dir = plugin_copy()
    break_build(dir)
    plugin_repo(dir)
    child = pack_start(pack_init(dir))
    local s = child.wait_screen("flemma: make failed in ", 120000)
    assert.matches("CMake Error", s, 1, true)
  end)

  it("lazy.nvim: the dir spec, a chat says in one line to run :Flemma build", function()
    local lazy = os.getenv("FLEMMA_LAZY_NVIM")
    if not lazy or vim.uv.fs_stat(lazy .. "/lua/lazy/init.lua") == nil then
      pending("lazy.nvim is not installed here: set FLEMMA_LAZY_NVIM to a checkout of it")
      return
    end
    local dir = plugin_copy()
    local init = helpers.tmpdir() .. "/init.lua"
    helpers.write_file(
      init,
      ([[
vim.opt.rtp:prepend(%q)
require("lazy").setup({
%s
}, { install = { missing = false }, checker = { enabled = false }, change_detection = { enabled = false } })
]]):format(lazy, (readme_block("lazy.nvim:"):gsub("/path/to/flemma", dir)))
    )
    local work = helpers.tmpdir()
    vim.fn.writefile(vim.fn.readfile(helpers.root .. "/spec/fixtures/chat/basic.chat"), work .. "/basic.chat")
    child = tmux_user({ cwd = work, args = { "-u", init, "basic.chat" } })
    local s = child.wait_screen(NOT_BUILT, 20000)
    assert_quiet(s)
  end)
end)

describe("a chat opened before the native library is built", function()
  after_each(helpers.cleanup)

  it("says once what to run, not an error per keystroke", function()
    local dir = helpers.tmpdir()
    vim.fn.system({
      "cp",
      "-r",
      helpers.root .. "/lua",
      helpers.root .. "/plugin",
      helpers.root .. "/ftplugin",
      helpers.root .. "/ftdetect",
      dir,
    })
    local chat = helpers.tmpdir() .. "/notes.chat"
    helpers.write_file(chat, "@You:\nhello\n")
    local text = run_child(
      { "--clean", "--cmd", "set rtp^=" .. vim.fn.fnameescape(dir) },
      ([[
      local seen = {}
      vim.notify = function(msg, level) seen[#seen + 1] = (level or 0) .. ":" .. msg end
      require("flemma").setup({})
      vim.cmd.edit(%q)
      vim.wait(50)
      local keys = vim.api.nvim_replace_termcodes("ddu<C-]><C-]>xu<M-CR>", true, false, true)
      vim.api.nvim_feedkeys(keys, "mx", false)
      vim.cmd("doautocmd TextChanged")
      vim.wait(50)
      out("errmsg=" .. vim.v.errmsg)
      out("count=" .. #seen)
      for _, s in ipairs(seen) do out(s) end
    ]]):format(chat)
    )
    assert.matches("errmsg=\ncount=1\n", text, 1, true)
    assert.matches("3:" .. NOT_BUILT .. "\n", text, 1, true)
  end)
end)
