/* GPU flat search against exact CPU search over the same fp16-rounded
 * vectors: identical results up to ties, at batch 1, 16 and 256 and k 1, 10
 * and 1000, with several corpus tiles, an adversarial corpus order (every
 * tile beats the last), duplicate vectors, and k past the corpus size. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_testutil.h"
#include "qac_gpu_flat.h"
#include "testutil.h"

/* Round to the nearest fp16 value (ties to even), as the GPU stores it. */
static float f16_round(float x) {
    if (!isfinite(x)) return x;
    const float a = fabsf(x);
    if (a >= 65520.0f) return copysignf(INFINITY, x);
    if (a < 6.103515625e-05f) return copysignf(nearbyintf(a * 16777216.0f) / 16777216.0f, x);
    int e;
    frexpf(a, &e);
    const float q = ldexpf(1.0f, e - 11);
    return copysignf(nearbyintf(a / q) * q, x);
}

static double dotd(const float *a, const float *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

static int cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The k best scores over the rounded corpus, best first (min-heap of k). */
static int ref_topk(const float *q, const float *x, int64_t n, int d, int k, double *out) {
    int m = 0;
    for (int64_t j = 0; j < n; j++) {
        const double s = dotd(q, x + (size_t)j * d, d);
        if (m < k) {
            int i = m++;
            while (i > 0 && out[(i - 1) / 2] > s) {
                out[i] = out[(i - 1) / 2];
                i = (i - 1) / 2;
            }
            out[i] = s;
        } else if (s > out[0]) {
            int i = 0;
            for (;;) {
                int c = 2 * i + 1;
                if (c >= m) break;
                if (c + 1 < m && out[c + 1] < out[c]) c++;
                if (out[c] >= s) break;
                out[i] = out[c];
                i = c;
            }
            out[i] = s;
        }
    }
    qsort(out, m, sizeof(double), cmp_desc);
    return m;
}

static void check_case(const char *name, qac_gpu_flat *g, const float *x, int64_t n, int d, const float *queries,
                       int nq, int k) {
    float *scores = malloc(sizeof(float) * nq * k);
    int64_t *rows = malloc(sizeof(int64_t) * nq * k);
    double *ref = malloc(sizeof(double) * k);
    unsigned char *seen = calloc((size_t)n, 1);
    gpu_test_poison(scores, (size_t)nq * k);
    for (size_t i = 0; i < (size_t)nq * k; i++) rows[i] = -7;
    CHECK_OK(qac_gpu_flat_search(g, queries, nq, k, scores, rows));
    int bad = 0;
    double worst = 0;
    for (int qi = 0; qi < nq && bad < 5; qi++) {
        const float *q = queries + (size_t)qi * d;
        const float *s = scores + (size_t)qi * k;
        const int64_t *r = rows + (size_t)qi * k;
        const int m = ref_topk(q, x, n, d, k, ref);
        const double tol_scale = 1e-4;
        int ok = 1;
        for (int i = 0; i < k; i++) {
            if (i >= m) {
                if (r[i] != -1 || s[i] != -FLT_MAX) ok = 0;
                continue;
            }
            if (r[i] < 0 || r[i] >= n || seen[r[i]]) {
                ok = 0;
                continue;
            }
            seen[r[i]] = 1;
            const double tol = tol_scale * (1 + fabs(ref[i]));
            const double exact = dotd(q, x + (size_t)r[i] * d, d);
            const double e1 = fabs(s[i] - ref[i]), e2 = fabs(exact - s[i]);
            if (e1 > worst) worst = e1;
            if (!(e1 <= tol && e2 <= tol)) ok = 0;
            if (i > 0 && s[i] > s[i - 1]) ok = 0;
        }
        /* Every row clearly inside the top k must be there. */
        if (m == k) {
            const double kth = ref[k - 1];
            for (int64_t j = 0; j < n; j++)
                if (!seen[j] && dotd(q, x + (size_t)j * d, d) > kth + tol_scale * (1 + fabs(kth))) ok = 0;
        }
        for (int i = 0; i < k; i++)
            if (r[i] >= 0 && r[i] < n) seen[r[i]] = 0;
        if (!ok) {
            bad++;
            fprintf(stderr, "%s: query %d differs from exact search beyond ties\n", name, qi);
        }
    }
    printf("%-28s nq %4d k %4d: %s (largest score difference %.3g)\n", name, nq, k, bad ? "DIFFERS" : "identical", worst);
    CHECK_MSG(bad == 0, "%s nq %d k %d: results differ from exact search", name, nq, k);
    free(scores), free(rows), free(ref), free(seen);
}

static float *random_vectors(int64_t n, int d) {
    float *v = malloc(sizeof(float) * (size_t)n * d);
    for (size_t i = 0; i < (size_t)n * d; i++) v[i] = f16_round(gpu_test_uniform(-1, 1));
    return v;
}

static void run_corpus(const char *name, float *x, int64_t n, int d, const int *batches, int nb, const float *queries) {
    qac_gpu_flat *g = NULL;
    CHECK_OK(qac_gpu_flat_create(&g, d, n + 10));
    if (!g) return;
    /* Added in two pieces, as an indexer streams it. */
    CHECK_OK(qac_gpu_flat_add(g, x, n / 3));
    CHECK_OK(qac_gpu_flat_add(g, x + (size_t)(n / 3) * d, n - n / 3));
    CHECK(qac_gpu_flat_count(g) == n);
    static const int ks[3] = {1, 10, 1000};
    for (int b = 0; b < nb; b++)
        for (int ki = 0; ki < 3; ki++) check_case(name, g, x, n, d, queries, batches[b], ks[ki]);
    qac_gpu_flat_free(g);
}

int main(void) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    gpu_test_seed();

    { /* several 64 K-row tiles at batch 256; duplicates make exact ties */
        const int64_t n = 150001;
        const int d = 128;
        float *x = random_vectors(n, d);
        for (int i = 0; i < 500; i++)
            memcpy(x + (size_t)gpu_test_int(0, (int)n - 1) * d, x + (size_t)gpu_test_int(0, (int)n - 1) * d,
                   sizeof(float) * d);
        float *q = random_vectors(256, d);
        const int batches[3] = {1, 16, 256};
        run_corpus("random 150001 x 128", x, n, d, batches, 3, q);
        free(x), free(q);
    }
    { /* more than one 1 M-row tile at small batches */
        const int64_t n = 1100000;
        const int d = 64;
        float *x = random_vectors(n, d);
        float *q = random_vectors(16, d);
        const int batches[2] = {1, 16};
        run_corpus("random 1100000 x 64", x, n, d, batches, 2, q);
        free(x), free(q);
    }
    { /* adversarial: scores grow with the row, so every tile replaces the list */
        const int64_t n = 300000;
        const int d = 32, nq = 300;
        float *x = malloc(sizeof(float) * (size_t)n * d);
        for (int64_t j = 0; j < n; j++)
            for (int c = 0; c < d; c++)
                x[(size_t)j * d + c] = f16_round((c == 0 ? (float)j / n * 4.0f : 0.0f) + gpu_test_uniform(-0.01f, 0.01f));
        float *q = malloc(sizeof(float) * nq * d);
        for (int i = 0; i < nq * d; i++) q[i] = f16_round((i % d == 0 ? 1.0f : 0.0f) + gpu_test_uniform(-0.05f, 0.05f));
        const int batches[1] = {nq};
        run_corpus("ascending 300000 x 32", x, n, d, batches, 1, q);
        free(x), free(q);
    }
    { /* k past the corpus size: rows -1, scores -FLT_MAX */
        const int64_t n = 500;
        const int d = 48;
        float *x = random_vectors(n, d);
        float *q = random_vectors(16, d);
        const int batches[2] = {1, 16};
        run_corpus("tiny 500 x 48", x, n, d, batches, 2, q);
        free(x), free(q);
    }
    { /* bad arguments */
        qac_gpu_flat *g = NULL;
        CHECK_ERR(qac_gpu_flat_create(&g, 0, 10), QAC_ERR_INVALID, "dimension");
        CHECK_OK(qac_gpu_flat_create(&g, 8, 4));
        if (g) {
            float v[5 * 8] = {0}, s[2];
            int64_t r[2];
            CHECK_ERR(qac_gpu_flat_add(g, v, 5), QAC_ERR_INVALID, "capacity");
            CHECK_ERR(qac_gpu_flat_search(g, v, 1, 0, s, r), QAC_ERR_INVALID, "k");
            CHECK_ERR(qac_gpu_flat_search(g, v, 1, 2049, s, r), QAC_ERR_INVALID, "k");
        }
        qac_gpu_flat_free(g);
    }
    return qac_test_summary();
}
