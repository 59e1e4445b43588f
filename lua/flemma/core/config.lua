--- Configuration: the defaults (one comment per option) and all validation.
local util = require("flemma.core.util")

local M = {}
local H = {}

---@class flemma.Config
H.defaults = {
  -- Which entry of `providers` sends the conversation (e.g. "anthropic", "ollama").
  provider = "anthropic",
  -- Model name; nil uses the provider's default model.
  model = nil,
  parameters = {
    max_tokens = nil, -- maximum output tokens (nil: the provider's default)
    temperature = nil, -- sampling temperature
    thinking = nil, -- false | "minimal" | "low" | "medium" | "high" | "max" | a token budget
    cache_retention = "short", -- prompt caching: "none" | "short" | "long"
    timeout = 600, -- seconds a whole request may take
    connect_timeout = 10, -- seconds to establish the connection
    max_retries = 3, -- retries of a request refused with 429, 503, 529 or a reset connection
    max_response_bytes = 64 * 1024 * 1024, -- a longer response is stopped (the text so far stays)
    thinking_foreign = "text", -- thinking of another provider: "text" (plain text) | "preserve" | "drop"
    anthropic = { thinking_budget = nil },
    openai = { reasoning = nil },
    vertex = { project_id = nil, location = "global", thinking_budget = nil },
  },
  -- Transport: { kind, endpoint, api_key_env?, model?, headers? } per name; users add
  -- entries (any OpenAI-compatible server is `kind = "openai_chat"`). Never
  -- overridable from frontmatter.
  providers = {
    anthropic = {
      kind = "anthropic",
      endpoint = "https://api.anthropic.com/v1/messages",
      api_key_env = "ANTHROPIC_API_KEY",
    },
    openai = { kind = "openai", endpoint = "https://api.openai.com/v1/responses", api_key_env = "OPENAI_API_KEY" },
    vertex = { kind = "vertex", endpoint = nil, api_key_env = "VERTEX_ACCESS_TOKEN" },
    openai_chat = {
      kind = "openai_chat",
      endpoint = "http://127.0.0.1:11434/v1/chat/completions",
      api_key_env = "OPENAI_API_KEY",
    },
    ollama = { kind = "openai_chat", endpoint = "http://127.0.0.1:11434/v1/chat/completions" },
    llamacpp = { kind = "openai_chat", endpoint = "http://127.0.0.1:8080/v1/chat/completions" },
    vllm = { kind = "openai_chat", endpoint = "http://127.0.0.1:8000/v1/chat/completions" },
    lmstudio = { kind = "openai_chat", endpoint = "http://127.0.0.1:1234/v1/chat/completions" },
    openrouter = {
      kind = "openai_chat",
      endpoint = "https://openrouter.ai/api/v1/chat/completions",
      api_key_env = "OPENROUTER_API_KEY",
    },
    moonshot = {
      kind = "openai_chat",
      endpoint = "https://api.moonshot.ai/v1/chat/completions",
      api_key_env = "MOONSHOT_API_KEY",
    },
    deepseek = {
      kind = "openai_chat",
      endpoint = "https://api.deepseek.com/chat/completions",
      api_key_env = "DEEPSEEK_API_KEY",
    },
  },
  -- Named selections for :Flemma switch and frontmatter: ["$name"] = "provider [model]
  -- [key=value ...]" or { provider = ..., model = ..., parameters = { ... } }.
  presets = {},
  ui = {
    -- :Flemma switch warns when the model's output price is above this many dollars
    -- per million tokens.
    high_cost_threshold = 30,
    -- A send whose conversation is estimated above this many input tokens (its
    -- text's bytes / 4) says so first, with its size and estimated cost (0: never).
    warn_tokens = 100000,
    -- Ask before the first send of a chat whose frontmatter chose a provider and model
    -- above high_cost_threshold (or of unknown price on a hosted endpoint).
    confirm_frontmatter_cost = true,
    -- Close the folds of completed tool results and thinking blocks when a chat is
    -- shown and when a response or a tool writes them.
    fold_completed = true,
    -- A virtual line above each role marker (`char` repeated across the window).
    ruler = { enabled = true, char = "─" },
    -- Sign-column markers on role markers: a message still streaming, an
    -- @Assistant: message whose tool uses have no result yet.
    signs = { enabled = true, streaming = "▶", pending = "?" },
    -- Markdown under the chat highlighted by tree-sitter when Neovim has the
    -- `markdown` parser (false: Vim's markdown syntax, syntax/chat.vim).
    treesitter = true,
    -- Larger chats (when opened) get Vim's markdown syntax instead: tree-sitter
    -- parses a whole buffer before it draws it.
    treesitter_max_bytes = 1024 * 1024,
    -- Larger chats (when shown in a window) are not folded: Neovim computes the
    -- fold level of every line when folding starts.
    fold_max_bytes = 1024 * 1024,
  },
  tools = {
    -- false registers a catch-all resolver that approves every tool call.
    require_approval = true,
    -- Tool names and $presets to approve, a function(tool_name, input, ctx), or a module path.
    auto_approve = { "$default" },
    -- Extra or overriding presets: { ["$name"] = { approve = {...}, deny = {...} } }.
    presets = {},
    -- Approve tools that declare can_auto_approve_if_sandboxed while the sandbox is on.
    auto_approve_sandboxed = true,
    -- Seconds: ctx.timeout of every tool run (the bash default) and the limit of an async tool source.
    default_timeout = 30,
    -- Where the cursor goes after a result is injected: "result" | "stay" | "next".
    cursor_after_result = "result",
    -- Chain approved tools and sends by themselves, up to max_turns model turns.
    autopilot = { enabled = true, max_turns = 100 },
    -- How many tools run at the same time.
    max_concurrent = 4,
    -- Tool calls per buffer: a token bucket of `burst` calls refilled at `per_second`;
    -- a call over it gets an error result and autopilot stops. false: no limit.
    rate_limit = { burst = 20, per_second = 2 },
    -- Tool calls of one answer that go through approval; the ones beyond get an
    -- error result saying so.
    max_calls_per_answer = 256,
    -- Limits of a tool's output before it is truncated (the full output goes to a file).
    truncate = { max_lines = 2000, max_bytes = 51200 },
    -- The bash tool: which shell runs commands and extra environment variables.
    bash = { shell = "bash", env = nil },
    -- The grep, glob and find tools: "auto" runs rg / fd (fdfind) when installed,
    -- "native" always the built-in search. skip_dirs: folder names glob and find
    -- never enter (a list of names, no `/`).
    search = {
      backend = "auto",
      skip_dirs = {
        ".git",
        "node_modules",
        "build",
        "dist",
        "target",
        "vendor",
        ".venv",
        "venv",
        "__pycache__",
        ".next",
        ".cache",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".gradle",
      },
    },
    -- Names of variables that look like secrets (a name holding KEY, TOKEN, SECRET,
    -- PASSWORD, AUTH, SESSION, ..., a private key or a provider's key as value) that
    -- tool processes may still inherit; every other one is taken out.
    env_passthrough = {},
  },
  sandbox = {
    enabled = false, -- opt-in; bash stays gated by default
    backend = "auto", -- "auto" | "bwrap" | "sandbox-exec"
    policy = {
      rw_paths = nil, -- writable roots; nil: cwd, the buffer's directory, /tmp, $TMPDIR
      network = true, -- false cuts the network inside the sandbox
    },
    -- Paths hidden from sandboxed commands (a directory shows empty, a file reads as
    -- empty): "$default" (keys, credentials, browser profiles, Neovim's state and data
    -- directories), "~/path", "/path" or "$VAR/path" to add, "!path" to take one out.
    deny_read = { "$default" },
  },
  -- MCP servers whose tools become Flemma tools (`server:tool`): :help flemma-mcp.
  mcp = {
    -- name = { command = "npx", args = { ... }, env = { ... }, cwd = "..." }
    servers = {},
    include = nil, -- tool patterns to keep ("name:*", "name:tool"); nil: all
    exclude = nil, -- tool patterns to leave out
    timeout = 60, -- seconds for a server to start and for each request
    -- Read the project's .mcp.json (mcpServers); each of its servers starts only once
    -- you trust it (asked once per command line).
    project_config = false,
  },
  -- The isolated interpreters that run frontmatter, templates and auto_approve functions.
  frontmatter = {
    -- MB all of them may hold together; past it the least recently used ones are
    -- freed (and made again when next needed). One holds at most 64 MB (less when
    -- this is smaller).
    max_memory_mb = 256,
    -- Seconds an interpreter kept for a chat (its auto_approve function) may go
    -- unused before it is freed.
    idle_seconds = 60,
  },
  attachments = {
    -- Largest file a reference (@./path) may attach, in bytes; a larger one blocks the send.
    max_bytes = 10 * 1024 * 1024,
  },
  highlights = { tool_preview = "Comment" },
  keymaps = {
    enabled = true,
    send = "<C-]>",
    execute = "<M-CR>",
    cancel = "<C-c>",
    -- Moving (:help flemma-moving); false leaves a key unmapped.
    next_message = "]m",
    prev_message = "[m",
    inner_message = "im",
    around_message = "am",
    goto_file = "gf",
    goto_pair = "gd",
  },
}

-- Types of options whose default is nil, or that accept more than their default's type.
H.types = {
  ["model"] = { "string" },
  ["parameters.max_tokens"] = { "number" },
  ["parameters.temperature"] = { "number" },
  ["parameters.thinking"] = { "string", "boolean", "number" },
  ["parameters.anthropic.thinking_budget"] = { "number" },
  ["parameters.openai.reasoning"] = { "string" },
  ["parameters.vertex.project_id"] = { "string" },
  ["parameters.vertex.thinking_budget"] = { "number" },
  ["providers.vertex.endpoint"] = { "string" },
  ["tools.auto_approve"] = { "table", "function", "string" },
  ["tools.bash.env"] = { "table" },
  ["sandbox.policy.rw_paths"] = { "table" },
  ["sandbox.deny_read"] = { "table" },
  ["mcp.include"] = { "table" },
  ["mcp.exclude"] = { "table" },
  ["highlights.tool_preview"] = { "string", "table" },
  ["keymaps.send"] = { "string", "boolean" },
  ["keymaps.execute"] = { "string", "boolean" },
  ["keymaps.cancel"] = { "string", "boolean" },
  ["keymaps.next_message"] = { "string", "boolean" },
  ["keymaps.prev_message"] = { "string", "boolean" },
  ["keymaps.inner_message"] = { "string", "boolean" },
  ["keymaps.around_message"] = { "string", "boolean" },
  ["keymaps.goto_file"] = { "string", "boolean" },
  ["keymaps.goto_pair"] = { "string", "boolean" },
}

-- Allowed values of enumerated options.
H.enums = {
  ["tools.cursor_after_result"] = { "result", "stay", "next" },
  ["sandbox.backend"] = { "auto", "bwrap", "sandbox-exec" },
  ["tools.search.backend"] = { "auto", "native" },
  ["parameters.cache_retention"] = { "none", "short", "long" },
  ["parameters.thinking_foreign"] = { "text", "preserve", "drop" },
}

-- Tables whose keys are open: any key is accepted (and checked only if known).
H.open = {
  ["presets"] = true, -- checked by flemma.switch
  ["tools"] = true, -- per-tool subtrees, read by ctx:get_config()
  ["tools.presets"] = true,
  ["parameters"] = true,
  ["tools.bash.env"] = true,
  ["sandbox.policy.rw_paths"] = true,
  ["tools.auto_approve"] = true,
  ["mcp.servers"] = true,
}

H.kinds = { "anthropic", "openai_chat", "openai", "vertex" }
H.provider_fields =
  { kind = "string", endpoint = "string", api_key_env = "string", model = "string", headers = "table" }

--- `providers`: a table of named entries, each { kind, endpoint, api_key_env?, model?, headers? }.
function H.check_providers(value)
  if type(value) ~= "table" then
    util.error("`providers` should be a table, not " .. type(value))
  end
  for name, entry in pairs(value) do
    local path = "providers." .. tostring(name)
    if type(name) ~= "string" or type(entry) ~= "table" then
      util.error(
        ("`%s` should be a table { kind, endpoint, api_key_env?, model?, headers? }, not %s"):format(path, type(entry))
      )
    end
    for k, v in pairs(entry) do
      local want = H.provider_fields[k]
      if require("flemma.isolated.keys").forbidden[k] then
        util.error(require("flemma.isolated.keys").refusal(path .. "." .. k))
      elseif not want then
        util.error(
          ("unknown option `%s.%s` (a provider has kind, endpoint, api_key_env, model, headers)"):format(
            path,
            tostring(k)
          )
        )
      elseif type(v) ~= want then
        util.error(("`%s.%s` should be a %s, not %s"):format(path, k, want, type(v)))
      end
    end
    if entry.kind ~= nil and not vim.tbl_contains(H.kinds, entry.kind) then
      util.error(
        ("`%s.kind` should be one of %s, not %s"):format(path, table.concat(H.kinds, ", "), vim.inspect(entry.kind))
      )
    end
    for k, v in pairs(entry.headers or {}) do
      if type(k) ~= "string" or type(v) ~= "string" then
        util.error(("`%s.headers` should map header names to strings"):format(path))
      end
    end
  end
end

H.mcp_fields = { command = "string", args = "table", env = "table", cwd = "string" }

--- `mcp.servers`: named entries { command, args?, env?, cwd? }; names are what tools
--- are called by (`name:tool`, sent as `name__tool`): letters, digits, `-` and single `_`.
function H.check_mcp_servers(value)
  if type(value) ~= "table" then
    util.error("`mcp.servers` should be a table, not " .. type(value))
  end
  for name, entry in pairs(value) do
    local path = "mcp.servers." .. tostring(name)
    if
      type(name) ~= "string"
      or not name:match("^[%a][%w_%-]*$")
      or name:find("__", 1, true)
      or name:sub(-1) == "_"
    then
      util.error(
        ("`%s`: a server name should start with a letter and hold letters, digits, `-` and single `_`, not %s"):format(
          path,
          vim.inspect(name)
        )
      )
    end
    if type(entry) ~= "table" then
      util.error(("`%s` should be a table { command, args?, env?, cwd? }, not %s"):format(path, type(entry)))
    end
    for k, v in pairs(entry) do
      local want = H.mcp_fields[k]
      if not want then
        util.error(("unknown option `%s.%s` (a server has command, args, env, cwd)"):format(path, tostring(k)))
      elseif type(v) ~= want then
        util.error(("`%s.%s` should be a %s, not %s"):format(path, k, want, type(v)))
      end
    end
    if entry.command == nil or entry.command == "" then
      util.error(("`%s.command` should be a string, not %s"):format(path, entry.command == nil and "nil" or "empty"))
    end
    for i, a in ipairs(entry.args or {}) do
      if type(a) ~= "string" then
        util.error(("`%s.args[%d]` should be a string, not %s"):format(path, i, type(a)))
      end
    end
    if entry.args and #entry.args ~= vim.tbl_count(entry.args) then
      util.error(("`%s.args` should be a list of strings"):format(path))
    end
    for k, v in pairs(entry.env or {}) do
      if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
        util.error(("`%s.env` keys should be variable names, not %s"):format(path, vim.inspect(k)))
      end
      if type(v) ~= "string" and type(v) ~= "number" then
        util.error(("`%s.env.%s` should be a string, not %s"):format(path, k, type(v)))
      end
    end
  end
end

function H.check_patterns(value, path)
  for i, p in ipairs(value) do
    if type(p) ~= "string" or not p:find(":", 1, true) then
      util.error(
        ('`%s[%d]` should be a tool pattern like "name:*" or "name:tool", not %s'):format(path, i, vim.inspect(p))
      )
    end
  end
end

-- How a NaN or infinity reads in a message (the same on every platform).
function H.nonfinite(v)
  if v ~= v then
    return "nan"
  end
  return v > 0 and "inf" or "-inf"
end

--- `sandbox.deny_read`: a list of "$default", paths ("~/x", "/x", "$VAR/x") and
--- "!path" (taking a path out).
function H.check_deny_read(value)
  if type(value) ~= "table" then
    return -- the type check names it
  end
  if #value ~= vim.tbl_count(value) then
    util.error("`sandbox.deny_read` should be a list of paths")
  end
  for i, entry in ipairs(value) do
    local p = type(entry) == "string" and entry:gsub("^!", "") or nil
    if
      type(entry) ~= "string"
      or entry:find("[%z\n]")
      or not (
        entry == "$default"
        or p == "~"
        or (p and (p:match("^~/.") or p:match("^/.") or p:match("^%$%{?[%a_][%w_]*%}?/.")))
      )
    then
      util.error(
        ('`sandbox.deny_read[%d]` should be "$default", an absolute path, "~/path" or "$VAR/path" (with "!" in front to take it out), not %s'):format(
          i,
          vim.inspect(entry)
        )
      )
    end
  end
end

--- `tools.rate_limit`: false, or { burst = whole number >= 1, per_second = number > 0 }.
function H.check_rate_limit(value)
  if value == false then
    return
  end
  if type(value) ~= "table" then
    util.error("`tools.rate_limit` should be a table { burst, per_second } or false, not " .. type(value))
  end
  for k in pairs(value) do
    if k ~= "burst" and k ~= "per_second" then
      util.error(("unknown option `tools.rate_limit.%s` (it has burst and per_second)"):format(tostring(k)))
    end
  end
  local b, r = value.burst, value.per_second
  if b ~= nil and (type(b) ~= "number" or b ~= b or b < 1 or b ~= math.floor(b) or b == math.huge) then
    util.error(("`tools.rate_limit.burst` should be a whole number of calls >= 1, not %s"):format(vim.inspect(b)))
  end
  if r ~= nil and (type(r) ~= "number" or r ~= r or r <= 0 or r == math.huge) then
    util.error(
      ("`tools.rate_limit.per_second` should be a number of calls per second > 0, not %s"):format(vim.inspect(r))
    )
  end
end

-- Lists of environment variable names.
H.name_lists = { ["tools.env_passthrough"] = true }

function H.check(value, default, path)
  if path == "providers" then
    return H.check_providers(value)
  end
  if path == "mcp.servers" then
    return H.check_mcp_servers(value)
  end
  if (path == "mcp.include" or path == "mcp.exclude") and type(value) == "table" then
    H.check_patterns(value, path)
  end
  if path == "mcp.timeout" and type(value) == "number" and not (value > 0) then
    util.error(("`%s` should be a number of seconds > 0, not %s"):format(path, tostring(value)))
  end
  if H.name_lists[path] and type(value) == "table" then
    for i, name in ipairs(value) do
      if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
        util.error(("`%s[%d]` should be a variable name, not %s"):format(path, i, vim.inspect(name)))
      end
    end
    if #value ~= vim.tbl_count(value) then
      util.error(("`%s` should be a list of variable names"):format(path))
    end
  end
  if path == "sandbox.deny_read" then
    H.check_deny_read(value)
  end
  if path == "tools.rate_limit" then
    return H.check_rate_limit(value)
  end
  if path == "tools.search.skip_dirs" and type(value) == "table" then
    for i, name in ipairs(value) do
      if type(name) ~= "string" or name == "" or name:find("/", 1, true) or name == "." or name == ".." then
        util.error(("`%s[%d]` should be a folder name (no `/`), not %s"):format(path, i, vim.inspect(name)))
      end
    end
    if #value ~= vim.tbl_count(value) then
      util.error(("`%s` should be a list of folder names"):format(path))
    end
  end
  local allowed = H.types[path]
  local vt = type(value)
  if allowed then
    if not vim.tbl_contains(allowed, vt) then
      util.error(("`%s` should be a %s, not %s"):format(path, table.concat(allowed, " or "), vt))
    end
  elseif default ~= nil and vt ~= type(default) then
    util.error(("`%s` should be a %s, not %s"):format(path, type(default), vt))
  end
  if vt == "number" and (value ~= value or value == math.huge or value == -math.huge) then
    util.error(("`%s` should be a finite number, not %s"):format(path, H.nonfinite(value)))
  end
  if
    (path == "parameters.max_response_bytes" or path == "tools.max_calls_per_answer")
    and (value < 1 or value ~= math.floor(value))
  then
    util.error(("`%s` should be a whole number >= 1, not %s"):format(path, tostring(value)))
  end
  if path == "attachments.max_bytes" and (value < 1 or value ~= math.floor(value)) then
    util.error(("`%s` should be a whole number of bytes >= 1, not %s"):format(path, tostring(value)))
  end
  if
    (path == "ui.ruler.char" or path == "ui.signs.streaming" or path == "ui.signs.pending")
    and (vim.fn.strdisplaywidth(value) < 1 or vim.fn.strdisplaywidth(value) > 2 or value:find("[%c]"))
  then
    util.error(("`%s` should be one or two display cells (e.g. %q), not %s"):format(path, default, vim.inspect(value)))
  end
  if (path == "ui.treesitter_max_bytes" or path == "ui.fold_max_bytes") and value < 0 then
    util.error(("`%s` should be a number of bytes >= 0, not %s"):format(path, tostring(value)))
  end
  if path == "ui.warn_tokens" and value < 0 then
    util.error(("`%s` should be a number of tokens >= 0 (0: never warn), not %s"):format(path, tostring(value)))
  end
  if
    (path == "frontmatter.max_memory_mb" or path == "frontmatter.idle_seconds")
    and (value < 1 or value ~= math.floor(value))
  then
    util.error(("`%s` should be a whole number >= 1, not %s"):format(path, tostring(value)))
  end
  if path == "ui.high_cost_threshold" and value < 0 then
    util.error(("`%s` should be a number >= 0 (dollars per million tokens), not %s"):format(path, tostring(value)))
  end
  local enum = H.enums[path]
  if enum and not vim.tbl_contains(enum, value) then
    util.error(("`%s` should be one of %s, not %s"):format(path, table.concat(enum, ", "), vim.inspect(value)))
  end
  if vt == "table" and type(default) == "table" and not H.open[path] and not vim.islist(default) then
    for k, v in pairs(value) do
      local sub = path .. "." .. tostring(k)
      if default[k] == nil and H.types[sub] == nil then
        util.error(("unknown option `%s`"):format(sub))
      end
      H.check(v, default[k], sub)
    end
  elseif vt == "table" and type(default) == "table" and H.open[path] then
    for k, v in pairs(value) do
      local sub = path .. "." .. tostring(k)
      if default[k] ~= nil or H.types[sub] ~= nil then
        H.check(v, default[k], sub)
      end
    end
  end
end

--- Keys (api_key, token, ...) at the top, in `parameters` or a provider's parameters: refused.
function H.refuse_keys(opts)
  local secrets = require("flemma.isolated.keys")
  local function scan(t, prefix)
    for k, v in pairs(t) do
      if secrets.forbidden[k] then
        util.error(secrets.refusal(prefix .. k))
      end
      if prefix == "parameters." and type(v) == "table" then
        scan(v, prefix .. k .. ".")
      end
    end
  end
  scan(opts, "")
  if type(opts.parameters) == "table" then
    scan(opts.parameters, "parameters.")
  end
end

--- Validates user options against the defaults; raises "(flemma) `x` should be ..." errors.
---@param opts table
function M.validate(opts)
  if opts == nil then
    return
  end
  if type(opts) ~= "table" then
    util.error("setup() expects a table, not " .. type(opts))
  end
  H.refuse_keys(opts)
  for k, v in pairs(opts) do
    local path = tostring(k)
    if H.defaults[k] == nil and H.types[path] == nil then
      util.error(("unknown option `%s`"):format(path))
    end
    H.check(v, H.defaults[k], path)
  end
end

-- Lists replace lists (auto_approve = { "$readonly" } must not keep "$default").
function H.merge(base, over)
  if type(over) ~= "table" or (vim.islist(over) and next(over) ~= nil) then
    return vim.deepcopy(over)
  end
  if type(base) ~= "table" or (vim.islist(base) and next(base) ~= nil) then
    return vim.deepcopy(over)
  end
  local out = vim.deepcopy(base)
  for k, v in pairs(over) do
    out[k] = H.merge(base[k], v)
  end
  return out
end

H.current = vim.deepcopy(H.defaults)
H.key_configured = {}

--- Applies user options on top of the defaults.
---@param opts? table
---@return flemma.Config
function M.setup(opts)
  M.validate(opts)
  local merged = H.merge(H.defaults, opts or {})
  for name, entry in pairs(merged.providers) do
    if entry.kind == nil then
      util.error(("`providers.%s.kind` is missing: one of %s"):format(name, table.concat(H.kinds, ", ")))
    end
  end
  if merged.providers[merged.provider] == nil then
    local names = vim.tbl_keys(merged.providers)
    table.sort(names)
    util.error(
      ("`provider` should be one of %s, not %s"):format(table.concat(names, ", "), vim.inspect(merged.provider))
    )
  end
  require("flemma.provider.switch").check_presets(merged.presets, merged)
  -- Entries whose key variable the user named: their key may go to their endpoint
  -- (flemma.secrets.destination); the variable of a built-in entry goes only to
  -- the hosts it belongs to.
  local configured = {}
  for name, entry in pairs(type(opts) == "table" and type(opts.providers) == "table" and opts.providers or {}) do
    if type(entry) == "table" and entry.api_key_env ~= nil then
      configured[name] = true
    end
  end
  H.key_configured = configured
  H.current = merged
  H.session = nil
  H.effective = nil
  return H.current
end

--- The active configuration (do not modify; use setup()): setup()'s options with the
--- session layer of :Flemma switch on top (provider, model, parameters).
---@return flemma.Config
function M.get()
  if not H.session then
    return H.current
  end
  if not H.effective then
    local eff = vim.deepcopy(H.current)
    eff.provider = H.session.provider
    eff.model = H.session.model
    local function apply(dst, src)
      for k, v in pairs(src) do
        if v == vim.NIL then
          dst[k] = nil
        elseif type(v) == "table" then
          dst[k] = type(dst[k]) == "table" and dst[k] or {}
          apply(dst[k], v)
        else
          dst[k] = v
        end
      end
    end
    apply(eff.parameters, H.session.parameters or {})
    H.effective = eff
  end
  return H.effective
end

--- Whether setup() named `api_key_env` for the provider entry `name` (then its key
--- may go to the entry's endpoint; else only to the hosts the variable belongs to).
---@param name string
---@return boolean
function M.key_configured(name)
  return H.key_configured[name] == true
end

--- setup()'s options without the session layer.
---@return flemma.Config
function M.get_setup()
  return H.current
end

--- Sets (or with nil removes) the session layer that :Flemma switch keeps above
--- setup(): { provider, model?, parameters? } (a parameter set to vim.NIL is cleared).
--- setup() removes it.
---@param layer? { provider: string, model?: string, parameters?: table }
function M.set_session(layer)
  H.session = layer and vim.deepcopy(layer) or nil
  H.effective = nil
end

--- The session layer (a copy) or nil.
function M.session()
  return H.session and vim.deepcopy(H.session) or nil
end

--- A deep copy of the defaults.
---@return flemma.Config
function M.defaults()
  return vim.deepcopy(H.defaults)
end

--- Merges `over` into `base` the way setup() does (lists replace lists).
M.merge = H.merge

-- Subtrees whose keys are the user's (names of providers, presets, variables): the
-- option is the subtree itself.
H.user_keyed = { providers = true, presets = true, ["tools.presets"] = true, ["tools.bash.env"] = true }

--- Every option path: each key of the defaults (tables and their keys) and the
--- options whose default is nil, sorted. `:help flemma-config-<path>` documents each.
---@return string[]
function M.option_paths()
  local seen, out = {}, {}
  local function add(path)
    if not seen[path] then
      seen[path] = true
      out[#out + 1] = path
    end
  end
  local function walk(t, prefix)
    for k, v in pairs(t) do
      local path = prefix and (prefix .. "." .. k) or k
      add(path)
      if type(v) == "table" and not vim.islist(v) and not H.user_keyed[path] then
        walk(v, path)
      end
    end
  end
  walk(H.defaults, nil)
  for path in pairs(H.types) do
    local top = path:match("^[^.]+")
    if not H.user_keyed[top] and not H.user_keyed[path:match("^(.*)%.") or ""] then
      add(path)
    end
  end
  table.sort(out)
  return out
end

return M
