--- The OS sandbox for tool commands: a policy (writable roots, network on or off)
--- turns an argv into one run under bubblewrap (Linux) or sandbox-exec (macOS).
--- Enabled by `sandbox.enabled` or at runtime with :Flemma sandbox:enable. When
--- the sandbox is on but its backend cannot run, wrapping fails: a command is
--- never run unsandboxed behind the user's back. This is `ctx.sandbox` for tools.
local native = require("flemma.core.native")
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.sandbox.Policy
---@field rw_paths string[] writable roots (missing ones are skipped)
---@field network boolean
---@field deny_read? string[] absolute paths hidden from commands (nil: M.deny_read())

H.override = nil ---@type boolean|nil runtime toggle; nil follows the config
H.probes = {} ---@type table<string, { ok: boolean, err: string|nil }>

function H.config()
  return require("flemma.core.config").get().sandbox
end

--- Whether commands are sandboxed (the config, unless toggled at runtime).
---@return boolean
function M.is_enabled()
  if H.override ~= nil then
    return H.override
  end
  return H.config().enabled == true
end

--- Turns the sandbox on or off for this session (nil: follow the config again).
---@param enabled boolean|nil
function M.set_enabled(enabled)
  if enabled ~= nil and type(enabled) ~= "boolean" then
    util.error("sandbox.set_enabled: `enabled` should be a boolean, not " .. type(enabled))
  end
  H.override = enabled
end

H.defaults_by_os = { Linux = "bwrap", OSX = "sandbox-exec" }

--- The backend in use: `sandbox.backend`, with "auto" resolved for this system.
---@return string|nil name
---@return string|nil err
function M.backend()
  local configured = H.config().backend or "auto"
  if configured ~= "auto" then
    return configured
  end
  local name = H.defaults_by_os[jit.os]
  if not name then
    return nil,
      ("no sandbox backend for %s: the sandbox needs Linux (bubblewrap) or macOS (sandbox-exec)"):format(jit.os)
  end
  return name
end

function H.probe(name)
  if vim.fn.executable(name) ~= 1 then
    local hint = name == "bwrap" and "install bubblewrap (e.g. `apt install bubblewrap`)" or "it ships with macOS"
    return false, ("`%s` is not installed or not on PATH: %s"):format(name, hint)
  end
  local argv = native.sandbox_wrap(
    name,
    { rw_paths = { vim.fn.getcwd() }, network = false },
    { "true" },
    vim.fn.getcwd()
  )
  local ok, res = pcall(function()
    return vim.system(argv, { text = true }):wait(5000)
  end)
  if not ok then
    return false, ("the probe run of `%s` failed: %s"):format(name, util.message(res))
  end
  if res.code ~= 0 then
    local msg = vim.trim(res.stderr or "")
    return false,
      ("the probe run of `%s` failed (exit %s%s)"):format(name, tostring(res.code), msg ~= "" and (": " .. msg) or "")
  end
  return true
end

--- Whether a backend works here: a probe run, cached per backend.
---@param backend? string default: M.backend()
---@return boolean ok
---@return string|nil err
function M.is_available(backend)
  local name, err = backend
  if name == nil then
    name, err = M.backend()
    if not name then
      return false, err
    end
  end
  if name ~= "bwrap" and name ~= "sandbox-exec" then
    return false, ("unknown sandbox backend `%s`: use bwrap or sandbox-exec"):format(tostring(name))
  end
  local cached = H.probes[name]
  if not cached then
    local ok, perr = H.probe(name)
    cached = { ok = ok, err = perr }
    H.probes[name] = cached
  end
  return cached.ok, cached.err
end

--- Forgets the cached probe results (after installing a backend).
function M.reset_probe()
  H.probes = {}
end

