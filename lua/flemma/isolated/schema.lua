--- The option schema: every option of setup() with its type, allowed values, numeric
--- range, default and a one-line doc. setup() (flemma.core.config), frontmatter's
--- flemma.opt, `:Flemma switch key=value` and the help check all read it, so a value
--- is judged the same way everywhere and the messages read the same:
--- "`parameters.temperature` should be a number between 0 and 2, not 5".
--- Pure Lua without requires: it also runs inside the frontmatter interpreter.
local M = {}
local H = {}

---@class flemma.schema.Option
---@field path string dotted path ("parameters.temperature")
---@field type string|string[] Lua type(s) of a value ("table" for a subtree)
---@field default any the default (nil: none; a subtree's comes from its options)
---@field enum? string[] allowed strings
---@field min? number smallest value
---@field max? number largest value
---@field above? number values must be greater than this
---@field integer? boolean whole numbers only
---@field unit? string what the number counts ("bytes"), named in the message
---@field what? string the description of a good value, when the above cannot say it
---@field valid? fun(v: any): boolean a further test of a value of the right type
---@field values? string[] the values to offer (completion) when `enum` does not list them
---@field keys? "open"|"user" a table whose keys are free ("user": the keys are names the user chooses)
---@field frontmatter? boolean settable through flemma.opt (parameters)
---@field transport? boolean part of where requests go: never from frontmatter
---@field doc string one line

local THINKING = { "minimal", "low", "medium", "high", "max" }

--- The API a `providers` entry speaks (its `kind`).
M.PROVIDER_KINDS = { "anthropic", "openai_chat", "openai", "vertex" }

-- stylua: ignore
M.OPTIONS = {
  { path = "provider", type = "string", default = "anthropic", doc = 'which entry of `providers` sends the conversation (e.g. "anthropic", "ollama")' },
  { path = "model", type = "string", doc = "model name; nil uses the provider's default model" },

  { path = "parameters", type = "table", keys = "open", doc = "request parameters (frontmatter and :Flemma switch override them per chat or session)" },
  { path = "parameters.max_tokens", type = "number", integer = true, min = 1, frontmatter = true, doc = "maximum output tokens (nil: the provider's default)" },
  { path = "parameters.temperature", type = "number", min = 0, max = 2, frontmatter = true, doc = "sampling temperature" },
  { path = "parameters.thinking", type = { "string", "boolean", "number" }, frontmatter = true,
    what = '"minimal", "low", "medium", "high", "max", false, or a token budget',
    values = { "false", THINKING[1], THINKING[2], THINKING[3], THINKING[4], THINKING[5] },
    valid = function(v)
      if type(v) == "number" then
        return v >= 0 and v == math.floor(v)
      end
      return type(v) == "boolean" or H.member(THINKING, v)
    end,
    doc = 'thinking: false | "minimal" | "low" | "medium" | "high" | "max" | a token budget' },
  { path = "parameters.cache_retention", type = "string", default = "short", enum = { "none", "short", "long" }, frontmatter = true, doc = "prompt caching" },
  { path = "parameters.timeout", type = "number", default = 600, above = 0, unit = "seconds", doc = "seconds a whole request may take" },
  { path = "parameters.connect_timeout", type = "number", default = 10, above = 0, unit = "seconds", doc = "seconds to establish the connection" },
  { path = "parameters.max_retries", type = "number", default = 3, integer = true, min = 0, doc = "retries of a request refused with 429, 503, 529 or a reset connection" },
  { path = "parameters.max_response_bytes", type = "number", default = 64 * 1024 * 1024, integer = true, min = 1, frontmatter = true, doc = "a longer response is stopped (the text so far stays)" },
  { path = "parameters.thinking_foreign", type = "string", default = "text", enum = { "text", "preserve", "drop" }, doc = "thinking of another provider: plain text, preserved or dropped" },
  { path = "parameters.extra", type = "table", keys = "user", frontmatter = true,
    what = "a table of request fields, e.g. { seed = 1, top_k = 40 }",
    valid = function(v)
      for k in pairs(v) do
        if type(k) ~= "string" then
          return false
        end
      end
      return true
    end,
    doc = "request fields Flemma does not know, merged into the body" },
  { path = "parameters.anthropic", type = "table", doc = "Anthropic's own parameters" },
  { path = "parameters.anthropic.thinking_budget", type = "number", integer = true, min = 0, frontmatter = true, doc = "thinking tokens (overrides the budget `thinking` implies)" },
  { path = "parameters.openai", type = "table", doc = "OpenAI's own parameters" },
  { path = "parameters.openai.reasoning", type = "string", enum = { "none", "minimal", "low", "medium", "high" }, frontmatter = true, doc = "reasoning effort (overrides `thinking`)" },
  { path = "parameters.vertex", type = "table", doc = "Vertex AI's own parameters" },
  { path = "parameters.vertex.project_id", type = "string", transport = true, doc = "the Google Cloud project (part of the endpoint)" },
  { path = "parameters.vertex.location", type = "string", default = "global", transport = true, doc = "the region (part of the endpoint)" },
  { path = "parameters.vertex.thinking_budget", type = "number", integer = true, min = -1, frontmatter = true, doc = "thinking tokens (-1: dynamic)" },

  { path = "providers", type = "table", keys = "user",
    default = {
      anthropic = { kind = "anthropic", endpoint = "https://api.anthropic.com/v1/messages", api_key_env = "ANTHROPIC_API_KEY" },
      openai = { kind = "openai", endpoint = "https://api.openai.com/v1/responses", api_key_env = "OPENAI_API_KEY" },
      vertex = { kind = "vertex", endpoint = nil, api_key_env = "VERTEX_ACCESS_TOKEN" },
      openai_chat = { kind = "openai_chat", endpoint = "http://127.0.0.1:11434/v1/chat/completions", api_key_env = "OPENAI_API_KEY" },
      ollama = { kind = "openai_chat", endpoint = "http://127.0.0.1:11434/v1/chat/completions" },
      llamacpp = { kind = "openai_chat", endpoint = "http://127.0.0.1:8080/v1/chat/completions" },
      vllm = { kind = "openai_chat", endpoint = "http://127.0.0.1:8000/v1/chat/completions" },
      lmstudio = { kind = "openai_chat", endpoint = "http://127.0.0.1:1234/v1/chat/completions" },
      openrouter = { kind = "openai_chat", endpoint = "https://openrouter.ai/api/v1/chat/completions", api_key_env = "OPENROUTER_API_KEY" },
      moonshot = { kind = "openai_chat", endpoint = "https://api.moonshot.ai/v1/chat/completions", api_key_env = "MOONSHOT_API_KEY" },
      deepseek = { kind = "openai_chat", endpoint = "https://api.deepseek.com/chat/completions", api_key_env = "DEEPSEEK_API_KEY" },
    },
    doc = "transport: { kind, endpoint, api_key_env?, model?, headers? } per name; never from frontmatter" },
  { path = "presets", type = "table", keys = "user", default = {}, doc = 'named selections: ["$name"] = "provider [model] [key=value ...]" or { provider, model, parameters }' },

  { path = "ui", type = "table", doc = "what the chat shows" },
  { path = "ui.high_cost_threshold", type = "number", default = 30, min = 0, what = "a number >= 0 (dollars per million tokens)", doc = ":Flemma switch warns above this output price (dollars per million tokens)" },
  { path = "ui.warn_tokens", type = "number", default = 100000, min = 0, what = "a number of tokens >= 0 (0: never warn)", doc = "a send estimated above this many input tokens says so first (0: never)" },
  { path = "ui.confirm_frontmatter_cost", type = "boolean", default = true, doc = "ask before the first send of a chat whose frontmatter chose an expensive model" },
  { path = "ui.fold_completed", type = "boolean", default = true, doc = "close the folds of completed tool results and thinking blocks" },
  { path = "ui.ruler", type = "table", doc = "a virtual line above each role marker" },
  { path = "ui.ruler.enabled", type = "boolean", default = true, doc = "draw the ruler" },
  { path = "ui.ruler.char", type = "string", default = "─", doc = "the character repeated across the window" },
  { path = "ui.signs", type = "table", doc = "sign-column markers on role markers" },
  { path = "ui.signs.enabled", type = "boolean", default = true, doc = "draw the signs" },
  { path = "ui.signs.streaming", type = "string", default = "▶", doc = "a message still streaming" },
  { path = "ui.signs.pending", type = "string", default = "?", doc = "an @Assistant: message whose tool uses have no result yet" },
  { path = "ui.treesitter", type = "boolean", default = true, doc = "highlight the markdown with tree-sitter when the parser is there" },
  { path = "ui.treesitter_max_bytes", type = "number", default = 32 * 1024, min = 0, unit = "bytes", doc = "larger chats get Vim's markdown syntax instead" },
  { path = "ui.fold_max_bytes", type = "number", default = 1024 * 1024, min = 0, unit = "bytes", doc = "larger chats are not folded" },

  { path = "tools", type = "table", keys = "open", doc = "tools (per-tool subtrees are read by ctx:get_config())" },
  { path = "tools.require_approval", type = "boolean", default = true, doc = "false approves every tool call" },
  { path = "tools.auto_approve", type = { "table", "function", "string" }, default = { "$default" }, doc = "tool names and $presets to approve, a function(tool_name, input, ctx), or a module path" },
  { path = "tools.ask", type = "table", default = {}, doc = 'tool names and rules ("bash(git push *)") that always wait for you, whatever approves them' },
  { path = "tools.deny", type = "table", default = {}, doc = 'tool names and rules ("bash(rm *)") that are always denied' },
  { path = "tools.presets", type = "table", keys = "user", default = {}, doc = 'extra or overriding presets: { ["$name"] = { approve = {...}, deny = {...} } }' },
  { path = "tools.auto_approve_sandboxed", type = "boolean", default = true, doc = "approve tools that may run unasked while the sandbox is on" },
  { path = "tools.default_timeout", type = "number", default = 30, doc = "seconds: ctx.timeout of every tool run and the limit of an async tool source" },
  { path = "tools.cursor_after_result", type = "string", default = "result", enum = { "result", "stay", "next" }, doc = "where the cursor goes after a result is injected" },
  { path = "tools.autopilot", type = "table", doc = "chain approved tools and sends by themselves" },
  { path = "tools.autopilot.enabled", type = "boolean", default = true, doc = "run autopilot" },
  { path = "tools.autopilot.max_turns", type = "number", default = 100, doc = "model turns autopilot takes at most" },
  { path = "tools.max_concurrent", type = "number", default = 4, doc = "how many tools run at the same time" },
  { path = "tools.rate_limit", type = { "table", "boolean" }, what = "a table { burst, per_second } or false",
    valid = function(v)
      return v ~= true
    end,
    doc = "tool calls per buffer: a token bucket (false: no limit)" },
  { path = "tools.rate_limit.burst", type = "number", default = 20, integer = true, min = 1, what = "a whole number of calls >= 1", doc = "calls at once" },
  { path = "tools.rate_limit.per_second", type = "number", default = 2, above = 0, what = "a number of calls per second > 0", doc = "calls refilled per second" },
  { path = "tools.max_calls_per_answer", type = "number", default = 256, integer = true, min = 1, doc = "tool calls of one answer that go through approval" },
  { path = "tools.truncate", type = "table", doc = "limits of a tool's output before it is truncated" },
  { path = "tools.truncate.max_lines", type = "number", default = 2000, doc = "lines kept" },
  { path = "tools.truncate.max_bytes", type = "number", default = 51200, doc = "bytes kept" },
  { path = "tools.bash", type = "table", doc = "the bash tool" },
  { path = "tools.bash.shell", type = "string", default = "bash", doc = "the shell that runs commands" },
  { path = "tools.bash.env", type = "table", keys = "user", doc = "extra environment variables" },
  { path = "tools.search", type = "table", doc = "the grep, glob and find tools" },
  { path = "tools.search.backend", type = "string", default = "auto", enum = { "auto", "native" }, doc = '"auto" runs rg / fd when installed, "native" the built-in search' },
  { path = "tools.search.skip_dirs", type = "table",
    default = { ".git", "node_modules", "build", "dist", "target", "vendor", ".venv", "venv", "__pycache__", ".next", ".cache", ".tox", ".mypy_cache", ".pytest_cache", ".gradle" },
    doc = "folder names glob and find never enter" },
  { path = "tools.fetch", type = "table", doc = "the fetch tool (setup only: frontmatter cannot set it)" },
  { path = "tools.fetch.enabled", type = "boolean", default = false, doc = "offer the fetch tool (off by default; its calls wait for approval)" },
  { path = "tools.fetch.max_bytes", type = "number", default = 5 * 1024 * 1024, integer = true, min = 1, unit = "bytes", doc = "the largest page read (a call's max_bytes may lower it)" },
  { path = "tools.fetch.timeout", type = "number", default = 30, above = 0, unit = "seconds", doc = "seconds a fetch may take, redirects included" },
  { path = "tools.fetch.allow_hosts", type = "table", default = {},
    what = 'a list of "host:port" strings',
    valid = function(v)
      for k, e in pairs(v) do
        if type(k) ~= "number" or type(e) ~= "string" or not e:match("^%[?[%w%.:_-]+%]?:%d+$") then
          return false
        end
      end
      return true
    end,
    doc = '"host:port" entries exempt from the address check (a service you trust on your network; tests)' },
  { path = "tools.env_passthrough", type = "table", default = {}, doc = "names of secret-looking variables tool processes may still inherit" },

  { path = "sandbox", type = "table", doc = "the sandbox of tool processes" },
  { path = "sandbox.enabled", type = "boolean", default = false, doc = "opt-in; bash stays gated by default" },
  { path = "sandbox.backend", type = "string", default = "auto", enum = { "auto", "bwrap", "sandbox-exec" }, doc = "which sandbox runs" },
  { path = "sandbox.policy", type = "table", doc = "what sandboxed commands may do" },
  { path = "sandbox.policy.rw_paths", type = "table", keys = "open", doc = "writable roots; nil: cwd, the buffer's directory, /tmp, $TMPDIR" },
  { path = "sandbox.policy.network", type = "boolean", default = true, doc = "false cuts the network inside the sandbox" },
  { path = "sandbox.deny_read", type = "table", default = { "$default" }, doc = 'paths hidden from sandboxed commands ("$default", paths, "!path" to take one out)' },

  { path = "mcp", type = "table", doc = "MCP servers whose tools become Flemma tools" },
  { path = "mcp.servers", type = "table", keys = "user", default = {}, doc = "name = { command, args?, env?, cwd? } or { url, headers?, bearer_env? }" },
  { path = "mcp.include", type = "table", doc = "tool patterns to keep; nil: all" },
  { path = "mcp.exclude", type = "table", doc = "tool patterns to leave out" },
  { path = "mcp.timeout", type = "number", default = 60, above = 0, unit = "seconds", doc = "seconds for a server to start and for each request" },
  { path = "mcp.project_config", type = "boolean", default = false, doc = "read the project's .mcp.json" },

  { path = "frontmatter", type = "table", doc = "the isolated interpreters of frontmatter, templates and auto_approve functions" },
  { path = "frontmatter.max_memory_mb", type = "number", default = 256, integer = true, min = 1, doc = "MB all of them may hold together" },
  { path = "frontmatter.idle_seconds", type = "number", default = 60, integer = true, min = 1, doc = "seconds a chat's interpreter may go unused before it is freed" },

  { path = "attachments", type = "table", doc = "files a chat references (@./path)" },
  { path = "attachments.max_bytes", type = "number", default = 10 * 1024 * 1024, integer = true, min = 1, unit = "bytes", doc = "largest file a reference may attach" },

  { path = "highlights", type = "table", doc = "highlight groups" },
  { path = "highlights.tool_preview", type = { "string", "table" }, default = "Comment", doc = "the tool preview's group (a name or a definition)" },

  { path = "keymaps", type = "table", doc = "keys of a chat buffer; false leaves a key unmapped" },
  { path = "keymaps.enabled", type = "boolean", default = true, doc = "map the keys" },
  { path = "keymaps.send", type = { "string", "boolean" }, default = "<C-]>", doc = "send / approve / run (the three phases)" },
  { path = "keymaps.execute", type = { "string", "boolean" }, default = "<M-CR>", doc = "run the tool under the cursor" },
  { path = "keymaps.cancel", type = { "string", "boolean" }, default = "<C-c>", doc = "cancel the request or the tools" },
  { path = "keymaps.approve_always", type = { "string", "boolean" }, default = "gA", doc = "approve the pending call under the cursor and remember a rule for it" },
  { path = "keymaps.next_message", type = { "string", "boolean" }, default = "]m", doc = "next message" },
  { path = "keymaps.prev_message", type = { "string", "boolean" }, default = "[m", doc = "previous message" },
  { path = "keymaps.inner_message", type = { "string", "boolean" }, default = "im", doc = "text object: a message's text" },
  { path = "keymaps.around_message", type = { "string", "boolean" }, default = "am", doc = "text object: a message with its marker" },
  { path = "keymaps.goto_file", type = { "string", "boolean" }, default = "gf", doc = "open the file of a reference or tool" },
  { path = "keymaps.goto_pair", type = { "string", "boolean" }, default = "gd", doc = "jump between a tool use and its result" },
}

H.by_path = {}
H.subtree = {}
for _, o in ipairs(M.OPTIONS) do
  H.by_path[o.path] = o
end

function H.member(list, v)
  for _, x in ipairs(list) do
    if x == v then
      return true
    end
  end
  return false
end

function H.copy(v)
  if type(v) ~= "table" then
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    out[k] = H.copy(x)
  end
  return out
end

--- The option at `path`, or nil.
---@param path string
---@return flemma.schema.Option|nil
function M.get(path)
  return H.by_path[path]
end

--- Every option path, sorted.
---@return string[]
function M.paths()
  local out = {}
  for _, o in ipairs(M.OPTIONS) do
    out[#out + 1] = o.path
  end
  table.sort(out)
  return out
end

--- The defaults as one nested table (a fresh copy).
---@return table
function M.defaults()
  local root = {}
  for _, o in ipairs(M.OPTIONS) do
    -- A subtree (an option below it exists) is a table; a table-valued option without
    -- a default stays nil (`mcp.include`: nil means all).
    local parent_path = o.path:match("^(.*)%.[^.]+$")
    if parent_path then
      H.subtree[parent_path] = true
    end
  end
  for _, o in ipairs(M.OPTIONS) do
    local parent, name = root, nil
    for part in o.path:gmatch("[^.]+") do
      if name then
        parent[name] = parent[name] or {}
        parent = parent[name]
      end
      name = part
    end
    if o.default ~= nil then
      parent[name] = H.copy(o.default)
    elseif H.subtree[o.path] then
      parent[name] = parent[name] or {}
    end
  end
  return root
end

--- How a value reads in a message: a string quoted, a number or boolean as itself,
--- anything else by its type.
function M.show(v)
  local t = type(v)
  if t == "string" then
    return ("%q"):format(v)
  elseif t == "number" then
    if v ~= v then
      return "nan"
    elseif v == math.huge then
      return "inf"
    elseif v == -math.huge then
      return "-inf"
    end
    return tostring(v)
  elseif t == "boolean" or t == "nil" then
    return tostring(v)
  end
  return t
end

-- "a", "an": the article of a word.
function H.article(word)
  return (word:match("^[aeiou]") and "an " or "a ") .. word
end

--- What a good value of the option is, in words ("a number between 0 and 2"), or nil
--- when only its type is checked.
---@param o flemma.schema.Option
---@return string|nil
function M.describe(o)
  if o.what then
    return o.what
  end
  if o.enum then
    return "one of " .. table.concat(o.enum, ", ")
  end
  local noun = o.integer and "whole number" or "number"
  if o.unit then
    noun = noun .. " of " .. o.unit
  end
  if o.min and o.max then
    return ("%s between %s and %s"):format(H.article(noun), M.show(o.min), M.show(o.max))
  elseif o.min then
    return ("%s >= %s"):format(H.article(noun), M.show(o.min))
  elseif o.above then
    return ("%s > %s"):format(H.article(noun), M.show(o.above))
  end
  return nil
end

function H.typename(o)
  local types = type(o.type) == "table" and o.type or { o.type }
  return H.article(table.concat(types, " or "))
end

--- Judges a value of the option at `path`: nil when it is good (or nil, or the path is
--- not an option), else the rest of the message after the option's name:
--- "should be a number between 0 and 2, not 5". Subtrees are not entered.
---@param path string
---@param value any
---@return string|nil
function M.problem(path, value)
  local o = H.by_path[path]
  if o == nil or value == nil then
    return nil
  end
  local vt = type(value)
  local types = type(o.type) == "table" and o.type or { o.type }
  local what = M.describe(o)
  if not H.member(types, vt) then
    if what then
      return ("should be %s, not %s"):format(what, M.show(value))
    end
    return ("should be %s, not %s"):format(H.typename(o), vt)
  end
  if vt == "number" and (value ~= value or value == math.huge or value == -math.huge) then
    return "should be a finite number, not " .. M.show(value)
  end
  local bad = false
  if o.enum and vt == "string" and not H.member(o.enum, value) then
    bad = true
  end
  if vt == "number" then
    if (o.integer and value ~= math.floor(value)) or (o.min and value < o.min) or (o.max and value > o.max) then
      bad = true
    end
    -- not (value > o.above), not value <= o.above: NaN is refused too.
    if o.above and not (value > o.above) then -- luacheck: ignore 581
      bad = true
    end
  end
  if not bad and o.valid and not o.valid(value) then
    bad = true
  end
  if bad then
    return ("should be %s, not %s"):format(what or H.typename(o), M.show(value))
  end
  return nil
end

--- The one-line message for a bad value, naming it as `label` (default: its path):
--- "`parameters.temperature` should be a number between 0 and 2, not 5"; nil if good.
---@param path string
---@param value any
---@param label? string
---@return string|nil
function M.message(path, value, label)
  local problem = M.problem(path, value)
  return problem and ("`%s` %s"):format(label or path, problem) or nil
end

--- The values to offer for an option, as text (`key=value` completion): its allowed
--- strings, or true and false for a boolean; nil when any value of its type goes.
---@param path string
---@return string[]|nil
function M.values(path)
  local o = H.by_path[path]
  if not o then
    return nil
  end
  if o.enum or o.values then
    return H.copy(o.enum or o.values)
  end
  if o.type == "boolean" then
    return { "true", "false" }
  end
  return nil
end

--- The parameters frontmatter sets through flemma.opt: { general = { name = true },
--- providers = { anthropic = { name = true }, ... }, transport = { vertex = { name = true } } }.
function M.frontmatter_parameters()
  local out = { general = {}, providers = {}, transport = {} }
  for _, o in ipairs(M.OPTIONS) do
    local rest = o.path:match("^parameters%.(.+)$")
    if rest then
      local head, tail = rest:match("^([^.]+)%.([^.]+)$")
      if not head and o.type == "table" and not o.keys then
        out.providers[rest] = out.providers[rest] or {}
      elseif head and o.transport then
        out.transport[head] = out.transport[head] or {}
        out.transport[head][tail] = true
      elseif o.frontmatter and head then
        out.providers[head] = out.providers[head] or {}
        out.providers[head][tail] = true
      elseif o.frontmatter then
        out.general[rest] = true
      end
    end
  end
  return out
end

--- The parameters `key=value` (:Flemma switch, presets) may set: dotted names below
--- `parameters` that hold a value, sorted.
---@return string[]
function M.parameter_names()
  local out = {}
  for _, o in ipairs(M.OPTIONS) do
    local rest = o.path:match("^parameters%.(.+)$")
    if rest and o.type ~= "table" then
      out[#out + 1] = rest
    end
  end
  table.sort(out)
  return out
end

return M
