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

/* out = LayerNorm(word_emb[ids] + pos_emb[t] + type_emb[0]) [B,T,C];
 * out_act (may be NULL) the same rounded to prec. word_emb [V,C], pos_emb [P,C]. */
qac_status qac_cuda_embeddings_layernorm(float *out, float *out_act, const int32_t *ids,
                                         const float *word_emb, const float *pos_emb,
                                         const float *type_emb, const float *w, const float *b,
                                         int B, int T, int C, int V, int P, float eps,
                                         qac_precision prec);
/* out = LayerNorm(x + (r + bias)); r is an activation in prec. All [N,C]. */
qac_status qac_cuda_residual_layernorm(float *out, const float *x, const float *r, const float *bias,
                                       const float *w, const float *b, int N, int C, float eps,
                                       qac_precision prec);
/* out = GELU_erf(inp + bias). [N,I] */
qac_status qac_cuda_bias_gelu(float *out, const float *inp, const float *bias, int N, int I,
                              qac_precision prec);
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

#ifdef __cplusplus
}
#endif
#endif
