// Internal to kernels/: launchers of the training kernels (the forward
// pieces that keep what backward needs, every layer's backward, the losses,
// the gradient norm and AdamW), on device pointers and one stream.
//
// Activations typed "act" are float (QAC_PREC_FP32) or __nv_bfloat16
// (QAC_PREC_BF16); fp16 is not a training precision. The residual stream,
// LayerNorm statistics, parameter gradients, master weights and optimiser
// state are always fp32. N = B * T rows. Each launcher returns the launch
// error. CPU twins: model/bert_cpu.h (layers), trainer/loss.c (InfoNCE),
// trainer/optim.c and trainer/trainer.c (AdamW, gradient norm).
//
// Every reduction runs in a fixed order that does not depend on timing
// (no atomics), so a step is bit-reproducible on the same GPU and shapes.
#ifndef QAC_TRAIN_KERNELS_CUH
#define QAC_TRAIN_KERNELS_CUH

#include "cuda_common.cuh"
#include "qac_scatter_plan.h"

extern "C" {
#include "qac_train.h"
}

// Dropout of one site: probability p (0: off), the step's key and the id of
// the batch's first sequence (sequence b draws with id seq_base + b), as
// qac_dropout with seq_ids = seq_base, seq_base + 1, ...
struct qac_kt_drop {
    float p;
    uint64_t key;
    uint64_t seq_base;
};

// ---- embeddings ----
// (kernels/train_embed.cu)
// emb [N,C] = word[ids] + pos[pos_ids, or row % T when NULL] + type[type_ids or 0]
// (pos or type NULL: that table not added; ModernBERT has neither)
cudaError_t qac_kt_embed_fwd(float *emb, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                             const float *word, const float *pos, const float *type, int N, int T, int C,
                             cudaStream_t s);
// dpos [T,C] += sum over b of dout[b,t,:], b in order (the CPU's order).
cudaError_t qac_kt_pos_bwd(float *dpos, const float *dout, int B, int T, int C, cudaStream_t s);

// Rows of dout gathered by key and added into dst[key]: the scatter of the
// word and token-type embedding gradients without atomics, from a plan
// built on the host (qac_scatter_plan.h; rows whose key is negative are
// left out of the plan: the frozen padding rows).
// dst[key] += the key's rows of dout [N,C], each key's rows summed in row
// order; d_plan is the plan's int block on the device; partial holds
// n_segs * C floats.
cudaError_t qac_kt_scatter_add(float *dst, const float *dout, qac_scatter_plan plan, const int32_t *d_plan,
                               float *partial, int C, cudaStream_t s);

// ---- LayerNorm ----
// out = (inp - mean) rstd w + b (b NULL: none, ModernBERT's norms);
// out_act (may be NULL) the same in prec; mean, rstd [N].
cudaError_t qac_kt_layernorm_fwd(float *out, void *out_act, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, int N, int C, float eps, qac_precision prec,
                                 cudaStream_t s);
// dinp [N,C] (written; may alias dout) and dw, db [C] (+=; db NULL: a
// LayerNorm without a bias).
// partial holds qac_kt_colsum_floats(N, C, 2) floats.
cudaError_t qac_kt_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, const float *w, float *partial, int N,
                                 int C, cudaStream_t s);

// Column sums over row blocks, finished in block order: the scratch a
// reduction of `ways` columns-sets over [N, C] needs.
size_t qac_kt_colsum_floats(int N, int C, int ways);
// db [C] += column sums of dout [N,C] (act).
cudaError_t qac_kt_bias_bwd(float *db, const void *dout, float *partial, int N, int C, qac_precision prec,
                            cudaStream_t s);

// ---- element-wise ----
// pre = pre + bias (in place, act), act = GELU(pre). [N,I]
cudaError_t qac_kt_bias_gelu_fwd(void *pre, void *act, const float *bias, int N, int I, qac_precision prec,
                                 cudaStream_t s);
// dinp = dout * GELU'(pre), all act; dinp may alias dout. [n]
cudaError_t qac_kt_gelu_bwd(void *dinp, const void *dout, const void *pre, size_t n, qac_precision prec,
                            cudaStream_t s);
