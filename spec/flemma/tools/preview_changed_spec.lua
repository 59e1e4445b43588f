-- Issue 27: "the file must be unchanged since the preview, else the call is refused
-- with a message". A pending write, edit, delete or move the user approves (without a
-- diff review) is refused when a file it changes was changed, created or removed
-- after its preview was shown: an error result telling the model to read it again,
-- one line to the user, the file left as it is. A file written again with the same
-- text is unchanged; a call approved by the policy runs at once. Real chat buffer,
-- the loopback server as the model, real <C-]> and :Flemma tool:approve, real files.
local helpers = require("spec.support.helpers")

local press, text = helpers.press, helpers.text

local KEY = "sk-flemma-spec-" .. tostring(math.random(1e9))

describe("a file changed between the preview and the approval", function()
  local h, saved_state

  local function setup(extra)
    require("flemma").setup(vim.tbl_deep_extend("force", {
      provider = "test",
      providers = {
        test = { kind = "anthropic", endpoint = h.server:url("/v1/messages"), api_key_env = "FLEMMA_SPEC_KEY" },
      },
      parameters = { max_retries = 0, cache_retention = "none" },
      tools = { auto_approve = {}, auto_approve_sandboxed = false, autopilot = { enabled = false } },
    }, extra or {}))
  end

  -- The model (the loopback server) calls `calls` ({ name, id, input }); <C-]> sends,
  -- <C-]> again puts the placeholders in. Returns the chat and its folder.
  local function ask(calls, prepare)
    local stream = {}
    for i, c in ipairs(calls) do
      stream[i] = { c[1], c[2], vim.json.encode(c[3]) }
    end
    h.server:script({
      { body = helpers.anthropic_tool_stream(stream), content_type = "text/event-stream" },
      { fixture = "anthropic_text.sse" },
    })
    local chat = helpers.open_chat({ "@You:", "Change the files." })
    local dir = vim.fs.dirname(vim.api.nvim_buf_get_name(chat))
    if prepare then
      prepare(dir)
    end
    press("<C-]>")
    h.wait_finished(1)
    return chat, dir
  end

  local function placeholders(chat)
    press("<C-]>")
    helpers.wait_for(function()
      return text(chat):find("```flemma:tool status=pending", 1, true) ~= nil
    end, 10000, "no pending placeholder:\n" .. text(chat))
  end

  -- Approves each call (:Flemma tool:approve with the cursor in its placeholder) and
  -- runs them with <C-]>; waits for the result of each.
  local function approve_and_run(chat, ids)
    for _, id in ipairs(ids) do
      for i, l in ipairs(vim.api.nvim_buf_get_lines(chat, 0, -1, false)) do
        if l == "**Tool Result:** `" .. id .. "`" then
          vim.api.nvim_win_set_cursor(0, { i + 2, 0 })
        end
      end
      vim.cmd("Flemma tool:approve")
    end
    assert.is_nil(text(chat):find("status=pending", 1, true), text(chat))
    press("<C-]>")
    for _, id in ipairs(ids) do
      local header = "**Tool Result:** `" .. id .. "`"
      local ok = vim.wait(10000, function()
        local t = text(chat)
        return t:find(header, 1, true) ~= nil and t:find(header .. "\n\n```flemma:tool", 1, true) == nil
      end, 10)
      assert(ok, "no result of " .. id .. ":\n" .. text(chat) .. "\n" .. vim.inspect(h.notes))
    end
    return text(chat)
  end

  local function write(path, content)
    return { path = path, content = content, label = vim.NIL }
  end
  local function edit(path, old, new)
    return {
      path = path,
      old_string = old,
      new_string = new,
      replace_all = vim.NIL,
      start_line = vim.NIL,
      end_line = vim.NIL,
      label = vim.NIL,
    }
  end

  local function warned(pattern)
    return vim.tbl_filter(function(n)
      return n.msg:find(pattern, 1, true) ~= nil
    end, h.notes)
  end

  before_each(function()
    h = helpers.send_harness({ key = KEY })
    saved_state = vim.env.XDG_STATE_HOME
    vim.env.XDG_STATE_HOME = helpers.tmpdir()
    require("flemma.policy.audit").set_path(helpers.tmpdir() .. "/audit.jsonl")
  end)
  after_each(function()
    require("flemma.policy.audit").set_path(nil)
    h.teardown()
    vim.env.XDG_STATE_HOME = saved_state
  end)

  it("write and edit: refused with a result for the model and one line for the user; files left as they are", function()
    setup()
    local chat, dir = ask({
      { "write", "toolu_w1", write("w.txt", "from the model\n") },
      { "edit", "toolu_e1", edit("e.txt", "two", "TWO") },
      { "write", "toolu_n1", write("new.txt", "fresh\n") },
    }, function(dir)
      helpers.write_file(dir .. "/w.txt", "old\n")
      helpers.write_file(dir .. "/e.txt", "one\ntwo\n")
    end)
    placeholders(chat)
    -- Someone else changes the files while the calls wait.
    helpers.write_file(dir .. "/w.txt", "someone else's\n")
    helpers.write_file(dir .. "/e.txt", "one\ntwo\nthree\n")
    helpers.write_file(dir .. "/new.txt", "made meanwhile\n")
    h.forget_notes()
    local t = approve_and_run(chat, { "toolu_w1", "toolu_e1", "toolu_n1" })
    assert.equals("someone else's\n", helpers.read_file(dir .. "/w.txt"))
    assert.equals("one\ntwo\nthree\n", helpers.read_file(dir .. "/e.txt"))
    assert.equals("made meanwhile\n", helpers.read_file(dir .. "/new.txt"))
    for _, c in ipairs({ { "toolu_w1", "w.txt" }, { "toolu_e1", "e.txt" } }) do
      assert.truthy(t:find("**Tool Result:** `" .. c[1] .. "` (error)", 1, true), t)
      assert.truthy(
        t:find(
          ("refused: %s changed since the preview the user approved (its content differs), so nothing was done; "):format(
            c[2]
          ) .. "read it again and make the change anew",
          1,
          true
        ),
        t
      )
    end
    assert.truthy(t:find("refused: new.txt changed since the preview the user approved (it exists now)", 1, true), t)
    for _, c in ipairs({ { "toolu_w1", "w.txt" }, { "toolu_e1", "e.txt" }, { "toolu_n1", "new.txt" } }) do
      local said = warned(("`%s` was not run: %s changed since its preview"):format(c[1], c[2]))
      assert.equals(1, #said, vim.inspect(h.notes))
      assert.is_nil(said[1].msg:find("\n", 1, true))
    end
    -- The model is told: its next request carries the refusals.
    press("<C-]>")
    h.wait_finished(2)
    local req = vim.inspect(h.server:requests()[2].json)
    assert.truthy(req:find("w.txt changed since the preview the user approved", 1, true), req)
  end)

  it("delete and move: a file changed, a destination made or a source removed meanwhile refuses them", function()
    setup()
    local chat, dir = ask({
      { "delete", "toolu_d1", { path = "d.txt", label = vim.NIL } },
      { "move", "toolu_m1", { source = "m.txt", destination = "dest.txt", overwrite = true, label = vim.NIL } },
      { "move", "toolu_m2", { source = "gone.txt", destination = "g2.txt", overwrite = vim.NIL, label = vim.NIL } },
    }, function(dir)
      helpers.write_file(dir .. "/d.txt", "keep me?\n")
      helpers.write_file(dir .. "/m.txt", "moving\n")
      helpers.write_file(dir .. "/gone.txt", "here at the preview\n")
    end)
    placeholders(chat)
    helpers.write_file(dir .. "/d.txt", "important now\n")
    helpers.write_file(dir .. "/dest.txt", "someone's new file\n")
    vim.uv.fs_rename(dir .. "/gone.txt", dir .. "/elsewhere.txt")
    local t = approve_and_run(chat, { "toolu_d1", "toolu_m1", "toolu_m2" })
    assert.equals("important now\n", helpers.read_file(dir .. "/d.txt"))
    assert.equals("moving\n", helpers.read_file(dir .. "/m.txt"))
    assert.equals("someone's new file\n", helpers.read_file(dir .. "/dest.txt"))
    assert.truthy(
      t:find("refused: d.txt changed since the preview the user approved (its content differs)", 1, true),
      t
    )
    assert.truthy(t:find("refused: dest.txt changed since the preview the user approved (it exists now)", 1, true), t)
    assert.truthy(t:find("refused: gone.txt changed since the preview the user approved (it is gone)", 1, true), t)
  end)

  it("unchanged files (one written again with the same text) run as approved", function()
    setup()
    local chat, dir = ask({
      { "write", "toolu_w2", write("same.txt", "new text\n") },
      { "delete", "toolu_d2", { path = "del.txt", label = vim.NIL } },
    }, function(dir)
      helpers.write_file(dir .. "/same.txt", "old text\n")
      helpers.write_file(dir .. "/del.txt", "bye\n")
    end)
    placeholders(chat)
    vim.uv.sleep(20)
    helpers.write_file(dir .. "/same.txt", "old text\n") -- touched, the same content
    local t = approve_and_run(chat, { "toolu_w2", "toolu_d2" })
    assert.equals("new text\n", helpers.read_file(dir .. "/same.txt"))
    assert.is_nil(vim.uv.fs_stat(dir .. "/del.txt"))
    assert.is_nil(t:find("refused", 1, true), t)
  end)

  it("a nested write (tools.call) waiting under its parent is refused too", function()
    local tools = require("flemma.tools")
    setup({ tools = { auto_approve = { "zz_writer" } } })
    tools.register("zz_writer", {
      description = "writes through the write tool",
      input_schema = { type = "object", properties = {} },
      execute = function()
        local r = tools.call("write", { path = "nested.txt", content = "nested\n", label = vim.NIL })
        return { success = true, output = ("nested error=%s: %s"):format(tostring(r.is_error), tostring(r.content)) }
      end,
    })
    local chat, dir = ask({ { "zz_writer", "toolu_p1", vim.empty_dict() } }, function(dir)
      helpers.write_file(dir .. "/nested.txt", "before\n")
    end)
    press("<C-]>")
    local ok = vim.wait(10000, function()
      if text(chat):find("status=approved", 1, true) and not text(chat):find("toolu_p1.1", 1, true) then
        press("<C-]>")
      end
      return text(chat):find("`toolu_p1.1`\n\n```flemma:tool status=pending", 1, true) ~= nil
    end, 10)
    assert(ok, text(chat))
    helpers.write_file(dir .. "/nested.txt", "changed meanwhile\n")
    h.forget_notes()
    for i, l in ipairs(vim.api.nvim_buf_get_lines(chat, 0, -1, false)) do
      if l == "**Tool Result:** `toolu_p1.1`" then
        vim.api.nvim_win_set_cursor(0, { i + 2, 0 })
      end
    end
    vim.cmd("Flemma tool:approve")
    local done = vim.wait(10000, function()
      return text(chat):find("nested error=true", 1, true) ~= nil
    end, 10)
    tools.unregister("zz_writer")
    assert(done, text(chat) .. vim.inspect(h.notes))
    assert.equals("changed meanwhile\n", helpers.read_file(dir .. "/nested.txt"))
    assert.truthy(
      text(chat):find("refused: nested.txt changed since the preview the user approved", 1, true),
      text(chat)
    )
    assert.equals(1, #warned("`toolu_p1.1` was not run: nested.txt changed since its preview"), vim.inspect(h.notes))
  end)

  it("a call approved by the policy runs at once: nothing to compare", function()
    setup({ tools = { auto_approve = { "write" } } })
    local chat, dir = ask({ { "write", "toolu_w3", write("auto.txt", "by policy\n") } }, function(dir)
      helpers.write_file(dir .. "/auto.txt", "before\n")
    end)
    press("<C-]>")
    helpers.wait_for(function()
      return helpers.read_file(dir .. "/auto.txt") == "by policy\n"
    end, 10000, text(chat))
    assert.is_nil(text(chat):find("refused", 1, true), text(chat))
    assert.is_nil(require("flemma.core.session").get(chat).previewed)
  end)
end)
