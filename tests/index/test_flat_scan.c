/* The CPU Flat scan (index/flat_scan.c):
 *  - scores are bit-identical whatever the batch: a query alone, inside any
 *    batch, with 1..3 threads, on every ISA path (portable, AVX2, AVX-512),
 *    odd dims included;
 *  - each score is the float64 dot product to within float rounding;
 *  - the top-k is the exact top-k of a brute-force sort by (score desc,
 *    docid desc), ties and k > n included;
 *  - no kernel reads past the matrix (it ends at a PROT_NONE page);
 *  - fp16 rows (FAISS SQfp16 codes) score exactly like their widened fp32
 *    copies, and the software half -> float equals F16C on all 65,536;
 *  - bf16 rows (FAISS SQbf16 codes): the scalar reference equals the
 *    hardware's own vdpbf16ps chain where the CPU has AVX512_BF16 (tiny
 *    values included, so that subnormal inputs and flushed sums occur),
 *    every ISA path equals the scalar reference bit for bit, alone, in any
 *    batch and with threads, and each score is the float64 dot product of
 *    the bf16 values to within float rounding. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flat_scan.h"
#include "qac_bf16.h"
#include "qac_cpu.h"
#include "qac_pool.h"
#include "testutil.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Memory whose last byte sits right before a PROT_NONE page, so that a
 * kernel reading past the end of the matrix crashes even without ASan. */
static void *guarded(size_t bytes) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + pg - 1) / pg * pg;
    char *base = mmap(NULL, span + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) abort();
    mprotect(base + span, pg, PROT_NONE);
    return base + span - bytes;
}

static void unguard(void *p, size_t bytes) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), span = (bytes + pg - 1) / pg * pg;
    munmap((char *)p + bytes - span, span + pg);
}

/* docid of row r: "d" + decimal, so strcmp order differs from row order */
static int id_less(const void *ctx, int64_t a, int64_t b) {
    (void)ctx;
    char x[32], y[32];
    snprintf(x, sizeof x, "d%lld", (long long)a);
    snprintf(y, sizeof y, "d%lld", (long long)b);
    return strcmp(x, y) < 0;
}

typedef struct ref_hit {
    float s;
    int64_t r;
} ref_hit;

static int ref_cmp(const void *a, const void *b) {
    const ref_hit *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return id_less(NULL, y->r, x->r) ? -1 : id_less(NULL, x->r, y->r) ? 1 : 0;
}

static int run(const qac_flat *f, const float *q, int nq, int k, qac_pool *pool, float *s, int64_t *r) {
    return qac_flat_topk(f, q, nq, k, pool, s, r) == QAC_OK;
}

