/* The fused (FlashAttention-2) attention of the CUDA backends: which path
 * the encoder and the trainers take, the kernels' tunables, and host-memory
 * entry points for the parity tests (twins: qac_flash_attention_forward and
 * qac_flash_attention_backward in model/bert_cpu.h). All return
 * QAC_ERR_UNSUPPORTED without CUDA or a usable GPU. */
#ifndef QAC_CUDA_ATTENTION_H
#define QAC_CUDA_ATTENTION_H

#include <stdint.h>

#include "qac_encoder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The attention path of CUDA encoders and trainers created from now on:
 * "fused" (the default: FlashAttention-2 kernels, no T x T matrix, the
 * encoder's batches packed without padding) or "unfused" (the previous
 * kernels: probabilities materialised, padded batches), for A/B runs in one
 * process. NULL goes back to the environment's QAC_CUDA_ATTENTION (unset:
 * fused). The fused path covers bf16 and fp16 with head size 32 or 64 (and
 * a hidden size that is a multiple of 8); other shapes and fp32 take the
 * unfused kernels whatever the setting. An unknown name is QAC_ERR_INVALID. */
qac_status qac_cuda_attention_select(const char *mode);
/* 1 when the fused path is selected. */
int qac_cuda_attention_fused(void);

/* Tile sizes of the three kernels (see docs/gpu-attention.md): the forward
 * takes bq queries per block (16 per warp) and streams keys in tiles of bk
 * through shared memory with `stages` buffers (1, or 2: the next tile loads
 * while this one is computed); the backward's dK/dV kernel takes kv_bk keys
 * per block over query tiles of kv_bq, its dQ kernel dq_bq queries per
 * block over key tiles of dq_bk. minb, kv_minb, dq_minb: the blocks per SM
 * the kernel is compiled for (its launch bounds; 0 or 1: one, 2: the
 * registers capped so that two fit); left out of an initialiser, one. */
typedef struct qac_fa_tiles {
    int bq, bk, stages;
    int kv_bk, kv_bq, kv_stages;
    int dq_bq, dq_bk, dq_stages;
    int minb, kv_minb, dq_minb;
} qac_fa_tiles;

/* A tiles' blocks per SM as the variants name them (0 reads as 1). */
static inline int qac_fa_minb(int m) { return m > 1 ? m : 1; }

/* The tiles the backends use: the committed defaults, each kernel's
 * variant replaceable through the environment (QAC_FA_FWD, QAC_FA_DKDV,
 * QAC_FA_DQ as "64x64x2", or "128x64x2x2" for two blocks per SM; a variant
 * that is not compiled is ignored). */
qac_fa_tiles qac_fa_tiles_default(void);
/* The compiled variants of one kernel, kind 'f' (forward: bq, bk, stages,
 * minb), 'k' (dK/dV: kv_bk, kv_bq, kv_stages, kv_minb) or 'q' (dQ: dq_bq,
 * dq_bk, dq_stages, dq_minb): up to max of them into out; returns how many
 * exist. */
int qac_fa_variants(char kind, int (*out)[4], int max);
/* Whether tiles names compiled variants of all three kernels. */
int qac_fa_tiles_valid(const qac_fa_tiles *tiles);

/* The CUDA encoder's attention per shape so far in this process: qac's
 * fused kernel or cuDNN's, with the two timings that chose (auto) or the
 * reason qac's was kept; one "; "-separated clause a shape into buf (at
 * most cap bytes). Returns the number of shapes. */
int qac_cuda_attention_choices(char *buf, size_t cap);

/* The cuDNN the CUDA encoder would use: its version (9.13.0 is 91300),
 * loading it if not yet done; 0 when it cannot be loaded. */
int qac_cudnn_version(void);
/* Where it was loaded from, or why not, in a line into buf. */
const char *qac_cudnn_status(char *buf, size_t cap);

/* cuDNN's attention on host memory (the GPU test against qac's): out
 * [N,C] = the attention of the packed rows of qkv [N,3C] + qkv_b (offs
 * [B+1]; T at least the longest), prec bf16 or fp16, through cuDNN alone.
 * QAC_ERR_UNSUPPORTED, naming why, when cuDNN is not there or cannot run
 * it. */
qac_status qac_cudnn_fa_forward(float *out, const float *qkv, const float *qkv_b, const int *offs, int B, int T,
                                int C, int NH, qac_precision prec);

/* Host-memory entry points (tests). Layout as qac_flash_attention_forward:
 * offs NULL: padded rows [B,T], else packed (offs [B+1]); lens NULL: every
 * row of a sequence is a key. qkv [N,3C] and dout, out [N,C] are rounded to
 * prec (bf16 or fp16) on upload; qkv_b [3C] fp32 or NULL. Dropout p_attn
 * with key, sequence ids 0..B-1, at layer. tiles NULL: the defaults.
 * forward: out [N,C] (prec values as floats), lse [NH,N] (may be NULL).
 * backward: dqkv [N,3C] from dout and the forward's out and lse. */
qac_status qac_cuda_fa_forward(float *out, float *lse, const float *qkv, const float *qkv_b, const int *offs,
                               const int *lens, int B, int T, int C, int NH, int causal, int window, float p_attn,
                               uint64_t key, int layer, qac_precision prec, const qac_fa_tiles *tiles);
qac_status qac_cuda_fa_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                                const float *qkv_b, const int *offs, const int *lens, int B, int T, int C, int NH,
                                int causal, int window, float p_attn, uint64_t key, int layer, qac_precision prec,
                                const qac_fa_tiles *tiles);

#ifdef __cplusplus
}
#endif
#endif
