/* Element-wise SIMD kernels (see vecmath.h). */
#include "vecmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gelu_table.h"

/* Each kernel is compiled once per ISA path from one body and picked by
 * qac_cpu_isa(); with no contraction (-ffp-contract=off) and lane-wise
 * loops, every path does the same operations per element: the same bits.
 * The polynomials' steps are explicit fmaf calls, one rounding each on
 * every path (an FMA instruction on AVX2 and AVX-512, libm's exact fmaf on
 * the generic one), about a third fewer operations than mul + add.
 * Dispatch is on features, not the CPU model. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "qac_cpu.h"
#define QAC_VM_X86 1
#define V3 __attribute__((target("avx2,fma,f16c")))
#if defined(__clang__)
#define V4 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#else
#define V4 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,prefer-vector-width=512")))
#endif
#endif
#define BODY static inline __attribute__((always_inline))

/* the public function FN PARAMS: FN_body ARGS on the path in use; R is
 * "return" for a value, empty for void */
#ifdef QAC_VM_X86
#define DISPATCH(RET, R, FN, PARAMS, ARGS)           \
    V4 static RET FN##_v4 PARAMS { R FN##_body ARGS; } \
    V3 static RET FN##_v3 PARAMS { R FN##_body ARGS; } \
    static RET FN##_v1 PARAMS { R FN##_body ARGS; }    \
    RET FN PARAMS {                                  \
        switch (qac_cpu_isa()) {                     \
        case QAC_ISA_AVX512: R FN##_v4 ARGS; break;  \
        case QAC_ISA_AVX2: R FN##_v3 ARGS; break;    \
        default: R FN##_v1 ARGS; break;              \
        }                                            \
    }
#else
#define DISPATCH(RET, R, FN, PARAMS, ARGS) \
    RET FN PARAMS { R FN##_body ARGS; }
#endif

#define VBLOCK 16

/* Range clamps are selects only when comparisons may be assumed not to trap;
 * nothing here relies on floating-point exceptions. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

static inline __attribute__((always_inline)) float exp_poly(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick; r = x - n ln 2 in two parts */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float y = fmaf(p * r, r, r) + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return y * scale;
}

/* erf(z) for the GELU argument z = x / sqrt 2 */
static inline __attribute__((always_inline)) float erf_poly(float z) {
    float az = fabsf(z);
    float t = 1.0f / fmaf(0.3275911f, az, 1.0f);
    float poly = fmaf(t, 1.061405429f, -1.453152027f);
    poly = fmaf(poly, t, 1.421413741f);
    poly = fmaf(poly, t, -0.284496736f);
    poly = fmaf(poly, t, 0.254829592f);
    poly *= t;
    return copysignf(fmaf(-poly, exp_poly(-az * az), 1.0f), z);
}

static inline __attribute__((always_inline)) float gelu_one(float x) {
    return 0.5f * x * (1.0f + erf_poly(x * 0.70710678118654752f));
}

