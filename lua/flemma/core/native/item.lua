--- The one converter of parsed items (flemma_doc_item, flemma_doc_diag) into Lua tables,
--- for whole documents (document.lua) and the segments of incremental ones (idoc.lua).
--- Kinds, roles, statuses, flags and severities are the header's enum constants, read
--- through the FFI: no number of the header is repeated here.
local bit = require("bit")
local ffi = require("ffi")

local band = bit.band

-- Used by document.lua and idoc.lua only: not part of flemma.core.native.
local S, N = require("flemma.core.native.section").new(true)
local H = {}

-- The enum values, read from the header on first use (S.enums()).
local FRONTMATTER, MESSAGE, TEXT, TOOL_USE, TOOL_RESULT, THINKING
local STATUS_NONE, STATUS_UNKNOWN
local F_ERROR, F_LEGACY, F_REDACTED, F_BAD_INPUT, F_UNCLOSED
H.enums = nil

--- The names of the header's item enums: { kinds, roles, statuses, severities }, each
--- a map from the enum value to the name the Lua model uses (read on first use).
---@return { kinds: table<integer, string>, roles: table<integer, string>, statuses: table<integer, string>, severities: table<integer, string> }
function S.enums()
  if H.enums then
    return H.enums
  end
  local C = N.C
  FRONTMATTER, MESSAGE, TEXT = C.FLEMMA_DOC_FRONTMATTER, C.FLEMMA_DOC_MESSAGE, C.FLEMMA_DOC_TEXT
  TOOL_USE, TOOL_RESULT, THINKING = C.FLEMMA_DOC_TOOL_USE, C.FLEMMA_DOC_TOOL_RESULT, C.FLEMMA_DOC_THINKING
  STATUS_NONE, STATUS_UNKNOWN = C.FLEMMA_DOC_STATUS_NONE, C.FLEMMA_DOC_STATUS_UNKNOWN
  F_ERROR, F_LEGACY, F_REDACTED = C.FLEMMA_DOC_F_ERROR, C.FLEMMA_DOC_F_LEGACY, C.FLEMMA_DOC_F_REDACTED
  F_BAD_INPUT, F_UNCLOSED = C.FLEMMA_DOC_F_BAD_INPUT, C.FLEMMA_DOC_F_UNCLOSED
  -- The names the Lua model uses are the constants' own: FLEMMA_DOC_TOOL_USE -> "tool_use".
  H.enums = {
    kinds = N.enum_names("flemma_doc_kind", "FLEMMA_DOC_"),
    roles = N.enum_names("flemma_doc_role", "FLEMMA_DOC_"),
    statuses = N.enum_names("flemma_doc_status", "FLEMMA_DOC_STATUS_"),
    severities = N.enum_names("flemma_doc_severity", "FLEMMA_DOC_SEV_"),
  }
  return H.enums
end

--- A reader of the ranges (flemma_doc_str) of one document or segment: off >= 0
--- indexes `base`, off < 0 indexes `arena` at -off - 1; an empty range reads "".
---@return fun(range: ffi.cdata*): string
function S.reader(base, arena)
  local ffi_string = ffi.string
  return function(r)
    local off, len = r.off, r.len
    if len == 0 then
      return ""
    end
    return off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
  end
end

-- The status word of a tool result: nil for a real result, the raw word of an unknown one.
function H.status(it, str, statuses)
  local status = it.status
  if status == STATUS_UNKNOWN then
    return str(it.note)
  elseif status ~= STATUS_NONE then
    return statuses[status]
  end
  return nil
end

-- Every constructor below names all the fields of its table, so it is sized once.
function H.tool_use(it, str, first, last, fence_line)
  local p = {
    kind = "tool_use",
    first_line = first,
    last_line = last,
    id = str(it.key),
    name = str(it.label),
    fence_line = fence_line,
    input = nil, -- `input` (or `input_error`) is set by the caller
  }
  if band(it.flags, F_BAD_INPUT) == 0 then
    return p, str(it.body)
  end
  p.input_error = str(it.note)
  return p
end

