--- The `write` tool: creates or replaces a file atomically, creating missing parent
--- directories; refused outside the sandbox's writable paths while the sandbox is on.
local backup = require("flemma.tools.builtin.backup")
local fs = require("flemma.tools.builtin.fs")
local preview = require("flemma.tools.preview")
local review = require("flemma.tools.review")

local H = {}

--- The file's content for a diff review (flemma.tools.review): cb(text) (nil: there is
--- no file), or cb(false, err).
function H.read_before(target, path, timeout, cb)
  require("flemma.core.files").read(target, {
    whole = true,
    max_bytes = review.MAX_BYTES,
    head_bytes = 0,
    timeout_ms = math.floor((timeout or 30) * 1000),
  }, function(res)
    if res.ok then
      if res.cut_by ~= 0 then
        return cb(
          false,
          ("%s is over %s: too large for a diff review"):format(
            path,
            require("flemma.core.native").format_size(review.MAX_BYTES)
          )
        )
      end
      return cb(res.text)
    elseif res.type == "missing" then
      return cb(nil)
    elseif res.type == "directory" then
      return cb(false, path .. " is a directory")
    end
    cb(false, res.message)
  end)
end

---@type flemma.tools.Definition
return {
  name = "write",
  description = "Write a file (created, or replaced entirely). Missing parent directories are "
    .. "created. Relative paths are resolved against the chat file's directory.",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file to write" },
      content = { type = "string", description = "The complete new content" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "content", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { { path = input.path, write = true } }
  end,
  format_preview = function(input)
    local size = require("flemma.core.native").format_size(#(input.content or ""))
    return preview.with_comment(("%s (%s)"):format(input.path or "?", size), input.label)
  end,
  propose = function(input, ctx, cb)
    local path = ctx.path.resolve(input.path)
    local target = fs.write_target(path)
    H.read_before(target, input.path, ctx.timeout, function(before, err)
      if before == false then
        return cb(nil, err)
      end
      cb({ path = input.path, target = target, before = before, asked = input.content })
    end)
  end,
  execute = function(input, ctx)
    -- What the user accepted in a diff review of this call, if any.
    local reviewed, refused = review.take(ctx, input)
    if refused then
      return { success = false, error = refused }
    end
    local path = ctx.path.resolve(input.path)
    local target = fs.write_target(path)
    -- A FIFO, socket or device is not replaced by a file (nor written to: that blocks).
    local existing = vim.uv.fs_stat(target)
    if existing and existing.type ~= "directory" and existing.type ~= "file" then
      return {
        success = false,
        error = ("%s is %s: only regular files are written"):format(
          path,
          require("flemma.core.files").refusal(existing.type)
        ),
      }
    end
    for _, p in ipairs(target == path and { path } or { path, target }) do
      if not ctx.sandbox.is_path_writable(p) then
        return {
          success = false,
          error = (
            "sandbox: %s is outside the writable paths; write inside the project or /tmp, "
            .. "or turn the sandbox off with :Flemma sandbox:disable"
          ):format(p),
        }
      end
    end
    local content = input.content
    if reviewed then
      local current, rerr = review.read_current(target)
      if current == false then
        return { success = false, error = rerr .. "; the reviewed text was not written" }
      end
      local changed = review.changed(reviewed, current, target)
      if changed then
        return { success = false, error = changed }
      end
      content = reviewed.accepted
      if content == current then
        return { success = true, output = review.nothing_written(reviewed) }
      end
    end
    -- What is replaced is backed up first (flemma.tools.builtin.backup).
    local copy = false
    if existing and existing.type == "file" then
      local berr
      copy, berr = backup.save(target)
      if not copy then
        return { success = false, error = berr .. "; nothing was written" }
      end
    end
    local ok, err = ctx.sandbox.write_file(target, content)
    if not ok then
      return { success = false, error = err }
    end
    local summary = ("Wrote %s (%d lines) to %s"):format(
      ctx.truncate.format_size(#content),
      fs.count_lines(content),
      input.path
    )
    backup.record("write", summary, { { path = target, copy = copy } }, ctx.__filename)
    return {
      success = true,
      output = summary
        .. (copy and (". The previous content is kept in %s. "):format(copy) or " (a new file). ")
        .. backup.hint()
        .. (reviewed and ("\n\n" .. review.outcome(reviewed, content)) or ""),
    }
  end,
}
