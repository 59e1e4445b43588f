-- One record per chat buffer (flemma.core.session): what the modules keep about a
-- buffer lives in its record, which goes when the buffer is wiped out.
local helpers = require("spec.support.helpers")
local session = require("flemma.core.session")

local function chat(lines)
  local buf = helpers.edit(helpers.tmpdir() .. "/session.chat", lines)
  assert.equals("chat", vim.bo[buf].filetype)
  return buf
end

describe("flemma.core.session", function()
  after_each(helpers.cleanup)

  it("holds the state of the modules attached to a chat in one record", function()
    require("flemma").setup({})
    local buf = chat({ "@You:", "Hello." })
    helpers.settle()
    require("flemma.chat.document").get(buf)
    local r = session.peek(buf)
    assert.is_table(r)
    assert.equals(buf, r.bufnr)
    -- the live document, the view and the keys of this buffer
    assert.is_table(r.live)
    assert.is_true(r.view_attached)
    assert.is_true(r.keymaps_attached)
    assert.is_true(vim.tbl_contains(session.buffers(), buf))
  end)

  it("drops the record when the buffer is wiped out, after its wipe handlers ran", function()
    require("flemma").setup({})
    local buf = chat({ "@You:", "Hello." })
    helpers.settle()
    local seen = {}
    session.get(buf).session_spec = "mine"
    session.on("wipe", "session_spec", function(b, r)
      seen[#seen + 1] = { b = b, mine = r.session_spec }
    end)
    vim.cmd("bwipeout! " .. buf)
    assert.is_nil(session.peek(buf), "the record of a wiped buffer stayed")
    session.on("wipe", "session_spec", function() end)
    assert.same({ { b = buf, mine = "mine" } }, seen)
    assert.is_false(vim.tbl_contains(session.buffers(), buf))
  end)

  it("keeps the record when the buffer is only unloaded, and stops its tools", function()
    require("flemma").setup({ tools = { autopilot = { enabled = false }, auto_approve = { "$default", "bash" } } })
    local buf = chat({
      "@You:",
      "Run it.",
      "",
      "@Assistant:",
      "",
      "**Tool Use:** `bash` (`toolu_s1`)",
      "",
      "```json",
      vim.json.encode({ command = "sleep 30; echo done", label = "sleeping" }),
      "```",
    })
    vim.cmd("write")
    helpers.press("<C-]>")
    helpers.wait_for(function()
      return session.field(buf, "cycle") ~= nil and next(session.field(buf, "cycle").running) ~= nil
    end, 5000, "the tool never started")
    local pid
    for _, run in pairs(session.field(buf, "cycle").running) do
      pid = run.handle and run.handle.pid
    end
    local unloaded = {}
    session.on("unload", "session_spec", function(b)
      unloaded[#unloaded + 1] = b
    end)
    vim.cmd("enew")
    vim.cmd("bunload! " .. buf)
    session.on("unload", "session_spec", function() end)
    assert.is_true(vim.tbl_contains(unloaded, buf))
    assert.is_table(session.peek(buf), "an unloaded buffer keeps its record")
    assert.is_nil(session.field(buf, "cycle"), "the cycle of an unloaded buffer is detached")
    if pid then
      helpers.wait_for(function()
        return vim.uv.kill(pid, 0) ~= 0
      end, 3000, "the tool's process outlived the unloaded buffer")
    end
  end)

  it("runs every handler although one raises, and names the one that did", function()
    local ran = {}
    session.on("wipe", "session_spec_bad", function()
      error("boom")
    end)
    session.on("wipe", "session_spec_good", function(b)
      ran[#ran + 1] = b
    end)
    local buf = vim.api.nvim_create_buf(false, true)
    session.get(buf).x = 1
    local seen = helpers.notifications(function()
      vim.cmd("bwipeout! " .. buf)
    end)
    session.on("wipe", "session_spec_bad", function() end)
    session.on("wipe", "session_spec_good", function() end)
    assert.same({ buf }, ran)
    local text = table.concat(
      vim.tbl_map(function(n)
        return n.msg
      end, seen),
      "\n"
    )
    assert.matches("session_spec_bad failed: .*boom", text)
  end)
end)
