--- The process manager (the header's "Process manager" section): children spawned
--- and watched by a native worker; their events taken as Lua tables.
local ffi = require("ffi")
local util = require("flemma.core.util")
local cdata = require("flemma.core.native.cdata")

local S, N = require("flemma.core.native.section").new()
local H = {}

--- The process manager (created on first use, freed when collected).
---@return ffi.cdata*
S.procmgr, H.peek = cdata.lazy_handle("flemma_procmgr_new", "flemma_procmgr_free", "the process manager")

--- The descriptor that becomes readable when process events wait.
---@return integer
function S.proc_fd()
  return N.lib().flemma_procmgr_fd(S.procmgr())
end

--- Spawns a child; raises on a bad request. With `o.async` the spawn is the worker
--- thread's (flemma_procmgr_spawn_async): no pid is returned, a "started" event
--- brings it (or an exit event with `error` says why nothing started).
---@param o { argv: string[], cwd?: string, env?: string[], stdin?: string, stdin_mode: integer, merge_output: boolean, progress: boolean, timeout_ms: integer, kill_grace_ms: integer, max_lines: integer, max_bytes: integer, decoder?: string, max_stdout_bytes?: integer, max_file_bytes?: integer, spill_dir?: string, async?: boolean, spare_cpu_ms?: integer }
---@return integer id
---@return integer|nil pid
function S.proc_spawn(o)
  local lib = N.lib()
  local mgr = S.procmgr()
  local opts = ffi.new("flemma_spawn_opts")
  local argv = cdata.cstrings(o.argv) -- anchored until the call returns
  local env = o.env and cdata.cstrings(o.env) or nil
  opts.argv = argv
  opts.cwd = o.cwd
  opts.env = env
  if o.stdin then
    opts.stdin_data = o.stdin
    opts.stdin_len = #o.stdin
  end
  opts.stdin_mode = o.stdin_mode
  opts.merge_output = o.merge_output and 1 or 0
  opts.progress = o.progress and 1 or 0
  opts.timeout_ms = o.timeout_ms or 0
  opts.kill_grace_ms = o.kill_grace_ms or -1
  opts.max_lines = o.max_lines or 0
  opts.max_bytes = o.max_bytes or 0
  opts.decoder = o.decoder
  opts.max_stdout_bytes = o.max_stdout_bytes or 0
  opts.max_file_bytes = o.max_file_bytes or 0
  opts.spill_dir = o.spill_dir -- anchored by o until the call returns
  opts.spare_cpu_ms = o.spare_cpu_ms or 0
  local id = ffi.new("int64_t[1]")
  if o.async then
    if lib.flemma_procmgr_spawn_async(mgr, opts, id) ~= 0 then
      util.error(N.last_error())
    end
    return tonumber(id[0]), nil
  end
  local pid = ffi.new("int64_t[1]")
  if lib.flemma_procmgr_spawn(mgr, opts, id, pid) ~= 0 then
    util.error(N.last_error())
  end
  return tonumber(id[0]), tonumber(pid[0])
end

function S.proc_write(id, data)
  N.lib().flemma_procmgr_write(S.procmgr(), id, data, #data)
end

function S.proc_close_stdin(id)
  N.lib().flemma_procmgr_close_stdin(S.procmgr(), id)
end

function S.proc_cancel(id)
  N.lib().flemma_procmgr_cancel(S.procmgr(), id)
end

--- A child spawned with `spare_cpu_ms` gets the spared CPU back now.
---@param id integer
function S.proc_release_cpu(id)
  N.lib().flemma_procmgr_release_cpu(S.procmgr(), id)
end

--- Stops (true) or resumes reading a child's stdout.
---@param id integer
---@param paused boolean
function S.proc_pause(id, paused)
  N.lib().flemma_procmgr_pause(S.procmgr(), id, paused and 1 or 0)
end

--- Whether the library redacts files natively (flemma_procmgr_redact_file).
---@return boolean
function S.proc_can_redact_file()
  local ok, has = pcall(function()
    return N.lib().flemma_procmgr_redact_file ~= nil
  end)
  return ok and has
end

--- Starts redacting a kept file on a native worker thread (see
--- flemma_procmgr_redact_file): `values` (byte strings, longest first) are passed in
--- memory; its completion is an exit event with the id (code 0, or 2 with `error`:
--- the file is then removed). Raises when it cannot start.
---@param path string
---@param values string[]
---@return integer id
function S.proc_redact_file(path, values)
  local n = #values
  local ptrs = ffi.new("const char*[?]", math.max(n, 1))
  local lens = ffi.new("size_t[?]", math.max(n, 1))
  for i, v in ipairs(values) do
    ptrs[i - 1] = v
    lens[i - 1] = #v
  end
  local id = ffi.new("int64_t[1]")
  if N.lib().flemma_procmgr_redact_file(S.procmgr(), path, ptrs, lens, n, id) ~= 0 then
    util.error(N.last_error())
  end
  return tonumber(id[0])
end

--- SIGKILL to every group the library started (also without a manager).
function S.proc_kill_all()
  if N.loaded() then
    N.lib().flemma_procmgr_kill_all(H.peek())
  end
end

---@return integer
function S.proc_running()
  return H.peek() and N.lib().flemma_procmgr_running(H.peek()) or 0
end

-- The output of one stream of an exit event (prefix "out" or "err").
function H.output(e, prefix)
  return {
    tail = ffi.string(e[prefix .. "_tail"], e[prefix .. "_tail_len"]),
    truncated = e[prefix .. "_truncated"] ~= 0,
    binary = e[prefix .. "_binary"] ~= 0,
    total_bytes = tonumber(e[prefix .. "_total_bytes"]),
    total_lines = tonumber(e[prefix .. "_total_lines"]),
    path = cdata.opt_string(e[prefix .. "_path"]),
  }
end

-- A progress, started or exit event as a Lua table.
function H.event(e, C)
  if e.kind == C.FLEMMA_PROC_STARTED then
    return { id = tonumber(e.id), kind = "started", pid = tonumber(e.pid) }
  end
  local exit = e.kind == C.FLEMMA_PROC_EXIT
  local ev = {
    id = tonumber(e.id),
    kind = exit and "exit" or "progress",
    bytes = tonumber(e.bytes),
    lines = tonumber(e.lines),
    last_line = ffi.string(e.last_line, e.last_line_len),
  }
  if exit then
    ev.code = e.signal == 0 and e.exit_code or nil
    ev.signal = e.signal ~= 0 and e.signal or nil
    ev.timed_out = e.timed_out ~= 0
    ev.cancelled = e.cancelled ~= 0
    ev.out = H.output(e, "out")
    ev.err = H.output(e, "err")
    ev.error = e.error ~= nil and ffi.string(e.error, e.error_len) or nil
  end
  return ev
end

-- A batch of decoded stream events (kind FLEMMA_PROC_STREAM), from event i (byte
-- `off` of its text) on: all of them, or (with max_bytes) those the budget allows;
-- an event not taken whole is kept for the next call.
function H.stream(e, i, off, budget, max_bytes, lib)
  local count = tonumber(e.stream_event_count)
  local out
  if max_bytes then
    out, i, off, budget = N.stream_slice(e.stream_events, count, i, off, budget)
  else
    out, i = N.stream_events(e.stream_events, count), count
  end
  local ev = { id = tonumber(e.id), kind = "stream", events = out }
  if i < count then
    H.partial_event, H.partial_i, H.partial_off = e, i, off
  else
    lib.flemma_proc_event_free(e)
  end
  return ev, budget
end

--- Resets the descriptor and returns the waiting events as Lua tables: all of
--- them, or once about `max_bytes` of decoded stream events were taken (their
--- text, and 64 bytes for each event), those so far and `more` = true (others
--- may wait: call again; the descriptor was reset). A batch of decoded events, or
--- a long text in one, is split where the budget ends and continued at the next
--- call (see stream_slice).
---@param max_bytes? integer
---@return table[] events
---@return boolean more
function S.proc_events(max_bytes)
  if not H.peek() then
    return {}, false
  end
  local lib, C = N.lib(), N.C
  local mgr = H.peek()
  lib.flemma_procmgr_ack(mgr)
  local events = {}
  local budget = max_bytes or math.huge
  while true do
    if budget <= 0 then
      return events, true
    end
    local e, i, off = H.partial_event, H.partial_i, H.partial_off
    if e ~= nil then
      H.partial_event = nil
    else
      e, i, off = lib.flemma_procmgr_next_event(mgr), 0, 0
      if e == nil then
        break
      end
    end
    if e.kind == C.FLEMMA_PROC_STREAM then
      events[#events + 1], budget = H.stream(e, i, off, budget, max_bytes, lib)
    else
      events[#events + 1] = H.event(e, C)
      lib.flemma_proc_event_free(e)
    end
  end
  return events, false
end

return S
