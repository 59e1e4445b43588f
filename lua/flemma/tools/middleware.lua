--- Hooks around every tool execution (`:help flemma-tools-api`): `before(args, ctx)`
--- may replace the arguments or deny the call; `after(args, ctx, result)` may replace
--- the result. Hooks run in registration order, each on what the previous one left.
local util = require("flemma.core.util")

local M = {}
local H = {}

H.hooks = {} -- { name = string ("" for every tool), before?, after?, seq }
H.seq = 0

--- Adds a hook; returns a handle whose :remove() drops it again.
---@param name string a tool name, or "" for every tool
---@param mw { before?: function, after?: function }
---@return { remove: fun(self): boolean }
function M.add(name, mw)
  if type(name) ~= "string" then
    util.error('middleware() expects a tool name or "" (every tool), not ' .. type(name))
  end
  if type(mw) ~= "table" then
    util.error("middleware() expects a table { before = fn?, after = fn? }, not " .. type(mw))
  end
  for _, k in ipairs({ "before", "after" }) do
    if mw[k] ~= nil and type(mw[k]) ~= "function" then
      util.error(("middleware: `%s` should be a function, not %s"):format(k, type(mw[k])))
    end
  end
  if mw.before == nil and mw.after == nil then
    util.error("middleware() needs a `before` or an `after` function")
  end
  H.seq = H.seq + 1
  local hook = { name = name, before = mw.before, after = mw.after, seq = H.seq }
  H.hooks[#H.hooks + 1] = hook
  return {
    remove = function()
      for i, h in ipairs(H.hooks) do
        if h == hook then
          table.remove(H.hooks, i)
          return true
        end
      end
      return false
    end,
  }
end

function H.matching(name)
  local out = {}
  for _, h in ipairs(H.hooks) do
    if h.name == "" or h.name == name then
      out[#out + 1] = h
    end
  end
  return out
end

--- Runs the `before` hooks of a tool. Returns the arguments to run with, or nil and
--- the reason of a denial (a hook that raises denies as well: fail closed).
---@return table|nil args
---@return string|nil reason
function M.before(name, args, ctx)
  for _, h in ipairs(H.matching(name)) do
    if h.before then
      local ok, res = xpcall(h.before, debug.traceback, args, ctx)
      if not ok then
        return nil,
          ("a before hook of `%s` raised an error, so the call was not run: %s"):format(name, util.message(res))
      end
      if type(res) == "table" then
        if res.deny == true then
          local reason = type(res.reason) == "string" and res.reason ~= "" and res.reason or "denied by a before hook"
          return nil, reason
        end
        args = res
      end
    end
  end
  return args, nil
end

--- A Flemma result as `{ content, is_error }`.
function M.to_pair(result)
  if result.success then
    local out = result.output
    if type(out) == "table" then
      out = vim.json.encode(out)
    end
    return { content = out == nil and "" or tostring(out), is_error = false }
  end
  local content = result.error or "the tool failed"
  if result.output ~= nil and result.output ~= "" then
    local out = type(result.output) == "table" and vim.json.encode(result.output) or tostring(result.output)
    content = content .. "\n\n" .. out
  end
  return { content = content, is_error = true }
end

--- Runs the `after` hooks of a tool on its (normalized) result; returns the result
--- to record. A hook that raises turns the result into an error naming it.
function M.after(name, args, ctx, result)
  local hooks = H.matching(name)
  local has = false
  for _, h in ipairs(hooks) do
    has = has or h.after ~= nil
  end
  if not has then
    return result
  end
  for _, h in ipairs(hooks) do
    if h.after then
      local ok, res = xpcall(h.after, debug.traceback, args, ctx, M.to_pair(result))
      if not ok then
        return { success = false, error = ("an after hook of `%s` raised an error: %s"):format(name, util.message(res)) }
      end
      if type(res) == "table" and res.content ~= nil then
        local content = type(res.content) == "string" and res.content or vim.json.encode(res.content)
        if res.is_error then
          result = { success = false, error = content }
        else
          result = { success = true, output = content }
        end
      end
    end
  end
  return result
end

--- Whether any hook applies to a tool.
function M.any(name)
  return #H.matching(name) > 0
end

function M._reset()
  H.hooks = {}
end

return M
