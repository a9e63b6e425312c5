/* Test driver for cross-encoders (tests/xenc/):
 *   xenc_tool fresh SRC OUT LABELS SEED   a reranker started from SRC
 *                                         (qac_xenc_open), written to OUT
 *   xenc_tool roundtrip SRC OUT           load a cross-encoder and save it
 *   xenc_tool fingerprint DIR             print a cross-encoder's fingerprint
 * Prints what qac_xenc_open reported ("fresh N"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_xenc.h"

static int fail(const char *what) {
    fprintf(stderr, "xenc_tool %s: %s\n", what, qac_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "fresh")) {
        qac_xenc *x = NULL;
        int fresh = 0;
        if (qac_xenc_open(&x, argv[2], atoi(argv[4]), strtoull(argv[5], NULL, 10), &fresh)) return fail("open");
        printf("fresh %d\n", fresh);
        int rc = qac_xenc_save(x, argv[3]) ? fail("save") : 0;
        qac_xenc_free(x);
        return rc;
    }
    if (argc == 4 && !strcmp(argv[1], "roundtrip")) {
        qac_xenc *x = NULL;
        if (qac_xenc_load(&x, argv[2])) return fail("load");
        int rc = qac_xenc_save(x, argv[3]) ? fail("save") : 0;
        qac_xenc_free(x);
        return rc;
    }
    if (argc == 3 && !strcmp(argv[1], "fingerprint")) {
        qac_xenc *x = NULL;
        if (qac_xenc_load(&x, argv[2])) return fail("load");
        printf("%s\n", x->fingerprint);
        qac_xenc_free(x);
        return 0;
    }
    fprintf(stderr, "usage: xenc_tool fresh SRC OUT LABELS SEED | roundtrip SRC OUT | fingerprint DIR\n");
    return 2;
}