/* d/dx 0.5 x (1 + erf(x / sqrt 2)) = 0.5 (1 + erf(x / sqrt 2)) + x phi(x) */
static inline __attribute__((always_inline)) float gelu_grad_one(float x) {
    float cdf = 0.5f * (1.0f + erf_poly(x * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * exp_poly(-0.5f * x * x);
    return cdf + x * pdf;
}

BODY void qac_vm_gelu_body(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + VBLOCK <= n; i += VBLOCK) {
        float v[VBLOCK]; /* out may alias inp: a local block keeps the loop vectorisable */
        memcpy(v, inp + i, sizeof v);
        for (int j = 0; j < VBLOCK; j++) v[j] = gelu_one(v[j]);
        memcpy(out + i, v, sizeof v);
    }
    for (; i < n; i++) out[i] = gelu_one(inp[i]);
}

/* Adding the bias here saves a separate bias pre-fill pass over the output. */
BODY void qac_vm_bias_gelu_body(float *out, float *pre, const float *bias, int n, int keep) {
    int i = 0;
    for (; i + VBLOCK <= n; i += VBLOCK) {
        float v[VBLOCK];
        for (int j = 0; j < VBLOCK; j++) v[j] = pre[i + j] + bias[i + j];
        if (keep) memcpy(pre + i, v, sizeof v);
        for (int j = 0; j < VBLOCK; j++) v[j] = gelu_one(v[j]);
        memcpy(out + i, v, sizeof v);
    }
    for (; i < n; i++) {
        float v = pre[i] + bias[i];
        if (keep) pre[i] = v;
        out[i] = gelu_one(v);
    }
}

/* ---- the int8 FFN's GELU (vecmath.h: qac_vm_gelu_q8) ----
 * GELU(x) = 0.5 (x + t E(t)), t = |x|, E(t) = erf(t / sqrt 2): for x < 0,
 * x Phi(x) = 0.5 x (1 - E(t)) = 0.5 (x + t E(t)) as well. E from interval
 * i = trunc(min(t, TMAX) / H) (at most NINT - 1) of the table, u = min(t,
 * TMAX) - (i + 1/2) H, Horner in FMAs, clamped at 1: the steps
 * gelu_table_gen.py evaluates to state its error. A NaN is clamped to TMAX
 * for the lookup and comes out of the last FMA as NaN. The vector paths
 * pick the coefficients with a lane permute (16 entries: one zmm; two
 * ymm halves and a blend on AVX2). */
static inline __attribute__((always_inline)) float gelu_q8_one(float x) {
    float t = fabsf(x), tc = t < GELU_Q8_TMAX ? t : GELU_Q8_TMAX;
    int i = (int)(tc * (1.0f / GELU_Q8_H));
    i = i < GELU_Q8_NINT - 1 ? i : GELU_Q8_NINT - 1;
    float u = tc - fmaf((float)i, GELU_Q8_H, 0.5f * GELU_Q8_H);
    float p = GELU_Q8_C[GELU_Q8_DEG][i];
    for (int k = GELU_Q8_DEG - 1; k >= 0; k--) p = fmaf(p, u, GELU_Q8_C[k][i]);
    p = p < 1.0f ? p : 1.0f;
    return 0.5f * fmaf(t, p, x);
}

static void gelu_q8_v1(float *x, const float *bias, int n, float *lo, float *hi) {
    float l = 0.0f, h = 0.0f;
    for (int i = 0; i < n; i++) {
        float y = gelu_q8_one(bias ? x[i] + bias[i] : x[i]);
        x[i] = y;
        l = y < l ? y : l;
        h = y > h ? y : h;
    }
    *lo = l, *hi = h;
}

#ifdef QAC_VM_X86
#include <immintrin.h>

/* 16 lanes of qac_vm_gelu_q8 */
V4 static inline __attribute__((always_inline)) __m512 gelu_q8_16(__m512 v, const __m512 *c) {
    __m512 t = _mm512_abs_ps(v), tc = _mm512_min_ps(t, _mm512_set1_ps(GELU_Q8_TMAX)); /* a NaN t: TMAX */
    __m512i idx = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(tc, _mm512_set1_ps(1.0f / GELU_Q8_H))),
                                   _mm512_set1_epi32(GELU_Q8_NINT - 1));
    __m512 u = _mm512_sub_ps(
        tc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(idx), _mm512_set1_ps(GELU_Q8_H), _mm512_set1_ps(0.5f * GELU_Q8_H)));
    __m512 p = _mm512_permutexvar_ps(idx, c[GELU_Q8_DEG]);
#pragma GCC unroll 8
    for (int k = GELU_Q8_DEG - 1; k >= 0; k--) p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(idx, c[k]));
    p = _mm512_min_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_fmadd_ps(t, p, v));
}

V4 static void gelu_q8_v4(float *x, const float *bias, int n, float *lo, float *hi) {
    __m512 c[GELU_Q8_DEG + 1], vlo = _mm512_setzero_ps(), vhi = vlo;
#pragma GCC unroll 8
    for (int k = 0; k <= GELU_Q8_DEG; k++) c[k] = _mm512_loadu_ps(GELU_Q8_C[k]);
    int i = 0;
    /* whole vectors unmasked (a masked store costs more on some cores), the tail masked */
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
        __m512 y = gelu_q8_16(v, c);
        _mm512_storeu_ps(x + i, y);
        vlo = _mm512_min_ps(y, vlo); /* a NaN y keeps the range, as the scalar compare does */
        vhi = _mm512_max_ps(y, vhi);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i); /* lanes past n: 0, which GELUs to 0 */
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
        __m512 y = gelu_q8_16(v, c);
        _mm512_mask_storeu_ps(x + i, m, y);
        vlo = _mm512_min_ps(y, vlo);
        vhi = _mm512_max_ps(y, vhi);
    }
    *lo = _mm512_reduce_min_ps(vlo), *hi = _mm512_reduce_max_ps(vhi);
}

