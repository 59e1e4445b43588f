--- One record per chat buffer. What any module keeps about a buffer lives in that
--- buffer's record, under the module's own field (`session.get(bufnr).cycle`), instead
--- of in tables of its own keyed by buffer number. The record is made on first use
--- (when Flemma attaches to the buffer) and dropped in one place, here, when the
--- buffer is wiped out; modules that hold something that must be stopped (a timer, a
--- process, an interpreter) say so with `on("wipe", fn)`. Text-level state that a
--- reload must rebuild (`:e`, `:e!`) is dropped by the modules' `on("unload", fn)`.
local M = {}
local H = {}

---@class flemma.Session
---@field bufnr integer
---@field [string] any each module's own field

---@type table<integer, flemma.Session>
H.records = {}

---@type table<"unload"|"wipe", { name: string, fn: fun(bufnr: integer, record: flemma.Session) }[]>
H.handlers = { unload = {}, wipe = {} }

--- The record of a buffer, made when missing.
---@param bufnr integer
---@return flemma.Session
function M.get(bufnr)
  local r = H.records[bufnr]
  if not r then
    r = { bufnr = bufnr }
    H.records[bufnr] = r
    H.watch()
  end
  return r
end

--- The record of a buffer, or nil when Flemma keeps nothing about it.
---@param bufnr integer
---@return flemma.Session|nil
function M.peek(bufnr)
  return H.records[bufnr]
end

--- One field of a buffer's record, or nil (without making the record).
---@param bufnr integer
---@param field string
---@return any
function M.field(bufnr, field)
  local r = H.records[bufnr]
  return r and r[field]
end

--- Sets one field of a buffer's record; setting nil on a buffer without a record
--- makes none.
---@param bufnr integer
---@param field string
---@param value any
function M.set(bufnr, field, value)
  if value == nil then
    local r = H.records[bufnr]
    if r then
      r[field] = nil
    end
    return
  end
  M.get(bufnr)[field] = value
end

--- The buffers whose record holds `field`, with its value: `for bufnr, value in session.each("cycle")`.
---@param field string
---@return fun(): integer|nil, any
function M.each(field)
  local list = {}
  for bufnr, r in pairs(H.records) do
    if r[field] ~= nil then
      list[#list + 1] = bufnr
    end
  end
  table.sort(list)
  local i = 0
  return function()
    while true do
      i = i + 1
      local bufnr = list[i]
      if bufnr == nil then
        return nil
      end
      local r = H.records[bufnr]
      if r and r[field] ~= nil then
        return bufnr, r[field]
      end
    end
  end
end

--- Runs fn when a buffer with a record is unloaded (`"unload"`: BufUnload and
--- BufDelete; its text is gone, the record stays) or wiped out (`"wipe"`: the record
--- is dropped right after). Handlers run in the order they were added, one that raises
--- does not stop the others; `name` identifies the handler (adding it again replaces it).
---@param event "unload"|"wipe"
---@param name string
---@param fn fun(bufnr: integer, record: flemma.Session)
function M.on(event, name, fn)
  local list = assert(H.handlers[event], "session.on: unload or wipe")
  for _, h in ipairs(list) do
    if h.name == name then
      h.fn = fn
      return
    end
  end
  list[#list + 1] = { name = name, fn = fn }
end

function H.run(event, bufnr)
  local r = H.records[bufnr]
  if not r then
    return
  end
  for _, h in ipairs(H.handlers[event]) do
    local ok, err = pcall(h.fn, bufnr, r)
    if not ok then
      require("flemma.core.util").warn(("%s of buffer %d: %s failed: %s"):format(event, bufnr, h.name, tostring(err)))
    end
  end
end

--- Drops a buffer's record after running the wipe handlers (BufWipeout does it).
---@param bufnr integer
function M.free(bufnr)
  H.run("wipe", bufnr)
  H.records[bufnr] = nil
end

--- The buffers that have a record (for :checkhealth and the specs).
---@return integer[]
function M.buffers()
  local list = vim.tbl_keys(H.records)
  table.sort(list)
  return list
end

function H.watch()
  if H.group then
    return
  end
  H.group = vim.api.nvim_create_augroup("flemma.session", { clear = true })
  vim.api.nvim_create_autocmd({ "BufUnload", "BufDelete" }, {
    group = H.group,
    callback = function(ev)
      H.run("unload", ev.buf)
    end,
  })
  -- Right away: wiping the last buffer leaves an empty one with the same number,
  -- which the next :edit reuses, and that one starts with a record of its own.
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = H.group,
    callback = function(ev)
      M.free(ev.buf)
    end,
  })
end

return M
