--- The file a chat buffer was just read from: its size and modification time,
--- and whether the buffer's text changed since (any change, seen by on_bytes).
--- plugin/flemma.lua notes it at BufReadPost; the live document of a long chat
--- is first built from that file, read natively, when nothing changed (flemma.document).
local M = {}

M.records = {} ---@type table<integer, { size: integer, sec: integer, nsec: integer, changed: boolean }>

--- Notes that buffer buf was just read from its file.
---@param buf integer
function M.note(buf)
  local st = vim.uv.fs_stat(vim.api.nvim_buf_get_name(buf))
  if not st or st.type ~= "file" then
    M.records[buf] = nil
    return
  end
  local rec = { size = st.size, sec = st.mtime.sec, nsec = st.mtime.nsec, changed = false }
  local fresh = M.records[buf] == nil
  M.records[buf] = rec
  if not fresh then
    return -- read again (:edit!): the watcher attached before stays
  end
  local attached = vim.api.nvim_buf_attach(buf, false, {
    on_bytes = function(_, b)
      local r = M.records[b]
      if r then
        r.changed = true
      end
      M.records[b] = nil
      return true
    end,
    on_reload = function(_, b)
      M.records[b] = nil
      return true
    end,
    on_detach = function(_, b)
      M.records[b] = nil
    end,
  })
  if not attached then
    M.records[buf] = nil
  end
end

--- What buffer buf was read from, when its text did not change since; forgotten
--- once taken.
---@param buf integer
---@return { size: integer, sec: integer, nsec: integer }|nil
function M.take(buf)
  local rec = M.records[buf]
  M.records[buf] = nil
  if rec and not rec.changed then
    return rec
  end
  return nil
end

return M
