local helpers = require("spec.support.helpers")

-- Runs :checkhealth flemma in Neovim and returns the report's text.
local function health_report_here()
  vim.cmd("checkhealth flemma")
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
  vim.cmd("bwipeout!")
  return text
end

describe("health", function()
  after_each(helpers.cleanup)

  it("reports Neovim, LuaJIT, the library, its ABI version, sandbox, tools and external programs", function()
    require("flemma").setup({})
    local text = health_report_here()
    local v = vim.version()
    assert.matches(("Neovim %d.%d.%d"):format(v.major, v.minor, v.patch), text, 1, true)
    assert.matches("LuaJIT", text, 1, true)
    assert.matches("library: " .. helpers.root .. "/build/libflemma_core.so", text, 1, true)
    assert.matches("ABI version " .. require("flemma.core.native").ABI_VERSION, text, 1, true)
    assert.matches("`bash` found: GNU bash", text, 1, true)
    assert.matches("`curl` found: curl %d", text)
    assert.matches("`bwrap` found: bubblewrap %d", text)
    assert.matches("backend `bwrap` works (probe run passed)", text, 1, true)
    assert.matches(
      "tools: ask, bash, calculator, calculator_async, delete, edit, find, glob, grep, ls, move, read, todo, write",
      text,
      1,
      true
    )
    assert.matches("`rg` found: ripgrep %d", text)
    assert.matches("`fd%a*` found: fd%a* %d", text)
  end)

  it("reports each provider's key as present or missing, never the key, and curl's TLS", function()
    local saved_a, saved_o = vim.env.ANTHROPIC_API_KEY, vim.env.OPENROUTER_API_KEY
    vim.env.ANTHROPIC_API_KEY = "sk-ant-health-secret-123456"
    vim.env.OPENROUTER_API_KEY = nil
    require("flemma").setup({})
    local ok, text = pcall(health_report_here)
    vim.env.ANTHROPIC_API_KEY, vim.env.OPENROUTER_API_KEY = saved_a, saved_o
    assert(ok, text)
    assert.matches(
      "`anthropic` (anthropic, https://api.anthropic.com/v1/messages) (active): key present in $ANTHROPIC_API_KEY",
      text,
      1,
      true
    )
    assert.matches("`openrouter` %(openai_chat, [^)]*%): no key: %$OPENROUTER_API_KEY is not set", text)
    assert.matches("`ollama` (openai_chat, http://127.0.0.1:11434/v1/chat/completions): no key needed", text, 1, true)
    assert.matches(
      "`openai_chat` (openai_chat, http://127.0.0.1:11434/v1/chat/completions): no key is sent: the key in $OPENAI_API_KEY is not sent to 127.0.0.1: it is the key of api.openai.com and goes only there",
      text,
      1,
      true
    )
    assert.matches("curl TLS: %S+ %(https supported%)", text)
    assert.is_nil(text:find("sk-ant-health-secret", 1, true))
  end)

  it("reports async tool sources that loaded and that failed", function()
    require("flemma").setup({})
    local tools = require("flemma.tools")
    tools.register(function(register, done)
      register("health_probe_tool", {
        description = "probe",
        input_schema = { type = "object", properties = {} },
        execute = function()
          return "ok"
        end,
      })
      done()
    end)
    tools.register({
      resolve = function(_, done)
        done("no server at 127.0.0.1:1")
      end,
      timeout = 5,
    })
    helpers.wait_for(tools.is_ready, 5000)
    local text = health_report_here()
    tools.unregister("health_probe_tool")
    assert.matches("tool source function at [^\n]* loaded %(1 tool%)", text)
    assert.matches("tool source function at [^\n]* failed: no server at 127.0.0.1:1", text)
  end)

  it("reports a missing library with its path and the build command", function()
    -- A copy of the plugin without build/: what a user gets before running `make`.
    local dir = helpers.tmpdir()
    vim.fn.system({ "cp", "-r", helpers.root .. "/lua", helpers.root .. "/plugin", dir })
    local out = dir .. "/health.txt"
    local res = helpers.run_nvim({
      rtp = dir,
      lua = ([[
        vim.cmd("checkhealth flemma")
        local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
        vim.fn.writefile(lines, %q)
      ]]):format(out),
    })
    assert.equals(0, res.code, res.stderr)
    local text = assert(helpers.read_file(out))
    assert.matches("native library not found at " .. dir .. "/build/libflemma_core.so", text, 1, true)
    assert.matches("make", text, 1, true)
    assert.matches("ERROR", text, 1, true)
  end)
end)

describe("startup without the native library", function()
  after_each(helpers.cleanup)

  it("does not throw on startup, and the first use says what is wrong and how to fix it", function()
    local dir = helpers.tmpdir()
    vim.fn.system({ "cp", "-r", helpers.root .. "/lua", helpers.root .. "/plugin", dir })
    local out = dir .. "/result.txt"
    local res = helpers.run_nvim({
      rtp = dir,
      lua = ([[
        local lines = {}
        lines[#lines + 1] = "errmsg=" .. vim.v.errmsg
        local chat = vim.fn.tempname() .. ".chat"
        vim.cmd("edit " .. chat)
        lines[#lines + 1] = "filetype=" .. vim.bo.filetype
        require("flemma").setup({})
        local ok, err = pcall(require("flemma.core.native").format_size, 10)
        lines[#lines + 1] = "ok=" .. tostring(ok)
        lines[#lines + 1] = "err=" .. tostring(err)
        vim.fn.writefile(lines, %q)
      ]]):format(out),
    })
    assert.equals(0, res.code, res.stderr)
    assert.equals("", res.stderr)
    local text = assert(helpers.read_file(out))
    assert.matches("errmsg=\n", text, 1, true)
    assert.matches("filetype=chat", text, 1, true)
    assert.matches("ok=false", text, 1, true)
    assert.matches(
      "err=(flemma) native library not found at " .. dir .. "/build/libflemma_core.so: build it with `make` in " .. dir,
      text,
      1,
      true
    )
  end)
end)
