/* Counter-based random numbers: a value is a pure function of (key,
 * counter), so a resumed run, a re-forward (GradCache) or another thread
 * draws exactly the same numbers with no generator state to carry.
 * Keys are derived from (seed, step, stream, ...) with qac_rng_key. */
#ifndef QAC_RNG_H
#define QAC_RNG_H

#include <stdint.h>

/* Usable from CUDA kernels too, so the GPU draws the CPU's exact bits. */
#ifdef __CUDACC__
#define QAC_RNG_FN static inline __host__ __device__
#else
#define QAC_RNG_FN static inline
#endif

/* splitmix64's finaliser: a bijective 64-bit mix */
QAC_RNG_FN uint64_t qac_rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A key for one stream: chain the words through the mix. */
QAC_RNG_FN uint64_t qac_rng_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t k = qac_rng_mix(seed + 0x9E3779B97F4A7C15ull);
    k = qac_rng_mix(k ^ (a + 0x9E3779B97F4A7C15ull));
    k = qac_rng_mix(k ^ (b + 0x632BE59BD9B4E019ull));
    return qac_rng_mix(k ^ (c + 0x85157AF5ull));
}

/* The counter-th 64-bit value of stream key. */
QAC_RNG_FN uint64_t qac_rng_u64(uint64_t key, uint64_t counter) {
    return qac_rng_mix(key + (counter + 1) * 0x9E3779B97F4A7C15ull);
}

/* Uniform in [0, 1) with 24 bits (exact in float). */
QAC_RNG_FN float qac_rng_uniform(uint64_t key, uint64_t counter) {
    return (float)(qac_rng_u64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n) (n > 0; the bias of the modulo is below 2^-32
 * for the sizes used here). */
QAC_RNG_FN uint64_t qac_rng_below(uint64_t key, uint64_t counter, uint64_t n) {
    return qac_rng_u64(key, counter) % n;
}

#endif
