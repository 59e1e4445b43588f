-- Risk levels, the per-buffer rate limit and their place in approval, previews and
-- :Flemma status (`:help flemma-risk`), through the public API and a real chat buffer
-- (real <C-]>, autopilot, the loopback send handler).
local helpers = require("spec.support.helpers")

local tools = require("flemma.tools")
local approval = require("flemma.tools.approval")
local send = require("flemma.cycle.send")
local preview = require("flemma.ui.preview")

local press, text = helpers.press, helpers.text

local function chat(uses)
  local lines = { "@You:", "Do things.", "", "@Assistant:", "On it.", "" }
  for i, u in ipairs(uses) do
    if i > 1 then
      lines[#lines + 1] = ""
    end
    vim.list_extend(
      lines,
      { ("**Tool Use:** `%s` (`%s`)"):format(u[1], u[2]), "", "```json", vim.json.encode(u[3]), "```" }
    )
  end
  local buf = helpers.edit(helpers.tmpdir() .. "/risk.chat", lines)
  assert.equals("chat", vim.bo[buf].filetype)
  return buf
end

local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do
    n = n + 1
  end
  return n
end

describe("risk levels", function()
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    require("flemma").setup({})
    helpers.cleanup()
  end)

  it("classifies the built-ins and refuses an unknown level", function()
    require("flemma").setup({})
    assert.equals("dangerous", tools.risk("bash"))
    assert.equals("safe", tools.risk("read"))
    assert.equals("medium", tools.risk("write"))
    assert.equals("dangerous", tools.risk("edit"))
    assert.equals("safe", tools.risk("calculator"))
    local h = tools.register("zz_rm", {
      description = "removes",
      risk = "destructive",
      input_schema = { type = "object", properties = {} },
      execute = function()
        return { success = true, output = "" }
      end,
    })
    assert.equals("destructive", tools.risk("zz_rm"))
    h:remove()
    assert.has_error(function()
      tools.register("zz_bad", { description = "x", risk = "harmless", input_schema = { type = "object" } })
    end)
    assert.has_error(function()
      require("flemma").setup({ tools = { auto_approve = { "risk:harmless" } } })
    end)
  end)

  it("$safe approves the safe tools only, and risk:destructive in a preset's deny denies", function()
    require("flemma").setup({
      tools = {
        auto_approve = { "$safe", "$no_destructive", "zz_rm2" },
        presets = { ["$no_destructive"] = { deny = { "risk:destructive" } } },
      },
    })
    local h = tools.register("zz_rm2", {
      description = "removes",
      risk = "destructive",
      input_schema = { type = "object", properties = {} },
      execute = function()
        return { success = true, output = "" }
      end,
    })
    local buf = vim.api.nvim_create_buf(true, false)
    assert.equals("approve", approval.resolve("calculator", { expression = "1" }, { bufnr = buf }))
    assert.equals("approve", approval.resolve("read", { path = "x.txt" }, { bufnr = buf }))
    assert.equals("require_approval", approval.resolve("bash", { command = "ls" }, { bufnr = buf }))
    assert.equals("require_approval", approval.resolve("write", { path = "x", content = "" }, { bufnr = buf }))
    -- Named in the list and destructive: the deny wins.
    assert.equals("deny", approval.resolve("zz_rm2", {}, { bufnr = buf }))
    -- Fail closed: a risk level never approves what the policy would not.
    require("flemma").setup({ tools = { auto_approve = {} } })
    assert.equals("require_approval", approval.resolve("calculator", { expression = "1" }, { bufnr = buf }))
    -- A safe file tool is still approved only inside the project.
    require("flemma").setup({ tools = { auto_approve = { "$safe" } } })
    assert.equals("require_approval", approval.resolve("read", { path = "/etc/passwd" }, { bufnr = buf }))
    -- An MCP-style tool that calls itself safe is not approved by its claim.
    local m = tools.register("srv:peek", {
      description = "peeks",
      risk = "safe",
      input_schema = { type = "object", properties = {} },
    })
    assert.equals("require_approval", approval.resolve("srv:peek", {}, { bufnr = buf }))
    m:remove()
    h:remove()
  end)

  it("is shown after the preview of a pending call and in :Flemma status", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = {} } })
    local buf = chat({ { "bash", "toolu_01", { command = "echo hi" } } })
    press("<C-]>")
    local shown = preview.shown(buf)
    assert.equals(1, #shown)
    assert.equals("bash: $ echo hi", shown[1].text)
    local risks = preview.shown_risks(buf)
    assert.same({ { line = shown[1].line, risk = "dangerous", hl = "FlemmaToolRisk" } }, risks)
    vim.cmd("Flemma status")
    local out = text(vim.api.nvim_get_current_buf())
    assert.truthy(out:find("risk: safe: [^\n]*read", 1), out)
    assert.truthy(out:find("dangerous: bash, edit", 1, true), out)
  end)
