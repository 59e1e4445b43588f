--- Where the `edit` tool's `old_string` is in a file: the exact text first, then,
--- when it is not found, line-based fallbacks in order (trailing whitespace
--- ignored, runs of whitespace collapsed, the whole block's indentation shifted,
--- then a fuzzy match anchored on the first or last line, scored by Levenshtein
--- distance per line). Matches are byte ranges of the content; M.diff renders
--- a unified diff of a set of such replacements. The work is bounded (M.BUDGET
--- steps): a search that would cost more is refused, so Neovim never stalls.
local M = {}
local H = {}

-- The most comparison steps a fallback search (and the fuzzy scoring) may take.
M.BUDGET = 20000000
-- The largest file (lines, bytes) the fallbacks search: their tables (a key per
-- line) stay small enough that no step, garbage collection included, is long.
M.MAX_FALLBACK_LINES = 50000
M.MAX_FALLBACK_BYTES = 4 * 1024 * 1024
-- The least similarity (0..1) of a fuzzy match.
M.FUZZY_THRESHOLD = 0.8
-- Lines of context around each hunk of the diff, and the most lines of diff shown.
M.CONTEXT = 3
M.MAX_DIFF_LINES = 400

-- Steps of work between two yields when M.find runs in a coroutine (M.find_async):
-- a slice of about a millisecond, so that Neovim's loop never waits long.
M.SLICE = 2000

-- Spends n steps of the budget; false when it is spent. Inside a coroutine, gives
-- the loop a turn after each M.SLICE steps.
function H.spend(budget, n)
  budget.left = budget.left - n
  budget.slice = budget.slice - n
  if budget.slice <= 0 then
    budget.slice = M.SLICE
    if coroutine.running() then
      coroutine.yield()
    end
  end
  return budget.left >= 0
end

---@class flemma.edit.Lines
---@field text string the content
---@field starts integer[] byte offset of each line's start
---@field ends integer[] byte offset of each line's last byte, its "\n" excluded
---@field n integer number of lines (a final line without "\n" counts)

--- The lines of a text with their byte ranges. One pass over the text.
---@param text string
---@return flemma.edit.Lines
function M.lines(text)
  local starts, ends = {}, {}
  local pos, n = 1, 0
  local len = #text
  while pos <= len do
    local nl = text:find("\n", pos, true)
    n = n + 1
    starts[n] = pos
    ends[n] = (nl or len + 1) - 1
    pos = (nl or len) + 1
  end
  return { text = text, starts = starts, ends = ends, n = n }
end

--- The 1-based line holding byte `offset` (binary search).
function M.line_of(L, offset)
  local lo, hi = 1, L.n
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if L.starts[mid] <= offset then
      lo = mid
    else
      hi = mid - 1
    end
  end
  return lo
end

function H.line(L, i)
  return L.text:sub(L.starts[i], L.ends[i])
end

