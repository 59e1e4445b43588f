-- The result of a reviewed write or edit (flemma.tools.review.outcome): which of the
-- asked hunks the user left out, changed or added, and the diff from the asked text
-- to the written one, for a 50,000-line file (about 1.6 MB) whose change has 10,000
-- hunks, every other one left out. It runs on the main loop when the call runs.
local review = require("flemma.tools.review")

local N = 50000
local before, asked, written = {}, {}, {}
for i = 1, N do
  before[i] = "    local value_" .. i .. " = compute(" .. i .. ", other)"
  asked[i] = i % 5 == 0 and ("    local value_" .. i .. " = changed(" .. i .. ")") or before[i]
  written[i] = i % 10 == 0 and before[i] or asked[i]
end
local function join(t)
  return table.concat(t, "\n") .. "\n"
end
local rec = { path = "big.lua", before = join(before), asked = join(asked) }
local WRITTEN = join(written)

return {
  {
    name = "review_outcome_50k_lines",
    unit = "ms",
    target = 250,
    op = "<=",
    runs = 3,
    run = function()
      local t0 = vim.uv.hrtime()
      local out = review.outcome(rec, WRITTEN)
      local ms = (vim.uv.hrtime() - t0) / 1e6
      assert(out:find("and 4980 more", 1, true), out:sub(1, 400))
      return ms
    end,
  },
}
