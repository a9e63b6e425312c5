/* The GPU flat search's two paths against the CPU twin of its selection
 * (kernels/topk_twin.c, itself tested against a plain sort), on corpora
 * whose scores are exact on both sides: every value a multiple of 1/8 in
 * [-1, 1] (exact in fp16), so a dot product over at most 768 dimensions is
 * a multiple of 1/64 below 2^10 in magnitude, exact in fp32 whatever the
 * summation order (tensor cores, cuBLAS or the host). Scores repeat a lot
 * (sparse ternary values, duplicated rows, an all-equal corpus), so the
 * order among ties and the k-th place are tested as much as the scores.
 * Required: the same rows in the same order, the same scores, and the same
 * path, fallback and candidate counts as the twin (the same thresholds).
 * Covered: k 1, 10, 1000, 2048; batches 1, 16, 17, 256; the default and a
 * custom tie order; dimensions 768, 128, 64, 40 (a partial 32-column
 * chunk) and 13 (the fused scan cannot run: tiled); every tunable at its
 * bounds; an adversarial corpus whose sample sees only the worst rows (the
 * fused pass overflows and reruns tiled); and qac_index_search on an index
 * of the same vectors on the GPU against the CPU scan (docid ties).
 * QAC_TEST_SMALL=1 (for compute-sanitizer) shrinks every corpus; the
 * argument "quick" runs one small corpus only (for racecheck). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_testutil.h"
#include "qac_gpu_flat.h"
#include "qac_index.h"
#include "qac_topk.h"
#include "qac_topk_twin.h"
#include "testutil.h"

static int small;

typedef struct corpus {
    int64_t n;
    int dim;
    int8_t *x;  /* [n, dim] numerators of v / 8 */
    float *xf;  /* the same as floats */
} corpus;

/* density: the share of nonzero values (1 = dense in [-8, 8]) */
static corpus make_corpus(int64_t n, int dim, double density, int dup_rows) {
    corpus c = {n, dim, malloc((size_t)n * dim), malloc(sizeof(float) * (size_t)n * dim)};
    for (size_t i = 0; i < (size_t)n * dim; i++) {
        int v = 0;
        if (gpu_test_uniform(0, 1) < density) v = density >= 1 ? gpu_test_int(-8, 8) : gpu_test_int(-1, 1);
        c.x[i] = (int8_t)v;
    }
    for (int i = 0; i < dup_rows; i++) /* exact duplicates */
        memcpy(c.x + (size_t)gpu_test_int(0, (int)n - 1) * dim, c.x + (size_t)gpu_test_int(0, (int)n - 1) * dim,
               (size_t)dim);
    for (size_t i = 0; i < (size_t)n * dim; i++) c.xf[i] = c.x[i] / 8.0f;
    return c;
}

static void free_corpus(corpus *c) { free(c->x), free(c->xf); }

static int8_t *make_queries(int nq, int dim, double density) {
    int8_t *q = malloc((size_t)nq * dim);
    for (size_t i = 0; i < (size_t)nq * dim; i++)
        q[i] = (int8_t)(gpu_test_uniform(0, 1) < density ? gpu_test_int(-8, 8) : 0);
    return q;
}

/* Exact scores [nq, n]. */
static float *exact_scores(const corpus *c, const int8_t *q, int nq) {
    float *s = malloc(sizeof(float) * (size_t)nq * c->n);
    for (int i = 0; i < nq; i++)
        for (int64_t r = 0; r < c->n; r++) {
            const int8_t *a = q + (size_t)i * c->dim, *b = c->x + (size_t)r * c->dim;
            int acc = 0;
            for (int d = 0; d < c->dim; d++) acc += a[d] * b[d];
            s[(size_t)i * c->n + r] = acc / 64.0f;
        }
    return s;
}

static float *as_floats(const int8_t *q, size_t n) {
    float *f = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) f[i] = q[i] / 8.0f;
    return f;
}

static qac_gpu_flat *upload(const corpus *c) {
    qac_gpu_flat *g = NULL;
    CHECK_OK(qac_gpu_flat_create(&g, c->dim, c->n));
    if (!g) return NULL;
    CHECK_OK(qac_gpu_flat_add(g, c->xf, c->n / 2));
    CHECK_OK(qac_gpu_flat_add(g, c->xf + (size_t)(c->n / 2) * c->dim, c->n - c->n / 2));
    return g;
}

