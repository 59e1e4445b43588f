local truncate = require("flemma.core.truncate")

local function numbered(from, to)
  local t = {}
  for i = from, to do
    t[#t + 1] = tostring(i)
  end
  return table.concat(t, "\n") .. "\n"
end

local function valid_utf8(s)
  local i = 1
  while i <= #s do
    local c = s:byte(i)
    local n = c < 0x80 and 1
      or (c >= 0xC2 and c < 0xE0) and 2
      or (c >= 0xE0 and c < 0xF0) and 3
      or (c >= 0xF0 and c < 0xF5) and 4
      or 0
    if n == 0 or i + n - 1 > #s then
      return false
    end
    for k = i + 1, i + n - 1 do
      local b = s:byte(k)
      if b < 0x80 or b > 0xBF then
        return false
      end
    end
    i = i + n
  end
  return true
end

describe("flemma.core.truncate", function()
  it("exposes the default limits", function()
    assert.equal(2000, truncate.MAX_LINES)
    assert.equal(51200, truncate.MAX_BYTES)
  end)

  it("formats sizes", function()
    assert.equal("12.1KB", truncate.format_size(12345))
    assert.equal("512B", truncate.format_size(512))
  end)

  describe("truncate_tail", function()
    it("keeps the last MAX_LINES lines by default", function()
      local r = truncate.truncate_tail(numbered(1, 2500))
      assert.is_true(r.truncated)
      assert.equal("lines", r.truncated_by)
      assert.equal(2500, r.total_lines)
      assert.equal(2000, r.output_lines)
      assert.equal("501\n", r.content:sub(1, 4))
      assert.equal(#r.content, r.output_bytes)
    end)

    it("returns short text unchanged", function()
      local r = truncate.truncate_tail("a\nb")
      assert.is_false(r.truncated)
      assert.is_nil(r.truncated_by)
      assert.equal("a\nb", r.content)
      assert.equal(2, r.total_lines)
    end)

    it("cuts by bytes with the limits given", function()
      local r = truncate.truncate_tail(numbered(1, 100), { max_bytes = 10 })
      assert.equal("bytes", r.truncated_by)
      assert.equal("98\n99\n100\n", r.content)
    end)

    it("keeps the end of an over-long last line without splitting a code point", function()
      local r = truncate.truncate_tail(("é"):rep(100), { max_bytes = 64 })
      assert.is_true(r.last_line_partial)
      assert.is_true(#r.content <= 64)
      assert.is_truthy(r.content:find("line cut", 1, true))
      assert.is_true(valid_utf8(r.content))
      assert.equal("é", r.content:sub(-2))
    end)
  end)

  describe("truncate_head", function()
    it("keeps the first lines", function()
      local r = truncate.truncate_head(numbered(1, 10), { max_lines = 2 })
      assert.equal("1\n2\n", r.content)
      assert.equal(10, r.total_lines)
    end)

    it("cuts an over-long first line with a marker", function()
      local r = truncate.truncate_head(("x"):rep(500) .. "\nrest", { max_bytes = 100 })
      assert.is_true(r.first_line_exceeds_limit)
      assert.is_true(#r.content <= 100)
      assert.is_truthy(r.content:find("line cut", 1, true))
    end)

    it("rejects bad options with a message that names the option", function()
      local ok, err = pcall(truncate.truncate_head, "x", { max_lines = -1 })
      assert.is_false(ok)
      assert.is_truthy(err:find("`max_lines` should be a positive integer", 1, true))
      ok, err = pcall(truncate.truncate_tail, 42)
      assert.is_false(ok)
      assert.is_truthy(err:find("`text` should be a string", 1, true))
    end)
  end)
end)