// out [N,C] fp32 = resid + dropout(proj + bias) at (layer, site); proj act;
// bias NULL: none (ModernBERT's FFN output onto the residual stream).
cudaError_t qac_kt_bias_dropout_residual(float *out, const void *proj, const float *bias, const float *resid,
                                         qac_kt_drop d, int layer, int site, int B, int T, int C,
                                         qac_precision prec, cudaStream_t s);
// out = inp * mask / (1 - p) at (layer, site), fp32 in, out in out_prec
// (fp32 out may alias inp). With d.p == 0 a plain conversion. [B,T,C]
cudaError_t qac_kt_dropout(void *out, const float *inp, qac_kt_drop d, int layer, int site, int B, int T, int C,
                           qac_precision out_prec, cudaStream_t s);

// ---- fused passes (CPU twins: model/layers.c qac_residual_layernorm_*,
// qac_bias_gelu_*) ----
// The tail of a post-LN sublayer in one pass over each row: res [N,C] fp32
// = resid + dropout(proj + bias) at (layer, site), proj act; out = LN(res)
// (fp32, and in prec into out_act when not NULL), mean, rstd [N]. The bits
// of qac_kt_bias_dropout_residual then qac_kt_layernorm_fwd. bias and b
// may be NULL (none): the same pass is a pre-LN block's residual step
// (ModernBERT's x += proj, then LN2(x) for the FFN).
cudaError_t qac_kt_residual_ln_fwd(float *res, float *out, void *out_act, float *mean, float *rstd, const void *proj,
                                   const float *bias, const float *resid, const float *w, const float *b,
                                   qac_kt_drop d, int layer, int site, int B, int T, int C, float eps,
                                   qac_precision prec, cudaStream_t s);
// Its backward from dout = dL/d out [N,C] fp32: dres [N,C] fp32 (written)
// = LN'(dout) + dadd (dadd may be NULL: a pre-LN block adds its residual
// stream's gradient here), the gradient of res; dproj [N,C] act =
// dropout(dres) at (layer, site), the projection's gradient; and the
// column sums dw, db [C] (the LayerNorm's parameters) and dbias [C] (the
// projection's bias: of dproj as stored) +=, any of them NULL to skip.
// dres may alias dout or dadd. partial holds qac_kt_colsum_floats(N, C, 3)
// floats. The bits of qac_kt_layernorm_bwd, qac_kt_add, qac_kt_dropout and
// qac_kt_bias_bwd in sequence.
cudaError_t qac_kt_residual_ln_bwd(float *dres, void *dproj, float *dw, float *db, float *dbias, const float *dout,
                                   const float *dadd, const float *res, const float *mean, const float *rstd,
                                   const float *w, float *partial, qac_kt_drop d, int layer, int site, int B, int T,
                                   int C, qac_precision prec, cudaStream_t s);
// Whether the two above take rows of C columns (C <= 4096: a row's share
// per thread is kept in registers).
int qac_kt_fused_ln_supported(int C);
// act [N,I] = GELU(pre + bias), erf form (BERT's "gelu"; cuBLASLt's GELU
// epilogue is the tanh approximation, so the bias and GELU are one
// element-wise pass after the product instead). pre act, not modified:
// the backward adds the bias again.
cudaError_t qac_kt_bias_gelu(void *act, const void *pre, const float *bias, int N, int I, qac_precision prec,
                             cudaStream_t s);
// dpre [N,I] act = dout GELU'(pre + bias) (dpre may alias dout; bias NULL
// when pre holds it already), and dbias [I] (may be NULL) += the column
// sums of dpre as stored. partial holds qac_kt_colsum_floats(N, I, 1).
cudaError_t qac_kt_bias_gelu_bwd(void *dpre, float *dbias, const void *dout, const void *pre, const float *bias,
                                 float *partial, int N, int I, qac_precision prec, cudaStream_t s);

// ---- the encoder families' layers (ModernBERT) ----
// (kernels/train_family.cu; the forwards are the encoder's qac_k_rope and
// qac_k_geglu, kernels/bert_kernels.cuh)
// dqkv [N,3C] act: the Q and K parts turned back by the transpose of the
// rotation at pos[r] (cs: the qac_rope_table of the layer's theta, global
// or local); the V part untouched. C % NH == 0, C / NH even.
cudaError_t qac_kt_rope_bwd(void *dqkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_precision prec,
                            cudaStream_t s);
