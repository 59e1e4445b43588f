/*
 * flemma.h - the one public C ABI of libflemma_core.
 *
 * Conventions
 *  - Every name has the `flemma_` prefix; objects are opaque handles with a
 *    `flemma_<object>_new` / `flemma_<object>_free` pair. Freeing NULL is a no-op.
 *  - Functions that can fail return an int status: FLEMMA_OK (0) or a negative
 *    FLEMMA_E_* code. The message of the last failure on the calling thread is
 *    available from flemma_last_error().
 *  - No C++ exception ever crosses this boundary.
 *  - Ownership is written beside each function. Memory returned by the library
 *    is released by its matching flemma_*_free function, never by free().
 *  - This header must stay parseable by LuaJIT's ffi.cdef once comments,
 *    preprocessor lines and FLEMMA_API are removed: lua/flemma/core/native/init.lua
 *    reads it at load time and declares it as it is (integer macros become
 *    `static const int`); the Lua binding names the enum constants, never numbers.
 */
#ifndef FLEMMA_FLEMMA_H
#define FLEMMA_FLEMMA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FLEMMA_API __declspec(dllexport)
#else
#define FLEMMA_API __attribute__((visibility("default")))
#endif

/* Bumped whenever a declaration below changes in an incompatible way. */
#define FLEMMA_ABI_VERSION 27

/* Status codes. */
#define FLEMMA_OK 0
#define FLEMMA_E_INVALID (-1)  /* bad argument */
#define FLEMMA_E_NOMEM (-2)    /* out of memory */
#define FLEMMA_E_IO (-3)       /* operating system error */
#define FLEMMA_E_STATE (-4)    /* object in the wrong state for this call */
#define FLEMMA_E_INTERNAL (-5) /* unexpected failure (a bug: please report it) */

/* ==========================================================================
 * Core
 * ========================================================================== */

/* The ABI version the library was built with (FLEMMA_ABI_VERSION). */
FLEMMA_API int flemma_abi_version(void);

/* A static, human-readable version string, e.g. "0.1.0". Owned by the library. */
FLEMMA_API const char *flemma_version(void);

/* The message of the last failed call on this thread, or "" if none.
 * Owned by the library; valid until the next failing call on the same thread. */
FLEMMA_API const char *flemma_last_error(void);

/* ==========================================================================
 * Truncation
 * ========================================================================== */

/* Writes a human-readable size ("512B", "12.1KB", "1.0MB", "2.5GB") into buf,
 * NUL-terminated, truncated to cap - 1 bytes. Returns the full length of the
 * text (excluding the NUL), like snprintf; negative on error. The caller owns buf. */
FLEMMA_API int flemma_format_size(int64_t bytes, char *buf, size_t cap);

/* Why a text was cut: truncated_by of a truncation result, cut_by of a file read. */
enum flemma_cut_by { FLEMMA_CUT_NONE = 0, FLEMMA_CUT_BY_LINES = 1, FLEMMA_CUT_BY_BYTES = 2 };

/* The result of flemma_truncate_head / flemma_truncate_tail. `content` points
 * into the result (content_len bytes, NUL-terminated) and lives until the result
 * is freed. truncated_by: 0 not truncated, 1 by the line limit, 2 by the byte limit. */
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

/* Keeps the first max_lines lines and max_bytes bytes of text (whole lines; a
 * first line over max_bytes is cut with a marker; never inside a UTF-8 code
 * point). A limit <= 0 means none. text may be NULL when len is 0.
 * The caller owns the result: free it with flemma_truncate_result_free.
 * NULL on failure (see flemma_last_error). */
FLEMMA_API flemma_truncate_result *flemma_truncate_head(const char *text, size_t len,
                                                        int64_t max_lines, int64_t max_bytes);

/* Keeps the last max_lines lines and max_bytes bytes of text; a last line over
 * max_bytes keeps its end, after a marker. Ownership as flemma_truncate_head. */
FLEMMA_API flemma_truncate_result *flemma_truncate_tail(const char *text, size_t len,
                                                        int64_t max_lines, int64_t max_bytes);

/* Frees a result of flemma_truncate_head/tail. NULL is a no-op. */
FLEMMA_API void flemma_truncate_result_free(flemma_truncate_result *result);

/* ==========================================================================
 * Document
 * ========================================================================== */

/* A parsed .chat document: flat arrays of items and diagnostics that point
 * into the parsed text. Lines are 1-based; byte offsets are 0-based. */
typedef struct flemma_doc flemma_doc;

/* A byte range. off >= 0: offset into flemma_doc_text() (for flemma_doc_new,
 * the text given to it); off < 0: offset (-off - 1) into flemma_doc_arena(). */
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

/* Status of a tool result: NONE is a real result; UNKNOWN is a placeholder
 * whose status word is not one of the four (the raw word is in `note`). */
enum flemma_doc_status {
  FLEMMA_DOC_STATUS_NONE = 0,
  FLEMMA_DOC_STATUS_APPROVED = 1,
  FLEMMA_DOC_STATUS_PENDING = 2,
  FLEMMA_DOC_STATUS_DENIED = 3,
  FLEMMA_DOC_STATUS_REJECTED = 4,
  FLEMMA_DOC_STATUS_UNKNOWN = 5
};

enum flemma_doc_flag {
  FLEMMA_DOC_F_ERROR = 1,     /* tool result: ` (error)` on the header */
  FLEMMA_DOC_F_LEGACY = 2,    /* tool result: `(status)` header suffix */
  FLEMMA_DOC_F_REDACTED = 4,  /* thinking: `redacted` attribute */
  FLEMMA_DOC_F_BAD_INPUT = 8, /* tool use: input is not a valid JSON object */
  FLEMMA_DOC_F_UNCLOSED = 16, /* the block's fence or tag is never closed */
  FLEMMA_DOC_F_NO_FENCE = 32  /* a tool header without its fenced block */
};

enum flemma_doc_severity {
  FLEMMA_DOC_SEV_ERROR = 1,
  FLEMMA_DOC_SEV_WARNING = 2,
  FLEMMA_DOC_SEV_INFO = 3
};

/* One item. Items come in document order: the frontmatter (if any), then
 * each message followed by its parts. Fields per kind:
 *   frontmatter: key = lang, body = code
 *   message:     role
 *   text:        body = text (blank lines around it trimmed)
 *   tool_use:    key = id, label = name, body = input JSON, note = input error
 *   tool_result: key = id, label = fence info string, body = content,
 *                note = raw status word, status, fence_line
 *   thinking:    key = signature, label = provider, body = text */