/* One search on the GPU and the twin; identical or a failure. */
static void run_case(const char *name, qac_gpu_flat *g, const corpus *c, const float *qf, const float *scores, int nq,
                     int k, const uint32_t *rank, const qac_gpu_flat_tuning *t) {
    float *gs = malloc(sizeof(float) * (size_t)nq * k), *ts = malloc(sizeof(float) * (size_t)nq * k);
    int64_t *gr = malloc(sizeof(int64_t) * (size_t)nq * k), *tr = malloc(sizeof(int64_t) * (size_t)nq * k);
    gpu_test_poison(gs, (size_t)nq * k);
    CHECK_OK(qac_gpu_flat_set_tuning(g, t));
    CHECK_OK(qac_gpu_flat_search(g, qf, nq, k, gs, gr));
    qac_gpu_flat_stats st;
    qac_gpu_flat_last_stats(g, &st);
    qac_topk_twin_info info;
    CHECK_OK(qac_topk_twin_search(scores, c->n, nq, k, rank, c->dim, t, ts, tr, &info));
    int bad = 0, first = -1;
    for (size_t i = 0; i < (size_t)nq * k; i++)
        if (gr[i] != tr[i] || !(gs[i] == ts[i])) {
            if (first < 0) first = (int)i;
            bad++;
        }
    int same_stats = st.path == info.path && st.fallback == (info.fallback > 0);
    if (same_stats && st.path == QAC_GPU_FLAT_FUSED && !st.fallback)
        for (int i = 0; i < st.nq; i++) same_stats &= st.candidates[i] == info.candidates[i];
    printf("%-30s n %7lld dim %3d nq %3d k %4d: %s, %s (path %s%s, GPU candidates %lld, twin %lld)\n", name,
           (long long)c->n, c->dim, nq, k, bad ? "DIFFERS" : "identical", same_stats ? "same passes" : "OTHER PASSES",
           st.path == QAC_GPU_FLAT_FUSED ? "fused" : "tiled", st.fallback ? " after fallback" : "",
           (long long)st.candidates[0], (long long)info.candidates[0]);
    if (bad)
        fprintf(stderr, "  first difference at query %d rank %d: GPU row %lld score %.9g, twin row %lld score %.9g\n",
                first / k, first % k, (long long)gr[first], gs[first], (long long)tr[first], ts[first]);
    CHECK_MSG(bad == 0, "%s nq %d k %d: %d results differ from the twin", name, nq, k, bad);
    CHECK_MSG(same_stats, "%s nq %d k %d: path/fallback/candidates differ from the twin", name, nq, k);
    free(gs), free(ts), free(gr), free(tr);
}

