/* The int8 mode of the encoder's matrix product (model/gemm_int8.c), on
 * every path this CPU runs (portable C; AVX-VNNI on the AVX2 path and
 * AVX512-VNNI on the AVX-512 path where the CPU has them):
 *  - the int32 accumulators, exactly: integer-valued weights (a 127 in each
 *    row: scale 1, q = W) and rows (0..255 with both ends: zero point 0, or
 *    -128..127 with both ends: zero point 128), so every output is the exact
 *    integer dot product (+ integer bias and residual), which this test
 *    computes in int64; any slip in a lane, a k step, a panel's padding or
 *    the zero point's compensation changes a result (IC <= 500 keeps every
 *    |sum| below 2^24, where float holds integers exactly);
 *  - random rows: every element bit-equal to a plain C model of the
 *    documented arithmetic (per-row asymmetric quantisation, int32 sum, two
 *    float multiplies, bias, residual), the same on every path, and
 *    independent of the rows beside it, the row count and the threads,
 *    with rows that need the quantiser's clamp to [0, 255] (clamp_row);
 *  - the dequantised output against the exact product in double, within
 *    the bound the quantisation steps give (derived at check_bound);
 *  - rows quantised ahead (qac_gemm_q8: by the FFN's GELU step in the
 *    encoder, or in any order of row ranges): the same bits as qac_gemm
 *    on the float rows, on every path and thread count. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gemm.h"
#include "gemm_int8.h"
#include "qac_cpu.h"
#include "testutil.h"

static unsigned long long rng = 88172645463325252ULL;
static unsigned long long next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float frand(void) { return (float)((double)(next() >> 11) / 9007199254740992.0 - 0.5); }
static int irand(int lo, int hi) { return lo + (int)(next() % (unsigned long long)(hi - lo + 1)); }

/* the paths to run: every one up to the CPU's best */
static int n_isas(void) { return (int)qac_cpu_isa_best() + 1; }

static const char *path_name(void) {
    int v = qac_cpu_vnni();
    return v == 512 ? "avx512-vnni" : v == 256 ? "avx-vnni" : "portable";
}

/* ---- 1. exact integers ---- */
static void check_exact(int N, int IC, int OC) {
    float *w = malloc(sizeof(float) * (size_t)OC * IC), *x = malloc(sizeof(float) * (size_t)N * IC);
    float *bias = malloc(sizeof(float) * OC), *res = malloc(sizeof(float) * (size_t)N * OC);
    float *out = malloc(sizeof(float) * (size_t)N * OC);
    for (int o = 0; o < OC; o++) {
        for (int k = 0; k < IC; k++) w[(size_t)o * IC + k] = (float)irand(-127, 127);
        w[(size_t)o * IC + irand(0, IC - 1)] = (o & 1) ? -127.0f : 127.0f; /* max |w| = 127: scale 1 */
        bias[o] = (float)irand(-1000, 1000);
    }
    for (int n = 0; n < N; n++) {
        int neg = n & 1; /* odd rows: -128..127 (zero point 128); even: 0..255 (zero point 0) */
        float *row = x + (size_t)n * IC;
        for (int k = 0; k < IC; k++) row[k] = (float)(neg ? irand(-128, 127) : irand(0, 255));
        if (IC >= 2) { /* both ends present: hi - lo = 255, inv = 1 */
            int a = irand(0, IC - 1), b = (a + 1 + irand(0, IC - 2)) % IC;
            row[a] = neg ? -128.0f : 0.0f;
            row[b] = neg ? 127.0f : 255.0f;
        }
        for (int o = 0; o < OC; o++) res[(size_t)n * OC + o] = (float)irand(-1000, 1000);
    }
    qac_packed_w pw;
    CHECK_OK(qac_gemm_pack_int8(&pw, w, OC, IC));
    for (int isa = 0; isa < n_isas(); isa++) {
        qac_cpu_set_isa((qac_isa)isa);
        int bad = 0;
        for (int with = 0; with < 2; with++) {
            if (with) memcpy(out, res, sizeof(float) * (size_t)N * OC);
            CHECK_OK(qac_gemm(out, x, &pw, with ? bias : NULL, with ? out : NULL, N, NULL, NULL));
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OC; o++) {
                    int64_t dot = 0;
                    for (int k = 0; k < IC; k++)
                        dot += (int64_t)x[(size_t)n * IC + k] * (int64_t)w[(size_t)o * IC + k];
                    if (with) dot += (int64_t)bias[o] + (int64_t)res[(size_t)n * OC + o];
                    bad += out[(size_t)n * OC + o] != (float)dot;
                }
        }
        CHECK_MSG(bad == 0, "%s %d x %d x %d: %d integer results differ from the exact dot product", path_name(), N,
                  IC, OC, bad);
        printf("int8 gemm %-11s %4d x %4d x %4d: int32 sums exact (zero points 0 and 128)\n", path_name(), N, IC, OC);
    }
    qac_cpu_set_isa(qac_cpu_isa_best());
    qac_gemm_packed_free(&pw);
    free(w), free(x), free(bias), free(res), free(out);
}

