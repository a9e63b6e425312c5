/* bf16 arithmetic shared by the bf16 matrix product (model/gemm.c) and the
 * bf16 exact scan (index/flat_scan.c), written once so that every code path
 * gives AVX512_BF16's bits.
 *
 * vdpbf16ps, per fp32 lane and bf16 pair (e = 2l, o = 2l + 1):
 *     acc = step(a[o], b[o], acc); acc = step(a[e], b[e], acc)
 * where step is a fused multiply-add with subnormal inputs read as zero and
 * a result that is tiny flushed to a zero of its sign. "Tiny" is judged
 * after rounding to 24 bits with an unbounded exponent, as x86's MXCSR
 * flush-to-zero judges it (measured on the hardware: 2^-126 - 3*2^-152
 * flushes, 2^-126 - 2^-153 does not). */
#ifndef QAC_BF16_H
#define QAC_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* bf16 to float with subnormals read as zero (NaN and inf kept). */
static inline float qac_bf16_in(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((h & 0x7f80u) == 0) u &= 0x80000000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float to bf16, round to nearest even (vcvtneps2bf16 without its DAZ);
 * NaN stays a quiet NaN. */
static inline uint16_t qac_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* float to bf16 as FAISS's ScalarQuantizer QT_bf16 encodes it
 * (faiss/utils/bf16.h: add 0x8000, truncate: ties away from zero), so that
 * an index qac writes holds the codes FAISS's own add() would. */
static inline uint16_t qac_bf16_from_float_faiss(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x8000u) >> 16);
}

/* One vdpbf16ps step: a, b already through qac_bf16_in (exact in float). */
static inline float qac_bf16_step(float a, float b, float c) {
    float r = fmaf(a, b, c), m = fabsf(r);
    if (m > 0x1p-126f || m != m) return r;
    if (m < 0x1p-126f) return copysignf(0.0f, r);
    /* |r| is 2^-126: the exact a*b + c may still round (24 bits, unbounded
     * exponent) below it. a*b is exact in double; TwoSum gives the rest. */
    double p = (double)a * (double)b, s = p + (double)c, bv = s - p;
    double err = (p - (s - bv)) + ((double)c - bv), t = 0x1p-126 - 0x1p-151, as = fabs(s);
    if (as < t || (as == t && err != 0 && ((err < 0) != (s < 0)))) return copysignf(0.0f, r);
    return r;
}

#endif
