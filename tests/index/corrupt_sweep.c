/* Test driver: flip bytes of an index.faiss one at a time and open (with
 * nothing compared against the manifest) and search each result in this one
 * process, so that a sweep of hundreds costs no process start-ups.
 * usage: corrupt_sweep SRC_DIR WORK_DIR POS...
 * WORK_DIR is a copy of SRC_DIR whose index.faiss is rewritten for each POS.
 * Prints "POS open|refused MS message" per position; a crash ends the
 * process, and the last line names the position that caused it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qac_index.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: corrupt_sweep SRC_DIR WORK_DIR POS...\n");
        return 2;
    }
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/index.faiss", argv[1]);
    snprintf(dst, sizeof dst, "%s/index.faiss", argv[2]);
    FILE *f = fopen(src, "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)n);
    if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    float q[3 * 4096], scores[3 * 5];
    int64_t rows[3 * 5];
    srand(1);
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int a = 3; a < argc; a++) {
        long pos = atol(argv[a]);
        if (pos < 0 || pos >= n) return 2;
        data[pos] ^= 0xFF;
        f = fopen(dst, "wb");
        if (!f || fwrite(data, 1, (size_t)n, f) != (size_t)n || fclose(f)) return 2;
        data[pos] ^= 0xFF;
        printf("%ld ", pos);
        fflush(stdout); /* a crash below leaves the position on the line */
        double t0 = now_ms();
        qac_index *ix = NULL;
        if (qac_index_open_verified(&ix, argv[2], QAC_DEVICE_CPU, QAC_VERIFY_NONE)) {
            printf("refused %.0f %s\n", now_ms() - t0, qac_last_error());
        } else {
            if (qac_index_dim(ix) > 4096) return 2;
            qac_status st = qac_index_search(ix, q, 3, 5, scores, rows);
            printf("%s %.0f %s\n", st ? "search-error" : "open", now_ms() - t0, st ? qac_last_error() : "");
            qac_index_free(ix);
        }
        fflush(stdout);
    }
    free(data);
    return 0;
}
