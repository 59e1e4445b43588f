--- Providers: the public face of the provider layer. Which provider sends and with
--- which key (flemma.provider.resolve), what a request says (flemma.provider.encode,
--- built by the kind modules of flemma.provider.kinds), and the request of a buffer
--- (flemma.provider.request, the state machine from the key to the end of the
--- answer). `send` is the send handler of flemma.cycle.send.
local resolve = require("flemma.provider.resolve")
local encode = require("flemma.provider.encode")
local request = require("flemma.provider.request")

local M = {}

--- The module of a kind, or nil and a message.
M.kind = require("flemma.provider.kinds").get

--- The provider that sends for a configuration (default: the active one).
M.resolve = resolve.resolve
--- The provider that sends for a buffer (its frontmatter on top of the active choice).
M.resolve_buffer = resolve.resolve_buffer
--- Whether an endpoint's host is this machine.
M.is_loopback = resolve.is_loopback
--- Where the key of a provider goes: the host, or nil and why not.
M.key_destination = resolve.key_destination
--- The key of a provider known without waiting (raises when one is needed and missing).
M.key = resolve.key
--- Resolves a provider's key through the whole chain of flemma.secrets.
M.resolve_key = resolve.resolve_key

--- Everything a kind needs to build a request.
M.context = encode.context
--- The request body (a table) and headers of a context.
M.build = encode.build
--- The request body as the JSON text that goes on the wire, and the headers.
M.encode = encode.encode

--- Sends a conversation and streams the answer into the buffer (the send handler).
---@param bufnr integer
---@param conversation? table from document.to_messages (nil: read from `extra.doc`)
---@param done fun(result: flemma.provider.Result)
---@param extra? { doc?: flemma.document.Doc } the document (then `conversation` may be nil)
function M.send(bufnr, conversation, done, extra)
  request.start(bufnr, conversation, done, extra and extra.doc)
end

--- Cancels the buffer's request (curl stopped at once, the text that arrived kept).
M.cancel = request.cancel
--- Whether a request of the buffer is running (looking up the key included).
M.is_active = request.is_active
--- The running request of a buffer: { state, pid?, provider, retries } or nil.
M.active = request.info

return M
