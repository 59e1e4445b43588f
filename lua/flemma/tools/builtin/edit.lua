--- The `edit` tool: replaces a text in a file, once (unique) or everywhere
--- (replace_all), found exactly or, failing that, by the line-based fallbacks of
--- flemma.tools.builtin.edit_match; or a range of lines. The result names the
--- strategy that matched and shows a unified diff.
local backup = require("flemma.tools.builtin.backup")
local fs = require("flemma.tools.builtin.fs")
local match = require("flemma.tools.builtin.edit_match")
local preview = require("flemma.tools.preview")
local review = require("flemma.tools.review")

local H = {}

function H.given(v)
  return v ~= nil and v ~= vim.NIL
end

-- new_string as the text of whole lines: without one final "\n" (the lines'
-- own "\n" stays).
function H.as_lines(new)
  return (new:gsub("\n$", ""))
end

-- A line-based replacement of lines first..last; an empty text removes the
-- lines with their "\n".
function H.line_edit(L, first, last, text)
  local e = L.ends[last]
  if text == "" then
    e = math.min(e + 1, #L.text)
  end
  return { s = L.starts[first], e = e, text = text }
end

function H.plural(n, word)
  return ("%d %s%s"):format(n, word, n == 1 and "" or "s")
end

-- The replacements for input (strategy and found: what the search gave for
-- old_string), or nil and an error.
function H.plan(input, L, strategy, found)
  if H.given(input.start_line) or H.given(input.end_line) then
    local first, last = input.start_line, input.end_line
    if not H.given(first) or not H.given(last) then
      return nil, "the line-range form needs both `start_line` and `end_line`"
    end
    if H.given(input.old_string) then
      return nil, "give either `old_string` or `start_line`/`end_line`, not both"
    end
    if L.n == 0 then
      return nil, ("%s is empty: there are no lines to replace (use `write`)"):format(input.path)
    end
    if first < 1 or last < first or last > L.n then
      return nil,
        ("`start_line` %d and `end_line` %d should be lines 1 <= start_line <= end_line <= %d (the file has %s)"):format(
          first,
          last,
          L.n,
          H.plural(L.n, "line")
        )
    end
    return "line range", { H.line_edit(L, first, last, H.as_lines(input.new_string)) }
  end
  if not H.given(input.old_string) then
    return nil, "give `old_string` (the text to replace) or `start_line` and `end_line`"
  end
  if not strategy then
    return nil, found
  end
  if #found == 0 then
    return nil,
      (
        "`old_string` was not found in %s, not even ignoring whitespace and indentation or fuzzily "
        .. "(read the file again, or use `start_line`/`end_line`)"
      ):format(input.path)
  end
  local label = strategy == "exact" and "exact" or ("%s (fallback)"):format(strategy)
  if #found > 1 and (input.replace_all ~= true or strategy == "fuzzy") then
    local lines = {}
    for i, m in ipairs(found) do
      if i > 20 then
        lines[#lines + 1] = "..."
        break
      end
      lines[#lines + 1] = tostring(m.first)
    end
    return nil,
      (
        "`old_string` is ambiguous: it matches %d places in %s (%s match) at lines %s; include more "
        .. "surrounding lines so that it matches once%s"
      ):format(
        #found,
        input.path,
        label,
        table.concat(lines, ", "),
        strategy == "fuzzy" and "" or ", or set `replace_all = true`"
      )
  end
  local edits = {}
  for _, m in ipairs(found) do
    if strategy == "exact" then
      edits[#edits + 1] = { s = m.s, e = m.e, text = input.new_string }
    else
      edits[#edits + 1] = H.line_edit(L, m.first, m.last, match.replacement(m, H.as_lines(input.new_string)))
    end
  end
  return strategy, edits, found
end

-- The largest file `edit` changes (bytes).
H.MAX_BYTES = 64 * 1024 * 1024

-- The file's lines once it was read, or nil and an error result.
function H.check(ctx, path, res)
  if not res.ok then
    if res.timed_out then
      return nil, { success = false, error = res.message .. " (is it a pipe, or on a slow mount?)" }
    elseif res.type == "missing" then
      return nil, { success = false, error = ("file not found: %s (use `write` to create a file)"):format(path) }
    elseif res.type == "directory" then
      return nil, { success = false, error = path .. " is a directory, not a file" }
    elseif res.type ~= "file" and res.err_no == 0 then
      return nil,
        {
          success = false,
          error = ("%s is %s: only regular files can be edited"):format(
            path,
            require("flemma.core.files").refusal(res.type)
          ),
        }
    end
    return nil, { success = false, error = res.message }
  end
  if res.cut_by ~= 0 then
    return nil,
      {
        success = false,
        error = ("%s is over %s: `edit` changes smaller files (use bash, e.g. sed)"):format(
          path,
          ctx.truncate.format_size(H.MAX_BYTES)
        ),
      }
  end
  local content = res.text
  if fs.sniff(content:sub(1, 8192)) then
    return nil, { success = false, error = path .. " is a binary file; `edit` changes text files only" }
  end
  return match.lines(content)
end

-- The file's text after the edit, once the file was read and old_string searched
-- for: { updated, strategy, edits, found }, or nil and the error result.
function H.compute(input, L, strategy, found)
  local edits
  strategy, edits, found = H.plan(input, L, strategy, found)
  if not strategy then
    return nil, { success = false, error = edits }
  end
  local updated = match.apply(L, edits)
  if updated == L.text then
    return nil, { success = false, error = "the edit changes nothing: the new text is what is there already" }
  end
  return { updated = updated, strategy = strategy, edits = edits, found = found }
end

-- The edit, once the file was read and old_string searched for.
function H.apply(input, ctx, target, L, strategy, found)
  local plan, err = H.compute(input, L, strategy, found)
  if not plan then
    return err
  end
  local updated, edits = plan.updated, plan.edits
  strategy, found = plan.strategy, plan.found
  -- The file as it was is backed up first (flemma.tools.builtin.backup).
  local copy, berr = backup.save(target)
  if not copy then
    return { success = false, error = berr .. "; nothing was changed" }
  end
  local ok, werr = ctx.sandbox.write_file(target, updated)
  if not ok then
    return { success = false, error = werr }
  end
  local where
  if strategy == "line range" then
    where = ("lines %d-%d"):format(input.start_line, input.end_line)
  elseif #found == 1 then
    where = ("line %d"):format(found[1].first)
  else
    local firsts = {}
    for i = 1, math.min(#found, 20) do
      firsts[i] = tostring(found[i].first)
    end
    where = ("%s, at lines %s%s"):format(
      H.plural(#found, "place"),
      table.concat(firsts, ", "),
      #found > 20 and ", ..." or ""
    )
  end
  local how = strategy == "exact" and "exact match"
    or strategy == "line range" and "line range"
    or strategy == "fuzzy" and ("fuzzy match, %d%% similar"):format(math.floor(found[1].score * 100))
    or (strategy .. " match")
  local summary = ("Edited %s at %s (strategy: %s)."):format(input.path, where, how)
  backup.record("edit", summary, { { path = target, copy = copy } }, ctx.__filename)
  return {
    success = true,
    output = ("%s\n\n%s\n\n%s"):format(summary, match.diff(L, edits, input.path), backup.hint()),
  }
end

-- The edit as the user accepted it in a diff review (flemma.tools.review), once the
-- file was read (res) and found unchanged since the review.
function H.apply_reviewed(input, ctx, target, res, rec)
  local current = res.ok and res.text or nil
  if not res.ok and res.type ~= "missing" then
    return select(2, H.check(ctx, input.path, res))
  end
  local changed = review.changed(rec, current, target)
  if changed then
    return { success = false, error = changed }
  end
  if rec.accepted == current then
    return { success = true, output = review.nothing_written(rec) }
  end
  local copy, berr = backup.save(target)
  if not copy then
    return { success = false, error = berr .. "; nothing was changed" }
  end
  local ok, werr = ctx.sandbox.write_file(target, rec.accepted)
  if not ok then
    return { success = false, error = werr }
  end
  local summary = ("Edited %s as the user accepted it in a diff review."):format(input.path)
  backup.record("edit", summary, { { path = target, copy = copy } }, ctx.__filename)
  return {
    success = true,
    output = ("%s\n\n%s\n\n%s\n\n%s"):format(
      summary,
      review.outcome(rec, rec.accepted),
      review.unified(current, rec.accepted, input.path .. " (before)", input.path .. " (after)"),
      backup.hint()
    ),
  }
end

-- The change of a call, for the diff review: cb(proposal) or cb(nil, err).
function H.propose(input, ctx, cb)
  local given = H.precheck(input)
  if given then
    return cb(nil, given.error)
  end
  local path = ctx.path.resolve(input.path)
  local target = fs.write_target(path)
  H.read(ctx, target, function(res)
    local L, err = H.check(ctx, input.path, res)
    if not L then
      return cb(nil, err.error)
    end
    local function done(strategy, found)
      local plan, perr = H.compute(input, L, strategy, found)
      if not plan then
        return cb(nil, perr.error)
      end
      cb({ path = input.path, target = target, before = L.text, asked = plan.updated })
    end
    if H.given(input.start_line) or H.given(input.end_line) or not H.given(input.old_string) then
      return done()
    end
    match.find_async(L, input.old_string, done)
  end)
end

-- The error result of an input that can change nothing, or nil.
function H.precheck(input)
  if input.old_string == "" then
    return {
      success = false,
      error = "`old_string` is empty: give the text to replace, or use `start_line`/`end_line`",
    }
  end
  if input.old_string == input.new_string then
    return { success = false, error = "`old_string` and `new_string` are the same: nothing to change" }
  end
  return nil
end

-- Reads the file on a native thread with a deadline (flemma.files): a FIFO or a
-- device is refused, a file that never answers gives an error instead of a frozen
-- editor. Returns the cancel function.
function H.read(ctx, target, cb)
  return require("flemma.core.files").read(target, {
    whole = true,
    max_bytes = H.MAX_BYTES,
    head_bytes = 8192,
    timeout_ms = math.floor((ctx.timeout or 30) * 1000),
  }, cb)
end

---@type flemma.tools.Definition
return {
  name = "edit",
  description = "Replace `old_string` in a file with `new_string`; it should match once (include "
    .. "surrounding lines to make it unique), or every occurrence with `replace_all = true`. When the "
    .. "exact text is not found, whole lines are matched ignoring trailing whitespace, then runs of "
    .. "whitespace, then a shifted indentation, then fuzzily; the result names the strategy and shows "
    .. "a diff. Or replace lines `start_line`..`end_line` (1-based, inclusive) with `new_string` "
    .. "(old_string null).",
  strict = true,
  input_schema = {
    type = "object",
    properties = {
      path = { type = "string", description = "The file to edit" },
      old_string = {
        type = { "string", "null" },
        description = "The text to replace (unique unless replace_all); null with start_line/end_line",
      },
      new_string = { type = "string", description = "The replacement text" },
      replace_all = { type = { "boolean", "null" }, description = "Replace every occurrence (default false)" },
      start_line = { type = { "integer", "null" }, description = "Line-range form: first line to replace (1-based)" },
      end_line = { type = { "integer", "null" }, description = "Line-range form: last line to replace (inclusive)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "path", "old_string", "new_string", "replace_all", "start_line", "end_line", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { { path = input.path, write = true } }
  end,
  format_preview = function(input)
    return preview.with_comment(input.path or "?", input.label)
  end,
  propose = H.propose,
  async = true,
  execute = function(input, ctx, callback)
    -- What the user accepted in a diff review of this call, if any.
    local reviewed, refused = review.take(ctx, input)
    if refused then
      return callback({ success = false, error = refused })
    end
    local bad = H.precheck(input)
    if bad then
      return callback(bad)
    end
    local path = ctx.path.resolve(input.path)
    local target = fs.write_target(path)
    for _, p in ipairs(target == path and { path } or { path, target }) do
      if not ctx.sandbox.is_path_writable(p) then
        return callback({
          success = false,
          error = (
            "sandbox: %s is outside the writable paths; edit files inside the project or /tmp, "
            .. "or turn the sandbox off with :Flemma sandbox:disable"
          ):format(p),
        })
      end
    end
    local cancel
    cancel = H.read(ctx, target, function(res)
      if reviewed then
        return callback(H.apply_reviewed(input, ctx, target, res, reviewed))
      end
      local L, err = H.check(ctx, path, res)
      if not L then
        return callback(err)
      end
      if H.given(input.start_line) or H.given(input.end_line) or not H.given(input.old_string) then
        return callback(H.apply(input, ctx, target, L))
      end
      -- The fallbacks may take a while on a large file: in slices, never blocking.
      cancel = match.find_async(L, input.old_string, function(strategy, found)
        callback(H.apply(input, ctx, target, L, strategy, found))
      end)
    end)
    return function()
      cancel()
    end
  end,
}
