-- The credential chain with real programs: fake `secret-tool` and `gcloud` shell
-- scripts written into a temp dir put first on $PATH, each recording its argv and
-- environment, answering from a file the spec controls.
local helpers = require("spec.support.helpers")
local secrets = require("flemma.policy.secrets")

local saved = {}
local bin, state

local function script(name, body)
  local path = bin .. "/" .. name
  helpers.write_file(path, "#!/bin/sh\n" .. body)
  vim.uv.fs_chmod(path, tonumber("755", 8))
end

--- A fake program: appends its argv to STATE/<name>.calls, sleeps STATE/<name>.sleep
--- seconds if that file exists, prints STATE/<name>.out and exits STATE/<name>.code.
local function fake(name, extra)
  script(
    name,
    ([[
S=%q
echo "$*" >> "$S/%s.calls"
%s
[ -f "$S/%s.sleep" ] && sleep "$(cat "$S/%s.sleep")"
code=0
[ -f "$S/%s.code" ] && code=$(cat "$S/%s.code")
if [ "$code" != 0 ]; then echo "No matching secret" >&2; exit "$code"; fi
[ -f "$S/%s.out" ] && cat "$S/%s.out"
exit 0
]]):format(state, name, extra or "", name, name, name, name, name, name)
  )
end

local function set(name, what, value)
  local path = state .. "/" .. name .. "." .. what
  if value == nil then
    os.remove(path)
  else
    helpers.write_file(path, value)
  end
end

local function calls(name)
  local s = helpers.read_file(state .. "/" .. name .. ".calls")
  return s and vim.split(vim.trim(s), "\n") or {}
end

local function resolve(provider, timeout)
  local res
  secrets.resolve(provider, function(key, info)
    res = { key = key, info = info }
  end)
  helpers.wait_for(function()
    return res ~= nil
  end, timeout or 5000, "the resolver chain never answered")
  return res
end

local anthropic = {
  name = "anthropic",
  kind = "anthropic",
  api_key_env = "FLEMMA_SPEC_ANTHROPIC_KEY",
  endpoint = "https://api.anthropic.com/v1/messages",
}
local vertex = {
  name = "vertex",
  kind = "vertex",
  api_key_env = "FLEMMA_SPEC_VERTEX_TOKEN",
  endpoint = "https://aiplatform.googleapis.com",
}