/* the coefficients of power k for the lanes' intervals idx (0..15) */
V3 static inline __m256 pick8(const float *row, __m256i idx, __m256 upper) {
    __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row), idx);
    __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + 8), idx);
    return _mm256_blendv_ps(a, b, upper);
}

V3 static void gelu_q8_v3(float *x, const float *bias, int n, float *lo, float *hi) {
    __m256 tmax = _mm256_set1_ps(GELU_Q8_TMAX), inv_h = _mm256_set1_ps(1.0f / GELU_Q8_H);
    __m256 h = _mm256_set1_ps(GELU_Q8_H), h2 = _mm256_set1_ps(0.5f * GELU_Q8_H), one = _mm256_set1_ps(1.0f);
    __m256 half = _mm256_set1_ps(0.5f), vlo = _mm256_setzero_ps(), vhi = vlo;
    __m256 sign = _mm256_set1_ps(-0.0f);
    __m256i last = _mm256_set1_epi32(GELU_Q8_NINT - 1);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
        __m256 t = _mm256_andnot_ps(sign, v), tc = _mm256_min_ps(t, tmax);
        __m256i idx = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(tc, inv_h)), last);
        __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)); /* bit 3 of idx as the sign */
        __m256 u = _mm256_sub_ps(tc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(idx), h, h2));
        __m256 p = pick8(GELU_Q8_C[GELU_Q8_DEG], idx, upper);
#pragma GCC unroll 8
        for (int k = GELU_Q8_DEG - 1; k >= 0; k--) p = _mm256_fmadd_ps(p, u, pick8(GELU_Q8_C[k], idx, upper));
        p = _mm256_min_ps(p, one);
        __m256 y = _mm256_mul_ps(half, _mm256_fmadd_ps(t, p, v));
        _mm256_storeu_ps(x + i, y);
        vlo = _mm256_min_ps(y, vlo);
        vhi = _mm256_max_ps(y, vhi);
    }
    float l8[8], h8[8], l, hh;
    _mm256_storeu_ps(l8, vlo);
    _mm256_storeu_ps(h8, vhi);
    gelu_q8_v1(x + i, bias ? bias + i : NULL, n - i, &l, &hh); /* the tail, and its range with 0 */
    for (int j = 0; j < 8; j++) l = l8[j] < l ? l8[j] : l, hh = h8[j] > hh ? h8[j] : hh;
    *lo = l, *hi = hh;
}
#endif

void qac_vm_gelu_q8(float *x, const float *bias, int n, float *lo, float *hi) {
#ifdef QAC_VM_X86
    switch (qac_cpu_isa()) {
    case QAC_ISA_AVX512: gelu_q8_v4(x, bias, n, lo, hi); return;
    case QAC_ISA_AVX2: gelu_q8_v3(x, bias, n, lo, hi); return;
    default: break;
    }
#endif
    gelu_q8_v1(x, bias, n, lo, hi);
}

BODY void qac_vm_gelu_backward_body(float *dinp, const float *dout, const float *pre, size_t n) {
    size_t i = 0;
    for (; i + VBLOCK <= n; i += VBLOCK) {
        float v[VBLOCK];
        for (int j = 0; j < VBLOCK; j++) v[j] = dout[i + j] * gelu_grad_one(pre[i + j]);
        memcpy(dinp + i, v, sizeof v);
    }
    for (; i < n; i++) dinp[i] = dout[i] * gelu_grad_one(pre[i]);
}

/* A softmax row, all of it in SIMD lanes: attention rows are short (a
 * query's 10-30 keys), so the part past the last whole block runs as one
 * more block padded with -inf (exp of it never enters the sum) instead of
 * a scalar tail, and the 16 lanes' max and sum are folded as a tree
 * (halves added lane-wise), not one lane after another. Each element's exp
 * is one lane's operations and the folding order is fixed, so the bits
 * depend on n alone. The exp is a parameter (always inlined: a direct
 * call): exp_poly here, exp_b16 for qac_vm_softmax_row_b16. */
