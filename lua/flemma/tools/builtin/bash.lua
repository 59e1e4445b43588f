--- The `bash` tool: runs a shell command through the native process manager, inside
--- the sandbox when it is on. The output (stdout and stderr merged) is tail-truncated
--- to `tools.truncate`; the whole output is kept in a file named in the result.
local preview = require("flemma.tools.preview")

local H = {}

function H.limits()
  local t = require("flemma.core.config").get().tools.truncate or {}
  return t.max_lines or 2000, t.max_bytes or 51200
end

--- The text of a finished run: the kept output and a note when it was cut.
function H.output_text(res, size)
  local out = res.output or ""
  if res.binary then
    out = out:gsub("%z", "\\0")
  end
  local notes = {}
  if res.truncated then
    local kept = select(2, out:gsub("\n", "")) + ((out ~= "" and out:sub(-1) ~= "\n") and 1 or 0)
    local note = ("[Output truncated: showing the last %d of %d lines (%s total)."):format(
      kept,
      res.total_lines or 0,
      size(res.total_bytes or #out)
    )
    if res.full_output_path then
      note = note .. " Full output: " .. res.full_output_path
    end
    notes[#notes + 1] = note .. "]"
  end
  if res.binary then
    notes[#notes + 1] = "[The output contains binary data (NUL bytes shown as \\0).]"
  end
  if #notes > 0 then
    out = table.concat(notes, "\n") .. "\n" .. out
  end
  return out
end

---@type flemma.tools.Definition
return {
  name = "bash",
  description = "Run a shell command (bash -c) in the working directory and return its output "
    .. "(stdout and stderr together). Long output keeps its last 2000 lines or 50KB; the full "
    .. "output is saved to a file named in the result. Fails on a non-zero exit or a timeout.",
  strict = true,
  async = true,
  capabilities = { "can_auto_approve_if_sandboxed" },
  input_schema = {
    type = "object",
    properties = {
      command = { type = "string", description = "The command line" },
      timeout = { type = { "number", "null" }, description = "Seconds before the command is killed (default 30)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "command", "timeout", "label" },
    additionalProperties = false,
  },
  format_preview = function(input)
    return preview.with_comment("$ " .. (input.command or ""), input.label)
  end,
  execute = function(input, ctx, callback)
    local cfg = ctx:get_config() or {}
    local timeout = input.timeout or ctx.timeout
    if type(timeout) ~= "number" or timeout <= 0 then
      callback({ success = false, error = ("`timeout` should be a positive number of seconds, not %s"):format(timeout) })
      return
    end
    local argv, err = ctx.sandbox.wrap_command({ cfg.shell or "bash", "-c", input.command })
    if not argv then
      callback({ success = false, error = "sandbox: " .. tostring(err) .. " (or turn it off: :Flemma sandbox:disable)" })
      return
    end
    local max_lines, max_bytes = H.limits()
    local listener = require("flemma.tools.context").progress_listener(ctx)
    local handle = require("flemma.core.process").spawn({
      cmd = argv,
      cwd = ctx.cwd,
      env = cfg.env,
      timeout = math.floor(timeout * 1000),
      max_lines = max_lines,
      max_bytes = max_bytes,
      on_progress = listener,
    }, function(res)
      local output = H.output_text(res, ctx.truncate.format_size)
      if res.cancelled then
        callback({ success = false, error = "the command was cancelled", output = output })
      elseif res.timed_out then
        callback({
          success = false,
          error = ("the command timed out after %gs and was killed"):format(timeout),
          output = output,
        })
      elseif res.signal and res.signal ~= 0 and res.code == nil then
        callback({
          success = false,
          error = ("the command was killed by signal %d"):format(res.signal),
          output = output,
        })
      elseif res.code ~= 0 then
        callback({
          success = false,
          error = ("the command exited with code %s"):format(tostring(res.code)),
          output = output,
        })
      else
        callback({ success = true, output = output == "" and "(no output)" or output })
      end
    end)
    return function()
      handle:cancel()
    end
  end,
}