-- The lines of old_string as a list; one final "\n" does not start another line.
function H.split(s)
  local out = vim.split(s, "\n", { plain = true })
  if #out > 1 and out[#out] == "" then
    out[#out] = nil
  end
  return out
end

function H.rtrim(s)
  return (s:gsub("[ \t\r]+$", ""))
end

-- Leading whitespace and the rest, the rest's inner runs of blanks collapsed.
function H.collapse(s)
  local indent, rest = s:match("^([ \t]*)(.-)[ \t\r]*$")
  return indent, (rest:gsub("[ \t]+", " "))
end

-- The indentation's width, a tab counting 4 columns.
function H.width(indent)
  local w = 0
  for c in indent:gmatch(".") do
    w = w + (c == "\t" and 4 or 1)
  end
  return w
end

--- The fallbacks, in order. `key(line)` gives what is compared of a line; for
--- "normalized indentation" the lines' rest must be equal and every non-blank
--- line's indentation (a tab counting 4 columns) shifted by the same amount.
M.STRATEGIES = {
  {
    name = "trimmed lines",
    key = H.rtrim,
  },
  {
    name = "normalized whitespace",
    key = function(l)
      local indent, rest = H.collapse(l)
      return indent .. rest
    end,
  },
  {
    name = "normalized indentation",
    key = function(l)
      local indent, rest = H.collapse(l)
      return rest, H.width(indent)
    end,
    shifted = true,
  },
}

--- Levenshtein distance of two strings (bytes), two rows.
function H.levenshtein(a, b)
  local la, lb = #a, #b
  if la == 0 then
    return lb
  elseif lb == 0 then
    return la
  end
  local prev, cur = {}, {}
  for j = 0, lb do
    prev[j] = j
  end
  local bb = { b:byte(1, -1) }
  for i = 1, la do
    cur[0] = i
    local ca = a:byte(i)
    for j = 1, lb do
      local cost = ca == bb[j] and 0 or 1
      local v = prev[j - 1] + cost
      local d = prev[j] + 1
      if d < v then
        v = d
      end
      d = cur[j - 1] + 1
      if d < v then
        v = d
      end
      cur[j] = v
    end
    prev, cur = cur, prev
  end
  return prev[lb]
end

-- Similarity (0..1) of two lists of lines of the same length: 1 - the summed
-- Levenshtein distances of their trimmed lines over the summed longer lengths.
function H.similarity(a, b)
  local dist, total = 0, 0
  for i = 1, #a do
    local x, y = vim.trim(a[i]), vim.trim(b[i])
    dist = dist + H.levenshtein(x, y)
    total = total + math.max(#x, #y)
  end
  if total == 0 then
    return 1
  end
  return 1 - dist / total
end

---@class flemma.edit.Match
---@field s integer first byte replaced
---@field e integer last byte replaced (s - 1: nothing)
---@field first integer first line
---@field last integer last line
---@field indent_from? string the indentation of old_string's block (normalized indentation)
---@field indent_to? string the indentation of the file's block

-- The byte range of lines i..j, their final "\n" excluded.
function H.range(L, i, j)
  return { s = L.starts[i], e = L.ends[j], first = i, last = j }
end

-- Windows of #old lines whose keys equal old's, non-overlapping, from the top.
-- nil when the budget runs out. Each line's key is computed once.
function H.windows(L, old, strat, budget)
  local m = #old
  local okeys, owidth = {}, {}
  for k = 1, m do
    okeys[k], owidth[k] = strat.key(old[k])
  end
  local keys, widths = {}, {}
  local function key(k)
    local v = keys[k]
    if v == nil then
      local l = H.line(L, k)
      H.spend(budget, 8 + #l / 8)
      v, widths[k] = strat.key(l)
      keys[k] = v
    end
    return v
  end
  local found = {}
  local i = 1
  while i + m - 1 <= L.n do
    local same = true
    local delta
    for k = 1, m do
      if not H.spend(budget, 1) then
        return nil
      end
      if key(i + k - 1) ~= okeys[k] then
        same = false
        break
      end
      if strat.shifted and okeys[k] ~= "" then
        local d = widths[i + k - 1] - owidth[k]
        if delta == nil then
          delta = d
        elseif d ~= delta then
          same = false
          break
        end
      end
    end
    if same then
      local r = H.range(L, i, i + m - 1)
      if strat.shifted then
        for k = 1, m do
          if okeys[k] ~= "" then
            r.indent_from = old[k]:match("^[ \t]*")
            r.indent_to = H.line(L, i + k - 1):match("^[ \t]*")
            break
          end
        end
      end
      found[#found + 1] = r
      i = i + m
    else
      i = i + 1
    end
  end
  return found
end

-- The windows anchored on old's first (or last) trimmed line that are similar
-- enough, best first. nil when the budget runs out.
function H.fuzzy(L, old, budget)
  local m = #old
  local first, last = vim.trim(old[1]), vim.trim(old[m])
  if m < 2 or (first == "" and last == "") then
    return {}
  end
  local found = {}
  local seen = {}
  for i = 1, L.n - m + 1 do
    if not H.spend(budget, 2 + (L.ends[i] - L.starts[i]) / 16) then
      return nil
    end
    local top = vim.trim(H.line(L, i))
    local bottom = vim.trim(H.line(L, i + m - 1))
    if (first ~= "" and top == first) or (last ~= "" and bottom == last) then
      local win = {}
      local cost = 0
      for k = 0, m - 1 do
        win[k + 1] = H.line(L, i + k)
        cost = cost + #win[k + 1] * #old[k + 1] + 1
      end
      if not H.spend(budget, cost) then
        return nil
      end
      local score = H.similarity(win, old)
      if score >= M.FUZZY_THRESHOLD and not seen[i] then
        seen[i] = true
        local r = H.range(L, i, i + m - 1)
        r.score = score
        found[#found + 1] = r
      end
    end
  end
  table.sort(found, function(a, b)
    return a.first < b.first
  end)
  return found
end

--- Finds old_string in L. Returns the strategy's name and the matches (sorted,
--- non-overlapping), or nil and an error. Exact matches are byte ranges anywhere;
--- the fallbacks match whole lines.
---@param L flemma.edit.Lines
---@param old string
---@return string|nil strategy
---@return flemma.edit.Match[]|string matches or error
function M.find(L, old)
  local text = L.text
  local exact, init = {}, 1
  while true do
    local s, e = text:find(old, init, true)
    if not s then
      break
    end
    exact[#exact + 1] = { s = s, e = e, first = M.line_of(L, s), last = M.line_of(L, e) }
    init = e + 1
  end
  if #exact > 0 then
    return "exact", exact
  end
  if L.n > M.MAX_FALLBACK_LINES or #L.text > M.MAX_FALLBACK_BYTES then
    return nil,
      (
        "`old_string` was not found exactly, and the file is too large for the fallback searches (over %d lines "
        .. "or 4MB): give it exactly, or use `start_line`/`end_line`"
      ):format(M.MAX_FALLBACK_LINES)
  end
  local lines = H.split(old)
  local budget = { left = M.BUDGET, slice = M.SLICE }
  for _, strat in ipairs(M.STRATEGIES) do
    local found = H.windows(L, lines, strat, budget)
    if not found then
      return nil,
        "the file is too large for the fallback searches; give `old_string` exactly, or use `start_line`/`end_line`"
    end
    if #found > 0 then
      return strat.name, found
    end
  end
  local found = H.fuzzy(L, lines, budget)
  if not found then
    return nil, "the file is too large for the fuzzy search; give `old_string` exactly, or use `start_line`/`end_line`"
  end
  if #found > 0 then
    return "fuzzy", found
  end
  return "none", {}
end

--- M.find in slices: runs it in a coroutine resumed from the loop
--- (vim.schedule), so that a long fallback search never blocks Neovim for more
--- than a slice. `cb(strategy, matches_or_error)` on the main loop. Returns a
--- function that cancels the search (cb is not called then).
function M.find_async(L, old, cb)
  local cancelled = false
  local co = coroutine.create(M.find)
  local function step(...)
    if cancelled then
      return
    end
    local ok, a, b = coroutine.resume(co, ...)
    if not ok then
      cb(nil, "the search failed: " .. tostring(a))
    elseif coroutine.status(co) == "dead" then
      cb(a, b)
    else
      vim.schedule(step)
    end
  end
  step(L, old)
  return function()
    cancelled = true
  end
end

--- The replacement text for a line-based match: new_string without one final
--- "\n" (the window's own "\n" stays), re-indented for "normalized indentation".
function M.replacement(match, new)
  if match.indent_from and match.indent_from ~= match.indent_to then
    local from, to = match.indent_from, match.indent_to
    local out = {}
    for _, l in ipairs(vim.split(new, "\n", { plain = true })) do
      if l:sub(1, #from) == from then
        l = to .. l:sub(#from + 1)
      end
      out[#out + 1] = l
    end
    new = table.concat(out, "\n")
  end
  return new
end

--- Applies replacements { s, e, text } (sorted, non-overlapping) to L.text.
function M.apply(L, edits)
  local parts, pos = {}, 1
  for _, ed in ipairs(edits) do
    parts[#parts + 1] = L.text:sub(pos, ed.s - 1)
    parts[#parts + 1] = ed.text
    pos = ed.e + 1
  end
  parts[#parts + 1] = L.text:sub(pos)
  return table.concat(parts)
end

--- A unified diff (`--- a/name`, `+++ b/name`, hunks with M.CONTEXT lines) of
--- the replacements { s, e, text } on L. Work proportional to the changed lines.
function M.diff(L, edits, name)
  local changes = {}
  for _, c in ipairs(H.changes(L, edits)) do
    H.change_lines(L, c)
    if #c.old > 0 or #c.new > 0 then
      changes[#changes + 1] = c
    end
  end
  -- Hunks: changes whose contexts touch are one hunk.
  local out = { "--- a/" .. name, "+++ b/" .. name }
  local shift = 0 -- new line number minus old line number so far
  local i = 1
  while i <= #changes do
    local j = i
    while j < #changes and changes[j + 1].first - changes[j].last - 1 <= 2 * M.CONTEXT do
      j = j + 1
    end
    shift = H.hunk(L, changes, i, j, shift, out)
    if #out > M.MAX_DIFF_LINES then
      out = vim.list_slice(out, 1, M.MAX_DIFF_LINES)
      out[#out + 1] = ("[the diff is cut here: %d lines of it shown]"):format(M.MAX_DIFF_LINES)
      break
    end
    i = j + 1
  end
  return table.concat(out, "\n")
end

--- Each edit as old lines first..last (edits sharing a line are one change):
--- { first, last, edits }.
function H.changes(L, edits)
  local changes = {}
  for _, ed in ipairs(edits) do
    local first = M.line_of(L, ed.s)
    local last = ed.e >= ed.s and M.line_of(L, ed.e) or first
    if ed.s > #L.text then
      first, last = L.n + 1, L.n
    end
    local prev = changes[#changes]
    if prev and first <= prev.last then
      -- Shares a line with the previous edit: one change.
      prev.last = math.max(last, prev.last)
      prev.edits[#prev.edits + 1] = ed
    else
      changes[#changes + 1] = { first = first, last = last, edits = { ed } }
    end
  end
  return changes
end

--- The old and new lines of change c (c.old, c.new), the lines it leaves as they
--- were taken off both ends (they are context, not change).
function H.change_lines(L, c)
  local s0 = L.starts[c.first] or (#L.text + 1)
  local e0 = L.ends[c.last] or #L.text
  -- The lines' text with their final "\n" (when there is one), so that an edit
  -- that removed whole lines leaves no empty line.
  local has_nl = L.text:sub(e0 + 1, e0 + 1) == "\n"
  if has_nl then
    e0 = e0 + 1
  end
  local parts, pos = {}, s0
  for _, ed in ipairs(c.edits) do
    parts[#parts + 1] = L.text:sub(pos, ed.s - 1)
    parts[#parts + 1] = ed.text
    pos = ed.e + 1
  end
  parts[#parts + 1] = L.text:sub(pos, e0)
  local new = table.concat(parts)
  if has_nl and new:sub(-1) == "\n" then
    new = new:sub(1, -2)
  end
  c.old = {}
  for i = c.first, c.last do
    c.old[#c.old + 1] = H.line(L, i)
  end
  c.new = new == "" and {} or vim.split(new, "\n", { plain = true })
  while #c.old > 0 and #c.new > 0 and c.old[1] == c.new[1] do
    table.remove(c.old, 1)
    table.remove(c.new, 1)
    c.first = c.first + 1
  end
  while #c.old > 0 and #c.new > 0 and c.old[#c.old] == c.new[#c.new] do
    c.old[#c.old] = nil
    c.new[#c.new] = nil
    c.last = c.last - 1
  end
end

--- Appends to `out` the hunk of changes i..j with its context; shift is the new
--- line number minus the old one before it. Returns that after it.
function H.hunk(L, changes, i, j, shift, out)
  local from = math.max(1, changes[i].first - M.CONTEXT)
  local to = math.min(L.n, changes[j].last + M.CONTEXT)
  local body, old_n, new_n = {}, 0, 0
  local line = from
  local new_from = from + shift
  for k = i, j do
    local c = changes[k]
    for l = line, c.first - 1 do
      body[#body + 1] = " " .. H.line(L, l)
      old_n, new_n = old_n + 1, new_n + 1
    end
    for _, l in ipairs(c.old) do
      body[#body + 1] = "-" .. l
      old_n = old_n + 1
    end
    for _, l in ipairs(c.new) do
      body[#body + 1] = "+" .. l
      new_n = new_n + 1
    end
    shift = shift + #c.new - #c.old
    line = c.last + 1
  end
  for l = line, to do
    body[#body + 1] = " " .. H.line(L, l)
    old_n, new_n = old_n + 1, new_n + 1
  end
  out[#out + 1] = ("@@ -%d,%d +%d,%d @@"):format(
    old_n == 0 and from - 1 or from,
    old_n,
    new_n == 0 and new_from - 1 or new_from,
    new_n
  )
  vim.list_extend(out, body)
  return shift
end

return M