static void check_dim(int n, int dim, int nq, int k) {
    float *x = guarded(sizeof(float) * (size_t)n * dim), *q = guarded(sizeof(float) * (size_t)nq * dim);
    for (size_t i = 0; i < (size_t)n * dim; i++) x[i] = frand();
    for (size_t i = 0; i < (size_t)nq * dim; i++) q[i] = frand();
    /* ties: rows 5..9 copy row 3, query 0 is row 3 itself */
    for (int r = 5; r < 10 && r < n; r++) memcpy(x + (size_t)r * dim, x + 3 * (size_t)dim, sizeof(float) * dim);
    if (n > 3) memcpy(q, x + 3 * (size_t)dim, sizeof(float) * dim);
    qac_flat f = {x, NULL, n, dim, id_less, NULL, NULL};

    float *s1 = malloc(sizeof(float) * (size_t)nq * k), *s2 = malloc(sizeof(float) * (size_t)nq * k);
    int64_t *r1 = malloc(sizeof(int64_t) * (size_t)nq * k), *r2 = malloc(sizeof(int64_t) * (size_t)nq * k);
    CHECK(run(&f, q, nq, k, NULL, s1, r1));

    /* the brute-force reference, with the same per-pair arithmetic */
    ref_hit *all = malloc(sizeof(ref_hit) * (size_t)n);
    int bad_rank = 0, bad_tail = 0;
    double max_rel = 0;
    for (int i = 0; i < nq; i++) {
        for (int r = 0; r < n; r++) {
            all[r] = (ref_hit){qac_flat_dot(q + (size_t)i * dim, x + (size_t)r * dim, dim), r};
            double d = 0, norm = 0;
            for (int j = 0; j < dim; j++) {
                d += (double)q[(size_t)i * dim + j] * x[(size_t)r * dim + j];
                norm += fabs((double)q[(size_t)i * dim + j] * x[(size_t)r * dim + j]);
            }
            double rel = fabs(d - all[r].s) / (norm > 0 ? norm : 1);
            if (rel > max_rel) max_rel = rel;
        }
        qsort(all, (size_t)n, sizeof *all, ref_cmp);
        for (int j = 0; j < k; j++) {
            if (j < n) bad_rank += r1[(size_t)i * k + j] != all[j].r || s1[(size_t)i * k + j] != all[j].s;
            else bad_tail += r1[(size_t)i * k + j] != -1 || !isinf(s1[(size_t)i * k + j]);
        }
    }
    CHECK_MSG(bad_rank == 0, "dim %d: %d hits differ from the brute-force top-%d", dim, bad_rank, k);
    CHECK_MSG(bad_tail == 0, "dim %d: %d padding hits are not -1/-inf", dim, bad_tail);
    CHECK_MSG(max_rel < 1e-6, "dim %d: score vs float64 relative error %.3g", dim, max_rel);
    if (n > 9 && k >= 6) /* ties rank by docid descending: d9 d8 d7 d6 d5 d3 */
        CHECK_MSG(r1[0] == 9 && r1[1] == 8 && r1[4] == 5 && r1[5] == 3, "dim %d: tie order %lld %lld %lld %lld",
                  dim, (long long)r1[0], (long long)r1[1], (long long)r1[4], (long long)r1[5]);

    /* every query alone, and every pool size, gives the same bits */
    int differ = 0;
    for (int i = 0; i < nq; i++) {
        CHECK(run(&f, q + (size_t)i * dim, 1, k, NULL, s2, r2));
        differ += memcmp(s2, s1 + (size_t)i * k, sizeof(float) * k) || memcmp(r2, r1 + (size_t)i * k, sizeof(int64_t) * k);
    }
    for (int start = 1; start + 5 <= nq; start += 4) { /* sub-batches at odd offsets */
        CHECK(run(&f, q + (size_t)start * dim, 5, k, NULL, s2, r2));
        differ += memcmp(s2, s1 + (size_t)start * k, sizeof(float) * 5 * k) != 0;
    }
    for (int t = 2; t <= 3; t++) {
        qac_pool *p = NULL;
        CHECK_OK(qac_pool_create(&p, t));
        CHECK(run(&f, q, nq, k, p, s2, r2));
        differ += memcmp(s2, s1, sizeof(float) * nq * k) || memcmp(r2, r1, sizeof(int64_t) * nq * k);
        qac_pool_free(p);
    }
    for (int isa = QAC_ISA_GENERIC; isa <= (int)qac_cpu_isa_best(); isa++) { /* every ISA path, 1 and 2 threads */
        qac_cpu_set_isa((qac_isa)isa);
        qac_pool *p = NULL;
        CHECK_OK(qac_pool_create(&p, 2));
        CHECK(run(&f, q, nq, k, NULL, s2, r2));
        differ += memcmp(s2, s1, sizeof(float) * nq * k) || memcmp(r2, r1, sizeof(int64_t) * nq * k);
        CHECK(run(&f, q, nq, k, p, s2, r2));
        differ += memcmp(s2, s1, sizeof(float) * nq * k) || memcmp(r2, r1, sizeof(int64_t) * nq * k);
        for (int i = 0; i < nq; i += 3) { /* queries alone */
            CHECK(run(&f, q + (size_t)i * dim, 1, k, NULL, s2, r2));
            differ += memcmp(s2, s1 + (size_t)i * k, sizeof(float) * k) != 0;
        }
        qac_pool_free(p);
    }
    qac_cpu_set_isa(qac_cpu_isa_best());
    CHECK_MSG(differ == 0, "dim %d: %d answers depend on batching, threads or kernel", dim, differ);
    printf("dim %d, n %d, nq %d, k %d: top-k exact, max rel error %.2g, batch-invariant\n", dim, n, nq, k, max_rel);
    unguard(x, sizeof(float) * (size_t)n * dim), unguard(q, sizeof(float) * (size_t)nq * dim);
    free(all), free(s1), free(s2), free(r1), free(r2);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("f16c"))) static float f16c_widen(uint16_t h) { return _cvtsh_ss(h); }
