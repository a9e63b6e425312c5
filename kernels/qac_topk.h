/* The selection of the GPU flat search (kernels/gpu_flat.cu), shared with
 * its CPU twin (kernels/topk_twin.c): keys, the plan (sizes, thresholds,
 * which path), and the radix selection's digit walk. Plain C that nvcc
 * also compiles for the device, so both sides run the same arithmetic.
 *
 * Keys. A hit is one 64-bit key: the score's order-preserving 32-bit image
 * above, the row's tie rank below. Keys are distinct (ranks are), so "the k
 * largest keys" is one exact set: score descending, ties by rank
 * descending. The default rank of row r is 0xffffffff - r (the lower row
 * first).
 *
 * Radix selection of the k largest of n keys: AND and OR over all keys give
 * the bits every key shares (skipped); then digits of radix_bits bits from
 * the top: a histogram of the digit over the keys that match the prefix
 * fixed so far, the digit holding the k-th largest fixed, until the keys
 * matching the prefix are exactly the ones still needed (or the bits run
 * out). The selection is every key whose masked value is above the prefix,
 * plus the first `remaining` that equal it. */
#ifndef QAC_TOPK_H
#define QAC_TOPK_H

#include <stdint.h>
#include <string.h>

#include "qac_gpu_flat.h"

#ifdef __CUDACC__
#define QAC_TOPK_FN static inline __host__ __device__
#else
#define QAC_TOPK_FN static inline
#endif

#define QAC_TOPK_TILED_MAXQ 256 /* queries per tiled pass */
#define QAC_TOPK_FUSED_MAXDIM 4096

/* Larger scores give larger keys; -0 ranks as +0 (the CPU scan compares
 * them equal); NaN lies below every number. */
