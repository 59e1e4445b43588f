--- The incremental document (the header's "Incremental document" section): a buffer's
--- parse kept up to date from line edits, read segment by segment; items are
--- converted by item.lua.
local ffi = require("ffi")
local util = require("flemma.core.util")
local cdata = require("flemma.core.native.cdata")
local item = require("flemma.core.native.item")

local S, N = require("flemma.core.native.section").new()
local H = {}

--- A new, empty incremental document (freed when collected).
---@return ffi.cdata*
function S.idoc_new()
  local lib = N.lib()
  local d = lib.flemma_idoc_new()
  if d == nil then
    util.error("cannot create a document: " .. N.last_error())
  end
  return ffi.gc(d, lib.flemma_idoc_free)
end

--- Replaces lines first .. last - 1 (0-based, end exclusive) with `lines`.
--- Raises on failure (then the document must be rebuilt).
function S.idoc_edit(d, first, last, lines)
  local lib = N.lib()
  local ptrs, lens, n = cdata.pack_lines(lines, "parse_document")
  if lib.flemma_idoc_edit(d, first, last, ptrs, lens, n) ~= 0 then
    util.error("cannot update the document: " .. N.last_error())
  end
end

--- Like idoc_edit with the lines of the file at `path`, read and split natively,
--- when the file still is what the buffer was read from: `size` bytes, `count`
--- lines each ended by "\n", and each sample { offset, line } at its byte offset.
--- Returns false, changing nothing, otherwise.
---@param samples { [1]: integer, [2]: string }[]
---@return boolean
function S.idoc_edit_file(d, first, last, path, size, count, samples)
  local lib = N.lib()
  local n = #samples
  local offsets = ffi.new("int64_t[?]", math.max(n, 1))
  local ptrs = ffi.new("const char *[?]", math.max(n, 1))
  local lens = ffi.new("size_t[?]", math.max(n, 1))
  for k, s in ipairs(samples) do
    offsets[k - 1], ptrs[k - 1], lens[k - 1] = s[1], s[2], #s[2]
  end
  local inserted = ffi.new("int[1]")
  -- `samples` keeps the sample strings alive during the call.
  if lib.flemma_idoc_edit_file(d, first, last, path, size, count, offsets, ptrs, lens, n, inserted) ~= 0 then
    util.error("cannot update the document: " .. N.last_error())
  end
  return inserted[0] == 1
end

--- Version (edits applied), line count and segment count.
function S.idoc_info(d)
  local lib = N.lib()
  return tonumber(lib.flemma_idoc_version(d)), lib.flemma_idoc_line_count(d), lib.flemma_idoc_segment_count(d)
end

H.i32a = ffi.new("int32_t[2]")

--- The segments (0-based [lo, hi)) that may have changed since version
--- `since`; `exact` is false when the document cannot tell (all of them).
---@return boolean exact, integer lo, integer hi
function S.idoc_changes(d, since)
  local r = N.lib().flemma_idoc_changes(d, since, H.i32a, H.i32a + 1)
  return r == 1, H.i32a[0], H.i32a[1]
end

--- The lines (1-based, first .. last) whose parse may differ from that of
--- version `since` (the lines above and below are parsed the same); `exact` is
--- false when the document cannot tell (then all of them).
---@return boolean exact, integer first, integer last
function S.idoc_reparsed(d, since)
  local r = N.lib().flemma_idoc_reparsed(d, since, H.i32a, H.i32a + 1)
  return r == 1, H.i32a[0], H.i32a[1]
end

H.TOUCHED_CAP = 32

--- The same lines place by place: a list of { first, last } (1-based), in
--- order and disjoint, one per place edited since `since` (at most 32: the
--- closest merged); empty when nothing changed, the whole document when
--- `since` is too old to tell.
---@return integer[][]
function S.idoc_touched(d, since)
  H.touched = H.touched or ffi.new("int32_t[?]", 2 * H.TOUCHED_CAP)
  local n = N.lib().flemma_idoc_touched(d, since, H.touched, H.TOUCHED_CAP)
  if n < 0 then
    util.error("cannot read the document: " .. N.last_error())
  end
  local out = {}
  for k = 0, n - 1 do
    out[k + 1] = { H.touched[2 * k], H.touched[2 * k + 1] }
  end
  return out
end

H.seg = nil

--- The raw segment struct of 0-based index i (valid until the next edit).
function S.idoc_segment_raw(d, i)
  H.seg = H.seg or ffi.new("flemma_idoc_segment")
  if N.lib().flemma_idoc_get_segment(d, i, H.seg) ~= 0 then
    util.error("cannot read the document: " .. N.last_error())
  end
  return H.seg
end

--- The lines of segment i (0-based) as strings, or nil when they cannot be
--- told apart (a line holding a NUL byte).
function S.idoc_segment_lines(d, i)
  local s = S.idoc_segment_raw(d, i)
  local out, n = {}, 0
  for l in (ffi.string(s.text) .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    out[n] = l
  end
  if n ~= s.line_count then
    return nil
  end
  return out
end

--- Whether line `line` (1-based) of the document is `text`, compared in the
--- document's memory: no Lua string is made for the line or its segment (lines
--- asked in order are found from where the last one was).
---@param line integer
---@param text string
---@return boolean
function S.idoc_line_is(d, line, text)
  return N.lib().flemma_idoc_line_is(d, line, text, #text) == 1
end

--- The 0-based index of the segment holding 1-based line, or nil.
function S.idoc_segment_at(d, line)
  local i = N.lib().flemma_idoc_segment_at(d, line)
  return i >= 0 and i or nil
end

--- The last tool use of this id: 0-based segment index and item index, or nil.
function S.idoc_find_tool_use(d, id)
  local r = N.lib().flemma_idoc_find_tool_use(d, id, #id, H.i32a, H.i32a + 1)
  if r == 1 then
    return H.i32a[0], H.i32a[1]
  end
  return nil
end

--- True when segment i holds a tool result that is a pending placeholder with
--- no content (a tool preview goes there); read without building tables.
function S.idoc_has_empty_pending(d, i)
  item.enums()
  local s = S.idoc_segment_raw(d, i)
  local items = s.items
  for k = 0, s.item_count - 1 do
    if item.is_empty_pending(items[k]) then
      return true
    end
  end
  return false
end

--- True when segment i holds a tool result whose fence's info string is `info`
--- (e.g. `flemma:todo`); read without building tables (only labels of that length
--- become strings).
---@param info string
function S.idoc_has_result_info(d, i, info)
  item.enums()
  local s = S.idoc_segment_raw(d, i)
  local items, n = s.items, #info
  local read
  for k = 0, s.item_count - 1 do
    local it = items[k]
    if item.is_result(it) and it.label.len == n then
      read = read or item.reader(s.text, s.arena)
      if read(it.label) == info then
        return true
      end
    end
  end
  return false
end

--- The lines of segment i's message, absolute, read without building tables
--- (for motions): { role, first (the marker), last (trailing blank lines
--- excluded), content (first line of its first part, nil when empty),
--- seg_first, seg_last (the whole segment) }; `role` is nil for a segment
--- without a message (a frontmatter alone).
function S.idoc_message(d, i)
  item.enums()
  local s = S.idoc_segment_raw(d, i)
  local off = s.first_line - 1
  local out = { seg_first = s.first_line, seg_last = off + s.line_count }
  local items, n = s.items, s.item_count
  for k = 0, math.min(n, 2) - 1 do
    local it = items[k]
    local role = item.message_role(it)
    if role then
      out.role, out.first, out.last = role, it.first_line + off, it.last_line + off
      if k + 1 < n then
        out.content = items[k + 1].first_line + off
      end
      break
    end
  end
  return out
end

--- Segment i without its texts, for views that work line by line (folds,
--- highlights): { id, first_line, line_count, items }, each item { kind,
--- first, last, fence?, role?, status?, error?, unclosed?, name?, tool_id?,
--- lang? } with lines relative to the segment (1 is its first line), so the
--- outline of an unchanged segment stays right when the segment moves.
function S.idoc_outline(d, i)
  item.enums()
  local s = S.idoc_segment_raw(d, i)
  local str = item.reader(s.text, s.arena)
  local items, src = {}, s.items
  for k = 0, s.item_count - 1 do
    local o = item.outline(src[k], str)
    if o then
      items[#items + 1] = o
    end
  end
  return { id = tonumber(s.id), first_line = s.first_line, line_count = s.line_count, items = items }
end

--- Segment i as Lua tables, lines absolute: { id, version, first_line,
--- line_count, message?, frontmatter?, inputs } where `inputs` maps each
--- tool_use part with a valid input to its raw JSON (decoded by the caller).
function S.idoc_segment(d, i)
  item.enums()
  local s = S.idoc_segment_raw(d, i)
  local str, shift, unescape = item.reader(s.text, s.arena), s.first_line - 1, N.unescape
  local inputs = {}
  local out = {
    id = tonumber(s.id),
    version = tonumber(s.version),
    first_line = s.first_line,
    line_count = s.line_count,
    inputs = inputs,
  }
  local parts, nparts
  local items = s.items
  for k = 0, s.item_count - 1 do
    local kind, v, input = item.convert(items[k], str, shift, unescape)
    if kind == "message" then
      parts, nparts = {}, 0
      v.parts = parts
      out.message = v
    elseif kind == "frontmatter" then
      out.frontmatter = v
    elseif kind and parts then
      nparts = nparts + 1
      parts[nparts] = v
      if input then
        inputs[v] = input
      end
    end
  end
  return out
end

H.diagp = nil

--- Every diagnostic of the document, as parse_document reports them.
function S.idoc_diagnostics(d)
  item.enums()
  local lib = N.lib()
  H.diagp = H.diagp or ffi.new("const flemma_doc_diag *[1]")
  local n = lib.flemma_idoc_diagnostics(d, H.diagp)
  if n < 0 then
    util.error("cannot read the diagnostics: " .. N.last_error())
  end
  -- The message ranges index the arena only.
  local arena = lib.flemma_idoc_diag_arena(d)
  local str = item.reader(arena, arena)
  local diags, out = H.diagp[0], {}
  for k = 0, n - 1 do
    out[k + 1] = item.diagnostic(diags[k], str)
  end
  return out
end

return S