#endif

static void check_half(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("f16c")) {
        printf("half -> float vs F16C: skipped (no F16C)\n");
        return;
    }
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = qac_half_to_float((uint16_t)h), b = f16c_widen((uint16_t)h);
        bad += isnan(a) ? !isnan(b) : memcmp(&a, &b, sizeof a) != 0;
    }
    CHECK_MSG(bad == 0, "%d half values widen differently from F16C", bad);
    printf("half -> float: all 65536 values equal F16C\n");
#endif
}

static void check_fp16(int n, int dim, int nq, int k) {
    uint16_t *x16 = guarded(sizeof(uint16_t) * (size_t)n * dim);
    float *x = guarded(sizeof(float) * (size_t)n * dim), *q = guarded(sizeof(float) * (size_t)nq * dim);
    for (size_t i = 0; i < (size_t)n * dim; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        /* sign, exponent 0..17 (subnormals and values up to 8), mantissa */
        x16[i] = (uint16_t)((rng & 0x8000u) | ((uint16_t)((rng >> 20) % 18) << 10) | ((rng >> 40) & 0x3ffu));
        x[i] = qac_half_to_float(x16[i]);
    }
    for (size_t i = 0; i < (size_t)nq * dim; i++) q[i] = frand();
    qac_flat f32 = {x, NULL, n, dim, id_less, NULL, NULL}, f16 = {NULL, x16, n, dim, id_less, NULL, NULL};
    size_t hk = (size_t)nq * k;
    float *s1 = malloc(sizeof(float) * hk), *s2 = malloc(sizeof(float) * hk);
    int64_t *r1 = malloc(sizeof(int64_t) * hk), *r2 = malloc(sizeof(int64_t) * hk);
    CHECK(run(&f32, q, nq, k, NULL, s1, r1));
    int differ = 0;
    qac_pool *p = NULL;
    CHECK_OK(qac_pool_create(&p, 2));
    for (int isa = QAC_ISA_GENERIC; isa <= (int)qac_cpu_isa_best(); isa++)
        for (int variant = 0; variant < 3; variant++) { /* every ISA path: alone, 2 threads, one query at a time */
            qac_cpu_set_isa((qac_isa)isa);
            if (variant < 2) CHECK(run(&f16, q, nq, k, variant == 1 ? p : NULL, s2, r2));
            else
                for (int i = 0; i < nq; i++)
                    CHECK(run(&f16, q + (size_t)i * dim, 1, k, NULL, s2 + (size_t)i * k, r2 + (size_t)i * k));
            differ += memcmp(s1, s2, sizeof(float) * hk) || memcmp(r1, r2, sizeof(int64_t) * hk);
        }
    qac_cpu_set_isa(qac_cpu_isa_best());
    qac_pool_free(p);
    CHECK_MSG(differ == 0, "fp16 dim %d: %d runs differ from the widened fp32 scan", dim, differ);
    printf("fp16 rows, dim %d, n %d, nq %d: identical to the fp32 scan of the widened rows\n", dim, n, nq);
    unguard(x16, sizeof(uint16_t) * (size_t)n * dim), unguard(x, sizeof(float) * (size_t)n * dim);
    unguard(q, sizeof(float) * (size_t)nq * dim);
    free(s1), free(s2), free(r1), free(r2);
}


