--- The work that follows a change of a chat buffer (its folds, its rulers and
--- signs, its tool previews) runs one piece per turn of the loop, a millisecond
--- after the one before: the change and each piece hold the loop apart, and
--- Neovim's timers, input and redraws take their turn in between. A change's
--- pieces are all done a few milliseconds after it.
local M = {}
local H = {}

H.queue = {} ---@type { key: string, fn: fun() }[]
H.queued = {} ---@type table<string, boolean>
H.armed = false
H.ran = 0
-- Between two pieces (ms): with less, pieces due together run in one turn.
H.GAP_MS = 1

function H.step()
  local job = table.remove(H.queue, 1)
  if job then
    H.queued[job.key] = nil
    H.ran = H.ran + 1
    local ok, err = pcall(job.fn)
    if not ok then
      require("flemma.core.log").debug("after a change: " .. tostring(err))
    end
  end
  if #H.queue > 0 then
    H.arm()
  else
    H.armed = false
  end
end

function H.arm()
  H.armed = true
  if not H.timer or H.timer:is_closing() then
    H.timer = vim.uv.new_timer()
    H.fire = vim.schedule_wrap(H.step)
  end
  -- From now: the loop's clock was read at the start of its turn, before the
  -- change, and the piece would otherwise come due with the timers due then.
  vim.uv.update_time()
  H.timer:start(H.GAP_MS, 0, H.fire)
end

--- Runs fn on a later turn of the loop, after the pieces queued before it. A
--- piece still queued under `key` is not queued again.
---@param key string
---@param fn fun()
function M.run(key, fn)
  if H.queued[key] then
    return
  end
  H.queued[key] = true
  H.queue[#H.queue + 1] = { key = key, fn = fn }
  if not H.armed then
    H.arm()
  end
end

--- Whether pieces are queued, and how many ran so far (tests wait for the next).
---@return boolean busy, integer ran
function M.state()
  return H.armed, H.ran
end

return M
