/* qac's GPU flat search: an 8,841,823 x 768 fp16 corpus (the MS MARCO
 * passage count), k = 1000, batches of 1, 16 and 256 queries; batch-1
 * latency against the memory floor (the corpus read once at the device-to-
 * device copy bandwidth measured here). The corpus and queries come from a
 * counter hash that reference.py reproduces exactly, so both search the
 * same data. Prints "RESULT key value" lines.
 *   bench_search_gpu [rows] [k] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "qac_gpu_flat.h"
#include "qac_util.h"

enum { DIM = 768, CHUNK = 65536, NQ = 256 };

/* Element idx of the synthetic data, uniform in [-1, 1); reference.py has the twin. */
static float hash_value(uint64_t idx) {
    uint64_t v = (idx * 2654435761ull) & 0xffffffffull;
    v ^= v >> 15;
    v = (v * 2246822519ull) & 0xffffffffull;
    v ^= v >> 13;
    return (float)((double)v / 4294967296.0 * 2.0 - 1.0);
}

#define QUERY_OFFSET (1ull << 40)

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

int main(int argc, char **argv) {
    const int64_t n = argc > 1 ? atoll(argv[1]) : 8841823;
    const int k = argc > 2 ? atoi(argv[2]) : 1000;
    if (!qac_cuda_available()) {
        fprintf(stderr, "bench_search_gpu: no usable CUDA GPU\n");
        return 77;
    }
    const double bw = copy_bandwidth();
    printf("RESULT copy_bandwidth_GBps %.1f\n", bw / 1e9);
    qac_gpu_flat *g = NULL;
    if (qac_gpu_flat_create(&g, DIM, n)) {
        fprintf(stderr, "create: %s\n", qac_last_error());
        return 1;
    }
    float *chunk = malloc(sizeof(float) * CHUNK * DIM);
    const double t_add = qac_now();
    for (int64_t r = 0; r < n; r += CHUNK) {
        const int64_t m = n - r < CHUNK ? n - r : CHUNK;
        for (size_t i = 0; i < (size_t)m * DIM; i++) chunk[i] = hash_value((uint64_t)r * DIM + i);
        if (qac_gpu_flat_add(g, chunk, m)) {
            fprintf(stderr, "add: %s\n", qac_last_error());
            return 1;
        }
    }
    printf("RESULT build_s %.1f\n", qac_now() - t_add);
    float *q = malloc(sizeof(float) * NQ * DIM);
    for (size_t i = 0; i < (size_t)NQ * DIM; i++) q[i] = hash_value(QUERY_OFFSET + i);
    float *scores = malloc(sizeof(float) * NQ * k);
    int64_t *rows = malloc(sizeof(int64_t) * NQ * k);
    const int batches[3] = {1, 16, 256};
    const double corpus_bytes = (double)n * DIM * 2;
    for (int bi = 0; bi < 3; bi++) {
        const int B = batches[bi];
        const int reps = B == 1 ? 30 : B == 16 ? 15 : 7;
        double t[30];
        if (qac_gpu_flat_search(g, q, B, k, scores, rows)) {
            fprintf(stderr, "search: %s\n", qac_last_error());
            return 1;
        }
        for (int i = 0; i < reps; i++) {
            const double t0 = qac_now();
            qac_gpu_flat_search(g, q, B, k, scores, rows);
            t[i] = qac_now() - t0;
        }
        qsort(t, reps, sizeof(double), cmp_double);
        const double med = t[reps / 2];
        printf("RESULT qac_b%d_ms %.3f\n", B, med * 1e3);
        printf("RESULT qac_b%d_qps %.1f\n", B, B / med);
        printf("RESULT qac_b%d_top1_row %lld\n", B, (long long)rows[0]);
        if (B == 1) {
            const double floor_s = corpus_bytes / (bw / 2); /* read once at the copy's read rate */
            printf("RESULT floor_b1_ms %.3f\n", floor_s * 1e3);
            printf("RESULT qac_b1_over_floor %.2f\n", med / floor_s);
        }
    }
    qac_gpu_flat_free(g);
    free(chunk), free(q), free(scores), free(rows);
    return 0;
}
