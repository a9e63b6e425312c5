/* The host half of the GPU's atomic-free scatter-add by key (the word and
 * token-type embedding gradients): rows grouped by key, stable (a key's
 * rows keep their order), cut into segments of at most QAC_SCATTER_SEG
 * rows. Plain C, built with or without CUDA, so its invariants are tested
 * on any machine (tests/trainer/test_scatter_plan.c).
 *
 * The plan is one int block of qac_scatter_plan_ints(N) ints:
 *   [0, N)          rows sorted by key
 *   [N, 2N+1)       segment starts into the rows (n_segs + 1 used)
 *   [2N+1, 3N+2)    each key's first segment (n_keys + 1 used)
 *   [3N+2, 4N+2)    the keys, ascending (n_keys used)
 * The same block copied to the device is what the kernels read. */
#ifndef QAC_SCATTER_PLAN_H
#define QAC_SCATTER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QAC_SCATTER_SEG 128

typedef struct qac_scatter_plan {
    int n_rows, n_keys, n_segs;
} qac_scatter_plan;

static inline size_t qac_scatter_plan_ints(int n_rows) { return 4 * (size_t)n_rows + 2; }

/* key of row r = keys_of_rows[r] (NULL: 0), each in [0, n_keys_max) or
 * negative: the row is left out (no key receives it: the padding rows that
 * nn.Embedding(padding_idx=...) freezes). counts is scratch of n_keys_max +
 * 1 ints. The block's layout stays that of n_rows rows; only the kept ones
 * (seg_begin[n_segs] of them) are in [0, N). */
qac_scatter_plan qac_scatter_plan_build(int32_t *mem, const int32_t *keys_of_rows, int n_rows, int n_keys_max,
                                        int32_t *counts);

/* keys[r] = src[r], or -1 (left out of a plan) where src[r] == pad: the
 * word keys of ids (pad: the padding id) and the position keys of offset
 * positions (pad: padding_idx), as the CUDA trainer plans them. */
void qac_scatter_keys_unpadded(int32_t *keys, const int32_t *src, int n_rows, int32_t pad);

#ifdef __cplusplus
}
#endif
#endif
