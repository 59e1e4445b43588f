--- :checkhealth flemma
local M = {}
local H = {}

--- Reports an executable and the first line of its version output.
---@param name string
---@param args string[] arguments that print the version
---@param required boolean error (true) or warning (false) when missing
function H.executable(name, args, required)
  if vim.fn.executable(name) ~= 1 then
    local report = required and vim.health.error or vim.health.warn
    report(("`%s` not found in $PATH"):format(name))
    return
  end
  local cmd = { name }
  vim.list_extend(cmd, args)
  local ok, res = pcall(function()
    return vim.system(cmd, { text = true }):wait(3000)
  end)
  local out = ok and res and ((res.stdout or "") ~= "" and res.stdout or res.stderr) or ""
  local line = vim.trim((out or ""):match("[^\n]*") or "")
  vim.health.ok(("`%s` found%s"):format(name, line ~= "" and (": " .. line) or ""))
end

--- Whether curl speaks TLS (hosted providers are https) and with which library.
function H.curl_tls()
  if vim.fn.executable("curl") ~= 1 then
    vim.health.warn("without `curl` no request can be sent", { "Install curl (e.g. `apt install curl`)" })
    return
  end
  local res = vim.system({ "curl", "--version" }, { text = true }):wait(3000)
  local out = res.stdout or ""
  local tls = out:match("%s(OpenSSL/%S+)")
    or out:match("%s(LibreSSL/%S+)")
    or out:match("%s(GnuTLS/%S+)")
    or out:match("%s(BoringSSL%S*)")
    or out:match("%s(wolfSSL/%S+)")
    or out:match("%s(mbedTLS/%S+)")
    or out:match("%s(rustls%S*)")
    or out:match("%s(SecureTransport%S*)")
    or out:match("%s(Schannel%S*)")
  local protocols = out:match("\nProtocols:([^\n]*)") or ""
  if (" " .. protocols .. " "):find(" https ", 1, true) then
    vim.health.ok(("curl TLS: %s (https supported)"):format(tls or "yes"))
  else
    vim.health.error("curl has no https support: hosted providers cannot be reached", {
      "Install a curl built with TLS (Debian: the `curl` package)",
    })
  end
end

--- Providers that loaded chat buffers select in their frontmatter (a set).
function H.used_providers()
  local used = {}
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype == "chat" then
      local ok, sel = pcall(require("flemma.chat.frontmatter").selection, bufnr)
      if ok and sel and sel.provider then
        used[sel.provider] = true
      end
    end
  end
  return used
end

--- Each configured provider: its kind, endpoint and whether its key is present
--- (never the key itself).
function H.providers()
  vim.health.start("flemma: providers")
  local config = require("flemma.core.config").get()
  local used = H.used_providers()
  local names = vim.tbl_keys(config.providers)
  table.sort(names)
  for _, name in ipairs(names) do
    local entry = config.providers[name]
    if type(entry) == "table" then
      local active = name == config.provider and " (active)"
        or used[name] and " (selected by a buffer's frontmatter)"
        or ""
      local where = ("`%s` (%s, %s)%s"):format(
        name,
        tostring(entry.kind),
        tostring(entry.endpoint or "no endpoint"),
        active
      )
      local env = entry.api_key_env
      local loopback = type(entry.endpoint) == "string"
        and (
          entry.endpoint:match("^%a+://127%.")
          or entry.endpoint:match("^%a+://localhost[:/]")
          or entry.endpoint:match("^%a+://%[::1%]")
        )
      local withheld
      if env and type(entry.endpoint) == "string" then
        local host, why = require("flemma.policy.secrets").destination(
          env,
          entry.endpoint,
          require("flemma.core.config").key_configured(name),
          name
        )
        withheld = not host and why or nil
      end
      if not env then
        vim.health.ok(where .. ": no key needed")
      elseif withheld then
        vim.health.ok(("%s: no key is sent: %s"):format(where, withheld))
      elseif vim.env[env] ~= nil and vim.env[env] ~= "" then
        vim.health.ok(("%s: key present in $%s"):format(where, env))
      elseif loopback then
        vim.health.ok(("%s: local server, no key needed ($%s is not set)"):format(where, env))
      else
        local report = active ~= "" and vim.health.warn or vim.health.info
        report(("%s: no key: $%s is not set"):format(where, env), {
          ("export %s=... before starting Neovim"):format(env),
          ("or keep it in the system keyring (secret-tool store --label=flemma service %s key api), asked at send: :help flemma-secrets"):format(
            name
          ),
        })
      end
    end
  end
