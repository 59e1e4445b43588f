--- The files that hold secrets: the one list of them (the policy layer below the
--- tools' scope, the chat's file references and the sandbox). A secret file is never
--- read without the user: a `read` of it stays pending, an attachment or include()
--- of it asks before the send (flemma.reach), and the sandbox hides it.
---
--- Secret are: the places in $HOME where credentials live (M.HOME_ENTRIES), Neovim's
--- own data and state directories (the trust store, logs, undo files, shada), and
--- anywhere, a file named `.env*`, `*.pem`, `*.key`, `*.ppk`, `*.p12`, `*.pfx`,
--- `*.jks`, `*.keystore`, `*.kdbx`, an `id_*` private key (not the `.pub`; also a copy
--- such as `id_rsa.bak` or `id_rsa~`), `.netrc`, `.git-credentials`, `.pgpass`, a
--- Kerberos ticket cache (`krb5cc_*`, in /tmp by default), or a
--- `.npmrc` / `.pypirc` that holds a token or password. A path counts
--- as written and as it resolves (`..` folded, symlinks followed): a symlink in the
--- project that leads to ~/.ssh/id_rsa is a secret, and so is a link named `.env`.
local M = {}
local H = {}

local uv = vim.uv or vim.loop

--- The places below $HOME that hold credentials (files or whole directories),
--- relative to $HOME. The sandbox hides them (`sandbox.deny_read`) and the file
--- tools and references never read them without asking.
M.HOME_ENTRIES = {
  ".ssh",
  ".gnupg",
  ".aws",
  ".azure",
  ".config/gcloud",
  ".kube",
  ".docker/config.json",
  ".netrc",
  ".git-credentials",
  ".config/gh",
  ".config/hub",
  ".password-store",
  ".local/share/keyrings",
  ".pgpass",
  ".npmrc",
  ".pypirc",
  ".vault-token",
  ".cargo/credentials",
  ".cargo/credentials.toml",
  ".terraform.d/credentials.tfrc.json",
  ".config/op",
  -- Browser and mail profiles (cookies, saved passwords, session tokens).
  ".mozilla",
  ".thunderbird",
  ".config/google-chrome",
  ".config/chromium",
  ".config/BraveSoftware",
  ".config/microsoft-edge",
  ".config/vivaldi",
  ".config/opera",
  "snap/firefox",
  "snap/chromium",
  ".var/app/org.mozilla.firefox",
  ".var/app/com.google.Chrome",
  ".var/app/org.chromium.Chromium",
  ".var/app/com.brave.Browser",
  "Library/Application Support/Firefox",
  "Library/Application Support/Google/Chrome",
  "Library/Application Support/Chromium",
  "Library/Application Support/BraveSoftware",
  "Library/Application Support/Microsoft Edge",
  "Library/Safari",
  "Library/Cookies",
  "Library/Keychains",
  -- Shell and REPL histories: tokens pasted on a command line stay there.
  ".bash_history",
  ".zsh_history",
  ".zhistory",
  ".histfile",
  ".local/share/fish/fish_history",
  ".python_history",
  ".psql_history",
  ".mysql_history",
  ".sqlite_history",
  ".rediscli_history",
  ".node_repl_history",
  ".lesshst",
}

--- Variables that move a secret place elsewhere (each names a file or a directory;
--- a `:`-separated list for KUBECONFIG): what they name is secret as well.
M.ENV_ENTRIES = {
  "GNUPGHOME",
  "AWS_SHARED_CREDENTIALS_FILE",
  "AWS_CONFIG_FILE",
  "KUBECONFIG",
  "DOCKER_CONFIG",
  "CLOUDSDK_CONFIG",
  "GOOGLE_APPLICATION_CREDENTIALS",
  "AZURE_CONFIG_DIR",
  "PASSWORD_STORE_DIR",
  "GH_CONFIG_DIR",
  "NETRC",
  "HISTFILE",
}