typedef struct flemma_doc_item {
  int32_t kind;       /* enum flemma_doc_kind */
  int32_t role;       /* enum flemma_doc_role (messages) */
  int32_t status;     /* enum flemma_doc_status (tool results) */
  int32_t flags;      /* enum flemma_doc_flag bits */
  int32_t first_line; /* 1-based, inclusive */
  int32_t last_line;  /* 1-based, inclusive */
  int32_t fence_line; /* opening fence of a tool block, 0 if none */
  int32_t reserved;
  flemma_doc_str key;
  flemma_doc_str label;
  flemma_doc_str body;
  flemma_doc_str note;
} flemma_doc_item;

typedef struct flemma_doc_diag {
  int32_t line;     /* 1-based */
  int32_t severity; /* enum flemma_doc_severity */
  flemma_doc_str message;
} flemma_doc_diag;

/* Parses len bytes of text (lines separated by "\n"; a "\r" before "\n" is
 * ignored). Never fails on content; NULL only on bad arguments (text NULL with
 * len > 0, len >= 2 GiB) or out of memory. The caller frees the result with
 * flemma_doc_free and must keep `text` alive while it reads ranges of it. */
FLEMMA_API flemma_doc *flemma_doc_new(const char *text, size_t len);

/* Parses `count` lines joined with "\n", as flemma_doc_new would parse them:
 * line i is lens[i] bytes at lines[i], without its "\n" (lines[i] may be NULL
 * when lens[i] is 0; both arrays may be NULL when count is 0). The document
 * keeps its own joined copy, so the lines need to live only for the call. NULL
 * on bad arguments, a joined size of 1 GiB or more, or out of memory. The
 * caller frees the result with flemma_doc_free. */
FLEMMA_API flemma_doc *flemma_doc_new_lines(const char *const *lines, const size_t *lens,
                                            size_t count);

/* The text that ranges with off >= 0 index: the caller's text for
 * flemma_doc_new, the document's joined copy for flemma_doc_new_lines. Owned
 * as that text is; NULL for NULL. */
FLEMMA_API const char *flemma_doc_text(const flemma_doc *doc);

/* Frees a document; NULL is a no-op. */
FLEMMA_API void flemma_doc_free(flemma_doc *doc);

/* The items and their count. Owned by the document, valid until it is freed. */
FLEMMA_API int32_t flemma_doc_item_count(const flemma_doc *doc);
FLEMMA_API const flemma_doc_item *flemma_doc_items(const flemma_doc *doc);

/* The diagnostics (ordered by line) and their count. Owned by the document. */
FLEMMA_API int32_t flemma_doc_diag_count(const flemma_doc *doc);
FLEMMA_API const flemma_doc_diag *flemma_doc_diags(const flemma_doc *doc);

/* The document's own bytes (messages, normalized text), for ranges with off < 0.
 * Owned by the document. */
FLEMMA_API const char *flemma_doc_arena(const flemma_doc *doc);

/* ==========================================================================
 * Incremental document
 * ========================================================================== */

/* The parse of a buffer kept up to date from line edits: an edit re-parses
 * only the messages it touches (and, when it opens or closes a fence, those
 * up to where the scan is the same as before). The document is cut into
 * segments, one per message (the first also holds the frontmatter and what
 * comes before the first role marker); a segment that an edit did not touch
 * keeps its id, version and items, only its first_line moves. At every
 * moment the items and diagnostics are those flemma_doc_new_lines would
 * produce for the current lines. */
typedef struct flemma_idoc flemma_idoc;

/* One segment. Item and diagnostic lines are relative to the segment (1 is
 * its first line: add first_line - 1). Ranges with off >= 0 index `text` (its
 * lines joined with "\n"), off < 0 index `arena`; an empty range may point
 * anywhere. All pointers are owned by the document and valid until its next
 * edit or its free. */
typedef struct flemma_idoc_segment {
  uint64_t id;        /* the same as long as the segment is unchanged */
  uint64_t version;   /* the document version (edit count) that parsed it */
  int32_t first_line; /* 1-based */
  int32_t line_count;
  int32_t item_count;
  int32_t diag_count; /* its parse diagnostics (no tool id checks) */
  const flemma_doc_item *items;
  const flemma_doc_diag *diags;
  const char *text;
  const char *arena;
} flemma_idoc_segment;

/* A new document with no lines, owned by the caller (free it with
 * flemma_idoc_free); NULL on out of memory. */
FLEMMA_API flemma_idoc *flemma_idoc_new(void);

/* Frees a document; NULL is a no-op. */
FLEMMA_API void flemma_idoc_free(flemma_idoc *doc);

/* Replaces lines first .. last - 1 (0-based, end exclusive: on_lines's
 * firstline and lastline) with `count` lines (line i is lens[i] bytes at
 * lines[i], without its "\n"; copied, the caller keeps ownership). first ==
 * last inserts. FLEMMA_E_INVALID (nothing changed) when the range is not
 * within the document; after FLEMMA_E_NOMEM or FLEMMA_E_INTERNAL the document
 * may be inconsistent: free it and build a new one. */
FLEMMA_API int flemma_idoc_edit(flemma_idoc *doc, int32_t first, int32_t last,
                                const char *const *lines, const size_t *lens, size_t count);

/* Like flemma_idoc_edit with the lines of the file at `path`, read and split
 * here (no string per line on the caller's side), when the file still is what
 * the caller read into its buffer: exactly `size` bytes of `count` lines, each
 * ended by "\n", and line k of the `nsamples` samples (lens[k] bytes at
 * lines[k]) at byte offsets[k], followed by "\n". *inserted is 1 when the
 * edit was made, 0 when the file differs or cannot be read (nothing changed). */
FLEMMA_API int flemma_idoc_edit_file(flemma_idoc *doc, int32_t first, int32_t last,
                                     const char *path, int64_t size, int32_t count,
                                     const int64_t *offsets, const char *const *lines,
                                     const size_t *lens, size_t nsamples, int *inserted);

/* The number of lines; 0 for NULL. */
FLEMMA_API int32_t flemma_idoc_line_count(const flemma_idoc *doc);

/* The version: the number of edits applied; 0 for NULL. */
FLEMMA_API uint64_t flemma_idoc_version(const flemma_idoc *doc);

/* The number of segments; 0 for NULL. */
FLEMMA_API int32_t flemma_idoc_segment_count(const flemma_idoc *doc);

/* The 0-based index of the segment holding 1-based line `line`; -1 when the
 * line is not in the document. */
FLEMMA_API int32_t flemma_idoc_segment_at(const flemma_idoc *doc, int32_t line);

/* Fills *out with segment `index` (0-based). */
FLEMMA_API int flemma_idoc_get_segment(const flemma_idoc *doc, int32_t index,
                                       flemma_idoc_segment *out);