static uint32_t *shuffled_ranks(int64_t n) {
    uint32_t *r = malloc(sizeof(uint32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) r[i] = (uint32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = gpu_test_int(0, (int)i);
        uint32_t t = r[i];
        r[i] = r[j], r[j] = t;
    }
    return r;
}

static const int KS[4] = {1, 10, 1000, 2048};

/* Every k at batches 1 and 16 (fused) and 17, 256 (tiled), default and
 * custom tie order. */
static void sweep(const char *name, const corpus *c, int nq_max, double qdensity, const qac_gpu_flat_tuning *tiled_t) {
    qac_gpu_flat *g = upload(c);
    if (!g) return;
    int8_t *q = make_queries(nq_max, c->dim, qdensity);
    float *qf = as_floats(q, (size_t)nq_max * c->dim), *s = exact_scores(c, q, nq_max);
    uint32_t *rank = shuffled_ranks(c->n);
    qac_gpu_flat_tuning t;
    qac_gpu_flat_tuning_default(&t);
    char label[96];
    for (int order = 0; order < 2; order++) {
        if (order) CHECK_OK(qac_gpu_flat_set_tie_order(g, rank));
        const uint32_t *rk = order ? rank : NULL;
        for (int ki = 0; ki < 4; ki++) {
            static const int batches[4] = {1, 16, 17, 256};
            for (int bi = 0; bi < 4; bi++) {
                if (batches[bi] > nq_max) continue;
                snprintf(label, sizeof label, "%s%s", name, order ? ", custom ties" : "");
                run_case(label, g, c, qf, s, batches[bi], KS[ki], rk, bi < 2 ? &t : tiled_t ? tiled_t : &t);
            }
        }
    }
    qac_gpu_flat_free(g);
    free(q), free(qf), free(s), free(rank);
}

/* Every tunable at its bounds gives the same answer. */
static void tunables(const corpus *c) {
    qac_gpu_flat *g = upload(c);
    if (!g) return;
    const int nq = 16;
    int8_t *q = make_queries(nq, c->dim, 0.5);
    float *qf = as_floats(q, (size_t)nq * c->dim), *s = exact_scores(c, q, nq);
    static const char *specs[] = {
        "fused_threads=64,fused_blocks=1",  "fused_threads=512,fused_blocks=8", "fused_unroll=4",
        "radix_bits=4,select_threads=128",  "radix_bits=8,select_threads=1024", "radix_bits=12",
        "oversample=2",                     "oversample=1024",                 "path=tiled,compact_factor=1,filter_threads=64",
        "path=tiled,tile_rows=1024,radix_bits=5", "path=tiled,tile_rows=1048576,filter_threads=1024",
        "path=fused,fused_max_nq=0",        "path=auto,fused_max_nq=0",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        qac_gpu_flat_tuning t;
        qac_gpu_flat_tuning_default(&t);
        CHECK_OK(qac_gpu_flat_tuning_parse(&t, specs[i]));
        for (int ki = 0; ki < 4; ki++) {
            run_case(specs[i], g, c, qf, s, 1, KS[ki], NULL, &t);
            run_case(specs[i], g, c, qf, s, nq, KS[ki], NULL, &t);
        }
    }
    qac_gpu_flat_free(g);
    free(q), free(qf), free(s);
}

/* The sampled rows are the worst: every other row passes the threshold,
 * the candidates overflow their room and the pass reruns tiled. */
static void overflow(int64_t n, int dim) {
    qac_gpu_flat_tuning t;
    qac_gpu_flat_tuning_default(&t);
    const int k = 10, nq = 2;
    qac_topk_plan p;
    qac_topk_plan_make(&p, n, nq, k, &t);
    corpus c = make_corpus(n, dim, 0.3, 0);
    for (int64_t r = 0; r < n; r++) /* a floor of +1/8 in dimension 0, the sampled rows -1 */
        c.x[(size_t)r * dim] = 1;
    for (int64_t j = 0; j < p.sample; j++) c.x[(size_t)qac_topk_sample_row(j, n, p.sample) * dim] = -8;
    for (size_t i = 0; i < (size_t)n * dim; i++) c.xf[i] = c.x[i] / 8.0f;
    int8_t *q = make_queries(nq, dim, 0.0);
    q[0] = q[dim] = 8; /* queries = e_0: a row's score is its dimension 0 */
    float *qf = as_floats(q, (size_t)nq * dim), *s = exact_scores(&c, q, nq);
    qac_gpu_flat *g = upload(&c);
    if (g) {
        run_case("overflow", g, &c, qf, s, nq, k, NULL, &t);
        qac_gpu_flat_stats st;
        qac_gpu_flat_last_stats(g, &st);
        CHECK_MSG(p.cap < n - p.sample && st.fallback == 1 && st.path == QAC_GPU_FLAT_TILED,
                  "overflow: expected the fused pass to fall back (cap %lld, fallback %d)", (long long)p.cap, st.fallback);
    }
    qac_gpu_flat_free(g);
    free_corpus(&c);
    free(q), free(qf), free(s);
}

/* ---- an index on the GPU against the CPU scan ---- */

static void write_npy(const char *path, const float *x, int64_t n, int dim) {
    FILE *f = fopen(path, "wb");
    char hdr[128];
    int len = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %d), }", (long long)n, dim);
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short hl = (unsigned short)(len + pad + 1);
    fputc(hl & 0xff, f), fputc(hl >> 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(x, sizeof(float), (size_t)n * dim, f);
    fclose(f);
}

