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
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    *(o + n) = qac_vm_exp_shift_sum(o, n, mx), o += n + 1;
    qac_vm_layernorm_row(o, o + n, o + n + 1, x, w, b, n, 1e-12f), o += n + 2;
    free(pre);
    return (size_t)(o - out);
}

int main(void) {
    static const int lens[] = {1, 7, 16, 33, 128, 384, 768, 1536};
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
        for (int isa = QAC_ISA_AVX2; isa <= (int)best; isa++) {
            size_t m2 = run_all((qac_isa)isa, x, g, w, b, n, got);
            int differ = m2 != m;
            for (size_t i = 0; i < m && !differ; i++) differ = memcmp(&ref[i], &got[i], sizeof(float)) != 0;
            CHECK_MSG(!differ, "n %d: the %s path differs from the generic one", n, qac_cpu_isa_name((qac_isa)isa));
        }
        printf("n %4d: gelu, bias+gelu, gelu', exp-sum, layernorm: same bits on every path (gelu err %.2g)\n", n,
               e_gelu);
    }
    qac_cpu_set_isa(best);
    free(x), free(g), free(w), free(b), free(ref), free(got);
    return qac_test_summary();
}
