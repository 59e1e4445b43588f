--- The `calculator` tool: arithmetic with math functions, evaluated by a safe parser.
local arithmetic = require("flemma.tools.builtin.arithmetic")
local preview = require("flemma.tools.preview")

---@type flemma.tools.Definition
return {
  name = "calculator",
  description = "Evaluate an arithmetic expression. Supports + - * / % ^ (or **), parentheses, "
    .. "the constants pi, e, tau, inf and the functions sqrt, abs, floor, ceil, round, exp, log "
    .. "(log(x, base)), ln, log10, log2, sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, "
    .. "pow, min, max, hypot.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      expression = { type = "string", description = "The expression, e.g. `sqrt(16) + 2^3`" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "expression", "label" },
    additionalProperties = false,
  },
  format_preview = function(input)
    return preview.with_comment(input.expression or "", input.label)
  end,
  execute = function(input)
    local value, err = arithmetic.evaluate(input.expression)
    if value == nil then
      return { success = false, error = ("cannot evaluate `%s`: %s"):format(input.expression, err) }
    end
    return { success = true, output = arithmetic.format(value) }
  end,
}
