/* The element-wise kernels (model/vecmath.c) give the same bits on every
 * ISA path the CPU has, at lengths with and without a tail, and stay close
 * to libm (the polynomials' documented accuracy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_cpu.h"
#include "testutil.h"
#include "gelu_table.h"
#include "vecmath.h"

static unsigned long long rng = 0x9E3779B97F4A7C15ULL;
static float frand(float scale) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return scale * (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

#define MAXN 1600
#define OUTS 13 /* run_all's outputs, in rows of MAXN */

/* every kernel on one path, outputs concatenated into out */
static size_t run_all(qac_isa isa, const float *x, const float *g, const float *w, const float *b, int n, float *out) {
    qac_cpu_set_isa(isa);
    float *o = out, *pre = malloc(sizeof(float) * MAXN);
    qac_vm_gelu(o, x, (size_t)n), o += n;
    memcpy(pre, x, sizeof(float) * n);
    qac_vm_bias_gelu(o, pre, b, n, 1), o += n;
    memcpy(o, pre, sizeof(float) * n), o += n;
    qac_vm_gelu_backward(o, g, x, (size_t)n), o += n;
    memcpy(o, x, sizeof(float) * n);
    qac_vm_softmax_row(o, n), o += n;
    qac_vm_layernorm_row(o, o + n, o + n + 1, x, w, b, n, 1e-12f), o += n + 2;
    memcpy(o, x, sizeof(float) * n); /* the int8 FFN's GELU, with a bias, and its range */
    qac_vm_gelu_q8(o, b, n, o + n, o + n + 1), o += n + 2;
    memcpy(o, x, sizeof(float) * n); /* a NaN comes out as NaN, and the range ignores it */
    o[n / 2] = NAN;
    qac_vm_gelu_q8(o, NULL, n, o + n, o + n + 1), o += n + 2;
    memcpy(o, x, sizeof(float) * n);
    qac_vm_softmax_row_b16(o, n), o += n;
    free(pre);
    return (size_t)(o - out);
}

