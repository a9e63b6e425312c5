/* The element-wise kernels (model/vecmath.c) give the same bits on every
 * ISA path the CPU has, at lengths with and without a tail, and stay close
 * to libm (the polynomials' documented accuracy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_cpu.h"
#include "testutil.h"
#include "vecmath.h"

static unsigned long long rng = 0x9E3779B97F4A7C15ULL;
static float frand(float scale) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return scale * (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

#define MAXN 1600

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
    free(pre);
    return (size_t)(o - out);
}

int main(void) {
    static const int lens[] = {1, 7, 16, 20, 33, 128, 384, 768, 1536};
    float *x = malloc(sizeof(float) * MAXN), *g = malloc(sizeof(float) * MAXN), *w = malloc(sizeof(float) * MAXN),
          *b = malloc(sizeof(float) * MAXN), *ref = malloc(sizeof(float) * 8 * MAXN), *got = malloc(sizeof(float) * 8 * MAXN);
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
        double total = 0;
        for (int i = 0; i < n; i++) total += row[i];
        CHECK_MSG(fabs(total - 1) < 1e-6, "n %d: softmax of the extreme row sums to %.9g", n, total);
        for (int isa = QAC_ISA_AVX2; isa <= (int)best; isa++) {
            size_t m2 = run_all((qac_isa)isa, x, g, w, b, n, got);
            int differ = m2 != m;
            for (size_t i = 0; i < m && !differ; i++) differ = memcmp(&ref[i], &got[i], sizeof(float)) != 0;
            CHECK_MSG(!differ, "n %d: the %s path differs from the generic one", n, qac_cpu_isa_name((qac_isa)isa));
        }
        printf("n %4d: gelu, bias+gelu, gelu', softmax, layernorm: same bits on every path (gelu err %.2g, softmax %.2g)\n",
               n, e_gelu, e_soft);
    }
    qac_cpu_set_isa(best);
    free(x), free(g), free(w), free(b), free(ref), free(got);
    return qac_test_summary();
}
