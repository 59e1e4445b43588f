-- A busted output handler for the test harness: a dot per passing test, the full
-- message of each failure, and one machine-readable summary line:
--   busted: N passed, N failed, N errors, N pending
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.base")()
  local write = function(s)
    io.stdout:write(s)
    io.stdout:flush()
  end

  local function describe_failure(kind, t)
    local msg = t.message
    if type(msg) ~= "string" then
      msg = vim.inspect(msg)
    end
    local where = ""
    if t.trace and t.trace.short_src then
      where = t.trace.short_src .. ":" .. tostring(t.trace.currentline)
    end
    write(("\n%s: %s\n  %s\n  %s\n"):format(kind, t.name or "?", where, (msg:gsub("\n", "\n  "))))
    if t.trace and t.trace.traceback and options.verbose then
      write("  " .. t.trace.traceback:gsub("\n", "\n  ") .. "\n")
    end
  end

  -- Each test is one action of its own for the interpreters' time budget
  -- (flemma.isolate): the suite runs without giving Neovim's main loop control back.
  busted.subscribe({ "test", "start" }, function()
    local isolate = package.loaded["flemma.core.isolate"]
    if isolate then
      isolate.begin_action()
    end
    return nil, true
  end)

  handler.testEnd = function(_element, _parent, status)
    if status == "success" then
      write(".")
    elseif status == "pending" then
      write("p")
    end
    return nil, true
  end

  handler.suiteEnd = function()
    write("\n")
    for _, t in ipairs(handler.failures) do
      describe_failure("FAILED", t)
    end
    for _, t in ipairs(handler.errors) do
      describe_failure("ERROR", t)
    end
    -- spec/runner.lua turns this into the exit status (0 all passed, 1 failures).
    _G.FLEMMA_SPEC_SUMMARY = {
      passed = handler.successesCount,
      failed = handler.failuresCount,
      errors = handler.errorsCount,
    }
    write(
      ("busted: %d passed, %d failed, %d errors, %d pending\n"):format(
        handler.successesCount,
        handler.failuresCount,
        handler.errorsCount,
        handler.pendingsCount
      )
    )
    return nil, true
  end

  busted.subscribe({ "test", "end" }, handler.testEnd, { predicate = handler.cancelOnPending })
  busted.subscribe({ "suite", "end" }, handler.suiteEnd)
  return handler
end