QAC_TOPK_FN uint32_t qac_topk_score_key(float f) {
    uint32_t u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(f);
#else
    memcpy(&u, &f, sizeof u);
#endif
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;
    if ((u << 1) == 0u) u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

QAC_TOPK_FN float qac_topk_key_score(uint32_t k) {
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
#ifdef __CUDA_ARCH__
    f = __uint_as_float(u);
#else
    memcpy(&f, &u, sizeof f);
#endif
    return f;
}

QAC_TOPK_FN uint64_t qac_topk_key(float score, uint32_t rank) {
    return ((uint64_t)qac_topk_score_key(score) << 32) | rank;
}

QAC_TOPK_FN uint32_t qac_topk_default_rank(int64_t row) { return 0xffffffffu - (uint32_t)row; }

QAC_TOPK_FN int qac_topk_clz64(uint64_t x) {
#ifdef __CUDA_ARCH__
    return __clzll((long long)x);
#else
    return x ? __builtin_clzll(x) : 64;
#endif
}

/* Sizes of one pass of nq queries over n rows, for k. */
typedef struct qac_topk_plan {
    int64_t n;
    int k, keff;        /* requested; min(k, n) */
    int64_t sample;     /* fused: threshold sample; its row j is j * n / sample */
    int64_t cap;        /* fused: candidate room per query */
    int tile;           /* tiled: rows per product tile */
    int compact_at;     /* tiled: a list longer than this is cut back to keff */
    int64_t list_cap;   /* tiled: compact_at + tile, what a list can reach */
} qac_topk_plan;

QAC_TOPK_FN void qac_topk_plan_make(qac_topk_plan *p, int64_t n, int nq, int k, const qac_gpu_flat_tuning *t) {
    p->n = n;
    p->k = k;
    p->keff = (int64_t)k < n ? k : (int)n;
    int64_t s = (int64_t)k * t->oversample;
    if (s < 1024) s = 1024;
    p->sample = s < n ? s : n;
    /* The sample's k-th best is about the k / sample quantile, so about
     * n k / sample rows pass; 8 times that plus 64 K is the room (for
     * k = 1 the quantile is exponential: exceeded with odds e^-8). */
    const int64_t expect = p->sample ? n * k / p->sample + k : 0;
    const int64_t cap = 8 * expect + 65536;
    p->cap = cap < n ? cap : n;
    int64_t tile = t->tile_rows;
    if (tile <= 0) {
        tile = (int64_t)(16u << 20) / (nq > 0 ? nq : 1);
        if (tile < 65536) tile = 65536;
        if (tile > (1 << 20)) tile = 1 << 20;
        tile &= ~(int64_t)1023;
    }
    p->tile = (int)tile;
    p->compact_at = k * t->compact_factor;
    p->list_cap = (int64_t)p->compact_at + tile;
}

/* The path of a call with nq queries: QAC_GPU_FLAT_FUSED or _TILED. Its
 * queries then run in passes of qac_topk_pass_queries(path). */
QAC_TOPK_FN int qac_topk_pick_path(const qac_gpu_flat_tuning *t, int nq, int dim) {
    if (dim % 8 != 0 || dim > QAC_TOPK_FUSED_MAXDIM) return QAC_GPU_FLAT_TILED;
    if (t->path == QAC_GPU_FLAT_FUSED) return QAC_GPU_FLAT_FUSED;
    if (t->path == QAC_GPU_FLAT_TILED) return QAC_GPU_FLAT_TILED;
    return nq <= t->fused_max_nq ? QAC_GPU_FLAT_FUSED : QAC_GPU_FLAT_TILED;
}

QAC_TOPK_FN int qac_topk_pass_queries(int path) {
    return path == QAC_GPU_FLAT_FUSED ? QAC_GPU_FLAT_FUSED_MAXQ : QAC_TOPK_TILED_MAXQ;
}

/* The fused path's sample row j. */
QAC_TOPK_FN int64_t qac_topk_sample_row(int64_t j, int64_t n, int64_t sample) { return j * n / sample; }

/* The radix walk's state. */
typedef struct qac_topk_radix {
    uint64_t prefix, mask; /* digits fixed so far (the shared bits first) */
    int shift;             /* bits below them */
    int64_t remaining;     /* keys still to take among those matching the prefix */
    int done;
} qac_topk_radix;

/* all_and, all_or: AND and OR of every key; k: keys to select (< count). */
QAC_TOPK_FN void qac_topk_radix_start(qac_topk_radix *r, uint64_t all_and, uint64_t all_or, int64_t k) {
    const uint64_t diff = all_and ^ all_or;
    r->shift = diff ? 64 - qac_topk_clz64(diff) : 0;
    r->mask = r->shift == 64 ? 0 : ~(uint64_t)0 << r->shift;
    r->prefix = all_and & r->mask;
    r->remaining = k;
    r->done = r->shift == 0;
}

QAC_TOPK_FN int qac_topk_radix_bits(const qac_topk_radix *r, int radix_bits) {
    return r->shift < radix_bits ? r->shift : radix_bits;
}

/* The histogram's walk: hist[0, nb) counts, by digit, the keys matching the
 * prefix; returns the digit holding the remaining-th largest, *above the
 * keys in higher digits. */
QAC_TOPK_FN int qac_topk_pick_digit(const uint32_t *hist, int nb, int64_t remaining, int64_t *above) {
    int64_t acc = 0;
    int d = nb - 1;
    for (; d > 0; d--) {
        if (acc + hist[d] >= remaining) break;
        acc += hist[d];
    }
    *above = acc;
    return d;
}

/* Fix the digit of `bits` bits just below the prefix; in_digit: keys in it. */
QAC_TOPK_FN void qac_topk_radix_step(qac_topk_radix *r, int bits, int digit, int64_t above, int64_t in_digit) {
    r->shift -= bits;
    r->prefix |= (uint64_t)digit << r->shift;
    r->mask |= (((uint64_t)1 << bits) - 1) << r->shift;
    r->remaining -= above;
    r->done = in_digit == r->remaining || r->shift == 0;
}

#endif
