--- The sandbox (the header's "Sandbox" section): policies, commands wrapped for
--- bubblewrap or sandbox-exec, writes kept beneath the writable roots.
local ffi = require("ffi")
local util = require("flemma.core.util")
local cdata = require("flemma.core.native.cdata")

local S, N = require("flemma.core.native.section").new()
local H = {}

function H.policy(policy)
  local lib = N.lib()
  local p = lib.flemma_sandbox_policy_new(policy.network and 1 or 0)
  if p == nil then
    util.error("sandbox: " .. N.last_error())
  end
  p = ffi.gc(p, lib.flemma_sandbox_policy_free)
  for _, root in ipairs(policy.rw_paths or {}) do
    if lib.flemma_sandbox_policy_add_root(p, root) ~= 0 then
      util.error("sandbox: " .. N.last_error())
    end
  end
  for _, path in ipairs(policy.deny_read or {}) do
    if lib.flemma_sandbox_policy_deny_read(p, path) ~= 0 then
      util.error("sandbox: " .. N.last_error())
    end
  end
  return p
end

--- A native policy handle for `policy`, to check many paths against it.
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }
---@return ffi.cdata*
function S.sandbox_policy(policy)
  return H.policy(policy)
end

--- Whether a write to path (relative to cwd) is allowed by the policy.
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }|ffi.cdata* a table, or a handle from sandbox_policy()
---@param path string
---@param cwd string absolute
---@return boolean
function S.sandbox_is_path_writable(policy, path, cwd)
  local handle = type(policy) == "cdata" and policy or H.policy(policy)
  local rc = N.lib().flemma_sandbox_is_path_writable(handle, path, cwd)
  if rc < 0 then
    util.error(N.last_error())
  end
  return rc == 1
end

--- Writes content to path atomically, beneath the policy's roots (see
--- flemma_sandbox_write_file).
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }
---@param path string
---@param cwd string absolute
---@param content string
---@return boolean|nil ok
---@return string|nil err
function S.sandbox_write_file(policy, path, cwd, content)
  local handle = type(policy) == "cdata" and policy or H.policy(policy)
  if N.lib().flemma_sandbox_write_file(handle, path, cwd, content, #content) ~= 0 then
    return nil, N.last_error()
  end
  return true
end

--- argv wrapped for the backend ("bwrap" | "sandbox-exec").
---@param backend string
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }
---@param argv string[]
---@param cwd string absolute
---@param program? string the backend executable
---@return string[]
function S.sandbox_wrap(backend, policy, argv, cwd, program)
  local lib = N.lib()
  local ids = { bwrap = N.C.FLEMMA_SANDBOX_BWRAP, ["sandbox-exec"] = N.C.FLEMMA_SANDBOX_EXEC }
  local id = ids[backend]
  if not id then
    util.error(("sandbox: unknown backend `%s`: use bwrap or sandbox-exec"):format(tostring(backend)))
  end
  local cargv = cdata.cstrings(argv)
  local list = lib.flemma_sandbox_wrap(H.policy(policy), id, cargv, cwd, program)
  if list == nil then
    util.error(N.last_error())
  end
  local out = {}
  for i = 0, tonumber(list.count) - 1 do
    out[#out + 1] = ffi.string(list.items[i])
  end
  lib.flemma_strv_free(list)
  return out
end

--- path made absolute against cwd, `..` folded, symlinks of the existing prefix resolved.
---@param path string
---@param cwd string absolute
---@return string
function S.sandbox_resolve(path, cwd)
  local lib = N.lib()
  -- One call into a reused buffer (approval checks resolve a path per tool call).
  H.resolve_cap = H.resolve_cap or 4096
  H.resolve_buf = H.resolve_buf or ffi.new("char[?]", H.resolve_cap)
  local n = lib.flemma_sandbox_resolve(path, cwd, H.resolve_buf, H.resolve_cap)
  if n < 0 then
    util.error(N.last_error())
  end
  if n >= H.resolve_cap then
    H.resolve_cap = n + 1
    H.resolve_buf = ffi.new("char[?]", H.resolve_cap)
    lib.flemma_sandbox_resolve(path, cwd, H.resolve_buf, H.resolve_cap)
  end
  return ffi.string(H.resolve_buf, n)
end

return S