static inline __attribute__((always_inline)) void softmax_with(float *x, int n, float (*ex)(float)) {
    float m[VBLOCK], t[VBLOCK], acc[VBLOCK] = {0};
    int i = 0, full = n / VBLOCK * VBLOCK, rem = n - full;
    for (int j = 0; j < VBLOCK; j++) m[j] = t[j] = -INFINITY;
    for (int j = 0; j < rem; j++) t[j] = x[full + j];
    for (; i < full; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (int j = 0; j < VBLOCK; j++) m[j] = t[j] > m[j] ? t[j] : m[j];
#define FOLD(H) for (int j = 0; j < H; j++) m[j] = m[j + H] > m[j] ? m[j + H] : m[j]
    FOLD(8);
    FOLD(4);
    FOLD(2);
    FOLD(1);
#undef FOLD
    float mx = m[0];
    for (i = 0; i < full; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) {
            float e = ex(x[i + j] - mx);
            x[i + j] = e;
            acc[j] += e;
        }
    for (int j = 0; j < VBLOCK; j++) {
        float e = ex(t[j] - mx);
        t[j] = e;
        acc[j] += j < rem ? e : 0.0f;
    }
#define FOLD(H) for (int j = 0; j < H; j++) acc[j] += acc[j + H]
    FOLD(8);
    FOLD(4);
    FOLD(2);
    FOLD(1);
#undef FOLD
    float inv = 1.0f / acc[0];
    for (i = 0; i < full; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) x[i + j] *= inv;
    for (int j = 0; j < rem; j++) x[full + j] = t[j] * inv;
}

BODY void qac_vm_softmax_row_body(float *x, int n) { softmax_with(x, n, exp_poly); }

/* exp(x) for x <= 0 where a relative error of a few 1e-6 is as good as
 * exact (probabilities rounded to bf16 next, whose unit roundoff is 2^-9):
 * 2^t, t = x log2(e), as 2^n p(f) with n = rint(t), f = t - n (exact) in
 * [-1/2, 1/2] and p the degree-4 relative-error minimax polynomial of 2^f
 * there (relative error 2.6e-6, evaluated in fp32 with FMAs: 2.7e-6),
 * scaled by 2^n exactly (ldexpf, vscalefps: one correctly rounded
 * multiply, the same bits). x is clamped at -200 first (2^-288 is 0). */
static inline __attribute__((always_inline)) float exp_b16(float x) {
    x = x < -200.0f ? -200.0f : x;
    float t = x * 1.44269504088896341f, n = nearbyintf(t), f = t - n;
    float p = fmaf(fmaf(fmaf(fmaf(9.570101276040077e-3f, f, 5.591786652803421e-2f), f, 2.40247443318367e-1f), f,
                        6.931217908859253e-1f),
                   f, 9.999992847442627e-1f);
    return ldexpf(p, (int)n);
}

/* qac_vm_softmax_row's steps (lanes, the -inf tail block, the folding
 * order) with exp_b16 */
static inline __attribute__((always_inline)) void softmax_b16_body(float *x, int n) { softmax_with(x, n, exp_b16); }

#ifdef QAC_VM_X86
/* exp_b16 on 16 lanes: rint by vrndscaleps, 2^n by vscalefps */
V4 static inline __attribute__((always_inline)) __m512 exp_b16_v4(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
    __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(9.570101276040077e-3f), f, _mm512_set1_ps(5.591786652803421e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.40247443318367e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931217908859253e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999992847442627e-1f));
    return _mm512_scalef_ps(p, n);
}