-- Files that hold a token only when their content says so: read up to this size.
H.CONTENT_MAX = 64 * 1024
H.TOKEN_FILES = { [".npmrc"] = true, [".pypirc"] = true }
-- Extensions of files that hold private keys besides *.pem and *.key.
H.KEY_EXTS = { "ppk", "p12", "pfx", "jks", "keystore", "kdbx" }
-- Names that hold credentials wherever they are (as ~/.netrc and the like).
H.CREDENTIAL_NAMES = { [".netrc"] = true, ["_netrc"] = true, [".git-credentials"] = true, [".pgpass"] = true }

--- $HOME (normalized), or nil when it is unset, relative or `/`.
---@return string|nil
function M.home()
  local home = vim.env.HOME
  if type(home) ~= "string" or home:sub(1, 1) ~= "/" then
    return nil
  end
  home = vim.fs.normalize(home)
  if home == "/" then
    return nil
  end
  return home
end

--- Neovim's own data and state directories (plugins' stores such as the trust
--- list, logs, undo files, shada, swap and backups), and Flemma's folder in its
--- configuration directory, stdpath("config")/flemma: the approval rules remembered
--- there (flemma.policy.remembered) are policy, and a tool call (a `write` the
--- `$default` preset approves in a project that is the Neovim configuration, a
--- sandboxed command) that could change them would widen what is approved later.
---@return string[]
function M.nvim_dirs()
  local out = {}
  for _, what in ipairs({ "data", "state", "config" }) do
    local ok, dir = pcall(vim.fn.stdpath, what)
    if ok and type(dir) == "string" and dir:sub(1, 1) == "/" then
      out[#out + 1] = vim.fs.normalize(dir) .. (what == "config" and "/flemma" or "")
    end
  end
  return out
end

-- Where an entry below ~/.config or ~/.local/share also lives when the XDG
-- variables move those directories.
H.XDG = { { ".config/", "XDG_CONFIG_HOME" }, { ".local/share/", "XDG_DATA_HOME" } }

--- The absolute secret places: $HOME's entries (M.HOME_ENTRIES; those below
--- ~/.config and ~/.local/share also below $XDG_CONFIG_HOME and $XDG_DATA_HOME when
--- these are set elsewhere), what the variables of M.ENV_ENTRIES name (absolute
--- paths only) and Neovim's own data and state directories, as written
--- (not resolved; missing ones included), each once.
---@return string[]
function M.paths()
  local out, seen = {}, {}
  local function add(p)
    if not seen[p] then
      seen[p] = true
      out[#out + 1] = p
    end
  end
  local home = M.home()
  for _, rel in ipairs(M.HOME_ENTRIES) do
    if home then
      add(home .. "/" .. rel)
    end
    for _, x in ipairs(H.XDG) do
      local dir = vim.env[x[2]]
      if rel:sub(1, #x[1]) == x[1] and type(dir) == "string" and dir:sub(1, 1) == "/" then
        add(vim.fs.normalize(dir) .. "/" .. rel:sub(#x[1] + 1))
      end
    end
  end
  for _, name in ipairs(M.ENV_ENTRIES) do
    local value = vim.env[name]
    if type(value) == "string" then
      for p in value:gmatch("[^:]+") do
        if p:sub(1, 1) == "/" and p ~= "/" then
          add(vim.fs.normalize(p))
        end
      end
    end
  end
  for _, dir in ipairs(M.nvim_dirs()) do
    add(dir)
  end
  return out
end

-- The secret places as the checks compare them: each as written, below $HOME's real
-- path, and where it really leads. Kept for one turn of the event loop while $HOME
-- and the XDG directories stay the same.
H.cache = nil

function H.places()
  local key = table.concat({
    uv.now(),
    vim.env.HOME or "",
    vim.env.XDG_CONFIG_HOME or "",
    vim.env.XDG_DATA_HOME or "",
    vim.env.XDG_STATE_HOME or "",
  }, "\0")
  for _, name in ipairs(M.ENV_ENTRIES) do
    key = key .. "\0" .. (vim.env[name] or "")
  end
  if H.cache and H.cache.key == key then
    return H.cache.places
  end
  local places, seen = {}, {}
  local function add(p, shown)
    if p and p ~= "/" and not seen[p] then
      seen[p] = true
      places[#places + 1] = { path = p, shown = shown }
    end
  end
  local home = M.home()
  local real_home = home and uv.fs_realpath(home) or nil
  for _, p in ipairs(M.paths()) do
    local shown = p
    if home and p:sub(1, #home + 1) == home .. "/" then
      shown = "~" .. p:sub(#home + 1)
      if real_home and real_home ~= home then
        add(real_home .. p:sub(#home + 1), shown)
      end
    end
    add(p, shown)
    add(uv.fs_realpath(p), shown)
  end
  H.cache = { key = key, places = places }
  return places
end

function H.below(path, root)
  return path == root or (path:sub(1, #root) == root and path:sub(#root + 1, #root + 1) == "/")
end

-- Whether a .npmrc / .pypirc holds a token or a password (one too large or that
-- cannot be read counts as holding one). Only regular files are opened: a FIFO
-- named .npmrc would block.
function H.holds_token(path)
  local st = uv.fs_stat(path)
  if not st or st.type ~= "file" then
    return st ~= nil and st.type ~= "directory"
  end
  if st.size > H.CONTENT_MAX then
    return true
  end
  local fd = uv.fs_open(path, "r", 0)
  if not fd then
    return true
  end
  local data = uv.fs_read(fd, H.CONTENT_MAX, 0)
  uv.fs_close(fd)
  if not data then
    return true
  end
  data = data:lower()
  return data:find("token", 1, true) ~= nil
    or data:find("password", 1, true) ~= nil
    or data:find("_auth", 1, true) ~= nil
end

-- Why a file's name makes it a secret, or nil. `path` is absolute (for the content
-- check of .npmrc / .pypirc).
function H.by_name(path)
  local base = vim.fs.basename(path)
  if base == nil or base == "" then
    return nil
  end
  local lower = base:lower()
  if lower:sub(1, 4) == ".env" then
    return "an environment file"
  end
  if lower:match("%.pem$") or lower:match("%.key$") then
    return "a key file"
  end
  -- Private keys in other containers: PuTTY, PKCS#12, Java key stores, KeePass.
  for _, ext in ipairs(H.KEY_EXTS) do
    if lower:sub(-#ext - 1) == "." .. ext then
      return "a key file"
    end
  end
  -- id_rsa, id_ed25519, id_ecdsa_sk...: a private key; id_rsa.pub is not. A copy
  -- kept aside (id_rsa.bak, id_rsa.old, id_rsa~) is one too.
  local stem = lower:match("^(id_[%w_%-]+)$")
    or lower:match("^(id_[%w_%-]+)~$")
    or lower:match("^(id_[%w_%-]+)%.bak$")
    or lower:match("^(id_[%w_%-]+)%.old$")
    or lower:match("^(id_[%w_%-]+)%.orig$")
    or lower:match("^(id_[%w_%-]+)%.backup$")
  if stem then
    return "a private key"
  end
  -- Credential files of $HOME (M.HOME_ENTRIES), wherever a copy lies.
  if H.CREDENTIAL_NAMES[lower] then
    return "a credentials file"
  end
  -- Kerberos tickets: /tmp/krb5cc_UID by default, and /tmp is a writable root of
  -- the sandbox (so of the project while it is on).
  if lower:sub(1, 6) == "krb5cc" then
    return "a Kerberos credential cache"
  end
  if H.TOKEN_FILES[lower] and H.holds_token(path) then
    return ("a %s with a token or password"):format(lower)
  end
  return nil
end

--- Why `path` is a secret file ("under ~/.ssh", "an environment file", ...), or
--- nil when it is not. `path` is absolute; `real` is where it leads (symlinks
--- followed), resolved here when not given. Both count: the name a link has and
--- the file it leads to.
---@param path string absolute path
---@param real? string the resolved path
---@return string|nil reason
function M.check(path, real)
  if type(path) ~= "string" or path == "" then
    return nil
  end
  path = vim.fs.normalize(path)
  if path:find("/%.%.?/") or path:match("/%.%.?$") then
    path = vim.fs.normalize(vim.fn.simplify(path))
  end
  real = real or uv.fs_realpath(path) or path
  for _, place in ipairs(H.places()) do
    if H.below(path, place.path) or H.below(real, place.path) then
      return "under " .. place.shown
    end
  end
  return H.by_name(path) or (real ~= path and H.by_name(real)) or nil
end

return M