describe("flemma.policy.secrets", function()
  before_each(function()
    secrets._reset()
    saved.path = vim.env.PATH
    saved.sa = vim.env.VERTEX_SERVICE_ACCOUNT
    saved.ttl, saved.timeout = secrets.ttl, secrets.timeout
    bin = helpers.tmpdir()
    state = helpers.tmpdir()
    vim.env.PATH = bin .. ":" .. saved.path
    vim.env.VERTEX_SERVICE_ACCOUNT = nil
    vim.env.FLEMMA_SPEC_ANTHROPIC_KEY = nil
    vim.env.FLEMMA_SPEC_VERTEX_TOKEN = nil
    fake("secret-tool")
    fake(
      "gcloud",
      [[echo "OVERRIDE=$CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE" >> "$S/gcloud.env"
[ -n "$CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE" ] && cat "$CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE" > "$S/gcloud.sa" && stat -c %a "$CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE" > "$S/gcloud.mode"]]
    )
  end)
  after_each(function()
    vim.env.PATH = saved.path
    vim.env.VERTEX_SERVICE_ACCOUNT = saved.sa
    secrets.ttl, secrets.timeout = saved.ttl, saved.timeout
    secrets.unregister("spec_pass")
    secrets.unregister("spec_slow")
    secrets.unregister("spec_broken")
    secrets._reset()
    helpers.cleanup()
  end)

  describe("resolve", function()
    it("takes the environment variable first, without running the keyring", function()
      vim.env.FLEMMA_SPEC_ANTHROPIC_KEY = "sk-env-0000"
      set("secret-tool", "out", "sk-keyring-1111\n")
      local res = resolve(anthropic)
      assert.same({ key = "sk-env-0000", info = "env" }, res)
      assert.same({}, calls("secret-tool"))
    end)

    it("asks secret-tool for service <provider> key api when the variable is not set", function()
      set("secret-tool", "out", "sk-keyring-1111\n")
      local res = resolve(anthropic)
      assert.same({ key = "sk-keyring-1111", info = "keyring" }, res)
      assert.same({ "lookup service anthropic key api" }, calls("secret-tool"))
    end)

    it("runs a slow resolver without blocking the loop", function()
      set("secret-tool", "out", "sk-keyring-slow")
      set("secret-tool", "sleep", "0.4")
      local res
      local ticks = 0
      local timer = vim.uv.new_timer()
      timer:start(20, 20, function()
        ticks = ticks + 1
      end)
      secrets.resolve(anthropic, function(key)
        res = key
      end)
      assert.is_nil(res, "resolve waited for secret-tool")
      helpers.wait_for(function()
        return res ~= nil
      end, 5000)
      timer:stop()
      timer:close()
      assert.equals("sk-keyring-slow", res)
      assert.is_true(ticks >= 5, "the loop did not run while secret-tool slept (" .. ticks .. " ticks)")
    end)

    it("caches a keyring key for the TTL, then asks again", function()
      set("secret-tool", "out", "sk-keyring-1111")
      assert.equals("sk-keyring-1111", resolve(anthropic).key)
      assert.equals("sk-keyring-1111", resolve(anthropic).key)
      assert.equals(1, #calls("secret-tool"))
      assert.equals("keyring", secrets.cached_source("anthropic"))
      assert.equals("sk-keyring-1111", secrets.peek(anthropic))
      secrets.invalidate("anthropic")
      set("secret-tool", "out", "sk-keyring-2222")
      assert.equals("sk-keyring-2222", resolve(anthropic).key)
      assert.equals(2, #calls("secret-tool"))
      secrets.ttl = 0
      secrets.invalidate()
      assert.equals("sk-keyring-2222", resolve(anthropic).key)
      assert.equals("sk-keyring-2222", resolve(anthropic).key)
      assert.equals(4, #calls("secret-tool"), "an expired key was reused")
    end)

    it("gets a vertex token from gcloud auth print-access-token", function()
      set("secret-tool", "code", "1")
      set("gcloud", "out", "ya29.token-3333\n")
      local res = resolve(vertex)
      assert.same({ key = "ya29.token-3333", info = "gcloud" }, res)
      assert.same({ "auth print-access-token" }, calls("gcloud"))
      assert.same({ "lookup service vertex key api" }, calls("secret-tool"))
    end)

    it("hands gcloud the service account of $VERTEX_SERVICE_ACCOUNT through a private file, removed after", function()
      set("secret-tool", "code", "1")
      set("gcloud", "out", "ya29.sa-token")
      local json = '{"type":"service_account","client_email":"x@y.iam.gserviceaccount.com"}'
      vim.env.VERTEX_SERVICE_ACCOUNT = json
      assert.equals("ya29.sa-token", resolve(vertex).key)
      assert.equals(json, helpers.read_file(state .. "/gcloud.sa"))
      assert.equals("600", vim.trim(helpers.read_file(state .. "/gcloud.mode")))
      local path = helpers.read_file(state .. "/gcloud.env"):match("OVERRIDE=(%S+)")
      assert.truthy(path)
      assert.is_nil(vim.uv.fs_stat(path), "the service account file was left behind")
      -- A path is passed as it is.
      secrets.invalidate()
      local file = state .. "/sa.json"
      helpers.write_file(file, json)
      vim.env.VERTEX_SERVICE_ACCOUNT = file
      assert.equals("ya29.sa-token", resolve(vertex).key)
      assert.truthy(helpers.read_file(state .. "/gcloud.env"):find("OVERRIDE=" .. file, 1, true))
    end)

    it("says in one message which resolvers were tried and why each could not help", function()
      set("secret-tool", "code", "1")
      set("gcloud", "code", "1")
      secrets.register("spec_pass", {
        resolve = function(_, cb)
          cb(nil, "pass show flemma/anthropic: not in the store")
        end,
      })
      local res = resolve(anthropic)
      assert.is_nil(res.key)
      local msg = res.info
      assert.truthy(msg:find("anthropic: no API key found", 1, true), msg)
      assert.truthy(
        msg:find("a local server needs no key: require('flemma').setup({ provider = \"ollama\"", 1, true),
        msg
      )
      assert.truthy(msg:find("env: $FLEMMA_SPEC_ANTHROPIC_KEY is not set", 1, true), msg)
      assert.truthy(msg:find("spec_pass: pass show flemma/anthropic: not in the store", 1, true), msg)
      assert.truthy(
        msg:find("keyring: secret-tool lookup service anthropic key api: exit 1 (No matching secret)", 1, true),
        msg
      )
      assert.truthy(msg:find("gcloud: only for vertex", 1, true), msg)
      -- The command the README gives, word for word (issue 24 §16: the label differed).
      local readme = assert(helpers.read_file(helpers.root .. "/README.md")):gsub("%s+", " ")
      local cmd = "secret-tool store --label=flemma service anthropic key api"
      assert.truthy(readme:find(cmd, 1, true), "README")
      assert.truthy(msg:find(cmd, 1, true), msg)
      -- in the order tried
      assert.truthy(msg:find("env:", 1, true) < msg:find("spec_pass:", 1, true))
      assert.truthy(msg:find("spec_pass:", 1, true) < msg:find("keyring:", 1, true))
    end)

    it("names a keyring program that is not installed", function()
      vim.env.PATH = "/nonexistent"
      local res = resolve(anthropic)
      assert.truthy(res.info:find("keyring: `secret-tool` is not installed", 1, true), res.info)
    end)
  end)

  describe("register", function()
    it("tries a custom resolver by priority, after the environment by default", function()
      secrets.register("spec_pass", {
        resolve = function(provider, cb)
          vim.defer_fn(function()
            cb("sk-pass-" .. provider.name)
          end, 10)
        end,
      })
      set("secret-tool", "out", "sk-keyring-1111")
      assert.same({ key = "sk-pass-anthropic", info = "spec_pass" }, resolve(anthropic))
      assert.same({}, calls("secret-tool"))
      vim.env.FLEMMA_SPEC_ANTHROPIC_KEY = "sk-env-0000"
      secrets.invalidate()
      assert.equals("env", resolve(anthropic).info)
      local names = vim.tbl_map(function(r)
        return r.name
      end, secrets.list())
      assert.same({ "env", "spec_pass", "keyring", "gcloud" }, names)
    end)

    it("goes on past a resolver that raises or never answers", function()
      secrets.timeout = 0.2
      secrets.register("spec_broken", {
        priority = 90,
        resolve = function()
          error("vault is sealed")
        end,
      })
      secrets.register("spec_slow", { priority = 80, resolve = function() end })
      set("secret-tool", "out", "sk-keyring-1111")
      local res = resolve(anthropic)
      assert.equals("sk-keyring-1111", res.key)
      set("secret-tool", "code", "1")
      secrets.invalidate()
      res = resolve(anthropic)
      assert.truthy(res.info:find("spec_broken: failed: [^\n]*vault is sealed"), res.info)
      assert.truthy(res.info:find("spec_slow: gave no answer within 0.2 s", 1, true), res.info)
    end)

    it("refuses a definition without resolve", function()
      local ok, err = pcall(secrets.register, "spec_pass", { priority = 1 })
      assert.is_false(ok)
      assert.truthy(err:find('(flemma) secrets.register("spec_pass"): expects', 1, true), err)
    end)
  end)

  describe("keys in configuration", function()
    it("setup() refuses a key in a provider entry, at the top or in parameters", function()
      for _, opts in ipairs({
        { providers = { anthropic = { kind = "anthropic", endpoint = "https://x", api_key = "sk-123" } } },
        { api_key = "sk-123" },
        { parameters = { api_key = "sk-123" } },
        { parameters = { vertex = { token = "ya29" } } },
      }) do
        local ok, err = pcall(require("flemma.core.config").validate, opts)
        assert.is_false(ok)
        assert.truthy(err:find("API keys are never accepted in configuration or frontmatter", 1, true), err)
        assert.is_nil(err:find("sk-123", 1, true))
      end
    end)

    it("frontmatter refuses flemma.opt.api_key", function()
      local opt = require("flemma.isolated.opt").new()
      local ok, err = pcall(function()
        opt.api_key = "sk-123"
      end)
      assert.is_false(ok)
      assert.truthy(err:find("`flemma.opt.api_key`: API keys are never accepted", 1, true), err)
      ok, err = pcall(function()
        opt.openai.token = "sk-123"
      end)
      assert.is_false(ok)
      assert.truthy(err:find("`flemma.opt.openai.token`: API keys are never accepted", 1, true), err)
    end)
  end)

  describe(":Flemma status", function()
    after_each(function()
      require("flemma").setup({})
    end)

    it("says where the key comes from, never the key", function()
      require("flemma").setup({
        providers = {
          anthropic = {
            kind = "anthropic",
            endpoint = "https://api.anthropic.com/v1/messages",
            api_key_env = "FLEMMA_SPEC_ANTHROPIC_KEY",
          },
        },
      })
      local function key_row()
        for _, r in ipairs(require("flemma.ui.status").tree(vim.api.nvim_get_current_buf())) do
          if r.text:find("^key: ") then
            return r.text
          end
        end
      end
      assert.equals(
        "key: $FLEMMA_SPEC_ANTHROPIC_KEY is not set; the keyring and other resolvers are asked at send (:help flemma-secrets)",
        key_row()
      )
      set("secret-tool", "out", "sk-keyring-status-77")
      resolve(anthropic)
      assert.equals("key: $FLEMMA_SPEC_ANTHROPIC_KEY is not set; the key from `keyring` is cached", key_row())
      vim.env.FLEMMA_SPEC_ANTHROPIC_KEY = "sk-env-status-99"
      assert.equals("key: $FLEMMA_SPEC_ANTHROPIC_KEY is set", key_row())
    end)
  end)

  describe("log redaction", function()
    it("removes keys from the keyring from log lines", function()
      set("secret-tool", "out", "sk-keyring-redact-me-42")
      resolve(anthropic)
      local text = require("flemma.core.log").redact("sent with sk-keyring-redact-me-42 inside")
      assert.equals("sent with [redacted] inside", text)
    end)
  end)
end)