/* The segments that may have changed since version `since`: indices *lo ..
 * *hi - 1 of the current list. The segments before *lo are those of that
 * version; the ones from *hi on are its last ones, their lines shifted by the
 * change in line count. Returns 1, or 0 when `since` is too old to tell (then
 * *lo = 0 and *hi = the segment count); negative on bad arguments. */
FLEMMA_API int flemma_idoc_changes(const flemma_idoc *doc, uint64_t since, int32_t *lo,
                                   int32_t *hi);

/* The lines *first .. *last (1-based) whose parse may differ from that of
 * version `since`: the lines above and below them have the same items in both
 * versions (those below shifted by the change in line count). An edit is parsed
 * again from a checkpoint or a message start a few lines above its first
 * changed line to where the scan matches the old one again, or the end of its
 * message. When nothing changed, *first = line count + 1 and *last = line
 * count. Returns 1, or 0 when `since` is too old to tell (then the whole
 * document); negative on bad arguments. */
FLEMMA_API int flemma_idoc_reparsed(const flemma_idoc *doc, uint64_t since, int32_t *first,
                                    int32_t *last);

/* The same lines, place by place: up to `cap` disjoint ranges, in order, as
 * pairs ranges[2k] .. ranges[2k + 1] (1-based first and last line), one per
 * place edited since version `since` (the closest places merged, with the
 * lines between them, when there are more than `cap`). Edits far apart give
 * ranges far apart. Returns the number of ranges (0 when nothing changed; one
 * range over the whole document when `since` is too old to tell); negative on
 * bad arguments. ABI 9. */
FLEMMA_API int32_t flemma_idoc_touched(const flemma_idoc *doc, uint64_t since, int32_t *ranges,
                                       int32_t cap);

/* Whether line `line` (1-based) of the document is the `len` bytes at `text`:
 * 1 when it is, 0 when not (or there is no such line); negative on bad
 * arguments. The document remembers where the last line asked was: lines
 * asked in order cost what they hold, not what comes before them in their
 * segment. ABI 10. */
FLEMMA_API int flemma_idoc_line_is(flemma_idoc *doc, int32_t line, const char *text, size_t len);

/* All diagnostics, ordered by line, with absolute lines, as flemma_doc_diags
 * reports them for the same lines (including the tool id checks); message
 * ranges index flemma_idoc_diag_arena(). Sets *out to an array owned by the
 * document (valid until its next edit) and returns the count; negative on
 * failure. */
FLEMMA_API int32_t flemma_idoc_diagnostics(flemma_idoc *doc, const flemma_doc_diag **out);

/* The bytes of the diagnostic messages. Owned by the document, valid until
 * its next edit. */
FLEMMA_API const char *flemma_idoc_diag_arena(const flemma_idoc *doc);

/* Finds the last tool use whose id is the `len` bytes at `id`: 1 with its
 * segment and item indices (0-based) set, 0 if there is none, negative on
 * bad arguments. */
FLEMMA_API int flemma_idoc_find_tool_use(const flemma_idoc *doc, const char *id, size_t len,
                                         int32_t *segment, int32_t *item);

/* ==========================================================================
 * Process manager
 * ========================================================================== */

/* The process manager: children run in their own session and process group,
 * watched by a native worker thread. The worker never calls back: it queues
 * events and makes flemma_procmgr_fd() readable; the host then calls
 * flemma_procmgr_ack() and takes events with flemma_procmgr_next_event() on its
 * own thread. Every child gets a non-interactive environment (CI=true,
 * DEBIAN_FRONTEND=noninteractive, PAGER=cat, GIT_TERMINAL_PROMPT=0, ...) and
 * never inherits a variable that looks like a secret: a name holding KEY,
 * TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, SERVICE_ACCOUNT, PRIVATE, AUTH
 * (not the word AUTHOR), COOKIE or SESSION, or ending in _PAT (any case), or
 * a value holding a PEM private key or JSON with "private_key"; `env` entries
 * are "NAME=value", or a bare "NAME" that takes NAME out. */
typedef struct flemma_procmgr flemma_procmgr;

/* A spawn request. Strings are copied; the caller keeps ownership.
 * stdin_mode: 0 stdin is /dev/null; 1 stdin_data is written, then EOF;
 * 2 stdin_data is written and stdin stays open for flemma_procmgr_write.
 * Limits <= 0 take the defaults (2000 lines, 51200 bytes, grace 2000 ms);
 * timeout_ms <= 0 means no timeout. With a decoder (merge_output must be 0),
 * the worker decodes stdout as flemma_stream_feed would and queues the events
 * as kind 3 events; stdout is then counted (out_total_bytes), not kept. */
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
  const char *decoder; /* NULL, a stream kind (see flemma_stream_new) or "jsonrpc"
                          (flemma_jsonrpc_new's defaults), or a JSON object: a search
                          output decoder, or {"kind": "fetch", "format": "markdown" |
                          "text" | "raw", "max": bytes, "head_lines"?, "head_bytes"?,
                          "save"?: path} for a page fetched with `curl --dump-header -`
                          (see "HTML conversion" below; ABI 23) */
  /* With a stream decoder (not "jsonrpc"): past this many stdout bytes the stream fails (an ERROR
   * event of type "response_too_large", then END incomplete) and the child is
   * stopped as by flemma_procmgr_cancel; 0: no limit. */
  int64_t max_stdout_bytes;
  /* Bytes of each stream's spill file (the whole output once over the limits):
   * past this many the file ends with one line saying the rest was not kept,
   * so a long-lived child (an MCP server's stderr) cannot fill the disk; the
   * tail window in memory still follows the output. 0: no limit. ABI 20. */
  int64_t max_file_bytes;
  /* The directory the spill files are made in (copied; the caller keeps
   * ownership), so that their owner can remove them with it (an MCP server's
   * stderr, when the server stops). NULL or "": $TMPDIR, else /tmp. ABI 21. */
  const char *spill_dir;
  /* > 0 (Linux, where commands run under the reaper): the child, and every
   * thread and process it starts, runs on every CPU it may use but the one the
   * calling thread runs on at this call, until flemma_procmgr_release_cpu or
   * this many milliseconds: a starting server (Node starts several threads)
   * then never takes the caller's CPU. No change with a single CPU. 0: none.
   * ABI 26. */
  int64_t spare_cpu_ms;
} flemma_spawn_opts;

/* The kind of a flemma_proc_event. */
enum flemma_proc_event_kind {
  FLEMMA_PROC_PROGRESS = 1,
  FLEMMA_PROC_EXIT = 2,
  FLEMMA_PROC_STREAM = 3,
  FLEMMA_PROC_STARTED = 4
};