static void index_parity(int64_t n, int dim) {
    corpus c = make_corpus(n, dim, 0.15, (int)(n / 20));
    const char *dir = qac_test_tmpdir("gpu-topk-index");
    char npy[4096], out[4096];
    snprintf(npy, sizeof npy, "%s/vectors.npy", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    write_npy(npy, c.xf, n, dim);
    qac_index_build_opts o = qac_index_default_build_opts();
    CHECK_OK(qac_index_build_vectors(out, npy, &o));
    qac_index *cpu = NULL, *gpu = NULL;
    CHECK_OK(qac_index_open(&cpu, out, QAC_DEVICE_CPU));
    CHECK_OK(qac_index_open(&gpu, out, QAC_DEVICE_CUDA));
    if (cpu && gpu) {
        CHECK(qac_index_on_gpu(gpu) && !qac_index_on_gpu(cpu));
        const int nq_max = 256;
        int8_t *q = make_queries(nq_max, dim, 0.3);
        float *qf = as_floats(q, (size_t)nq_max * dim);
        static const int batches[3] = {1, 16, 256};
        for (int bi = 0; bi < 3; bi++)
            for (int ki = 1; ki < 4; ki++) {
                const int nq = batches[bi], k = KS[ki];
                float *cs = malloc(sizeof(float) * (size_t)nq * k), *gs = malloc(sizeof(float) * (size_t)nq * k);
                int64_t *cr = malloc(sizeof(int64_t) * (size_t)nq * k), *gr = malloc(sizeof(int64_t) * (size_t)nq * k);
                CHECK_OK(qac_index_search(cpu, qf, nq, k, cs, cr));
                CHECK_OK(qac_index_search(gpu, qf, nq, k, gs, gr));
                int bad = 0, ties = 0;
                for (size_t i = 0; i < (size_t)nq * k; i++) {
                    if (cr[i] != gr[i] || cs[i] != gs[i]) bad++;
                    if (i % k && cs[i] == cs[i - 1]) ties++;
                }
                printf("index on GPU vs CPU scan       n %7lld dim %3d nq %3d k %4d: %s (%d tied neighbours)\n",
                       (long long)n, dim, nq, k, bad ? "DIFFERS" : "identical", ties);
                CHECK_MSG(bad == 0, "index search nq %d k %d: %d hits differ between GPU and CPU", nq, k, bad);
                free(cs), free(gs), free(cr), free(gr);
            }
        free(q), free(qf);
    }
    qac_index_free(cpu);
    qac_index_free(gpu);
    free_corpus(&c);
}

int main(int argc, char **argv) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    small = getenv("QAC_TEST_SMALL") && strcmp(getenv("QAC_TEST_SMALL"), "0") != 0;
    gpu_test_seed();
    if (argc > 1 && !strcmp(argv[1], "quick")) { /* one corpus, both paths: for compute-sanitizer's racecheck */
        corpus c = make_corpus(20000, 64, 0.1, 200);
        sweep("quick", &c, 17, 0.5, NULL);
        free_corpus(&c);
        return qac_test_summary();
    }
    const int64_t scale = small ? 8 : 1;
    { /* fused-sized batches on a corpus larger than every sample; sparse ternary rows: heavy ties */
        corpus c = make_corpus(250000 / scale, 128, 0.1, 2000);
        sweep("sparse 128", &c, 17, 0.5, NULL);
        free_corpus(&c);
    }
    { /* tiled batches, several tiles and compactions */
        corpus c = make_corpus(100000 / scale, 64, 1.0, 500);
        qac_gpu_flat_tuning t;
        qac_gpu_flat_tuning_default(&t);
        t.tile_rows = 16384;
        sweep("dense 64, 16 K-row tiles", &c, 256, 1.0, &t);
        free_corpus(&c);
    }
    { /* BERT-base width, and widths that are not a multiple of 32 (40) or 8 (13) */
        static const int dims[3] = {768, 40, 13};
        for (int i = 0; i < 3; i++) {
            corpus c = make_corpus((i ? 30000 : 40000) / scale, dims[i], 0.2, 100);
            char name[32];
            snprintf(name, sizeof name, "width %d", dims[i]);
            sweep(name, &c, 17, 0.4, NULL);
            free_corpus(&c);
        }
    }
    { /* every row equal: the tie order alone decides */
        corpus c = make_corpus(20000 / scale, 64, 0.0, 0);
        for (size_t i = 0; i < (size_t)c.n * c.dim; i++) c.x[i] = (int8_t)(i % c.dim == 3 ? 2 : 0), c.xf[i] = c.x[i] / 8.0f;
        sweep("all rows equal", &c, 17, 1.0, NULL);
        free_corpus(&c);
    }
    {
        corpus c = make_corpus(small ? 20000 : 120000, 96, 0.2, 300);
        tunables(&c);
        free_corpus(&c);
    }
    overflow(small ? 120000 : 400000, 32);
    index_parity(small ? 4000 : 30000, 64);
    { /* the read floor reads every stored byte */
        corpus c = make_corpus(50000, 64, 0.1, 0);
        qac_gpu_flat *g = upload(&c);
        if (g) {
            double secs = 0, bytes = 0;
            CHECK_OK(qac_gpu_flat_read_floor(g, 2, &secs, &bytes));
            CHECK(bytes == 50000.0 * 64 * 2 && secs > 0);
            printf("read floor: %.0f bytes in %.3f ms (%.0f GB/s)\n", bytes, secs * 1e3, bytes / secs / 1e9);
        }
        qac_gpu_flat_free(g);
        free_corpus(&c);
    }
    { /* bad arguments */
        corpus c = make_corpus(100, 16, 1.0, 0);
        qac_gpu_flat *g = upload(&c);
        if (g) {
            float s[2];
            int64_t r[2];
            uint32_t rank[100];
            for (int i = 0; i < 100; i++) rank[i] = (uint32_t)(i % 99);
            CHECK_ERR(qac_gpu_flat_set_tie_order(g, rank), QAC_ERR_INVALID, "permutation");
            rank[99] = 100;
            CHECK_ERR(qac_gpu_flat_set_tie_order(g, rank), QAC_ERR_INVALID, "permutation");
            CHECK_ERR(qac_gpu_flat_search(g, c.xf, 1, QAC_GPU_FLAT_KMAX + 1, s, r), QAC_ERR_INVALID, "k");
            qac_gpu_flat_tuning t;
            qac_gpu_flat_tuning_default(&t);
            t.radix_bits = 3;
            CHECK_ERR(qac_gpu_flat_set_tuning(g, &t), QAC_ERR_INVALID, "radix_bits");
        }
        qac_gpu_flat_free(g);
        free_corpus(&c);
    }
    return qac_test_summary();
}
