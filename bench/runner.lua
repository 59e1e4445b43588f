-- Runs the benchmarks of bench/*_bench.lua inside Neovim and prints, for each:
--   bench <name>: <median> <unit> (target <= <value> <unit>) PASS|MISS
-- A benchmark file returns a list of
--   { name, unit, target, op = "<=" | ">=", runs = 7, warmup = 1,
--     setup = fn()?, teardown = fn()?, run = fn() -> number }
-- `run` returns one measurement; the line reports the median of `runs` of them,
-- taken after `warmup` unreported runs. A `setup` that returns a string (why it
-- cannot run on this machine) gives a `SKIP` line instead.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
package.path = table.concat({ root .. "/lua/?.lua", root .. "/lua/?/init.lua", root .. "/?.lua", package.path }, ";")
vim.opt.runtimepath:prepend(root)
vim.opt.shadafile = "NONE"
vim.opt.swapfile = false
vim.cmd("runtime! plugin/flemma.lua")
_G.FLEMMA_ROOT = root
if os.getenv("FLEMMA_LIBRARY") and os.getenv("FLEMMA_LIBRARY") ~= "" then
  vim.g.flemma_library_path = os.getenv("FLEMMA_LIBRARY")
end

-- BENCH="name" or several names separated by spaces.
local only = nil
for name in (os.getenv("BENCH") or ""):gmatch("%S+") do
  only = only or {}
  only[name] = true
end

local function median(xs)
  table.sort(xs)
  local n = #xs
  if n % 2 == 1 then
    return xs[(n + 1) / 2]
  end
  return (xs[n / 2] + xs[n / 2 + 1]) / 2
end

local function fmt(x)
  if x >= 100 then
    return ("%.0f"):format(x)
  elseif x >= 10 then
    return ("%.1f"):format(x)
  end
  return ("%.2f"):format(x)
end

local files = vim.fn.glob(root .. "/bench/*_bench.lua", false, true)
table.sort(files)
local found, missed = 0, 0
for _, file in ipairs(files) do
  local list = dofile(file)
  for _, b in ipairs(list) do
    if not only or only[b.name] then
      found = found + 1
      local ok, err = pcall(function()
        -- A setup that returns a string cannot run here: one SKIP line says why.
        if b.setup then
          local skip = b.setup()
          if type(skip) == "string" then
            io.stdout:write(("bench %s: SKIP %s\n"):format(b.name, skip))
            io.stdout:flush()
            return
          end
        end
        -- Each run is one action of its own for the interpreters' time budget
        -- (flemma.isolate): the runner never gives Neovim's main loop control back.
        local function run()
          local isolate = package.loaded["flemma.core.isolate"]
          if isolate then
            isolate.begin_action()
          end
          return b.run()
        end
        for _ = 1, b.warmup or 1 do
          run()
        end
        local xs = {}
        for i = 1, b.runs or 7 do
          xs[i] = run()
        end
        if b.teardown then
          b.teardown()
        end
        -- What this benchmark left behind is not the next one's to sweep.
        collectgarbage()
        local m = median(xs)
        local op = b.op or "<="
        local pass = (op == "<=" and m <= b.target) or (op == ">=" and m >= b.target)
        if not pass then
          missed = missed + 1
        end
        io.stdout:write(
          ("bench %s: %s %s (target %s %s %s) %s%s\n"):format(
            b.name,
            fmt(m),
            b.unit,
            op,
            fmt(b.target),
            b.unit,
            pass and "PASS" or "MISS",
            b.note and ("  # " .. b.note()) or ""
          )
        )
        io.stdout:flush()
      end)
      if not ok then
        io.stdout:write(("bench %s: ERROR %s\n"):format(b.name, tostring(err)))
        missed = missed + 1
      end
    end
  end
end
if only and found == 0 then
  io.stderr:write("no benchmark named " .. (os.getenv("BENCH") or "") .. "\n")
  os.exit(2)
end