/* ---- bf16 rows ---- */

static uint16_t bits16(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint16_t)(rng >> 20);
}

/* A bf16 value: with tiny 0 an embedding-like value; else mostly one near
 * 2^-63 (its products near 2^-126, where vdpbf16ps flushes), a subnormal
 * or zero, and with tiny 1 also some large ones. */
static uint16_t bf16_sample(int tiny) {
    uint16_t r = bits16(), sign = r & 0x8000u, mant = (uint16_t)(bits16() & 0x7fu);
    if (!tiny) return qac_bf16_from_float(frand() * 0.2f);
    switch (r % 8) {
    case 0: return (uint16_t)(sign | mant);                                 /* subnormal or zero */
    case 1: if (tiny == 1) return qac_bf16_from_float(frand());             /* large beside tiny */
        /* fall through */
    default: return (uint16_t)(sign | ((uint16_t)(61 + r % 4) << 7) | mant); /* 2^-66 .. 2^-63 */
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The score straight from the hardware: one vdpbf16ps per 16 dims on 8
 * lanes, then the final sum of flat_scan.h. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static float hw_dot_bf16(const uint16_t *q,
                                                                                      const uint16_t *x, int dim) {
    __m256 acc = _mm256_setzero_ps();
    for (int d = 0; d < dim; d += 16) {
        __mmask16 mk = d + 16 <= dim ? (__mmask16)0xffff : (__mmask16)((1u << (dim - d)) - 1);
        __m256i qv = _mm256_maskz_loadu_epi16(mk, q + d), xv = _mm256_maskz_loadu_epi16(mk, x + d);
        acc = _mm256_dpbf16_ps(acc, (__m256bh)qv, (__m256bh)xv);
    }
    float a[8];
    _mm256_storeu_ps(a, acc);
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}
static int have_hw_bf16(void) { return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw"); }
#else
static float hw_dot_bf16(const uint16_t *q, const uint16_t *x, int dim) { return qac_flat_dot_bf16(q, x, dim); }
static int have_hw_bf16(void) { return 0; }
#endif

static void check_bf16(int n, int dim, int nq, int k, int tiny) {
    uint16_t *xb = guarded(sizeof(uint16_t) * (size_t)n * dim), *qb = malloc(sizeof(uint16_t) * (size_t)nq * dim);
    float *q = guarded(sizeof(float) * (size_t)nq * dim);
    for (size_t i = 0; i < (size_t)n * dim; i++) xb[i] = bf16_sample(tiny);
    for (size_t i = 0; i < (size_t)nq * dim; i++) {
        /* queries arrive in fp32: a bf16 value plus a little, rounded by the scan */
        uint16_t h = bf16_sample(tiny);
        q[i] = qac_bf16_in(h) * (1.0f + frand() * 0x1p-10f);
        qb[i] = qac_bf16_from_float(q[i]);
    }
    /* ties: rows 5..9 copy row 3 */
    for (int r = 5; r < 10 && r < n; r++) memcpy(xb + (size_t)r * dim, xb + 3 * (size_t)dim, sizeof(uint16_t) * dim);
    qac_flat f = {NULL, NULL, n, dim, id_less, NULL, xb};

    /* the scalar reference against the hardware */
    int hw = have_hw_bf16(), hw_bad = 0, flushed = 0;
    ref_hit *all = malloc(sizeof(ref_hit) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)nq * k);
    int64_t *refr = malloc(sizeof(int64_t) * (size_t)nq * k);
    double max_rel = 0;
    for (int i = 0; i < nq; i++) {
        for (int r = 0; r < n; r++) {
            const uint16_t *qi = qb + (size_t)i * dim, *xr = xb + (size_t)r * dim;
            float s = qac_flat_dot_bf16(qi, xr, dim);
            if (hw) {
                float h = hw_dot_bf16(qi, xr, dim);
                hw_bad += memcmp(&h, &s, sizeof s) != 0;
            }
            all[r] = (ref_hit){s, r};
            double d = 0, norm = 0;
            for (int j = 0; j < dim; j++) {
                double p = (double)qac_bf16_in(qi[j]) * qac_bf16_in(xr[j]);
                d += p, norm += fabs(p);
            }
            flushed += fabs(d) < 0x1p-100 && d != s;
            if (!tiny) {
                double rel = fabs(d - s) / (norm > 0 ? norm : 1);
                if (rel > max_rel) max_rel = rel;
            }
        }
        qsort(all, (size_t)n, sizeof *all, ref_cmp);
        for (int j = 0; j < k; j++) {
            ref[(size_t)i * k + j] = j < n ? all[j].s : -INFINITY;
            refr[(size_t)i * k + j] = j < n ? all[j].r : -1;
        }
    }
    CHECK_MSG(hw_bad == 0, "bf16 dim %d: %d scalar scores differ from the hardware's vdpbf16ps", dim, hw_bad);
    CHECK_MSG(max_rel < 1e-6, "bf16 dim %d: score vs float64 relative error %.3g", dim, max_rel);

    /* every path, alone, in batches, with threads: the reference's bits */
    size_t hk = (size_t)nq * k;
    float *s2 = malloc(sizeof(float) * hk);
    int64_t *r2 = malloc(sizeof(int64_t) * hk);
    int differ = 0, runs = 0;
    qac_pool *p = NULL;
    CHECK_OK(qac_pool_create(&p, 2));
    for (int isa = QAC_ISA_GENERIC; isa <= (int)qac_cpu_isa_best(); isa++)
        for (int variant = 0; variant < 4; variant++) {
            qac_cpu_set_isa((qac_isa)isa);
            if (variant < 2) CHECK(run(&f, q, nq, k, variant == 1 ? p : NULL, s2, r2));
            else if (variant == 2)
                for (int i = 0; i < nq; i++)
                    CHECK(run(&f, q + (size_t)i * dim, 1, k, NULL, s2 + (size_t)i * k, r2 + (size_t)i * k));
            else /* sub-batches of 3 at every offset mod 3, so each query sits in several tile slots */
                for (int i = 0; i < nq; i += 3) {
                    int m = nq - i < 3 ? nq - i : 3;
                    CHECK(run(&f, q + (size_t)i * dim, m, k, NULL, s2 + (size_t)i * k, r2 + (size_t)i * k));
                }
            differ += memcmp(ref, s2, sizeof(float) * hk) || memcmp(refr, r2, sizeof(int64_t) * hk);
            runs++;
        }
    qac_cpu_set_isa(qac_cpu_isa_best());
    qac_pool_free(p);
    CHECK_MSG(differ == 0, "bf16 dim %d%s: %d of %d runs differ from the scalar reference", dim, tiny ? " (tiny)" : "",
              differ, runs);
    printf("bf16 rows, dim %d, n %d, nq %d%s: scalar = %s, %d runs on %d ISA paths bit-identical to it, max rel error "
           "%.2g, %d flushed scores\n",
           dim, n, nq, tiny ? ", tiny values" : "", hw ? "vdpbf16ps bit for bit" : "(no AVX512_BF16 to compare)", runs,
           (int)qac_cpu_isa_best() + 1, max_rel, flushed);
    unguard(xb, sizeof(uint16_t) * (size_t)n * dim), unguard(q, sizeof(float) * (size_t)nq * dim);
    free(qb), free(all), free(ref), free(refr), free(s2), free(r2);
}

/* qac_bf16_step against the hardware on chains built to land near 2^-126:
 * lane 0 gets an accumulator from dims 0/1, then the pair at dims 16/17. */
static void check_bf16_step(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (!have_hw_bf16()) {
        printf("bf16 step vs vdpbf16ps: skipped (no AVX512_BF16)\n");
        return;
    }
    int bad = 0, tiny = 0, n = 0;
    /* at the flush boundary: 2^-126 (times 1 + a/128) minus j * 2^-152,
     * which rounds to 2^-126 or below depending on j */
    for (int a = 0; a < 4; a++)
        for (int j = 0; j < 64; j++)
            for (int sg = 0; sg < 2; sg++) {
                uint16_t q[32] = {0}, x[32] = {0};
                q[0] = (uint16_t)((sg ? 0x8000u : 0) | (64u << 7) | (unsigned)a); /* +-2^-63 (1 + a/128) */
                x[0] = 64u << 7;                                                    /* 2^-63 */
                if (j) {
                    q[17] = (uint16_t)((sg ? 0 : 0x8000u) | qac_bf16_from_float((float)j * 0x1p-76f));
                    x[17] = qac_bf16_from_float(0x1p-76f);
                }
                float h = hw_dot_bf16(q, x, 18), s = qac_flat_dot_bf16(q, x, 18);
                bad += memcmp(&h, &s, sizeof h) != 0, tiny += s == 0, n++;
            }
    /* random chains: exponents from 2^-76 to 2^-63 and subnormals */
    for (int t = 0; t < 100000; t++, n++) {
        uint16_t q[32] = {0}, x[32] = {0};
        int idx[4] = {0, 1, 16, 17};
        for (int j = 0; j < 4; j++) {
            uint16_t r = bits16();
            q[idx[j]] = (uint16_t)((r & 0x8000u) | ((uint16_t)(r % 13 == 0 ? 0 : 51 + r % 14) << 7) | (bits16() & 0x7fu));
            x[idx[j]] = (uint16_t)(((uint16_t)(51 + bits16() % 14) << 7) | (bits16() & 0x7fu));
        }
        float h = hw_dot_bf16(q, x, 18), s = qac_flat_dot_bf16(q, x, 18);
        bad += memcmp(&h, &s, sizeof h) != 0, tiny += s == 0;
    }
    CHECK_MSG(bad == 0, "%d of %d chains near 2^-126 differ from vdpbf16ps", bad, n);
    printf("bf16 step: %d chains near 2^-126 (%d flushed to zero) equal vdpbf16ps\n", n, tiny);
#endif
}

int main(void) {
    check_half();
    check_fp16(900, 384, 11, 10);
    check_fp16(301, 29, 6, 5);
    check_dim(1000, 384, 13, 10);
    check_dim(777, 37, 9, 20);   /* dim tail, partial tiles */
    check_dim(300, 8, 4, 7);
    check_dim(501, 24, 7, 10);   /* 4 + 2 + 1 queries */
    check_dim(7, 16, 6, 12);     /* k > n */
    check_dim(2, 5, 1, 3);
    check_bf16_step();
    check_bf16(900, 384, 11, 10, 0);
    check_bf16(777, 37, 9, 20, 0); /* dim tail, partial tiles */
    check_bf16(301, 29, 6, 5, 1);
    check_bf16(260, 64, 7, 300, 2); /* k > n; every score tiny */
    check_bf16(5, 3, 2, 3, 0);
    float x[4] = {1, 2, 3, 4};
    qac_flat f = {x, NULL, 1, 4, id_less, NULL, NULL};
    float s;
    int64_t r;
    CHECK_ERR(qac_flat_topk(&f, x, 1, 0, NULL, &s, &r), QAC_ERR_INVALID, "k 0");
    uint16_t h[4] = {0};
    qac_flat both = {x, h, 1, 4, id_less, NULL, NULL}, none = {NULL, NULL, 1, 4, id_less, NULL, NULL},
             two = {NULL, h, 1, 4, id_less, NULL, h};
    CHECK_ERR(qac_flat_topk(&both, x, 1, 1, NULL, &s, &r), QAC_ERR_INVALID, "bad arguments");
    CHECK_ERR(qac_flat_topk(&none, x, 1, 1, NULL, &s, &r), QAC_ERR_INVALID, "bad arguments");
    CHECK_ERR(qac_flat_topk(&two, x, 1, 1, NULL, &s, &r), QAC_ERR_INVALID, "bad arguments");
    CHECK_OK(qac_flat_topk(&f, x, 0, 5, NULL, &s, &r));
    return qac_test_summary();
}
