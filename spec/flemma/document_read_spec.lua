-- A long chat just read from its file: its live document is built from the
-- file's text (one string, not one per line) only when the buffer surely holds
-- that text; in every case the model equals a full parse of the buffer's lines.
local document = require("flemma.chat.document")
local helpers = require("spec.support.helpers")

local plain = helpers.plain_model

-- About 72 KB of chat text (over the size read from the file), "\n"-joined.
local function long_text(status)
  local out = { "@You:", "Go." }
  for t = 1, 300 do
    local id = ("toolu_%03d"):format(t)
    vim.list_extend(out, {
      "",
      "@Assistant:",
      ("Turn %d: some prose about the files of the repository, long enough to weigh."):format(t),
      "",
      "**Tool Use:** `bash` (`" .. id .. "`)",
      "",
      "```json",
      ('{"command": "ls -la src/module_%03d"}'):format(t),
      "```",
      "",
      "@You:",
      "**Tool Result:** `" .. id .. "`",
      "",
      "```" .. (t == 300 and ("flemma:tool status=" .. status) or ""),
      t == 300 and "```" or ("output of turn " .. t),
    })
    if t ~= 300 then
      out[#out + 1] = "```"
    end
  end
  return table.concat(out, "\n")
end

local function open(path)
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  return vim.api.nvim_get_current_buf()
end

-- Reads a chat into a buffer without building its document (no filetype
-- plugin runs: nothing asks for it).
local function load_only(path)
  vim.cmd("badd " .. vim.fn.fnameescape(path))
  local buf = vim.fn.bufnr(path)
  local ei = vim.o.eventignore
  vim.o.eventignore = "FileType"
  local ok, err = pcall(vim.fn.bufload, buf)
  vim.o.eventignore = ei
  assert(ok, err)
  return buf
end

local function fresh(buf)
  return plain(document.parse(vim.api.nvim_buf_get_lines(buf, 0, -1, false)))
end

describe("flemma.document of a long chat just read", function()
  before_each(helpers.setup_flemma)
  after_each(helpers.wipe)

  it("is built from the file's text, and equals a full parse of the buffer", function()
    local path = helpers.tmpdir() .. "/long.chat"
    helpers.write_file(path, long_text("pending") .. "\n")
    local buf = open(path)
    assert.equals("file", document.live(buf).source)
    local doc = document.get(buf)
    assert.same(fresh(buf), plain(doc))
    assert.equals("pending", doc.messages[#doc.messages].parts[1].status)
    -- And it follows edits as a document read from the buffer does.
    vim.api.nvim_buf_set_lines(buf, -2, -1, false, { "```flemma:tool status=approved" })
    assert.same(fresh(buf), plain(document.get(buf)))
  end)

  it("is built from the file's text when it is first asked for later, the buffer unchanged", function()
    local path = helpers.tmpdir() .. "/later.chat"
    helpers.write_file(path, long_text("pending") .. "\n")
    local buf = load_only(path)
    local doc = document.get(buf)
    assert.equals("file", document.live(buf).source)
    assert.same(fresh(buf), plain(doc))
  end)

  it("is read from the buffer when the buffer was changed before the document was first built", function()
    local path = helpers.tmpdir() .. "/changed.chat"
    helpers.write_file(path, long_text("pending") .. "\n")
    local buf = load_only(path)
    -- A same-size change: only the text differs from the file's.
    local n = vim.api.nvim_buf_line_count(buf)
    vim.api.nvim_buf_set_lines(buf, n - 2, n - 1, false, { "```flemma:tool status=denied " })
    vim.bo[buf].modified = false -- even when the buffer does not say it was changed
    local doc = document.get(buf)
    assert.equals("buffer", document.live(buf).source)
    assert.same(fresh(buf), plain(doc))
    assert.equals("denied", doc.messages[#doc.messages].parts[1].status)
  end)

  it("is read from the buffer when the file changed on disk since it was read", function()
    local path = helpers.tmpdir() .. "/disk.chat"
    helpers.write_file(path, long_text("approved") .. "\n")
    local buf = load_only(path)
    -- The file changes on disk: same size and line count, another status.
    local mtime = vim.uv.fs_stat(path).mtime.sec
    helpers.write_file(path, long_text("rejected") .. "\n")
    vim.uv.fs_utime(path, mtime + 5, mtime + 5)
    local doc = document.get(buf)
    assert.equals("buffer", document.live(buf).source)
    assert.same(fresh(buf), plain(doc))
    assert.equals("approved", doc.messages[#doc.messages].parts[1].status)
  end)

  it("is read from the buffer when the file is not read as it is (CRLF, no final newline, Latin-1)", function()
    local dir = helpers.tmpdir()
    local cases = {
      crlf = long_text("pending"):gsub("\n", "\r\n") .. "\r\n",
      noeol = long_text("pending"),
      latin1 = long_text("pending"):gsub("some prose", "caf\233 prose") .. "\n",
    }
    for name, text in pairs(cases) do
      local path = dir .. "/" .. name .. ".chat"
      helpers.write_file(path, text)
      local buf = open(path)
      assert.equals("buffer", document.live(buf).source, name)
      assert.same(fresh(buf), plain(document.get(buf)), name)
      assert.equals("pending", document.get(buf).messages[#document.get(buf).messages].parts[1].status, name)
    end
  end)
end)
