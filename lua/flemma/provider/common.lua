--- Small request-building helpers shared by the provider kinds.
local M = {}

--- A tool's input schema as JSON wants it: a copy (nil: an object schema), with an
--- empty `properties` encoded as `{}` rather than `[]`.
---@param schema table|nil
---@return table
function M.schema(schema)
  local s = vim.deepcopy(schema or { type = "object" })
  if type(s.properties) == "table" and next(s.properties) == nil then
    s.properties = vim.empty_dict()
  end
  return s
end

--- A tool call's input as a JSON text ("{}" for none or an empty one).
---@param input table|nil
---@return string
function M.arguments(input)
  if type(input) ~= "table" or next(input) == nil then
    return "{}"
  end
  return vim.json.encode(input)
end

--- The headers of a streamed JSON request, with `authorization: Bearer KEY` when
--- there is a key (the OpenAI kinds and vertex).
---@param key string|nil
---@return table<string, string>
function M.bearer_headers(key)
  local headers = { ["content-type"] = "application/json", ["accept"] = "text/event-stream" }
  if key then
    headers["authorization"] = "Bearer " .. key
  end
  return headers
end

--- A kind's normalize_usage where the input tokens include the cached ones: they are
--- taken out, as usage keeps them apart.
---@param usage table
---@return table usage
function M.uncached_input(usage)
  if usage.input_tokens and usage.cache_read_tokens then
    usage.input_tokens = math.max(0, usage.input_tokens - usage.cache_read_tokens)
  end
  return usage
end

--- Whether an attached file part (flemma.attachments) is an image the providers take.
---@param part { mime: string }
---@return boolean
function M.is_image(part)
  return require("flemma.attachments").IMAGE_TYPES[part.mime] == true
end

--- Whether an attached file part is a PDF.
---@param part { mime: string }
---@return boolean
function M.is_pdf(part)
  return part.mime == "application/pdf"
end

--- An attached file part as a data URL (data:MIME;base64,...).
---@param part { mime: string, data: string }
---@return string
function M.data_url(part)
  return "data:" .. part.mime .. ";base64," .. part.data
end

--- The file name of an attached file part (its path's last component).
---@param part { path: string }
---@return string
function M.filename(part)
  return vim.fs.basename(part.path)
end

--- The text that stands for an attached file a provider cannot take.
---@param part { path: string, mime: string, size: integer }
---@param why string
---@return string
function M.file_note(part, why)
  return require("flemma.attachments").note(part, why)
end

return M
