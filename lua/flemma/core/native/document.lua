--- Parsing a whole .chat document (the header's "Document" section) into the raw
--- Lua model; items are converted by item.lua.
local util = require("flemma.core.util")
local cdata = require("flemma.core.native.cdata")
local item = require("flemma.core.native.item")

local S, N = require("flemma.core.native.section").new()
local H = {}

--- Parses a .chat document, given as one string (lines joined by "\n") or as
--- a list of lines (as from nvim_buf_get_lines), and returns the raw model:
--- frontmatter, messages with parts, diagnostics. Tool inputs are not decoded
--- here: `tool_uses` lists the tool use parts whose input is valid JSON, and
--- `inputs_json` is a JSON array of their inputs, in the same order
--- (`input_spans` holds the 1-based start and end of each in it); a part with
--- an invalid input has `input_error`. flemma.document decodes them.
--- `stats`, when given, receives `to_native_ms` (lines handed over and parsed
--- natively) and `to_tables_ms` (native items read into Lua tables).
---@param src string|string[]
---@param stats? table
---@return table
function S.parse_document(src, stats)
  local lib = N.lib()
  local t0 = stats and vim.uv.hrtime()
  local doc
  if type(src) == "string" then
    doc = lib.flemma_doc_new(src, #src)
  elseif type(src) == "table" then
    doc = lib.flemma_doc_new_lines(cdata.pack_lines(src, "parse_document"))
  else
    util.error("parse_document: expected the text as a string or a list of lines, not " .. type(src))
  end
  if doc == nil then
    util.error("cannot parse the document: " .. N.last_error())
  end
  local t1 = stats and vim.uv.hrtime()
  local ok, res = pcall(H.convert, lib, doc, src)
  lib.flemma_doc_free(doc)
  if stats then
    stats.to_native_ms = (t1 - t0) / 1e6
    stats.to_tables_ms = (vim.uv.hrtime() - t1) / 1e6
  end
  if not ok then
    error(res, 0)
  end
  return res
end

H.inputs_buf = nil

-- The inputs of the tool uses joined as one JSON array, and the 1-based start and
-- end of each in it (written after the items are read: appending while reading
-- made that loop's trace too complex for LuaJIT to compile).
function H.join_inputs(inputs, n, spans)
  local buf = H.inputs_buf
  if not buf then
    buf = require("string.buffer").new()
    H.inputs_buf = buf
  end
  buf:reset()
  buf:put("[")
  for j = 1, n do
    if j > 1 then
      buf:put(",")
    end
    spans[2 * j - 1] = #buf + 1
    buf:put(inputs[j])
    spans[2 * j] = #buf
  end
  buf:put("]")
  local json = n > 0 and buf:tostring() or nil
  buf:reset()
  return json
end

-- `src` is unused but keeps a string source referenced while its bytes are read.
function H.convert(lib, doc, src) -- luacheck: ignore src
  item.enums()
  local convert, unescape, table_new = item.convert, N.unescape, cdata.table_new
  local str = item.reader(lib.flemma_doc_text(doc), lib.flemma_doc_arena(doc))
  local items = lib.flemma_doc_items(doc)
  local messages, tool_uses, spans, inputs = {}, {}, {}, {}
  local nmsg, nuse = 0, 0
  local frontmatter, parts, nparts
  for i = 0, lib.flemma_doc_item_count(doc) - 1 do
    local kind, v, input = convert(items[i], str, 0, unescape)
    if kind == "message" then
      parts, nparts = table_new(2, 0), 0
      v.parts = parts
      nmsg = nmsg + 1
      messages[nmsg] = v
    elseif kind == "frontmatter" then
      frontmatter = v
    elseif kind and parts then
      nparts = nparts + 1
      parts[nparts] = v
      if input then
        nuse = nuse + 1
        tool_uses[nuse] = v
        inputs[nuse] = input
      end
    end
  end
  local diagnostics = {}
  local diags = lib.flemma_doc_diags(doc)
  for i = 0, lib.flemma_doc_diag_count(doc) - 1 do
    diagnostics[i + 1] = item.diagnostic(diags[i], str)
  end
  return {
    frontmatter = frontmatter,
    messages = messages,
    diagnostics = diagnostics,
    tool_uses = tool_uses,
    inputs_json = H.join_inputs(inputs, nuse, spans),
    input_spans = spans,
  }
end

return S
