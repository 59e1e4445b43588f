--- The only module that touches LuaJIT's FFI: loads build/libflemma_core.so,
--- declares the C ABI of native/include/flemma/flemma.h and returns Lua-shaped
--- results (Lua strings, 1-based indices, `nil, err` on failure). Memory returned
--- by the library is either copied and freed at once or attached to ffi.gc.
local ffi = require("ffi")
local util = require("flemma.core.util")

local M = {}
local H = {}

--- The ABI version this binding was written for (FLEMMA_ABI_VERSION).
M.ABI_VERSION = 18

-- The declarations of flemma.h, section by section, in the header's order.
-- spec/flemma/native_spec.lua checks that they match the header.
H.cdef = {
  core = [[
int flemma_abi_version(void);
const char *flemma_version(void);
const char *flemma_last_error(void);
]],
  truncate = [[
int flemma_format_size(int64_t bytes, char *buf, size_t cap);
typedef struct flemma_truncate_result {
  const char *content;
  size_t content_len;
  int truncated;
  int truncated_by;
  int64_t total_lines;
  int64_t total_bytes;
  int64_t output_lines;
  int64_t output_bytes;
  int last_line_partial;
  int first_line_exceeds_limit;
} flemma_truncate_result;
flemma_truncate_result *flemma_truncate_head(const char *text, size_t len, int64_t max_lines, int64_t max_bytes);
flemma_truncate_result *flemma_truncate_tail(const char *text, size_t len, int64_t max_lines, int64_t max_bytes);
void flemma_truncate_result_free(flemma_truncate_result *result);
]],
  document = [[
typedef struct flemma_doc flemma_doc;
typedef struct flemma_doc_str {
  int32_t off;
  int32_t len;
} flemma_doc_str;
enum flemma_doc_kind {
  FLEMMA_DOC_FRONTMATTER = 1,
  FLEMMA_DOC_MESSAGE = 2,
  FLEMMA_DOC_TEXT = 3,
  FLEMMA_DOC_TOOL_USE = 4,
  FLEMMA_DOC_TOOL_RESULT = 5,
  FLEMMA_DOC_THINKING = 6
};
enum flemma_doc_role { FLEMMA_DOC_SYSTEM = 1, FLEMMA_DOC_USER = 2, FLEMMA_DOC_ASSISTANT = 3 };
enum flemma_doc_status {
  FLEMMA_DOC_STATUS_NONE = 0,
  FLEMMA_DOC_STATUS_APPROVED = 1,
  FLEMMA_DOC_STATUS_PENDING = 2,
  FLEMMA_DOC_STATUS_DENIED = 3,
  FLEMMA_DOC_STATUS_REJECTED = 4,
  FLEMMA_DOC_STATUS_UNKNOWN = 5
};
enum flemma_doc_flag {
  FLEMMA_DOC_F_ERROR = 1,
  FLEMMA_DOC_F_LEGACY = 2,
  FLEMMA_DOC_F_REDACTED = 4,
  FLEMMA_DOC_F_BAD_INPUT = 8,
  FLEMMA_DOC_F_UNCLOSED = 16,
  FLEMMA_DOC_F_NO_FENCE = 32
};
enum flemma_doc_severity { FLEMMA_DOC_SEV_ERROR = 1, FLEMMA_DOC_SEV_WARNING = 2, FLEMMA_DOC_SEV_INFO = 3 };
typedef struct flemma_doc_item {
  int32_t kind;
  int32_t role;
  int32_t status;
  int32_t flags;
  int32_t first_line;
  int32_t last_line;
  int32_t fence_line;
  int32_t reserved;
  flemma_doc_str key;
  flemma_doc_str label;
  flemma_doc_str body;
  flemma_doc_str note;
} flemma_doc_item;
typedef struct flemma_doc_diag {
  int32_t line;
  int32_t severity;
  flemma_doc_str message;
} flemma_doc_diag;
flemma_doc *flemma_doc_new(const char *text, size_t len);
flemma_doc *flemma_doc_new_lines(const char *const *lines, const size_t *lens, size_t count);
const char *flemma_doc_text(const flemma_doc *doc);
void flemma_doc_free(flemma_doc *doc);
int32_t flemma_doc_item_count(const flemma_doc *doc);
const flemma_doc_item *flemma_doc_items(const flemma_doc *doc);
int32_t flemma_doc_diag_count(const flemma_doc *doc);
const flemma_doc_diag *flemma_doc_diags(const flemma_doc *doc);
const char *flemma_doc_arena(const flemma_doc *doc);
]],
  idoc = [[
typedef struct flemma_idoc flemma_idoc;
typedef struct flemma_idoc_segment {
  uint64_t id;
  uint64_t version;
  int32_t first_line;
  int32_t line_count;
  int32_t item_count;
  int32_t diag_count;
  const flemma_doc_item *items;
  const flemma_doc_diag *diags;
  const char *text;
  const char *arena;
} flemma_idoc_segment;
flemma_idoc *flemma_idoc_new(void);
void flemma_idoc_free(flemma_idoc *doc);
int flemma_idoc_edit(flemma_idoc *doc, int32_t first, int32_t last, const char *const *lines, const size_t *lens, size_t count);
int flemma_idoc_edit_file(flemma_idoc *doc, int32_t first, int32_t last, const char *path, int64_t size, int32_t count, const int64_t *offsets, const char *const *lines, const size_t *lens, size_t nsamples, int *inserted);
int32_t flemma_idoc_line_count(const flemma_idoc *doc);
uint64_t flemma_idoc_version(const flemma_idoc *doc);
int32_t flemma_idoc_segment_count(const flemma_idoc *doc);
int32_t flemma_idoc_segment_at(const flemma_idoc *doc, int32_t line);
int flemma_idoc_get_segment(const flemma_idoc *doc, int32_t index, flemma_idoc_segment *out);
int flemma_idoc_changes(const flemma_idoc *doc, uint64_t since, int32_t *lo, int32_t *hi);
int flemma_idoc_reparsed(const flemma_idoc *doc, uint64_t since, int32_t *first, int32_t *last);
int32_t flemma_idoc_touched(const flemma_idoc *doc, uint64_t since, int32_t *ranges, int32_t cap);
int flemma_idoc_line_is(flemma_idoc *doc, int32_t line, const char *text, size_t len);
int32_t flemma_idoc_diagnostics(flemma_idoc *doc, const flemma_doc_diag **out);
const char *flemma_idoc_diag_arena(const flemma_idoc *doc);
int flemma_idoc_find_tool_use(const flemma_idoc *doc, const char *id, size_t len, int32_t *segment, int32_t *item);
]],
  process = [[
typedef struct flemma_procmgr flemma_procmgr;
typedef struct flemma_spawn_opts {
  const char *const *argv;
  const char *cwd;
  const char *const *env;
  const char *stdin_data;
  size_t stdin_len;
  int stdin_mode;
  int merge_output;
  int progress;
  int64_t timeout_ms;
  int64_t kill_grace_ms;
  int64_t max_lines;
  int64_t max_bytes;
  const char *decoder;
  int64_t max_stdout_bytes;
} flemma_spawn_opts;
typedef struct flemma_proc_event {
  int64_t id;
  int kind;
  int64_t bytes;
  int64_t lines;
  const char *last_line;
  size_t last_line_len;
  int exit_code;
  int signal;
  int timed_out;
  int cancelled;
  const char *out_tail;
  size_t out_tail_len;
  int out_truncated;
  int out_binary;
  int64_t out_total_bytes;
  int64_t out_total_lines;
  const char *out_path;
  const char *err_tail;
  size_t err_tail_len;
  int err_truncated;
  int err_binary;
  int64_t err_total_bytes;
  int64_t err_total_lines;
  const char *err_path;
  const struct flemma_stream_event *stream_events;
  size_t stream_event_count;
} flemma_proc_event;
flemma_procmgr *flemma_procmgr_new(void);
void flemma_procmgr_free(flemma_procmgr *mgr);
int flemma_procmgr_fd(const flemma_procmgr *mgr);
int flemma_procmgr_spawn(flemma_procmgr *mgr, const flemma_spawn_opts *opts, int64_t *id_out, int64_t *pid_out);
int flemma_procmgr_write(flemma_procmgr *mgr, int64_t id, const char *data, size_t len);
int flemma_procmgr_close_stdin(flemma_procmgr *mgr, int64_t id);
int flemma_procmgr_cancel(flemma_procmgr *mgr, int64_t id);
int flemma_procmgr_pause(flemma_procmgr *mgr, int64_t id, int paused);
int flemma_procmgr_kill_all(flemma_procmgr *mgr);
int flemma_procmgr_ack(flemma_procmgr *mgr);
flemma_proc_event *flemma_procmgr_next_event(flemma_procmgr *mgr);
void flemma_proc_event_free(flemma_proc_event *event);
int flemma_procmgr_running(const flemma_procmgr *mgr);
typedef struct flemma_search_opts {
  const char *root;
  const char *pattern;
  int files_mode;
  int fixed_strings;
  int ignore_case;
  int hidden;
  int no_ignore;
  int name_only;
  int want_type;
  int context;
  const char *include;
  int64_t max_results;
  const char *const *skip_dirs;
} flemma_search_opts;
int flemma_procmgr_search(flemma_procmgr *mgr, const flemma_search_opts *opts, int64_t *id_out);
int flemma_search_check(const char *pattern, size_t len, int fixed_strings);
]],
  fileread = [[
typedef struct flemma_freader flemma_freader;
typedef struct flemma_fread_opts {
  const char *path;
  int whole;
  int64_t first_line;
  int64_t max_lines;
  int64_t max_bytes;
  int64_t head_bytes;
  int64_t max_line_bytes;
} flemma_fread_opts;
typedef struct flemma_fread_result {
  int64_t id;
  int ok;
  int err_no;
  int file_type;
  const char *message;
  int64_t size;
  const char *head;
  size_t head_len;
  const char *text;
  size_t text_len;
  int64_t total_lines;
  int64_t shown_lines;
  int cut_by;
  int long_line;
} flemma_fread_result;
flemma_freader *flemma_freader_new(void);
void flemma_freader_free(flemma_freader *reader);
int flemma_freader_fd(const flemma_freader *reader);
int flemma_freader_start(flemma_freader *reader, const flemma_fread_opts *opts, int64_t *id_out);
int flemma_freader_cancel(flemma_freader *reader, int64_t id);
int flemma_freader_ack(flemma_freader *reader);
flemma_fread_result *flemma_freader_next(flemma_freader *reader);
void flemma_fread_result_free(flemma_fread_result *result);
int flemma_freader_running(const flemma_freader *reader);
]],
  sandbox = [[
typedef struct flemma_sandbox_policy flemma_sandbox_policy;
typedef struct flemma_strv {
  const char *const *items;
  size_t count;
} flemma_strv;
flemma_sandbox_policy *flemma_sandbox_policy_new(int network);
void flemma_sandbox_policy_free(flemma_sandbox_policy *policy);
int flemma_sandbox_policy_add_root(flemma_sandbox_policy *policy, const char *path);
int flemma_sandbox_policy_deny_read(flemma_sandbox_policy *policy, const char *path);
int flemma_sandbox_is_path_writable(const flemma_sandbox_policy *policy, const char *path, const char *cwd);
flemma_strv *flemma_sandbox_wrap(const flemma_sandbox_policy *policy, int backend, const char *const *argv, const char *cwd, const char *program);
int flemma_sandbox_write_file(const flemma_sandbox_policy *policy, const char *path, const char *cwd, const char *data, size_t len);
int flemma_sandbox_resolve(const char *path, const char *cwd, char *buf, size_t cap);
void flemma_strv_free(flemma_strv *list);
]],
  stream = [[
typedef struct flemma_stream flemma_stream;
enum flemma_stream_event_type {
  FLEMMA_STREAM_HTTP = 1,
  FLEMMA_STREAM_MESSAGE_START = 2,
  FLEMMA_STREAM_TEXT = 3,
  FLEMMA_STREAM_THINKING = 4,
  FLEMMA_STREAM_THINKING_SIGNATURE = 5,
  FLEMMA_STREAM_REDACTED_THINKING = 6,
  FLEMMA_STREAM_TOOL_USE_START = 7,
  FLEMMA_STREAM_TOOL_INPUT_DELTA = 8,
  FLEMMA_STREAM_TOOL_USE_STOP = 9,
  FLEMMA_STREAM_USAGE = 10,
  FLEMMA_STREAM_STOP = 11,
  FLEMMA_STREAM_ERROR = 12,
  FLEMMA_STREAM_END = 13,
  FLEMMA_STREAM_JSONRPC = 14,
  FLEMMA_STREAM_SEARCH_MATCH = 15,
  FLEMMA_STREAM_SEARCH_FILE = 16,
  FLEMMA_STREAM_SEARCH_SUMMARY = 17
};
enum flemma_stream_usage {
  FLEMMA_STREAM_INPUT_TOKENS = 0,
  FLEMMA_STREAM_OUTPUT_TOKENS = 1,
  FLEMMA_STREAM_CACHE_READ_TOKENS = 2,
  FLEMMA_STREAM_CACHE_WRITE_TOKENS = 3,
  FLEMMA_STREAM_THINKING_TOKENS = 4
};
typedef struct flemma_stream_event {
  int32_t type;
  int32_t index;
  int32_t status;
  uint32_t flags;
  int64_t usage[5];
  const char *a;
  size_t a_len;
  const char *b;
  size_t b_len;
} flemma_stream_event;
flemma_stream *flemma_stream_new(const char *kind);
void flemma_stream_free(flemma_stream *stream);
int flemma_stream_feed(flemma_stream *stream, const char *data, size_t len, const flemma_stream_event **events, size_t *count);
int flemma_stream_finish(flemma_stream *stream, const flemma_stream_event **events, size_t *count);
]],
  jsonrpc = [[
typedef struct flemma_jsonrpc flemma_jsonrpc;
flemma_jsonrpc *flemma_jsonrpc_new(int64_t max_line, int32_t max_depth);
void flemma_jsonrpc_free(flemma_jsonrpc *decoder);
int flemma_jsonrpc_feed(flemma_jsonrpc *decoder, const char *data, size_t len, const flemma_stream_event **events, size_t *count);
int flemma_jsonrpc_finish(flemma_jsonrpc *decoder, const flemma_stream_event **events, size_t *count);
]],
  escape = [[
typedef struct flemma_escaper flemma_escaper;
flemma_escaper *flemma_escaper_new(void);
void flemma_escaper_free(flemma_escaper *escaper);
int flemma_escaper_feed(flemma_escaper *escaper, const char *data, size_t len, int final, const char **out, size_t *out_len);
int flemma_escaper_fence(const flemma_escaper *escaper, char *ch, int64_t *len);
int flemma_escaper_reset(flemma_escaper *escaper);
int flemma_unescape(const char *text, size_t len, char *out, size_t *out_len);
]],
  isolate = [[
typedef struct flemma_isolate flemma_isolate;
int flemma_isolate_new(const char *modules_json, size_t len, const char *main, size_t memory, flemma_isolate **out);
int flemma_isolate_call(flemma_isolate *iso, const char *fn, const char *args_json, size_t len, double cpu_ms,
                        double wall_ms, const char **out, size_t *out_len);
double flemma_isolate_cpu_ms(const flemma_isolate *iso);
int64_t flemma_isolate_peak(const flemma_isolate *iso);
void flemma_isolate_free(flemma_isolate *iso);
]],
}
H.order =
  { "core", "truncate", "document", "idoc", "process", "fileread", "sandbox", "stream", "jsonrpc", "escape", "isolate" }

