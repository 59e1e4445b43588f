-- How Flemma is found and loaded by plugin managers, and what a chat opened before the
-- native library is built says. Each case runs a child Neovim.
local helpers = require("spec.support.helpers")

-- Runs a child `nvim --headless --clean <args>` with the Lua; returns what it wrote with out().
local function child(args, lua)
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
    local text = child({
      "--clean",
      "--cmd", "augroup filetypedetect",
      "--cmd", "source " .. vim.fn.fnameescape(helpers.root .. "/ftdetect/chat.lua"),
      "--cmd", "augroup END",
    }, ([[
      vim.cmd.edit(%q)
      out("filetype=" .. vim.bo.filetype)
      out("loaded=" .. tostring(vim.g.loaded_flemma))
    ]]):format(chat))
    assert.matches("filetype=chat\n", text, 1, true)
    assert.matches("loaded=nil\n", text, 1, true)
  end)

  it("works for a package in start/ and for one added later with :packadd", function()
    local pack = helpers.tmpdir()
    vim.fn.mkdir(pack .. "/pack/t/start", "p")
    vim.fn.mkdir(pack .. "/pack/u/opt", "p")
    vim.uv.fs_symlink(helpers.root, pack .. "/pack/t/start/flemma")
    local chat = helpers.tmpdir() .. "/notes.chat"
    local text = child({ "--clean", "--cmd", "set packpath^=" .. vim.fn.fnameescape(pack) }, ([[
      vim.cmd.edit(%q)
      out("filetype=" .. vim.bo.filetype)
      out("mapped=" .. tostring(vim.fn.maparg("<C-]>", "n") ~= ""))
    ]]):format(chat))
    assert.matches("filetype=chat\nmapped=true\n", text, 1, true)

    vim.fn.delete(pack .. "/pack/t/start/flemma")
    vim.uv.fs_symlink(helpers.root, pack .. "/pack/u/opt/flemma")
    text = child({ "--clean", "--cmd", "set packpath^=" .. vim.fn.fnameescape(pack) }, ([[
      vim.cmd.edit(%q)
      out("before=" .. vim.bo.filetype)
      vim.cmd("packadd flemma")
      vim.cmd.edit(%q)
      out("after=" .. vim.bo.filetype)
    ]]):format(chat, chat .. "2.chat"))
    assert.matches("before=\nafter=chat\n", text, 1, true)
  end)
end)

describe("a chat opened before the native library is built", function()
  after_each(helpers.cleanup)

  it("says once what to run, not an error per keystroke", function()
    local dir = helpers.tmpdir()
    vim.fn.system({ "cp", "-r", helpers.root .. "/lua", helpers.root .. "/plugin", helpers.root .. "/ftplugin",
      helpers.root .. "/ftdetect", dir })
    local chat = helpers.tmpdir() .. "/notes.chat"
    helpers.write_file(chat, "@You:\nhello\n")
    local text = child({ "--clean", "--cmd", "set rtp^=" .. vim.fn.fnameescape(dir) }, ([[
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
    ]]):format(chat))
    assert.matches("errmsg=\ncount=1\n", text, 1, true)
    assert.matches(
      "4:(flemma) native library not found at " .. dir .. "/build/libflemma_core.so: build it with `make` in " .. dir,
      text, 1, true)
  end)
end)
