--- Runs tools written for CodeCompanion's tool interface in Flemma (`:help
--- flemma-compat-codecompanion`): adapt(tool) registers it as a Flemma tool whose calls
--- go through Flemma's approval, previews, sandbox and process manager. What the
--- tool's output handlers add to the chat becomes the tool result.
local util = require("flemma.core.util")

local M = {}
local H = {}

-- Per buffer and tool: the `use_handlers_once` state ({ setup = true } after setup ran).
H.once = {}

--- The name, description and schema of a tool in CodeCompanion's (function-calling) form.
function H.describe(tool)
  local schema = type(tool.schema) == "table" and tool.schema or {}
  local fn = type(schema["function"]) == "table" and schema["function"] or schema
  local name = tool.name or fn.name
  if type(name) ~= "string" or name == "" then
    util.error("codecompanion.adapt(): the tool has no name (`name` or `schema.function.name`)")
  end
  local params = type(fn.parameters) == "table" and vim.deepcopy(fn.parameters) or { type = "object", properties = {} }
  if params.type == nil then
    params.type = "object"
  end
  local description = type(fn.description) == "string" and fn.description ~= "" and fn.description
    or ("CodeCompanion tool " .. name)
  local prompt = tool.system_prompt
  if type(prompt) == "function" then
    local ok, res = pcall(prompt, schema)
    prompt = ok and res or nil
  end
  if type(prompt) == "string" and prompt ~= "" then
    description = description .. "\n\n" .. prompt
  end
  return name, description, params, fn.strict == true
end

--- The chat object handed to output handlers: what they add becomes the result.
function H.chat(run)
  local chat = { bufnr = run.bufnr }
  function chat.add_tool_output(_, _, for_llm, _)
    if for_llm ~= nil then
      run.added[#run.added + 1] = type(for_llm) == "string" and for_llm or vim.inspect(for_llm)
    end
  end
  function chat.add_message(_, msg)
    if type(msg) == "table" and msg.content ~= nil then
      run.added[#run.added + 1] = type(msg.content) == "string" and msg.content or vim.json.encode(msg.content)
    end
  end
  return chat
end

--- Calls a handler of the tool; an error in it becomes the call's error.
function H.handler(run, fn, what, ...)
  if type(fn) ~= "function" then
    return true, nil
  end
  local ok, res = xpcall(fn, debug.traceback, run.self, run.tools, ...)
  if not ok then
    return false, ("%s of `%s` raised an error: %s"):format(what, run.name, util.message(res))
  end
  return true, res
end

--- `${var}` in an argv entry filled from the variables; an unknown one is an error.
function H.fill(arg, vars)
  local missing
  local out = tostring(arg):gsub("%${([%w_]+)}", function(key)
    local v = vars[key]
    if v == nil then
      missing = missing or key
      return ""
    end
    return tostring(v)
  end)
  return out, missing
end

function H.lines(text)
  if text == nil or text == "" then
    return {}
  end
  return vim.split((text:gsub("\n$", "")), "\n", { plain = true })
end

--- Runs one argv command through the sandbox and the process manager.
function H.run_argv(run, cmd, done)
  local vars = {}
  for k, v in pairs(run.self.args or {}) do
    vars[k] = v
  end
  if type(run.tool.env) == "function" then
    local ok, env = pcall(run.tool.env, run.self)
    if not ok then
      return done(false, { ("env() of `%s` raised an error: %s"):format(run.name, util.message(env)) }, {})
    end
    for k, v in pairs(type(env) == "table" and env or {}) do
      vars[k] = v
    end
  end
  local argv = {}
  for i, a in ipairs(cmd) do
    local filled, missing = H.fill(a, vars)
    if missing then
      return done(false, { ("`${%s}` in the command of `%s` has no value"):format(missing, run.name) }, {})
    end
    argv[i] = filled
  end
  if #argv == 0 then
    return done(false, { ("an empty command in `%s`"):format(run.name) }, {})
  end
  local wrapped, err = run.ctx.sandbox.wrap_command(argv)
  if not wrapped then
    return done(false, { "sandbox: " .. tostring(err) }, {})
  end
  local handle = require("flemma.core.process").spawn({
    cmd = wrapped,
    cwd = run.ctx.cwd,
    timeout = math.floor((run.ctx.timeout or 30) * 1000),
    merge_output = false,
  }, function(res)
    run.proc = nil
    local stdout, stderr = H.lines(res.output), H.lines(res.stderr)
    if res.cancelled then
      return done(nil, stderr, stdout)
    elseif res.timed_out then
      stderr[#stderr + 1] = ("the command timed out after %gs and was killed"):format(run.ctx.timeout or 30)
      return done(false, stderr, stdout)
    elseif res.code ~= 0 then
      if #stderr == 0 then
        stderr[1] = ("`%s` exited with %s"):format(argv[1], res.code and ("code " .. res.code) or "a signal")
      end
      return done(false, stderr, stdout)
    end
    done(true, stderr, stdout)
  end)
  run.proc = handle
end

--- Runs one function command: its result returned, or given once to output_handler.
function H.run_fn(run, fn, input, done)
  local settled = false
  local function settle(res)
    if settled then
      return
    end
    settled = true
    if run.timer and not run.timer:is_closing() then
      run.timer:stop()
      run.timer:close()
    end
    if type(res) ~= "table" then
      return done(false, { ("a command of `%s` gave no { status, data } result"):format(run.name) }, {})
    end
    local data = res.data
    if res.status == "success" then
      done(true, {}, { data }, data)
    else
      done(false, { data == nil and "the command failed" or data }, {}, data)
    end
  end
  local output_handler = function(res)
    if vim.in_fast_event() then
      vim.schedule(function()
        settle(res)
      end)
    else
      settle(res)
    end
  end
  local ok, res = xpcall(fn, debug.traceback, run.self, run.self.args, input, output_handler)
  if not ok then
    return settle({
      status = "error",
      data = ("a command of `%s` raised an error: %s"):format(run.name, util.message(res)),
    })
  end
  if res ~= nil then
    return settle(res)
  end
  if not settled then
    -- Async: output_handler will be called; a tool that never calls it times out.
    local timeout = run.ctx.timeout or 30
    run.timer = vim.uv.new_timer()
    run.timer:start(math.floor(timeout * 1000), 0, function()
      vim.schedule(function()
        settle({ status = "error", data = ("the command did not call output_handler within %gs"):format(timeout) })
      end)
    end)
  end
end

function H.text(list)
  local out = {}
  for _, v in ipairs(list or {}) do
    out[#out + 1] = type(v) == "string" and v or vim.inspect(v)
  end
  return table.concat(out, "\n")
end

--- Whether other calls of this tool in the last assistant message still wait.
function H.more_pending(bufnr, name, id)
  local ok, doc = pcall(function()
    return require("flemma.chat.document").get(bufnr)
  end)
  if not ok or type(doc) ~= "table" then
    return false
  end
  local results = {}
  local last
  for _, msg in ipairs(doc.messages) do
    if msg.role == "assistant" then
      last = msg
    end
  end
  for _, msg in ipairs(doc.messages) do
    for _, p in ipairs(msg.parts) do
      if p.kind == "tool_result" then
        results[p.id] = p
      end
    end
  end
  for _, p in ipairs(last and last.parts or {}) do
    if p.kind == "tool_use" and p.name == name and p.id ~= id then
      local r = results[p.id]
      if not r or r.status ~= nil then
        return true
      end
    end
  end
  return false
end

--- The execute of an adapted tool.
function H.execute(tool, name)
  return function(input, ctx, callback)
    local self = setmetatable({ args = input, function_call = { name = name, arguments = input } }, { __index = tool })
    local run = { name = name, tool = tool, self = self, ctx = ctx, bufnr = ctx.bufnr, added = {}, finished = false }
    run.tools = { chat = H.chat(run), bufnr = ctx.bufnr, ctx = ctx }
    local once = tool.opts and tool.opts.use_handlers_once
    local key = tostring(ctx.bufnr) .. "\0" .. name

    local function finish(ok, fallback)
      if run.finished then
        return
      end
      run.finished = true
      local last = not once or not H.more_pending(ctx.bufnr, name, require("flemma.tools").call_id(ctx))
      if last then
        local hok, herr = H.handler(run, tool.handlers and tool.handlers.on_exit, "handlers.on_exit")
        H.once[key] = nil
        if not hok then
          ok, fallback = false, herr
          run.added = {}
        end
      end
      local text = #run.added > 0 and table.concat(run.added, "\n") or fallback or ""
      if ok then
        callback({ success = true, output = text })
      else
        callback({ success = false, error = text ~= "" and text or ("`%s` failed"):format(name) })
      end
    end

    if not once or not H.once[key] then
      H.once[key] = true
      local ok, err = H.handler(run, tool.handlers and tool.handlers.setup, "handlers.setup")
      if not ok then
        finish(false, err)
        return
      end
    end

    local cmds = self.cmds or {}
    local i, input_value = 0, nil
    local outputs = {}
    local step
    local function done(status, stderr, stdout, data)
      local cmd = cmds[i]
      if run.finished then
        return
      end
      if status == nil then
        H.handler(run, tool.output and tool.output.cancelled, "output.cancelled", cmd)
        return finish(false, "the tool was cancelled")
      end
      if status then
        outputs[#outputs + 1] = H.text(stdout)
        local ok, err = H.handler(run, tool.output and tool.output.success, "output.success", cmd, stdout)
        if not ok then
          return finish(false, err)
        end
        input_value = data ~= nil and data or stdout
        return step()
      end
      -- An error stops the commands; output.error is called once.
      local ok, err = H.handler(run, tool.output and tool.output.error, "output.error", cmd, stderr, stdout)
      finish(false, ok and H.text(stderr) or err)
    end
    step = function()
      i = i + 1
      local cmd = cmds[i]
      if cmd == nil then
        return finish(true, table.concat(outputs, "\n"))
      end
      if type(cmd) == "function" then
        H.run_fn(run, cmd, input_value, done)
      elseif type(cmd) == "table" and type(cmd.cmd) == "table" then
        H.run_argv(run, cmd.cmd, done)
      elseif type(cmd) == "table" then
        H.run_argv(run, cmd, done)
      else
        done(false, { ("command #%d of `%s` is neither a function nor an argv list"):format(i, name) }, {})
      end
    end
    step()
    return function()
      if run.proc then
        pcall(run.proc.cancel, run.proc)
      end
      if not run.finished then
        H.handler(run, tool.output and tool.output.cancelled, "output.cancelled", cmds[i])
        run.finished = true
      end
    end
  end
end

--- The approval of a call under `opts.requires_approval` and `handlers.prompt_condition`:
--- "require_approval", "approve", or nil (no opinion: Flemma's policy decides).
function H.approval(tool, input)
  local opts = tool.opts or {}
  local req = opts.requires_approval
  if req == nil then
    return nil
  end
  local self = setmetatable({ args = input }, { __index = tool })
  local tools_obj = {}
  if type(req) == "function" then
    local ok, res = pcall(req, self, tools_obj)
    if not ok then
      return "require_approval" -- unsure: the user decides
    end
    req = res
  end
  if req and tool.handlers and type(tool.handlers.prompt_condition) == "function" then
    local ok, res = pcall(tool.handlers.prompt_condition, self, tools_obj, require("flemma.core.config").get())
    if not ok then
      return "require_approval"
    end
    req = res and true or false
  end
  return req and "require_approval" or "approve"
end

--- Registers a tool written for CodeCompanion; returns the handle of
--- `flemma.tools.register` (its `:remove()` also drops the tool's approval resolver).
---@param tool table
---@return string[]
function M.adapt(tool)
  if type(tool) ~= "table" then
    util.error("codecompanion.adapt() expects a tool table, not " .. type(tool))
  end
  local name, description, params, strict = H.describe(tool)
  local output = type(tool.output) == "table" and tool.output or {}
  local def = {
    name = name,
    description = description,
    input_schema = params,
    strict = strict or nil,
    async = true,
    execute = H.execute(tool, name),
  }
  if type(output.prompt) == "function" then
    def.format_preview = function(input)
      local self = setmetatable({ args = input }, { __index = tool })
      local res = output.prompt(self, {})
      return type(res) == "string" and res or error("output.prompt returned no string")
    end
  end
  if type(output.rejected) == "function" then
    -- The text of a rejected call: what output.rejected adds to the chat.
    def.on_rejected = function(input)
      local run = { name = name, added = {} }
      run.self = setmetatable({ args = input }, { __index = tool })
      run.tools = { chat = H.chat(run) }
      H.handler(run, output.rejected, "output.rejected", {})
      return #run.added > 0 and table.concat(run.added, "\n") or nil
    end
  end
  local handle = require("flemma.tools").register(def)
  local resolver = "urn:flemma:approval:codecompanion:" .. name
  local approval = require("flemma.tools.approval")
  approval.register(resolver, {
    description = "opts.requires_approval of the CodeCompanion tool " .. name,
    -- Below the user's policy (config, frontmatter, own resolvers): a deny there wins.
    priority = 20,
    resolve = function(tool_name, input)
      if tool_name ~= name then
        return nil
      end
      return H.approval(tool, input)
    end,
  })
  local remove = handle.remove
  getmetatable(handle).__index.remove = function(...)
    approval.unregister(resolver)
    return remove(...)
  end
  return handle
end

return M
