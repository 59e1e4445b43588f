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
 *  - This header must stay parseable by LuaJIT's ffi.cdef once the preprocessor
 *    lines are removed: lua/flemma/native.lua declares the same functions, and a
 *    spec checks that the two agree.
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
#define FLEMMA_ABI_VERSION 1

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
FLEMMA_API flemma_truncate_result *flemma_truncate_head(const char *text, size_t len, int64_t max_lines, int64_t max_bytes);

/* Keeps the last max_lines lines and max_bytes bytes of text; a last line over
 * max_bytes keeps its end, after a marker. Ownership as flemma_truncate_head. */
FLEMMA_API flemma_truncate_result *flemma_truncate_tail(const char *text, size_t len, int64_t max_lines, int64_t max_bytes);

/* Frees a result of flemma_truncate_head/tail. NULL is a no-op. */
FLEMMA_API void flemma_truncate_result_free(flemma_truncate_result *result);

/* ==========================================================================
 * Document
 * ========================================================================== */

/* @@DOCUMENT@@ */

/* ==========================================================================
 * Process manager
 * ========================================================================== */

/* @@PROCESS@@ */

/* ==========================================================================
 * Sandbox
 * ========================================================================== */

/* @@SANDBOX@@ */

#ifdef __cplusplus
}
#endif

#endif /* FLEMMA_FLEMMA_H */