/* An event. kind 1: progress (bytes, lines, last_line); kind 2: exit (every
 * field); kind 3: decoded stream events of stdout (stream_events; consecutive
 * text, thinking and tool input deltas of one block are merged), all of them
 * queued before the exit event, the last batch ending with an END event.
 * exit_code is -1 and signal non-zero when a signal ended the child.
 * out_* describe the merged output (or stdout), err_* stderr when not merged;
 * *_tail is the kept tail, *_path the temp file with the whole stream (NULL
 * until the limits were passed). kind 4 (flemma_procmgr_spawn_async): the
 * child started, its pid in `pid`, before any other event of it. An exit event
 * of a spawn_async child that could not be started has `error` (one line, e.g.
 * a missing program or working directory; NULL otherwise) and nothing else.
 * All pointers live until the event is freed. ABI 24: pid, error. */
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
  int64_t pid;
  const char *error;
  size_t error_len;
} flemma_proc_event;

/* Starts a manager and its worker thread. The caller owns it: free it with
 * flemma_procmgr_free. NULL on failure. */
FLEMMA_API flemma_procmgr *flemma_procmgr_new(void);

/* Kills every child of the manager, stops its worker and frees it, with any
 * events not taken. NULL is a no-op. */
FLEMMA_API void flemma_procmgr_free(flemma_procmgr *mgr);

/* The descriptor to poll for readability. Owned by the manager. */
FLEMMA_API int flemma_procmgr_fd(const flemma_procmgr *mgr);

/* Spawns a child at once (errors such as a missing program or working
 * directory are reported here). Writes the request id and the pid. */
FLEMMA_API int flemma_procmgr_spawn(flemma_procmgr *mgr, const flemma_spawn_opts *opts,
                                    int64_t *id_out, int64_t *pid_out);

/* Spawns a child on the manager's worker thread, so that the caller never
 * waits for the spawn (a few milliseconds on a loaded machine): writes the
 * request id at once. Options that cannot be used are an error here; the
 * working directory, the program and the spawn are the worker's: their
 * failure is an exit event with `error` set. Otherwise a FLEMMA_PROC_STARTED
 * event carries the pid, then the events of flemma_procmgr_spawn. Writes,
 * close_stdin, pause and cancel may be called at once with the id: they apply
 * in order once it started; the timeout counts from the spawn. A cancel (or
 * kill_all) that comes before the spawn means the child is never started
 * (exit event, cancelled); one that comes while it is being started kills it
 * once it is. Borrows opts for the call (copied). ABI 24. */
FLEMMA_API int flemma_procmgr_spawn_async(flemma_procmgr *mgr, const flemma_spawn_opts *opts,
                                          int64_t *id_out);

/* Queues bytes for the child's stdin (stdin_mode 2); copied. Unknown or
 * finished ids are ignored. */
FLEMMA_API int flemma_procmgr_write(flemma_procmgr *mgr, int64_t id, const char *data, size_t len);

/* Closes the child's stdin after the queued bytes. */
FLEMMA_API int flemma_procmgr_close_stdin(flemma_procmgr *mgr, int64_t id);

/* SIGTERM to the child's whole group, SIGKILL after the grace period; the exit
 * event reports cancelled. */
FLEMMA_API int flemma_procmgr_cancel(flemma_procmgr *mgr, int64_t id);

/* A child spawned with spare_cpu_ms gets the caller's CPU back now (all its
 * threads and processes). Unknown, finished or not sparing: a no-op. ABI 26. */
FLEMMA_API int flemma_procmgr_release_cpu(flemma_procmgr *mgr, int64_t id);

/* paused != 0 stops reading the child's stdout, 0 reads it again: a host that
 * cannot keep up with a decoded stream holds the child back (it blocks on the
 * full pipe) instead of queueing its output. The worker also stops reading by
 * itself while about 1 MiB of a child's decoded events wait to be taken. An
 * unknown or finished id is a no-op. */
FLEMMA_API int flemma_procmgr_pause(flemma_procmgr *mgr, int64_t id, int paused);

/* SIGKILL, at once, to every group the library started that may be alive. */
FLEMMA_API int flemma_procmgr_kill_all(flemma_procmgr *mgr);

/* Resets the descriptor; call before taking the events. */
FLEMMA_API int flemma_procmgr_ack(flemma_procmgr *mgr);

/* The next event, or NULL when none is waiting. The caller owns it: free it
 * with flemma_proc_event_free. */
FLEMMA_API flemma_proc_event *flemma_procmgr_next_event(flemma_procmgr *mgr);

/* Frees an event. NULL is a no-op. */
FLEMMA_API void flemma_proc_event_free(flemma_proc_event *event);

/* Children of the manager whose exit event was not queued yet (and searches
 * still running). */
FLEMMA_API int flemma_procmgr_running(const flemma_procmgr *mgr);

/* A search (the grep, glob and find tools without rg or fd): a walk of `root`
 * that honours .gitignore and .ignore (unless no_ignore), skips hidden entries
 * (unless hidden; .git always), binary files (a NUL byte in the first 64 KiB),
 * symbolic links (never followed) and the directories named in skip_dirs
 * (NULL-terminated, may be NULL). grep (files_mode 0): lines matching `pattern`
 * (the regex syntax of native/src/search.hpp, or a literal with fixed_strings),
 * in files whose name (or relative path, if it holds a '/') matches `include`
 * (NULL: all), with `context` lines around (at most 10); at most max_results
 * matches are reported, all are counted. files_mode 1: entries whose relative
 * path (name_only: name) matches the glob `pattern` (NULL: all), want_type 0
 * files, 1 directories, 2 both; the newest max_results, newest first.
 * Strings are copied; the caller keeps ownership. */
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

/* Starts a search on a native worker thread of its own, which never calls
 * back: its results are kind 3 events (stream events SEARCH_MATCH,
 * SEARCH_FILE, then one SEARCH_SUMMARY) and an exit event (exit_code 0, or 2
 * when it failed; cancelled after flemma_procmgr_cancel), taken as those of a
 * child. A pattern that cannot be used is FLEMMA_E_INVALID here. Writes the id.
 * ABI 15. */
FLEMMA_API int flemma_procmgr_search(flemma_procmgr *mgr, const flemma_search_opts *opts,
                                     int64_t *id_out);