end)

describe("tools.rate_limit", function()
  after_each(function()
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    require("flemma").setup({})
    helpers.cleanup()
  end)

  it("validates its configuration", function()
    assert.has_error(function()
      require("flemma").setup({ tools = { rate_limit = { burst = 0 } } })
    end)
    assert.has_error(function()
      require("flemma").setup({ tools = { rate_limit = { per_second = -1 } } })
    end)
    assert.has_error(function()
      require("flemma").setup({ tools = { rate_limit = { burst = 2.5 } } })
    end)
    assert.has_error(function()
      require("flemma").setup({ tools = { rate_limit = { rate = 2 } } })
    end)
    require("flemma").setup({ tools = { rate_limit = false } })
    require("flemma").setup({ tools = { rate_limit = { burst = 5 } } })
    assert.equals(2, require("flemma.core.config").get().tools.rate_limit.per_second)
  end)

  it(
    "under autopilot, 50 calls: the burst runs, the rest get an error saying when to retry, and nothing is sent",
    function()
      require("flemma").setup({ tools = { autopilot = { enabled = true }, auto_approve = { "$default" } } })
      local sends = 0
      send.set_handler(function()
        sends = sends + 1
      end)
      local uses = {}
      for i = 1, 50 do
        uses[i] = { "calculator", ("toolu_%02d"):format(i), { expression = ("%d + 1"):format(i) } }
      end
      local buf = chat(uses)
      local t0 = vim.uv.hrtime()
      local warnings = helpers.notifications(function()
        press("<C-]>")
        helpers.wait_for(function()
          return not text(buf):find("flemma:tool", 1, true)
        end, 15000, "the calls never all ended:\n" .. text(buf))
      end)
      local elapsed = (vim.uv.hrtime() - t0) / 1e9
      vim.wait(500)
      local t = text(buf)
      local errors = count(t, "%*%*Tool Result:%*%* `toolu_%d+` %(error%)")
      local ok = 50 - errors
      assert.is_true(ok >= 20, t)
      -- The bucket refills at 2 a second: never more than that over the run.
      assert.is_true(ok <= 20 + math.ceil(elapsed * 2) + 1, ("%d ran in %.2fs"):format(ok, elapsed))
      assert.is_true(errors >= 50 - (20 + math.ceil(elapsed * 2) + 1))
      assert.truthy(
        t:find("rate limit: more than 20 tool calls in this buffer (2 more per second); not run, retry in ", 1, true),
        t
      )
      assert.truthy(t:find("not run, retry in %d%.%ds\n"), t)
      assert.equals(0, sends)
      local said = table.concat(
        vim.tbl_map(function(n)
          return n.msg
        end, warnings),
        "\n"
      )
      assert.truthy(said:find("autopilot stopped: tool calls over tools.rate_limit", 1, true), said)
    end
  )

  it("refills per buffer, and takes no token with rate_limit = false", function()
    require("flemma").setup({ tools = { rate_limit = { burst = 3, per_second = 10 } } })
    local buf = vim.api.nvim_create_buf(true, false)
    local other = vim.api.nvim_create_buf(true, false)
    local results = {}
    local function call(b, i)
      tools.execute(b, { id = "r" .. i, name = "calculator", input = { expression = "1" } }, function(res)
        results[i] = res
      end)
    end
    for i = 1, 4 do
      call(buf, i)
    end
    call(other, 5)
    helpers.wait_for(function()
      return vim.tbl_count(results) == 5
    end)
    assert.is_true(results[3].success)
    assert.is_false(results[4].success)
    assert.truthy(results[4].error:find("retry in 0.1s", 1, true), results[4].error)
    assert.is_true(results[5].success) -- another buffer has its own bucket
    vim.wait(150)
    call(buf, 6)
    helpers.wait_for(function()
      return results[6] ~= nil
    end)
    assert.is_true(results[6].success, results[6].error)
    require("flemma").setup({ tools = { rate_limit = false } })
    local done = 0
    for i = 1, 40 do
      tools.execute(buf, { id = "q" .. i, name = "calculator", input = { expression = "1" } }, function(res)
        assert.is_true(res.success, res.error)
        done = done + 1
      end)
    end
    helpers.wait_for(function()
      return done == 40
    end)
  end)
end)
