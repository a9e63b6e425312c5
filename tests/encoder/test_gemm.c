/* The encoder's matrix product (model/gemm.c):
 *  - every element equals the sequential FMA chain computed here in scalar
 *    code, bit for bit (so also for odd shapes and padded panels);
 *  - a row's result does not depend on the rows beside it, the row count,
 *    the thread count or the kernel: each check runs on every ISA path the
 *    CPU has (portable, AVX2, AVX-512);
 *  - bias and residual are added after the product, residual aliasing out;
 *  - the strided and transposed packing used by attention gives the same,
 *    and so does qac_gemm_strided_b reading W^T in place;
 *  - qac_gemm_then's post step sees every row exactly once, already
 *    finished (equal to qac_gemm's result), in fp32 and bf16, at 1-3 threads;
 *  - bf16 mode (inputs with exact rounding ties among them): every element
 *    equals a scalar model of vdpbf16ps's chain
 *    (pairs, odd product first, subnormals flushed), on every path, in
 *    any batch and thread count, and stays near the fp32 product. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "qac_cpu.h"
#include "testutil.h"

static unsigned long long rng = 88172645463325252ULL;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
}

static float ref_elem(const float *a, const float *w, int IC, float alpha, const float *bias, const float *resid, int o) {
    float acc = 0.0f;
    for (int k = 0; k < IC; k++) acc = fmaf(a[k], w[(size_t)o * IC + k], acc);
    if (alpha != 1.0f) acc = acc * alpha;
    if (bias) acc = acc + bias[o];
    if (resid) acc = acc + resid[o];
    return acc;
}

static void check_shape_isa(int N, int IC, int OC, qac_isa isa) {
    CHECK(qac_cpu_set_isa(isa) == isa);
    float *a = malloc(sizeof(float) * (size_t)N * IC), *w = malloc(sizeof(float) * (size_t)OC * IC);
    float *bias = malloc(sizeof(float) * OC), *res = malloc(sizeof(float) * (size_t)N * OC);
    float *out = malloc(sizeof(float) * (size_t)N * OC), *out2 = malloc(sizeof(float) * (size_t)N * OC);
    for (size_t i = 0; i < (size_t)N * IC; i++) a[i] = frand();
    for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = frand();
    for (int i = 0; i < OC; i++) bias[i] = frand();
    for (size_t i = 0; i < (size_t)N * OC; i++) res[i] = frand();
    qac_packed_w pw;
    CHECK_OK(qac_gemm_pack(&pw, w, OC, IC));
    int bad = 0;
    /* plain, then bias + residual aliasing out */
    CHECK_OK(qac_gemm(out, a, &pw, NULL, NULL, N, NULL, NULL));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) bad += out[(size_t)n * OC + o] != ref_elem(a + (size_t)n * IC, w, IC, 1.0f, NULL, NULL, o);
    memcpy(out2, res, sizeof(float) * (size_t)N * OC);
    CHECK_OK(qac_gemm(out2, a, &pw, bias, out2, N, NULL, NULL));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            bad += out2[(size_t)n * OC + o] != ref_elem(a + (size_t)n * IC, w, IC, 1.0f, bias, res + (size_t)n * OC, o);
    CHECK_MSG(bad == 0, "%s %d x %d x %d: %d elements differ from the sequential FMA chain", qac_cpu_isa_name(isa), N,
              IC, OC, bad);
    /* rows alone, in odd sub-batches, with threads, with the portable kernel */
    int differ = 0;
    for (int n = 0; n < N; n += 1 + n % 5) {
        int m = 1 + (n * 7) % 9;
        if (n + m > N) m = N - n;
        CHECK_OK(qac_gemm(out2, a + (size_t)n * IC, &pw, NULL, NULL, m, NULL, NULL));
        differ += memcmp(out2, out + (size_t)n * OC, sizeof(float) * (size_t)m * OC) != 0;
    }
    for (int t = 2; t <= 3; t++) {
        qac_pool *p = NULL;
        CHECK_OK(qac_pool_create(&p, t));
        CHECK_OK(qac_gemm(out2, a, &pw, NULL, NULL, N, NULL, p));
        differ += memcmp(out2, out, sizeof(float) * (size_t)N * OC) != 0;
        qac_pool_free(p);
    }
    for (int other = QAC_ISA_GENERIC; other <= (int)qac_cpu_isa_best(); other++) {
        qac_cpu_set_isa((qac_isa)other);
        CHECK_OK(qac_gemm(out2, a, &pw, NULL, NULL, N, NULL, NULL));
        differ += memcmp(out2, out, sizeof(float) * (size_t)N * OC) != 0;
    }
    qac_cpu_set_isa(isa);
    CHECK_MSG(differ == 0, "%s %d x %d x %d: %d results depend on batching, threads or kernel", qac_cpu_isa_name(isa), N,
              IC, OC, differ);
    /* strided / transposed packing: W^T given as [IC, OC] with a wider stride */
    int ld = OC + 3;
    float *wt = malloc(sizeof(float) * (size_t)IC * ld), *pk = malloc(sizeof(float) * qac_gemm_packed_floats(OC, IC));
    for (int k = 0; k < IC; k++)
        for (int o = 0; o < OC; o++) wt[(size_t)k * ld + o] = w[(size_t)o * IC + k];
    qac_gemm_pack_into(pk, wt, OC, IC, ld, 1);
    CHECK(memcmp(pk, pw.p, sizeof(float) * qac_gemm_packed_floats(OC, IC)) == 0);
    qac_gemm_strided(out2, OC, a, IC, pk, IC, OC, 0.125f, N);
    bad = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) bad += out2[(size_t)n * OC + o] != ref_elem(a + (size_t)n * IC, w, IC, 0.125f, NULL, NULL, o);
    CHECK_MSG(bad == 0, "%s %d x %d x %d strided: %d elements differ", qac_cpu_isa_name(isa), N, IC, OC, bad);
    /* B = W^T read in place (or packed into scratch): the same bits; the
     * scratch starts as garbage and the columns past OC as NaN, which a read
     * outside the operand would carry into the result */
    for (int k = 0; k < IC; k++)
        for (int o = OC; o < ld; o++) wt[(size_t)k * ld + o] = NAN;
    for (size_t i = 0; i < qac_gemm_packed_floats(OC, IC); i++) pk[i] = NAN;
    memset(out2, 0xff, sizeof(float) * (size_t)N * OC);
    qac_gemm_strided_b(out2, OC, a, IC, wt, ld, IC, OC, 0.125f, N, pk);
    bad = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) bad += out2[(size_t)n * OC + o] != ref_elem(a + (size_t)n * IC, w, IC, 0.125f, NULL, NULL, o);
    CHECK_MSG(bad == 0, "%s %d x %d x %d B in place: %d elements differ", qac_cpu_isa_name(isa), N, IC, OC, bad);
    printf("gemm %-7s %4d x %4d x %4d: bit-equal to the scalar chain, batch/thread/kernel-invariant\n",
           qac_cpu_isa_name(isa), N, IC, OC);
    qac_gemm_packed_free(&pw);
    free(a), free(w), free(bias), free(res), free(out), free(out2), free(wt), free(pk);
}


