-- The audit log (flemma.policy.audit): an input with long strings is digested on a
-- libuv thread; its line holds the same digest as the main loop's (sha256 of the JSON
-- with sorted keys, escaped as vim.json.encode escapes it) and the lines keep the
-- order they were recorded in. (Its cost on the main loop: bench audit_record_10mb_input.)
local helpers = require("spec.support.helpers")

describe("audit log", function()
  local audit = require("flemma.policy.audit")
  local path

  before_each(function()
    path = helpers.tmpdir() .. "/audit.jsonl"
    audit.set_path(path)
  end)

  after_each(function()
    audit.set_path(nil)
  end)

  local function lines()
    assert.is_true(vim.wait(20000, function()
      return not audit.pending()
    end, 5))
    return vim.tbl_map(vim.json.decode, vim.fn.readfile(path))
  end

  it("digests a long input off the main loop as it digests a short one, in the order recorded", function()
    -- Every byte JSON escapes, `/` and non-ASCII, across the thread's pieces.
    local bytes = {}
    for c = 1, 255 do
      bytes[#bytes + 1] = string.char(c)
    end
    local long = table.concat(bytes):rep(2000)
    assert.is_true(#long > audit.BIG_STRING)
    local input = { path = "a/b.lua", content = long, nested = { long, "x", 3, { true } }, label = vim.NIL }
    audit.record({ event = "decision", tool = "write", id = "long", input = input })
    audit.record({ event = "decision", tool = "bash", id = "short", input = { command = "echo one", label = "x" } })
    audit.record({ event = "run", tool = "write", id = "none" })
    local got = lines()
    assert.same(
      { "long", "short", "none" },
      vim.tbl_map(function(e)
        return e.id
      end, got)
    )
    local sorted = ('{"content":%s,"label":null,"nested":[%s,"x",3,[true]],"path":%s}'):format(
      vim.json.encode(long),
      vim.json.encode(long),
      vim.json.encode("a/b.lua")
    )
    assert.equals("sha256:" .. vim.fn.sha256(sorted), got[1].input_sha256)
    assert.equals(audit.digest(input), got[1].input_sha256)
    assert.equals("sha256:" .. vim.fn.sha256('{"command":"echo one","label":"x"}'), got[2].input_sha256)
    assert.is_nil(got[3].input_sha256)
  end)
  it("flemma.core.sha256 agrees with vim.fn.sha256 at every length across three blocks", function()
    local sha = require("flemma.core.sha256")
    for n = 0, 200 do
      local t = {}
      for j = 1, n do
        t[j] = string.char((j * 37 + n) % 255 + 1)
      end
      local x = table.concat(t)
      assert.equals(vim.fn.sha256(x), sha.hex(x), "length " .. n)
    end
  end)
end)
