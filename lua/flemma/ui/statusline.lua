--- The statusline text of a buffer: provider, model (the buffer's own when its
--- frontmatter selects them), thinking level, running tools, a running request and
--- the session's cost. Cheap enough for every redraw: the
--- frontmatter's result is cached per change, the rest are table lookups.
local M = {}
local H = {}

function H.money(c)
  if c < 0.01 then
    return ("$%.4f"):format(c)
  end
  return ("$%.2f"):format(c)
end

---@class flemma.statusline.Data
---@field provider? string
---@field model? string
---@field thinking? string|number the thinking level or budget; nil when off
---@field tools string[] names of the tools running in the buffer
---@field sending boolean a request of the buffer is running
---@field cost number the session's cost in dollars so far
---@field cost_incomplete? boolean some models' prices were unknown
---@field error? string the buffer's frontmatter fails: nothing is sent (provider and model are the active ones)
---@field error_line? integer the buffer line of that error

--- The parts of the statusline of a buffer (default: the current one).
---@param bufnr? integer
---@return flemma.statusline.Data
function M.data(bufnr)
  if bufnr == nil or bufnr == 0 then
    bufnr = vim.api.nvim_get_current_buf()
  end
  local config = require("flemma.core.config").get()
  local out = { tools = {}, sending = false, cost = 0 }
  local chat = vim.api.nvim_buf_is_valid(bufnr) and vim.bo[bufnr].filetype == "chat"
  if chat then
    -- The buffer's own selection (frontmatter) over the active one.
    local okc, cfg, err = pcall(require("flemma.chat.frontmatter").config, bufnr)
    if okc and cfg then
      config = cfg
    else
      out.error = okc and err or tostring(cfg)
      out.error_line = tonumber(tostring(out.error):match("frontmatter line (%d+)"))
    end
  end
  local ok, spec = pcall(require("flemma.provider").resolve, config)
  if ok and spec then
    out.provider, out.model = spec.name, spec.model
  else
    out.provider = config.provider
  end
  local params = config.parameters
  if chat and not out.error then
    local okp, p = pcall(require("flemma.chat.frontmatter").parameters, bufnr, spec and spec.kind or nil)
    if okp and type(p) == "table" then
      params = p
    end
    local okc, running = pcall(require("flemma.cycle").running, bufnr)
    if okc then
      for _, r in ipairs(running) do
        out.tools[#out.tools + 1] = r.name
      end
    end
    local provider = package.loaded["flemma.provider"]
    out.sending = provider ~= nil and provider.is_active(bufnr) or false
  end
  local t = params.thinking
  if t ~= nil and t ~= false and t ~= 0 then
    out.thinking = t == true and "on" or t
  end
  out.cost, out.cost_incomplete = require("flemma.provider.usage").session_cost()
  return out
end

--- "anthropic claude-sonnet-4-6 · thinking high · running bash · $0.0123".
---@param bufnr? integer
---@return string
function M.text(bufnr)
  local d = M.data(bufnr)
  local parts = { d.model and (d.provider .. " " .. d.model) or d.provider }
  if d.error then
    -- Nothing is sent while the frontmatter fails: no provider or thinking to show.
    parts = { d.error_line and ("frontmatter error (line %d)"):format(d.error_line) or "frontmatter error" }
  elseif d.thinking then
    parts[#parts + 1] = "thinking " .. tostring(d.thinking)
  end
  if d.sending then
    parts[#parts + 1] = "sending"
  end
  if #d.tools > 0 then
    parts[#parts + 1] = "running " .. table.concat(d.tools, ", ")
  end
  parts[#parts + 1] = H.money(d.cost) .. (d.cost_incomplete and "+" or "")
  return table.concat(parts, " · ")
end

return M
