#include "testutil.h"

#include <stdlib.h>
#include <string.h>

int qac_test_passed, qac_test_failed;

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
    return qac_test_failed ? 1 : 0;
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
    return buf;
}

void qac_test_skip(const char *why) {
    printf("SKIP: %s\n", why);
    exit(77);
}
