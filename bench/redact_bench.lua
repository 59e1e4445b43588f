-- The kept output of a tool (a truncated output's file) is redacted one 256 KB piece
-- per turn of the loop (flemma.core.process): measured, the longest piece of 20 MiB of
-- ordinary output with a resolved key registered. Before the header rules ran only
-- where a header name is, 20 MiB took 16.3 s (load 10).
local util = require("flemma.core.util")

local PIECE = 256 * 1024
local text

local function setup()
  util.add_secret("sk-bench-redact-" .. string.rep("k", 40))
  text = string.rep("ordinary tool output line 0123456789 abcdefghij\n", math.floor(PIECE / 48))
end

local function run()
  local r = util.redactor({})
  local longest = 0
  for _ = 1, 80 do
    local t0 = vim.uv.hrtime()
    r.push(text)
    longest = math.max(longest, (vim.uv.hrtime() - t0) / 1e6)
  end
  r.flush()
  return longest
end

return {
  {
    name = "redact_output_piece_longest",
    unit = "ms",
    target = 8,
    op = "<=",
    runs = 5,
    warmup = 1,
    setup = setup,
    run = run,
  },
}