// dpre [N,2I] act (input half, gate half) from dact [N,I] act and pre
// [N,2I] act plus bias [2I] (NULL: none, or pre holds it; as qac_k_geglu
// adds it): d input = dact gate GELU'(input), d gate = dact GELU(input).
// dpre may alias pre, not dact. The bias's gradient: the column sums of
// dpre (qac_kt_bias_bwd).
cudaError_t qac_kt_geglu_bwd(void *dpre, const void *dact, const void *pre, const float *bias, int N, int I,
                             qac_precision prec, cudaStream_t s);

// ---- attention ----
// q, k, v [B,NH,T,hs] act = the heads of qkv [B,T,3C] (act) plus qkv_b.
cudaError_t qac_kt_qkv_split(void *q, void *k, void *v, const void *qkv, const float *qkv_b, int B, int T, int C,
                             int NH, qac_precision prec, cudaStream_t s);
// dqkv [B,T,3C] act = dq, dk, dv [B,NH,T,hs] merged back.
cudaError_t qac_kt_qkv_merge(void *dqkv, const void *dq, const void *dk, const void *dv, int B, int T, int C,
                             int NH, qac_precision prec, cudaStream_t s);
// [B,T,C] <-> [B,NH,T,hs], act.
cudaError_t qac_kt_heads_split(void *dst, const void *src, int B, int T, int C, int NH, qac_precision prec,
                               cudaStream_t s);
cudaError_t qac_kt_heads_merge(void *dst, const void *src, int B, int T, int C, int NH, qac_precision prec,
                               cudaStream_t s);
// Masked softmax of the scaled scores S [B,NH,T,T] (fp32): P (act), keys
// >= lens[b] exactly 0; Pd (act, may be NULL) = dropout(P) at (layer,
// QAC_DROP_ATT) with the CPU's counters. causal: also the decoder's mask of
// qac_attention_causal_forward (key j <= row t, and with window > 0 only key
// 0 and keys > t - window); not causal with window > 0: only keys with
// |t - j| <= window (ModernBERT's local layers, qac_attention_forward_window).
cudaError_t qac_kt_softmax_fwd(void *P, void *Pd, const float *S, const int *lens, qac_kt_drop d, int layer, int B,
                               int NH, int T, int causal, int window, qac_precision prec, cudaStream_t s);
// Pd = dropout(P) alone (backward re-draws the mask instead of keeping it).
cudaError_t qac_kt_att_dropout(void *Pd, const void *P, const int *lens, qac_kt_drop d, int layer, int B, int NH,
                               int T, qac_precision prec, cudaStream_t s);
// dS (act) = P (dP - rowsum(P dP)) * scale with dP = dropout(dPd), dPd fp32;
// zero on masked keys (bidirectional or causal alike: P is zero there).
cudaError_t qac_kt_softmax_bwd(void *dS, const void *P, const float *dPd, const int *lens, qac_kt_drop d,
                               int layer, int B, int NH, int T, float scale, qac_precision prec, cudaStream_t s);

// ---- pooling ----
// dhidden [B,T,C] (written) from dout [B,C], as qac_pooling_backward.
cudaError_t qac_kt_pool_bwd(float *dhidden, const float *dout, const float *hidden, const int *lens, int B, int T,
                            int C, int mean_pooling, int normalize, cudaStream_t s);
int qac_kt_pool_bwd_supported(int C);

// ---- losses ----
// out [n,C] = rows of x / max(||x||, 1e-12).
cudaError_t qac_kt_l2norm_rows(float *out, const float *x, int n, int C, cudaStream_t s);
// dx [n,C] from dy and x (y = x / ||x||); dx may alias dy.
cudaError_t qac_kt_l2norm_bwd_rows(float *dx, const float *dy, const float *x, int n, int C, cudaStream_t s);
// Cross-entropy of each row i of S [nq,np] (double) with target i*n:
// rowloss [nq], and G = (softmax(S) - onehot) * gscale in place of S.
cudaError_t qac_kt_ce_rows(double *S, double *rowloss, int nq, int np, int n, double gscale, cudaStream_t s);
// *loss = sum(rowloss) / nq, in order.
cudaError_t qac_kt_mean_loss(double *loss, const double *rowloss, int nq, cudaStream_t s);
// Conversions between fp32 and fp64. [n]
cudaError_t qac_kt_f32_to_f64(double *dst, const float *src, size_t n, cudaStream_t s);
cudaError_t qac_kt_f64_to_f32(float *dst, const double *src, size_t n, cudaStream_t s);

