-- Highlight groups: defined with `default = true`, following highlights.tool_preview,
-- surviving :colorscheme, and never replacing what a colorscheme or the user set.
local function hl(name)
  return vim.api.nvim_get_hl(0, { name = name })
end

describe("flemma.ui.highlights", function()
  after_each(function()
    require("flemma").setup({})
  end)

  it("links FlemmaToolPreview to Comment by default, as a default group", function()
    require("flemma").setup({})
    assert.same({ default = true, link = "Comment" }, hl("FlemmaToolPreview"))
  end)

  it("follows highlights.tool_preview given after the plugin defined the default", function()
    require("flemma").setup({ highlights = { tool_preview = "String" } })
    assert.same({ default = true, link = "String" }, hl("FlemmaToolPreview"))
    require("flemma").setup({ highlights = { tool_preview = { fg = "#ff0000", italic = true } } })
    local got = hl("FlemmaToolPreview")
    assert.equals(0xff0000, got.fg)
    assert.is_true(got.italic)
    assert.is_true(got.default)
  end)

  it("is defined again after :colorscheme", function()
    require("flemma").setup({ highlights = { tool_preview = { fg = "#123456" } } })
    vim.cmd("colorscheme default")
    assert.equals(0x123456, hl("FlemmaToolPreview").fg)
    require("flemma").setup({ highlights = { tool_preview = "Special" } })
    vim.cmd("colorscheme default")
    assert.equals("Special", hl("FlemmaToolPreview").link)
  end)

  it("leaves a group that the user or a colorscheme defined", function()
    vim.api.nvim_set_hl(0, "FlemmaToolPreview", { fg = "#00ff00" })
    require("flemma").setup({ highlights = { tool_preview = "String" } })
    assert.same({ fg = 0x00ff00 }, hl("FlemmaToolPreview"))
    vim.cmd("highlight clear FlemmaToolPreview")
  end)
end)
