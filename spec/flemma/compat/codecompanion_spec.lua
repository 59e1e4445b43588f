-- Tools written for CodeCompanion's interface, adapted with
-- require("flemma.compat.codecompanion").adapt(), run through a real chat buffer:
-- real <C-]>, Flemma's approval, real processes through the process manager, files.
local helpers = require("spec.support.helpers")

local cc = require("flemma.compat.codecompanion")
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
  local buf = helpers.edit(helpers.tmpdir() .. "/cc.chat", lines)
  assert.equals("chat", vim.bo[buf].filetype)
  return buf
end

local function wait_text(buf, pattern, timeout)
  helpers.wait_for(function()
    return text(buf):find(pattern, 1, true) ~= nil
  end, timeout or 8000, "buffer never contained: " .. pattern .. "\n--- buffer:\n" .. text(buf))
end

local function line_of(buf, s)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == s then
      return i
    end
  end
end

local function approve_all(buf)
  for i, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l == "```flemma:tool status=pending" then
      vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { "```flemma:tool status=approved" })
    end
  end
end

-- A command runner in the manner of CodeCompanion's cmd_runner: the command comes from
-- the model's args, the argv is built in handlers.setup, approval always asked.
local function cmd_runner(log)
  return {
    name = "cc_cmd_runner",
    cmds = {},
    schema = {
      type = "function",
      ["function"] = {
        name = "cc_cmd_runner",
        description = "Run a shell command",
        parameters = {
          type = "object",
          properties = { cmd = { type = "string", description = "the command" } },
          required = { "cmd" },
          additionalProperties = false,
        },
        strict = true,
      },
    },
    system_prompt = "Use cc_cmd_runner for shell commands.",
    opts = { requires_approval = true },
    handlers = {
      setup = function(self)
        log[#log + 1] = "setup"
        self.cmds = { { "bash", "-c", "${cmd}" } }
      end,
      on_exit = function()
        log[#log + 1] = "on_exit"
      end,
    },
    output = {
      prompt = function(self)
        return ("Run `%s`?"):format(self.args.cmd)
      end,
      success = function(self, agent, _, stdout)
        agent.chat:add_tool_output(self, "ran: " .. table.concat(stdout, " | "))
      end,
      error = function(self, agent, _, stderr)
        agent.chat:add_tool_output(self, "failed: " .. table.concat(stderr, " | "))
      end,
      rejected = function(self, agent)
        agent.chat:add_tool_output(self, "The user declined to run " .. self.args.cmd)
      end,
    },
  }
end

describe("flemma.compat.codecompanion", function()
  local handles
  before_each(function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "$default" } } })
    handles = {}
  end)
  after_each(function()
    for _, h in ipairs(handles) do
      h:remove()
    end
    send.set_handler(nil)
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("adapts the schema and system prompt, and :remove() drops the tool and its resolver", function()
    local h = cc.adapt(cmd_runner({}))
    local def = tools.get("cc_cmd_runner")
    assert.equals("object", def.input_schema.type)
    assert.same({ "cmd" }, def.input_schema.required)
    assert.truthy(def.description:find("Run a shell command\n\nUse cc_cmd_runner for shell commands.", 1, true))
    assert.is_not_nil(approval.get("urn:flemma:approval:codecompanion:cc_cmd_runner"))
    assert.is_true(h:remove())
    assert.is_nil(tools.get("cc_cmd_runner"))
    assert.is_nil(approval.get("urn:flemma:approval:codecompanion:cc_cmd_runner"))
  end)

  it(
    "a cmd_runner-like tool: pending with its prompt as preview, then a real process, output.success as the result",
    function()
      local dir = helpers.tmpdir()
      local log = {}
      table.insert(handles, cc.adapt(cmd_runner(log)))
      local buf =
        chat({ { "cc_cmd_runner", "toolu_01", { cmd = "echo made > " .. dir .. "/f.txt; echo out1; echo out2" } } })
      press("<C-]>")
      assert.truthy(text(buf):find("```flemma:tool status=pending", 1, true), text(buf))
      local shown = preview.shown(buf)
      assert.equals(1, #shown)
      assert.truthy(shown[1].text:find("Run `echo made", 1, true), shown[1].text)
      assert.equals(0, vim.fn.filereadable(dir .. "/f.txt"))
      approve_all(buf)
      press("<C-]>")
      wait_text(buf, "ran: out1 | out2")
      assert.equals("made\n", helpers.read_file(dir .. "/f.txt"))
      assert.same({ "setup", "on_exit" }, log)
      assert.is_nil(text(buf):find("(error)", 1, true))
    end
  )

  it("runs its commands inside the sandbox when it is on: a write outside the writable paths fails", function()
    local dir = helpers.tmpdir()
    local outside = vim.fn.tempname():gsub("^/tmp/", "/var/tmp/flemma-cc-")
    vim.fn.mkdir(outside, "p")
    require("flemma").setup({
      tools = { autopilot = { enabled = false }, auto_approve = { "$default" } },
      sandbox = { enabled = true, policy = { rw_paths = { dir } } },
    })
    table.insert(handles, cc.adapt(cmd_runner({})))
    local buf = chat({
      { "cc_cmd_runner", "toolu_01", { cmd = ("echo in > %s/in.txt && echo out > %s/out.txt"):format(dir, outside) } },
    })
    press("<C-]>")
    approve_all(buf)
    press("<C-]>")
    wait_text(buf, "failed: ")
    local ok, err = pcall(function()
      assert.equals("in\n", helpers.read_file(dir .. "/in.txt"))
      assert.equals(0, vim.fn.filereadable(outside .. "/out.txt"), "the command wrote outside the sandbox")
      assert.truthy(text(buf):find("Read-only file system", 1, true), text(buf))
    end)
    vim.fn.delete(outside, "rf")
    assert(ok, err)
  end)

  it("requires_approval = false never overrides the user's deny", function()
    local dir = helpers.tmpdir()
    local tool = cmd_runner({})
    tool.opts = { requires_approval = false }
    table.insert(handles, cc.adapt(tool))
    local buf = chat({ { "cc_cmd_runner", "toolu_02", { cmd = "touch " .. dir .. "/a" } } })
    press("<C-]>")
    wait_text(buf, "ran: ")
    assert.equals(1, vim.fn.filereadable(dir .. "/a"))
    require("flemma").setup({
      tools = {
        autopilot = { enabled = false },
        auto_approve = { "$default", "$nocc" },
        presets = { ["$nocc"] = { deny = { "cc_cmd_runner" } } },
      },
    })
    buf = chat({ { "cc_cmd_runner", "toolu_03", { cmd = "touch " .. dir .. "/b" } } })
    press("<C-]>")
    wait_text(buf, "denied by the approval policy")
    assert.equals(0, vim.fn.filereadable(dir .. "/b"))
  end)

  it("a rejected call's result is what output.rejected adds", function()
    table.insert(handles, cc.adapt(cmd_runner({})))
    local buf = chat({ { "cc_cmd_runner", "toolu_04", { cmd = "echo hi" } } })
    press("<C-]>")
    local l = line_of(buf, "```flemma:tool status=pending")
    vim.api.nvim_buf_set_lines(buf, l - 1, l, false, { "```flemma:tool status=rejected" })
    press("<C-]>")
    wait_text(buf, "**Tool Result:** `toolu_04` (error)")
    wait_text(buf, "The user declined to run echo hi")
  end)

  it("cmds failing midway: output.error once, later commands not run, an error result", function()
    local dir = helpers.tmpdir()
    local errors, successes = 0, 0
    table.insert(
      handles,
      cc.adapt({
        name = "cc_steps",
        cmds = {
          { "bash", "-c", "echo one >> ${dir}/log" },
          { "bash", "-c", "echo two >> ${dir}/log; echo broke >&2; exit 3" },
          { "bash", "-c", "echo three >> ${dir}/log" },
        },
        env = function()
          return { dir = dir }
        end,
        schema = {
          type = "function",
          ["function"] = {
            name = "cc_steps",
            description = "three steps",
            parameters = { type = "object", properties = {} },
          },
        },
        opts = { requires_approval = false },
        output = {
          success = function()
            successes = successes + 1
          end,
          error = function(self, agent, _, stderr)
            errors = errors + 1
            agent.chat:add_tool_output(self, "step failed: " .. table.concat(stderr, "\n"))
          end,
        },
      })
    )
    local buf = chat({ { "cc_steps", "toolu_05", vim.empty_dict() } })
    press("<C-]>")
    wait_text(buf, "**Tool Result:** `toolu_05` (error)")
    wait_text(buf, "step failed: broke")
    vim.wait(200)
    assert.equals(1, errors)
    assert.equals(1, successes)
    assert.equals("one\ntwo\n", helpers.read_file(dir .. "/log"))
  end)

  it("function cmds chain their output; an async output_handler counts once", function()
    local calls = 0
    local seen_input
    table.insert(
      handles,
      cc.adapt({
        name = "cc_calc",
        cmds = {
          function(_, args)
            local a, b = tonumber(args.num1), tonumber(args.num2)
            if args.operation == "multiply" then
              return { status = "success", data = a * b }
            end
            return { status = "error", data = "Invalid operation" }
          end,
          function(_, _, input, output_handler)
            seen_input = input
            vim.defer_fn(function()
              output_handler({ status = "success", data = "twice " .. (input * 2) })
              output_handler({ status = "error", data = "discarded" })
            end, 20)
          end,
        },
        schema = {
          type = "function",
          ["function"] = {
            name = "cc_calc",
            description = "Perform simple mathematical operations",
            parameters = {
              type = "object",
              properties = {
                num1 = { type = "integer" },
                num2 = { type = "integer" },
                operation = { type = "string", enum = { "add", "multiply" } },
              },
              required = { "num1", "num2", "operation" },
              additionalProperties = false,
            },
            strict = true,
          },
        },
        opts = {
          -- Approval asked only for big numbers.
          requires_approval = function(self)
            return self.args.num1 >= 1000
          end,
        },
        output = {
          success = function(self, agent, _, stdout)
            calls = calls + 1
            agent.chat:add_tool_output(self, tostring(stdout[1]))
          end,
        },
      })
    )
    local buf = chat({
      { "cc_calc", "toolu_06", { num1 = 100, num2 = 50, operation = "multiply" } },
      { "cc_calc", "toolu_07", { num1 = 5000, num2 = 2, operation = "multiply" } },
    })
    press("<C-]>")
    local t = text(buf)
    assert.truthy(t:find("**Tool Result:** `toolu_07`\n\n```flemma:tool status=pending", 1, true), t)
    assert.truthy(t:find("**Tool Result:** `toolu_06`\n\n```flemma:tool status=approved", 1, true), t)
    approve_all(buf)
    press("<C-]>")
    wait_text(buf, "5000\ntwice 10000")
    wait_text(buf, "10000\ntwice 20000")
    vim.wait(100)
    assert.equals(4, calls)
    assert.equals(10000, seen_input)
    assert.is_nil(text(buf):find("discarded", 1, true))
  end)

  it("use_handlers_once: setup and on_exit once for several calls of one response", function()
    local log = {}
    local tool = cmd_runner(log)
    tool.opts = { requires_approval = false, use_handlers_once = true }
    -- Static commands: setup only runs once for the three calls.
    tool.cmds = { { "bash", "-c", "${cmd}" } }
    tool.handlers.setup = function()
      log[#log + 1] = "setup"
    end
    table.insert(handles, cc.adapt(tool))
    local buf = chat({
      { "cc_cmd_runner", "toolu_08", { cmd = "echo a" } },
      { "cc_cmd_runner", "toolu_09", { cmd = "sleep 0.2; echo b" } },
      { "cc_cmd_runner", "toolu_10", { cmd = "echo c" } },
    })
    press("<C-]>")
    wait_text(buf, "ran: b")
    helpers.wait_for(function()
      return not text(buf):find("flemma:tool", 1, true)
    end)
    vim.wait(100)
    assert.same({ "setup", "on_exit" }, log)
  end)
end)