// ---- optimiser ----
// Per-tensor weight decay: tensor j covers [bounds[j], bounds[j+1]) and
// decays when decays[j] > 0; decays[j] < 0 marks a gap that is not trained
// (the pre-trainer's pooler between the encoder and the heads): p, m and v
// stay as they are. Elements past bounds[n] are not trained.
#define QAC_KT_MAX_TENSORS 48
struct qac_kt_tensors {
    int n;
    size_t bounds[QAC_KT_MAX_TENSORS + 1];
    int decays[QAC_KT_MAX_TENSORS];
};
// The scalars of one AdamW step, computed on the host in double exactly as
// qac_adamw_update does and rounded to float.
struct qac_kt_adamw {
    float decay;     // 1 - lr wd (applied where the tensor decays)
    float w1, b2, w2, step_size, bc2_sqrt, eps;
};
// Blocks of the first pass of the gradient norm.
#define QAC_KT_NORM_BLOCKS 1024
// partial [QAC_KT_NORM_BLOCKS] = per-block sums of g^2 over [0, n), in double.
cudaError_t qac_kt_sumsq(double *partial, const float *g, size_t n, cudaStream_t s);
// norm = sqrt(sum partial) (fixed order); scale = min(1, max_norm / (norm +
// 1e-6)) as torch's clip_grad_norm_ (1 when max_norm <= 0).
cudaError_t qac_kt_clip_scale(float *scale, double *norm, const double *partial, double max_norm, cudaStream_t s);
// AdamW over the trained prefix with the gradient scaled by *scale (read on
// the device); p_act (may be NULL) receives the new weights in bf16.
cudaError_t qac_kt_adamw_step(float *p, void *p_act, const float *g, float *m, float *v, const float *scale,
                              const qac_kt_tensors *tensors, qac_kt_adamw a, cudaStream_t s);
// One optimizer step of the trainers: the gradient's global norm over the
// trained prefix (partial [QAC_KT_NORM_BLOCKS], norm [1] and scale [1] on
// the device, no host round trip), the clip scale, and AdamW step `step`
// (1-based) at rate lr with the scalars derived as qac_adamw_update does.
cudaError_t qac_kt_clip_adamw(float *p, void *p_act, const float *g, float *m, float *v, double *partial, double *norm,
                              float *scale, const qac_kt_tensors *tensors, long step, double lr, double beta1,
                              double beta2, double eps, double wd, double max_norm, cudaStream_t s);

// ---- pre-training (CPU twins: trainer/mlm.c, trainer/cocondenser.c) ----
// y [n] += x [n] (fp32).
cudaError_t qac_kt_add(float *y, const float *x, size_t n, cudaStream_t s);
// out [M,C] = rows idx[i] of src [*,C] (fp32).
cudaError_t qac_kt_gather_rows(float *out, const float *src, const int32_t *idx, int M, int C, cudaStream_t s);
// dst [idx[i]] += rows i of src [M,C]; the idx are distinct.
cudaError_t qac_kt_scatter_add_rows(float *dst, const float *src, const int32_t *idx, int M, int C,
                                    cudaStream_t s);
// The MLM cross-entropy of trainer/mlm.c: logits [M,V] (fp32) plus bias
// [V] in place, then each row's loss against labels [M] into rowloss [M]
// (double), and with grad the row replaced by dL/dlogits = (softmax -
// onehot) / M, in the CPU's arithmetic (double sums, float results).
cudaError_t qac_kt_mlm_ce(float *logits, double *rowloss, const float *bias, const int32_t *labels, int M, int V,
                          int grad, cudaStream_t s);
// coCondenser's rows: S [n2,n2] (double) scores already divided by tau;
// the diagonal is excluded and the target of row i is i ^ 1. rowloss [n2],
// and S becomes G = (softmax - onehot) / n2 with a zero diagonal.
cudaError_t qac_kt_pair_ce_rows(double *S, double *rowloss, int n2, cudaStream_t s);

