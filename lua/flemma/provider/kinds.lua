--- The registry of provider kinds: one module each (flemma.provider.<kind>), every
--- one a table of the same fields (flemma.provider.Kind): what the rest of Flemma
--- knows of a provider's API is what its kind declares there.
local M = {}

---@class flemma.provider.Kind
---@field kind string the name in `providers.<name>.kind`
---@field stream string the native stream decoder that reads its answers (flemma_stream_new)
---@field key flemma.provider.KeySpec how the API key goes with a request
---@field endpoint fun(configured: string|nil, model: string, parameters?: table): string|nil, string|nil the endpoint of a request from the entry's (nil: the kind's default, if it has one), or nil and why
---@field parameters string[] the `parameters.<name>` the kind reads (their types, values and ranges: the option schema, isolated/schema.lua)
---@field counter flemma.provider.Counter|false its token-counting endpoint (:Flemma usage:estimate); false: the API has none
---@field conversation flemma.provider.Conversation how a conversation message becomes items of the body (one builder for build and the shared per-message cache of flemma.provider.encode)
---@field build fun(ctx: flemma.provider.Context): table, table<string, string> the request body and headers
---@field error_message fun(decoded: any): string|nil, string|nil the message and type of a decoded error body
---@field normalize_usage fun(usage: table): table the stream's usage as flemma.provider.usage keeps it (input without cached tokens)

---@class flemma.provider.KeySpec
---@field header string the header that carries the key
---@field prefix? string put before the key ("Bearer ")

---@class flemma.provider.Counter
---@field endpoint fun(endpoint: string): string|nil, string|nil the counting endpoint of a request endpoint, or nil and why
---@field body fun(body: table): table the counting request from a request body
---@field tokens fun(decoded: any): integer|nil the input tokens of the decoded answer

---@class flemma.provider.Conversation
---@field field string the body field that holds the conversation
---@field items fun(msg: table, ctx: flemma.provider.Context, refs: flemma.provider.Refs): table[] the items of one conversation message (document.to_messages' shape): parts of a turn where the kind has turns, whole entries otherwise
---@field turn? fun(role: string, items: table[]): table a turn holding items: consecutive messages of one role share one
---@field roles? table<string, string> roles that have another name on the wire
---@field mark? fun(ctx: flemma.provider.Context): fun(items: table[])|nil what changes the items of the last message with items (nil: nothing)
---@field variant? fun(ctx: flemma.provider.Context): string what else than the message and parameters.thinking_foreign changes its items

---@class flemma.provider.Refs what a message's items may look up in the messages before it
---@field before integer the index of the message served
---@field tool_name fun(id: string): string|nil the name of the tool use with that id

--- Kinds implemented here, by the module that builds their requests.
M.modules = {
  anthropic = "flemma.provider.anthropic",
  openai_chat = "flemma.provider.openai_chat",
  openai = "flemma.provider.openai",
  vertex = "flemma.provider.vertex",
}

--- The module of a kind, or nil and a message.
---@param kind string
---@return flemma.provider.Kind|nil
---@return string|nil err
function M.get(kind)
  local mod = M.modules[kind]
  if not mod then
    local names = vim.tbl_keys(M.modules)
    table.sort(names)
    return nil,
      ("provider kind `%s` is not supported by this version of Flemma (supported: %s)"):format(
        tostring(kind),
        table.concat(names, ", ")
      )
  end
  return require(mod)
end

return M
