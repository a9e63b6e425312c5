/* Host-memory entry points of single CUDA training kernels, for the parity
 * tests against their CPU twins (model/bert_cpu.h, trainer/loss.c,
 * trainer/optim.c). Each copies its fp32 inputs to the GPU (activations
 * rounded to `prec` on the way: QAC_PREC_FP32 or QAC_PREC_BF16), runs the
 * kernel(s) and copies the results back as fp32. Gradients marked "+=" are
 * uploaded, accumulated on the GPU and downloaded, as the CPU twins
 * accumulate. Dropout: probability p, key and sequence ids 0..B-1, as a
 * qac_dropout with seq_ids NULL. All return QAC_ERR_UNSUPPORTED without CUDA
 * or a usable GPU. */
#ifndef QAC_CUDA_TRAIN_KERNELS_H
#define QAC_CUDA_TRAIN_KERNELS_H

#include <stdint.h>

#include "head_nets.h"
#include "qac_encoder.h"
#include "qac_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qac_embeddings_backward: dword [V,C], dpos [P,C], dtype [Tt,C] += rows of
 * dout [B,T,C] (type_ids may be NULL). */
qac_status qac_cuda_embeddings_backward(float *dword, float *dpos, float *dtype, const float *dout,
                                        const int32_t *ids, const int32_t *type_ids, int B, int T, int C, int V,
                                        int P, int Tt);
/* qac_layernorm_forward with the statistics: out [N,C], mean, rstd [N]. */
qac_status qac_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                      const float *b, int N, int C, float eps);
/* qac_layernorm_backward: dinp [N,C] written, dw, db [C] +=. */
qac_status qac_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                       const float *mean, const float *rstd, const float *w, int N, int C);
/* qac_gelu_backward in prec. [n] */
qac_status qac_cuda_gelu_backward(float *dinp, const float *dout, const float *pre, size_t n, qac_precision prec);
/* The FFN input's forward pieces: pre += bias, act = GELU(pre), in prec. [N,I] */
qac_status qac_cuda_bias_gelu_train(float *pre, float *act, const float *inp, const float *bias, int N, int I,
                                    qac_precision prec);
/* The fused tail of a post-LN sublayer (qac_kt_residual_ln_fwd then
 * qac_kt_residual_ln_bwd on the forward's own res, mean and rstd) against
 * qac_residual_layernorm_forward and _backward: proj [B*T,C] rounded to
 * prec; res, out, mean, rstd written, out_act (may be NULL) the act copy of
 * out as floats; dres, dproj (as stored in prec) written, dw, db, dbias [C]
 * +=. dadd may be NULL. */
qac_status qac_cuda_residual_layernorm_train(float *res, float *out, float *out_act, float *mean, float *rstd,
                                             float *dres, float *dproj, float *dw, float *db, float *dbias,
                                             const float *proj, const float *bias, const float *resid, const float *w,
                                             const float *b, const float *dout, const float *dadd, float p,
                                             uint64_t key, int layer, int site, int B, int T, int C, float eps,
                                             qac_precision prec);
/* The FFN's bias + GELU (qac_kt_bias_gelu, qac_kt_bias_gelu_bwd) against
 * qac_bias_gelu_forward and _backward: pre and dout [N,I] rounded to prec;
 * act, dpre (as stored) written, dbias [I] +=. */
qac_status qac_cuda_bias_gelu_fused(float *act, float *dpre, float *dbias, const float *pre, const float *bias,
                              const float *dout, int N, int I, qac_precision prec);
/* qac_matmul_backward in prec: dinp [N,IC] = dout W (written), dw [OC,IC]
 * and db [OC] += (fp32). Any output may be NULL. */
qac_status qac_cuda_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                    const float *w, int N, int IC, int OC, qac_precision prec);
/* qac_dropout_forward (fp32): out = inp * mask / (1 - p) (+ resid when not
 * NULL). [B,T,C] */
qac_status qac_cuda_dropout(float *out, const float *inp, const float *resid, float p, uint64_t key, int layer,
                            int site, int B, int T, int C);
