--- Asking once before something a chat file chose goes out: the one helper behind
--- the questions of flemma.cost (an expensive provider and model) and flemma.keyhost
--- (a key sent to a new host). A question is asked with util.ask (vim.ui.select, at
--- most one open per kind and buffer, as flemma.reach asks); "yes" (the first choice) is remembered for the buffer
--- and the question's key until Neovim exits (or the buffer is wiped), and the
--- caller's `resume` runs (scheduled) to go on. Anything else, or nobody to ask (no
--- UI, headless), or a question that fails, refuses: the caller sends nothing.
local util = require("flemma.core.util")

local M = {}
local H = {}

---@type table<string, table<integer, table<string, true>>> topic -> bufnr -> approved keys
H.approved = {}

--- Whether the user said yes to `key` of `topic` for bufnr in this session.
---@param bufnr integer
---@param topic string
---@param key string
---@return boolean
function M.approved(bufnr, topic, key)
  local t = H.approved[topic]
  return t ~= nil and t[bufnr] ~= nil and t[bufnr][key] == true
end

--- Remembers a yes for bufnr until Neovim exits.
---@param bufnr integer
---@param topic string
---@param key string
function M.approve(bufnr, topic, key)
  H.approved[topic] = H.approved[topic] or {}
  H.approved[topic][bufnr] = H.approved[topic][bufnr] or {}
  H.approved[topic][bufnr][key] = true
end

---@alias flemma.consent.Refusal "busy"|"no_ui"|"failed"|"declined"

---@class flemma.consent.Question
---@field topic string e.g. "cost", "keyhost"
---@field key string what a yes is remembered for
---@field prompt string
---@field choices string[] the first one says yes
---@field kind? string vim.ui.select's `kind`
---@field resume fun() called (scheduled) after a yes, to go on
---@field refuse fun(reason: flemma.consent.Refusal, err?: string) says why nothing goes out

--- Asks the question for bufnr (util.ask: one open question per kind and buffer).
--- Returns nothing useful: the caller stops now, and goes on only through q.resume;
--- q.refuse is called (at once or after the answer) when the answer is not yes.
---@param bufnr integer
---@param q flemma.consent.Question
function M.ask(bufnr, q)
  local state, err = util.ask(bufnr, q.kind or ("flemma." .. q.topic), q.prompt, q.choices, function(choice)
    if choice == q.choices[1] then
      M.approve(bufnr, q.topic, q.key)
      q.resume()
    else
      q.refuse("declined")
    end
  end)
  if state ~= "asked" then
    q.refuse(state, err)
  end
end

--- Forgets the answers of a topic (every topic when nil), of bufnr (every buffer
--- when nil).
---@param topic? string
---@param bufnr? integer
function M.reset(topic, bufnr)
  for t, per_buf in pairs(H.approved) do
    if topic == nil or t == topic then
      if bufnr then
        per_buf[bufnr] = nil
      else
        H.approved[t] = nil
      end
    end
  end
end

vim.api.nvim_create_autocmd("BufWipeout", {
  group = vim.api.nvim_create_augroup("flemma.policy.consent", { clear = true }),
  callback = function(ev)
    M.reset(nil, ev.buf)
  end,
})

return M
