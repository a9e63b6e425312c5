/* Internal to index/: exact inner-product top-k over a row-major fp32
 * matrix, the CPU Flat search.
 *
 * Every score is computed with one fixed arithmetic, whatever the number of
 * queries in the call, the other queries beside it, the thread count or the
 * CPU's SIMD level: eight fused multiply-add lanes (lane l takes dimensions
 * l, l+8, ...), reduced as ((a0+a4)+(a1+a5)) + ((a2+a6)+(a3+a7)). So a
 * query's top-k never depends on how queries were batched, and the server's
 * cross-request batches answer exactly like one query at a time.
 *
 * bf16 rows (FAISS SQbf16 codes) are scored against the query rounded once
 * to bf16 (nearest even), as AVX512_BF16's vdpbf16ps sums them: eight fp32
 * lanes, lane l taking the dimension pairs (16j + 2l, 16j + 2l + 1) of
 * every 16-dimension block j, each pair added odd product first with
 * qac_bf16_step (qac_bf16.h), the block tail zero-padded; then the same
 * final sum as above. The AVX2 and portable paths emulate it bit for bit. */
#ifndef QAC_FLAT_SCAN_H
#define QAC_FLAT_SCAN_H

#include <stdint.h>

#include "qac_common.h"
#include "qac_pool.h"

typedef struct qac_flat {
    const float *x;      /* [n, dim], or NULL when x16 is set */
    const uint16_t *x16; /* [n, dim] IEEE half (FAISS SQfp16 codes), or NULL */
    int64_t n;
    int dim;
    /* Tie order: nonzero when row a's docid sorts before row b's. Equal
     * scores rank by docid descending, as trec_eval orders them. */
    int (*id_less)(const void *ctx, int64_t a, int64_t b);
    const void *ctx;
    const uint16_t *xb; /* [n, dim] bf16 (FAISS SQbf16 codes), or NULL; exactly one of x, x16, xb is set */
} qac_flat;

/* Top-k for nq queries [nq, dim] into scores/rows [nq, k], best first;
 * past the end of the matrix rows are -1 and scores -inf. pool may be NULL
 * (serial); the answer is the same for any pool. */
qac_status qac_flat_topk(const qac_flat *f, const float *queries, int nq, int k, qac_pool *pool, float *scores,
                         int64_t *rows);

/* One score, with the arithmetic above (portable code path). */
float qac_flat_dot(const float *a, const float *b, int dim);
/* One bf16 score, with the arithmetic above (portable code path): q and x
 * are bf16 [dim]. */
float qac_flat_dot_bf16(const uint16_t *q, const uint16_t *x, int dim);
/* IEEE half to float, exact (NaNs come back quiet). */
float qac_half_to_float(uint16_t h);

#endif
