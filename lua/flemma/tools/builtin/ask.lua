--- The `ask` tool: the model asks the user a question, with options to pick from
--- (vim.ui.select) or a free answer (vim.ui.input); the answer is the result. Its
--- definition says `asks_user`: the approval chain never approves such a call (no
--- preset, rule, risk level, sandbox or `require_approval = false` does), so it always
--- waits as a pending placeholder and autopilot stops there; the question shows when
--- the user approves it and presses <C-]> (the user is there). A question left without
--- an answer is the error result "the user did not answer".
local preview = require("flemma.tools.preview")

local H = {}

-- Bounds on what the model sends (it is shown in a prompt).
H.MAX_QUESTION = 2000
H.MAX_OPTIONS = 50
H.MAX_OPTION = 500
H.OTHER = "(answer in your own words)"
H.NO_ANSWER = "the user did not answer"

-- One line of at most `max` characters (a prompt shows one line per item).
function H.line(s, max)
  s = s:gsub("[%c]+", " ")
  if vim.fn.strchars(s) > max then
    s = vim.fn.strcharpart(s, 0, max) .. "…"
  end
  return s
end

-- The checked question and options, or nil and the error.
function H.check(input)
  local q = input.question
  if type(q) ~= "string" or vim.trim(q) == "" then
    return nil, nil, "`question` should be a non-empty string"
  end
  local options = input.options
  if options == nil or options == vim.NIL then
    options = {}
  end
  if type(options) ~= "table" then
    return nil, nil, "`options` should be a list of strings"
  end
  if #options > H.MAX_OPTIONS then
    return nil, nil, ("`options` holds %d entries; at most %d"):format(#options, H.MAX_OPTIONS)
  end
  local out = {}
  for i, o in ipairs(options) do
    if type(o) ~= "string" or vim.trim(o) == "" then
      return nil, nil, ("`options[%d]` should be a non-empty string"):format(i)
    end
    out[#out + 1] = H.line(o, H.MAX_OPTION)
  end
  return H.line(vim.trim(q), H.MAX_QUESTION), out
end

-- Asks for a free answer; done(answer or nil).
function H.input(question, done)
  vim.ui.input({ prompt = question .. " " }, function(text)
    if type(text) ~= "string" or vim.trim(text) == "" then
      return done(nil)
    end
    done(text)
  end)
end

---@type flemma.tools.Definition
return {
  name = "ask",
  description = "Ask the user a question and wait for the answer. Give `options` for the user to pick one "
    .. "(with allow_free_text = true the user may also answer in their own words); without options the "
    .. "user types the answer. Use it when a choice is the user's to make.",
  strict = true,
  async = true,
  asks_user = true,
  input_schema = {
    type = "object",
    properties = {
      question = { type = "string", description = "The question, one line" },
      options = {
        type = { "array", "null" },
        items = { type = "string" },
        description = "The answers to pick from (null: a free answer)",
      },
      allow_free_text = {
        type = { "boolean", "null" },
        description = "With options: the user may also answer in their own words",
      },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "question", "options", "allow_free_text", "label" },
    additionalProperties = false,
  },
  format_preview = function(input)
    local q = type(input.question) == "string" and input.question or ""
    local options = type(input.options) == "table" and input.options or {}
    local shown = {}
    for _, o in ipairs(options) do
      if type(o) == "string" then
        shown[#shown + 1] = o
      end
    end
    local note = #shown > 0 and table.concat(shown, " | ") or "free answer"
    if #shown > 0 and input.allow_free_text == true then
      note = note .. " | or own words"
    end
    if type(input.label) == "string" and input.label ~= "" then
      note = input.label .. ": " .. note
    end
    return preview.with_comment(q, note)
  end,
  execute = function(input, _, callback)
    local question, options, err = H.check(input)
    if not question then
      callback({ success = false, error = err })
      return
    end
    local finished = false
    local function done(answer)
      if finished then
        return
      end
      finished = true
      if answer == nil then
        callback({ success = false, error = H.NO_ANSWER })
      else
        callback({ success = true, output = answer })
      end
    end
    vim.schedule(function()
      if finished then
        return
      end
      if #options == 0 then
        return H.input(question, done)
      end
      local items = vim.deepcopy(options)
      if input.allow_free_text == true then
        items[#items + 1] = H.OTHER
      end
      vim.ui.select(items, { prompt = question, kind = "flemma.ask" }, function(choice, idx)
        if choice == nil or idx == nil then
          return done(nil)
        end
        if input.allow_free_text == true and idx == #items then
          return H.input(question, done)
        end
        done(options[idx])
      end)
    end)
    return function()
      finished = true
    end
  end,
}
