/* qac's GPU flat search: an 8,841,823 x 768 fp16 corpus (the MS MARCO
 * passage count), k = 1000, batches of 1, 16 and 256 queries; batch-1
 * latency against the read floor (the best of a few read-only passes over
 * the stored corpus: a kernel that reads every byte and reduces). The
 * corpus and queries come from a counter hash that reference.py reproduces
 * exactly, so both search the same data. Prints "RESULT key value" lines.
 *   bench_search_gpu [rows] [k] [tuning]
 *   bench_search_gpu --variants [rows] [k]
 * tuning: "name=value,..." (qac_gpu_flat_tuning_parse). --variants times
 * each tunable away from the default, one at a time, at every batch, and
 * prints "VARIANT search <tuning> b1_ms .. b16_ms .. b256_ms .." lines
 * (bench/search_gpu/variants.sh), each variant's hits compared with the
 * default's (they must be identical: ties are ordered, not broken at
 * random). */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qac_gpu_flat.h"
#include "qac_util.h"

enum { DIM = 768, CHUNK = 1 << 20, NQ = 256 };

/* Element idx of the synthetic data, uniform in [-1, 1); reference.py has the twin. */
static float hash_value(uint64_t idx) {
    uint64_t v = (idx * 2654435761ull) & 0xffffffffull;
    v ^= v >> 15;
    v = (v * 2246822519ull) & 0xffffffffull;
    v ^= v >> 13;
    return (float)((double)v / 4294967296.0 * 2.0 - 1.0);
}

#define QUERY_OFFSET (1ull << 40)

typedef struct fill_job {
    float *out;
    uint64_t first;
    size_t n;
} fill_job;

static void *fill_part(void *arg) {
    fill_job *j = arg;
    for (size_t i = 0; i < j->n; i++) j->out[i] = hash_value(j->first + i);
    return NULL;
}

