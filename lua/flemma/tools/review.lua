--- The diff review of a pending `write` or `edit` call (issue 27): the change the call
--- would make, computed by the tool itself (its definition's `propose`), shown by the
--- UI (flemma.ui.review) as a diff the user may trim or edit, and what the user
--- accepted handed to the tool when the call runs (M.take): the tool writes that text
--- through its own checks (sandbox, links, backup, atomic write), never through a
--- path of its own here, and only while the file still has the content the review
--- showed (M.unchanged: its hash, taken when the review opened).
---
--- A chat's reviews are the `reviews` field of its session record: tool id -> record.
--- At most one is open (shown) per chat; an accepted one waits there for its run.
local session = require("flemma.core.session")
local util = require("flemma.core.util")

local M = {}
local H = {}

--- The largest file (before or after the change) a review shows.
M.MAX_BYTES = 8 * 1024 * 1024

--- At most this many lines of the difference between what was asked and what was
--- written go into the result.
M.MAX_DIFF_LINES = 200

--- At most this many hunks are named in each list of the result (left out, changed,
--- added); the count of the others follows.
M.MAX_HUNKS = 20

---@class flemma.tools.review.Proposal
---@field path string the path as the call gave it
---@field target string the absolute file written (links followed)
---@field before string|nil the file's content now; nil: there is no file
---@field asked string the content the call would leave

---@class flemma.tools.review.Record: flemma.tools.review.Proposal
---@field input table the call's input as its execute gets it (tools.checked_input)
---@field id string
---@field name string the tool
---@field hash string M.hash(before), taken when the review opened
---@field buf integer|nil the buffer of the proposed side while the review is open
---@field close fun()|nil closes the review's windows (given by the UI)
---@field accepted string|nil the text the user accepted

--- A digest of a file's content (nil: no file). NUL bytes are escaped first
--- (vim.fn.sha256 takes no NUL), injectively.
---@param text string|nil
---@return string
function M.hash(text)
  if text == nil then
    return "absent"
  end
  local escaped = text:gsub("\1", "\1\1")
  escaped = escaped:gsub("%z", "\1\2")
  return "sha256:" .. vim.fn.sha256(escaped)
end

function H.all(bufnr)
  local r = session.get(bufnr)
  r.reviews = r.reviews or {}
  return r.reviews
end

--- The review of call `id` in chat `bufnr`, or nil.
---@param bufnr integer
---@param id string
---@return flemma.tools.review.Record|nil
function M.get(bufnr, id)
  local all = session.field(bufnr, "reviews")
  return all and all[id]
end

--- The open (shown) review of a chat, or nil.
---@param bufnr integer
---@return flemma.tools.review.Record|nil
function M.open_one(bufnr)
  for _, rec in pairs(session.field(bufnr, "reviews") or {}) do
    if rec.buf and not rec.accepted then
      return rec
    end
  end
  return nil
end

--- Whether a tool offers a review (its definition has `propose`).
---@param name string
---@return boolean
function M.supports(name)
  local def = require("flemma.tools").get(name)
  return type(def) == "table" and type(def.propose) == "function"
end

--- Computes the change of a tool call: `cb(proposal)` or `cb(nil, err)`, once, on
--- the main loop.
---@param bufnr integer the chat
---@param use { id: string, name: string, input: table|nil }
---@param cb fun(p: flemma.tools.review.Proposal|nil, err: string|nil)
function M.prepare(bufnr, use, cb)
  local def = require("flemma.tools").get(use.name)
  if type(def) ~= "table" or type(def.propose) ~= "function" then
    return cb(nil, ("`%s` calls have no diff review (write and edit have)"):format(use.name))
  end
  if type(use.input) ~= "table" then
    return cb(nil, ("the input of `%s` is not a JSON object"):format(use.id))
  end
  local input, bad = require("flemma.tools").checked_input(def, use.input)
  if not input then
    return cb(nil, ("invalid input for `%s`: %s"):format(use.name, bad))
  end
  local ctx = require("flemma.tools.context").new(bufnr, use.name)
  local done = false
  local ok, err = pcall(def.propose, input, ctx, function(p, perr)
    if done then
      return
    end
    done = true
    if not p then
      return cb(nil, perr or "no change to review")
    end
    if (p.before and #p.before > M.MAX_BYTES) or #p.asked > M.MAX_BYTES then
      return cb(
        nil,
        ("%s is over %s: too large for a diff review"):format(
          p.path,
          require("flemma.core.truncate").format_size(M.MAX_BYTES)
        )
      )
    end
    for _, t in ipairs({ p.before or "", p.asked }) do
      if t:find("\0", 1, true) then
        return cb(nil, p.path .. " holds binary data (NUL bytes): no diff review")
      end
    end
    p.input = input
    cb(p)
  end)
  if not ok and not done then
    done = true
    cb(nil, util.message(err))
  end
end

--- Keeps a review that opened: its hash is taken now, from what it shows. A review
--- of the same call that was there goes (closed).
---@param bufnr integer
---@param id string
---@param name string
---@param p flemma.tools.review.Proposal
---@return flemma.tools.review.Record
function M.start(bufnr, id, name, p)
  local all = H.all(bufnr)
  for other, rec in pairs(all) do
    if rec.buf and not rec.accepted then
      M.discard(bufnr, other)
    end
  end
  local rec = vim.tbl_extend("force", {}, p, { id = id, name = name, hash = M.hash(p.before) })
  all[id] = rec
  return rec
end

--- The text of the proposed side now: its lines, with a final newline when what was
--- asked had one.
---@param rec flemma.tools.review.Record
---@return string|nil
function M.proposed_text(rec)
  if not (rec.buf and vim.api.nvim_buf_is_valid(rec.buf)) then
    return nil
  end
  local lines = vim.api.nvim_buf_get_lines(rec.buf, 0, -1, false)
  local text = table.concat(lines, "\n")
  if rec.asked:sub(-1) == "\n" then
    text = text .. "\n"
  end
  return text
end

function H.close(rec)
  local close = rec.close
  rec.close, rec.buf = nil, nil
  if close then
    local ok, err = pcall(close)
    if not ok then
      util.warn("closing the diff review failed: " .. util.message(err))
    end
  end
end

--- Accepts the open review of call `id`: what its proposed side shows now is what
--- the call writes when it runs. Closes the review. false when no review of it is
--- open.
---@param bufnr integer
---@param id string
---@return boolean
function M.accept(bufnr, id)
  local rec = M.get(bufnr, id)
  local text = rec and not rec.accepted and M.proposed_text(rec)
  if not text then
    return false
  end
  rec.accepted = text
  H.close(rec)
  return true
end

--- Forgets the review of call `id` (closing it when open); nothing of it is written.
---@param bufnr integer
---@param id string
function M.discard(bufnr, id)
  local all = session.field(bufnr, "reviews")
  local rec = all and all[id]
  if not rec then
    return
  end
  all[id] = nil
  H.close(rec)
end

--- The accepted review of the call an execution context belongs to, taken (a second
--- run of the call does what it asks). A review still open, not accepted, is closed
--- and forgotten: the call runs as asked. An accepted review of other input (the
--- tool use edited since, a hook's change) gives nil and the refusal.
---@param ctx flemma.tools.Context
---@param input table the input the tool's execute got
---@return flemma.tools.review.Record|nil
---@return string|nil refusal
function M.take(ctx, input)
  local id = require("flemma.tools").call_id(ctx)
  if id == nil or type(ctx.bufnr) ~= "number" then
    return nil
  end
  local rec = M.get(ctx.bufnr, id)
  if not rec then
    return nil
  end
  session.get(ctx.bufnr).reviews[id] = nil
  if not rec.accepted then
    H.close(rec)
    return nil
  end
  if not vim.deep_equal(rec.input, input) then
    return nil,
      "refused: the input of this call changed after the user reviewed its change, so nothing was written; "
        .. "make the change again"
  end
  return rec
end

--- nil when `current` (the file's content now; nil: no file) is what the review
--- showed, in the file it showed (`target`: where the path leads now), else the
--- refusal (the tool's error result).
---@param rec flemma.tools.review.Record
---@param current string|nil
---@param target string
---@return string|nil
function M.changed(rec, current, target)
  if target ~= rec.target then
    return ("refused: %s leads to another file (%s) than when the user reviewed this change (%s), so the reviewed text was not written"):format(
      rec.path,
      target,
      rec.target
    )
  end
  if M.hash(current) == rec.hash then
    return nil
  end
  return (
    "refused: %s changed on disk after the user reviewed this change (%s), so the reviewed "
    .. "text was not written and the file is as it is now; read it again and make the change anew"
  ):format(
    rec.path,
    current == nil and "it is gone" or rec.before == nil and "it exists now" or "its content differs"
  )
end

--- The file's content now for M.changed, read on the main thread: nil when there is
--- no file; false and why when it is not a regular file or is larger than a review.
---@param path string absolute
---@return string|nil|false
---@return string|nil err
function M.read_current(path)
  local st = vim.uv.fs_stat(path)
  if not st then
    return nil
  end
  if st.type ~= "file" then
    return false, ("%s is %s"):format(path, require("flemma.core.files").refusal(st.type))
  end
  if st.size > M.MAX_BYTES then
    return false, ("%s is larger now than when it was reviewed"):format(path)
  end
  local fd, err = require("flemma.core.files").open_regular(path)
  if not fd then
    return false, ("cannot read %s: %s"):format(path, err)
  end
  local chunks, offset = {}, 0
  while true do
    local data = vim.uv.fs_read(fd, 1024 * 1024, offset)
    if not data or data == "" then
      break
    end
    chunks[#chunks + 1] = data
    offset = offset + #data
    if offset > M.MAX_BYTES then
      break
    end
  end
  vim.uv.fs_close(fd)
  return table.concat(chunks)
end

-- A chat unloaded (its text is gone: :e, :bdelete) or wiped out: its reviews go,
-- the open one closed.
for _, event in ipairs({ "unload", "wipe" }) do
  session.on(event, "review", function(_, record)
    local all = record.reviews or {}
    record.reviews = nil
    for _, rec in pairs(all) do
      H.close(rec)
    end
  end)
end

-- ---------------------------------------------------------------------------
-- What the model is told
-- ---------------------------------------------------------------------------

function H.diff(a, b, opts)
  local fn = (vim.text and vim.text.diff) or vim.diff
  return fn(a, b, opts)
end

function H.lines(text)
  local out = vim.split(text, "\n", { plain = true })
  if out[#out] == "" then
    out[#out] = nil
  end
  return out
end

-- A hunk's span in the lines of the old text: a change covers its lines, an
-- insertion (count 0) sits between line `start` and the next.
function H.span(h)
  if h[2] == 0 then
    return h[1] + 0.5, h[1] + 0.5
  end
  return h[1], h[1] + h[2] - 1
end

function H.overlap(a, b)
  local a1, a2 = H.span(a)
  local b1, b2 = H.span(b)
  return math.max(a1, b1) <= math.min(a2, b2)
end

function H.same_lines(x, xs, y, ys, n)
  for i = 0, n - 1 do
    if x[xs + i] ~= y[ys + i] then
      return false
    end
  end
  return true
end

function H.clip(s)
  s = s:gsub("%s+$", "")
  if #s > 60 then
    s = s:sub(1, 57) .. "..."
  end
  return vim.json.encode(s)
end

-- Where a hunk is and what it does: `lines 4-6: -"old" +"new"`.
function H.where(h, before, new)
  local where
  if h[2] == 0 then
    where = h[1] == 0 and "at the start" or ("after line %d"):format(h[1])
  elseif h[2] == 1 then
    where = ("line %d"):format(h[1])
  else
    where = ("lines %d-%d"):format(h[1], h[1] + h[2] - 1)
  end
  local what = {}
  if h[2] > 0 then
    what[#what + 1] = "-" .. H.clip(before[h[1]] or "")
  end
  if h[4] > 0 then
    what[#what + 1] = "+" .. H.clip(new[h[3]] or "")
  end
  return ("%s: %s"):format(where, table.concat(what, " "))
end

--- The result of a reviewed call whose every hunk the user left out: nothing was
--- written.
---@param rec flemma.tools.review.Record
---@return string
function M.nothing_written(rec)
  return ("Nothing was written to %s: the user reviewed this change in a diff and left out every hunk of it."):format(
    rec.path
  )
end

-- Where hunk h ({ start_a, count_a, start_b, count_b }, vim.diff's indices) is in
-- each text: its first line and the first unchanged line after it (an insertion,
-- count 0, sits after line start).
function H.bounds(h)
  local pa = h[2] == 0 and h[1] + 1 or h[1]
  local pb = h[4] == 0 and h[3] + 1 or h[3]
  return pa, pa + h[2], pb, pb + h[4]
end

-- After a text's last line when the text has no final newline.
function H.no_eol(out, yes)
  if yes then
    out[#out + 1] = "\\ No newline at end of file"
  end
end

-- A hunk header's range: "5" (one line), "5,3", "4,0" (none: after line 4).
function H.range(first, count)
  if count == 1 then
    return tostring(first)
  end
  return ("%d,%d"):format(count == 0 and first - 1 or first, count)
end

--- A unified diff from `a` to `b` (one line of context) in a fence, with its two file
--- lines; the hunks after MAX_DIFF_LINES lines are counted, not shown (and not
--- formatted: the cost is the line diff's and the split's).
---@param a string
---@param b string
---@param name_a string
---@param name_b string
---@param lines_a? string[] a's lines, when the caller has them
---@param lines_b? string[]
---@return string
function M.unified(a, b, name_a, name_b, lines_a, lines_b)
  local hunks = H.diff(a, b, { result_type = "indices" })
  local al, bl = lines_a or H.lines(a), lines_b or H.lines(b)
  local out = { "--- " .. name_a, "+++ " .. name_b }
  local eol_a, eol_b = a == "" or a:sub(-1) == "\n", b == "" or b:sub(-1) == "\n"
  local CTX = 1
  local i = 1
  while i <= #hunks do
    if #out >= M.MAX_DIFF_LINES then
      out[#out + 1] = ("... (%d more hunks)"):format(#hunks - i + 1)
      break
    end
    -- Hunks i..j close enough to share their context are one block.
    local j = i
    while hunks[j + 1] do
      local _, qa = H.bounds(hunks[j])
      local pa_next = H.bounds(hunks[j + 1])
      if pa_next - qa > 2 * CTX then
        break
      end
      j = j + 1
    end
    local pa_i, _, pb_i = H.bounds(hunks[i])
    local _, qa_j, _, qb_j = H.bounds(hunks[j])
    local first_a = math.max(1, pa_i - CTX)
    local last_a = math.min(#al, qa_j - 1 + CTX)
    local first_b = pb_i - (pa_i - first_a)
    local last_b = qb_j - 1 + (last_a - (qa_j - 1))
    local count_a, count_b = last_a - first_a + 1, last_b - first_b + 1
    out[#out + 1] = ("@@ -%s +%s @@"):format(H.range(first_a, count_a), H.range(first_b, count_b))
    local at = first_a
    for k = i, j do
      local pa, qa, pb, qb = H.bounds(hunks[k])
      for x = at, pa - 1 do
        out[#out + 1] = " " .. al[x]
      end
      for x = pa, qa - 1 do
        out[#out + 1] = "-" .. al[x]
        H.no_eol(out, x == #al and not eol_a)
      end
      for x = pb, qb - 1 do
        out[#out + 1] = "+" .. bl[x]
        H.no_eol(out, x == #bl and not eol_b)
      end
      at = qa
    end
    for x = at, last_a do
      out[#out + 1] = " " .. al[x]
      H.no_eol(out, x == #al and not eol_a)
    end
    i = j + 1
  end
  local body = table.concat(out, "\n")
  local longest = 2
  for run in body:gmatch("`+") do
    longest = math.max(longest, #run)
  end
  local fence = ("`"):rep(longest + 1)
  return fence .. "diff\n" .. body .. "\n" .. fence
end

--- What the result of a reviewed call says about it: that the user reviewed it and,
--- when what was written differs from what was asked, which of the asked hunks were
--- left out or changed, what the user added, and a short unified diff from the
--- asked text to the written one.
---@param rec flemma.tools.review.Record
---@param written string
---@return string
function M.outcome(rec, written)
  if written == rec.asked then
    return "The user reviewed this change in a diff and accepted it as it was."
  end
  -- What the user kept of a secret file (.env, a key) is its own text: not for the
  -- model, which never read it.
  local secret = require("flemma.policy.secret_paths").check(rec.target)
  if secret then
    return (
      "The user reviewed this change in a diff and changed it before it was written. %s is a secret file (%s): "
      .. "what was written is not shown to you; ask the user if you need to know."
    ):format(rec.path, secret)
  end
  local before = rec.before or ""
  local bl, al, wl = H.lines(before), H.lines(rec.asked), H.lines(written)
  local asked_h = H.diff(before, rec.asked, { result_type = "indices" })
  local written_h = H.diff(before, written, { result_type = "indices" })
  local left, changed, added = {}, {}, {}
  -- Both lists are in file order and their hunks do not overlap each other: one
  -- sweep pairs each asked hunk with the written ones over the same lines.
  local touched = {}
  local j = 1
  for i, h in ipairs(asked_h) do
    local lo, hi = H.span(h)
    while written_h[j] and select(2, H.span(written_h[j])) < lo do
      j = j + 1
    end
    local hits = {}
    local k = j
    while written_h[k] and H.span(written_h[k]) <= hi do
      if H.overlap(h, written_h[k]) then
        hits[#hits + 1] = written_h[k]
        touched[k] = true
      end
      k = k + 1
    end
    local text = { i, h, al }
    if #hits == 0 then
      left[#left + 1] = text
    else
      local w = hits[1]
      local same = #hits == 1
        and w[1] == h[1]
        and w[2] == h[2]
        and w[4] == h[4]
        and H.same_lines(al, h[3], wl, w[3], h[4])
      if not same then
        changed[#changed + 1] = text
      end
    end
  end
  for k, w in ipairs(written_h) do
    if not touched[k] then
      added[#added + 1] = { nil, w, wl }
    end
  end
  local out = { "The user reviewed this change in a diff and changed it before it was written." }
  for _, group in ipairs({
    { "Left out (not written): ", left },
    { "Changed by the user: ", changed },
    { "Added by the user: ", added },
  }) do
    local list = group[2]
    if #list > 0 then
      -- Only the hunks named are described.
      local shown = {}
      for x = 1, math.min(#list, M.MAX_HUNKS) do
        local e = list[x]
        local where = H.where(e[2], bl, e[3])
        shown[x] = e[1] and ("hunk %d of %d (%s)"):format(e[1], #asked_h, where) or where
      end
      if #list > M.MAX_HUNKS then
        shown[#shown + 1] = ("and %d more"):format(#list - M.MAX_HUNKS)
      end
      out[#out + 1] = group[1] .. table.concat(shown, "; ") .. "."
    end
  end
  out[#out + 1] = ""
  out[#out + 1] = "What was written differs from what you asked for:"
  out[#out + 1] =
    M.unified(rec.asked, written, rec.path .. " (what you asked for)", rec.path .. " (what was written)", al, wl)
  return table.concat(out, "\n")
end

return M
