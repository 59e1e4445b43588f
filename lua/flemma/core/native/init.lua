--- The binding of the native core (native/include/flemma/flemma.h): this folder is the
--- only place that touches LuaJIT's FFI. This file reads the header itself and feeds its
--- declarations to ffi.cdef (nothing is declared twice), loads build/libflemma_core.so
--- once and checks its ABI version; the files beside it, one per section of the header,
--- return Lua-shaped results (Lua strings, 1-based indices, `nil, err` on failure) and
--- are merged into this module. Memory returned by the library is either copied and
--- freed at once or attached to ffi.gc.
local ffi = require("ffi")
local util = require("flemma.core.util")

local M = {}
local H = {}

-- The sections of the header, in its order; each is a file of this folder that starts
-- with section.new(). Two files serve the others only: `cdata` (C arrays of strings,
-- the event decoder wrapper) and `item` (the items of parsed documents, for `document`
-- and `idoc`).
H.SECTIONS = {
  "cdata",
  "truncate",
  "item",
  "document",
  "idoc",
  "process",
  "search",
  "fileread",
  "sandbox",
  "stream",
  "jsonrpc",
  "escape",
  "isolate",
  "html",
  "shellwords",
}

--- The plugin's root directory, found from this file's own path (never the cwd).
---@return string
function M.root()
  local src = debug.getinfo(1, "S").source
  src = src:sub(1, 1) == "@" and src:sub(2) or src
  local dir = vim.fs.dirname(vim.fs.normalize(vim.fn.fnamemodify(src, ":p")))
  -- lua/flemma/core/native -> the root
  return vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(dir))))
end

--- The public header, shipped in the plugin directory.
---@return string
function M.header_path()
  return M.root() .. "/native/include/flemma/flemma.h"
end

