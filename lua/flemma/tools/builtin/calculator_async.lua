--- The `calculator_async` tool: the calculator, answering after `delay` milliseconds
--- (a demonstration of async tools; cancellable while it waits).
local arithmetic = require("flemma.tools.builtin.arithmetic")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "calculator_async",
  description = "Evaluate an arithmetic expression like `calculator`, answering after a delay "
    .. "in milliseconds (default 1000).",
  strict = true,
  async = true,
  input_schema = {
    type = "object",
    properties = {
      expression = { type = "string", description = "The expression, e.g. `sqrt(16)`" },
      delay = { type = { "integer", "null" }, description = "Milliseconds to wait first (default 1000)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "expression", "delay", "label" },
    additionalProperties = false,
  },
  format_preview = function(input)
    local notes = {}
    if input.label then
      notes[#notes + 1] = input.label
    end
    if input.delay then
      notes[#notes + 1] = ("%dms"):format(input.delay)
    end
    return preview.with_comment(input.expression or "", table.concat(notes, ", "))
  end,
  execute = function(input, _, callback)
    local delay = input.delay or 1000
    if delay < 0 then
      callback({ success = false, error = "`delay` should be 0 or more milliseconds, not " .. delay })
      return
    end
    local timer = assert(vim.uv.new_timer())
    local function stop()
      if not timer:is_closing() then
        timer:stop()
        timer:close()
      end
    end
    vim.uv.update_time() -- count the delay from now, not from the loop's cached time
    timer:start(delay, 0, function()
      stop()
      vim.schedule(function()
        local value, err = arithmetic.evaluate(input.expression)
        if value == nil then
          callback({ success = false, error = ("cannot evaluate `%s`: %s"):format(input.expression, err) })
        else
          callback({ success = true, output = arithmetic.format(value) })
        end
      end)
    end)
    return stop
  end,
}