int main(void) {
    static const int lens[] = {1, 7, 16, 20, 33, 128, 384, 768, 1536};
    float *x = malloc(sizeof(float) * MAXN), *g = malloc(sizeof(float) * MAXN), *w = malloc(sizeof(float) * MAXN),
          *b = malloc(sizeof(float) * MAXN), *ref = malloc(sizeof(float) * OUTS * MAXN), *got = malloc(sizeof(float) * OUTS * MAXN);
    qac_isa best = qac_cpu_isa_best();
    printf("ISA paths on this CPU: generic..%s\n", qac_cpu_isa_name(best));
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        for (int i = 0; i < n; i++) x[i] = frand(6), g[i] = frand(1), w[i] = frand(2), b[i] = frand(1);
        x[0] = -100.0f; /* exp underflow and GELU's far tail */
        if (n > 1) x[n - 1] = 95.0f;
        size_t m = run_all(QAC_ISA_GENERIC, x, g, w, b, n, ref);
        /* accuracy of the generic path against libm */
        double e_gelu = 0;
        for (int i = 0; i < n; i++) {
            double want = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
            e_gelu = fmax(e_gelu, fabs(ref[i] - want));
        }
        CHECK_MSG(e_gelu < 1e-5 * 95, "n %d: GELU off by %.3g", n, e_gelu);
        /* softmax: relative to libm in double, on a row without the -100/95
         * extremes (which leave one element at 1 and the rest underflowed).
         * Bound: exp's 2 ulp, the division and product, and the sum's
         * rounding over n/16-long lane chains (about 2^-24 each step) */
        double e_soft = 0, s = 0;
        float *row = ref + 4 * (size_t)n, *y = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) y[i] = x[i] / 4;
        qac_cpu_set_isa(QAC_ISA_GENERIC);
        qac_vm_softmax_row(y, n);
        double mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = fmax(mx, x[i] / 4.0f);
        for (int i = 0; i < n; i++) s += exp(x[i] / 4.0f - mx);
        for (int i = 0; i < n; i++) {
            double want = exp(x[i] / 4.0f - mx) / s;
            e_soft = fmax(e_soft, fabs(y[i] - want) / want);
        }
        free(y);
        CHECK_MSG(e_soft < 1.5e-6 + n / 16 * 6e-8, "n %d: softmax off by %.3g (relative)", n, e_soft);
        /* the softmax for bf16 probabilities, on the same row. Bound, per
         * element: its exp within 2.7e-6 of exp of its rounded argument
         * (vecmath.h), that argument (x - max, then times log2 e) off by
         * 2^-24 |x - max| twice (an absolute error of the exp's argument,
         * a relative one of its value), the same for the sum's terms at most
         * (2.7e-6 + 2^-23 max|x - max|) with the sum's own rounding over
         * n/16-long lane chains and the fold (2^-24 a step), and the
         * division and product (2^-24 each) */
        double e_b16 = 0, worst_b16 = 0, spread = 0;
        y = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) y[i] = x[i] / 4, spread = fmax(spread, mx - x[i] / 4.0f);
        qac_vm_softmax_row_b16(y, n);
        for (int i = 0; i < n; i++) {
            double want = exp(x[i] / 4.0f - mx) / s, err = fabs(y[i] - want) / want;
            double bd = (2.7e-6 + 0x1p-23 * (mx - x[i] / 4.0f)) + (2.7e-6 + 0x1p-23 * spread) +
                        (n / 16 + 4) * 0x1p-24 + 2 * 0x1p-24;
            e_b16 = fmax(e_b16, err), worst_b16 = fmax(worst_b16, err / bd);
        }
        free(y);
        CHECK_MSG(worst_b16 <= 1, "n %d: the bf16 softmax off by %.3g (relative), %.2f of its bound", n, e_b16,
                  worst_b16);
        const float *sb = ref + 6 * (size_t)n + 2 + (size_t)n + 2 + (size_t)n + 2; /* the extreme row */
        double tb = 0;
        for (int i = 0; i < n; i++) tb += sb[i];
        CHECK_MSG(fabs(tb - 1) < 1e-5, "n %d: the bf16 softmax of the extreme row sums to %.9g", n, tb);
        double total = 0;
        for (int i = 0; i < n; i++) total += row[i];
        CHECK_MSG(fabs(total - 1) < 1e-6, "n %d: softmax of the extreme row sums to %.9g", n, total);
        /* the int8 FFN's GELU against libm in double, relative to |v|, v = x +
         * b as the kernel adds them. Bound: with d = GELU_Q8_E_ERR + 2^-24
         * (the table's error over every float, from its generator, and the
         * one float ulp below 1 its FMA emulation may differ by), the last
         * FMA t p + v is off by t d before rounding and rounds to within
         * 2^-24 of its value (at most 2 |v|), and 0.5 is exact: |v| (d / 2 +
         * 2^-24). */
        double e_q8 = 0, bound = 0.5 * (GELU_Q8_E_ERR + 0x1p-24) + 0x1p-24;
        const float *q8 = ref + 6 * (size_t)n + 2;
        float qlo = 0, qhi = 0;
        for (int i = 0; i < n; i++) {
            double v = x[i] + b[i], want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
            e_q8 = fmax(e_q8, fabs(q8[i] - want) / fmax(fabs(v), 1e-30));
            qlo = q8[i] < qlo ? q8[i] : qlo, qhi = q8[i] > qhi ? q8[i] : qhi;
        }
        CHECK_MSG(e_q8 <= bound, "n %d: the int8 GELU off by %.3g of |x| (bound %.3g)", n, e_q8, bound);
        CHECK_MSG(q8[n] == qlo && q8[n + 1] == qhi, "n %d: the int8 GELU's range [%g, %g], its outputs' [%g, %g]", n,
                  q8[n], q8[n + 1], qlo, qhi);
        const float *qn = q8 + n + 2;
        CHECK_MSG(isnan(qn[n / 2]), "n %d: the int8 GELU of NaN is %g", n, qn[n / 2]);
        qlo = qhi = 0;
        for (int i = 0; i < n; i++)
            if (i != n / 2) qlo = qn[i] < qlo ? qn[i] : qlo, qhi = qn[i] > qhi ? qn[i] : qhi;
        CHECK_MSG(qn[n] == qlo && qn[n + 1] == qhi, "n %d: with a NaN, the int8 GELU's range [%g, %g], not [%g, %g]", n,
                  qn[n], qn[n + 1], qlo, qhi);
        for (int isa = QAC_ISA_AVX2; isa <= (int)best; isa++) {
            size_t m2 = run_all((qac_isa)isa, x, g, w, b, n, got);
            int differ = m2 != m;
            for (size_t i = 0; i < m && !differ; i++) differ = memcmp(&ref[i], &got[i], sizeof(float)) != 0;
            CHECK_MSG(!differ, "n %d: the %s path differs from the generic one", n, qac_cpu_isa_name((qac_isa)isa));
        }
        printf("n %4d: gelu, bias+gelu, gelu', softmax, layernorm, int8 gelu, bf16 softmax: same bits on every path "
               "(gelu err %.2g, softmax %.2g, int8 gelu %.2g of |x|, bf16 softmax %.2g)\n",
               n, e_gelu, e_soft, e_q8, e_b16);
    }
    /* the int8 GELU densely over [-8, 8] (2^20 points: every interval of
     * the table, both signs, past its end), with the bound derived above,
     * the same bits on every path */
    {
        int nd = 1 << 20;
        float *d = malloc(sizeof(float) * nd), *e = malloc(sizeof(float) * nd), r[2], r2[2];
        for (int i = 0; i < nd; i++) d[i] = -8.0f + 16.0f * (float)i / (float)nd;
        memcpy(e, d, sizeof(float) * nd);
        qac_cpu_set_isa(QAC_ISA_GENERIC);
        qac_vm_gelu_q8(e, NULL, nd, &r[0], &r[1]);
        double worst = 0, bound = 0.5 * (GELU_Q8_E_ERR + 0x1p-24) + 0x1p-24;
        for (int i = 0; i < nd; i++) {
            double v = d[i], want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
            worst = fmax(worst, fabs(e[i] - want) / fmax(fabs(v), 1e-30));
        }
        CHECK_MSG(worst <= bound, "dense: the int8 GELU off by %.3g of |x| (bound %.3g)", worst, bound);
        for (int isa = QAC_ISA_AVX2; isa <= (int)best; isa++) {
            qac_cpu_set_isa((qac_isa)isa);
            float *f = malloc(sizeof(float) * nd);
            memcpy(f, d, sizeof(float) * nd);
            qac_vm_gelu_q8(f, NULL, nd, &r2[0], &r2[1]);
            CHECK_MSG(!memcmp(e, f, sizeof(float) * nd) && !memcmp(r, r2, sizeof r), "dense: the int8 GELU on %s differs",
                      qac_cpu_isa_name((qac_isa)isa));
            free(f);
        }
        printf("int8 gelu over [-8, 8], 2^20 points: %.3g of |x| at worst (bound %.3g), same bits on every path\n", worst,
               bound);
        free(d), free(e);
    }
    qac_cpu_set_isa(best);
    free(x), free(g), free(w), free(b), free(ref), free(got);
    return qac_test_summary();
}
