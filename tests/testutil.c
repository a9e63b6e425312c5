#include "testutil.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qac_util.h"

int qac_test_passed, qac_test_failed;

/* The directories qac_test_tmpdir made, removed at exit when the test passed
 * or was skipped; kept when it failed. An atexit handler cannot see the exit
 * status, so the outcome is recorded on the way out: qac_test_summary() with
 * no failed checks and qac_test_skip() count as success, any other exit (an
 * exit(1) after a perror, a failed check) as failure. A process killed by a
 * signal (abort, a ctest timeout) runs no handler and leaves its directories. */
static char **tmp_dirs;
static int n_tmp_dirs;
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t tmp_owner; /* a forked child leaves the parent's directories alone */
static int tmp_passed;  /* set by qac_test_summary() (no failures) and qac_test_skip() */

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    int rc = (type == FTW_DP || type == FTW_DNR) ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) fprintf(stderr, "warning: could not remove %s: %s\n", path, strerror(errno));
    return 0; /* go on with the rest */
}

static void tmp_cleanup(void) {
    if (getpid() != tmp_owner) return;
    const char *k = getenv("QAC_KEEP_TMP");
    int keep = !tmp_passed || qac_test_failed || (k && !strcmp(k, "1"));
    for (int i = 0; i < n_tmp_dirs; i++) {
        if (keep) {
            fprintf(stderr, "kept for inspection: %s\n", tmp_dirs[i]);
        } else {
            /* FTW_PHYS: symbolic links are removed, never followed; a failure
             * is a warning and leaves the exit status as it was */
            if (nftw(tmp_dirs[i], rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
                fprintf(stderr, "warning: could not remove %s: %s\n", tmp_dirs[i], strerror(errno));
        }
        free(tmp_dirs[i]);
    }
    free(tmp_dirs);
    tmp_dirs = NULL;
    n_tmp_dirs = 0;
}

void qac_test_check_err(qac_status got, qac_status want, const char *needle, const char *expr,
                        const char *file, int line) {
    const char *msg = qac_last_error();
    if (got == want && (!needle || strstr(msg, needle))) {
        qac_test_passed++;
        return;
    }
    qac_test_failed++;
    fprintf(stderr, "%s:%d: %s -> %s (\"%s\"), wanted %s containing \"%s\"\n", file, line, expr,
            qac_status_name(got), msg, qac_status_name(want), needle ? needle : "");
}

int qac_test_summary(void) {
    printf("%d passed, %d failed\n", qac_test_passed, qac_test_failed);
    tmp_passed = qac_test_failed == 0;
    return qac_test_failed ? 1 : 0;
}

const char *qac_test_shared_data(void) {
    const char *e = getenv("QAC_SHARED_DATA");
    return e && *e ? e : QAC_SHARED_DATA;
}

const char *qac_test_data(const char *rel) {
    static _Thread_local char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", qac_test_shared_data(), rel);
    if (access(buf, R_OK) != 0) {
        fprintf(stderr, "FAIL: missing test data %s: scripts/data.sh tests finds or fetches it "
                        "(then set QAC_SHARED_DATA to the directory it prints)\n", buf);
        exit(1);
    }
    return buf;
}

const char *qac_test_model_dir(void) {
    static char buf[4096];
    if (qac_default_model_dir(buf, sizeof buf) != QAC_OK) {
        fprintf(stderr, "FAIL: %s\n", qac_last_error());
        exit(1);
    }
    return buf;
}

const char *qac_test_tmpdir(const char *tag) {
    static _Thread_local char buf[4096];
    const char *t = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/qac-%s-XXXXXX", t && *t ? t : "/tmp", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(1);
    }
    pthread_mutex_lock(&tmp_lock);
    if (!tmp_dirs) {
        tmp_owner = getpid();
        atexit(tmp_cleanup);
    }
    char **grown = realloc(tmp_dirs, (size_t)(n_tmp_dirs + 1) * sizeof *grown);
    char *copy = strdup(buf);
    if (!grown || !copy) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    tmp_dirs = grown;
    tmp_dirs[n_tmp_dirs++] = copy;
    pthread_mutex_unlock(&tmp_lock);
    return buf;
}

void qac_test_skip(const char *why) {
    printf("SKIP: %s\n", why);
    tmp_passed = 1;
    exit(77);
}

const qac_st_tensor *qac_test_tensor(const qac_safetensors *st, const char *name) {
    const qac_st_tensor *t = qac_safetensors_find(st, name);
    if (!t) {
        fprintf(stderr, "FAIL: the fixture has no tensor %s\n", name);
        exit(1);
    }
    return t;
}

int qac_test_same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = !qac_read_file(a, &x, &nx) && !qac_read_file(b, &y, &ny) && nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}
