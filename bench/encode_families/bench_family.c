/* qac side of bench/encode_families (bench_families.py drives it):
 *
 *   qac_bench_family encode MODEL_DIR IDS_FILE THREADS [EMBEDDINGS_OUT]
 *     encode the token ids of IDS_FILE (one sequence per line, ids separated
 *     by spaces, as the model's own Hugging Face tokenizer gave them) with
 *     the CPU encoder in fp32, batches of 32 sorted by length as
 *     sentence-transformers sorts them; prints "qac passages=<n>
 *     seconds=<s> passages_per_s=<r> cpu_passages_per_s=<c>" (and writes the
 *     embeddings, float32 in the file's order, to EMBEDDINGS_OUT);
 *
 *   qac_bench_family attention T C NH WINDOW REPS THREADS
 *     one layer's attention over a sequence of T tokens (random Q, K, V),
 *     REPS times: the global layer (window 0) and the local one (WINDOW on
 *     each side), alternating; prints both per-call times and their ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bert_cpu.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_pool.h"
#include "qac_util.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *what) {
    fprintf(stderr, "qac_bench_family: %s: %s\n", what, qac_last_error());
    return 1;
}

static int encode(const char *dir, const char *ids_file, int threads, const char *out_path) {
    FILE *f = fopen(ids_file, "r");
    if (!f) return fail("open ids");
    int cap = 1024, n = 0, *lens = malloc(cap * sizeof *lens);
    int32_t **ids = malloc(cap * sizeof *ids);
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        if (n == cap) cap *= 2, lens = realloc(lens, cap * sizeof *lens), ids = realloc(ids, cap * sizeof *ids);
        int k = 0, kc = 64;
        int32_t *row = malloc(kc * sizeof *row);
        for (char *p = line, *end; (row[k] = (int32_t)strtol(p, &end, 10)), end != p; p = end) {
            if (++k == kc) kc *= 2, row = realloc(row, kc * sizeof *row);
        }
        lens[n] = k;
        ids[n++] = row;
    }
    free(line);
    fclose(f);
    qac_model *m;
    if (qac_model_load_untokenized(&m, dir)) return fail("load model");
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    o.cpu_precision = QAC_PREC_FP32;
    o.threads = threads;
    o.max_batch = 32;
    qac_encoder *e;
    if (qac_encoder_create(&e, m, &o)) return fail("create encoder");
    float *out = malloc((size_t)n * m->cfg.hidden_size * sizeof *out);
    if (qac_encoder_encode_ids(e, (const int32_t *const *)ids, lens, n < 32 ? n : 32, out)) return fail("encode");
    double t0 = qac_now(), c0 = cpu_seconds();
    if (qac_encoder_encode_ids(e, (const int32_t *const *)ids, lens, n, out)) return fail("encode");
    double dt = qac_now() - t0, cpu = cpu_seconds() - c0;
    printf("qac passages=%d seconds=%.3f passages_per_s=%.2f cpu_passages_per_s=%.2f\n", n, dt, n / dt, n / cpu);
    if (out_path) { /* the embeddings, float32 in the input's order */
        FILE *fo = fopen(out_path, "wb");
        size_t k = (size_t)n * m->cfg.hidden_size;
        if (!fo || fwrite(out, sizeof *out, k, fo) != k || fclose(fo)) return fail("write embeddings");
    }
    qac_encoder_free(e);
    qac_model_free(m);
    for (int i = 0; i < n; i++) free(ids[i]);
    free(ids), free(lens), free(out);
    return 0;
}

static int attention(int T, int C, int NH, int window, int reps, int threads) {
    qac_pool *pool;
    if (qac_pool_create(&pool, threads)) return fail("pool");
    float *qkv = malloc((size_t)T * 3 * C * sizeof *qkv), *out = malloc((size_t)T * C * sizeof *out);
    float *scratch = malloc((size_t)threads * qac_attention_scratch_floats(T, C, NH, 0) * sizeof *scratch);
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)T * 3 * C; i++) {
        s = s * 1664525u + 1013904223u;
        qkv[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    int offs[1] = {0}, lens[1] = {T};
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int w = 0; w < 2; w++) { /* global, local, alternating */
            double t0 = cpu_seconds();
            if (qac_attention_forward_window(out, NULL, scratch, qkv, lens, offs, w ? window : 0, NULL, 0, 1, T, C, NH,
                                             pool))
                return fail("attention");
            double dt = cpu_seconds() - t0;
            if (dt < best[w]) best[w] = dt;
        }
    printf("attention T=%d hidden=%d heads=%d: global %.3f ms, local (window %d each side) %.3f ms, local/global %.3f\n",
           T, C, NH, best[0] * 1e3, window, best[1] * 1e3, best[1] / best[0]);
    free(qkv), free(out), free(scratch);
    qac_pool_free(pool);
    return 0;
}

int main(int argc, char **argv) {
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "encode"))
        return encode(argv[2], argv[3], atoi(argv[4]), argc == 6 ? argv[5] : NULL);
    if (argc == 8 && !strcmp(argv[1], "attention"))
        return attention(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]));
    fprintf(stderr, "usage: qac_bench_family encode MODEL_DIR IDS_FILE THREADS [EMBEDDINGS_OUT]\n"
                    "       qac_bench_family attention T C NH WINDOW REPS THREADS\n");
    return 2;
}
