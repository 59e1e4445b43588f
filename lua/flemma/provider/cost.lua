--- Asking before a chat's frontmatter spends money: a chat file from someone else can
--- select any provider and model the user configured (`flemma.opt.provider`,
--- `flemma.opt.model`, a `$preset`). When the one it selects is not the user's own
--- choice (setup() or :Flemma switch) and its price is above
--- `ui.high_cost_threshold` (or unknown on a hosted endpoint), the first send asks
--- (vim.ui.select). "Send" is remembered for the buffer, provider and model until
--- Neovim exits; anything else sends nothing. Off with `ui.confirm_frontmatter_cost
--- = false`.
local util = require("flemma.core.util")
local consent = require("flemma.policy.consent")

local M = {}
local H = {}

-- Answers are kept by flemma.consent under this topic, as "provider\0model" per buffer.
H.TOPIC = "cost"

M.CHOICES = { "Send", "Do not send" }

function H.key(spec)
  return spec.name .. "\0" .. spec.model
end

--- Whether a model's price is above the threshold (input or output, dollars per
--- million tokens): the test of :Flemma switch's warning as well.
---@param info flemma.models.Model
---@param limit number
---@return boolean
function M.above(info, limit)
  return info.output > limit or info.input > limit
end

--- What makes a send from bufnr need the user's confirmation: nil when it need not
--- (the option is off, the frontmatter selects nothing or the user's own provider and
--- model, the model is cheap, or it was approved), else
--- { spec, info?, selection, limit }.
---@param bufnr integer
function M.question(bufnr)
  local config = require("flemma.core.config").get()
  if (config.ui or {}).confirm_frontmatter_cost == false then
    return nil
  end
  local fm = require("flemma.chat.frontmatter")
  local sel = fm.selection(bufnr)
  if not sel or (sel.provider == nil and sel.model == nil) then
    return nil
  end
  local provider = require("flemma.provider")
  local spec = provider.resolve_buffer(bufnr)
  if not spec then
    return nil -- the send reports why it cannot resolve, and sends nothing
  end
  local own = provider.resolve(config)
  if own and own.name == spec.name and own.model == spec.model then
    return nil -- the frontmatter repeats the user's own choice
  end
  if consent.approved(bufnr, H.TOPIC, H.key(spec)) then
    return nil
  end
  local limit = config.ui.high_cost_threshold
  local info = require("flemma.core.models").get(spec.kind, spec.model)
  if info then
    if not M.above(info, limit) then
      return nil
    end
  elseif provider.is_loopback(spec.endpoint) then
    return nil -- a server on this machine: no bill to run up
  end
  return { spec = spec, info = info, selection = sel, limit = limit }
end

function H.money(x)
  if x == math.floor(x) then
    return ("$%d"):format(x)
  end
  return (("$%.3f"):format(x):gsub("0+$", ""))
end

--- The question's text.
function M.prompt(bufnr, q)
  local spec, info = q.spec, q.info
  local price
  if info then
    price = ("%s in / %s out per million tokens, above ui.high_cost_threshold (%s)"):format(
      H.money(info.input),
      H.money(info.output),
      H.money(q.limit)
    )
  else
    price = ("price unknown (not in the model table), at %s"):format(spec.endpoint)
  end
  return ("The frontmatter of %s chose %s %s%s: %s. Send with it?"):format(
    util.buffer_name(bufnr),
    spec.name,
    spec.model,
    q.selection.preset and (" (" .. q.selection.preset .. ")") or "",
    price
  )
end

function H.refused(bufnr, q, why, can_retry)
  util.warn(
    ("not sent: the frontmatter of %s chose %s %s and %s; edit `flemma.opt.provider` / `flemma.opt.model` in the frontmatter (without them the buffer uses your own choice, see :Flemma switch)%s, or set ui.confirm_frontmatter_cost = false"):format(
      util.buffer_name(bufnr),
      q.spec.name,
      q.spec.model,
      why,
      can_retry and ", or send again and answer Send" or ""
    )
  )
end

--- Called by the send path: true when the send may go on now. Otherwise nothing is
--- sent; after the user answered Send, `resume` is called (scheduled) to send again.
---@param bufnr integer
---@param resume fun()
---@return boolean
function M.settle(bufnr, resume)
  local ok, q = pcall(M.question, bufnr)
  if not ok then
    util.notify(
      "not sent: the price of the frontmatter's model could not be checked: " .. util.message(q),
      vim.log.levels.ERROR
    )
    return false
  end
  if not q then
    return true
  end
  return consent.gate(bufnr, {
    topic = H.TOPIC,
    key = H.key(q.spec),
    prompt = M.prompt(bufnr, q),
    choices = M.CHOICES,
    kind = "flemma.cost",
    resume = resume, -- asks again if the frontmatter chose another expensive model meanwhile
    say = function(outcome, err)
      if outcome == "busy" then
        util.notify("not sent: answer the question about the frontmatter's model first")
      elseif outcome == "failed" then
        util.notify(
          "not sent: cannot ask whether to use the frontmatter's model: " .. tostring(err),
          vim.log.levels.ERROR
        )
      elseif outcome == "no_ui" then
        H.refused(bufnr, q, "there is no UI to ask whether to use it")
      else
        H.refused(bufnr, q, "you did not confirm it", true)
      end
    end,
  })
end

--- Forgets the approvals (of bufnr, or of every buffer).
---@param bufnr? integer
function M.reset(bufnr)
  consent.reset(H.TOPIC, bufnr)
end

return M
