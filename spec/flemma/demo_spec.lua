-- `make demo` as a newcomer runs it: in a real terminal (tmux), keys typed, the screen
-- read back. HOME is a temporary directory, so the tour's write "outside the project"
-- would land there if it ran.
local helpers = require("spec.support.helpers")

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
    local home = helpers.tmpdir()
    local dir = helpers.tmpdir() .. "/tour"
    child = helpers.tmux_nvim({
      socket = "flemma-demo-" .. vim.fn.getpid(),
      width = 100,
      height = 45,
      command = function(nvim) -- make demo word-splits FLEMMA_DEMO_NVIM
        return ("cd %s && HOME=%s FLEMMA_DEMO_DIR=%s FLEMMA_DEMO_NVIM=%s make --no-print-directory demo"):format(
          vim.fn.shellescape(helpers.root),
          vim.fn.shellescape(home),
          vim.fn.shellescape(dir),
          vim.fn.shellescape(table.concat(nvim, " "))
        )
      end,
    })
    child.wait_screen("Show me how tools work in Flemma.", 60000)

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
    s = child.wait_screen("tour-bash-done\n", 15000)
    -- The line shows in the running placeholder's progress first: wait for the result.
    helpers.wait_for(function()
      s = child.screen()
      return s:find("running bash", 1, true) == nil
    end, 15000, "the bash result never replaced the running placeholder:\n" .. s)
    assert.truthy(s:find("notes.txt", 1, true), s)
    -- The write outside the project never ran.
    assert.is_nil(vim.uv.fs_stat(home .. "/flemma-tour.txt"))
    -- Quitting is part of the tour: Neovim (and make demo) must exit 0.
    local c = child
    child = nil
    c.stop()
  end)
end)