/* Redacts a file Flemma kept (a process's whole output, an MCP result's text)
 * on a native worker thread of its own, which never calls back, as
 * util.redact would the whole text: each of the n values (values[i], lens[i]
 * bytes; give them longest first, as util.redact orders them; empty ones are
 * ignored) becomes "[redacted]", each over the text the previous one left,
 * then the values of the headers x-api-key, authorization and x-goog-api-key
 * (any case; `name: value` to "\r", "\n" or a quote, and curl's config form
 * `header = "name: value"` to the quote or the end of the line). A value split
 * between two reads is removed all the same. The text is written into a new
 * private file (path + ".redacted", O_EXCL, mode 0600) renamed over `path`.
 * Completion is an exit event (kind 2) with the id written to id_out:
 * exit_code 0 when `path` holds the redacted text; 2 when it failed, `error`
 * saying why, and `path` and the temporary file are removed (fail closed);
 * cancelled (removed too) after flemma_procmgr_cancel or kill_all. Borrows
 * path, values and lens for the call: they are copied, and the library wipes
 * its copies of the values when the job ends. ABI 27. */
FLEMMA_API int flemma_procmgr_redact_file(flemma_procmgr *mgr, const char *path,
                                          const char *const *values, const size_t *lens, size_t n,
                                          int64_t *id_out);

/* The pattern screen of the grep tool: FLEMMA_OK when the `len` bytes at
 * pattern may be searched, else FLEMMA_E_INVALID with the reason in
 * flemma_last_error(): empty, longer than 1000 bytes, outside the accepted
 * syntax, or an unbounded quantifier nested in a repeated group or beside
 * another over the same characters. Borrows pattern. ABI 15. */
FLEMMA_API int flemma_search_check(const char *pattern, size_t len, int fixed_strings);

/* ==========================================================================
 * File reader
 * ========================================================================== */

/* Reads files on native threads, one per read, so that the caller's thread never
 * blocks on a file (a FIFO, a device, a file behind a lease or on a hung mount).
 * A read thread never calls back: it queues its result and makes
 * flemma_freader_fd() readable; the host calls flemma_freader_ack() and takes
 * results with flemma_freader_next() on its own thread. Only regular files are
 * read: the path is opened with O_NONBLOCK and refused unless fstat says it is a
 * regular file. The host keeps its own deadline and cancels a read that passed
 * it; a read's thread ends when the system call it waits in returns. ABI 13. */
typedef struct flemma_freader flemma_freader;

/* file_type values. */
#define FLEMMA_FILE_MISSING 0
#define FLEMMA_FILE_REGULAR 1
#define FLEMMA_FILE_DIRECTORY 2
#define FLEMMA_FILE_FIFO 3
#define FLEMMA_FILE_SOCKET 4
#define FLEMMA_FILE_CHAR_DEVICE 5
#define FLEMMA_FILE_BLOCK_DEVICE 6
#define FLEMMA_FILE_OTHER 7

/* whole != 0: the file's bytes, at most max_bytes (cut_by 2 when there are more).
 * whole == 0: the lines from first_line (1-based), at most max_lines of them
 * (<= 0: no limit) and max_bytes of text (kept lines joined by "\n"; a first line
 * alone over max_bytes is cut, not inside a UTF-8 sequence, and long_line set);
 * every line is counted. head_bytes > 0: the first bytes are returned as well.
 * max_line_bytes > 0 (window mode, ABI 17): of a longer line only the first
 * max_line_bytes + 4 bytes are kept and counted against max_bytes (the caller
 * cuts it at a UTF-8 boundary and says so), so long lines do not use up the
 * window. */
typedef struct flemma_fread_opts {
  const char *path;
  int whole;
  int64_t first_line;
  int64_t max_lines;
  int64_t max_bytes;
  int64_t head_bytes;
  int64_t max_line_bytes;
} flemma_fread_opts;

/* ok: 1 when read; else message says why (err_no the errno, 0 for a file that is
 * not regular: file_type says what it is). cut_by: 0 none, 1 by max_lines, 2 by
 * max_bytes. Pointers live until the result is freed. */
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

/* Creates a reader. The caller owns it: flemma_freader_free (results of reads
 * still running are dropped when they end). NULL on failure. */
FLEMMA_API flemma_freader *flemma_freader_new(void);

/* Frees a reader. NULL is a no-op. */
FLEMMA_API void flemma_freader_free(flemma_freader *reader);

/* The descriptor that becomes readable when results wait. */
FLEMMA_API int flemma_freader_fd(const flemma_freader *reader);

/* Starts a read (opts and its path are borrowed for the call); writes its id.
 * FLEMMA_E_STATE when 64 reads are still waiting for their files. */
FLEMMA_API int flemma_freader_start(flemma_freader *reader, const flemma_fread_opts *opts,
                                    int64_t *id_out);

/* Drops the result of a read (now, or when it comes). */
FLEMMA_API int flemma_freader_cancel(flemma_freader *reader, int64_t id);

/* Resets the descriptor; call before taking results. */
FLEMMA_API int flemma_freader_ack(flemma_freader *reader);

/* The next result, or NULL when none waits. The caller owns it: free it with
 * flemma_fread_result_free. */
FLEMMA_API flemma_fread_result *flemma_freader_next(flemma_freader *reader);

/* Frees a result. NULL is a no-op. */
FLEMMA_API void flemma_fread_result_free(flemma_fread_result *result);

/* Reads started whose result was not taken or dropped yet. */
FLEMMA_API int flemma_freader_running(const flemma_freader *reader);

/* ==========================================================================
 * Sandbox
 * ========================================================================== */

/* A sandbox policy: writable roots, paths hidden from commands and whether
 * the network is allowed.
 * Backends: 1 bubblewrap (Linux), 2 sandbox-exec (macOS). */
typedef struct flemma_sandbox_policy flemma_sandbox_policy;

/* The backend argument of flemma_sandbox_wrap. */
enum flemma_sandbox_backend { FLEMMA_SANDBOX_BWRAP = 1, FLEMMA_SANDBOX_EXEC = 2 };

/* A list of strings owned by the library: items[0 .. count-1], each
 * NUL-terminated. Free it with flemma_strv_free. */
typedef struct flemma_strv {
  const char *const *items;
  size_t count;
} flemma_strv;

/* A policy with no writable root. The caller owns it: flemma_sandbox_policy_free.
 * NULL on failure. */
FLEMMA_API flemma_sandbox_policy *flemma_sandbox_policy_new(int network);

/* Frees a policy. NULL is a no-op. */
FLEMMA_API void flemma_sandbox_policy_free(flemma_sandbox_policy *policy);

/* Adds a writable root (copied). A root that does not exist is kept but
 * skipped when the policy is applied. */
FLEMMA_API int flemma_sandbox_policy_add_root(flemma_sandbox_policy *policy, const char *path);