/* qac_attention_forward_drop: out [B,T,C] and the probabilities att
 * [B,NH,T,T] (undropped) from qkv [B,T,3C] (bias included). */
qac_status qac_cuda_attention_train(float *out, float *att, const float *qkv, const int *lens, float p_attn,
                                    uint64_t key, int layer, int B, int T, int C, int NH, qac_precision prec);
/* qac_attention_backward: dqkv [B,T,3C] from datty [B,T,C] (the forward is
 * recomputed on the GPU from qkv). */
qac_status qac_cuda_attention_backward(float *dqkv, const float *datty, const float *qkv, const int *lens,
                                       float p_attn, uint64_t key, int layer, int B, int T, int C, int NH,
                                       qac_precision prec);
/* The causal (windowed) decoder attention of qac_attention_causal_forward
 * and qac_attention_causal_backward, through the same kernels with the
 * decoder's mask. */
qac_status qac_cuda_attention_causal_train(float *out, float *att, const float *qkv, const int *lens, int window,
                                           float p_attn, uint64_t key, int layer, int B, int T, int C, int NH,
                                           qac_precision prec);
qac_status qac_cuda_attention_causal_backward(float *dqkv, const float *datty, const float *qkv, const int *lens,
                                              int window, float p_attn, uint64_t key, int layer, int B, int T, int C,
                                              int NH, qac_precision prec);
/* The query-generation decoder's blocks (the layer functions of
 * kernels/cuda_layers, qac_kl_gpt_fwd and qac_kl_gpt_bwd) as
 * qac_qgen_forward then qac_qgen_backward: out [B,T,C] from x [B,T,C]
 * (GPT-2's input dropout included), dx [B,T,C] from dout, the parameter
 * gradients += into dparams [qac_qgen_param_count(q)] over the flat block
 * params of qac_qgen_bind. Dropout rates p_hidden, p_attn with key, seq ids
 * 0..B-1. */
qac_status qac_cuda_qgen_block(float *out, float *dx, float *dparams, const float *params, const float *x,
                               const float *dout, const int *lens, const qac_qgen_config *q, float p_hidden,
                               float p_attn, uint64_t key, int B, int T, qac_precision prec);
/* qac_pooling_backward: dhidden [B,T,C] written. */
qac_status qac_cuda_pooling_backward(float *dhidden, const float *dout, const float *hidden, const int *lens, int B,
                                     int T, int C, qac_pooling pooling, int normalize);
/* qac_infonce (dq, dp may be NULL together). */
qac_status qac_cuda_infonce(double *loss, float *dq, float *dp, const float *q, const float *p, int nq, int n,
                            int C, float tau, qac_similarity sim);
/* qac_cocondenser_loss (dx may be NULL). */
qac_status qac_cuda_cocondenser_loss(double *loss, float *dx, const float *x, int n2, int C, float tau);
/* The MLM cross-entropy of trainer/mlm.c over logits [M,V] (without the
 * bias) + bias [V] and labels [M] (all in [0, V)): *loss the mean, dlogits
 * [M,V] (may be NULL) = (softmax - onehot) / M. */
qac_status qac_cuda_mlm_ce(double *loss, float *dlogits, const float *logits, const float *bias,
                           const int32_t *labels, int M, int V);
/* The trainer's clip and AdamW over one block of n parameters: the global
 * norm of g (written to *norm), the clip scale min(1, max_norm / (norm +
 * 1e-6)), then qac_adamw_update on the clipped gradient, weight decay on
 * elements [0, n_decay) only. p, m, v updated in place; p_bf16 (may be
 * NULL) receives the bf16 copy as floats. */
qac_status qac_cuda_clip_adamw(float *p, float *p_bf16, const float *g, float *m, float *v, size_t n,
                               size_t n_decay, long t, double lr, double beta1, double beta2, double eps, double wd,
                               double max_norm, double *norm);

#ifdef __cplusplus
}
#endif
#endif
