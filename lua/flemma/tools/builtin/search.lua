--- What the grep, glob and find tools share: choosing a backend (rg, fd or `git
--- ls-files` when installed, else the native search of the core, see
--- native/src/search.hpp), running it off the main loop (a child process through
--- flemma.process, or a native worker thread), and turning its results into the
--- text the model reads. Results are decoded natively (rg's --json, fd's and git's
--- NUL-separated lists); what reaches Lua is bounded by `max_results`.
local M = {}
local H = {}

M.DEFAULT_MAX = 100
M.LIMIT_MAX = 1000
M.MAX_CONTEXT = 10

--- The `tools.search` configuration.
---@return { backend: string, skip_dirs: string[] }
function M.config()
  local cfg = require("flemma.core.config").get().tools or {}
  local s = cfg.search or {}
  return { backend = s.backend or "auto", skip_dirs = s.skip_dirs or {} }
end

--- The first of `names` that is an executable on PATH, or nil (never with
--- backend = "native").
---@param names string[]
---@return string|nil
function M.program(names)
  if M.config().backend == "native" then
    return nil
  end
  for _, name in ipairs(names) do
    if vim.fn.executable(name) == 1 then
      return name
    end
  end
  return nil
end

--- `max_results` of an input: the default, or clamped to 1 .. LIMIT_MAX.
function M.max_results(n)
  if n == nil then
    return M.DEFAULT_MAX
  end
  return math.max(1, math.min(math.floor(n), M.LIMIT_MAX))
end

--- How a path is shown: relative to the directory relative paths start from
--- (the chat file's, else the cwd) when it lies below it, else absolute.
---@param abs string
---@param ctx flemma.tools.Context
---@return string
function M.display(abs, ctx)
  local base = ctx.__dirname or ctx.cwd
  if abs == base then
    return "."
  end
  if abs:sub(1, #base + 1) == base .. "/" then
    return abs:sub(#base + 2)
  end
  return abs
end

--- The search root of an input (resolved like read's path) and its stat; or nil
--- and an error result.
function M.root(input, ctx, want_dir)
  local root = ctx.path.resolve(input.path or ".")
  local st = vim.uv.fs_stat(root)
  if not st then
    local lst = vim.uv.fs_lstat(root)
    if lst and lst.type == "link" then
      return nil, { success = false, error = ("%s is a broken symbolic link"):format(input.path or root) }
    end
    return nil, { success = false, error = ("not found: %s"):format(input.path or root) }
  end
  if want_dir and st.type ~= "directory" then
    return nil, { success = false, error = ("%s is not a directory"):format(input.path or root) }
  end
  return root, nil, st
end

-- A timer that cancels a search after ctx.timeout seconds (native searches have no
-- process timeout of their own).
function H.deadline(ctx, handle, state)
  local timer = vim.uv.new_timer()
  timer:start(math.max(1, math.floor((ctx.timeout or 30) * 1000)), 0, function()
    vim.schedule(function()
      state.timed_out = true
      handle:cancel()
    end)
  end)
  return function()
    if not timer:is_closing() then
      timer:stop()
      timer:close()
    end
  end
end

--- Runs a search: `spec.argv` (a program, with `spec.decoder` and `spec.cwd`) or
--- `spec.native` (the fields of native.proc_search); `done(results, summary, err)`
--- runs once on the main thread with the decoded events. Returns a cancel function.
---@param ctx flemma.tools.Context
---@param spec { argv?: string[], cwd?: string, decoder?: table, native?: table, ok_codes?: table<integer, boolean> }
---@param done fun(results: table[], summary: table|nil, err: string|nil, res: table|nil)
---@return fun()
function M.run(ctx, spec, done)
  local process = require("flemma.core.process")
  local results, summary = {}, nil
  local function on_events(evs)
    for _, ev in ipairs(evs) do
      if ev.type == "search_summary" then
        summary = ev
      elseif ev.type == "search_match" or ev.type == "search_file" then
        results[#results + 1] = ev
      end
    end
  end
  local state = {}
  local handle
  local ok, err = pcall(function()
    if spec.argv then
      local argv, werr = ctx.sandbox.wrap_command(spec.argv)
      if not argv then
        error("sandbox: " .. tostring(werr) .. " (or turn it off: :Flemma sandbox:disable)", 0)
      end
      handle = process.spawn({
        cmd = argv,
        cwd = spec.cwd,
        decoder = vim.json.encode(spec.decoder),
        merge_output = false,
        timeout = math.floor((ctx.timeout or 30) * 1000),
        on_events = on_events,
      }, function(res)
        local codes = spec.ok_codes or { [0] = true }
        local failure
        if res.timed_out then
          failure = ("the search timed out after %gs"):format(ctx.timeout or 30)
        elseif res.cancelled then
          failure = "the search was cancelled"
        elseif not codes[res.code or -1] then
          local msg = vim.trim(res.stderr or "")
          failure = ("%s exited with code %s%s"):format(
            spec.argv[1],
            tostring(res.code or res.signal),
            msg ~= "" and (": " .. msg) or ""
          )
        end
        done(results, summary, failure, res)
      end)
    else
      local stop
      handle = process.search(spec.native, on_events, function(res)
        if stop then
          stop()
        end
        local failure
        if state.timed_out then
          failure = ("the search timed out after %gs"):format(ctx.timeout or 30)
        elseif res.cancelled then
          failure = "the search was cancelled"
        elseif summary and summary.error then
          failure = summary.error
        end
        done(results, summary, failure, res)
      end)
      stop = H.deadline(ctx, handle, state)
    end
  end)
  if not ok then
    vim.schedule(function()
      done({}, nil, require("flemma.core.util").message(err), nil)
    end)
    return function() end
  end
  return function()
    handle:cancel()
  end
end

--- A note on what a truncation left out, or nil.
---@param ctx flemma.tools.Context
---@param text string
---@return string text
---@return string|nil note
function M.truncate(ctx, text)
  local t = require("flemma.core.config").get().tools.truncate or {}
  local r = ctx.truncate.truncate_head(text, { max_lines = t.max_lines, max_bytes = t.max_bytes })
  if not r.truncated then
    return text, nil
  end
  return (r.content:gsub("\n+$", "")),
    ("[Output truncated: showing the first %d of %d lines (%s of %s).]"):format(
      r.output_lines,
      r.total_lines,
      ctx.truncate.format_size(r.output_bytes),
      ctx.truncate.format_size(r.total_bytes)
    )
end

return M