--- All declarations, as passed to ffi.cdef.
---@return string
function M.cdef()
  local parts = {}
  for _, name in ipairs(H.order) do
    parts[#parts + 1] = H.cdef[name]
  end
  return table.concat(parts, "\n")
end

--- The file name of the library on this system.
---@return string
function M.library_name()
  if ffi.os == "OSX" then
    return "libflemma_core.dylib"
  elseif ffi.os == "Windows" then
    return "flemma_core.dll"
  end
  return "libflemma_core.so"
end

--- The absolute path where the library is expected (never relative to the cwd).
---@return string
function M.library_path()
  if vim.g.flemma_library_path then
    return vim.g.flemma_library_path
  end
  return util.root() .. "/build/" .. M.library_name()
end

H.lib = nil
H.load_error = nil
H.declared = false

function H.build_hint()
  return "build it with `make` in " .. util.root() .. " (or `:Flemma build`)"
end

-- What usable() says when the library cannot be used: one short line (it must fit the
-- message area without a hit-enter prompt), naming the command that fixes it; the
-- full error (path, versions) is what available() returns (:checkhealth, :Flemma status).
H.short_error = nil

function H.load()
  local path = M.library_path()
  if vim.uv.fs_stat(path) == nil then
    H.short_error = "the native library is not built yet: run :Flemma build"
    return nil, ("native library not found at %s: %s"):format(path, H.build_hint())
  end
  H.short_error = "the native library cannot be used (:checkhealth flemma): run :Flemma build"
  if not H.declared then
    local ok, err = pcall(ffi.cdef, M.cdef())
    if not ok then
      return nil, "cannot declare the native ABI: " .. tostring(err)
    end
    H.declared = true
  end
  local ok, lib = pcall(ffi.load, path)
  if not ok then
    return nil,
      ("cannot load native library %s (%s): rebuild it with `make` in %s"):format(path, tostring(lib), util.root())
  end
  local version = lib.flemma_abi_version()
  if version ~= M.ABI_VERSION then
    H.short_error = "the native library is out of date: run :Flemma build"
    return nil,
      ("native library %s has ABI version %d but this plugin needs %d: rebuild it with `make` in %s"):format(
        path,
        version,
        M.ABI_VERSION,
        util.root()
      )
  end
  return lib
end

--- Returns the loaded library, loading it on first use. Raises one clear error
--- (naming the path and the build command) if it cannot be used.
---@return ffi.namespace*
function M.lib()
  if H.lib then
    return H.lib
  end
  if H.load_error then
    util.error(H.load_error)
  end
  local lib, err = H.load()
  if not lib then
    H.load_error = err
    util.error(err)
  end
  H.lib = lib
  return lib
end

--- Whether the library can be used, without raising.
---@return boolean ok
---@return string? err
function M.available()
  local ok, err = pcall(M.lib)
  if ok then
    return true
  end
  return false, util.message(err)
end

H.notified = false

--- Whether the library can be used; when it cannot, says so once per session, in one
--- line that names the fix (`:Flemma build`), instead of an error on every keystroke.
--- The line is a warning shown after the current event (an autocommand that asked
--- gets no "Error in ... Autocommands" and no hit-enter prompt).
---@return boolean
function M.usable()
  local ok, err = M.available()
  if not ok and not H.notified then
    H.notified = true
    local short = H.short_error or err
    vim.schedule(function()
      util.notify(short, vim.log.levels.WARN)
    end)
  end
  return ok
end

--- Whether the library is loaded in this Neovim (a rebuilt one is used after a restart).
---@return boolean
function M.loaded()
  return H.lib ~= nil
end

--- Forgets a failed load so that the next use tries again (after `make`).
function M.reset()
  if not H.lib then
    H.load_error = nil
    H.short_error = nil
    H.notified = false
  end
end

--- The message of the last failed native call on this thread.
---@return string
function M.last_error()
  return ffi.string(M.lib().flemma_last_error())
end

---@return integer
function M.abi_version()
  return M.lib().flemma_abi_version()
end

---@return string
function M.version()
  return ffi.string(M.lib().flemma_version())
end

-- ---------------------------------------------------------------------------
-- Truncation
-- ---------------------------------------------------------------------------

H.size_buf = nil

--- "512B", "12.1KB", "1.0MB".
---@param bytes number
---@return string
function M.format_size(bytes)
  if type(bytes) ~= "number" then
    util.error("format_size: `bytes` should be a number, not " .. type(bytes))
  end
  local lib = M.lib()
  H.size_buf = H.size_buf or ffi.new("char[32]")
  local n = lib.flemma_format_size(bytes, H.size_buf, 32)
  if n < 0 then
    util.error("format_size: " .. M.last_error())
  end
  return ffi.string(H.size_buf, math.min(n, 31))
end

-- @@TRUNCATE_LUA@@

H.truncated_by = { [0] = nil, [1] = "lines", [2] = "bytes" }

--- Truncates text to a head or tail window. Limits <= 0 mean none.
---@param which "head"|"tail"
---@param text string
---@param max_lines integer
---@param max_bytes integer
---@return flemma.truncate.Result
function M.truncate(which, text, max_lines, max_bytes)
  local lib = M.lib()
  local fn = which == "head" and lib.flemma_truncate_head or lib.flemma_truncate_tail
  local r = fn(text, #text, max_lines, max_bytes)
  if r == nil then
    util.error("truncate_" .. which .. ": " .. M.last_error())
  end
  local out = {
    content = ffi.string(r.content, r.content_len),
    truncated = r.truncated ~= 0,
    truncated_by = H.truncated_by[r.truncated_by],
    total_lines = tonumber(r.total_lines),
    total_bytes = tonumber(r.total_bytes),
    output_lines = tonumber(r.output_lines),
    output_bytes = tonumber(r.output_bytes),
    last_line_partial = r.last_line_partial ~= 0,
    first_line_exceeds_limit = r.first_line_exceeds_limit ~= 0,
  }
  lib.flemma_truncate_result_free(r)
  return out
end

-- ---------------------------------------------------------------------------
-- Document
-- ---------------------------------------------------------------------------

-- @@DOCUMENT_LUA@@

H.ROLES = { "system", "user", "assistant" }
H.STATUSES = { "approved", "pending", "denied", "rejected" }
H.SEVERITIES = { "error", "warning", "info" }

-- LuaJIT's preallocating table constructor (plain {} where it is missing).
H.table_new = (function()
  local ok, new = pcall(require, "table.new")
  return ok and new or function()
    return {}
  end
end)()

-- Pointer and length arrays for flemma_doc_new_lines, kept between calls (they
-- only grow) so that parsing a buffer again allocates nothing here. The
-- pointers are used only during the call that fills them.
H.line_cap = 0
H.line_ptrs = nil
H.line_lens = nil

function H.check_line(lines, i)
  if type(lines[i]) ~= "string" then
    util.error(("parse_document: line %d should be a string, not %s"):format(i, type(lines[i])))
  end
end

--- A new document from a list of lines (joined natively, no Lua string of the
--- whole text is built).
--- The lines as pointer and length arrays for the C side (reused between calls;
--- valid while `lines` is alive and until the next call).
function H.pack_lines(lines)
  local n = #lines
  if n > H.line_cap then
    local cap = math.max(n, 2 * H.line_cap, 64)
    H.line_ptrs = ffi.new("const char *[?]", cap)
    H.line_lens = ffi.new("size_t[?]", cap)
    H.line_cap = cap
  end
  local ptrs, lens = H.line_ptrs, H.line_lens
  for i = 1, n do
    local l = lines[i]
    if type(l) ~= "string" then
      H.check_line(lines, i)
    end
    ptrs[i - 1] = l
    lens[i - 1] = #l
  end
  return ptrs, lens, n
end

function H.doc_from_lines(lib, lines)
  local ptrs, lens, n = H.pack_lines(lines)
  return lib.flemma_doc_new_lines(ptrs, lens, n)
end

--- Parses a .chat document, given as one string (lines joined by "\n") or as
--- a list of lines (as from nvim_buf_get_lines), and returns the raw model:
--- frontmatter, messages with parts, diagnostics. Tool inputs are not decoded
--- here: `tool_uses` lists the tool use parts whose input is valid JSON, and
--- `inputs_json` is a JSON array of their inputs, in the same order
--- (`input_spans` holds the 1-based start and end of each in it); a part with
--- an invalid input has `input_error`. flemma.document decodes them.
--- `stats`, when given, receives `to_native_ms` (lines handed over and parsed
--- natively) and `to_tables_ms` (native items read into Lua tables).
---@param src string|string[]
---@param stats? table
---@return table
function M.parse_document(src, stats)
  local lib = M.lib()
  local t0 = stats and vim.uv.hrtime()
  local doc
  if type(src) == "string" then
    doc = lib.flemma_doc_new(src, #src)
  elseif type(src) == "table" then
    doc = H.doc_from_lines(lib, src)
  else
    util.error("parse_document: expected the text as a string or a list of lines, not " .. type(src))
  end
  if doc == nil then
    util.error("cannot parse the document: " .. M.last_error())
  end
  local t1 = stats and vim.uv.hrtime()
  local ok, res = pcall(H.convert_document, lib, doc, src)
  lib.flemma_doc_free(doc)
  if stats then
    stats.to_native_ms = (t1 - t0) / 1e6
    stats.to_tables_ms = (vim.uv.hrtime() - t1) / 1e6
  end
  if not ok then
    error(res, 0)
  end
  return res
end

H.inputs_buf = nil

-- `src` is unused but keeps a string source referenced while its bytes are read.
function H.convert_document(lib, doc, src) -- luacheck: ignore src
  local ffi_string, band, table_new, unescape = ffi.string, bit.band, H.table_new, M.unescape
  local base = lib.flemma_doc_text(doc)
  local arena = lib.flemma_doc_arena(doc)
  local ROLES, STATUSES = H.ROLES, H.STATUSES
  local items = lib.flemma_doc_items(doc)
  local n = lib.flemma_doc_item_count(doc)
  local messages, tool_uses, spans, inputs = {}, {}, {}, {}
  local nmsg, nuse = 0, 0
  local buf = H.inputs_buf
  if not buf then
    buf = require("string.buffer").new()
    H.inputs_buf = buf
  end
  buf:reset()
  buf:put("[")
  local frontmatter
  local parts, nparts
  for i = 0, n - 1 do
    local it = items[i]
    local kind = it.kind
    if kind == 2 then
      parts, nparts = table_new(2, 0), 0
      nmsg = nmsg + 1
      messages[nmsg] = { role = ROLES[it.role], first_line = it.first_line, last_line = it.last_line, parts = parts }
    else
      local body = it.body
      local off, len = body.off, body.len
      local text = off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
      if kind == 3 then
        nparts = nparts + 1
        parts[nparts] = { kind = "text", first_line = it.first_line, last_line = it.last_line, text = unescape(text) }
      else
        local key, label = it.key, it.label
        off, len = key.off, key.len
        local k = off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
        off, len = label.off, label.len
        local l = off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
        local flags = it.flags
        local p
        if kind == 4 then
          local fence_line = it.fence_line
          -- `input` (or `input_error`) is set later; the constructor sizes the table for it.
          p = {
            kind = "tool_use",
            first_line = it.first_line,
            last_line = it.last_line,
            id = k,
            name = l,
            fence_line = fence_line > 0 and fence_line or nil,
            input = nil,
          }
          if band(flags, 8) == 0 then
            -- The inputs are joined after the loop: appending here made the
            -- trace of this branch too complex for LuaJIT to compile.
            nuse = nuse + 1
            tool_uses[nuse] = p
            inputs[nuse] = text
          else
            local note = it.note
            off, len = note.off, note.len
            p.input_error = off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
          end
        elseif kind == 5 then
          local status, st = it.status, nil
          if status == 5 then
            local note = it.note
            off, len = note.off, note.len
            st = off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
          elseif status ~= 0 then
            st = STATUSES[status]
          end
          local fence_line = it.fence_line
          -- One constructor with every field, so the table is sized once.
          p = {
            kind = "tool_result",
            first_line = it.first_line,
            last_line = it.last_line,
            id = k,
            is_error = band(flags, 1) ~= 0,
            content = text,
            info = l,
            legacy = band(flags, 2) ~= 0,
            status = st,
            fence_line = fence_line > 0 and fence_line or nil,
          }
        elseif kind == 6 then
          p = {
            kind = "thinking",
            first_line = it.first_line,
            last_line = it.last_line,
            text = unescape(text),
            redacted = band(flags, 4) ~= 0,
          }
          if k ~= "" then
            p.signature = k
          end
          if l ~= "" then
            p.provider = l
          end
        elseif kind == 1 then
          frontmatter = { lang = k, code = text, first_line = it.first_line, last_line = it.last_line }
        end
        if p then
          nparts = nparts + 1
          parts[nparts] = p
        end
      end
    end
  end
  for j = 1, nuse do
    if j > 1 then
      buf:put(",")
    end
    spans[2 * j - 1] = #buf + 1
    buf:put(inputs[j])
    spans[2 * j] = #buf
  end
  buf:put("]")
  local inputs_json = nuse > 0 and buf:tostring() or nil
  buf:reset()
  local diagnostics = {}
  local diags = lib.flemma_doc_diags(doc)
  local SEV = H.SEVERITIES
  for i = 0, lib.flemma_doc_diag_count(doc) - 1 do
    local d = diags[i]
    local m = d.message
    local off, len = m.off, m.len
    diagnostics[i + 1] = {
      line = d.line,
      severity = SEV[d.severity],
      message = off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len),
    }
  end
  return {
    frontmatter = frontmatter,
    messages = messages,
    diagnostics = diagnostics,
    tool_uses = tool_uses,
    inputs_json = inputs_json,
    input_spans = spans,
  }
end

-- ---------------------------------------------------------------------------
-- Incremental document
-- ---------------------------------------------------------------------------

--- A new, empty incremental document (freed when collected).
---@return ffi.cdata*
function M.idoc_new()
  local lib = M.lib()
  local d = lib.flemma_idoc_new()
  if d == nil then
    util.error("cannot create a document: " .. M.last_error())
  end
  return ffi.gc(d, lib.flemma_idoc_free)
end

--- Replaces lines first .. last - 1 (0-based, end exclusive) with `lines`.
--- Raises on failure (then the document must be rebuilt).
function M.idoc_edit(d, first, last, lines)
  local lib = M.lib()
  local ptrs, lens, n = H.pack_lines(lines)
  if lib.flemma_idoc_edit(d, first, last, ptrs, lens, n) ~= 0 then
    util.error("cannot update the document: " .. M.last_error())
  end
end

--- Like idoc_edit with the lines of the file at `path`, read and split natively,
--- when the file still is what the buffer was read from: `size` bytes, `count`
--- lines each ended by "\n", and each sample { offset, line } at its byte offset.
--- Returns false, changing nothing, otherwise.
---@param samples { [1]: integer, [2]: string }[]
---@return boolean
function M.idoc_edit_file(d, first, last, path, size, count, samples)
  local lib = M.lib()
  local n = #samples
  local offsets = ffi.new("int64_t[?]", math.max(n, 1))
  local ptrs = ffi.new("const char *[?]", math.max(n, 1))
  local lens = ffi.new("size_t[?]", math.max(n, 1))
  for k, s in ipairs(samples) do
    offsets[k - 1], ptrs[k - 1], lens[k - 1] = s[1], s[2], #s[2]
  end
  local inserted = ffi.new("int[1]")
  -- `samples` keeps the sample strings alive during the call.
  if lib.flemma_idoc_edit_file(d, first, last, path, size, count, offsets, ptrs, lens, n, inserted) ~= 0 then
    util.error("cannot update the document: " .. M.last_error())
  end
  return inserted[0] == 1
end

--- Version (edits applied), line count and segment count.
function M.idoc_info(d)
  local lib = M.lib()
  return tonumber(lib.flemma_idoc_version(d)), lib.flemma_idoc_line_count(d), lib.flemma_idoc_segment_count(d)
end

H.i32a = ffi.new("int32_t[2]")

--- The segments (0-based [lo, hi)) that may have changed since version
--- `since`; `exact` is false when the document cannot tell (all of them).
---@return boolean exact, integer lo, integer hi
function M.idoc_changes(d, since)
  local r = M.lib().flemma_idoc_changes(d, since, H.i32a, H.i32a + 1)
  return r == 1, H.i32a[0], H.i32a[1]
end

--- The lines (1-based, first .. last) whose parse may differ from that of
--- version `since` (the lines above and below are parsed the same); `exact` is
--- false when the document cannot tell (then all of them).
---@return boolean exact, integer first, integer last
function M.idoc_reparsed(d, since)
  local r = M.lib().flemma_idoc_reparsed(d, since, H.i32a, H.i32a + 1)
  return r == 1, H.i32a[0], H.i32a[1]
end

H.TOUCHED_CAP = 32

--- The same lines place by place: a list of { first, last } (1-based), in
--- order and disjoint, one per place edited since `since` (at most 32: the
--- closest merged); empty when nothing changed, the whole document when
--- `since` is too old to tell.
---@return integer[][]
function M.idoc_touched(d, since)
  H.touched = H.touched or ffi.new("int32_t[?]", 2 * H.TOUCHED_CAP)
  local n = M.lib().flemma_idoc_touched(d, since, H.touched, H.TOUCHED_CAP)
  if n < 0 then
    util.error("cannot read the document: " .. M.last_error())
  end
  local out = {}
  for k = 0, n - 1 do
    out[k + 1] = { H.touched[2 * k], H.touched[2 * k + 1] }
  end
  return out
end

H.seg = nil

--- The raw segment struct of 0-based index i (valid until the next edit).
function M.idoc_segment_raw(d, i)
  H.seg = H.seg or ffi.new("flemma_idoc_segment")
  if M.lib().flemma_idoc_get_segment(d, i, H.seg) ~= 0 then
    util.error("cannot read the document: " .. M.last_error())
  end
  return H.seg
end

--- The lines of segment i (0-based) as strings, or nil when they cannot be
--- told apart (a line holding a NUL byte).
function M.idoc_segment_lines(d, i)
  local s = M.idoc_segment_raw(d, i)
  local out, n = {}, 0
  for l in (ffi.string(s.text) .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    out[n] = l
  end
  if n ~= s.line_count then
    return nil
  end
  return out
end

--- Whether line `line` (1-based) of the document is `text`, compared in the
--- document's memory: no Lua string is made for the line or its segment (lines
--- asked in order are found from where the last one was).
---@param line integer
---@param text string
---@return boolean
function M.idoc_line_is(d, line, text)
  return M.lib().flemma_idoc_line_is(d, line, text, #text) == 1
end

--- The 0-based index of the segment holding 1-based line, or nil.
function M.idoc_segment_at(d, line)
  local i = M.lib().flemma_idoc_segment_at(d, line)
  return i >= 0 and i or nil
end

--- The last tool use of this id: 0-based segment index and item index, or nil.
function M.idoc_find_tool_use(d, id)
  local r = M.lib().flemma_idoc_find_tool_use(d, id, #id, H.i32a, H.i32a + 1)
  if r == 1 then
    return H.i32a[0], H.i32a[1]
  end
  return nil
end

--- True when segment i holds a tool result that is a pending placeholder with
--- no content (a tool preview goes there); read without building tables.
function M.idoc_has_empty_pending(d, i)
  local s = M.idoc_segment_raw(d, i)
  local items = s.items
  for k = 0, s.item_count - 1 do
    local it = items[k]
    if it.kind == 5 and it.status == 2 and it.body.len == 0 then
      return true
    end
  end
  return false
end

--- The lines of segment i's message, absolute, read without building tables
--- (for motions): { role, first (the marker), last (trailing blank lines
--- excluded), content (first line of its first part, nil when empty),
--- seg_first, seg_last (the whole segment) }; `role` is nil for a segment
--- without a message (a frontmatter alone).
function M.idoc_message(d, i)
  local s = M.idoc_segment_raw(d, i)
  local off = s.first_line - 1
  local out = { seg_first = s.first_line, seg_last = off + s.line_count }
  local items, n = s.items, s.item_count
  for k = 0, math.min(n, 2) - 1 do
    local it = items[k]
    if it.kind == 2 then
      out.role, out.first, out.last = H.ROLES[it.role], it.first_line + off, it.last_line + off
      if k + 1 < n then
        out.content = items[k + 1].first_line + off
      end
      break
    end
  end
  return out
end

H.KINDS = { "frontmatter", "message", "text", "tool_use", "tool_result", "thinking" }

--- Segment i without its texts, for views that work line by line (folds,
--- highlights): { id, first_line, line_count, items }, each item { kind,
--- first, last, fence?, role?, status?, error?, unclosed?, name?, tool_id?,
--- lang? } with lines relative to the segment (1 is its first line), so the
--- outline of an unchanged segment stays right when the segment moves.
function M.idoc_outline(d, i)
  local s = M.idoc_segment_raw(d, i)
  local ffi_string, band = ffi.string, bit.band
  local base, arena = s.text, s.arena
  local function str(r)
    local off, len = r.off, r.len
    if len == 0 then
      return ""
    end
    return off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
  end
  local items, src = {}, s.items
  for k = 0, s.item_count - 1 do
    local it = src[k]
    local kind = H.KINDS[it.kind]
    if kind then
      local o = { kind = kind, first = it.first_line, last = it.last_line }
      if it.fence_line > 0 then
        o.fence = it.fence_line
      end
      if band(it.flags, 16) ~= 0 then
        o.unclosed = true
      end
      if kind == "message" then
        o.role = H.ROLES[it.role]
      elseif kind == "frontmatter" then
        o.lang = str(it.key)
      elseif kind == "tool_use" then
        o.tool_id, o.name = str(it.key), str(it.label)
      elseif kind == "tool_result" then
        o.tool_id = str(it.key)
        o.error = band(it.flags, 1) ~= 0
        if it.status == 5 then
          o.status = str(it.note)
        elseif it.status ~= 0 then
          o.status = H.STATUSES[it.status]
        end
      end
      items[#items + 1] = o
    end
  end
  return { id = tonumber(s.id), first_line = s.first_line, line_count = s.line_count, items = items }
end

--- Segment i as Lua tables, lines absolute: { id, version, first_line,
--- line_count, message?, frontmatter?, inputs } where `inputs` maps each
--- tool_use part with a valid input to its raw JSON (decoded by the caller).
function M.idoc_segment(d, i)
  local s = M.idoc_segment_raw(d, i)
  local ffi_string, band = ffi.string, bit.band
  local base, arena = s.text, s.arena
  local off0 = s.first_line - 1
  local ROLES, STATUSES = H.ROLES, H.STATUSES
  local function str(r)
    local off, len = r.off, r.len
    if len == 0 then
      return ""
    end
    return off >= 0 and ffi_string(base + off, len) or ffi_string(arena + (-off - 1), len)
  end
  local out = {
    id = tonumber(s.id),
    version = tonumber(s.version),
    first_line = s.first_line,
    line_count = s.line_count,
    inputs = {},
  }
  local parts, nparts
  local items = s.items
  for k = 0, s.item_count - 1 do
    local it = items[k]
    local kind = it.kind
    local first, last = it.first_line + off0, it.last_line + off0
    local fence_line = it.fence_line > 0 and it.fence_line + off0 or nil
    if kind == 2 then
      parts, nparts = {}, 0
      out.message = { role = ROLES[it.role], first_line = first, last_line = last, parts = parts }
    elseif kind == 1 then
      out.frontmatter = { lang = str(it.key), code = str(it.body), first_line = first, last_line = last }
    else
      local p
      if kind == 3 then
        p = { kind = "text", first_line = first, last_line = last, text = M.unescape(str(it.body)) }
      elseif kind == 4 then
        p = {
          kind = "tool_use",
          first_line = first,
          last_line = last,
          id = str(it.key),
          name = str(it.label),
          fence_line = fence_line,
        }
        if band(it.flags, 8) == 0 then
          out.inputs[p] = str(it.body)
        else
          p.input_error = str(it.note)
        end
      elseif kind == 5 then
        local status, st = it.status, nil
        if status == 5 then
          st = str(it.note)
        elseif status ~= 0 then
          st = STATUSES[status]
        end
        p = {
          kind = "tool_result",
          first_line = first,
          last_line = last,
          id = str(it.key),
          is_error = band(it.flags, 1) ~= 0,
          content = str(it.body),
          info = str(it.label),
          legacy = band(it.flags, 2) ~= 0,
          status = st,
          fence_line = fence_line,
        }
      elseif kind == 6 then
        p = {
          kind = "thinking",
          first_line = first,
          last_line = last,
          text = M.unescape(str(it.body)),
          redacted = band(it.flags, 4) ~= 0,
        }
        local k2, l2 = str(it.key), str(it.label)
        if k2 ~= "" then
          p.signature = k2
        end
        if l2 ~= "" then
          p.provider = l2
        end
      end
      if p and parts then
        nparts = nparts + 1
        parts[nparts] = p
      end
    end
  end
  return out
end

H.diagp = nil

--- Every diagnostic of the document, as parse_document reports them.
function M.idoc_diagnostics(d)
  local lib = M.lib()
  H.diagp = H.diagp or ffi.new("const flemma_doc_diag *[1]")
  local n = lib.flemma_idoc_diagnostics(d, H.diagp)
  if n < 0 then
    util.error("cannot read the diagnostics: " .. M.last_error())
  end
  local arena = lib.flemma_idoc_diag_arena(d)
  local diags, out = H.diagp[0], {}
  for i = 0, n - 1 do
    local g = diags[i]
    local m = g.message
    out[i + 1] = {
      line = g.line,
      severity = H.SEVERITIES[g.severity],
      message = m.len > 0 and ffi.string(arena + (-m.off - 1), m.len) or "",
    }
  end
  return out
end

-- ---------------------------------------------------------------------------
-- Process manager
-- ---------------------------------------------------------------------------

-- @@PROCESS_LUA@@

H.procmgr = nil

--- The process manager (created on first use, freed when collected).
---@return ffi.cdata*
function M.procmgr()
  if H.procmgr then
    return H.procmgr
  end
  local lib = M.lib()
  local mgr = lib.flemma_procmgr_new()
  if mgr == nil then
    util.error("cannot start the process manager: " .. M.last_error())
  end
  H.procmgr = ffi.gc(mgr, lib.flemma_procmgr_free)
  return H.procmgr
end

--- The descriptor that becomes readable when process events wait.
---@return integer
function M.proc_fd()
  return M.lib().flemma_procmgr_fd(M.procmgr())
end

function H.cstrings(list)
  local arr = ffi.new("const char *[?]", #list + 1)
  for i, s in ipairs(list) do
    arr[i - 1] = s
  end
  arr[#list] = nil
  return arr
end

--- Spawns a child; raises on a bad request.
---@param o { argv: string[], cwd?: string, env?: string[], stdin?: string, stdin_mode: integer, merge_output: boolean, progress: boolean, timeout_ms: integer, kill_grace_ms: integer, max_lines: integer, max_bytes: integer, decoder?: string, max_stdout_bytes?: integer }
---@return integer id
---@return integer pid
function M.proc_spawn(o)
  local lib = M.lib()
  local mgr = M.procmgr()
  local opts = ffi.new("flemma_spawn_opts")
  local argv = H.cstrings(o.argv) -- anchored until the call returns
  local env = o.env and H.cstrings(o.env) or nil
  opts.argv = argv
  opts.cwd = o.cwd
  opts.env = env
  if o.stdin then
    opts.stdin_data = o.stdin
    opts.stdin_len = #o.stdin
  end
  opts.stdin_mode = o.stdin_mode
  opts.merge_output = o.merge_output and 1 or 0
  opts.progress = o.progress and 1 or 0
  opts.timeout_ms = o.timeout_ms or 0
  opts.kill_grace_ms = o.kill_grace_ms or -1
  opts.max_lines = o.max_lines or 0
  opts.max_bytes = o.max_bytes or 0
  opts.decoder = o.decoder
  opts.max_stdout_bytes = o.max_stdout_bytes or 0
  local id = ffi.new("int64_t[1]")
  local pid = ffi.new("int64_t[1]")
  if lib.flemma_procmgr_spawn(mgr, opts, id, pid) ~= 0 then
    util.error(M.last_error())
  end
  return tonumber(id[0]), tonumber(pid[0])
end

--- Starts a native search (see flemma_procmgr_search); raises on a bad request.
---@param o { root: string, pattern?: string, files_mode?: boolean, fixed_strings?: boolean, ignore_case?: boolean, hidden?: boolean, no_ignore?: boolean, name_only?: boolean, want_type?: integer, context?: integer, include?: string, max_results?: integer, skip_dirs?: string[] }
---@return integer id
function M.proc_search(o)
  local lib = M.lib()
  local mgr = M.procmgr()
  local opts = ffi.new("flemma_search_opts")
  local skip = o.skip_dirs and H.cstrings(o.skip_dirs) or nil -- anchored until the call returns
  opts.root = o.root
  opts.pattern = o.pattern
  opts.files_mode = o.files_mode and 1 or 0
  opts.fixed_strings = o.fixed_strings and 1 or 0
  opts.ignore_case = o.ignore_case and 1 or 0
  opts.hidden = o.hidden and 1 or 0
  opts.no_ignore = o.no_ignore and 1 or 0
  opts.name_only = o.name_only and 1 or 0
  opts.want_type = o.want_type or 0
  opts.context = o.context or 0
  opts.include = o.include
  opts.max_results = o.max_results or 100
  opts.skip_dirs = skip
  local id = ffi.new("int64_t[1]")
  if lib.flemma_procmgr_search(mgr, opts, id) ~= 0 then
    util.error(M.last_error())
  end
  return tonumber(id[0])
end

--- The grep tool's pattern screen: nil when the pattern may be searched, else the
--- reason it is refused.
---@param pattern string
---@param fixed boolean
---@return string|nil
function M.search_check(pattern, fixed)
  if M.lib().flemma_search_check(pattern, #pattern, fixed and 1 or 0) ~= 0 then
    return M.last_error()
  end
  return nil
end

function M.proc_write(id, data)
  M.lib().flemma_procmgr_write(M.procmgr(), id, data, #data)
end

function M.proc_close_stdin(id)
  M.lib().flemma_procmgr_close_stdin(M.procmgr(), id)
end

function M.proc_cancel(id)
  M.lib().flemma_procmgr_cancel(M.procmgr(), id)
end

--- Stops (true) or resumes reading a child's stdout.
---@param id integer
---@param paused boolean
function M.proc_pause(id, paused)
  M.lib().flemma_procmgr_pause(M.procmgr(), id, paused and 1 or 0)
end

--- SIGKILL to every group the library started (also without a manager).
function M.proc_kill_all()
  if H.lib then
    H.lib.flemma_procmgr_kill_all(H.procmgr)
  end
end

---@return integer
function M.proc_running()
  return H.procmgr and M.lib().flemma_procmgr_running(H.procmgr) or 0
end

-- ---------------------------------------------------------------------------
-- File reader
-- ---------------------------------------------------------------------------

H.freader = nil

--- The file reader (created on first use, freed when collected).
---@return ffi.cdata*
function M.freader()
  if H.freader then
    return H.freader
  end
  local lib = M.lib()
  local r = lib.flemma_freader_new()
  if r == nil then
    util.error("cannot start the file reader: " .. M.last_error())
  end
  H.freader = ffi.gc(r, lib.flemma_freader_free)
  return H.freader
end

--- The descriptor that becomes readable when file reads finished.
---@return integer
function M.fread_fd()
  return M.lib().flemma_freader_fd(M.freader())
end

--- Starts reading a file on a native thread; nil and the error when it cannot start.
---@param o { path: string, whole?: boolean, first_line?: integer, max_lines?: integer, max_bytes: integer, head_bytes?: integer, max_line_bytes?: integer }
---@return integer|nil id
---@return string|nil err
function M.fread_start(o)
  local lib = M.lib()
  local opts = ffi.new("flemma_fread_opts")
  opts.path = o.path
  opts.whole = o.whole and 1 or 0
  opts.first_line = o.first_line or 1
  opts.max_lines = o.max_lines or 0
  opts.max_bytes = o.max_bytes
  opts.head_bytes = o.head_bytes or 0
  opts.max_line_bytes = o.max_line_bytes or 0
  local id = ffi.new("int64_t[1]")
  if lib.flemma_freader_start(M.freader(), opts, id) ~= 0 then
    return nil, M.last_error()
  end
  return tonumber(id[0])
end

--- Drops the result of a read.
---@param id integer
function M.fread_cancel(id)
  if H.freader then
    M.lib().flemma_freader_cancel(H.freader, id)
  end
end

M.FILE_TYPES = { [0] = "missing", "file", "directory", "fifo", "socket", "char", "block", "other" }

--- Resets the descriptor and returns the finished reads as Lua tables
--- ({ id, ok, err_no, type, message, size, head, text, total_lines, shown_lines,
--- cut_by, long_line }).
---@return table[]
function M.fread_results()
  if not H.freader then
    return {}
  end
  local lib = M.lib()
  lib.flemma_freader_ack(H.freader)
  local out = {}
  while true do
    local r = lib.flemma_freader_next(H.freader)
    if r == nil then
      break
    end
    out[#out + 1] = {
      id = tonumber(r.id),
      ok = r.ok ~= 0,
      err_no = r.err_no,
      type = M.FILE_TYPES[r.file_type] or "other",
      message = ffi.string(r.message),
      size = tonumber(r.size),
      head = ffi.string(r.head, r.head_len),
      text = ffi.string(r.text, r.text_len),
      total_lines = tonumber(r.total_lines),
      shown_lines = tonumber(r.shown_lines),
      cut_by = r.cut_by,
      long_line = r.long_line ~= 0,
    }
    lib.flemma_fread_result_free(r)
  end
  return out
end

--- Reads started whose result was not taken or dropped yet.
---@return integer
function M.fread_running()
  return H.freader and M.lib().flemma_freader_running(H.freader) or 0
end

function H.opt_string(ptr, len)
  if ptr == nil then
    return nil
  end
  return len and ffi.string(ptr, len) or ffi.string(ptr)
end

--- Resets the descriptor and returns the waiting events as Lua tables: all of
--- them, or once about `max_bytes` of decoded stream events were taken (their
--- text, and 64 bytes for each event), those so far and `more` = true (others
--- may wait: call again; the descriptor was reset). A batch of decoded events, or
--- a long text in one, is split where the budget ends and continued at the next
--- call (see M.stream_slice).
---@param max_bytes? integer
---@return table[] events
---@return boolean more
function M.proc_events(max_bytes)
  if not H.procmgr then
    return {}, false
  end
  local lib = M.lib()
  local mgr = H.procmgr
  lib.flemma_procmgr_ack(mgr)
  local events = {}
  local budget = max_bytes or math.huge
  while true do
    if budget <= 0 then
      return events, true
    end
    local e, i, off = H.partial_event, H.partial_i, H.partial_off
    if e ~= nil then
      H.partial_event = nil
    else
      e, i, off = lib.flemma_procmgr_next_event(mgr), 0, 0
      if e == nil then
        break
      end
    end
    local ev
    if e.kind == 3 then
      local count = tonumber(e.stream_event_count)
      local out
      if max_bytes then
        out, i, off, budget = M.stream_slice(e.stream_events, count, i, off, budget)
      else
        out, i = M.stream_events(e.stream_events, count), count
      end
      events[#events + 1] = { id = tonumber(e.id), kind = "stream", events = out }
      if i < count then
        H.partial_event, H.partial_i, H.partial_off = e, i, off
      else
        lib.flemma_proc_event_free(e)
      end
      goto continue
    end
    ev = {
      id = tonumber(e.id),
      kind = e.kind == 1 and "progress" or "exit",
      bytes = tonumber(e.bytes),
      lines = tonumber(e.lines),
      last_line = ffi.string(e.last_line, e.last_line_len),
    }
    if e.kind == 2 then
      ev.code = e.signal == 0 and e.exit_code or nil
      ev.signal = e.signal ~= 0 and e.signal or nil
      ev.timed_out = e.timed_out ~= 0
      ev.cancelled = e.cancelled ~= 0
      ev.out = {
        tail = ffi.string(e.out_tail, e.out_tail_len),
        truncated = e.out_truncated ~= 0,
        binary = e.out_binary ~= 0,
        total_bytes = tonumber(e.out_total_bytes),
        total_lines = tonumber(e.out_total_lines),
        path = H.opt_string(e.out_path),
      }
      ev.err = {
        tail = ffi.string(e.err_tail, e.err_tail_len),
        truncated = e.err_truncated ~= 0,
        binary = e.err_binary ~= 0,
        total_bytes = tonumber(e.err_total_bytes),
        total_lines = tonumber(e.err_total_lines),
        path = H.opt_string(e.err_path),
      }
    end
    lib.flemma_proc_event_free(e)
    events[#events + 1] = ev
    ::continue::
  end
  return events, false
end

-- ---------------------------------------------------------------------------
-- Sandbox
-- ---------------------------------------------------------------------------

-- @@SANDBOX_LUA@@

H.backend_ids = { bwrap = 1, ["sandbox-exec"] = 2 }

function H.policy(policy)
  local lib = M.lib()
  local p = lib.flemma_sandbox_policy_new(policy.network and 1 or 0)
  if p == nil then
    util.error("sandbox: " .. M.last_error())
  end
  p = ffi.gc(p, lib.flemma_sandbox_policy_free)
  for _, root in ipairs(policy.rw_paths or {}) do
    if lib.flemma_sandbox_policy_add_root(p, root) ~= 0 then
      util.error("sandbox: " .. M.last_error())
    end
  end
  for _, path in ipairs(policy.deny_read or {}) do
    if lib.flemma_sandbox_policy_deny_read(p, path) ~= 0 then
      util.error("sandbox: " .. M.last_error())
    end
  end
  return p
end

--- A native policy handle for `policy`, to check many paths against it.
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }
---@return ffi.cdata*
function M.sandbox_policy(policy)
  return H.policy(policy)
end

--- Whether a write to path (relative to cwd) is allowed by the policy.
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }|ffi.cdata* a table, or a handle from sandbox_policy()
---@param path string
---@param cwd string absolute
---@return boolean
function M.sandbox_is_path_writable(policy, path, cwd)
  local handle = type(policy) == "cdata" and policy or H.policy(policy)
  local rc = M.lib().flemma_sandbox_is_path_writable(handle, path, cwd)
  if rc < 0 then
    util.error(M.last_error())
  end
  return rc == 1
end

--- Writes content to path atomically, beneath the policy's roots (see
--- flemma_sandbox_write_file).
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }
---@param path string
---@param cwd string absolute
---@param content string
---@return boolean|nil ok
---@return string|nil err
function M.sandbox_write_file(policy, path, cwd, content)
  local handle = type(policy) == "cdata" and policy or H.policy(policy)
  if M.lib().flemma_sandbox_write_file(handle, path, cwd, content, #content) ~= 0 then
    return nil, M.last_error()
  end
  return true
end

--- argv wrapped for the backend ("bwrap" | "sandbox-exec").
---@param backend string
---@param policy { rw_paths: string[], network: boolean, deny_read?: string[] }
---@param argv string[]
---@param cwd string absolute
---@param program? string the backend executable
---@return string[]
function M.sandbox_wrap(backend, policy, argv, cwd, program)
  local lib = M.lib()
  local id = H.backend_ids[backend]
  if not id then
    util.error(("sandbox: unknown backend `%s`: use bwrap or sandbox-exec"):format(tostring(backend)))
  end
  local cargv = H.cstrings(argv)
  local list = lib.flemma_sandbox_wrap(H.policy(policy), id, cargv, cwd, program)
  if list == nil then
    util.error(M.last_error())
  end
  local out = {}
  for i = 0, tonumber(list.count) - 1 do
    out[#out + 1] = ffi.string(list.items[i])
  end
  lib.flemma_strv_free(list)
  return out
end

--- path made absolute against cwd, `..` folded, symlinks of the existing prefix resolved.
---@param path string
---@param cwd string absolute
---@return string
function M.sandbox_resolve(path, cwd)
  local lib = M.lib()
  -- One call into a reused buffer (approval checks resolve a path per tool call).
  H.resolve_cap = H.resolve_cap or 4096
  H.resolve_buf = H.resolve_buf or ffi.new("char[?]", H.resolve_cap)
  local n = lib.flemma_sandbox_resolve(path, cwd, H.resolve_buf, H.resolve_cap)
  if n < 0 then
    util.error(M.last_error())
  end
  if n >= H.resolve_cap then
    H.resolve_cap = n + 1
    H.resolve_buf = ffi.new("char[?]", H.resolve_cap)
    lib.flemma_sandbox_resolve(path, cwd, H.resolve_buf, H.resolve_cap)
  end
  return ffi.string(H.resolve_buf, n)
end

-- ---------------------------------------------------------------------------
-- Stream decoder
-- ---------------------------------------------------------------------------

H.STREAM_TYPES = {
  "http",
  "message_start",
  "text",
  "thinking",
  "thinking_signature",
  "redacted_thinking",
  "tool_use_start",
  "tool_input_delta",
  "tool_use_stop",
  "usage",
  "stop",
  "error",
  "end",
  "jsonrpc",
  "search_match",
  "search_file",
  "search_summary",
}
-- The status of a jsonrpc event (FLEMMA_JSONRPC_*).
H.JSONRPC_KINDS = { "request", "notification", "result", "error" }
H.USAGE_FIELDS = { "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "thinking_tokens" }

-- The events whose text may be cut (text, thinking, tool input) and their field.
H.SPLIT_FIELDS = { [3] = "text", [4] = "text", [8] = "json" }

--- Lua tables for the events at `evs` from index i (from byte `off` of its text)
--- on, until about `budget` bytes were taken (their text, and 64 bytes for each
--- event). A text, thinking or tool input longer than what is left is cut on a
--- UTF-8 boundary: its first bytes now as an event of their own, the rest later,
--- as if the provider had sent it in two deltas.
---@return table[] out
---@return integer i the next event
---@return integer off the byte of its text to go on from
---@return integer budget what is left of it
function M.stream_slice(evs, count, i, off, budget)
  local out = {}
  while i < count and budget > 0 do
    local e = evs[i]
    local field = H.SPLIT_FIELDS[e.type]
    local left = tonumber(e.a_len) - off
    if field and (left > budget or off > 0) then
      local n = left
      if left > budget then
        local bytes = ffi.cast("const uint8_t *", e.a)
        n = math.max(budget, 1)
        -- Not inside a UTF-8 sequence: back off its continuation bytes.
        while n > 1 and bit.band(bytes[off + n], 0xC0) == 0x80 do
          n = n - 1
        end
      end
      out[#out + 1] = { type = H.STREAM_TYPES[e.type], index = e.index, [field] = ffi.string(e.a + off, n) }
      budget = budget - n - 64
      if n < left then
        off = off + n
        break
      end
      i, off = i + 1, 0
    else
      out[#out + 1] = H.stream_event(e)
      budget = budget - left - tonumber(e.b_len) - 64
      i, off = i + 1, 0
    end
  end
  return out, i, off, budget
end

--- The Lua table of one flemma_stream_event (the shapes of STREAM_API.md;
--- `index` is the provider's 0-based content block index).
function H.stream_event(e)
  local ffi_string = ffi.string
  local TYPES, USAGE = H.STREAM_TYPES, H.USAGE_FIELDS
  local t = e.type
  local a = e.a ~= nil and ffi_string(e.a, e.a_len) or ""
  local ev
  if t == 3 or t == 4 then
    ev = { type = TYPES[t], index = e.index, text = a }
  elseif t == 8 then
    ev = { type = "tool_input_delta", index = e.index, json = a }
  elseif t == 7 then
    ev = { type = "tool_use_start", index = e.index, id = a, name = e.b ~= nil and ffi_string(e.b, e.b_len) or "" }
  elseif t == 9 then
    ev = { type = "tool_use_stop", index = e.index }
  elseif t == 5 then
    ev = { type = "thinking_signature", index = e.index, signature = a }
  elseif t == 6 then
    ev = { type = "redacted_thinking", index = e.index, data = a }
  elseif t == 10 then
    ev = { type = "usage" }
    local flags = e.flags
    for k = 0, 4 do
      if bit.band(flags, bit.lshift(1, k)) ~= 0 then
        ev[USAGE[k + 1]] = tonumber(e.usage[k])
      end
    end
  elseif t == 11 then
    ev = { type = "stop", reason = a }
  elseif t == 12 then
    ev = { type = "error", error_type = a, message = e.b ~= nil and ffi_string(e.b, e.b_len) or "" }
  elseif t == 13 then
    ev = { type = "end", complete = e.status == 1 }
    if bit.band(e.flags, 1) ~= 0 then
      ev.body = a
    end
  elseif t == 14 then
    ev = {
      type = "jsonrpc",
      kind = H.JSONRPC_KINDS[e.status],
      method = a,
      json = e.b ~= nil and ffi_string(e.b, e.b_len) or "",
    }
  elseif t == 15 then
    ev = {
      type = "search_match",
      path = a,
      text = e.b ~= nil and ffi_string(e.b, e.b_len) or "",
      line = e.index,
      context = e.status == 2,
      cut = bit.band(e.flags, 1) ~= 0,
    }
  elseif t == 16 then
    ev = {
      type = "search_file",
      path = a,
      mtime = tonumber(e.usage[0]),
      size = tonumber(e.usage[1]),
      directory = e.status == 2,
    }
  elseif t == 17 then
    ev = {
      type = "search_summary",
      found = tonumber(e.usage[0]),
      searched = tonumber(e.usage[1]),
      binary = tonumber(e.usage[2]),
      unreadable = tonumber(e.usage[3]),
      files = tonumber(e.usage[4]),
      error = a ~= "" and a or nil,
    }
  elseif t == 2 then
    ev = { type = "message_start", id = a, model = e.b ~= nil and ffi_string(e.b, e.b_len) or "" }
  elseif t == 1 then
    local headers = {}
    for name, value in a:gmatch("([^\n:]+): ([^\n]*)\n") do
      headers[name] = value
    end
    ev = { type = "http", status = e.status, headers = headers }
  else
    ev = { type = "unknown", code = t }
  end
  return ev
end

--- Lua tables for the flemma_stream_event structs at `evs` from index `from`
--- (default 0) up to `count` (see H.stream_event).
---@return table[]
function M.stream_events(evs, count, from)
  from = from or 0
  local out = H.table_new(count - from, 0)
  for i = from, count - 1 do
    out[i - from + 1] = H.stream_event(evs[i])
  end
  return out
end

H.Stream = {}
H.Stream.__index = H.Stream
H.stream_out = nil
H.stream_count = nil

function H.stream_call(self, fn, data)
  if not self._s then
    util.error("stream: the decoder was already finished")
  end
  local lib = M.lib()
  H.stream_out = H.stream_out or ffi.new("const flemma_stream_event *[1]")
  H.stream_count = H.stream_count or ffi.new("size_t[1]")
  local rc
  if fn == "finish" then
    rc = lib.flemma_stream_finish(self._s, H.stream_out, H.stream_count)
  else
    rc = lib.flemma_stream_feed(self._s, data, #data, H.stream_out, H.stream_count)
  end
  if rc ~= 0 then
    util.error("stream: " .. M.last_error())
  end
  return M.stream_events(H.stream_out[0], tonumber(H.stream_count[0]))
end

--- Decodes the next bytes of the response.
---@param bytes string
---@return table[] events
function H.Stream:feed(bytes)
  if type(bytes) ~= "string" then
    util.error("stream: feed() takes a string, not " .. type(bytes))
  end
  return H.stream_call(self, "feed", bytes)
end

--- Ends the stream; the events end with an `end` event. The decoder is freed.
---@return table[] events
function H.Stream:finish()
  local events = H.stream_call(self, "finish")
  local s = self._s
  self._s = nil
  M.lib().flemma_stream_free(ffi.gc(s, nil))
  return events
end

--- A decoder of a streamed response (curl --dump-header - output) for a
--- provider kind ("anthropic", "openai_chat", "openai", "vertex"); nil and a message for another.
---@param kind string
---@return table|nil decoder with :feed(bytes) and :finish()
---@return string? err
function M.stream_new(kind)
  if type(kind) ~= "string" then
    return nil, "stream: the kind should be a string, not " .. type(kind)
  end
  local lib = M.lib()
  local s = lib.flemma_stream_new(kind)
  if s == nil then
    return nil, M.last_error()
  end
  return setmetatable({ _s = ffi.gc(s, lib.flemma_stream_free) }, H.Stream)
end

H.JsonRpc = {}
H.JsonRpc.__index = H.JsonRpc

function H.jsonrpc_call(self, fn, data)
  if not self._d then
    util.error("jsonrpc: the decoder was already finished")
  end
  local lib = M.lib()
  H.stream_out = H.stream_out or ffi.new("const flemma_stream_event *[1]")
  H.stream_count = H.stream_count or ffi.new("size_t[1]")
  local rc
  if fn == "finish" then
    rc = lib.flemma_jsonrpc_finish(self._d, H.stream_out, H.stream_count)
  else
    rc = lib.flemma_jsonrpc_feed(self._d, data, #data, H.stream_out, H.stream_count)
  end
  if rc ~= 0 then
    util.error("jsonrpc: " .. M.last_error())
  end
  return M.stream_events(H.stream_out[0], tonumber(H.stream_count[0]))
end

--- Decodes bytes: events `{ type = "jsonrpc", kind, method, json }` and `{ type =
--- "error", error_type, message }` for the complete lines in them.
---@param bytes string
---@return table[]
function H.JsonRpc:feed(bytes)
  if type(bytes) ~= "string" then
    util.error("jsonrpc: feed() takes a string, not " .. type(bytes))
  end
  return H.jsonrpc_call(self, "feed", bytes)
end

--- Ends the stream (a last line without newline is decoded); the events end with
--- an `end` event. The decoder is freed.
---@return table[]
function H.JsonRpc:finish()
  local events = H.jsonrpc_call(self, "finish")
  local d = self._d
  self._d = nil
  M.lib().flemma_jsonrpc_free(ffi.gc(d, nil))
  return events
end

--- A JSON-RPC 2.0 line decoder (the MCP stdio framing; flemma_jsonrpc_new):
--- `max_line` bytes per line (nil: 16 MiB), `max_depth` levels of nesting (nil: 64).
---@param max_line? integer
---@param max_depth? integer
---@return table decoder with :feed(bytes) and :finish()
function M.jsonrpc_new(max_line, max_depth)
  local lib = M.lib()
  local d = lib.flemma_jsonrpc_new(max_line or 0, max_depth or 0)
  if d == nil then
    util.error("jsonrpc: " .. M.last_error())
  end
  return setmetatable({ _d = ffi.gc(d, lib.flemma_jsonrpc_free) }, H.JsonRpc)
end

---------------------------------------------------------------------------------------
-- Escaping of model text (:help flemma-escaping)
---------------------------------------------------------------------------------------

H.Escaper = {}
H.Escaper.__index = H.Escaper
H.esc_out = nil
H.esc_len = nil

--- Escapes the next piece of streamed text; returns what can be written now (the
--- start of a line that may still become a marker is held back). With `final`
--- the text ends here: what is held is written as a complete line.
---@param text string
---@param final? boolean
---@return string
function H.Escaper:feed(text, final)
  local lib = M.lib()
  H.esc_out = H.esc_out or ffi.new("const char *[1]")
  H.esc_len = H.esc_len or ffi.new("size_t[1]")
  if lib.flemma_escaper_feed(self._e, text, #text, final and 1 or 0, H.esc_out, H.esc_len) ~= 0 then
    util.error("escape: " .. M.last_error())
  end
  local n = tonumber(H.esc_len[0])
  return n > 0 and ffi.string(H.esc_out[0], n) or ""
end

--- The code fence the escaped text leaves open: its closing line ("```"), or nil.
---@return string|nil
function H.Escaper:open_fence()
  local ch, len = ffi.new("char[1]"), ffi.new("int64_t[1]")
  if M.lib().flemma_escaper_fence(self._e, ch, len) ~= 0 then
    util.error("escape: " .. M.last_error())
  end
  if ch[0] == 0 then
    return nil
  end
  return string.rep(string.char(ch[0]), tonumber(len[0]))
end

--- Starts afresh: no held text, no open fence.
function H.Escaper:reset()
  M.lib().flemma_escaper_reset(self._e)
end

--- A streaming escaper of model text: text fed in pieces split anywhere is written
--- as the whole would be, and never has the shape of structure.
---@return { feed: fun(self, text: string, final?: boolean): string, open_fence: fun(self): string|nil, reset: fun(self) }
function M.escaper_new()
  local lib = M.lib()
  local e = lib.flemma_escaper_new()
  if e == nil then
    util.error("escape: " .. M.last_error())
  end
  return setmetatable({ _e = ffi.gc(e, lib.flemma_escaper_free) }, H.Escaper)
end

H.unescape_buf, H.unescape_cap = nil, 0
H.unescape_len = nil

--- The text of a message as the model or user meant it: one backslash removed from
--- each line that has the shape of structure after one or more backslashes.
--- Text without a line starting with a backslash is returned as it is.
---@param text string
---@return string
function M.unescape(text)
  if text:byte(1) ~= 92 and not text:find("\n\\", 1, true) then
    return text
  end
  local n = #text
  if H.unescape_cap < n then
    H.unescape_buf, H.unescape_cap = ffi.new("char[?]", n), n
  end
  H.unescape_len = H.unescape_len or ffi.new("size_t[1]")
  if M.lib().flemma_unescape(text, n, H.unescape_buf, H.unescape_len) ~= 0 then
    util.error("unescape: " .. M.last_error())
  end
  local out = ffi.string(H.unescape_buf, tonumber(H.unescape_len[0]))
  if H.unescape_cap > 1024 * 1024 then
    H.unescape_buf, H.unescape_cap = nil, 0
  end
  return out
end

---------------------------------------------------------------------------------------
-- Isolated Lua interpreter
---------------------------------------------------------------------------------------

--- A new isolated interpreter from trusted modules ({ name = source }, as JSON text);
--- `main` returns its entry points; `memory` (bytes, nil: 64 MB) is the most it may
--- hold. Freed by the garbage collector, or at once with isolate_free. Made and
--- called only by flemma.isolate, which keeps the budgets.
---@param modules_json string
---@param main string
---@param memory? integer
---@return ffi.cdata*|nil handle
---@return string|nil err
function M.isolate_new(modules_json, main, memory)
  local lib = M.lib()
  local out = ffi.new("flemma_isolate*[1]")
  if lib.flemma_isolate_new(modules_json, #modules_json, main, memory or 0, out) ~= 0 then
    return nil, M.last_error()
  end
  return ffi.gc(out[0], lib.flemma_isolate_free)
end

--- Calls an entry point with JSON arguments (an array, as text); the decoded result:
--- { ok = true, values = {...} } or { ok = false, error = string, limit = "time"|"budget"|"memory"|nil }.
--- cpu_ms and wall_ms (nil: the interpreter's own 35 ms and 1 s) are what is left for
--- the call; stopped with less than its own limits, it reports the limit "budget".
---@param iso ffi.cdata*
---@param fn string
---@param args_json string
---@param cpu_ms? number
---@param wall_ms? number
---@return table
function M.isolate_call(iso, fn, args_json, cpu_ms, wall_ms)
  local lib = M.lib()
  local out = ffi.new("const char*[1]")
  local len = ffi.new("size_t[1]")
  if lib.flemma_isolate_call(iso, fn, args_json, #args_json, cpu_ms or 0, wall_ms or 0, out, len) ~= 0 then
    return { ok = false, error = M.last_error() }
  end
  return vim.json.decode(ffi.string(out[0], len[0]), { luanil = { object = true, array = true } })
end

--- The CPU time (ms) the interpreter's last call, or its creation, used.
---@param iso ffi.cdata*
---@return number
function M.isolate_cpu_ms(iso)
  return tonumber(M.lib().flemma_isolate_cpu_ms(iso))
end

--- The memory (bytes) the interpreter holds (the most it has held: its arena keeps
--- what it took until it is freed).
---@param iso ffi.cdata*
---@return integer
function M.isolate_peak(iso)
  return tonumber(M.lib().flemma_isolate_peak(iso))
end

--- Frees an interpreter now (its handle must not be used again).
---@param iso ffi.cdata*
function M.isolate_free(iso)
  local lib = M.lib()
  ffi.gc(iso, nil)
  lib.flemma_isolate_free(iso)
end

return M
