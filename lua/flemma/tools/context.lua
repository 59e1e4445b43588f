--- ExecutionContext: what a tool's `execute(input, ctx, callback)` receives. Tools
--- code against this object and never require Flemma's internal modules.
---
--- Fields: `bufnr`, `cwd`, `timeout` (seconds), `__dirname`, `__filename` (nil for an
--- unsaved buffer). Namespaces `path`, `sandbox` and `truncate` are built on first
--- access (an unused namespace costs nothing). `ctx:get_config()` returns a deep copy
--- of `config.tools[tool_name]`, or nil.
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.tools.Context
---@field bufnr integer
---@field cwd string
---@field timeout number
---@field __dirname string|nil
---@field __filename string|nil
---@field path { resolve: fun(path: string): string }
---@field sandbox { is_path_writable: fun(path: string): boolean, wrap_command: fun(argv: string[]): string[]|nil, string|nil, write_file: fun(path: string, content: string): boolean, string|nil }
---@field truncate table the flemma.truncate functions and constants
local Context = {}

-- Tool names are kept aside (weak keys) so that the context shows only the spec's fields.
H.tool_names = setmetatable({}, { __mode = "k" })
-- Progress listeners of the caller (e.g. the spinner), for built-in tools only.
H.progress = setmetatable({}, { __mode = "k" })

-- Builders of the lazy namespaces, keyed by field name.
H.lazy = {}

function H.lazy.path(ctx)
  return {
    --- An absolute path: relative paths are resolved against the buffer's directory
    --- (or cwd for an unsaved buffer); absolute paths pass through (normalized).
    resolve = function(path)
      if type(path) ~= "string" or path == "" then
        util.error("path.resolve: expected a non-empty string, not " .. vim.inspect(path))
      end
      if path:sub(1, 1) == "~" then
        path = vim.fs.normalize(path)
      end
      if path:sub(1, 1) ~= "/" then
        path = (ctx.__dirname or ctx.cwd) .. "/" .. path
      end
      return vim.fs.normalize(path)
    end,
  }
end

function H.lazy.sandbox(ctx)
  local function backend()
    local ok, sandbox = pcall(require, "flemma.policy.sandbox")
    if ok and type(sandbox) == "table" then
      return sandbox
    end
    return nil
  end
  local function policy(sandbox)
    if type(sandbox.policy) == "function" then
      return sandbox.policy(ctx.bufnr)
    end
    return nil
  end
  return {
    --- Whether the sandbox policy lets tools write `path` (always true when off).
    is_path_writable = function(path)
      local sandbox = backend()
      if not sandbox or not sandbox.is_enabled() then
        return true
      end
      return sandbox.is_path_writable(ctx.path.resolve(path), policy(sandbox)) == true
    end,
    --- Writes `content` to `path` atomically (a temporary file renamed in place,
    --- missing directories created). While the sandbox is on, the write lands
    --- beneath the writable roots even if a command swaps symlinks in the path.
    ---@return boolean ok
    ---@return string|nil err
    write_file = function(path, content)
      local sandbox = backend()
      path = ctx.path.resolve(path)
      if not sandbox or not sandbox.is_enabled() then
        return require("flemma.tools.builtin.fs").atomic_write(path, content)
      end
      return sandbox.write_file(path, content, policy(sandbox))
    end,
    --- The argv wrapped for the sandbox (unchanged when it is off), or nil, err.
    wrap_command = function(argv)
      local sandbox = backend()
      if not sandbox or not sandbox.is_enabled() then
        return argv
      end
      return sandbox.wrap_command(argv, policy(sandbox))
    end,
  }
end

function H.lazy.truncate()
  local ok, truncate = pcall(require, "flemma.core.truncate")
  if ok and type(truncate) == "table" then
    return truncate
  end
  -- The runtime module is missing: expose what the native core offers.
  return {
    MAX_LINES = 2000,
    MAX_BYTES = 51200,
    format_size = require("flemma.core.native").format_size,
  }
end

Context.__index = function(self, key)
  local build = H.lazy[key]
  if build then
    local value = build(self)
    rawset(self, key, value)
    return value
  end
  return Context[key]
end

--- A deep copy of `config.tools[<tool name>]`, or nil when there is no such table.
---@return table|nil
function Context:get_config()
  local name = H.tool_names[self]
  local tools = require("flemma.core.config").get().tools or {}
  local sub = name and tools[name]
  if type(sub) ~= "table" then
    return nil
  end
  return vim.deepcopy(sub)
end

--- Builds the context of one execution.
---@param bufnr integer
---@param tool_name string
---@param opts? { on_progress?: fun(progress: table) }
---@return flemma.tools.Context
function M.new(bufnr, tool_name, opts)
  if bufnr == nil or bufnr == 0 then
    bufnr = vim.api.nvim_get_current_buf()
  end
  local filename
  if vim.api.nvim_buf_is_valid(bufnr) then
    local name = vim.api.nvim_buf_get_name(bufnr)
    if name ~= "" and vim.bo[bufnr].buftype == "" then
      filename = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
    end
  end
  local cfg = require("flemma.core.config").get().tools or {}
  local ctx = setmetatable({
    bufnr = bufnr,
    cwd = vim.fs.normalize(vim.fn.getcwd()),
    timeout = cfg.default_timeout or 30,
    __filename = filename,
    __dirname = filename and vim.fs.dirname(filename) or nil,
  }, Context)
  H.tool_names[ctx] = tool_name
  H.progress[ctx] = opts and opts.on_progress
  return ctx
end

--- The caller's progress listener of an execution, or nil (used by built-in tools;
--- not part of the context's public shape).
---@param ctx flemma.tools.Context
---@return fun(progress: table)|nil
function M.progress_listener(ctx)
  return H.progress[ctx]
end

--- Whether a namespace has been built on this context (for tests of laziness).
---@param ctx flemma.tools.Context
---@param name string
---@return boolean
function M.is_loaded(ctx, name)
  return rawget(ctx, name) ~= nil
end

return M