/* Adds a path to hide from sandboxed commands (copied): a directory shows
 * empty, a file reads as empty; symlinks are followed, a missing path is
 * skipped when the policy is applied, and a writable root below a hidden
 * directory stays visible. A hidden path is never writable. */
FLEMMA_API int flemma_sandbox_policy_deny_read(flemma_sandbox_policy *policy, const char *path);

/* 1 if a write to path (relative to cwd) is allowed by the policy, 0 if not,
 * negative on error. Resolves `..` and the symlinks of the longest existing prefix. */
FLEMMA_API int flemma_sandbox_is_path_writable(const flemma_sandbox_policy *policy,
                                               const char *path, const char *cwd);

/* The command argv (NULL-terminated, borrowed) wrapped for the backend, run
 * from cwd; program names the backend executable (NULL: "bwrap" or
 * "sandbox-exec"). The caller owns the result: flemma_strv_free. NULL on failure. */
FLEMMA_API flemma_strv *flemma_sandbox_wrap(const flemma_sandbox_policy *policy, int backend,
                                            const char *const *argv, const char *cwd,
                                            const char *program);

/* Writes len bytes of data to path (relative to cwd) atomically, beneath the
 * policy's writable roots even while another process swaps symlinks in the
 * path: checked like flemma_sandbox_is_path_writable, the parent opened from the
 * root's directory with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) (or an
 * O_NOFOLLOW walk; missing directories are created), a temporary file in it
 * renamed over the name. An existing file keeps its permission bits, a new one
 * gets 0644. 0, or negative with the reason in flemma_last_error(). Borrows
 * everything for the duration of the call. */
FLEMMA_API int flemma_sandbox_write_file(const flemma_sandbox_policy *policy, const char *path,
                                         const char *cwd, const char *data, size_t len);

/* Writes path resolved against cwd into buf (like snprintf: returns the full
 * length). The caller owns buf. */
FLEMMA_API int flemma_sandbox_resolve(const char *path, const char *cwd, char *buf, size_t cap);

/* Frees a string list. NULL is a no-op. */
FLEMMA_API void flemma_strv_free(flemma_strv *list);

/* ==========================================================================
 * Stream decoder
 * ========================================================================== */

/* A decoder of a streamed HTTP response as `curl --dump-header -` prints it:
 * header blocks (1xx skipped), then a server-sent-events body whose events are
 * decoded for one provider kind into normalized events; another body is kept
 * (up to 64 KiB) and reported at the end. Bytes may be fed in pieces split
 * anywhere; the events do not depend on where. Input that does not start with
 * "HTTP/" is taken as an SSE body without headers. */
typedef struct flemma_stream flemma_stream;

enum flemma_stream_event_type {
  FLEMMA_STREAM_HTTP = 1, /* status; a = headers, "name: value\n" each, names lower-cased */
  FLEMMA_STREAM_MESSAGE_START = 2,      /* a = message id, b = model */
  FLEMMA_STREAM_TEXT = 3,               /* index; a = text delta */
  FLEMMA_STREAM_THINKING = 4,           /* index; a = thinking delta */
  FLEMMA_STREAM_THINKING_SIGNATURE = 5, /* index; a = signature */
  FLEMMA_STREAM_REDACTED_THINKING = 6,  /* index; a = data */
  FLEMMA_STREAM_TOOL_USE_START = 7,     /* index; a = tool use id, b = tool name */
  FLEMMA_STREAM_TOOL_INPUT_DELTA = 8,   /* index; a = partial input JSON text */
  FLEMMA_STREAM_TOOL_USE_STOP = 9,      /* index */
  FLEMMA_STREAM_USAGE = 10,             /* flags: bit i set when usage[i] is given */
  FLEMMA_STREAM_STOP = 11,              /* a = stop reason */
  FLEMMA_STREAM_ERROR = 12,             /* a = error type, b = message */
  FLEMMA_STREAM_END = 13,               /* status: 1 complete, 0 not; flags bit 0: a = kept body */
  FLEMMA_STREAM_JSONRPC = 14, /* status: FLEMMA_JSONRPC_*; a = method; b = the message (JSON-RPC
                                 decoder), its long strings taken out; usage[0] = the number of
                                 BLOB events that follow it (ABI 25) */
  FLEMMA_STREAM_SEARCH_MATCH = 15, /* a = path, b = line, index = line number, status 1 match / 2
                                      context, flags bit 0: the line was cut */
  FLEMMA_STREAM_SEARCH_FILE =
      16, /* a = path, usage[0] = mtime (s), usage[1] = size, status 1 file / 2 dir */
  FLEMMA_STREAM_SEARCH_SUMMARY = 17, /* usage: found, searched, binary, unreadable, files with a
                                       match; a = an error ("" none) */
  FLEMMA_STREAM_SSE_ID = 18, /* a = the id of the SSE event just dispatched (kind "mcp"). ABI 22. */
  FLEMMA_STREAM_PAGE = 19,   /* a fetched page (spawn's decoder "fetch"): a = its text (the head
                                when cut), b = the file holding the whole text ("" none), status
                                1 when cut; usage: total lines, total bytes, kept lines, kept
                                bytes. ABI 23 */
  FLEMMA_STREAM_BLOB = 20 /* a string value taken out of the JSONRPC event before it: a = its path
                             in that message, b = the string (see the JSON-RPC decoder). ABI 25 */
};

/* The status and flag values of the events that have them (see above). */
enum flemma_stream_event_values {
  FLEMMA_STREAM_END_COMPLETE = 1,     /* END status: the stream ended complete */
  FLEMMA_STREAM_END_F_BODY = 1,       /* END flags bit: a = the kept body */
  FLEMMA_STREAM_SEARCH_CONTEXT = 2,   /* SEARCH_MATCH status of a context line (1: a match) */
  FLEMMA_STREAM_SEARCH_F_CUT = 1,     /* SEARCH_MATCH flags bit: the line was cut */
  FLEMMA_STREAM_SEARCH_DIRECTORY = 2, /* SEARCH_FILE status of a directory (1: a file) */
  FLEMMA_STREAM_PAGE_CUT = 1          /* PAGE status: the text is the head of a longer one */
};

/* Indices into flemma_stream_event.usage. */
enum flemma_stream_usage {
  FLEMMA_STREAM_INPUT_TOKENS = 0,
  FLEMMA_STREAM_OUTPUT_TOKENS = 1,
  FLEMMA_STREAM_CACHE_READ_TOKENS = 2,
  FLEMMA_STREAM_CACHE_WRITE_TOKENS = 3,
  FLEMMA_STREAM_THINKING_TOKENS = 4
};

