--- Native searches (the search functions of the header's "Process manager" section):
--- the grep, glob and find tools without rg or fd, and the grep tool's pattern screen.
local ffi = require("ffi")
local util = require("flemma.core.util")
local cdata = require("flemma.core.native.cdata")

local S, N = require("flemma.core.native.section").new()

--- Starts a native search (see flemma_procmgr_search); raises on a bad request. Its
--- results come as the process manager's events (proc_events).
---@param o { root: string, pattern?: string, files_mode?: boolean, fixed_strings?: boolean, ignore_case?: boolean, hidden?: boolean, no_ignore?: boolean, name_only?: boolean, want_type?: integer, context?: integer, include?: string, max_results?: integer, skip_dirs?: string[] }
---@return integer id
function S.proc_search(o)
  local lib = N.lib()
  local mgr = N.procmgr()
  local opts = ffi.new("flemma_search_opts")
  local skip = o.skip_dirs and cdata.cstrings(o.skip_dirs) or nil -- anchored until the call returns
  opts.root = o.root
  opts.pattern = o.pattern
  opts.files_mode = o.files_mode and 1 or 0
  opts.fixed_strings = o.fixed_strings and 1 or 0
  opts.ignore_case = o.ignore_case and 1 or 0
  opts.hidden = o.hidden and 1 or 0
  opts.no_ignore = o.no_ignore and 1 or 0
  opts.name_only = o.name_only and 1 or 0
  opts.want_type = o.want_type or 0
  opts.context = o.context or 0
  opts.include = o.include
  opts.max_results = o.max_results or 100
  opts.skip_dirs = skip
  local id = ffi.new("int64_t[1]")
  if lib.flemma_procmgr_search(mgr, opts, id) ~= 0 then
    util.error(N.last_error())
  end
  return tonumber(id[0])
end

--- The grep tool's pattern screen: nil when the pattern may be searched, else the
--- reason it is refused.
---@param pattern string
---@param fixed boolean
---@return string|nil
function S.search_check(pattern, fixed)
  if N.lib().flemma_search_check(pattern, #pattern, fixed and 1 or 0) ~= 0 then
    return N.last_error()
  end
  return nil
end

return S
