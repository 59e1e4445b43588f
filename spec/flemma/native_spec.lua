local native = require("flemma.core.native")

local ffi = require("ffi")

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- The names of the functions the public header exports, read from its text here
-- (not through the binding's own reading of it).
local function header_functions()
  local src = read(FLEMMA_ROOT .. "/native/include/flemma/flemma.h"):gsub("/%*.-%*/", ""):gsub("\n#[^\n]*", "\n")
  local names = {}
  for decl in src:gmatch("FLEMMA_API%s+([^;]+);") do
    names[#names + 1] = assert(decl:match("([%w_]+)%s*%("), decl)
  end
  return names
end

describe("flemma.core.native", function()
  it("declares every function of flemma.h from the header itself, each callable in the library", function()
    local lib = native.lib()
    local names = header_functions()
    assert.is_true(#names > 80, #names)
    for _, name in ipairs(names) do
      local ok, fn = pcall(function()
        return lib[name]
      end)
      assert.is_true(ok, name .. ": " .. tostring(fn))
      assert.equals("cdata", type(fn), name)
      assert.truthy(tostring(ffi.typeof(fn)):match("%("), name) -- a function
    end
    -- The cdef is the header's text without comments and preprocessor lines.
    assert.truthy(native.cdef():find("flemma_doc *flemma_doc_new(const char *text, size_t len);", 1, true))
    assert.falsy(native.cdef():find("FLEMMA_API", 1, true))
    assert.falsy(native.cdef():find("extern", 1, true))
    assert.falsy(native.cdef():find("/*", 1, true))
  end)

  it("reads the header's constants through the FFI, macros included", function()
    assert.equals(4, native.C.FLEMMA_DOC_TOOL_USE)
    assert.equals(-4, native.C.FLEMMA_E_STATE)
    assert.equals(2, native.C.FLEMMA_JSONRPC_NOTIFICATION)
    assert.equals(native.abi_version(), native.C.FLEMMA_ABI_VERSION)
    assert.equals(native.ABI_VERSION, native.C.FLEMMA_ABI_VERSION)
    assert.same(
      { [1] = "system", [2] = "user", [3] = "assistant" },
      native.enum_names("flemma_doc_role", "FLEMMA_DOC_")
    )
    local ok, err = pcall(function()
      return native.C.FLEMMA_NO_SUCH_CONSTANT
    end)
    assert.is_false(ok)
    assert.matches("(flemma) the native header has no constant FLEMMA_NO_SUCH_CONSTANT", err, 1, true)
  end)

  it("turns a header's text into declarations LuaJIT accepts", function()
    local decls = native.declarations(table.concat({
      "/* a comment with a ; and FLEMMA_API */",
      "#ifndef X_H",
      "#define X_H",
      "#ifdef __cplusplus",
      'extern "C" {',
      "#endif",
      "#define FLEMMA_SPEC_A 7 /* seven */",
      "#define FLEMMA_SPEC_B (-3)",
      "enum flemma_spec_kind { FLEMMA_SPEC_ONE = 1, FLEMMA_SPEC_TWO = 2 }; // two",
      "FLEMMA_API int flemma_spec_fn(const char *s,",
      "                              size_t n);",
      "#ifdef __cplusplus",
      "}",
      "#endif",
      "#endif",
    }, "\n"))
    assert.equals(
      table.concat({
        "static const int FLEMMA_SPEC_A = 7;",
        "static const int FLEMMA_SPEC_B = -3;",
        "enum flemma_spec_kind { FLEMMA_SPEC_ONE = 1, FLEMMA_SPEC_TWO = 2 }; ",
        "int flemma_spec_fn(const char *s,",
        "                              size_t n);",
        "",
      }, "\n"),
      decls
    )
    ffi.cdef(decls)
    assert.equals(-3, ffi.C.FLEMMA_SPEC_B)
    assert.equals(2, ffi.C.FLEMMA_SPEC_TWO)
  end)

  it("is the only place that requires ffi", function()
    local offenders = {}
    for _, path in ipairs(vim.fn.globpath(FLEMMA_ROOT .. "/lua", "**/*.lua", false, true)) do
      local rel = path:sub(#FLEMMA_ROOT + 2)
      local src = read(path):gsub("%-%-[^\n]*", "")
      if not rel:match("^lua/flemma/core/native/") and src:match("require%s*%(?%s*[\"']ffi[\"']") then
        offenders[#offenders + 1] = rel
      end
    end
    assert.same({}, offenders)
  end)

  it("names the header's constants, never their numbers, when it reads items and events", function()
    local found = {}
    for _, path in ipairs(vim.fn.globpath(FLEMMA_ROOT .. "/lua/flemma/core/native", "*.lua", false, true)) do
      local n = 0
      for line in read(path):gmatch("[^\n]+") do
        n = n + 1
        local code = line:gsub("%-%-.*", "")
        if
          code:match("%.[%w_]+%s*[=~]=%s*[1-9]")
          or code:match("band%([^,]+,%s*[1-9]")
          or code:match('%[%d+%]%s*=%s*"')
        then
          found[#found + 1] = vim.fs.basename(path) .. ":" .. n .. ": " .. vim.trim(code)
        end
      end
    end
    assert.same({}, found)
  end)

  it("finds the library next to the plugin, not in the current directory", function()
    local override = vim.g.flemma_library_path -- FLEMMA_LIBRARY runs set one
    vim.g.flemma_library_path = nil
    local path = native.library_path()
    assert.equals(FLEMMA_ROOT .. "/build/" .. native.library_name(), path)
    local cwd = vim.fn.getcwd()
    vim.cmd("cd /tmp")
    assert.equals(path, native.library_path())
    vim.cmd("cd " .. vim.fn.fnameescape(cwd))
    vim.g.flemma_library_path = override
  end)

  it("exports only the flemma_ C ABI (no libuv, no C++ symbols)", function()
    local res = vim.system({ "nm", "-D", "--defined-only", native.library_path() }, { text = true }):wait()
    assert.equals(0, res.code, res.stderr)
    local names = {}
    for line in res.stdout:gmatch("[^\n]+") do
      names[#names + 1] = line:match("(%S+)$")
    end
    assert.is_true(#names > 10)
    for _, name in ipairs(names) do
      assert.matches("^flemma_", name)
    end
  end)

  it("loads the library and checks its ABI version", function()
    assert.is_true((native.available()))
    assert.equals(native.ABI_VERSION, native.abi_version())
    assert.is_truthy(native.version():match("^%d+%.%d+%.%d+"))
  end)

  describe("format_size", function()
    it("formats sizes as the spec shows", function()
      assert.equals("0B", native.format_size(0))
      assert.equals("1023B", native.format_size(1023))
      assert.equals("12.1KB", native.format_size(12345))
      assert.equals("50.0KB", native.format_size(51200))
      assert.equals("1.0MB", native.format_size(1024 * 1024))
      assert.equals("2.5GB", native.format_size(2.5 * 1024 * 1024 * 1024))
    end)

    it("refuses a non-number with a clear error", function()
      local ok, err = pcall(native.format_size, "12")
      assert.is_false(ok)
      assert.matches("format_size: `bytes` should be a number, not string", err, 1, true)
    end)
  end)
end)

describe("a library of another ABI version", function()
  local helpers = require("spec.support.helpers")
  after_each(helpers.cleanup)

  it("a plugin directory without the header says so in one line, and nothing is declared", function()
    local dir = helpers.tmpdir()
    -- The plugin's Lua files alone (as a broken install would ship them), the library built here.
    local cp = vim.system({ "cp", "-r", helpers.root .. "/lua", dir .. "/lua" }):wait()
    assert.equals(0, cp.code, cp.stderr)
    local out = dir .. "/result.txt"
    local res = helpers.run_nvim({
      rtp = dir,
      lua = ([[
        vim.g.flemma_library_path = %q
        local native = require("flemma.core.native")
        local ok, err = native.available()
        local ok2, err2 = pcall(function() return native.C.FLEMMA_DOC_TOOL_USE end)
        local declared = pcall(require("ffi").typeof, "flemma_doc_item")
        vim.fn.writefile({ tostring(ok), tostring(err), tostring(ok2), tostring(err2), tostring(declared) }, %q)
      ]]):format(native.library_path(), out),
    })
    assert.equals(0, res.code, res.stderr)
    local header = dir .. "/native/include/flemma/flemma.h"
    local expected = ("the native header %s is missing: the plugin directory is incomplete, reinstall it"):format(
      header
    )
    assert.same(
      { "false", expected, "false", "(flemma) " .. expected, "false" },
      vim.split(helpers.read_file(out), "\n", { trimempty = true })
    )
  end)

  it("is refused with a message that says to rebuild", function()
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/old.c", "int flemma_abi_version(void) { return 1; }\n")
    local cc = vim.system({ "cc", "-shared", "-fPIC", "-o", dir .. "/libold.so", dir .. "/old.c" }):wait()
    assert.equals(0, cc.code, cc.stderr)
    local out = dir .. "/result.txt"
    local res = helpers.run_nvim({
      rtp = helpers.root,
      lua = ([[
        vim.g.flemma_library_path = %q
        local ok, err = pcall(require("flemma.core.native").lib)
        vim.fn.writefile({ tostring(ok), tostring(err) }, %q)
      ]]):format(dir .. "/libold.so", out),
    })
    assert.equals(0, res.code, res.stderr)
    local text = assert(helpers.read_file(out))
    assert.matches("^false\n", text)
    assert.matches(
      ("(flemma) native library %s/libold.so has ABI version 1 but this plugin needs %d: rebuild it with `make` in %s"):format(
        dir,
        native.ABI_VERSION,
        helpers.root
      ),
      text,
      1,
      true
    )
  end)
end)
