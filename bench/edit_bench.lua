-- The edit tool's fallback search (trimmed lines, whitespace, indentation, fuzzy)
-- over the largest file it searches (50,000 lines), old_string found by none of
-- them: the longest slice the loop waits for (M.find_async resumes the search
-- from the loop between slices; garbage collection included).
local match = require("flemma.tools.builtin.edit_match")

local lines = {}
for i = 1, match.MAX_FALLBACK_LINES do
  lines[i] = "    local value_" .. (i % 7) .. " = compute(" .. i .. ", other_argument)"
end
local L = match.lines(table.concat(lines, "\n") .. "\n")
local OLD = "  local value_1 = compute(1, other_argument)\n" .. string.rep("x", 200) .. "\n  local value_3 = nothing()"

return {
  {
    name = "edit_fallback_slice",
    unit = "ms",
    target = 5,
    op = "<=",
    runs = 3,
    run = function()
      local co = coroutine.create(match.find)
      local longest = 0
      local first = true
      repeat
        local t0 = vim.uv.hrtime()
        local ok, err
        if first then
          ok, err = coroutine.resume(co, L, OLD)
          first = false
        else
          ok, err = coroutine.resume(co)
        end
        assert(ok, err)
        longest = math.max(longest, (vim.uv.hrtime() - t0) / 1e6)
      until coroutine.status(co) == "dead"
      return longest
    end,
  },
}
