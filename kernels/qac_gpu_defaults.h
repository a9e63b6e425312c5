/* The GPU kernels' defaults, each to be chosen by measurement on a GPU:
 * scripts/gpu_run.sh's sweep phase writes a file of this form
 * (gpu-defaults.h, by bench/gpu_defaults.py) from the numbers it measured,
 * each value beside the figures that chose it; copied here, it commits
 * them. Until a sweep has run: the starting values, not yet measured. Each
 * stays replaceable through the environment (docs/gpu-attention.md,
 * docs/gpu-encoder.md, docs/gpu-search.md). Plain C: read by C and CUDA. */
#ifndef QAC_GPU_DEFAULTS_H
#define QAC_GPU_DEFAULTS_H

/* Where and when the values below were measured. */
#define QAC_GPU_DEFAULTS_SOURCE "not yet measured: the starting values"

/* The fused attention's variants (block, tile, stages, blocks per SM):
 * forward, backward dK/dV, backward dQ (QAC_FA_FWD, QAC_FA_DKDV, QAC_FA_DQ). */
#define QAC_FA_FWD_DEFAULT 64, 64, 2, 1
#define QAC_FA_DKDV_DEFAULT 64, 64, 2, 1
#define QAC_FA_DQ_DEFAULT 64, 64, 2, 1

/* cuDNN's attention in the CUDA encoder (QAC_CUDA_CUDNN): 0 off, 1 on
 * (whenever it agrees with qac's kernel), 2 auto (per shape, the faster
 * of the two measured on its first batch). */
#define QAC_CUDNN_MODE_DEFAULT 2

/* The CUDA encoder's tunables (qac_encoder_plan.h): graphs, graph_rows,
 * graph_batch, ln_warps, pool_warps, gelu_rows, prune. */
#define QAC_ENC_TUNABLES_DEFAULT 1, 512, 16, 4, 8, 4, 1

/* The flat search's tuning: "name=value,..." (qac_gpu_flat_tuning_parse)
 * over its built-in values; "" keeps them. */
#define QAC_GPU_FLAT_TUNING_DEFAULT ""

#endif
