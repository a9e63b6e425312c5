/* Standalone driver for LLVMFuzzerTestOneInput (ctest, no libFuzzer):
 * runs every seed file in a directory, then deterministic mutations of
 * them (bit flips, byte inserts and deletes, splices, truncations,
 * interesting values) until a time or iteration budget runs out.
 * usage: fuzz_driver SEED_DIR [seconds] [max_iterations] */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qac_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seed {
    uint8_t *data;
    size_t len;
} seed;

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next(void) { /* xorshift64*: reproducible runs */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

static size_t mutate(uint8_t *buf, size_t len, size_t cap, const seed *seeds, int n_seeds) {
    static const char *tokens[] = {"{", "}", "[", "]", "\"", ":", ",", "null", "true", "-1", "1e309", "\\u0000",
                                   "\\ud800", "\xc3", "\xf4\x90\x80\x80", "\"k\":", "\"mode\":\"hybrid\"",
                                   "\"queries\":", "\"texts\":", "\"input\":", "\"encoding\":\"base64\"",
                                   "99999999999999999999", "\"return_text\":true"};
    int ops = 1 + (int)(next() % 4);
    for (int o = 0; o < ops; o++) {
        switch (next() % 6) {
        case 0: /* flip a bit */
            if (len) buf[next() % len] ^= (uint8_t)(1u << (next() % 8));
            break;
        case 1: /* delete a range */
            if (len) {
                size_t at = next() % len, n = 1 + next() % 8;
                if (at + n > len) n = len - at;
                memmove(buf + at, buf + at + n, len - at - n);
                len -= n;
            }
            break;
        case 2: { /* insert a token */
            const char *t = tokens[next() % (sizeof tokens / sizeof *tokens)];
            size_t tl = strlen(t), at = len ? next() % (len + 1) : 0;
            if (len + tl <= cap) {
                memmove(buf + at + tl, buf + at, len - at);
                memcpy(buf + at, t, tl);
                len += tl;
            }
            break;
        }
        case 3: /* truncate */
            if (len) len = next() % len;
            break;
        case 4: { /* splice the tail of another seed */
            const seed *s = &seeds[next() % (uint64_t)n_seeds];
            if (s->len) {
                size_t from = next() % s->len, at = len ? next() % len : 0, n = s->len - from;
                if (at + n > cap) n = cap - at;
                memcpy(buf + at, s->data + from, n);
                len = at + n;
            }
            break;
        }
        default: /* random byte */
            if (len) buf[next() % len] = (uint8_t)next();
            break;
        }
    }
    return len;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SEED_DIR [seconds] [max_iterations]\n", argv[0]);
        return 2;
    }
    double seconds = argc > 2 ? atof(argv[2]) : 10;
    long max_iter = argc > 3 ? atol(argv[3]) : 200000;
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    seed seeds[256];
    int n_seeds = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n_seeds < 256) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        char *data;
        size_t len;
        if (qac_read_file(path, &data, &len)) continue;
        seeds[n_seeds++] = (seed){(uint8_t *)data, len};
    }
    closedir(d);
    if (!n_seeds) {
        fprintf(stderr, "no seeds in %s\n", argv[1]);
        return 1;
    }
    for (int i = 0; i < n_seeds; i++) LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].len);
    enum { CAP = 8192 };
    uint8_t *buf = malloc(CAP);
    double t0 = qac_now();
    long it = 0;
    for (; it < max_iter && qac_now() - t0 < seconds; it++) {
        const seed *s = &seeds[it % n_seeds];
        size_t len = s->len < CAP ? s->len : CAP;
        memcpy(buf, s->data, len);
        len = mutate(buf, len, CAP, seeds, n_seeds);
        LLVMFuzzerTestOneInput(buf, len);
    }
    printf("fuzz_driver: %d seeds, %ld mutated inputs in %.1f s, no crash\n", n_seeds, it, qac_now() - t0);
    free(buf);
    for (int i = 0; i < n_seeds; i++) free(seeds[i].data);
    return 0;
}
