/* Minimal test harness: CHECK macros that count failures, and helpers to
 * find test data. A test's main() ends with `return qac_test_summary();`,
 * which prints "N passed, M failed" and returns non-zero on any failure. */
#ifndef QAC_TESTUTIL_H
#define QAC_TESTUTIL_H

#include <stdio.h>

#include "qac_common.h"
#include "qac_safetensors.h"

extern int qac_test_passed, qac_test_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) qac_test_passed++;                                                  \
        else {                                                                        \
            qac_test_failed++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                             \
    do {                                                                 \
        if (cond) qac_test_passed++;                                     \
        else {                                                           \
            qac_test_failed++;                                           \
            fprintf(stderr, "%s:%d: CHECK failed: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                \
            fputc('\n', stderr);                                         \
        }                                                                \
    } while (0)

/* Expect QAC_OK; on failure print the status and qac_last_error(). */
#define CHECK_OK(expr)                                                                          \
    do {                                                                                        \
        qac_status st_ = (expr);                                                                \
        if (st_ == QAC_OK) qac_test_passed++;                                                   \
        else {                                                                                  \
            qac_test_failed++;                                                                  \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,                 \
                    qac_status_name(st_), qac_last_error());                                    \
        }                                                                                       \
    } while (0)

/* Expect a specific error status, and that the message mentions `needle`. */
#define CHECK_ERR(expr, code, needle) qac_test_check_err((expr), (code), (needle), #expr, __FILE__, __LINE__)
void qac_test_check_err(qac_status got, qac_status want, const char *needle, const char *expr,
                        const char *file, int line);

int qac_test_summary(void);

/* The shared test collections (cranfield/, debian-packages/): the directory
 * $QAC_SHARED_DATA names, else the one compiled in (QAC_SHARED_DATA, which
 * scripts/test.sh sets from scripts/data.sh). qac_test_data("cranfield/cranqrel")
 * is the path of one file under it; a missing file fails the test (not a skip)
 * with one line saying how to get it. The returned buffer is the caller's
 * until the next call in the thread. */
const char *qac_test_shared_data(void);
const char *qac_test_data(const char *rel);

/* The default model directory; aborts the test (failure, not skip) if absent. */
const char *qac_test_model_dir(void);
/* A fresh empty temporary directory under $TMPDIR (default /tmp), removed
 * with its contents at exit when the test passed (qac_test_summary() saw no
 * failures) or was skipped; kept, its path printed on stderr ("kept for
 * inspection: ..."), after a failure or any other exit. QAC_KEEP_TMP=1 keeps
 * it always. The returned buffer is reused by the next call in the thread. */
const char *qac_test_tmpdir(const char *tag);
/* Exit 77 (ctest: skipped) with a reason. */
void qac_test_skip(const char *why);
/* The tensor NAME of a reference file (tests/reference's fixtures); a
 * missing one fails the test: it exits 1 naming the tensor. */
const qac_st_tensor *qac_test_tensor(const qac_safetensors *st, const char *name);
/* Whether two files hold the same bytes (0 when either cannot be read). */
int qac_test_same_file(const char *a, const char *b);

#endif