function H.tool_result(it, str, first, last, fence_line, statuses)
  local flags = it.flags
  return {
    kind = "tool_result",
    first_line = first,
    last_line = last,
    id = str(it.key),
    is_error = band(flags, F_ERROR) ~= 0,
    content = str(it.body),
    info = str(it.label),
    legacy = band(flags, F_LEGACY) ~= 0,
    status = H.status(it, str, statuses),
    fence_line = fence_line,
  }
end

function H.thinking(it, str, first, last, unescape)
  local p = {
    kind = "thinking",
    first_line = first,
    last_line = last,
    text = unescape(str(it.body)),
    redacted = band(it.flags, F_REDACTED) ~= 0,
  }
  local signature, provider = str(it.key), str(it.label)
  if signature ~= "" then
    p.signature = signature
  end
  if provider ~= "" then
    p.provider = provider
  end
  return p
end

--- One item as the Lua model has it, its lines shifted by `shift`: a message ({ role,
--- first_line, last_line }, its `parts` list to be added), the frontmatter ({ lang, code, first_line,
--- last_line }) or a part (text, tool_use, tool_result, thinking); the first value
--- is the item's kind name. For a tool use whose input is valid JSON, the input's
--- raw text is the third value (the caller decodes it); a tool use with an invalid
--- input has `input_error`. `str` reads ranges (S.reader), `unescape` is the
--- escape section's.
---@return string kind
---@return table value
---@return string? input
function S.convert(it, str, shift, unescape)
  local kind = it.kind
  local first, last = it.first_line + shift, it.last_line + shift
  if kind == TEXT then
    return "text", { kind = "text", first_line = first, last_line = last, text = unescape(str(it.body)) }
  elseif kind == MESSAGE then
    -- `parts` is set by the caller.
    return "message", { role = H.enums.roles[it.role], first_line = first, last_line = last, parts = nil }
  end
  local fence_line = it.fence_line
  fence_line = fence_line > 0 and fence_line + shift or nil
  if kind == TOOL_USE then
    local p, input = H.tool_use(it, str, first, last, fence_line)
    return "tool_use", p, input
  elseif kind == TOOL_RESULT then
    return "tool_result", H.tool_result(it, str, first, last, fence_line, H.enums.statuses)
  elseif kind == THINKING then
    return "thinking", H.thinking(it, str, first, last, unescape)
  elseif kind == FRONTMATTER then
    return "frontmatter", { lang = str(it.key), code = str(it.body), first_line = first, last_line = last }
  end
  return nil
end

--- One item without its texts, for views that work line by line (folds, highlights):
--- { kind, first, last, fence?, role?, status?, error?, unclosed?, name?, tool_id?,
--- lang? } with the item's own lines; nil for a kind this binding does not know.
---@return table|nil
function S.outline(it, str)
  local E = H.enums
  local kind = E.kinds[it.kind]
  if not kind then
    return nil
  end
  local o = { kind = kind, first = it.first_line, last = it.last_line }
  if it.fence_line > 0 then
    o.fence = it.fence_line
  end
  if band(it.flags, F_UNCLOSED) ~= 0 then
    o.unclosed = true
  end
  if kind == "message" then
    o.role = E.roles[it.role]
  elseif kind == "frontmatter" then
    o.lang = str(it.key)
  elseif kind == "tool_use" then
    o.tool_id, o.name = str(it.key), str(it.label)
  elseif kind == "tool_result" then
    o.tool_id = str(it.key)
    o.error = band(it.flags, F_ERROR) ~= 0
    o.status = H.status(it, str, E.statuses)
  end
  return o
end

--- Whether the item is a tool result that is a pending placeholder with no content.
---@return boolean
function S.is_empty_pending(it)
  return it.kind == TOOL_RESULT and it.status == N.C.FLEMMA_DOC_STATUS_PENDING and it.body.len == 0
end

--- Whether the item is a tool result (a placeholder or a real one).
---@return boolean
function S.is_result(it)
  return it.kind == TOOL_RESULT
end

--- The role name of a message item, nil for another item.
---@return string|nil
function S.message_role(it)
  if it.kind == MESSAGE then
    return H.enums.roles[it.role]
  end
  return nil
end

--- One diagnostic (flemma_doc_diag) as { line, severity, message }.
---@return { line: integer, severity: string, message: string }
function S.diagnostic(d, str)
  return { line = d.line, severity = H.enums.severities[d.severity], message = str(d.message) }
end

return S
