--- The isolated interpreters that run code from chat files (frontmatter, templates, a
--- frontmatter's auto_approve function): the one place that makes and calls them
--- (native/src/isolate.cpp), under budgets that no code of a chat can change.
---
--- Time. One call uses at most 35 ms of CPU time (the interpreter's own limit, kept
--- on every instruction, inside error handlers too). All the calls of one action,
--- that is everything that runs before Neovim's main loop gets control back (a key
--- press and the redraw after it, a timer, a command), share M.ACTION_MS of CPU time
--- (and, on a busy machine, M.ACTION_WALL_MS of Neovim's time): each call gets what is
--- left, and once it is spent the next calls fail at once with the limit "budget".
--- So 150 template tags or 150 tool calls asking an auto_approve function hold
--- Neovim no longer than one.
---
--- Memory. An interpreter kept between calls (the one of an auto_approve function)
--- is freed after `frontmatter.idle_seconds` without a call, and the least recently
--- used ones are freed when all of them would hold more than
--- `frontmatter.max_memory_mb`. A freed interpreter is made again on its next call:
--- the calls that set it up are replayed first, so it answers as before.
local M = {}
local H = {}

--- CPU time (ms) the interpreter calls of one action may use in all (the rest of the
--- 100 ms a key press may take is left to the work around them).
M.ACTION_MS = 80
--- Wall-clock time (ms) they may hold Neovim in all (counts on a busy machine only).
M.ACTION_WALL_MS = 1000
--- Memory (bytes) one interpreter may hold at most.
M.MAX_MEMORY = 64 * 1024 * 1024

---------------------------------------------------------------------------------------
-- The budget of one action
---------------------------------------------------------------------------------------

H.open = false -- an action is running (its budget is counted)
H.gen = 0
H.cpu = 0 -- ms of CPU time its calls used
H.wall = 0 -- ms of wall-clock time they took

-- Opens the budget of the running action: the first call of an action opens it,
-- and it closes once Neovim's main loop has control again.
function H.window()
  if H.open then
    return
  end
  H.open, H.cpu, H.wall = true, 0, 0
  H.gen = H.gen + 1
  local gen = H.gen
  vim.schedule(function()
    if H.gen == gen then
      H.open = false
    end
  end)
end

--- Starts a new action: its calls get the whole budget again. Neovim's main loop does
--- this by itself each time it gets control back; a script that runs many actions in
--- one go (a benchmark, a test) calls it between them.
function M.begin_action()
  H.open = false
end

--- What is left of the running action's budget: cpu_ms, wall_ms (0 when spent).
---@return number cpu_ms
---@return number wall_ms
function M.left()
  H.window()
  return math.max(0, M.ACTION_MS - H.cpu), math.max(0, M.ACTION_WALL_MS - H.wall)
end

function H.spend(cpu_ms, wall_ms)
  H.cpu = H.cpu + math.max(0, cpu_ms or 0)
  H.wall = H.wall + math.max(0, wall_ms or 0)
end

function H.refused()
  return {
    ok = false,
    limit = "budget",
    error = "not run: the time frontmatter and templates may use for one action is spent",
  }
end

---------------------------------------------------------------------------------------
-- Interpreters
---------------------------------------------------------------------------------------

-- Interpreters that hold a native one (weak: one nobody refers to any more is freed
-- by the garbage collector).
H.live = setmetatable({}, { __mode = "k" })

function H.options()
  local ok, config = pcall(function()
    return require("flemma.core.config").get().frontmatter
  end)
  config = ok and type(config) == "table" and config or {}
  return {
    max_memory = (config.max_memory_mb or 256) * 1024 * 1024,
    idle_ms = (config.idle_seconds or 60) * 1000,
  }
end

-- JSON text of an argument list (positions kept: nil becomes null).
function H.args(...)
  local parts = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    parts[i] = v == nil and "null" or vim.json.encode(v)
  end
  return "[" .. table.concat(parts, ",") .. "]"
end

---@class flemma.isolate.Interp
---@field modules table<string, string> module name -> file under lua/flemma/
---@field main string the module whose table holds the entry points
---@field setups { [1]: string, [2]: string }[] calls replayed when it is made again
---@field handle ffi.cdata*|nil the native interpreter (nil: not made, or freed)
---@field used integer vim.uv.now() of its last call
---@field closed boolean freed for good
local Interp = {}
Interp.__index = Interp

--- An interpreter of the trusted `modules` ({ module = file under lua/flemma/ });
--- `main` returns the entry points. Nothing is made before the first call.
---@param modules table<string, string>
---@param main string
---@return flemma.isolate.Interp
function M.new(modules, main)
  return setmetatable({ modules = modules, main = main, setups = {}, used = 0, closed = false }, Interp)
end

-- Frees the native interpreter (it is made again by the next call unless closed).
function H.drop(self)
  if self.handle then
    require("flemma.core.native").isolate_free(self.handle)
    self.handle = nil
  end
  H.live[self] = nil
end

--- The memory (bytes) it holds now (0 when freed).
---@return integer
function Interp:memory()
  return self.handle and require("flemma.core.native").isolate_peak(self.handle) or 0
end

--- Frees the native interpreter now (its buffer was hidden); the next call makes it
--- again, replaying its setup.
function Interp:unload()
  H.drop(self)
end

--- Frees it for good: later calls fail.
function Interp:close()
  self.closed = true
  self.setups = {}
  H.drop(self)
end

-- Frees the least recently used other interpreters until `need` bytes (what `self`
-- may hold) fit under the cap beside what they hold: all of them together never hold
-- more than the cap.
function H.make_room(self, need, cap)
  local others, total = {}, 0
  for it in pairs(H.live) do
    if it ~= self then
      others[#others + 1] = it
      total = total + it:memory()
    end
  end
  table.sort(others, function(a, b)
    return a.used < b.used
  end)
  for _, it in ipairs(others) do
    if total + need <= cap then
      break
    end
    total = total - it:memory()
    H.drop(it)
  end
end

-- One native call under what is left of the action's budget.
function H.timed(self, fn, args)
  local cpu, wall = M.left()
  if cpu <= 0 or wall <= 0 then
    return H.refused()
  end
  local native = require("flemma.core.native")
  local t0 = vim.uv.hrtime()
  local res = native.isolate_call(self.handle, fn, args, cpu, wall)
  H.spend(native.isolate_cpu_ms(self.handle), (vim.uv.hrtime() - t0) / 1e6)
  return res
end

-- Makes the native interpreter and replays the calls that set it up.
function H.make(self)
  local cpu, wall = M.left()
  if cpu <= 0 or wall <= 0 then
    return H.refused()
  end
  local opts = H.options()
  local memory = math.min(M.MAX_MEMORY, opts.max_memory)
  H.make_room(self, memory, opts.max_memory)
  self.limit = memory
  local native = require("flemma.core.native")
  local t0 = vim.uv.hrtime()
  local ok, handle, err =
    pcall(native.isolate_new, require("flemma.core.util").module_sources_json(self.modules), self.main, memory)
  if not ok or not handle then
    H.spend(0, (vim.uv.hrtime() - t0) / 1e6)
    return { ok = false, error = "cannot start the interpreter: " .. tostring(ok and err or handle) }
  end
  H.spend(native.isolate_cpu_ms(handle), (vim.uv.hrtime() - t0) / 1e6)
  self.handle = handle
  H.live[self] = true
  H.watch(opts)
  for _, setup in ipairs(self.setups) do
    local res = H.timed(self, setup[1], setup[2])
    if not res.ok then
      H.drop(self)
      return res
    end
  end
  return nil
end

function H.run(self, fn, args, keep)
  if self.closed then
    return { ok = false, error = "this interpreter was freed" }
  end
  self.used = vim.uv.now()
  if not self.handle then
    local failed = H.make(self)
    if failed then
      return failed
    end
  else
    -- It may grow up to its limit in this call: the others make room for that.
    H.make_room(self, self.limit, H.options().max_memory)
  end
  local res = H.timed(self, fn, args)
  if keep and res.ok then
    self.setups[#self.setups + 1] = { fn, args }
  end
  return res
end

--- Calls entry point `fn` with plain data; the result: { ok = true, values = {...} }
--- or { ok = false, error = string, limit = "time"|"budget"|"memory"|nil }.
---@param fn string
---@return table
function Interp:call(fn, ...)
  return H.run(self, fn, H.args(...), false)
end

--- Like call, for a call that sets the interpreter up: once it succeeded, it is
--- replayed (before anything else) when the interpreter is made again.
---@param fn string
---@return table
function Interp:keep(fn, ...)
  return H.run(self, fn, H.args(...), true)
end

---------------------------------------------------------------------------------------
-- Freeing idle interpreters
---------------------------------------------------------------------------------------

--- Frees the native interpreters unused for `frontmatter.idle_seconds` (the timer
--- does it by itself). Returns how many were freed.
---@return integer
function M.sweep()
  local idle_ms = H.options().idle_ms
  local now = vim.uv.now()
  local n = 0
  for it in pairs(H.live) do
    if now - it.used >= idle_ms then
      H.drop(it)
      n = n + 1
    end
  end
  if next(H.live) == nil and H.timer then
    H.timer:stop()
  end
  return n
end

-- Runs the sweep every few seconds while an interpreter is kept.
function H.watch(opts)
  local every = math.max(1000, math.min(30000, math.floor(opts.idle_ms / 2)))
  if not H.timer then
    H.timer = vim.uv.new_timer()
    H.timer:unref()
  end
  if H.every ~= every or not H.timer:is_active() then
    H.every = every
    H.timer:start(every, every, vim.schedule_wrap(M.sweep))
  end
end

--- The interpreters that hold a native one now, and the memory (bytes) they hold.
---@return { count: integer, memory: integer }
function M.stats()
  local count, memory = 0, 0
  for it in pairs(H.live) do
    count = count + 1
    memory = memory + it:memory()
  end
  return { count = count, memory = memory }
end

return M
