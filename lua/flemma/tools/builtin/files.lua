--- The `glob` and `find` tools: files (and, for find, folders) under a path whose
--- relative path or name matches a glob, newest first, at most `max_results`.
--- Runs fd (Debian: fdfind) when installed, else `git ls-files` inside a
--- repository, else the native walk of the core; the folders of
--- `tools.search.skip_dirs` (node_modules, .git, build, target, ...) and hidden
--- entries are left out, as are .gitignore'd ones. The results of every backend
--- are filtered and ordered natively, on a worker thread.
local search = require("flemma.tools.builtin.search")

local M = {}
local H = {}

-- The glob fd gets (fd matches names): the pattern's last segment.
function H.name_glob(pattern)
  local last = pattern:match("([^/]*)$")
  if last == "" or last:find("**", 1, true) then
    return "*"
  end
  return last
end

function H.fd_argv(program, pattern, name_only, want_type, skip)
  local argv = { program, "--print0", "--color=never", "--no-ignore-parent", "--glob" }
  argv[#argv + 1] = name_only and pattern or H.name_glob(pattern)
  if want_type == 0 or want_type == 2 then
    vim.list_extend(argv, { "--type", "f" })
  end
  if want_type == 1 or want_type == 2 then
    vim.list_extend(argv, { "--type", "d" })
  end
  for _, d in ipairs(skip) do
    vim.list_extend(argv, { "--exclude", d })
  end
  return argv
end

function H.format(ctx, input, root, results, summary, max, noun)
  local out = {}
  for _, r in ipairs(results) do
    local shown = search.display(root .. "/" .. r.path:gsub("^%./", ""), ctx)
    out[#out + 1] = shown .. (r.directory and "/" or "")
  end
  local found = summary and summary.found or #out
  if #out == 0 then
    return ("No %s match `%s` in %s."):format(noun, input.pattern, input.path or ".")
  end
  local text, cut = search.truncate(ctx, table.concat(out, "\n"))
  local notes = {}
  if cut then
    notes[#notes + 1] = cut
  end
  if found > #out then
    notes[#notes + 1] = ("[Showing the %d newest of %d %s (max_results = %d); narrow the pattern or path, or raise max_results (at most %d).]"):format(
      #out,
      found,
      noun,
      max,
      search.LIMIT_MAX
    )
  end
  if #notes > 0 then
    text = text .. "\n\n" .. table.concat(notes, "\n")
  end
  return text
end

--- Runs a files search. mode: "glob" (pattern on the relative path, or the name
--- when it holds no `/`; files) or "find" (pattern on the name; input.type).
function M.execute(mode, input, ctx, callback)
  if type(input.pattern) ~= "string" or input.pattern == "" then
    callback({ success = false, error = "`pattern` should be a non-empty glob, e.g. `**/*.lua`" })
    return
  end
  if #input.pattern > 1000 then
    callback({ success = false, error = "`pattern` is longer than 1000 bytes" })
    return
  end
  if input.max_results and input.max_results < 1 then
    callback({ success = false, error = ("`max_results` should be 1 or more, not %d"):format(input.max_results) })
    return
  end
  local root, err = search.root(input, ctx, true)
  if not root then
    callback(err)
    return
  end
  local name_only = mode == "find" or not input.pattern:find("/", 1, true)
  local want_type = 0
  if mode == "find" then
    want_type = input.type == "file" and 0 or input.type == "directory" and 1 or 2
  end
  local noun = want_type == 0 and "files" or want_type == 1 and "folders" or "entries"
  local max = search.max_results(input.max_results)
  local skip = search.config().skip_dirs
  local native_spec = {
    native = {
      root = root,
      pattern = input.pattern,
      files_mode = true,
      name_only = name_only,
      want_type = want_type,
      max_results = max,
      skip_dirs = skip,
    },
  }
  local decoder = { kind = "paths", max = max, glob = input.pattern, name_only = name_only, skip = skip }
  local fd = search.program({ "fd", "fdfind" })
  local git = want_type == 0 and search.program({ "git" })
  local spec
  if fd then
    spec = { argv = H.fd_argv(fd, input.pattern, name_only, want_type, skip), cwd = root, decoder = decoder }
  elseif git then
    spec = {
      argv = { git, "ls-files", "-z", "--cached", "--others", "--exclude-standard" },
      cwd = root,
      decoder = decoder,
    }
  else
    spec = native_spec
  end
  local cancel
  local function done(results, summary, failure)
    if failure and spec.argv and spec.argv[1] == git then
      -- Not a repository (or git failed): the native walk.
      spec = native_spec
      cancel = search.run(ctx, spec, done)
      return
    end
    if failure then
      callback({ success = false, error = failure })
      return
    end
    callback({ success = true, output = H.format(ctx, input, root, results, summary, max, noun) })
  end
  -- git's validation of a glob happens natively in the decoder: check it first.
  cancel = search.run(ctx, spec, done)
  return function()
    cancel()
  end
end

return M