end

--- Chat buffers whose frontmatter selects a provider (or fails, so that nothing is
--- sent): which provider and model each sends to.
function H.buffers()
  local fm = require("flemma.chat.frontmatter")
  local rows = {}
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype == "chat" then
      local name = vim.api.nvim_buf_get_name(bufnr)
      local label = ("buffer %d%s"):format(
        bufnr,
        name ~= "" and (" (" .. vim.fn.fnamemodify(name, ":~:.") .. ")") or ""
      )
      local ok, sel, err = pcall(fm.selection, bufnr)
      if not ok or not sel then
        rows[#rows + 1] = {
          vim.health.error,
          ("%s: nothing is sent while its frontmatter fails: %s"):format(label, ok and err or tostring(sel)),
        }
      elseif sel.provider or sel.model then
        local spec, serr = require("flemma.provider").resolve_buffer(bufnr)
        if spec then
          rows[#rows + 1] = {
            vim.health.ok,
            ("%s: its frontmatter selects `%s` %s%s"):format(
              label,
              spec.name,
              spec.model,
              sel.preset and (" (" .. sel.preset .. ")") or ""
            ),
          }
        else
          rows[#rows + 1] =
            { vim.health.error, ("%s: its frontmatter selects a provider that cannot send: %s"):format(label, serr) }
        end
      end
    end
  end
  if #rows > 0 then
    vim.health.start("flemma: chat buffers with their own provider")
    for _, r in ipairs(rows) do
      r[1](r[2])
    end
  end
end

-- Each configured MCP server: running with its tools, not started yet, or failed.
function H.mcp()
  local mcp = require("flemma.tools.mcp")
  local rows = mcp.status()
  if #rows == 0 then
    return
  end
  vim.health.start("flemma: MCP servers")
  for _, r in ipairs(rows) do
    if r.state == "ready" and r.url then
      vim.health.ok(("%s: session open at %s, %d tools"):format(r.name, r.url, r.tools))
    elseif r.state == "ready" then
      vim.health.ok(("%s: running (pid %s), %d tools"):format(r.name, tostring(r.pid), r.tools))
    elseif r.state == "failed" then
      vim.health.error(("%s: failed: %s"):format(r.name, (r.last_error or "?"):gsub("\n.*", " ...")), {
        ":Flemma mcp:restart " .. r.name,
      })
    elseif r.url and vim.fn.executable("curl") ~= 1 then
      vim.health.error(("%s: `curl` not found in $PATH (MCP over HTTP needs it)"):format(r.name))
    elseif r.url then
      vim.health.info(("%s: %s, %s (starts with the first chat that needs it)"):format(r.name, r.state, r.url))
    elseif vim.fn.executable(r.command or "") ~= 1 then
      vim.health.error(("%s: `%s` not found in $PATH"):format(r.name, tostring(r.command)))
    else
      vim.health.info(("%s: %s (starts with the first chat that needs it)"):format(r.name, r.state))
    end
  end
end

function M.check()
  H.neovim()
  if H.library() then
    H.sandbox()
    H.tools()
    H.remembered()
    H.mcp()
    H.providers()
    H.buffers()
  end
  H.programs()
end

--- The Neovim version and LuaJIT.
function H.neovim()
  vim.health.start("flemma: Neovim")
  local v = vim.version()
  local vs = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 1 then
    vim.health.ok("Neovim " .. vs)
  else
    vim.health.error("Neovim " .. vs .. " is too old", { "Flemma needs Neovim 0.10 or later" })
  end
  if jit then
    vim.health.ok("LuaJIT " .. tostring(jit.version))
  else
    vim.health.error("Neovim is not built with LuaJIT", { "Flemma's native core is loaded through LuaJIT's FFI" })
  end
end

--- The native library (loaded again); true when it loads.
---@return boolean
function H.library()
  vim.health.start("flemma: native library")
  local native = require("flemma.core.native")
  native.reset()
  local path = native.library_path()
  local ok, err = native.available()
  if ok then
    vim.health.ok("library: " .. path)
    vim.health.ok(("ABI version %d (library %s)"):format(native.abi_version(), native.version()))
  else
    vim.health.error(err, { "Run `make` in " .. require("flemma.core.util").root() })
  end
  return ok
end

--- The sandbox's backend, probed.
function H.sandbox()
  vim.health.start("flemma: sandbox")
  local sandbox = require("flemma.policy.sandbox")
  local backend, berr = sandbox.backend()
  local enabled = sandbox.is_enabled()
  if not backend then
    local report = enabled and vim.health.error or vim.health.info
    report(berr)
    return
  end
  local avail, aerr = sandbox.is_available(backend)
  if avail then
    vim.health.ok(
      ("backend `%s` works (probe run passed); sandbox %s"):format(
        backend,
        enabled and "enabled" or "disabled (sandbox.enabled = false)"
      )
    )
  else
    local report = enabled and vim.health.error or vim.health.warn
    report(("backend `%s` unavailable: %s"):format(backend, aerr), {
      enabled
          and "Tool commands are refused while the sandbox is enabled and unavailable; fix the backend or run :Flemma sandbox:disable"
        or "Only needed when you enable the sandbox",
    })
  end
end

--- The tools registered and their sources.
function H.tools()
  vim.health.start("flemma: tools")
  local tools = require("flemma.tools")
  local names = tools.list()
  if #names == 0 then
    vim.health.warn("no tools registered", { 'Call require("flemma").setup({}) in your config' })
  else
    vim.health.ok("tools: " .. table.concat(names, ", "))
  end
  for _, src in ipairs(tools.sources()) do
    if src.state == "failed" then
      vim.health.warn(("tool source %s failed: %s"):format(src.label, src.error or "?"))
    elseif src.state == "loading" then
      vim.health.warn(("tool source %s is still loading"):format(src.label))
    else
      vim.health.ok(("tool source %s loaded (%d tool%s)"):format(src.label, src.tools, src.tools == 1 and "" or "s"))
    end
  end
end

--- The approval rules remembered in the user's configuration (flemma.policy.remembered):
--- the file, read again now, its rule count and what is wrong with it.
function H.remembered()
  vim.health.start("flemma: remembered approval rules")
  local remembered = require("flemma.policy.remembered")
  local path = remembered.path()
  local entries, problem = remembered.read(function(tool)
    local def = require("flemma.tools").get(tool)
    return type(def) == "table" and def.paths ~= nil
  end)
  if problem then
    vim.health.error(("%s %s: none of its rules are applied"):format(path, problem), {
      "Fix it with :Flemma tool:rules (it is read again when written there), or remove it",
    })
    return
  end
  if not vim.uv.fs_stat(path) then
    vim.health.info(("%s: no rules remembered (`:Flemma tool:approve always` adds them)"):format(path))
    return
  end
  local status = remembered.status()
  if status and status.why_not then
    vim.health.warn(("%s: %d rule(s), not applied: %s"):format(path, #entries, status.why_not))
  else
    vim.health.ok(("%s: %d rule%s"):format(path, #entries, #entries == 1 and "" or "s"))
  end
end

--- The external programs: bash, curl, the search tools' and the sandbox's.
function H.programs()
  vim.health.start("flemma: external programs")
  H.executable("bash", { "--version" }, true)
  H.executable("curl", { "--version" }, false)
  H.curl_tls()
  -- The search tools' programs: optional (the native search stands in).
  for _, p in ipairs({ { { "rg" }, "grep" }, { { "fd", "fdfind" }, "glob and find" } }) do
    local found
    for _, name in ipairs(p[1]) do
      if not found and vim.fn.executable(name) == 1 then
        found = name
      end
    end
    if found then
      H.executable(found, { "--version" }, false)
    else
      vim.health.info(("`%s` not found: %s use the native search (:help flemma-tools-search)"):format(p[1][1], p[2]))
    end
  end
  local sysname = vim.uv.os_uname().sysname
  if sysname == "Linux" then
    H.executable("bwrap", { "--version" }, false)
  elseif sysname == "Darwin" then
    if vim.fn.executable("sandbox-exec") == 1 then
      vim.health.ok("`sandbox-exec` found")
    else
      vim.health.warn("`sandbox-exec` not found: the sandbox is unavailable")
    end
  end
end

return M
