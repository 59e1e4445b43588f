--- Asking before a chat's frontmatter sends a key somewhere new. Frontmatter may
--- select any provider entry the user configured (`flemma.opt.provider`, a
--- `$preset`); where each entry's key may go at all is flemma.secrets.destination's
--- rule (never over http:// to another machine; the variable of a built-in entry only
--- to its own service's hosts). On top of it, when the entry the frontmatter selects
--- would send a key to a host that is neither the variable's own service
--- (secrets.homes) nor where the user's own choice (setup() or :Flemma switch) sends
--- the same variable, the first send (and :Flemma usage:estimate) asks with
--- flemma.consent; "Send" is remembered for the buffer, entry and host until Neovim
--- exits. Anything else, or no UI to ask with, sends nothing.
local util = require("flemma.core.util")
local consent = require("flemma.policy.consent")

local M = {}
local H = {}

H.TOPIC = "keyhost"

M.CHOICES = { "Send", "Do not send" }

--- What makes a send from bufnr need the user's confirmation: nil when it need not,
--- else { spec, host, own? } (`own`: the user's own provider spec, if it resolves).
---@param bufnr integer
function M.question(bufnr)
  local provider = require("flemma.provider")
  local spec = provider.resolve_buffer(bufnr)
  if not spec then
    return nil -- the send reports why it cannot resolve, and sends nothing
  end
  local host = provider.key_destination(spec)
  if not host then
    return nil -- no key goes with this request
  end
  if require("flemma.policy.secrets").is_home(spec.api_key_env, host) then
    return nil -- the key goes to its own service
  end
  local own = provider.resolve(require("flemma.core.config").get())
  if own and own.api_key_env == spec.api_key_env and provider.key_destination(own) == host then
    return nil -- where the user's own choice sends that key
  end
  if consent.approved(bufnr, H.TOPIC, spec.name .. "\0" .. host) then
    return nil
  end
  return { spec = spec, host = host, own = own }
end

--- The question's text.
function M.prompt(bufnr, q)
  return ("The frontmatter of %s chose %s, which sends the key in $%s to %s (%s). Send the key there?"):format(
    util.buffer_name(bufnr),
    q.spec.name,
    q.spec.api_key_env,
    q.host,
    q.own and ("your own provider, " .. q.own.name .. ", does not")
      or "a host of your configuration, not of your own choice"
  )
end

function H.refusal(bufnr, q, why, can_retry)
  return ("not sent: the frontmatter of %s chose %s, which would send the key in $%s to %s, and %s; remove `flemma.opt.provider` from the frontmatter (the buffer then uses your own choice), or make %s your own choice (:Flemma switch %s)%s"):format(
    util.buffer_name(bufnr),
    q.spec.name,
    q.spec.api_key_env,
    q.host,
    why,
    q.spec.name,
    q.spec.name,
    can_retry and ", or send again and answer Send" or ""
  )
end

--- Called before a request with a key leaves: true when it may go on now. Otherwise
--- nothing is sent; after the user answered Send, `resume` is called (scheduled).
---@param bufnr integer
---@param resume fun()
---@param on_refused? fun(message: string) gets the one line saying why nothing was sent
---   (default: a warning)
---@return boolean
function M.settle(bufnr, resume, on_refused)
  local function refused(message, level)
    if on_refused then
      on_refused(message)
    else
      util.notify(message, level or vim.log.levels.WARN)
    end
  end
  local ok, q = pcall(M.question, bufnr)
  if not ok then
    refused("not sent: where the key goes could not be checked: " .. util.message(q), vim.log.levels.ERROR)
    return false
  end
  if not q then
    return true
  end
  return consent.gate(bufnr, {
    topic = H.TOPIC,
    key = q.spec.name .. "\0" .. q.host,
    prompt = M.prompt(bufnr, q),
    choices = M.CHOICES,
    kind = "flemma.keyhost",
    resume = resume,
    say = function(outcome, err)
      if outcome == "busy" then
        refused("not sent: answer the question about where the frontmatter sends your key first", vim.log.levels.INFO)
      elseif outcome == "failed" then
        local why = "the question could not be asked (" .. tostring(err) .. ")"
        refused(H.refusal(bufnr, q, why, true), vim.log.levels.ERROR)
      else
        local why = outcome == "no_ui" and "there is no UI to ask whether to send it there" or "you did not confirm it"
        refused(H.refusal(bufnr, q, why, outcome == "declined"))
      end
    end,
  })
end

--- Forgets the answers (of bufnr, or of every buffer).
---@param bufnr? integer
function M.reset(bufnr)
  consent.reset(H.TOPIC, bufnr)
end

return M
