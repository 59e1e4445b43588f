local helpers = require("spec.support.helpers")

local function chat(lines)
  local dir = helpers.tmpdir()
  vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/status.chat"))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  return buf
end

-- The row of the status window that starts (after indentation) with `prefix`.
local function row(lines, prefix)
  for _, l in ipairs(lines) do
    if vim.trim(l):sub(1, #prefix) == prefix then
      return vim.trim(l)
    end
  end
  error("no row " .. prefix .. " in:\n" .. table.concat(lines, "\n"))
end

describe(":Flemma status", function()
  after_each(function()
    require("flemma.policy.sandbox").set_enabled(nil)
    require("flemma").setup({})
    vim.cmd("silent! %bwipeout!")
    helpers.cleanup()
  end)

  it("shows each setting with the layer that set it: default, setup, command, buffer, frontmatter", function()
    require("flemma").setup({ parameters = { temperature = 0.5 }, tools = { auto_approve = { "$readonly" } } })
    local buf = chat({
      "```lua",
      'flemma.opt.tools = { "read", "bash" }',
      "flemma.opt.max_tokens = 1234",
      "```",
      "@You:",
      "hello",
    })
    require("flemma.policy.sandbox").set_enabled(true)
    require("flemma.cycle").set_autopilot(buf, false)
    vim.cmd("Flemma status")
    local sbuf = vim.api.nvim_get_current_buf()
    assert.are_not.equal(buf, sbuf)
    assert.equals("flemma-status", vim.bo[sbuf].filetype)
    local lines = vim.api.nvim_buf_get_lines(sbuf, 0, -1, false)
    assert.matches("^Flemma status of buffer " .. buf, lines[1])
    assert.matches("^native core %S+ %(ABI %d+%) at ", lines[2])
    assert.matches("%[default%]$", row(lines, "provider: anthropic"))
    assert.matches("%[default%]$", row(lines, "model: claude-sonnet-4-6"))
    assert.matches("%[setup%]$", row(lines, "temperature: 0.5"))
    assert.matches("%[frontmatter%]$", row(lines, "max_tokens: 1234"))
    assert.matches("%[default%]$", row(lines, "cache_retention: short"))
    assert.matches("%[command%]$", row(lines, "sandbox: enabled"))
    assert.matches("%[frontmatter%]$", row(lines, "tools: { read, bash }"))
    assert.matches("%[setup%]$", row(lines, "auto_approve: { $readonly }"))
    assert.matches("%[buffer%]$", row(lines, "autopilot: off (max 100 turns)"))
    assert.equals("frontmatter: evaluated", row(lines, "frontmatter:"))
    vim.api.nvim_feedkeys("q", "x", false)
    assert.equals(buf, vim.api.nvim_get_current_buf())
  end)

  it("says whether what the frontmatter approves beyond the global policy is trusted", function()
    local saved = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    local buf = chat({ "```lua", 'flemma.opt.tools.auto_approve = { "$default", "bash" }', "```", "@You:", "hi" })
    vim.cmd("Flemma status")
    local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    vim.cmd("close")
    assert.matches("^beyond the global policy: ignored until trusted", row(lines, "beyond the global policy:"))
    require("flemma.chat.trust").set(buf, "trusted")
    vim.cmd("Flemma status")
    lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    vim.cmd("close")
    vim.env.XDG_STATE_HOME = saved
    assert.matches("^beyond the global policy: trusted", row(lines, "beyond the global policy:"))
  end)

  -- Issue 24 §16: the approval resolvers showed as internal names
  -- (`urn:flemma:approval:config`) where a user needs "your setup's auto_approve".
  it("names the approval resolvers as a user knows them, in the order they are asked", function()
    require("flemma.tools.approval").register("team-policy", { priority = 60, resolve = function() end })
    chat({ "@You:", "hi" })
    vim.cmd("Flemma status")
    local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    vim.cmd("close")
    require("flemma.tools.approval").unregister("team-policy")
    assert.equals(
      "asked in turn: your setup's auto_approve, this chat's frontmatter auto_approve, your resolver `team-policy` (priority 60), sandboxed tools (auto_approve_sandboxed); then you are asked",
      row(lines, "asked in turn:")
    )
    assert.is_nil(table.concat(lines, "\n"):find("urn:flemma", 1, true))
  end)

  it("shows a frontmatter error with its line", function()
    chat({ "```lua", "flemma.opt.tools = { 'reed' }", "```", "@You:", "hi" })
    vim.cmd("Flemma status")
    local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    assert.matches("^frontmatter: error: frontmatter line 2: .*reed", row(lines, "frontmatter:"))
    vim.cmd("close")
  end)
end)
