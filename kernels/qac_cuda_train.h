/* The CUDA training backend behind qac_trainer (api/qac_train.h): the
 * model's parameters, gradients and AdamW state live on the GPU in the CPU
 * engine's flat layout (one allocation each, the same offsets), so a
 * checkpoint or a resume is one copy of each block. Internal to the
 * trainer; without CUDA every entry point reports QAC_ERR_UNSUPPORTED.
 *
 * Precision: QAC_PREC_FP32 (everything fp32, cuBLAS without TF32: the mode
 * for checking against the CPU) or QAC_PREC_BF16 (activations and matrix
 * products in bf16 with fp32 accumulation; residual stream, LayerNorm,
 * softmax statistics, loss, gradients, master weights and AdamW state in
 * fp32). Gradients are kept in fp32, not bf16, so that the query and
 * passage halves of a batch accumulate without rounding.
 *
 * First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md and
 * scripts/gpu_train_verify.sh. */
#ifndef QAC_CUDA_TRAIN_H
#define QAC_CUDA_TRAIN_H

#include <stdint.h>

#include "qac_encoder.h"
#include "qac_train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qac_cuda_trainer qac_cuda_trainer;

/* Upload m's parameters. decays[i] says whether tensor i (of the first
 * n_trained tensors, which are the trained ones) takes weight decay.
 * hidden_dropout and attn_dropout are the resolved probabilities. */
qac_status qac_cuda_trainer_create(qac_cuda_trainer **out, const qac_model *m, const qac_train_opts *o,
                                   float hidden_dropout, float attn_dropout, const int *decays, int n_trained);
void qac_cuda_trainer_free(qac_cuda_trainer *g);

/* Zero the gradients, run both sides forward (queries are sequences
 * 0..nq-1 and passages nq.. for the dropout streams, as on the CPU), the
 * loss, and both sides backward. *loss is the batch loss. */
qac_status qac_cuda_trainer_grads(qac_cuda_trainer *g, const qac_train_batch *b, uint64_t drop_key, double *loss);

/* Clip by the global norm (computed and applied on the device) and take
 * AdamW step t (1-based) at rate lr. *grad_norm receives the norm before
 * clipping. */
qac_status qac_cuda_trainer_update(qac_cuda_trainer *g, long t, double lr, double *grad_norm);

/* Copy blocks of n_params floats to the host; any pointer may be NULL. */
qac_status qac_cuda_trainer_download(qac_cuda_trainer *g, float *params, float *grads, float *adam_m,
                                     float *adam_v);
/* And back (after a resume); NULL leaves that block as it is. */
qac_status qac_cuda_trainer_upload(qac_cuda_trainer *g, const float *params, const float *adam_m,
                                   const float *adam_v);

#ifdef __cplusplus
}
#endif
#endif
