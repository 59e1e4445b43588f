-- The tree the search benchmarks run over, generated once into /tmp (reused while
-- its stamp file says it is complete): FILES files of about SIZE bytes in nested
-- folders (100 per folder), one in four a `.c` file, text of words with numbers.
-- One file in 200 holds the literal NEEDLE; one in 50 a line matching REGEX.
-- The default is the issue's 100,000 files / 1 GB (about 10 s to write on a
-- shared 2-core machine); FLEMMA_BENCH_SEARCH_FILES and FLEMMA_BENCH_SEARCH_SIZE
-- choose a smaller tree, and the benchmark lines say which was used.
local M = {}

M.FILES = tonumber(os.getenv("FLEMMA_BENCH_SEARCH_FILES") or "") or 100000
M.SIZE = tonumber(os.getenv("FLEMMA_BENCH_SEARCH_SIZE") or "") or 10486
M.NEEDLE = "xq_needle_literal"
M.REGEX = "fn_[0-9]+_handler\\("
M.DIR = ("/tmp/flemma-bench-search-%d-%d"):format(M.FILES, M.SIZE)

local words = {
  "static",
  "int",
  "return",
  "const",
  "char",
  "buffer",
  "length",
  "value",
  "struct",
  "node",
  "while",
  "for",
  "if",
  "else",
  "size_t",
  "count",
  "index",
  "result",
  "error",
  "flags",
}

-- A few distinct bodies, reused: generating 200 MB of fresh random text in Lua
-- would dominate the set-up.
local function body(seed, size, extra)
  local lines, n = {}, 0
  local total = 0
  while total < size do
    seed = (seed * 1103515245 + 12345) % 2147483648
    local w = {}
    for i = 1, 6 + seed % 8 do
      w[i] = words[1 + (seed + i * 7) % #words]
    end
    local line = table.concat(w, " ") .. " " .. tostring(seed % 100000) .. ";"
    n = n + 1
    lines[n] = line
    total = total + #line + 1
  end
  if extra then
    lines[math.floor(n / 2)] = extra
  end
  return table.concat(lines, "\n") .. "\n"
end

--- The tree's directory, generated if needed; nil and why when it cannot be.
---@return string|nil dir
---@return string|nil err
function M.ensure()
  local stamp = M.DIR .. "/.complete"
  if vim.uv.fs_stat(stamp) then
    return M.DIR
  end
  vim.fn.delete(M.DIR, "rf")
  local ok, err = pcall(function()
    local plain = {}
    for k = 1, 8 do
      plain[k] = body(k * 7919, M.SIZE)
    end
    local needle = body(4242, M.SIZE, "  /* " .. M.NEEDLE .. " here */")
    local regex = body(5353, M.SIZE, "void fn_1234_handler(int x);")
    for i = 0, M.FILES - 1 do
      local dir = ("%s/d%03d/s%02d"):format(M.DIR, math.floor(i / 1000), math.floor(i / 100) % 10)
      if i % 100 == 0 then
        assert(vim.fn.mkdir(dir, "p") == 1, "cannot create " .. dir)
      end
      local ext = i % 4 == 0 and ".c" or (i % 4 == 1 and ".h" or ".txt")
      local content = i % 200 == 7 and needle or (i % 50 == 3 and regex or plain[1 + i % 8])
      local f = assert(io.open(("%s/f%06d%s"):format(dir, i, ext), "wb"))
      f:write(content)
      f:close()
    end
    local f = assert(io.open(stamp, "wb"))
    f:write("ok\n")
    f:close()
  end)
  if not ok then
    return nil, tostring(err)
  end
  return M.DIR
end

--- "100000 files / 1000 MB" for the benchmark lines.
function M.describe()
  return ("%d files / %d MB"):format(M.FILES, math.floor(M.FILES * M.SIZE / 1048576 + 0.5))
end

return M
