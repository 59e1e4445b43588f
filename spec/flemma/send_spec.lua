-- The send path (lua/flemma/send.lua): what a send does to the buffer besides sending.
local helpers = require("spec.support.helpers")
local send = require("flemma.cycle.send")

local function diagnostic_changes(buf, fn)
  local n = 0
  local id = vim.api.nvim_create_autocmd("DiagnosticChanged", {
    buffer = buf,
    callback = function()
      n = n + 1
    end,
  })
  fn()
  vim.api.nvim_del_autocmd(id)
  return n
end

describe("send.clear_problems", function()
  after_each(helpers.cleanup)

  -- Every DiagnosticChanged makes Neovim 0.12 update the screen at once (nvim__redraw
  -- from its statusline autocmd); a send must not cause one for nothing (issue 10).
  it("leaves a buffer without validation diagnostics alone: no DiagnosticChanged", function()
    local buf = helpers.buffer({ "@You:", "hi" })
    assert.equals(
      0,
      diagnostic_changes(buf, function()
        send.clear_problems(buf)
      end)
    )
  end)

  it("keeps the diagnostics of a failed send up to date with the text until it is fixed", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false } } })
    vim.notify = function() end
    local buf = helpers.buffer({
      "@You:",
      "list",
      "",
      "@Assistant:",
      "**Tool Use:** `bash` (`t1`)",
      "",
      "```json",
      '{"command": "ls"}',
      "```",
      "",
      "@You:",
      "**Tool Result:** `t1`",
      "",
      "```flemma:tool status=pending",
      "```",
    })
    assert.is_false(send.send(buf))
    local function shown()
      local out = {}
      for _, d in ipairs(vim.diagnostic.get(buf, { namespace = send.ns })) do
        out[#out + 1] = d.lnum + 1 .. " " .. d.message:match("^[^:]*")
      end
      table.sort(out)
      return table.concat(out, "|")
    end
    assert.truthy(shown():find("^12 tool result `t1` is still a pending placeholder"), shown())
    -- Two lines inserted above: the diagnostic follows its block.
    vim.api.nvim_buf_set_lines(buf, 1, 1, false, { "more", "text" })
    helpers.wait_for(function()
      return shown():find("^14 ") ~= nil
    end, 2000, "the diagnostic did not follow: " .. shown())
    -- The placeholder replaced by a real result: nothing left to show.
    vim.api.nvim_buf_set_lines(buf, 15, 17, false, { "```", "a.txt", "```" })
    helpers.wait_for(function()
      return shown() == ""
    end, 2000, "the diagnostic stayed: " .. shown())
    -- Later edits are not checked any more (no problems shown).
    vim.api.nvim_buf_set_lines(buf, 15, 16, false, { "```flemma:tool status=pending" })
    vim.wait(100)
    assert.equals("", shown())
  end)

  it("removes the validation diagnostics a failed send left", function()
    local buf = helpers.buffer({ "@You:", "hi" })
    send.show_problems(buf, { { line = 2, message = "broken" } })
    assert.equals(1, #vim.diagnostic.get(buf, { namespace = send.ns }))
    local n = diagnostic_changes(buf, function()
      send.clear_problems(buf)
    end)
    assert.equals(1, n)
    assert.equals(0, #vim.diagnostic.get(buf, { namespace = send.ns }))
  end)
end)

-- Issue 10 §1: two chats in turn, each running an auto-approved `read` with <C-]> and
-- ending in a send, then :qall!. Under `nvim -l` with 'lines' set, Neovim 0.12.4 died
-- with SIGSEGV: the send reset diagnostics it never set, Neovim answered the
-- DiagnosticChanged with a screen update, and that update (after the send's two-line
-- warning) cleared rows of a default grid still 24 rows tall. Both Neovims must exit 0.
describe("two chats each running a read, then :qall!", function()
  after_each(helpers.cleanup)

  for _, version in ipairs({ "0.10.4", "0.12.4" }) do
    it("exits 0 under `nvim -l` of Neovim " .. version, function()
      local dir = helpers.tmpdir()
      helpers.write_file(dir .. "/notes.txt", "alpha\n")
      local out = dir .. "/out.txt"
      local res = helpers.run_nvim({
        version = version,
        script = true,
        rtp = helpers.root,
        cwd = dir,
        timeout = 30000,
        lua = ([=[
          vim.o.columns = 120
          vim.o.lines = 40
          vim.g.flemma_library_path = %q
          vim.cmd("filetype plugin on")
          require("flemma").setup({})
          local dir, out = %q, %q
          local report = {}
          for i = 1, 2 do
            local path = dir .. "/t" .. i .. ".chat"
            local f = assert(io.open(path, "w"))
            f:write(table.concat({ "@You:", "go", "", "@Assistant:", "ok", "",
              "**Tool Use:** `read` (`toolu_r" .. i .. "`)", "", "```json",
              vim.json.encode({ path = dir .. "/notes.txt" }), "```", "" }, "\n"))
            f:close()
            vim.cmd("silent! %%bwipeout!")
            vim.cmd.edit(path)
            local buf = vim.api.nvim_get_current_buf()
            vim.api.nvim_feedkeys(vim.keycode("<C-]>"), "mx", false)
            local ran = vim.wait(5000, function()
              return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n"):find("alpha", 1, true) ~= nil
            end, 10)
            vim.wait(300) -- the scheduled send, its warning and its diagnostics
            report[#report + 1] = "chat " .. i .. " read " .. tostring(ran)
          end
          report[#report + 1] = "quitting"
          vim.fn.writefile(report, out)
          vim.cmd("qall!")
        ]=]):format(require("flemma.core.native").library_path(), dir, out),
      })
      assert.equals(0, res.code)
      assert.equals("chat 1 read true\nchat 2 read true\nquitting\n", helpers.read_file(out))
    end)
  end
end)