function H.add(list, seen, path)
  if type(path) ~= "string" or path == "" then
    return
  end
  path = vim.fs.normalize(vim.fn.expand(path))
  if not seen[path] then
    seen[path] = true
    list[#list + 1] = path
  end
end

-- The absolute paths an entry of `sandbox.deny_read` names: `~` is $HOME,
-- `$NAME` or `${NAME}` at the start an environment variable (none when it is
-- unset or empty); `~/.config/...` names $XDG_CONFIG_HOME/... too and
-- `~/.local/share/...` $XDG_DATA_HOME/... when they are set elsewhere.
function H.expand_entry(entry)
  local home = vim.env.HOME
  local out = {}
  local function add(p)
    if p and p:sub(1, 1) == "/" then
      p = vim.fs.normalize(p)
      if not vim.tbl_contains(out, p) then
        out[#out + 1] = p
      end
    end
  end
  local head, rest = entry:match("^%$%{?([%a_][%w_]*)%}?(.*)$")
  if head then
    local v = vim.env[head]
    if v and v ~= "" then
      add(v .. rest)
    end
    return out
  end
  if entry == "~" or entry:sub(1, 2) == "~/" then
    if not home or home == "" then
      return out
    end
    add(home .. entry:sub(2))
    for _, xdg in ipairs({ { "~/.config/", "XDG_CONFIG_HOME" }, { "~/.local/share/", "XDG_DATA_HOME" } }) do
      local dir = vim.env[xdg[2]]
      if dir and dir ~= "" and entry:sub(1, #xdg[1]) == xdg[1] then
        add(dir .. "/" .. entry:sub(#xdg[1] + 1))
      end
    end
    return out
  end
  add(entry)
  return out
end

--- The paths hidden from sandboxed commands: `sandbox.deny_read` read in order,
--- `$default` standing for the secret places of flemma.secret_paths (its
--- HOME_ENTRIES: keys, credentials, browser profiles; and Neovim's stdpath("data")
--- and stdpath("state")), an entry `!path` taking path out again. Absolute and
--- normalized; missing ones included (the native side skips them).
---@return string[]
function M.deny_read()
  local list = {}
  local function add(paths)
    for _, p in ipairs(paths) do
      if not vim.tbl_contains(list, p) then
        list[#list + 1] = p
      end
    end
  end
  for _, entry in ipairs(H.config().deny_read or {}) do
    if entry == "$default" then
      add(require("flemma.policy.secret_paths").paths())
    elseif entry:sub(1, 1) == "!" then
      local drop = H.expand_entry(entry:sub(2))
      list = vim.tbl_filter(function(p)
        return not vim.tbl_contains(drop, p)
      end, list)
    else
      add(H.expand_entry(entry))
    end
  end
  return list
end

--- The policy for a buffer: `sandbox.policy.rw_paths` (default: the cwd, the
--- buffer's directory, /tmp and $TMPDIR), `network` and `deny_read` (M.deny_read()). Not the cache directory:
--- code runs from it later (vim.loader's cache). $HOME is never a root as a
--- whole (the native side keeps only its entries that are not hidden).
---@param bufnr? integer
---@return flemma.sandbox.Policy
function M.policy(bufnr)
  local cfg = H.config().policy or {}
  local roots, seen = {}, {}
  if cfg.rw_paths then
    for _, p in ipairs(cfg.rw_paths) do
      H.add(roots, seen, p)
    end
  else
    H.add(roots, seen, vim.fn.getcwd())
    bufnr = bufnr or vim.api.nvim_get_current_buf()
    if vim.api.nvim_buf_is_valid(bufnr) then
      local name = vim.api.nvim_buf_get_name(bufnr)
      if name ~= "" then
        H.add(roots, seen, vim.fs.dirname(vim.fn.fnamemodify(name, ":p")))
      end
    end
    H.add(roots, seen, "/tmp")
    H.add(roots, seen, vim.env.TMPDIR)
  end
  return { rw_paths = roots, network = cfg.network ~= false, deny_read = M.deny_read() }
end

function H.check_policy(policy)
  if policy == nil then
    return M.policy()
  end
  if type(policy) ~= "table" or type(policy.rw_paths) ~= "table" then
    util.error("sandbox: a policy should be a table { rw_paths = string[], network = boolean, deny_read? = string[] }")
  end
  if policy.deny_read ~= nil and type(policy.deny_read) ~= "table" then
    util.error("sandbox: a policy's deny_read should be a list of paths")
  end
  -- Without deny_read, the configured one (hidden stays hidden).
  return { rw_paths = policy.rw_paths, network = policy.network ~= false, deny_read = policy.deny_read or M.deny_read() }
end

--- The argv that runs `argv` inside the sandbox; argv unchanged when the sandbox
--- is disabled; nil and an error when it is enabled but cannot run.
---@param argv string[]
---@param policy? flemma.sandbox.Policy default: M.policy()
---@return string[]|nil
---@return string|nil err
function M.wrap_command(argv, policy)
  if type(argv) ~= "table" or #argv == 0 then
    util.error("sandbox.wrap_command: `argv` should be a non-empty list of strings")
  end
  if not M.is_enabled() then
    return argv
  end
  local name, err = M.backend()
  if not name then
    return nil, "sandbox enabled but unavailable: " .. err
  end
  local ok, perr = M.is_available(name)
  if not ok then
    return nil,
      ("sandbox enabled but `%s` cannot run: %s (or disable it with :Flemma sandbox:disable)"):format(name, perr)
  end
  return native.sandbox_wrap(name, H.check_policy(policy), argv, vim.fn.getcwd())
end

--- Whether the policy allows a write to path (`..` and symlinks resolved; the
--- protected .git/hooks, .git/config and shell start-up files refused). True for
--- every path when the sandbox is disabled.
---@param path string
---@param policy? flemma.sandbox.Policy
---@return boolean
function M.is_path_writable(path, policy)
  if type(path) ~= "string" then
    util.error("sandbox.is_path_writable: `path` should be a string, not " .. type(path))
  end
  if not M.is_enabled() then
    return true
  end
  return native.sandbox_is_path_writable(H.check_policy(policy), path, vim.fn.getcwd())
end

--- Writes content to path atomically and beneath the writable roots, even while a
--- sandboxed command swaps symlinks in the path (the native side opens the path
--- from the root's directory with openat2 RESOLVE_BENEATH and renames a
--- temporary file in place). Needs the sandbox on.
---@param path string
---@param content string
---@param policy? flemma.sandbox.Policy
---@return boolean ok
---@return string|nil err
function M.write_file(path, content, policy)
  if type(path) ~= "string" or type(content) ~= "string" then
    util.error("sandbox.write_file: `path` and `content` should be strings")
  end
  local ok, err = native.sandbox_write_file(H.check_policy(policy), path, vim.fn.getcwd(), content)
  if not ok then
    return false, (tostring(err):gsub("^sandbox: ", ""))
  end
  return true
end

--- A one-paragraph description of the sandbox state.
---@return string
function M.status()
  local lines = {}
  local enabled = M.is_enabled()
  local name, err = M.backend()
  local state = enabled and "enabled" or "disabled"
  if not name then
    lines[#lines + 1] = ("sandbox %s; no backend: %s"):format(state, err)
  else
    local ok, perr = M.is_available(name)
    lines[#lines + 1] = ("sandbox %s; backend %s %s"):format(
      state,
      name,
      ok and "available" or ("unavailable: " .. tostring(perr))
    )
  end
  local policy = M.policy()
  lines[#lines + 1] = "writable: " .. table.concat(policy.rw_paths, ", ")
  lines[#lines + 1] = "network: " .. (policy.network and "on" or "off")
  local shown = {}
  for _, p in ipairs(policy.deny_read) do
    if vim.uv.fs_stat(p) then
      shown[#shown + 1] = p
    end
  end
  lines[#lines + 1] = "hidden: " .. (#shown > 0 and table.concat(shown, ", ") or "nothing")
  return table.concat(lines, "\n")
end

--- The :Flemma subcommands this module implements (flemma.commands gathers them).
---@type table<string, flemma.Subcommand>
M.commands = {}

M.commands["sandbox:enable"] = {
  desc = "sandbox tool commands for this session",
  run = function()
    M.set_enabled(true)
    local ok, err = M.is_available()
    if ok then
      util.notify("sandbox enabled (" .. M.backend() .. ")")
    else
      util.warn("sandbox enabled, but commands will fail until it can run: " .. tostring(err))
    end
  end,
}
M.commands["sandbox:disable"] = {
  desc = "run tool commands without the sandbox for this session",
  run = function()
    M.set_enabled(false)
    util.notify("sandbox disabled")
  end,
}
M.commands["sandbox:status"] = {
  desc = "show whether the sandbox is on, its backend and policy",
  run = function()
    util.notify(M.status())
  end,
}

return M
