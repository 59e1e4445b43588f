local native = require("flemma.native")

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- The function declarations of the public header, normalized.
local function header_declarations()
  local src = read(FLEMMA_ROOT .. "/native/include/flemma/flemma.h")
  src = src:gsub("/%*.-%*/", ""):gsub("//[^\n]*", ""):gsub("\n#[^\n]*", "\n")
  local decls = {}
  for decl in src:gmatch("FLEMMA_API%s+([^;]+);") do
    decls[#decls + 1] = (decl:gsub("%s+", " "):gsub(" %*", " *"):gsub("%* ", "*"))
  end
  return decls
end

local function cdef_declarations()
  local decls = {}
  local src = native.cdef():gsub("/%*.-%*/", ""):gsub("//[^\n]*", "")
  for decl in src:gmatch("([^;]+);") do
    decl = vim.trim(decl)
    if decl:match("%(") and not decl:match("^typedef") and not decl:match("^struct") then
      decls[#decls + 1] = (decl:gsub("%s+", " "):gsub(" %*", " *"):gsub("%* ", "*"))
    end
  end
  return decls
end

describe("flemma.native", function()
  it("declares exactly the functions of flemma.h, with the same signatures", function()
    local h, c = header_declarations(), cdef_declarations()
    table.sort(h)
    table.sort(c)
    assert.is_true(#h >= 4)
    assert.same(h, c)
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
        local ok, err = pcall(require("flemma.native").lib)
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