// ---- matrix products (row-major views over cuBLAS) ----
// C [M,N] = alpha op(A) op(B) + beta C, batched with element strides;
// A, B in ab_prec, C in c_prec (fp32 or ab_prec), fp32 accumulation (fp32
// pedantic: no TF32). lda/ldb/ldc are row lengths of the stored matrices.
cublasStatus_t qac_kt_gemm(cublasHandle_t h, int transA, int transB, int M, int N, int K, float alpha,
                           const void *A, int lda, long long strideA, const void *B, int ldb, long long strideB,
                           float beta, void *C, int ldc, long long strideC, int batch, qac_precision ab_prec,
                           qac_precision c_prec);


// ---- composites (qac_status; cuBLAS runs on the handle's stream, which
// must be s) ----
// coCondenser's contrastive loss, as qac_cocondenser_loss: x [n2,C] fp32
// on the device, siblings adjacent; *loss (device) and dx [n2,C] (fp32,
// written). Scores and gradients in fp64 as on the CPU. scratch holds
// qac_kt_cocondenser_scratch(n2, C) bytes.
size_t qac_kt_cocondenser_scratch(int n2, int C);
qac_status qac_kt_cocondenser(cublasHandle_t h, double *loss, float *dx, const float *x, int n2, int C, float tau,
                              void *scratch, cudaStream_t s);
// InfoNCE over Tevatron groups, as qac_infonce (trainer/loss.c): q [nq,C]
// and p [nq*n,C] fp32 on the device; *loss (device) and dq, dp (fp32,
// written). The scores, the softmax and the representation gradients are
// computed in fp64, as the CPU computes its dot products, so the loss adds
// nothing measurable to the fp32 comparison. scratch holds
// qac_kt_infonce_scratch(nq, n, C) bytes.
size_t qac_kt_infonce_scratch(int nq, int n, int C);
qac_status qac_kt_infonce(cublasHandle_t h, double *loss, float *dq, float *dp, const float *q, const float *p,
                          int nq, int n, int C, float tau, qac_similarity sim, void *scratch, cudaStream_t s);

// A linear layer without bias: out [N,OC] act = inp [N,IC] W^T, W [OC,IC] act.
qac_status qac_kt_linear_fwd(cublasHandle_t h, void *out, const void *inp, const void *W, int N, int IC, int OC,
                             qac_precision prec);
// Its backward, each part skipped when its output is NULL:
// dinp [N,IC] = dout W + dinp_beta * dinp, stored in dinp_prec (prec, or
// fp32 to accumulate a residual gradient); dW [OC,IC] fp32 += dout^T inp;
// db [OC] += column sums of dout (partial: qac_kt_colsum_floats(N, OC, 1)).
qac_status qac_kt_linear_bwd(cublasHandle_t h, void *dinp, qac_precision dinp_prec, float dinp_beta, float *dW,
                             float *db, const void *dout, const void *inp, const void *W, float *partial, int N,
                             int IC, int OC, qac_precision prec, cudaStream_t s);

// Training attention over qkv [B,T,3C] act (without bias) + qkv_b:
// q, k, v [B,NH,T,hs] and the probabilities P [B,NH,T,T] are kept for
// backward; atty [B,T,C] act is the context. Scratch: S [B*NH*T*T] fp32,
// Pd [B*NH*T*T] act (read only with attention dropout), O [B*T*C] act.
// causal, window: the decoder's mask (see qac_kt_softmax_fwd); 0, 0 for
// the encoder (0, window for a local layer). Backward (below) is the same for both.
qac_status qac_kt_attention_fwd(cublasHandle_t h, void *atty, void *q, void *k, void *v, void *P, float *S,
                                void *Pd, void *O, const void *qkv, const float *qkv_b, const int *lens,
                                qac_kt_drop d, int layer, int B, int T, int C, int NH, int causal, int window,
                                qac_precision prec, cudaStream_t s);
// dqkv [B,T,3C] act (written) from datty [B,T,C] act and the kept q, k, v,
// P. Scratch: dP [B*NH*T*T] fp32, Pd and dS [B*NH*T*T] act, dO, dq, dk, dv
// [B*T*C] act each.
qac_status qac_kt_attention_bwd(cublasHandle_t h, void *dqkv, const void *datty, const void *q, const void *k,
                                const void *v, const void *P, float *dP, void *Pd, void *dS, void *dO, void *dq,
                                void *dk, void *dv, const int *lens, qac_kt_drop d, int layer, int B, int T, int C,
                                int NH, qac_precision prec, cudaStream_t s);

#endif
