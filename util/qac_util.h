/* Small shared utilities: progress reporting, crash-safe file writes, timing. */
#ifndef QAC_UTIL_H
#define QAC_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "qac_common.h"
#include "qac_progress.h"

/* ---- progress ----
 * Long-running library functions take an optional progress callback,
 * qac_progress_fn (api/qac_progress.h); the library itself never prints. */

/* A ready-made callback for main(): prints a status line to stderr with
 * phase, done/total, items/s, elapsed time and ETA. On a terminal the line
 * is rewritten in place ('\r', at most 2/s); otherwise a line every 5 s.
 * A phase's clock starts at its first report (report done = 0, or the
 * resumed count, when the phase starts): no rate is shown before there is
 * one. The final line (done == total) is printed once and ends the line.
 * `user` must point to a qac_progress_state; its unit applies unless the
 * phase names its own. QAC_QUIET=1 silences it. */
typedef struct qac_progress_state {
    const char *unit;      /* "passages", "queries", ... */
    double start, last_print;
    char phase[64];
    uint64_t phase_start_done;
    int is_tty, quiet;
    int final_printed;     /* this phase's final line is out */
} qac_progress_state;
void qac_progress_init(qac_progress_state *s, const char *unit);
void qac_progress_stderr(void *user, const char *phase, uint64_t done, uint64_t total);
/* End a progress line left open on a terminal, before other output. */
void qac_progress_newline(void);
/* QAC_QUIET is set (and not "0"): commands print no progress or summary. */
int qac_quiet(void);
/* A command's one summary line on stderr, "qac <cmd>: <fmt...>", unless quiet. */
void qac_summary(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- XXH64 (seed 0), streaming: init, update any number of times, digest ---- */
typedef struct qac_xxh64 {
    uint64_t v[4], total;
    unsigned char mem[32];
    size_t memsize;
} qac_xxh64;
void qac_xxh64_init(qac_xxh64 *s);
void qac_xxh64_update(qac_xxh64 *s, const void *data, size_t len);
uint64_t qac_xxh64_digest(const qac_xxh64 *s);

/* ---- time ---- */
double qac_now(void); /* monotonic seconds */

/* ---- crash-safe writes ----
 * Writes go to "<path>.tmp.<pid>"; commit flushes, fsyncs, renames over
 * <path> and fsyncs the directory, so a crash leaves either the old file or
 * the complete new one. abort removes the temporary file. */
typedef struct qac_atomic_file {
    FILE *f;
    char *path, *tmp_path;
} qac_atomic_file;
qac_status qac_atomic_open(qac_atomic_file *af, const char *path);
qac_status qac_atomic_commit(qac_atomic_file *af);
void qac_atomic_abort(qac_atomic_file *af);

/* Append s and its NUL to a growable string arena (doubling from 64 KiB);
 * *off receives the offset of the copy. Offsets stay valid across growth. */
qac_status qac_arena_put(char **arena, size_t *len, size_t *cap, const char *s, size_t *off);

/* malloc, 64-byte (cache-line) aligned: rows of a SIMD buffer then never
 * straddle two lines. NULL when out of memory; free() releases it. */
void *qac_malloc_lines(size_t bytes);

/* Open an input file for reading ("rb"); a directory is refused by name
 * rather than failing at the first read. */
qac_status qac_open_input(FILE **f, const char *path);
/* qac_open_input for the text inputs read line by line and sought into
 * (corpora, queries, qrels, runs): a gzip-compressed file is refused with
 * the command that decompresses it, rather than read as garbage. */
qac_status qac_open_text_input(FILE **f, const char *path);
/* The same check alone, for commands that read the file later. */
qac_status qac_check_input(const char *path);
/* Outputs checked before the work: a file's directory exists and takes
 * files, and the path is not a directory; a directory's path is one (or
 * can be created: its nearest existing ancestor takes entries). */
qac_status qac_check_output_file(const char *path);
qac_status qac_check_output_dir(const char *path);

/* Read a whole file into a NUL-terminated malloc'd buffer. */
qac_status qac_read_file(const char *path, char **data, size_t *len);
/* mkdir -p */
qac_status qac_mkdirs(const char *path);
/* Join a directory and a file name into buf; error if it does not fit. */
qac_status qac_path_join(char *buf, size_t cap, const char *dir, const char *name);

/* Crash-test hook: with QAC_TEST_CRASH="name:n" in the environment, the n-th
 * pass through crash point `name` SIGKILLs the process, so a resume test can
 * die at a chosen moment (a shard half written, written but unlisted).
 * Without the variable it does nothing. */
void qac_crash_point(const char *name);

#endif