/* softmax_b16_body in AVX-512 registers: the same lanes and folds */
V4 static void softmax_b16_v4(float *x, int n) {
    int full = n / VBLOCK * VBLOCK, rem = n - full;
    __mmask16 mr = (__mmask16)((1u << rem) - 1);
    __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 t = _mm512_mask_loadu_ps(ninf, mr, x + full), m = t;
    for (int i = 0; i < full; i += VBLOCK) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    float mv[VBLOCK];
    _mm512_storeu_ps(mv, m);
#define FOLD(H) for (int j = 0; j < H; j++) mv[j] = mv[j + H] > mv[j] ? mv[j + H] : mv[j]
    FOLD(8);
    FOLD(4);
    FOLD(2);
    FOLD(1);
#undef FOLD
    __m512 mx = _mm512_set1_ps(mv[0]), acc = _mm512_setzero_ps();
    for (int i = 0; i < full; i += VBLOCK) {
        __m512 e = exp_b16_v4(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx));
        _mm512_storeu_ps(x + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    __m512 et = exp_b16_v4(_mm512_sub_ps(t, mx));
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(mr, et));
    float av[VBLOCK];
    _mm512_storeu_ps(av, acc);
#define FOLD(H) for (int j = 0; j < H; j++) av[j] += av[j + H]
    FOLD(8);
    FOLD(4);
    FOLD(2);
    FOLD(1);
#undef FOLD
    __m512 inv = _mm512_set1_ps(1.0f / av[0]);
    for (int i = 0; i < full; i += VBLOCK) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    _mm512_mask_storeu_ps(x + full, mr, _mm512_mul_ps(et, inv));
}

V3 static void softmax_b16_v3(float *x, int n) { softmax_b16_body(x, n); }
#endif

static void softmax_b16_v1(float *x, int n) { softmax_b16_body(x, n); }

void qac_vm_softmax_row_b16(float *x, int n) {
#ifdef QAC_VM_X86
    switch (qac_cpu_isa()) {
    case QAC_ISA_AVX512: softmax_b16_v4(x, n); return;
    case QAC_ISA_AVX2: softmax_b16_v3(x, n); return;
    default: break;
    }
#endif
    softmax_b16_v1(x, n);
}

/* Lane-wise partial sums let the reductions vectorise (strict FP order
 * otherwise keeps them scalar). */
BODY void qac_vm_layernorm_row_body(float *o, float *mean, float *rstd, const float *x, const float *w,
                                   const float *bb, int C, float eps) {
    float acc[VBLOCK] = {0};
    int i = 0;
    for (; i + VBLOCK <= C; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) acc[j] += x[i + j];
    float s = 0;
    for (; i < C; i++) s += x[i];
    for (int j = 0; j < VBLOCK; j++) s += acc[j];
    float m = s / C;
    for (int j = 0; j < VBLOCK; j++) acc[j] = 0;
    for (i = 0; i + VBLOCK <= C; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) {
            float d = x[i + j] - m;
            acc[j] += d * d;
        }
    float v = 0;
    for (; i < C; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    for (int j = 0; j < VBLOCK; j++) v += acc[j];
    float rs = 1.0f / sqrtf(v / C + eps);
    /* o may alias x: a local block keeps the loop vectorisable (at -O2 the
     * compiler adds no run-time overlap checks) */
    if (bb) {
        for (i = 0; i + VBLOCK <= C; i += VBLOCK) {
            float y[VBLOCK];
            for (int j = 0; j < VBLOCK; j++) y[j] = (x[i + j] - m) * rs * w[i + j] + bb[i + j];
            memcpy(o + i, y, sizeof y);
        }
        for (; i < C; i++) o[i] = (x[i] - m) * rs * w[i] + bb[i];
    } else { /* a LayerNorm without a bias (ModernBERT's) */
        for (i = 0; i + VBLOCK <= C; i += VBLOCK) {
            float y[VBLOCK];
            for (int j = 0; j < VBLOCK; j++) y[j] = (x[i + j] - m) * rs * w[i + j];
            memcpy(o + i, y, sizeof y);
        }
        for (; i < C; i++) o[i] = (x[i] - m) * rs * w[i];
    }
    if (mean) *mean = m;
    if (rstd) *rstd = rs;
}

DISPATCH(void, , qac_vm_gelu, (float *out, const float *inp, size_t n), (out, inp, n))
DISPATCH(void, , qac_vm_bias_gelu, (float *out, float *pre, const float *bias, int n, int keep),
         (out, pre, bias, n, keep))
DISPATCH(void, , qac_vm_gelu_backward, (float *dinp, const float *dout, const float *pre, size_t n),
         (dinp, dout, pre, n))
DISPATCH(void, , qac_vm_softmax_row, (float *x, int n), (x, n))
DISPATCH(void, , qac_vm_layernorm_row,
         (float *o, float *mean, float *rstd, const float *x, const float *w, const float *b, int C, float eps),
         (o, mean, rstd, x, w, b, C, eps))
