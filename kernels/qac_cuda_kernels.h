/* Host-memory entry points of single CUDA encoder kernels, for the parity
 * tests against their CPU twins in model/bert_cpu.h. Each copies its fp32
 * inputs to the GPU (activations converted to `prec` on the way), runs one
 * kernel and copies the result back as fp32. Shapes follow bert_cpu.h.
 * All return QAC_ERR_UNSUPPORTED without CUDA or a usable GPU. */
#ifndef QAC_CUDA_KERNELS_H
#define QAC_CUDA_KERNELS_H

#include "qac_encoder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The LayerNorm kernels take `warps`: 0 runs the one-block-a-row kernel,
 * 1 to 16 the one-warp-a-row kernel with that many rows per block (which
 * needs C a multiple of 4 up to 1024; QAC_ERR_UNSUPPORTED otherwise). */
/* out = LayerNorm(word_emb[ids] + pos_emb[t] + type_emb[0]) [B,T,C];
 * out_act (may be NULL) the same rounded to prec. word_emb [V,C], pos_emb [P,C]. */
qac_status qac_cuda_embeddings_layernorm(float *out, float *out_act, const int32_t *ids,
                                         const float *word_emb, const float *pos_emb,
                                         const float *type_emb, const float *w, const float *b,
                                         int B, int T, int C, int V, int P, float eps,
                                         qac_precision prec, int warps);
/* out = LayerNorm(x + (r + bias)); r is an activation in prec. All [N,C];
 * out_act (may be NULL) the same rounded to prec. */
qac_status qac_cuda_residual_layernorm(float *out, float *out_act, const float *x, const float *r,
                                       const float *bias, const float *w, const float *b, int N, int C,
                                       float eps, qac_precision prec, int warps);
/* The encoder's last pass: out [B,C] = pooling (qac_pooling_forward_from:
 * CLS or mean over rows [from[b], lens[b]) of sequence b, from NULL: 0) of
 * LayerNorm(x + (r + bias)), then L2-normalised when normalize. x, r [N,C]
 * (r an activation in prec); sequence b at rows offs[b].. when offs is not
 * NULL (packed, N = offs[B]), else b*T.. (N = B*T). lens[b] = 0 gives a
 * zero row. */
qac_status qac_cuda_ln_pool(float *out, const float *x, const float *r, const float *bias, const float *w,
                            const float *b, const int *offs, const int *lens, const int *from, int B, int T, int N,
                            int C, float eps, qac_pooling pooling, int normalize, qac_precision prec, int warps);
/* out = GELU_erf(inp + bias). [N,I]. rows 0: one thread per 16 bytes; else
 * each thread on `rows` rows of a column chunk (the same bits). */
qac_status qac_cuda_bias_gelu(float *out, const float *inp, const float *bias, int N, int I,
                              qac_precision prec, int rows);
/* Masked self-attention on qkv [B,T,3C] (without bias) + qkv_b [3C]. out [B,T,C]. */
qac_status qac_cuda_attention(float *out, const float *qkv, const float *qkv_b, const int *lens,
                              int B, int T, int C, int NH, qac_precision prec);
/* CLS or mean pooling over rows [from[b], lens[b]) (from NULL: 0), then
 * optional L2 normalisation, as qac_pooling_forward_from. out [B,C]; hidden [B,T,C]. */
qac_status qac_cuda_pooling(float *out, const float *hidden, const int *lens, const int *from, int B, int T, int C,
                            qac_pooling pooling, int normalize);
/* out [N,OC] = inp [N,IC] W^T, W [OC,IC], through cuBLAS in prec. */
qac_status qac_cuda_matmul(float *out, const float *inp, const float *w, int N, int IC, int OC,
                           qac_precision prec);

/* CUDA graph launches by the process's CUDA encoders so far (0 without CUDA). */
unsigned long qac_cuda_encoder_graph_launches(void);

#ifdef __cplusplus
}
#endif
#endif