--- The declarations of a header's text as ffi.cdef takes them: comments, the
--- `extern "C"` guards and preprocessor lines removed, FLEMMA_API dropped, and each
--- integer macro (`#define FLEMMA_X 3`) made a `static const int` of the same name.
---@param src string
---@return string
function M.declarations(src)
  src = src:gsub("/%*.-%*/", " "):gsub("//[^\n]*", "")
  src = src:gsub("\n%s*#%s*ifdef%s+__cplusplus%s*\n.-\n%s*#%s*endif[^\n]*", "\n")
  local out = {}
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    local name, value = line:match("^%s*#%s*define%s+(FLEMMA_[%w_]+)%s+%(?%s*(%-?%d+)%s*%)?%s*$")
    if name then
      out[#out + 1] = ("static const int %s = %s;"):format(name, value)
    elseif not line:match("^%s*#") and line:match("%S") then
      out[#out + 1] = (line:gsub("%f[%w_]FLEMMA_API%f[^%w_]%s*", ""))
    end
  end
  return table.concat(out, "\n") .. "\n"
end

H.decl_text = nil

--- All declarations of the header, as passed to ffi.cdef (read once).
---@return string
function M.cdef()
  if not H.decl_text then
    local path = M.header_path()
    local f = io.open(path, "rb")
    if not f then
      util.error(("the native header %s is missing: the plugin directory is incomplete, reinstall it"):format(path))
    end
    local src = f:read("*a")
    f:close()
    H.decl_text = M.declarations(src)
  end
  return H.decl_text
end

-- The members of each named enum of the header: enum name -> list of constant names.
H.enum_members = {}

-- The names of the constants the header declares (enum values and integer macros).
function H.constant_names(decls)
  local names = {}
  for enum, body in decls:gmatch("enum%s+([%w_]+)%s*(%b{})") do
    local members = {}
    for name in body:gmatch("(FLEMMA_[%w_]+)%s*=") do
      names[#names + 1] = name
      members[#members + 1] = name
    end
    H.enum_members[enum] = members
  end
  for name in decls:gmatch("static const int (FLEMMA_[%w_]+)") do
    names[#names + 1] = name
  end
  return names
end

--- The header's constants by name (C.FLEMMA_DOC_TOOL_USE, C.FLEMMA_JSONRPC_ERROR,
--- C.FLEMMA_ABI_VERSION, ...), read through the FFI once the header is declared. A
--- name the header does not have raises (as does every use when it could not be read).
M.C = setmetatable({}, {
  __index = function(_, name)
    util.error(H.declare_error or ("the native header has no constant " .. tostring(name)))
  end,
})

--- The constants of one enum of the header (`enum flemma_stream_event_type`), as a map
--- from each value to its name with `prefix` cut off and lower-cased
--- (FLEMMA_STREAM_TOOL_USE_START -> "tool_use_start" for prefix "FLEMMA_STREAM_").
---@param enum string
---@param prefix string
---@return table<integer, string>
function M.enum_names(enum, prefix)
  local members = H.enum_members[enum]
  if not members then
    util.error(H.declare_error or ("the native header has no enum " .. enum))
  end
  local out = {}
  for _, name in ipairs(members) do
    assert(name:sub(1, #prefix) == prefix, name)
    out[M.C[name]] = name:sub(#prefix + 1):lower()
  end
  return out
end

H.declared = false
H.declare_error = nil

-- Reads the header and declares it (once). The message of a failure is kept: the
-- library cannot be used, and lib() says why.
function H.declare()
  if H.declared or H.declare_error then
    return H.declared
  end
  local ok, err = pcall(function()
    local decls = M.cdef()
    ffi.cdef(decls)
    for _, name in ipairs(H.constant_names(decls)) do
      rawset(M.C, name, ffi.C[name])
    end
  end)
  if not ok then
    H.declare_error = err:sub(1, 9) == "(flemma) " and util.message(err)
      or "cannot declare the native ABI: " .. tostring(err)
    return false
  end
  H.declared = true
  --- The ABI version this plugin's header describes (FLEMMA_ABI_VERSION).
  M.ABI_VERSION = M.C.FLEMMA_ABI_VERSION
  return true
end

--- The file name of the library on this system.
---@return string
function M.library_name()
  if ffi.os == "OSX" then
    return "libflemma_core.dylib"
  elseif ffi.os == "Windows" then
    return "flemma_core.dll"
  end
  return "libflemma_core.so"
end

--- The absolute path where the library is expected (never relative to the cwd);
--- vim.g.flemma_library_path overrides it (FLEMMA_LIBRARY for specs and benchmarks).
---@return string
function M.library_path()
  if vim.g.flemma_library_path then
    return vim.g.flemma_library_path
  end
  return M.root() .. "/build/" .. M.library_name()
end

H.lib = nil
H.load_error = nil

function H.build_hint()
  return "build it with `make` in " .. M.root() .. " (or `:Flemma build`)"
end

-- What usable() says when the library cannot be used: one short line (it must fit the
-- message area without a hit-enter prompt), naming the command that fixes it; the
-- full error (path, versions) is what available() returns (:checkhealth, :Flemma status).
H.short_error = nil

function H.load()
  local path = M.library_path()
  if vim.uv.fs_stat(path) == nil then
    H.short_error = "the native library is not built yet: run :Flemma build"
    return nil, ("native library not found at %s: %s"):format(path, H.build_hint())
  end
  H.short_error = "the native library cannot be used (:checkhealth flemma): run :Flemma build"
  if not H.declare() then
    return nil, H.declare_error
  end
  local ok, lib = pcall(ffi.load, path)
  if not ok then
    return nil,
      ("cannot load native library %s (%s): rebuild it with `make` in %s"):format(path, tostring(lib), M.root())
  end
  local version = lib.flemma_abi_version()
  if version ~= M.ABI_VERSION then
    H.short_error = "the native library is out of date: run :Flemma build"
    return nil,
      ("native library %s has ABI version %d but this plugin needs %d: rebuild it with `make` in %s"):format(
        path,
        version,
        M.ABI_VERSION,
        M.root()
      )
  end
  return lib
end

--- Returns the loaded library, loading it on first use. Raises one clear error
--- (naming the path and the build command) if it cannot be used.
---@return ffi.namespace*
function M.lib()
  if H.lib then
    return H.lib
  end
  if H.load_error then
    util.error(H.load_error)
  end
  local lib, err = H.load()
  if not lib then
    H.load_error = err
    util.error(err)
  end
  H.lib = lib
  return lib
end

--- Whether the library can be used, without raising.
---@return boolean ok
---@return string? err
function M.available()
  local ok, err = pcall(M.lib)
  if ok then
    return true
  end
  return false, util.message(err)
end

H.notified = false

--- Whether the library can be used; when it cannot, says so once per session, in one
--- line that names the fix (`:Flemma build`), instead of an error on every keystroke.
--- The line is a warning shown after the current event (an autocommand that asked
--- gets no "Error in ... Autocommands" and no hit-enter prompt).
---@return boolean
function M.usable()
  local ok, err = M.available()
  if not ok and not H.notified then
    H.notified = true
    local short = H.short_error or err
    vim.schedule(function()
      util.notify(short, vim.log.levels.WARN)
    end)
  end
  return ok
end

--- Whether the library is loaded in this Neovim (a rebuilt one is used after a restart).
---@return boolean
function M.loaded()
  return H.lib ~= nil
end

--- Forgets a failed load so that the next use tries again (after `make`).
function M.reset()
  if not H.lib then
    H.load_error = nil
    H.short_error = nil
    H.notified = false
  end
end

--- The message of the last failed native call on this thread.
---@return string
function M.last_error()
  return ffi.string(M.lib().flemma_last_error())
end

---@return integer
function M.abi_version()
  return M.lib().flemma_abi_version()
end

---@return string
function M.version()
  return ffi.string(M.lib().flemma_version())
end

H.declare()

-- The sections: each gets this module (its library, constants and the other
-- sections' functions, through `__bind`: see section.lua) and adds its public functions
-- to it.
for _, name in ipairs(H.SECTIONS) do
  local section = require("flemma.core.native." .. name)
  section.__bind(M)
  for key, value in pairs(section.__internal and {} or section) do
    if key:sub(1, 2) ~= "__" then
      assert(M[key] == nil, "flemma.core.native: two sections define " .. key)
      M[key] = value
    end
  end
end

return M