/* scalar model of bf16 mode, written from Intel's vdpbf16ps pseudocode */
static float bf_val(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if (((u >> 23) & 0xff) == 0) u &= 0x80000000u; /* DAZ */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static float flush(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
static uint16_t to_bf(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float ref_bf16(const float *a, const float *w, int IC, const float *bias, const float *resid, int o) {
    float acc = 0.0f;
    for (int k = 0; k < IC; k += 2) {
        float a1 = k + 1 < IC ? bf_val(to_bf(a[k + 1])) : 0, w1 = k + 1 < IC ? bf_val(to_bf(w[(size_t)o * IC + k + 1])) : 0;
        acc = flush(fmaf(a1, w1, acc));
        acc = flush(fmaf(bf_val(to_bf(a[k])), bf_val(to_bf(w[(size_t)o * IC + k])), acc));
    }
    if (bias) acc = acc + bias[o];
    if (resid) acc = acc + resid[o];
    return acc;
}

static void check_bf16(int N, int IC, int OC, int tiny) {
    float *a = malloc(sizeof(float) * (size_t)N * IC), *w = malloc(sizeof(float) * (size_t)OC * IC);
    float *bias = malloc(sizeof(float) * OC), *res = malloc(sizeof(float) * (size_t)N * OC);
    float *out = malloc(sizeof(float) * (size_t)N * OC), *out2 = malloc(sizeof(float) * (size_t)N * OC);
    for (size_t i = 0; i < (size_t)N * IC; i++) a[i] = frand();
    for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = frand();
    if (tiny) { /* subnormal inputs; even rows x odd columns: every product and sum underflows */
        for (int n = 0; n < N; n++)
            for (int k = 0; k < IC; k++) a[(size_t)n * IC + k] *= n % 2 ? (k % 3 ? 1.0f : 1e-38f) : 1e-20f;
        for (int o = 1; o < OC; o += 2)
            for (int k = 0; k < IC; k++) w[(size_t)o * IC + k] *= 1e-19f;
        for (int k = 0; k < IC; k += 3) w[k] *= 1e36f; /* column 0: subnormal inputs x huge weights */
    }
    for (size_t i = 0; i < (size_t)N * IC; i += 5) { /* exact ties: halfway between two bf16 values */
        uint32_t u;
        memcpy(&u, &a[i], sizeof u);
        u = (u & 0xffff0000u) | 0x8000u;
        memcpy(&a[i], &u, sizeof u);
    }
    for (int i = 0; i < OC; i++) bias[i] = frand();
    for (size_t i = 0; i < (size_t)N * OC; i++) res[i] = frand();
    qac_packed_w pw, pf;
    CHECK_OK(qac_gemm_pack_bf16(&pw, w, OC, IC));
    CHECK_OK(qac_gemm_pack(&pf, w, OC, IC));
    qac_isa best = qac_cpu_isa_best();
    int bad = 0, differ = 0;
    double maxrel = 0;
    for (int isa = QAC_ISA_GENERIC; isa <= (int)best; isa++) {
        qac_cpu_set_isa((qac_isa)isa);
        memcpy(out2, res, sizeof(float) * (size_t)N * OC);
        CHECK_OK(qac_gemm(out2, a, &pw, bias, out2, N, NULL, NULL));
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                float want = ref_bf16(a + (size_t)n * IC, w, IC, bias, res + (size_t)n * OC, o);
                bad += memcmp(&out2[(size_t)n * OC + o], &want, sizeof want) != 0;
            }
        CHECK_OK(qac_gemm(out, a, &pw, NULL, NULL, N, NULL, NULL));
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                float want = ref_bf16(a + (size_t)n * IC, w, IC, NULL, NULL, o);
                bad += memcmp(&out[(size_t)n * OC + o], &want, sizeof want) != 0;
            }
        for (int n = 0; n < N; n += 1 + n % 4) { /* rows alone and in odd sub-batches */
            int m = 1 + (n * 5) % 7;
            if (n + m > N) m = N - n;
            CHECK_OK(qac_gemm(out2, a + (size_t)n * IC, &pw, NULL, NULL, m, NULL, NULL));
            differ += memcmp(out2, out + (size_t)n * OC, sizeof(float) * (size_t)m * OC) != 0;
        }
        qac_pool *p = NULL;
        CHECK_OK(qac_pool_create(&p, 2));
        CHECK_OK(qac_gemm(out2, a, &pw, NULL, NULL, N, NULL, p));
        differ += memcmp(out2, out, sizeof(float) * (size_t)N * OC) != 0;
        /* the bf16 rows in scratch from a plan (qac_gemm_scratch_bytes), as the encoder gives it */
        void *plan = malloc(qac_gemm_scratch_bytes(IC, qac_pool_size(p)));
        CHECK_OK(qac_gemm(out2, a, &pw, NULL, NULL, N, plan, p));
        differ += memcmp(out2, out, sizeof(float) * (size_t)N * OC) != 0;
        free(plan);
        qac_pool_free(p);
    }
    qac_cpu_set_isa(best);
    CHECK_OK(qac_gemm(out2, a, &pf, NULL, NULL, N, NULL, NULL));
    if (!tiny)
        for (size_t i = 0; i < (size_t)N * OC; i++) maxrel = fmax(maxrel, fabs(out[i] - out2[i]) / (sqrt((double)IC) * 0.3));
    CHECK_MSG(bad == 0, "bf16 %d x %d x %d: %d elements differ from the vdpbf16ps model", N, IC, OC, bad);
    CHECK_MSG(differ == 0, "bf16 %d x %d x %d: %d results depend on batching or threads", N, IC, OC, differ);
    CHECK_MSG(maxrel < 2e-2, "bf16 %d x %d x %d: %.3g from fp32 (relative to the output scale)", N, IC, OC, maxrel);
    printf("gemm bf16 %4d x %4d x %4d%s: equal to the vdpbf16ps model on every path (hardware bf16: %s), "
           "batch/thread-invariant, %.2g from fp32\n", N, IC, OC, tiny ? " (subnormals)" : "",
           qac_cpu_bf16() ? "yes" : "no", maxrel);
    qac_gemm_packed_free(&pw);
    qac_gemm_packed_free(&pf);
    free(a), free(w), free(bias), free(res), free(out), free(out2);
}

/* qac_gemm_then: the post step gets each row once, finished */
typedef struct {
    const float *out, *want;
    int OC, *seen, bad;
} post_check;

static void post_record(void *vctx, int r0, int r1) {
    post_check *c = vctx;
    for (int r = r0; r < r1; r++) {
        __atomic_fetch_add(&c->seen[r], 1, __ATOMIC_RELAXED);
        if (memcmp(c->out + (size_t)r * c->OC, c->want + (size_t)r * c->OC, sizeof(float) * (size_t)c->OC))
            __atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
    }
}

static void check_then(int N, int IC, int OC, int bf16) {
    float *a = malloc(sizeof(float) * (size_t)N * IC), *w = malloc(sizeof(float) * (size_t)OC * IC);
    float *bias = malloc(sizeof(float) * OC), *want = malloc(sizeof(float) * (size_t)N * OC);
    float *out = malloc(sizeof(float) * (size_t)N * OC);
    int *seen = calloc((size_t)N, sizeof(int));
    for (size_t i = 0; i < (size_t)N * IC; i++) a[i] = frand();
    for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = frand();
    for (int i = 0; i < OC; i++) bias[i] = frand();
    qac_packed_w pw;
    CHECK_OK(bf16 ? qac_gemm_pack_bf16(&pw, w, OC, IC) : qac_gemm_pack(&pw, w, OC, IC));
    CHECK_OK(qac_gemm(want, a, &pw, bias, NULL, N, NULL, NULL));
    for (int t = 1; t <= 3; t++) {
        qac_pool *p = NULL;
        if (t > 1) CHECK_OK(qac_pool_create(&p, t));
        memset(seen, 0, sizeof(int) * (size_t)N);
        post_check c = {out, want, OC, seen, 0};
        CHECK_OK(qac_gemm_then(out, a, &pw, bias, NULL, N, NULL, p, post_record, &c));
        int wrong = 0;
        for (int r = 0; r < N; r++) wrong += seen[r] != 1;
        CHECK_MSG(wrong == 0 && c.bad == 0, "%s then %d x %d x %d, %d threads: %d rows not seen once, %d unfinished",
                  bf16 ? "bf16" : "fp32", N, IC, OC, t, wrong, c.bad);
        qac_pool_free(p);
    }
    qac_gemm_packed_free(&pw);
    free(a), free(w), free(bias), free(want), free(out), free(seen);
}

/* every path this CPU runs; the portable one everywhere */
static void check_shape(int N, int IC, int OC) {
    for (int isa = QAC_ISA_GENERIC; isa <= (int)qac_cpu_isa_best(); isa++) check_shape_isa(N, IC, OC, (qac_isa)isa);
}

int main(void) {
    printf("ISA paths on this CPU: generic..%s\n", qac_cpu_isa_name(qac_cpu_isa_best()));
    check_shape(37, 384, 1152);
    check_shape(100, 1536, 384);
    check_shape(13, 32, 20);  /* attention-sized, a padded panel */
    check_shape(25, 64, 40);  /* a panel pair, then a lone padded panel */
    check_shape(7, 5, 3);
    check_shape(1, 1, 1);
    check_bf16(37, 384, 1152, 0);
    check_bf16(13, 33, 20, 0); /* odd IC: a zero-padded last pair */
    check_bf16(25, 64, 40, 1);
    check_bf16(1, 1, 1, 0);
    check_then(1, 64, 40, 0);
    check_then(88, 384, 1536, 0); /* a 4-query batch of 22 tokens: 8 tiles on 3 threads */
    check_then(301, 384, 96, 1);
    qac_packed_w pw;
    CHECK_ERR(qac_gemm_pack(&pw, NULL, 0, 4), QAC_ERR_INVALID, "bad shape");
    return qac_test_summary();
}