/* ---- 2. the documented arithmetic, in plain C ---- */
static void ref_quant_weights(int8_t *q, float *scale, const float *w, int OC, int IC) {
    for (int o = 0; o < OC; o++) {
        float amax = 0;
        for (int k = 0; k < IC; k++) amax = fmaxf(amax, fabsf(w[(size_t)o * IC + k]));
        scale[o] = amax / 127.0f;
        for (int k = 0; k < IC; k++) {
            long v = scale[o] > 0 ? lrintf(w[(size_t)o * IC + k] / scale[o]) : 0;
            q[(size_t)o * IC + k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
    }
}

static int ref_clamped; /* elements ref_quant_row took to 0 or 255 by its clamp */

static void ref_quant_row(uint8_t *u, float *scale, int32_t *zp, const float *x, int IC) {
    float lo = 0, hi = 0;
    for (int k = 0; k < IC; k++) lo = fminf(lo, x[k]), hi = fmaxf(hi, x[k]);
    float inv = 0;
    *scale = 0, *zp = 0;
    if (hi > lo) {
        *scale = (hi - lo) / 255.0f;
        inv = 255.0f / (hi - lo);
        long z = lrintf(-lo * inv);
        *zp = (int32_t)(z < 0 ? 0 : z > 255 ? 255 : z);
    }
    for (int k = 0; k < IC; k++) {
        if (isnan(x[k])) { /* documented (gemm_int8.c): level 0 */
            u[k] = 0;
            ref_clamped++;
            continue;
        }
        long v = lrintf(x[k] * inv) + *zp;
        ref_clamped += v < 0 || v > 255;
        u[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* Rows that need the quantiser's clamp to [0, 255] (the other rows never
 * leave it):
 *  - above: a row whose ends are -a and a has inv = 255 / 2a, so a inv =
 *    -lo inv = 127.5 (a power of two a: exactly) and both round half to
 *    even, up to 128: the zero point is 128 and the element a gives 128 +
 *    128 = 256, kept at 255 only by the clamp. For finite rows this tie is
 *    the only way past 255 (x inv + zp <= hi inv + zp, and hi inv + -lo inv
 *    = 255 up to the products' roundings).
 *  - below: for finite x >= lo, rint(x inv) >= rint(lo inv) = -zp, so
 *    nothing finite goes under 0; a NaN element does (x86 converts it to
 *    INT_MIN, and the unsigned saturation of the AVX-512 path would make it
 *    255 without the clamp at 0). NaN rows on x86 only: elsewhere lrintf
 *    of a NaN, which the portable path uses, is unspecified.
 * Returns 1 where row is made one of them. */
static int clamp_row(float *row, int n, int IC) {
    if (IC < 2) return 0;
    int a = irand(0, IC - 1), b = (a + 1 + irand(0, IC - 2)) % IC;
    if (n % 6 == 5) { /* symmetric ends, some interior ties as well */
        float e = n % 12 == 5 ? 1.0f : 0.25f;
        for (int k = 0; k < IC; k++) row[k] = e * 2.0f * frand();
        row[a] = e, row[b] = -e;
        for (int k = 0; k < IC; k += 5) row[k] = k % 2 ? e : -e;
        return 1;
    }
#if defined(__x86_64__)
    if (n % 6 == 4) { /* a NaN or two in a row with negatives (zero point > 0) */
        for (int k = 0; k < IC; k++) row[k] = frand();
        row[a] = NAN;
        if (IC > 8) row[b] = NAN;
        return 1;
    }
#endif
    return 0;
}

static float ref_out(const uint8_t *u, float sa, int32_t zp, const int8_t *q, float sw, int IC, const float *bias,
                     const float *resid) {
    int32_t acc = 0, qsum = 0;
    for (int k = 0; k < IC; k++) acc += (int32_t)u[k] * q[k], qsum += q[k];
    float v = (float)(acc - zp * qsum) * sw;
    v = v * sa;
    if (bias) v = v + *bias;
    if (resid) v = v + *resid;
    return v;
}

/* |out - x.w| for row x and weight row w: x_k = sa (u_k - zp) + ea_k with
 * |ea_k| <= sa (half a step from rounding; at most a whole step where the
 * rounded zero point pushes a value at the range's end past 0 or 255 and it
 * is clamped), w_k = sw q_k + ew_k with |ew_k| <= sw / 2; so
 * x.w - sa sw sum (u - zp) q = sum ea_k w_k + sum sa (u_k - zp) ew_k, at most
 * sa sum|w_k| + sw / 2 (sum|x_k| + IC sa). The float epilogue adds four
 * roundings (the int32 sum to float past 2^24, two multiplies, the bias),
 * each relative 2^-24 of a value below |x.w| + that bound + |bias|. */
static double bound(const float *x, const float *w, int IC, float sa, float sw, double ref, float bias) {
    double sw_abs = 0, sx_abs = 0;
    for (int k = 0; k < IC; k++) sw_abs += fabs(w[k]), sx_abs += fabs(x[k]);
    double q = sa * sw_abs + 0.5 * sw * (sx_abs + IC * (double)sa);
    return q + 4 * (FLT_EPSILON / 2) * (fabs(ref) + q + fabs(bias)) * 1.0001;
}

static void check_random(int N, int IC, int OC) {
    float *w = malloc(sizeof(float) * (size_t)OC * IC), *x = malloc(sizeof(float) * (size_t)N * IC);
    float *bias = malloc(sizeof(float) * OC), *res = malloc(sizeof(float) * (size_t)N * OC);
    float *out = malloc(sizeof(float) * (size_t)N * OC), *out2 = malloc(sizeof(float) * (size_t)N * OC);
    int8_t *q = malloc((size_t)OC * IC);
    float *sw = malloc(sizeof(float) * OC);
    uint8_t *u = malloc((size_t)IC + 4), *u2 = malloc((size_t)IC + 4);
    for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = frand();
    for (int o = 0; o < OC; o++) bias[o] = frand();
    for (int n = 0; n < N; n++) {
        /* row kinds: centred, shifted positive (a GELU output), a few outliers, all zero */
        float shift = n % 4 == 1 ? 0.4f : 0.0f, *row = x + (size_t)n * IC;
        for (int k = 0; k < IC; k++) row[k] = n % 4 == 3 && n % 8 == 7 ? 0.0f : frand() + shift;
        if (n % 4 == 2) row[irand(0, IC - 1)] = 20.0f * (frand() > 0 ? 1 : -1);
        clamp_row(row, n, IC);
    }
    for (size_t i = 0; i < (size_t)N * OC; i++) res[i] = frand();
    for (int o = 0; o < OC; o += 7) /* an all-zero weight row: scale 0 */
        if (o % 3 == 2) memset(w + (size_t)o * IC, 0, sizeof(float) * IC);
    ref_quant_weights(q, sw, w, OC, IC);
    qac_packed_w pw;
    CHECK_OK(qac_gemm_pack_int8(&pw, w, OC, IC));
    int bad_pack = 0;
    for (int o = 0; o < OC; o++) {
        bad_pack += pw.qscale[o] != sw[o];
        for (int k = 0; k < IC; k++)
            bad_pack += pw.pq[((size_t)(o / 16) * ((IC + 3) / 4) * 16 + (size_t)(k / 4) * 16 + o % 16) * 4 + k % 4] !=
                        q[(size_t)o * IC + k];
    }
    CHECK_MSG(bad_pack == 0, "%d x %d: %d packed weights or scales differ from the plain quantisation", OC, IC,
              bad_pack);
    for (int isa = 0; isa < n_isas(); isa++) {
        qac_cpu_set_isa((qac_isa)isa);
        int bad_q = 0, bad = 0, differ = 0, over = 0;
        double worst = 0;
        ref_clamped = 0;
        for (int n = 0; n < N; n++) { /* the quantiser itself */
            float s1, s2;
            int32_t z1, z2;
            ref_quant_row(u, &s1, &z1, x + (size_t)n * IC, IC);
            qac_gemm_int8_quantize_row(u2, &s2, &z2, x + (size_t)n * IC, IC);
            bad_q += s1 != s2 || z1 != z2 || memcmp(u, u2, (size_t)IC) != 0;
            for (int k = IC; k < (IC + 3) / 4 * 4; k++) bad_q += u2[k] != 0;
        }
        int clamped = ref_clamped; /* this round's rows, counted once */
        ref_clamped = 0;
        memcpy(out, res, sizeof(float) * (size_t)N * OC);
        CHECK_OK(qac_gemm(out, x, &pw, bias, out, N, NULL, NULL));
        for (int n = 0; n < N; n++) {
            float sa;
            int32_t zp;
            ref_quant_row(u, &sa, &zp, x + (size_t)n * IC, IC);
            for (int o = 0; o < OC; o++) {
                float want = ref_out(u, sa, zp, q + (size_t)o * IC, sw[o], IC, bias + o, res + (size_t)n * OC + o);
                float got = out[(size_t)n * OC + o];
                bad += memcmp(&want, &got, sizeof want) != 0;
                double exact = 0;
                for (int k = 0; k < IC; k++) exact += (double)x[(size_t)n * IC + k] * w[(size_t)o * IC + k];
                exact += (double)bias[o] + res[(size_t)n * OC + o];
                double err = fabs(got - exact),
                       b = bound(x + (size_t)n * IC, w + (size_t)o * IC, IC, sa, sw[o], exact, bias[o] + res[(size_t)n * OC + o]);
                if (isnan(exact)) continue; /* a NaN row: bit-equality above is its check */
                over += err > b;
                worst = err / b > worst ? err / b : worst;
            }
        }
        /* rows alone and in odd sub-batches; 2 and 3 threads */
        for (int n = 0; n < N; n += 1 + n % 5) {
            int m = 1 + (n * 7) % 9;
            if (n + m > N) m = N - n;
            memcpy(out2, res + (size_t)n * OC, sizeof(float) * (size_t)m * OC);
            CHECK_OK(qac_gemm(out2, x + (size_t)n * IC, &pw, bias, out2, m, NULL, NULL));
            differ += memcmp(out2, out + (size_t)n * OC, sizeof(float) * (size_t)m * OC) != 0;
        }
        for (int t = 2; t <= 3; t++) {
            qac_pool *p = NULL;
            CHECK_OK(qac_pool_create(&p, t));
            memcpy(out2, res, sizeof(float) * (size_t)N * OC);
            CHECK_OK(qac_gemm(out2, x, &pw, bias, out2, N, NULL, p));
            differ += memcmp(out2, out, sizeof(float) * (size_t)N * OC) != 0;
            qac_pool_free(p);
        }
        CHECK_MSG(bad_q == 0, "%s IC %d: %d rows quantised unlike the plain C model", path_name(), IC, bad_q);
        /* every shape with the clamp's rows (clamp_row: from row 4) reaches it */
        CHECK_MSG(N < 6 || clamped > 0, "%s %d x %d: no element needed the clamp to [0, 255]", path_name(), N, IC);
        CHECK_MSG(bad == 0, "%s %d x %d x %d: %d elements differ from the plain C model", path_name(), N, IC, OC, bad);
        CHECK_MSG(differ == 0, "%s %d x %d x %d: %d results depend on batching or threads", path_name(), N, IC, OC,
                  differ);
        CHECK_MSG(over == 0, "%s %d x %d x %d: %d elements past the quantisation bound (worst %.3f of it)",
                  path_name(), N, IC, OC, over, worst);
        printf("int8 gemm %-11s %4d x %4d x %4d: bit-equal to the C model (%d elements clamped to [0, 255]), "
               "batch/thread-invariant, error <= %.3f of the bound\n",
               path_name(), N, IC, OC, clamped, worst);
    }
    qac_cpu_set_isa(qac_cpu_isa_best());
    qac_gemm_packed_free(&pw);
    free(w), free(x), free(bias), free(res), free(out), free(out2), free(q), free(sw), free(u), free(u2);
}

/* ---- 3. rows quantised ahead ---- */
static void check_q8(int N, int IC, int I, int OC) {
    float *x = malloc(sizeof(float) * (size_t)N * IC), *w1 = malloc(sizeof(float) * (size_t)I * IC);
    float *b1 = malloc(sizeof(float) * I), *w2 = malloc(sizeof(float) * (size_t)OC * I), *b2 = malloc(sizeof(float) * OC);
    float *res = malloc(sizeof(float) * (size_t)N * OC), *act = malloc(sizeof(float) * (size_t)N * I);
    float *act2 = malloc(sizeof(float) * (size_t)N * I), *out = malloc(sizeof(float) * (size_t)N * OC);
    float *out2 = malloc(sizeof(float) * (size_t)N * OC);
    void *q8 = malloc(qac_gemm_q8_bytes(N, I));
    float *pre = malloc(sizeof(float) * (size_t)N * I), *pre2 = malloc(sizeof(float) * (size_t)N * I);
    for (size_t i = 0; i < (size_t)N * IC; i++) x[i] = 2 * frand();
    for (size_t i = 0; i < (size_t)I * IC; i++) w1[i] = frand();
    for (size_t i = 0; i < (size_t)OC * I; i++) w2[i] = frand();
    for (int i = 0; i < I; i++) b1[i] = frand();
    for (int i = 0; i < OC; i++) b2[i] = frand();
    for (size_t i = 0; i < (size_t)N * OC; i++) res[i] = frand();
    qac_packed_w p1, p2;
    CHECK_OK(qac_gemm_pack_int8(&p1, w1, I, IC));
    CHECK_OK(qac_gemm_pack_int8(&p2, w2, OC, I));
    for (int isa = 0; isa < n_isas(); isa++) {
        qac_cpu_set_isa((qac_isa)isa);
        int differ = 0;
        /* the encoder's FFN unfused: GELU's float rows, quantised inside the product */
        CHECK_OK(qac_matmul_gelu_packed(act, NULL, x, &p1, b1, N, NULL, NULL));
        CHECK_OK(qac_gemm(out, act, &p2, b2, res, N, NULL, NULL));
        /* with the pre-activation kept: it is the product plus bias, and the
         * activation the same int8 GELU of it */
        CHECK_OK(qac_matmul_gelu_packed(act2, pre, x, &p1, b1, N, NULL, NULL));
        CHECK_OK(qac_gemm(pre2, x, &p1, b1, NULL, N, NULL, NULL));
        int kept = memcmp(act2, act, sizeof(float) * (size_t)N * I) != 0;
        int kept_pre = memcmp(pre, pre2, sizeof(float) * (size_t)N * I) != 0;
        CHECK_MSG(!kept && !kept_pre, "%s %d x %d x %d: with the pre-activation kept, the activation (%d) or the "
                  "pre-activation (%d) differs", path_name(), N, IC, I, kept, kept_pre);
        for (int t = 1; t <= 3; t++) {
            qac_pool *p = NULL;
            if (t > 1) CHECK_OK(qac_pool_create(&p, t));
            memset(q8, 0xa5, qac_gemm_q8_bytes(N, I)); /* nothing left from the last round */
            CHECK_OK(qac_matmul_gelu_q8(act2, x, &p1, b1, N, NULL, q8, p)); /* act2: its blocks' scratch */
            CHECK_OK(qac_gemm_q8(out2, q8, &p2, b2, res, N, p));
            differ += memcmp(out2, out, sizeof(float) * (size_t)N * OC) != 0;
            /* the float rows quantised in odd ranges, last first */
            memset(q8, 0x5a, qac_gemm_q8_bytes(N, I));
            for (int e = N; e > 0;) {
                int b = e - 1 - (e * 5) % 7;
                b = b < 0 ? 0 : b;
                qac_gemm_q8_quantize(q8, N, I, act, b, e);
                e = b;
            }
            CHECK_OK(qac_gemm_q8(out2, q8, &p2, b2, NULL, N, p));
            CHECK_OK(qac_gemm(act2, act, &p2, b2, NULL, N, NULL, p)); /* act2 reused: out without the residual */
            differ += memcmp(out2, act2, sizeof(float) * (size_t)N * OC) != 0;
            qac_pool_free(p);
        }
        CHECK_MSG(differ == 0, "%s %d x %d x %d x %d: %d results of the rows quantised ahead differ from qac_gemm's",
                  path_name(), N, IC, I, OC, differ);
        printf("int8 gemm %-11s %4d x %4d x %4d x %4d: rows quantised ahead (by GELU, or in any ranges) give "
               "qac_gemm's bits, 1-3 threads\n",
               path_name(), N, IC, I, OC);
    }
    qac_cpu_set_isa(qac_cpu_isa_best());
    /* float weights have no quantised product */
    qac_packed_w pf;
    CHECK_OK(qac_gemm_pack(&pf, w2, OC, I));
    CHECK_ERR(qac_gemm_q8(out2, q8, &pf, NULL, NULL, N, NULL), QAC_ERR_INVALID, "int8 weights");
    qac_gemm_packed_free(&pf);
    qac_gemm_packed_free(&p1), qac_gemm_packed_free(&p2);
    free(x), free(w1), free(b1), free(w2), free(b2), free(res), free(act), free(act2), free(out), free(out2), free(q8);
    free(pre), free(pre2);
}

int main(void) {
    printf("CPU: best path %s, VNNI %d bits there\n", qac_cpu_isa_name(qac_cpu_isa_best()), qac_cpu_vnni());
    static const int shapes[][3] = {{1, 4, 16}, {5, 7, 3}, {13, 64, 33}, {25, 130, 48}, {37, 384, 100}, {12, 500, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_exact(shapes[i][0], shapes[i][1], shapes[i][2]);
    static const int rshapes[][3] = {{1, 3, 5}, {7, 33, 17}, {29, 384, 70}, {40, 1536, 40}};
    for (size_t i = 0; i < sizeof rshapes / sizeof rshapes[0]; i++)
        check_random(rshapes[i][0], rshapes[i][1], rshapes[i][2]);
    /* a few rows; more than one block of rows on 3 threads, with a short last tile; k past 16 with a tail */
    check_q8(5, 24, 70, 20);
    check_q8(410, 64, 1536, 40);
    check_q8(37, 48, 100, 33);
    /* blocks of 84 rows at most (IC 1536): each thread's part of the
     * activation holds a block, so GELU's blocks run in their thread's own
     * lines (qac_gemm_then_local) on 1-3 threads */
    check_q8(300, 1536, 200, 24);
    /* a packed weight frees cleanly, and a bad shape is refused */
    qac_packed_w pw;
    float w1 = 1.0f;
    CHECK_ERR(qac_gemm_pack_int8(&pw, &w1, 0, 1), QAC_ERR_INVALID, "bad shape");
    return qac_test_summary();
}
