--- Highlight groups, all defined with `default = true` so colorschemes win.
local M = {}
local H = {}

-- What each group looked like right after Flemma defined it (without the `default`
-- flag). A group that still looks like that is Flemma's own and may be redefined by a
-- later setup(); a group a colorscheme or the user changed is left alone.
H.applied = {}
-- Links Flemma ever gave each group: `:colorscheme` (`:hi clear`) puts a group back to
-- the last default link it had, which is then still Flemma's.
H.links = {}

function H.view(name)
  local hl = vim.api.nvim_get_hl(0, { name = name })
  hl.default = nil
  return hl
end

function H.set(name, spec)
  spec = vim.deepcopy(spec)
  spec.default = true
  local current = H.view(name)
  local links = H.links[name] or {}
  local ours = next(current) == nil
    or (H.applied[name] ~= nil and vim.deep_equal(current, H.applied[name]))
    or (current.link ~= nil and next(current, next(current)) == nil and links[current.link])
  if not ours then
    return
  end
  -- `default` alone never replaces an earlier default definition (the one plugin/
  -- made before setup() ran); `force` does, and the group stays a default one.
  spec.force = true
  vim.api.nvim_set_hl(0, name, spec)
  H.applied[name] = H.view(name)
  if spec.link then
    links[spec.link] = true
    H.links[name] = links
  end
end

--- The groups of chat buffers (flemma.ui.highlight, flemma.ui.marks) and the
--- standard groups they link to.
M.CHAT_GROUPS = {
  FlemmaRoleSystem = "Special",
  FlemmaRoleUser = "Statement",
  FlemmaRoleAssistant = "Type",
  FlemmaToolUse = "Function",
  FlemmaToolName = "Identifier",
  FlemmaToolId = "Constant",
  FlemmaToolResult = "Function",
  FlemmaToolResultError = "DiagnosticError",
  FlemmaToolResultErrorBody = "DiagnosticVirtualTextError",
  FlemmaPlaceholderApproved = "DiagnosticOk",
  FlemmaPlaceholderPending = "DiagnosticWarn",
  FlemmaPlaceholderDenied = "DiagnosticError",
  FlemmaPlaceholderRejected = "DiagnosticHint",
  FlemmaThinking = "Comment",
  FlemmaThinkingTag = "SpecialComment",
  FlemmaFrontmatter = "PreProc",
  FlemmaFileReference = "Underlined",
  FlemmaTemplateExpression = "PreProc",
  FlemmaTemplateCode = "Macro",
  FlemmaRuler = "NonText",
  FlemmaSignStreaming = "DiagnosticInfo",
  FlemmaSignPending = "DiagnosticWarn",
}

---@param config? flemma.Config
function M.setup(config)
  config = config or require("flemma.core.config").get()
  local preview = config.highlights.tool_preview
  if type(preview) == "string" then
    H.set("FlemmaToolPreview", { link = preview })
  else
    H.set("FlemmaToolPreview", preview)
  end
  H.set("FlemmaToolSpinner", { link = "DiagnosticInfo" })
  H.set("FlemmaToolOutput", { link = "Comment" })
  H.set("FlemmaToolRisk", { link = "DiagnosticWarn" })
  H.set("FlemmaTodoCounts", { link = "Comment" })
  for name, link in pairs(M.CHAT_GROUPS) do
    H.set(name, { link = link })
  end
  if not H.autocmd then
    -- `:colorscheme` clears the groups; define them again afterwards.
    H.autocmd = vim.api.nvim_create_autocmd("ColorScheme", {
      group = vim.api.nvim_create_augroup("flemma.ui.highlights", { clear = true }),
      callback = function()
        M.setup()
      end,
    })
  end
end

return M
