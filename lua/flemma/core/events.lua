--- Events inside Flemma, from a lower layer to the layers above it: a module below
--- emits (`emit("previews", bufnr)`), a module above listens (`on`). The listeners run
--- at once, in the order they were added; one that raises is reported and the others
--- still run. Events users see are `User` autocmds instead (see :help flemma-events).
local M = {}

---@type table<string, fun(...)[]>
local listeners = {}

--- Adds a listener of an event; the same function is added once.
---@param name string
---@param fn fun(...)
function M.on(name, fn)
  local list = listeners[name] or {}
  listeners[name] = list
  for _, f in ipairs(list) do
    if f == fn then
      return
    end
  end
  list[#list + 1] = fn
end

--- Runs the listeners of an event with the given arguments.
---@param name string
function M.emit(name, ...)
  for _, fn in ipairs(listeners[name] or {}) do
    local ok, err = pcall(fn, ...)
    if not ok then
      require("flemma.core.util").warn(("%s listener failed: %s"):format(name, tostring(err)))
    end
  end
end

return M
