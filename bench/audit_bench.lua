-- The audit log (flemma.policy.audit): recording a decision and a run of a `write`
-- whose content is 10 MB (the model chose it). The line is written off the main
-- loop; the line is the longest the main loop is held from the first record until
-- both lines are in the file (a 1 ms timer's gaps), the digest included.
local audit = require("flemma.policy.audit")

local CONTENT = string.rep('local s = "a/b" -- \\ \t é\n', 400 * 1024)

return {
  {
    name = "audit_record_10mb_input",
    unit = "ms",
    target = 16,
    op = "<=",
    runs = 3,
    run = function()
      local path = vim.fn.tempname() .. "-audit.jsonl"
      audit.set_path(path)
      local input = { path = "big.lua", content = CONTENT, label = vim.NIL }
      local worst, last = 0, vim.uv.hrtime()
      local timer = vim.uv.new_timer()
      timer:start(1, 1, function()
        local now = vim.uv.hrtime()
        worst = math.max(worst, (now - last) / 1e6)
        last = now
      end)
      vim.wait(20, function()
        return false
      end, 1)
      last = vim.uv.hrtime()
      audit.record({ event = "decision", tool = "write", id = "bench", decision = "approve", input = input })
      audit.record({ event = "run", tool = "write", id = "bench", status = "ok", input = input })
      assert(
        vim.wait(30000, function()
          return not audit.pending()
        end, 1),
        "the audit lines were never written"
      )
      timer:stop()
      timer:close()
      local lines = vim.fn.readfile(path)
      audit.set_path(nil)
      os.remove(path)
      assert(#lines == 2, "lines: " .. #lines)
      assert(vim.json.decode(lines[1]).input_sha256 == audit.digest(input), "a wrong digest")
      return worst
    end,
  },
}
