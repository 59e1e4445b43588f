-- The layers of the Lua code (spec/support/layers.lua declares them, doc/architecture.md
-- draws them): every require, also inside functions, in pcall(require, ...) and
-- package.loaded[...], points to the module's own layer or one below, and no modules
-- require each other in a cycle.
local helpers = require("spec.support.helpers")
local layers = require("spec.support.layers")

describe("the Lua layers", function()
  local graph = layers.graph(helpers.root)

  it("place every module of lua/ in a layer", function()
    assert.same({}, layers.unplaced(graph))
  end)

  it("have no edge that points up", function()
    assert.same({}, layers.upward(graph))
  end)

  it("have no cycle", function()
    local named = {}
    for _, c in ipairs(layers.cycles(graph)) do
      named[#named + 1] = table.concat(c, " <-> ")
    end
    assert.same({}, named)
  end)

  it("have no module that defines one of its functions twice (no wrapping and redefining)", function()
    local twice = {}
    for name, path in pairs(graph.modules) do
      for _, key in ipairs(layers.redefined(path)) do
        twice[#twice + 1] = name .. ": " .. key
      end
    end
    table.sort(twice)
    assert.same({}, twice)
  end)

  it("find a function defined again, also by assignment", function()
    local path = helpers.tmpdir() .. "/m.lua"
    helpers.write_file(
      path,
      "function M.send() end\nlocal send = M.send\nM.send = function() send() end\nM.x = 1\nM.x = 2\nfunction H.Handle:cancel() end\n"
    )
    assert.same({ "M.send" }, layers.redefined(path))
  end)

  -- The native core is held to the same count by clang-tidy's readability-function-size
  -- (.clang-tidy, make lint).
  it("have no function longer than 100 lines (a longer one reads as named steps)", function()
    local long = {}
    for name, path in pairs(graph.modules) do
      local src = assert(io.open(path, "rb")):read("*a")
      for _, f in ipairs(layers.long_functions(src, 100)) do
        long[#long + 1] = ("%s:%d %s (%d lines)"):format(name, f.line, f.name, f.lines)
      end
    end
    table.sort(long)
    assert.same({}, long)
  end)

  it("measure a function from its `function` to its `end`, over every kind of block", function()
    local function body(n)
      local out = {}
      for i = 1, n do
        out[i] = ("  local x%d = 'end' -- end"):format(i)
      end
      return table.concat(out, "\n")
    end
    local src = table.concat({
      "local M, H = {}, {}",
      "function M.long()", -- line 2: 99 lines, then the end at line 103 (101 lines)
      body(99),
      "  if a then b() elseif c then d() else e() end",
      "end",
      "function H.Obj:fits()", -- 100 lines: kept
      "  for i = 1, 2 do while x do repeat y() until z end end",
      "  local s = [[ function end ]]",
      body(96),
      "  do f() end",
      "end",
      "M.set = function()", -- an anonymous function is named by what it is assigned to
      "  local t = { cb = function()",
      body(100),
      "  end }",
      "end",
      "return M",
    }, "\n")
    local got = {}
    for _, f in ipairs(layers.long_functions(src, 100)) do
      got[#got + 1] = ("%s:%d:%d"):format(f.name, f.line, f.lines)
    end
    assert.same({ "M.long:2:101", "cb:206:101", "M.set:205:103" }, got)
  end)

  it("keep the isolated modules off Neovim's API", function()
    for name, path in pairs(graph.modules) do
      if layers.layer_of(name) == 1 then
        local src = assert(io.open(path)):read("*a")
        assert.is_nil(src:find("vim%.api"), name .. " uses vim.api")
        assert.is_nil(src:find("vim%.fn"), name .. " uses vim.fn")
        assert.is_nil(src:find("vim%.uv") or src:find("vim%.loop"), name .. " uses the event loop")
      end
    end
  end)

  it("find requires where they hide and skip comments and strings", function()
    local refs = layers.refs(table.concat({
      'local a = require("flemma.one")',
      "local function f() return require 'flemma.two' end",
      'local ok, m = pcall(require, "flemma.three")',
      'local l = package.loaded["flemma.four"]',
      '-- require("flemma.comment")',
      '--[[ require("flemma.block") ]]',
      'local s = "require(\\"flemma.string\\")"',
      "local t = [[ require('flemma.long') ]]",
      'local x = obj.require("flemma.method")',
    }, "\n"))
    assert.same({ "flemma.one", "flemma.two", "flemma.three", "flemma.four" }, refs)
  end)

  it("name an upward edge and a cycle", function()
    local g = {
      modules = { ["flemma.core.a"] = "", ["flemma.ui.b"] = "", ["flemma.core.c"] = "" },
      edges = {
        ["flemma.core.a"] = { ["flemma.ui.b"] = true, ["flemma.core.c"] = true },
        ["flemma.ui.b"] = {},
        ["flemma.core.c"] = { ["flemma.core.a"] = true },
      },
    }
    assert.same({ "flemma.core.a (core) -> flemma.ui.b (ui)" }, layers.upward(g))
    assert.same({ { "flemma.core.a", "flemma.core.c" } }, layers.cycles(g))
  end)

  it("keep the public entry modules of the contract", function()
    assert.equals(require("flemma.chat.document"), require("flemma.document"))
    assert.equals(require("flemma.policy.secrets"), require("flemma.secrets"))
    assert.is_function(require("flemma.tools").register)
    assert.is_function(require("flemma.tools.approval").register)
  end)
end)
