--- The `grep` tool: the lines of files under a path that match a regular
--- expression (or a literal), as `path:line:text`, grouped by file. Runs `rg
--- --json` through the process manager when ripgrep is installed (its output
--- decoded natively), else the native search of the core (one worker thread).
--- Both honour .gitignore, .ignore and hidden files, skip binary files and never
--- follow symbolic links. Patterns that could take exponential or polynomial time
--- (nested or adjacent unbounded quantifiers) and overlong ones are refused.
--- Secret files (flemma.secret_paths) are left out of the results, and counted.
local preview = require("flemma.tools.preview")
local search = require("flemma.tools.builtin.search")

local H = {}

-- rg's arguments for an input; `target` is the file or "." to search.
function H.rg_argv(program, input, context, target)
  local argv = {
    program,
    "--json",
    "--no-config",
    "--no-require-git",
    "--no-ignore-parent",
    "--no-ignore-global",
    "--no-ignore-exclude",
    -- Binary files are searched to their end and reported (binary_offset): the
    -- decoder drops their matches and counts them, as the native search does.
    "--binary",
  }
  if input.fixed_strings then
    argv[#argv + 1] = "--fixed-strings"
  end
  if input.ignore_case then
    argv[#argv + 1] = "--ignore-case"
  else
    argv[#argv + 1] = "--case-sensitive"
  end
  if context > 0 then
    argv[#argv + 1] = "--context=" .. context
  end
  if input.glob then
    argv[#argv + 1] = "--glob=" .. input.glob
  end
  vim.list_extend(argv, { "--regexp", input.pattern, "--", target })
  return argv
end

-- The text of the results: `path:line:text` (context lines `path-line-text`),
-- files in path order with a blank line between them, and notes on what was
-- left out.
function H.format(ctx, input, dir, root_secret, results, summary, context, max)
  local files = H.files(ctx, dir, root_secret, results)
  local out = {}
  local shown_matches = 0
  for _, abs in ipairs(files.order) do
    shown_matches = shown_matches + H.file_lines(files.by_file[abs], context, out)
  end
  local found = summary and summary.found or files.kept
  local left = found - shown_matches - H.secret_matches(files, dir, results)
  local notes = H.notes(files.secret, summary, left, max, found)
  if #out == 0 then
    local where = input.path or "."
    local text = ("No matches for `%s` in %s%s."):format(
      input.pattern,
      where,
      input.glob and (" (files " .. input.glob .. ")") or ""
    )
    if #notes > 0 then
      text = text .. "\n" .. table.concat(notes, "\n")
    end
    return text
  end
  local text, cut = search.truncate(ctx, table.concat(out, "\n"))
  if cut then
    table.insert(notes, 1, cut)
  end
  if #notes > 0 then
    text = text .. "\n\n" .. table.concat(notes, "\n")
  end
  return text
end

-- The results by file: by_file (absolute path -> { shown, lines, secret }), order
-- (the paths, by their shown name), secret (the shown names of secret files, whose
-- lines are left out) and kept (the matches kept).
function H.files(ctx, dir, root_secret, results)
  local secret_paths = require("flemma.policy.secret_paths")
  local by_file, order, secret = {}, {}, {}
  local kept = 0
  for _, r in ipairs(results) do
    local rel = r.path:gsub("^%./", "")
    local abs = rel:sub(1, 1) == "/" and rel or (dir .. "/" .. rel)
    local entry = by_file[abs]
    if not entry then
      local why = not root_secret and secret_paths.check(abs) or nil
      entry = { shown = search.display(abs, ctx), lines = {}, secret = why }
      by_file[abs] = entry
      order[#order + 1] = abs
      if why then
        secret[#secret + 1] = entry.shown
      end
    end
    if not entry.secret then
      entry.lines[#entry.lines + 1] = r
      if not r.context then
        kept = kept + 1
      end
    end
  end
  table.sort(order, function(a, b)
    return by_file[a].shown < by_file[b].shown
  end)
  return { by_file = by_file, order = order, secret = secret, kept = kept }
end

-- Appends the lines of one file e to out (a blank line before it unless it is the
-- first); returns the matches shown.
function H.file_lines(e, context, out)
  if #e.lines == 0 then
    return 0
  end
  local shown_matches = 0
  table.sort(e.lines, function(a, b)
    return a.line < b.line
  end)
  -- Context lines only near a match that is shown, each line once.
  local near = {}
  for _, r in ipairs(e.lines) do
    if not r.context then
      for l = r.line - context, r.line + context do
        near[l] = true
      end
    end
  end
  local seen = {}
  if #out > 0 then
    out[#out + 1] = ""
  end
  for _, r in ipairs(e.lines) do
    if not seen[r.line] and (not r.context or near[r.line]) then
      seen[r.line] = true
      local sep = r.context and "-" or ":"
      out[#out + 1] = e.shown .. sep .. r.line .. sep .. r.text .. (r.cut and " [line cut]" or "")
      if not r.context then
        shown_matches = shown_matches + 1
      end
    end
  end
  return shown_matches
end

-- The matches in the secret files (left out).
function H.secret_matches(files, dir, results)
  local n = 0
  for _, abs in ipairs(files.order) do
    if files.by_file[abs].secret then
      for _, r in ipairs(results) do
        local rel = r.path:gsub("^%./", "")
        if (rel:sub(1, 1) == "/" and rel or (dir .. "/" .. rel)) == abs and not r.context then
          n = n + 1
        end
      end
    end
  end
  return n
end

-- The notes on what was left out: matches past max, secret files, binary files,
-- unreadable files.
function H.notes(secret, summary, left, max, found)
  local notes = {}
  if left > 0 then
    notes[#notes + 1] = ("[%d more match%s not shown (max_results = %d of %d in all); narrow the pattern or path, or raise max_results (at most %d).]"):format(
      left,
      left == 1 and "" or "es",
      max,
      found,
      search.LIMIT_MAX
    )
  end
  if #secret > 0 then
    table.sort(secret)
    notes[#notes + 1] = ("[%d secret file%s left out (%s): read %s explicitly if you need it.]"):format(
      #secret,
      #secret == 1 and "" or "s",
      table.concat(secret, ", "),
      #secret == 1 and "it" or "one"
    )
  end
  if summary and summary.binary > 0 then
    notes[#notes + 1] = ("[%d binary file%s with a match skipped.]"):format(
      summary.binary,
      summary.binary == 1 and "" or "s"
    )
  end
  if summary and summary.unreadable > 0 then
    notes[#notes + 1] = ("[%d file%s or folder%s could not be read.]"):format(
      summary.unreadable,
      summary.unreadable == 1 and "" or "s",
      summary.unreadable == 1 and "" or "s"
    )
  end
  return notes
end

---@type flemma.tools.Definition
return {
  name = "grep",
  description = "Search file contents for a regular expression (or a literal with fixed_strings) under a "
    .. "path (default: the chat file's directory). Returns matching lines as `path:line:text`, grouped by "
    .. "file, at most max_results (default 100) with a count of the rest. Honours .gitignore and .ignore, "
    .. "skips hidden and binary files. Regex syntax: literals, `.`, `[...]`, `\\d \\w \\s \\b`, `^ $`, "
    .. "`( )` `(?: )` `|`, `* + ? {n,m}`; no backreferences or lookaround. Patterns with nested or "
    .. "adjacent unbounded quantifiers (like `(a+)+`, `.*.*`) are refused.",
  strict = true,
  async = true,
  input_schema = {
    type = "object",
    properties = {
      pattern = { type = "string", description = "The regular expression (or literal) to find" },
      path = { type = { "string", "null" }, description = "File or folder to search (default: the chat's folder)" },
      glob = {
        type = { "string", "null" },
        description = "Only files matching this glob, e.g. `*.lua` or `src/**/*.c`",
      },
      fixed_strings = { type = { "boolean", "null" }, description = "Take the pattern as a literal string" },
      ignore_case = { type = { "boolean", "null" }, description = "Match letters in either case" },
      context = { type = { "integer", "null" }, description = "Lines of context around each match (0-10)" },
      max_results = { type = { "integer", "null" }, description = "Most matches to show (default 100, at most 1000)" },
      label = { type = { "string", "null" }, description = "A few words on why (shown to the user)" },
    },
    required = { "pattern", "path", "glob", "fixed_strings", "ignore_case", "context", "max_results", "label" },
    additionalProperties = false,
  },
  paths = function(input)
    return { input.path or "." }
  end,
  format_preview = function(input)
    local s = ("/%s/%s%s in %s"):format(
      input.pattern or "",
      input.ignore_case and "i" or "",
      input.fixed_strings and " (literal)" or "",
      input.path or "."
    )
    if input.glob then
      s = s .. " (" .. input.glob .. ")"
    end
    return preview.with_comment(s, input.label)
  end,
  execute = function(input, ctx, callback)
    local native = require("flemma.core.native")
    if type(input.pattern) ~= "string" or input.pattern == "" then
      callback({ success = false, error = "`pattern` should be a non-empty string" })
      return
    end
    local refused = native.search_check(input.pattern, input.fixed_strings == true)
    if refused then
      callback({ success = false, error = ("pattern refused: %s"):format(refused:gsub("^pattern: ", "")) })
      return
    end
    if input.context and (input.context < 0 or input.context > search.MAX_CONTEXT) then
      callback({
        success = false,
        error = ("`context` should be 0 to %d lines, not %d"):format(search.MAX_CONTEXT, input.context),
      })
      return
    end
    if input.max_results and input.max_results < 1 then
      callback({ success = false, error = ("`max_results` should be 1 or more, not %d"):format(input.max_results) })
      return
    end
    local root, err, st = search.root(input, ctx, false)
    if not root then
      callback(err)
      return
    end
    local context = input.context or 0
    local max = search.max_results(input.max_results)
    local dir, target = root, "."
    if st.type ~= "directory" then
      dir, target = vim.fs.dirname(root), vim.fs.basename(root)
    end
    local root_secret = require("flemma.policy.secret_paths").check(root) ~= nil
    local spec
    local rg = search.program({ "rg" })
    if rg then
      spec = {
        argv = H.rg_argv(rg, input, context, target),
        cwd = dir,
        decoder = { kind = "rg_json", max = max },
        ok_codes = { [0] = true, [1] = true, [2] = true },
      }
    else
      spec = {
        native = {
          root = root,
          pattern = input.pattern,
          fixed_strings = input.fixed_strings == true,
          ignore_case = input.ignore_case == true,
          context = context,
          include = input.glob,
          max_results = max,
        },
      }
    end
    return search.run(ctx, spec, function(results, summary, failure, res)
      if failure then
        callback({ success = false, error = failure })
        return
      end
      if rg and res and res.code == 2 and #results == 0 then
        local msg = vim.trim(res.stderr or "")
        callback({ success = false, error = "rg failed" .. (msg ~= "" and (": " .. msg) or "") })
        return
      end
      if rg and summary and res and res.stderr then
        -- rg reports what it cannot read on stderr, one line each.
        local _, n = res.stderr:gsub("[^\n]*os error[^\n]*", "")
        summary.unreadable = summary.unreadable + n
      end
      callback({ success = true, output = H.format(ctx, input, dir, root_secret, results, summary, context, max) })
    end)
  end,
}
