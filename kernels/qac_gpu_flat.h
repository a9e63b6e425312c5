/* GPU exact (flat) inner-product search: the corpus lives on the GPU in
 * fp16; queries x corpus^T runs by tiles through cuBLAS with a blocked top-k
 * selection, k <= 1024, 1..1024 queries per call.
 *
 * Ownership: create copies the vectors to the device; the handle is freed
 * with qac_gpu_flat_free (NULL accepted). Calls on one handle are serialised
 * internally, so it may be shared between threads. */
#ifndef QAC_GPU_FLAT_H
#define QAC_GPU_FLAT_H

#include "qac_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_gpu_flat qac_gpu_flat;

/* QAC_ERR_UNSUPPORTED without CUDA or a usable GPU. vectors: [n, dim] fp32 on
 * the host; may be added in pieces with qac_gpu_flat_add. */
qac_status qac_gpu_flat_create(qac_gpu_flat **out, int dim, int64_t capacity);
qac_status qac_gpu_flat_add(qac_gpu_flat *g, const float *vectors, int64_t n);
/* scores/rows: [nq, k], best first, rows -1 past the end. */
qac_status qac_gpu_flat_search(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores,
                               int64_t *rows);
int64_t qac_gpu_flat_count(const qac_gpu_flat *g);
void qac_gpu_flat_free(qac_gpu_flat *g);

#ifdef __cplusplus
}
#endif
#endif
