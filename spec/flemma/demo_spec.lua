-- `make demo` as a newcomer runs it: in a real terminal (tmux), keys typed, the screen
-- read back. HOME is a temporary directory, so the tour's write "outside the project"
-- would land there if it ran.
local helpers = require("spec.support.helpers")

local function tmux(socket, args)
  local cmd = { "tmux", "-L", socket }
  vim.list_extend(cmd, args)
  return vim.system(cmd, { text = true }):wait(5000)
end

local function screen(socket)
  return tmux(socket, { "capture-pane", "-p", "-t", "demo" }).stdout or ""
end

local function wait_screen(socket, needle, timeout)
  local last = ""
  local ok = vim.wait(timeout or 15000, function()
    last = screen(socket)
    return last:find(needle, 1, true) ~= nil
  end, 50)
  assert(ok, "screen never showed: " .. needle .. "\n--- screen:\n" .. last)
  return last
end

describe("make demo", function()
  local socket
  after_each(function()
    if socket then
      tmux(socket, { "kill-server" })
    end
    helpers.cleanup()
  end)

  it("walks through the cycle offline: read runs, bash waits, then runs once approved", function()
    local home = helpers.tmpdir()
    local dir = helpers.tmpdir() .. "/tour"
    socket = "flemma-demo-" .. vim.fn.getpid()
    local version = vim.v.progpath:match("/%.deps/nvim%-([%d%.]+)/") or "0.12.4"
    local cmd = ("cd %s && HOME=%s FLEMMA_DEMO_DIR=%s FLEMMA_DEMO_NVIM=%s make --no-print-directory demo; echo demo-exit=$?; sleep 60"):format(
      vim.fn.shellescape(helpers.root),
      vim.fn.shellescape(home),
      vim.fn.shellescape(dir),
      vim.fn.shellescape(helpers.root .. "/scripts/nvim " .. version)
    )
    local res = tmux(socket, { "new-session", "-d", "-s", "demo", "-x", "100", "-y", "45", cmd })
    assert.equals(0, res.code, res.stderr)
    wait_screen(socket, "Show me how tools work in Flemma.", 60000)

    tmux(socket, { "send-keys", "-t", "demo", "C-]" })
    local s = wait_screen(socket, "bash: $ ls && echo tour-bash-done # list the tour folder")
    local text = helpers.read_file(dir .. "/tour.chat") -- unsaved: the buffer is the truth
    assert.is_not_nil(text)
    tmux(socket, { "send-keys", "-t", "demo", ":w", "Enter" })
    helpers.wait_for(function()
      local t = helpers.read_file(dir .. "/tour.chat") or ""
      return t:find("Every tool call goes through one key", 1, true) ~= nil
    end, 10000, "the read result never reached the file")
    local saved = helpers.read_file(dir .. "/tour.chat")
    assert.matches("```flemma:tool status=pending\n```", saved:match("toolu_tour_write`\n\n(.-\n```)") or "", 1, true)
    assert.truthy(s:find("status=pending", 1, true), s)

    -- The cursor sits on the pending bash block: approve it and press Ctrl-] again.
    tmux(socket, { "send-keys", "-t", "demo", ":Flemma tool:approve", "Enter" })
    tmux(socket, { "send-keys", "-t", "demo", "C-]" })
    s = wait_screen(socket, "tour-bash-done\n", 15000)
    assert.truthy(s:find("notes.txt", 1, true), s)
    -- The write outside the project never ran.
    assert.is_nil(vim.uv.fs_stat(home .. "/flemma-tour.txt"))
  end)
end)
