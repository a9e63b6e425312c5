/* Standalone driver for the libFuzzer entry point, so every build exercises
 * it: runs the seed corpus (files in argv[1] plus safetensors files written
 * here with qac's own writer) and then N deterministic random mutations
 * (argv[2], default 20000). A crash or an abort() from an invariant fails. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qac_safetensors.h"
#include "qac_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seed {
    unsigned char *data;
    size_t len;
} seed;

static seed seeds[64];
static int n_seeds;

static void add_seed(char *data, size_t len) {
    if (n_seeds < 64) seeds[n_seeds++] = (seed){(unsigned char *)data, len};
    else free(data);
}

static void add_file(const char *path) {
    char *d;
    size_t len;
    if (qac_read_file(path, &d, &len) == QAC_OK) add_seed(d, len);
}

/* Safetensors seeds: F32/F16/BF16/I64 tensors with metadata, and an empty
 * file (a target whose seeds are all in its corpus builds without them). */
#ifdef QAC_FUZZ_CORPUS_ONLY
static void add_generated(void) {}
#else
static void add_generated(void) {
    const char *t = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/qac-fuzz-seed-%ld.safetensors", t && *t ? t : "/tmp", (long)getpid());
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i * 0.37f - 2.0f;
    int64_t ids[4] = {0, 1, 2, 3};
    qac_st_write_tensor w[5] = {
        {"embeddings.word_embeddings.weight", QAC_ST_F32, 2, {3, 4}, v, NULL},
        {"bert.encoder.layer.0.attention.self.query.bias", QAC_ST_F16, 1, {12}, v, NULL},
        {"pooler.dense.weight", QAC_ST_BF16, 2, {2, 2}, v, NULL},
        {"embeddings.position_ids", QAC_ST_I64, 2, {1, 4}, NULL, ids},
        {"empty", QAC_ST_F32, 2, {0, 4}, v, NULL},
    };
    const char *md[] = {"format", "pt", NULL};
    for (int k = 1; k <= 5; k += 4) {
        if (qac_safetensors_write(path, w, k, md) == QAC_OK) add_file(path);
        remove(path);
    }
}
#endif

static uint64_t rng = 0x243f6a8885a308d3ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char tokens[] = "{}[]\":,0123456789-+.eE \\ntrufalsF16BF32I64";

static size_t mutate(unsigned char *buf, size_t len, size_t cap) {
    int rounds = 1 + (int)(next() % 4);
    for (int r = 0; r < rounds && len; r++) {
        size_t pos = next() % len;
        switch (next() % 8) {
        case 0: buf[pos] ^= (unsigned char)(1u << (next() % 8)); break;
        case 1: buf[pos] = (unsigned char)next(); break;
        case 2: buf[pos] = (unsigned char)tokens[next() % (sizeof tokens - 1)]; break;
        case 3: len = pos; break; /* truncate */
        case 4:                   /* delete a run */
        {
            size_t n = 1 + next() % 16;
            if (pos + n > len) n = len - pos;
            memmove(buf + pos, buf + pos + n, len - pos - n);
            len -= n;
            break;
        }
        case 5: /* insert a token run */
        {
            size_t n = 1 + next() % 8;
            if (len + n > cap) break;
            memmove(buf + pos + n, buf + pos, len - pos);
            for (size_t i = 0; i < n; i++) buf[pos + i] = (unsigned char)tokens[next() % (sizeof tokens - 1)];
            len += n;
            break;
        }
        case 6: /* the safetensors header length */
            if (len >= 8) {
                uint64_t h = next() % 3 == 0 ? next() : next() % (len + 16);
                for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(h >> (8 * i));
            }
            break;
        case 7: /* a digit run becomes a big or negative number */
        {
            const char *rep[] = {"-1", "99999999999", "0", "1e308", "4294967296", "18446744073709551615"};
            const char *s = rep[next() % 6];
            size_t n = strlen(s);
            if (pos + n <= len) memcpy(buf + pos, s, n);
            break;
        }
        }
    }
    return len;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : NULL;
    long iters = argc > 2 ? atol(argv[2]) : 20000;
    if (dir) {
        DIR *d = opendir(dir);
        if (!d) {
            fprintf(stderr, "cannot open corpus %s\n", dir);
            return 1;
        }
        struct dirent *e;
        char path[4096];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.' && qac_path_join(path, sizeof path, dir, e->d_name) == QAC_OK) add_file(path);
        closedir(d);
    }
    add_generated();
    if (n_seeds == 0) {
        fprintf(stderr, "no seeds\n");
        return 1;
    }
    for (int i = 0; i < n_seeds; i++) LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].len);
    size_t cap = 0;
    for (int i = 0; i < n_seeds; i++)
        if (seeds[i].len > cap) cap = seeds[i].len;
    cap += 256;
    unsigned char *buf = malloc(cap);
    for (long it = 0; it < iters; it++) {
        const seed *s = &seeds[next() % (uint64_t)n_seeds];
        memcpy(buf, s->data, s->len);
        size_t len = mutate(buf, s->len, cap);
        /* An exact-size copy so ASan sees reads past the end. */
        unsigned char *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    free(buf);
    for (int i = 0; i < n_seeds; i++) free(seeds[i].data);
    printf("fuzz driver: %d seeds, %ld mutations, no crash\n", n_seeds, iters);
    return 0;
}
