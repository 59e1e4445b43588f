-- Issue 24 §16: `:Flemma preview` and `gf` showed a stack trace when Neovim has no
-- markdown parser (Debian's build). A child Neovim whose runtimepath lacks its parser
-- directory: both fall back to Vim's markdown syntax without an error.
local helpers = require("spec.support.helpers")

describe("without the markdown tree-sitter parser", function()
  after_each(helpers.cleanup)

  for _, version in ipairs({ "0.10.4", "0.12.4" }) do
    it(":Flemma preview and gf work with Vim's syntax under Neovim " .. version, function()
      local dir = helpers.tmpdir()
      helpers.write_file(dir .. "/notes.md", "# Notes\n\nhello\n")
      helpers.write_file(dir .. "/p.chat", "@You:\nRead @./notes.md please.\n")
      local out = dir .. "/out.txt"
      helpers.run_nvim({
        version = version,
        rtp = helpers.root,
        cwd = dir,
        lua = ([=[
          for _, p in ipairs(vim.api.nvim_list_runtime_paths()) do
            if p:match("/lib/nvim$") then
              vim.opt.rtp:remove(p)
            end
          end
          vim.g.flemma_library_path = %q
          vim.cmd("filetype plugin on")
          require("flemma").setup({})
          local report, errors = {}, {}
          vim.notify = function(m, l)
            if (l or 0) >= vim.log.levels.WARN then
              errors[#errors + 1] = m
            end
          end
          local okp, res, why = pcall(vim.treesitter.language.add, "markdown")
          report[#report + 1] = "parser " .. tostring(okp and res ~= false and not (res == nil and why ~= nil))
          vim.cmd("edit " .. vim.fn.fnameescape(%q))
          vim.wait(50)
          local ok, err = pcall(vim.cmd, "Flemma preview")
          report[#report + 1] = "preview " .. (ok and "ok" or ("error " .. tostring(err):sub(1, 200)))
          report[#report + 1] = "preview syntax " .. vim.bo.syntax .. " " .. vim.api.nvim_buf_get_lines(0, 1, 2, false)[1]
          vim.cmd("only")
          vim.cmd("buffer p.chat")
          vim.api.nvim_win_set_cursor(0, { 2, 8 })
          vim.api.nvim_feedkeys("gf", "x", false)
          report[#report + 1] = "gf " .. vim.fn.fnamemodify(vim.api.nvim_buf_get_name(0), ":t") .. " syntax " .. vim.bo.syntax
          report[#report + 1] = "errors " .. #errors .. " " .. table.concat(errors, " | "):sub(1, 300)
          vim.fn.writefile(report, %q)
        ]=]):format(require("flemma.core.native").library_path(), dir .. "/p.chat", out),
      })
      local lines = vim.split(helpers.read_file(out) or "", "\n", { trimempty = true })
      assert.same({
        "parser false",
        "preview ok",
        "preview syntax markdown Read @./notes.md please.",
        "gf notes.md syntax markdown",
        "errors 0 ",
      }, lines)
    end)
  end
end)