/* out[i] = hash_value(first + i), on all cores */
static void fill(float *out, uint64_t first, size_t n) {
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    if (nt > 64) nt = 64;
    pthread_t th[64];
    fill_job jobs[64];
    size_t per = (n + (size_t)nt - 1) / (size_t)nt;
    for (long t = 0; t < nt; t++) {
        size_t a = (size_t)t * per < n ? (size_t)t * per : n, b = a + per < n ? a + per : n;
        jobs[t] = (fill_job){out + a, first + a, b - a};
        pthread_create(&th[t], NULL, fill_part, &jobs[t]);
    }
    for (long t = 0; t < nt; t++) pthread_join(th[t], NULL);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double copy_bandwidth(void) {
    const size_t bytes = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    if (cudaMalloc(&a, bytes) || cudaMalloc(&b, bytes)) return 0;
    cudaMemset(a, 1, bytes);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaFree(a);
    cudaFree(b);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 2.0 * bytes * 10 / (ms / 1e3); /* read + write bytes per second */
}

static const char *path_name(int p) { return p == QAC_GPU_FLAT_FUSED ? "fused" : "tiled"; }

/* Median seconds of reps searches of B queries (one untimed first). */
static double time_search(qac_gpu_flat *g, const float *q, int B, int k, int reps, float *scores, int64_t *rows) {
    double t[32];
    if (reps > 32) reps = 32;
    if (qac_gpu_flat_search(g, q, B, k, scores, rows)) return -1;
    for (int i = 0; i < reps; i++) {
        const double t0 = qac_now();
        if (qac_gpu_flat_search(g, q, B, k, scores, rows)) return -1;
        t[i] = qac_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    return t[reps / 2];
}

static const int BATCHES[3] = {1, 16, 256};

static int variants(qac_gpu_flat *g, const float *q, int k) {
    static const char *specs[] = {
        "",                       /* the default, first: the reference hits */
        "fused_threads=128",      "fused_threads=512",    "fused_blocks=1",       "fused_blocks=4",
        "fused_blocks=8",         "fused_unroll=4",       "fused_threads=128,fused_blocks=4",
        "oversample=16",          "oversample=32",        "oversample=128",       "oversample=256",
        "radix_bits=8",           "radix_bits=12",        "select_threads=256",   "select_threads=1024",
        "tile_rows=16384",        "tile_rows=32768",      "tile_rows=131072",     "tile_rows=262144",
        "compact_factor=1",       "compact_factor=4",     "compact_factor=8",     "filter_threads=128",
        "filter_threads=512",     "path=tiled",           "fused_max_nq=8",
    };
    const int nspec = (int)(sizeof specs / sizeof specs[0]);
    float *s = malloc(sizeof(float) * NQ * k), *ref_s = malloc(sizeof(float) * NQ * k * 3);
    int64_t *r = malloc(sizeof(int64_t) * NQ * k), *ref_r = malloc(sizeof(int64_t) * NQ * k * 3);
    qac_gpu_flat_tuning base;
    qac_gpu_flat_tuning_default(&base);
    int differ = 0;
    for (int v = 0; v < nspec; v++) {
        qac_gpu_flat_tuning t = base;
        if (qac_gpu_flat_tuning_parse(&t, specs[v]) || qac_gpu_flat_set_tuning(g, &t)) {
            printf("NOTE variant %s refused: %s\n", specs[v], qac_last_error());
            continue;
        }
        double ms[3];
        for (int bi = 0; bi < 3; bi++) {
            const int B = BATCHES[bi];
            ms[bi] = time_search(g, q, B, k, B == 1 ? 9 : B == 16 ? 5 : 3, s, r) * 1e3;
            if (ms[bi] < 0) {
                printf("NOTE variant %s batch %d failed: %s\n", specs[v], B, qac_last_error());
                continue;
            }
            float *rs = ref_s + (size_t)bi * NQ * k;
            int64_t *rr = ref_r + (size_t)bi * NQ * k;
            if (v == 0) {
                memcpy(rs, s, sizeof(float) * B * k);
                memcpy(rr, r, sizeof(int64_t) * B * k);
            } else if (memcmp(rr, r, sizeof(int64_t) * B * k) || memcmp(rs, s, sizeof(float) * B * k)) {
                printf("CHECK variant %s batch %d: hits differ from the default's\n", specs[v], B);
                differ++;
            }
        }
        printf("VARIANT search %s b1_ms %.3f b16_ms %.3f b256_ms %.3f\n", *specs[v] ? specs[v] : "default", ms[0], ms[1],
               ms[2]);
        fflush(stdout);
    }
    printf("CHECK variants: %s\n", differ ? "SOME HITS DIFFER" : "every variant's hits identical to the default's");
    qac_gpu_flat_set_tuning(g, &base);
    free(s), free(ref_s), free(r), free(ref_r);
    return differ ? 1 : 0;
}

int main(int argc, char **argv) {
    int var = argc > 1 && !strcmp(argv[1], "--variants");
    if (var) argc--, argv++;
    const int64_t n = argc > 1 ? atoll(argv[1]) : 8841823;
    const int k = argc > 2 ? atoi(argv[2]) : 1000;
    const char *spec = argc > 3 ? argv[3] : "";
    if (!qac_cuda_available()) {
        fprintf(stderr, "bench_search_gpu: no usable CUDA GPU\n");
        return 77;
    }
    qac_gpu_flat_tuning tune;
    qac_gpu_flat_tuning_default(&tune);
    if (qac_gpu_flat_tuning_parse(&tune, spec)) {
        fprintf(stderr, "bench_search_gpu: %s\n", qac_last_error());
        return 2;
    }
    qac_gpu_flat *g = NULL;
    if (qac_gpu_flat_create(&g, DIM, n)) {
        fprintf(stderr, "create: %s\n", qac_last_error());
        return 1;
    }
    float *chunk = malloc(sizeof(float) * CHUNK * DIM);
    const double t_add = qac_now();
    for (int64_t r = 0; r < n; r += CHUNK) {
        const int64_t m = n - r < CHUNK ? n - r : CHUNK;
        fill(chunk, (uint64_t)r * DIM, (size_t)m * DIM);
        if (qac_gpu_flat_add(g, chunk, m)) {
            fprintf(stderr, "add: %s\n", qac_last_error());
            return 1;
        }
    }
    printf("RESULT build_s %.1f\n", qac_now() - t_add);
    float *q = malloc(sizeof(float) * NQ * DIM);
    fill(q, QUERY_OFFSET, (size_t)NQ * DIM);
    if (var) {
        int rc = variants(g, q, k);
        qac_gpu_flat_free(g);
        free(chunk), free(q);
        return rc;
    }
    if (qac_gpu_flat_set_tuning(g, &tune)) {
        fprintf(stderr, "tuning: %s\n", qac_last_error());
        return 2;
    }
    char desc[512];
    qac_gpu_flat_tuning_format(&tune, desc, sizeof desc);
    printf("NOTE tuning %s\n", desc);
    const double bw = copy_bandwidth();
    printf("RESULT copy_bandwidth_GBps %.1f\n", bw / 1e9);
    double floor_s = 0, floor_bytes = 0;
    if (qac_gpu_flat_read_floor(g, 5, &floor_s, &floor_bytes)) {
        fprintf(stderr, "read floor: %s\n", qac_last_error());
        return 1;
    }
    printf("RESULT read_floor_GBps %.1f\n", floor_bytes / floor_s / 1e9);
    printf("RESULT floor_b1_ms %.3f\n", floor_s * 1e3);
    float *scores = malloc(sizeof(float) * NQ * k);
    int64_t *rows = malloc(sizeof(int64_t) * NQ * k);
    for (int bi = 0; bi < 3; bi++) {
        const int B = BATCHES[bi];
        const int reps = B == 1 ? 30 : B == 16 ? 15 : 7;
        const double med = time_search(g, q, B, k, reps, scores, rows);
        if (med < 0) {
            fprintf(stderr, "search: %s\n", qac_last_error());
            return 1;
        }
        qac_gpu_flat_stats st;
        qac_gpu_flat_last_stats(g, &st);
        printf("RESULT qac_b%d_ms %.3f\n", B, med * 1e3);
        printf("RESULT qac_b%d_qps %.1f\n", B, B / med);
        printf("RESULT qac_b%d_top1_row %lld\n", B, (long long)rows[0]);
        printf("NOTE batch %d: %s path%s", B, path_name(st.path), st.fallback ? " (after a fused fallback)" : "");
        if (st.path == QAC_GPU_FLAT_FUSED)
            printf(", sample %lld rows, %lld candidates of query 0 (room %lld)", (long long)st.sample_rows,
                   (long long)st.candidates[0], (long long)st.candidate_cap);
        else
            printf(", %d tiles", st.tiles);
        printf("\n");
        if (B == 1) printf("RESULT qac_b1_over_floor %.2f\n", med / floor_s);
    }
    qac_gpu_flat_free(g);
    free(chunk), free(q), free(scores), free(rows);
    return 0;
}