/* One event. index is the content block (-1 when none). Strings are valid
 * UTF-8, a_len / b_len bytes (not NUL-terminated; NULL when empty). */
typedef struct flemma_stream_event {
  int32_t type; /* enum flemma_stream_event_type */
  int32_t index;
  int32_t status;
  uint32_t flags;
  int64_t usage[5];
  const char *a;
  size_t a_len;
  const char *b;
  size_t b_len;
} flemma_stream_event;

/* A decoder for kind "anthropic", "openai_chat", "openai" (Responses API) or
 * "vertex" (Gemini streamGenerateContent), or "mcp": a response of MCP's
 * Streamable HTTP transport, whose SSE events' data, or a whole body of a 2xx
 * response that is no SSE stream (at most 16 MiB, else an ERROR
 * "limit_exceeded"), are JSON-RPC 2.0 messages, decoded as the JSON-RPC decoder
 * below does (JSONRPC and BLOB events, ERROR "invalid_json", "too_deep", "not_jsonrpc"),
 * each SSE event with an id followed by an SSE_ID event (ABI 22). The caller owns
 * it: free it with flemma_stream_free. NULL for an unknown kind (see
 * flemma_last_error). */
FLEMMA_API flemma_stream *flemma_stream_new(const char *kind);

/* Frees a decoder and its events. NULL is a no-op. */
FLEMMA_API void flemma_stream_free(flemma_stream *stream);

/* Decodes len bytes (copied as needed; data may be NULL when len is 0) and
 * writes the events decoded from them: *events points to *count events owned by
 * the decoder, valid until the next call on it. */
FLEMMA_API int flemma_stream_feed(flemma_stream *stream, const char *data, size_t len,
                                  const flemma_stream_event **events, size_t *count);

/* Ends the stream; the events (as for feed) always end with an END event.
 * Feeding or finishing again afterwards is FLEMMA_E_STATE. */
FLEMMA_API int flemma_stream_finish(flemma_stream *stream, const flemma_stream_event **events,
                                    size_t *count);

/* ==========================================================================
 * JSON-RPC 2.0 line decoder (MCP stdio transport)
 * ========================================================================== */

/* Frames newline-delimited JSON-RPC 2.0 messages and parses them, with bounded
 * line length and nesting depth. Events are flemma_stream_events:
 * FLEMMA_STREAM_JSONRPC (status: the message kind below; a: the method of a
 * request or notification; b: the whole message as compact JSON, valid UTF-8,
 * except for its long strings; usage[0]: how many of them), each followed by
 * one FLEMMA_STREAM_BLOB per long string (ABI 25): every string value (not an
 * object's key) of more than 64 KiB is taken out of the message, whose JSON
 * holds "" in its place, and handed on as it is (a: its path in the message, a
 * compact JSON array of object keys and 0-based array indices from the
 * message's top, e.g. ["result","content",0,"text"], made by the decoder's walk
 * and never read from the message's text; b: the string's bytes, unescaped,
 * valid UTF-8), in the order of the message's JSON; put back at their paths
 * they give the message whole. The blobs of a message come right after its
 * JSONRPC event, before any other event, but a caller taking events in
 * batches (the process manager's proc_events) may get them in a later batch.
 * As every event, they are owned by the decoder (or the process manager's
 * event), valid until its next call (flemma_proc_event_free).
 * FLEMMA_STREAM_ERROR for a line that is dropped (a: "line_too_long",
 * "invalid_json", "too_deep" or "not_jsonrpc"; b: one line saying why), and
 * FLEMMA_STREAM_END from finish (status 1 unless a line was being dropped).
 * A JSON array (a batch) gives one event per member. The process manager runs
 * the same decoder on a worker thread for spawn's decoder "jsonrpc". ABI 14. */
typedef struct flemma_jsonrpc flemma_jsonrpc;

#define FLEMMA_JSONRPC_REQUEST 1
#define FLEMMA_JSONRPC_NOTIFICATION 2
#define FLEMMA_JSONRPC_RESULT 3
#define FLEMMA_JSONRPC_ERROR 4

/* max_line: bytes of one line (<= 0: 16 MiB); max_depth: nesting of arrays and
 * objects (<= 0: 64). The caller owns the decoder: free it with
 * flemma_jsonrpc_free. NULL on failure. */
FLEMMA_API flemma_jsonrpc *flemma_jsonrpc_new(int64_t max_line, int32_t max_depth);

/* Frees a decoder and its events. NULL is a no-op. */
FLEMMA_API void flemma_jsonrpc_free(flemma_jsonrpc *decoder);

/* Decodes len bytes (data may be NULL when len is 0): *events points to *count
 * events owned by the decoder, valid until its next call. */
FLEMMA_API int flemma_jsonrpc_feed(flemma_jsonrpc *decoder, const char *data, size_t len,
                                   const flemma_stream_event **events, size_t *count);

/* Ends the stream (a last line without newline is decoded), as for feed; the
 * events end with an END event. Feeding or finishing again is FLEMMA_E_STATE. */
FLEMMA_API int flemma_jsonrpc_finish(flemma_jsonrpc *decoder, const flemma_stream_event **events,
                                     size_t *count);

/* ==========================================================================
 * Escaping of model text (:help flemma-escaping)
 * ========================================================================== */

/* A line whose start has the shape of .chat structure after zero or more
 * backslashes (@You:, @Assistant:, @System:, **Tool Use:**, **Tool Result:**,
 * <thinking, </thinking, or up to 3 spaces, a fence of 3+ ` or ~, blanks and
 * flemma:) is written with one more backslash at its start; unescaping removes
 * exactly one from lines of that shape. Unescape(escape(t)) == t for every t.
 * A streaming escaper gives the same output however its input is split, and
 * follows the code fences of what it wrote, as the parser pairs them. */
typedef struct flemma_escaper flemma_escaper;

/* A new escaper at the start of a line. The caller owns it: free it with
 * flemma_escaper_free. */
FLEMMA_API flemma_escaper *flemma_escaper_new(void);

/* Frees an escaper and its output. NULL is a no-op. */
FLEMMA_API void flemma_escaper_free(flemma_escaper *escaper);

/* Escapes len bytes (data may be NULL when len is 0). The start of a line that
 * may still become structure is held back until it is decided; with final != 0
 * the text ends here: the held start is written as a complete line and the
 * next byte starts a new line. *out points to *out_len bytes owned by the
 * escaper, valid until the next call on it. */
FLEMMA_API int flemma_escaper_feed(flemma_escaper *escaper, const char *data, size_t len, int final,
                                   const char **out, size_t *out_len);

