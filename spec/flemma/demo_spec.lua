-- `make demo` as a newcomer runs it: in a real terminal (tmux), keys typed, the screen
-- read back. HOME is a temporary directory, so the tour's write "outside the project"
-- would land there if it ran.
local helpers = require("spec.support.helpers")

-- A clean clone as a newcomer has it: every file git tracks (and new ones not
-- ignored), no build/ and no .deps/.
local function clean_clone()
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

describe("make demo", function()
  local child
  after_each(function()
    if child then
      pcall(child.stop) -- a test that failed early: only the tmux server matters now
      child = nil
    end
    helpers.cleanup()
  end)

  it("walks through the cycle offline: read runs, bash waits, then runs once approved", function()
    -- From a clean clone: make builds the library (progress, no warning, nothing of the
    -- system's but CMake and the compiler), and make demo runs no `make deps` when a
    -- Neovim serves (FLEMMA_DEMO_NVIM stands for the system's).
    -- The clean build is the same under both Neovims: it runs once, under 0.12.
    if vim.fn.has("nvim-0.12") == 0 then
      pending("the clean-clone make demo runs under Neovim 0.12")
      return
    end
    local root = clean_clone()
    -- The build of a clean clone first, as on a system without Debian's packages:
    -- scripts/bare.sh hides the system's nlohmann/json, doctest and libuv (as on
    -- Fedora, Arch or macOS without them). One progress line per file, no warning.
    local build = vim
      .system({ "bash", "scripts/bare.sh", "make", "--no-print-directory" }, { cwd = root, text = true })
      :wait(15 * 60 * 1000)
    local printed = (build.stdout or "") .. (build.stderr or "")
    assert.equals(0, build.code, printed)
    assert.matches("[flemma] configuring build/ with CMake\n", printed, 1, true)
    assert.matches("%[flemma%] %[%s*%d+%%%] fs%-poll%.c\n", printed)
    assert.matches("%[flemma%] %[%s*%d+%%%] isolate%.cpp\n", printed)
    assert.matches("[flemma] [100%] linking libflemma_core.so\n", printed, 1, true)
    assert.is_nil(printed:find("warning", 1, true), printed)
    -- What the compiler read: third_party/, never a system copy; and no test binary.
    local deps = vim
      .system({ "bash", "-c", "cat $(find build -name '*.d') | tr ' ' '\\n' | sort -u" }, { cwd = root })
      :wait()
    assert.matches("third_party/nlohmann/include/nlohmann/json.hpp", deps.stdout, 1, true)
    assert.matches("third_party/libuv/include/uv.h", deps.stdout, 1, true)
    assert.is_nil(deps.stdout:find("/usr/include/nlohmann", 1, true))
    assert.is_nil(deps.stdout:find("/usr/include/uv", 1, true))
    assert.is_nil(vim.uv.fs_stat(root .. "/build/flemma_tests"), "the plain build built the doctest suite")
    local home = helpers.tmpdir()
    local dir = helpers.tmpdir() .. "/tour"
    local typescript = helpers.tmpdir() .. "/terminal.log"
    child = helpers.tmux_nvim({
      socket = "flemma-demo-" .. vim.fn.getpid(),
      width = 100,
      height = 45,
      command = function(nvim) -- make demo word-splits FLEMMA_DEMO_NVIM
        local line = ("cd %s && HOME=%s FLEMMA_DEMO_DIR=%s FLEMMA_DEMO_NVIM=%s make --no-print-directory demo"):format(
          vim.fn.shellescape(root),
          vim.fn.shellescape(home),
          vim.fn.shellescape(dir),
          vim.fn.shellescape(table.concat(nvim, " "))
        )
        -- script(1) keeps the terminal and records all that make demo printed.
        return ("script -q -e -c %s %s"):format(vim.fn.shellescape(line), vim.fn.shellescape(typescript))
      end,
    })
    child.wait_screen("Show me how tools work in Flemma.", 15 * 60 * 1000)
    printed = helpers.read_file(typescript) or ""
    for _, line in ipairs({
      "[demo] Neovim: NVIM v",
      "[demo] building the library (make)",
      "[flemma] built build/libflemma_core.so",
      "[demo] starting the tour in " .. dir,
    }) do
      assert.matches(line, printed, 1, true)
    end
    assert.is_nil(printed:find("warning", 1, true), printed)
    assert.is_nil(printed:find("[deps]", 1, true), printed)
    assert.is_nil(vim.uv.fs_stat(root .. "/.deps"), "make demo ran make deps")

    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    local s = child.wait_screen("bash: $ ls && echo tour-bash-done # list the tour folder", 15000)
    local text = helpers.read_file(dir .. "/tour.chat") -- unsaved: the buffer is the truth
    assert.is_not_nil(text)
    child.tmux({ "send-keys", "-t", "flemma", ":w", "Enter" })
    helpers.wait_for(function()
      local t = helpers.read_file(dir .. "/tour.chat") or ""
      return t:find("Every tool call goes through one key", 1, true) ~= nil
    end, 10000, "the read result never reached the file")
    local saved = helpers.read_file(dir .. "/tour.chat")
    assert.matches("```flemma:tool status=pending\n```", saved:match("toolu_tour_write`\n\n(.-\n```)") or "", 1, true)
    assert.truthy(s:find("status=pending", 1, true), s)

    -- The cursor sits on the pending bash block: approve it and press Ctrl-] again.
    child.tmux({ "send-keys", "-t", "flemma", ":Flemma tool:approve", "Enter" })
    child.tmux({ "send-keys", "-t", "flemma", "C-]" })
    -- The line shows in the running placeholder's progress first, then in the result,
    -- which is folded once it is written (ui.fold_completed): wait for either.
    helpers.wait_for(function()
      s = child.screen()
      return s:find("tour-bash-done\n", 1, true) ~= nil or s:find("Tool Result: bash (toolu_tour_bash)", 1, true) ~= nil
    end, 15000, "the bash call never ran:\n" .. tostring(s))
    helpers.wait_for(function()
      s = child.screen()
      return s:find("running bash", 1, true) == nil
    end, 15000, "the bash result never replaced the running placeholder:\n" .. s)
    assert.truthy(s:find("notes.txt", 1, true), s)
    child.tmux({ "send-keys", "-t", "flemma", ":w", "Enter" })
    helpers.wait_for(function()
      return (helpers.read_file(dir .. "/tour.chat") or ""):find("\ntour%-bash%-done\n") ~= nil
    end, 10000, "the bash result never reached the file")
    -- The write outside the project never ran.
    assert.is_nil(vim.uv.fs_stat(home .. "/flemma-tour.txt"))
    -- Quitting is part of the tour: Neovim (and make demo) must exit 0.
    local c = child
    child = nil
    c.stop()
  end)

  it("fits an 80-column terminal, and its last line's :help flemma opens the help", function()
    local text = helpers.read_file(helpers.root .. "/demo/tour.chat")
    local long = {}
    for n, line in ipairs(vim.split(text, "\n")) do
      -- The window's sign column takes two of the 80 columns; leave two more.
      if vim.fn.strdisplaywidth(line) > 76 then
        long[#long + 1] = ("%d: %s"):format(n, line)
      end
    end
    assert.same({}, long, "tour lines wider than 76 columns")
    assert.matches("`:help flemma` has the rest.\n\n%*%*Tool Use:%*%*", text)

    local home = helpers.tmpdir()
    local dir = helpers.tmpdir() .. "/tour"
    child = helpers.tmux_nvim({
      socket = "flemma-demo80-" .. vim.fn.getpid(),
      width = 80,
      height = 24,
      command = function(nvim)
        return ("cd %s && HOME=%s FLEMMA_DEMO_DIR=%s FLEMMA_DEMO_NVIM=%s make --no-print-directory demo"):format(
          vim.fn.shellescape(helpers.root),
          vim.fn.shellescape(home),
          vim.fn.shellescape(dir),
          vim.fn.shellescape(table.concat(nvim, " "))
        )
      end,
    })
    child.wait_screen("Show me how tools work in Flemma.", 120000)
    -- Each line of the welcome shows whole on one row (no wrap) on the first screen.
    local s = child.wait_screen("Welcome to Flemma. This file is the whole conversation: edit it like any\n", 10000)
    assert.matches("allows it, and one key moves everything forward: press Ctrl-] in normal mode\n", s, 1, true)
    child.tmux({ "send-keys", "-t", "flemma", ":help flemma", "Enter" })
    s = child.wait_screen("flemma.txt", 10000)
    assert.is_nil(s:find("E149", 1, true), s)
    -- It opens at the top of the help (the *flemma* tag), not at a near match.
    child.tmux({ "send-keys", "-t", "flemma", ":lua print('at: ' .. vim.api.nvim_get_current_line())", "Enter" })
    child.wait_screen("at: 1. INTRODUCTION", 10000)
    local c = child
    child = nil
    c.stop()
  end)
end)
