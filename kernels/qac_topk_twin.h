/* The CPU twin of the GPU flat search's selection (kernels/gpu_flat.cu):
 * the same keys, plan, passes and thresholds (kernels/qac_topk.h), run on
 * scores given on the host. Plain C, built with or without CUDA, so the
 * algorithm is tested on any machine (tests/index/test_topk_twin.c against
 * a plain sort), and the GPU tests compare the GPU's candidate counts with
 * the twin's. */
#ifndef QAC_TOPK_TWIN_H
#define QAC_TOPK_TWIN_H

#include <stdint.h>

#include "qac_gpu_flat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The k largest of keys[0, n) by the radix passes of qac_topk.h: writes
 * min(k, n) keys to out (input order), *kth the smallest of them (0 when
 * none), *passes the histogram passes (0 when k >= n: everything taken).
 * radix_bits 4..12. Returns the count written. */
int64_t qac_topk_select(const uint64_t *keys, int64_t n, int64_t k, int radix_bits, uint64_t *out, uint64_t *kth,
                        int *passes);

typedef struct qac_topk_twin_info {
    int path;               /* of the last pass: QAC_GPU_FLAT_FUSED or _TILED (after a fallback: TILED) */
    int fallback;           /* passes the fused path gave to the tiled one */
    int64_t sample, cap;    /* fused: sample rows, candidate room (last fused pass) */
    int64_t candidates_max; /* fused: most candidates of one query */
    int64_t candidates[QAC_GPU_FLAT_FUSED_MAXQ]; /* fused, last pass: candidates per query */
    int tiles, compactions; /* tiled: tiles per pass, list compactions in all */
} qac_topk_twin_info;

/* The search over scores [nq, n] (what the GPU's products give, row-major
 * by query) with the tuning's paths, passes and thresholds, as
 * qac_gpu_flat_search returns it: out_scores/out_rows [nq, k], best first,
 * -FLT_MAX and -1 past n. rank: [n] tie ranks, or NULL for the default.
 * dim only picks the path (as the GPU's: the fused scan needs dim % 8 == 0,
 * dim <= 4096). info may be NULL. */
qac_status qac_topk_twin_search(const float *scores, int64_t n, int nq, int k, const uint32_t *rank, int dim,
                                const qac_gpu_flat_tuning *t, float *out_scores, int64_t *out_rows,
                                qac_topk_twin_info *info);

#ifdef __cplusplus
}
#endif
#endif