/* The code fence the text written so far leaves open: *ch is '`' or '~' (0
 * when none is open), *len its length. A line of *len times *ch closes it. */
FLEMMA_API int flemma_escaper_fence(const flemma_escaper *escaper, char *ch, int64_t *len);

/* Forgets the fence state and any held text: the escaper starts afresh. */
FLEMMA_API int flemma_escaper_reset(flemma_escaper *escaper);

/* Writes the unescaped form of text to out, which the caller owns and which
 * must hold len bytes (unescaping never grows a text); *out_len is set to the
 * bytes written. */
FLEMMA_API int flemma_unescape(const char *text, size_t len, char *out, size_t *out_len);

/* ==========================================================================
 * Isolated Lua interpreter (frontmatter)
 * ========================================================================== */

/* A Lua 5.1 interpreter of its own, for code from untrusted files: its own memory
 * (at most 64 MB, 512 KB for one string or table, 131072 live objects), a
 * deadline for each call (35 ms of CPU time, at most 1 s of wall-clock time), kept by
 * the VM on every instruction (inside error handlers too), a library of bounded
 * functions, and nothing shared with the caller's Lua: only JSON crosses. */
typedef struct flemma_isolate flemma_isolate;

/* Creates an interpreter from trusted modules: modules_json is a JSON object
 * { "name": "Lua source", ... }; the module `main` is required first and returns
 * the table of entry points. memory: the bytes it may hold (0: 64 MB; less only).
 * Creation runs under the same limits as a call.
 * The caller owns *out: free it with flemma_isolate_free. */
FLEMMA_API int flemma_isolate_new(const char *modules_json, size_t len, const char *main,
                                  size_t memory, flemma_isolate **out);

/* Calls entry point fn with the arguments in args_json (a JSON array; null reads as
 * nil). cpu_ms and wall_ms > 0 are what the caller has left for this call (CPU time
 * and wall-clock time; <= 0: the interpreter's own 35 ms and 1 s); a call stopped
 * with less than its own limits reports the limit "budget". *out receives
 * {"ok":true,"values":[...]} or {"ok":false,"error":"...",
 * "limit":"time"|"budget"|"memory"|null}: len bytes owned by the handle, valid until
 * the next call or flemma_isolate_free. */
FLEMMA_API int flemma_isolate_call(flemma_isolate *iso, const char *fn, const char *args_json,
                                   size_t len, double cpu_ms, double wall_ms, const char **out,
                                   size_t *out_len);

/* The CPU time (ms) the last call, or the creation, used. */
FLEMMA_API double flemma_isolate_cpu_ms(const flemma_isolate *iso);

/* The memory (bytes) the interpreter holds: the most it has held so far (its arena
 * keeps what it took until it is freed). */
FLEMMA_API int64_t flemma_isolate_peak(const flemma_isolate *iso);

/* Frees the interpreter and all its memory at once. NULL is a no-op. */
FLEMMA_API void flemma_isolate_free(flemma_isolate *iso);

/* ==========================================================================
 * HTML conversion (the `fetch` tool)
 * ========================================================================== */

/* The formats of flemma_html_convert. */
enum flemma_html_format { FLEMMA_HTML_MARKDOWN = 0, FLEMMA_HTML_TEXT = 1 };

/* Converts len bytes of HTML (any bytes; data may be NULL when len is 0) into
 * Markdown (headings, paragraphs, links, lists, code and pre blocks, emphasis,
 * simple tables; script, style and the like dropped; character references
 * decoded) or plain text. One pass over the input: linear in len, nesting kept to
 * 32 levels, at most 8 * len + 64 KiB bytes out (a note ends a text the cap cut);
 * the result is valid UTF-8. The caller owns *out (*out_len bytes, NUL-terminated):
 * free it with flemma_html_free. A large page is better converted off the main
 * thread: spawn's decoder {"kind": "fetch"} runs this on the process manager's
 * worker thread and queues the result as one FLEMMA_STREAM_PAGE event (after the
 * FLEMMA_STREAM_HTTP event of the answer's status and headers, before END): with
 * "head_lines" or "head_bytes" > 0 only the head of a longer text (whole lines, as
 * flemma_truncate_head keeps them), the whole text written by the worker to a new
 * file "save" (mode 0600, never an existing file). A body over "max" bytes is an
 * ERROR "response_too_large" and stops the child; a binary page an ERROR
 * "not_text"; a 3xx answer has no PAGE event. ABI 23. */
FLEMMA_API int flemma_html_convert(const char *html, size_t len, int format, char **out,
                                   size_t *out_len);

/* Frees a text returned by flemma_html_convert. NULL is a no-op. */
FLEMMA_API void flemma_html_free(char *text);

/* ==========================================================================
 * Shell words (per-command approval rules such as "bash(git *)")
 * ========================================================================== */

/* A command line split into its simple commands and their words, as bash splits it
 * before expansion: `a && b`, `;`, `|`, `||`, `&`, newlines, subshells, `$(...)`,
 * backticks and process substitutions each give commands of their own; a
 * redirection's operator and target are words at the end of their command;
 * assignments before the command word are dropped. A line it cannot fully follow
 * (unbalanced quotes, an expansion in a command word, eval/exec/source or a shell
 * as the command, keywords, arithmetic, assignments to PATH, LD_* and the like, an
 * expansion in an unquoted here-document, more than 64 KiB) is not ok and has no
 * commands. */
typedef struct flemma_shellwords flemma_shellwords;

/* Parses len bytes of cmd. Returns a new result the caller owns (free it with
 * flemma_shellwords_free), or NULL on failure (flemma_last_error). */
FLEMMA_API flemma_shellwords *flemma_shellwords_parse(const char *cmd, size_t len);

/* Frees a result. NULL is a no-op. */
FLEMMA_API void flemma_shellwords_free(flemma_shellwords *words);

/* 1 when the whole line was understood, else 0 with *reason (owned by the result,
 * NUL-terminated, valid until it is freed) saying why. */
FLEMMA_API int flemma_shellwords_ok(const flemma_shellwords *words, const char **reason);

/* The number of words of all commands together. */
FLEMMA_API size_t flemma_shellwords_count(const flemma_shellwords *words);

/* Word i (0-based): its value after quote removal (*data owned by the result, *len
 * bytes), the 0-based index of its command, and whether it holds an expansion,
 * substitution or glob (*dynamic = 1: its run-time value is not known). */
FLEMMA_API int flemma_shellwords_word(const flemma_shellwords *words, size_t i, const char **data,
                                      size_t *len, int32_t *command, int32_t *dynamic);

#ifdef __cplusplus
}
#endif

#endif /* FLEMMA_FLEMMA_H */
