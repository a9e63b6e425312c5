/* Helpers shared by the GPU tests: a seeded generator (seed from the clock
 * unless QAC_TEST_SEED is set, printed so a failure can be replayed), and
 * error measures that treat NaN as a failure. */
#ifndef QAC_GPU_TESTUTIL_H
#define QAC_GPU_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "qac_encoder.h"

static uint64_t gpu_test_rng_state;

static inline void gpu_test_seed(void) {
    const char *s = getenv("QAC_TEST_SEED");
    gpu_test_rng_state = s && *s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    if (!gpu_test_rng_state) gpu_test_rng_state = 88172645463325252ull;
    printf("seed %llu (replay with QAC_TEST_SEED)\n", (unsigned long long)gpu_test_rng_state);
}

/* xorshift64 on the state *s (the emulated tests keep their own). */
static inline uint64_t gpu_test_xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static inline uint64_t gpu_test_next(void) { return gpu_test_xorshift(&gpu_test_rng_state); }

/* Uniform in [lo, hi) from the top 24 bits of x. */
static inline float gpu_test_uniform_of(uint64_t x, float lo, float hi) {
    return lo + (hi - lo) * (float)((x >> 40) * (1.0 / 16777216.0));
}

static inline float gpu_test_uniform(float lo, float hi) { return gpu_test_uniform_of(gpu_test_next(), lo, hi); }

static inline int gpu_test_int(int lo, int hi) { /* [lo, hi] */
    return lo + (int)(gpu_test_next() % (uint64_t)(hi - lo + 1));
}

static inline void gpu_test_fill(float *a, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) a[i] = gpu_test_uniform(lo, hi);
}

static inline void gpu_test_poison(float *a, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = NAN;
}

/* ||got - want|| / ||want||, +inf when got holds a NaN; *max_abs the largest
 * element difference. */
static inline double gpu_test_rel_err(const float *got, const float *want, size_t n, double *max_abs) {
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i])) {
            if (max_abs) *max_abs = INFINITY;
            return INFINITY;
        }
        const double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    if (max_abs) *max_abs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline const char *gpu_test_prec_name(qac_precision p) {
    return p == QAC_PREC_FP16 ? "fp16" : p == QAC_PREC_BF16 ? "bf16" : "fp32";
}

#endif
