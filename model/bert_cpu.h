/* The CPU reference BERT encoder (fp32): forward for inference and
 * training, and backward.
 *
 * Layer math (layers.c) is plain functions over flat row-major arrays, each
 * forward beside its backward twin (d-prefixed gradients), outputs first,
 * shapes in the comments. B = batch, T = padded length, C = hidden size,
 * NH = heads, hs = C / NH, I = intermediate size, N = B * T rows. Every
 * function takes an optional thread pool last (NULL runs serially); matrix
 * products go through model/gemm.c, whose per-element arithmetic does not
 * depend on the batch: a sequence's vectors are the same bits alone or in
 * any batch, at any padded length. These are the CPU twins of the CUDA
 * kernels in kernels/.
 *
 * Padding follows Hugging Face: a sequence b has lens[b] real tokens, keys at
 * positions >= lens[b] get exactly zero attention weight, and padded query
 * rows are still computed (they attend to the real keys), so every row of
 * every hidden state equals PyTorch's. */
#ifndef QAC_BERT_CPU_H
#define QAC_BERT_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "gemm.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dropout ----
 * HF BERT's four sites: after the embedding LayerNorm, on the attention
 * probabilities, and on the attention and FFN output projections before
 * their residual. Masks come from qac_rng (counter-based): element i of
 * position t of sequence seq_ids[b] at (layer, site) is a pure function of
 * (key, seq, layer, site, t, i), so a re-forward, a GradCache chunk or a
 * resumed step draws the same masks whatever the batch around it. */
enum { QAC_DROP_EMB = 0, QAC_DROP_ATT = 1, QAC_DROP_ATT_OUT = 2, QAC_DROP_FFN_OUT = 3 };
typedef struct qac_dropout {
    float hidden, attn;       /* probabilities (hidden_dropout_prob, attention_probs_dropout_prob); 0 = off */
    uint64_t key;             /* one per step, e.g. qac_rng_key(seed, step, stream, 0) */
    const uint64_t *seq_ids;  /* [B] stable ids of the batch's sequences (NULL: 0..B-1) */
} qac_dropout;
/* Whether site draws anything (d may be NULL). */
int qac_dropout_active(const qac_dropout *d, int site);
/* out = inp * mask / (1 - p) (+ resid when not NULL), rows [B*T, C]. The
 * same call with gradients is the backward (resid NULL). out may alias inp. */
void qac_dropout_forward(float *out, const float *inp, const float *resid, const qac_dropout *d, int layer, int site,
                         int B, int T, int C, qac_pool *pool);

/* out[b,t,:] = word_emb[ids[b,t]] + pos_emb[t] + type_emb[type_ids[b,t]]
 * (type 0 everywhere when type_ids is NULL). No LayerNorm.
 * out [B,T,C]; ids, type_ids [B,T]; word_emb [V,C]; pos_emb [P,C]; type_emb [Tt,C]. */
void qac_embeddings_forward(float *out, const int32_t *ids, const int32_t *type_ids,
                            const float *word_emb, const float *pos_emb, const float *type_emb,
                            int B, int T, int C, qac_pool *pool);
/* The same with the position of row r from pos_ids[r] (NULL: r % T); a
 * NULL pos_emb or type_emb adds nothing (the families without them). */
void qac_embeddings_forward_at(float *out, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                               const float *word_emb, const float *pos_emb, const float *type_emb, int B, int T, int C,
                               qac_pool *pool);

/* dword [V,C], dpos [P,C], dtype [Tt,C] += the rows of dout [B,T,C]. */
void qac_embeddings_backward(float *dword, float *dpos, float *dtype, const float *dout, const int32_t *ids,
                             const int32_t *type_ids, int B, int T, int C);
/* The same with pos_ids (NULL: r % T); dpos or dtype NULL: not accumulated.
 * The rows of token pad_id and of position pad_pos get no gradient (-1:
 * every row does), as torch's nn.Embedding(padding_idx=...) gives none. */
void qac_embeddings_backward_at(float *dword, float *dpos, float *dtype, const float *dout, const int32_t *ids,
                                const int32_t *type_ids, const int32_t *pos_ids, int32_t pad_id, int32_t pad_pos,
                                int B, int T, int C);

/* Position ids of rows [B,T] (offs NULL) or packed (sequence b in rows
 * offs[b] .. offs[b] + lens[b]): learned and rotary, the row's index in its
 * sequence; offset (RoBERTa), padding_idx + 1 + the non-pad tokens up to
 * and including it, padding_idx for a pad token and for rows past lens[b]
 * (transformers' create_position_ids_from_input_ids). pos [N]. */
void qac_positions_fill(int32_t *pos, const int32_t *ids, const int *lens, const int *offs, int B, int T,
                        const qac_bert_config *c);

/* ---- the families' layer math (family_layers.c) ---- */

/* The rotary angles' cosines and sines for positions [0, P), hs/2 each:
 * inv_freq_i = 1 / theta^(2i / hs) and angle p * inv_freq_i, in float32 as
 * transformers computes them. cs [P, hs]: cos in [.., 0, hs/2), sin after. */
void qac_rope_table(float *cs, int P, int hs, float theta);
/* Rotate the Q and K parts of qkv [N,3C] in place, row r by position
 * pos[r] (rotate_half: x_i' = x_i cos - x_{i+hs/2} sin, x_{i+hs/2}' =
 * x_{i+hs/2} cos + x_i sin, per head). Backward: the inverse rotation of
 * dqkv's Q and K parts. */
void qac_rope_forward(float *qkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_pool *pool);
void qac_rope_backward(float *dqkv, const int32_t *pos, const float *cs, int N, int C, int NH, qac_pool *pool);
/* GeGLU: act [N,I] = GELU(pre[:, :I]) * pre[:, I:], pre [N,2I]. Backward:
 * dpre [N,2I] (written) from dact [N,I]. */
void qac_geglu_forward(float *act, const float *pre, int N, int I, qac_pool *pool);
void qac_geglu_backward(float *dpre, const float *dact, const float *pre, int N, int I, qac_pool *pool);
/* The pre-LayerNorm step of the CUDA encoder (kernels/family_kernels.cu):
 * x [N,C] += r + bias (r NULL: unchanged; bias may be NULL), then xn [N,C]
 * = LayerNorm(x) with w, b (b may be NULL). */
void qac_add_layernorm_forward(float *x, float *xn, const float *r, const float *bias, const float *w, const float *b,
                               int N, int C, float eps, qac_pool *pool);

/* out = (inp - mean) * rstd * w + b per row. mean, rstd [N] may be NULL.
 * out, inp [N,C] (out may alias inp); w, b [C]. */
void qac_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C, float eps, qac_pool *pool);
/* dinp [N,C] = d/dinp (written; may alias dout); dw, db [C] += over rows. */
void qac_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *mean, const float *rstd, const float *w, int N, int C, qac_pool *pool);

/* GELU, erf form: out = 0.5 x (1 + erf(x / sqrt 2)). out may alias inp. [n] */
void qac_gelu_forward(float *out, const float *inp, size_t n, qac_pool *pool);

/* dinp = dout * GELU'(pre), [n]; dinp may alias dout. */
void qac_gelu_backward(float *dinp, const float *dout, const float *pre, size_t n, qac_pool *pool);

/* The CUDA trainer's fused passes (kernels/train_kernels.cuh), composed of
 * the functions above: their twins.
 * The tail of a post-LN sublayer: res [B*T,C] = resid + dropout(proj +
 * bias) at (layer, site) (d may be NULL: none), out = LN(res) with w, b;
 * mean, rstd [B*T] kept. res may alias proj. bias and b may be NULL (none:
 * also a pre-LN step without biases, ModernBERT's x += proj, LN2(x)). */
void qac_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *proj,
                                    const float *bias, const float *resid, const float *w, const float *b,
                                    const qac_dropout *d, int layer, int site, int B, int T, int C, float eps,
                                    qac_pool *pool);
/* Its backward: dres = LN'(dout) (+ dadd, may be NULL) (written; may alias
 * dout), dproj = dropout(dres) (written); dw, db [C] += as
 * qac_layernorm_backward, dbias [C] (may be NULL) += column sums of dproj. */
void qac_residual_layernorm_backward(float *dres, float *dproj, float *dw, float *db, float *dbias, const float *dout,
                                     const float *dadd, const float *res, const float *mean, const float *rstd,
                                     const float *w, const qac_dropout *d, int layer, int site, int B, int T, int C,
                                     qac_pool *pool);
/* act [N,I] = GELU(pre + bias); pre unchanged. */
void qac_bias_gelu_forward(float *act, const float *pre, const float *bias, int N, int I, qac_pool *pool);
/* dpre [N,I] = dout GELU'(pre + bias) (bias may be NULL; dpre may alias
 * dout), dbias [I] (may be NULL) += column sums of dpre. */
void qac_bias_gelu_backward(float *dpre, float *dbias, const float *dout, const float *pre, const float *bias, int N,
                            int I, qac_pool *pool);

/* Scratch memory. The functions below that need memory of their own
 * besides their outputs take it from the caller's plan where they have a
 * scratch argument (sized by the function named there); given NULL, or
 * having no such argument, they allocate it once per call, before their
 * parallel loop, and return QAC_ERR_NOMEM when it cannot be had. Nothing
 * is allocated inside a task, and nothing aborts. */

/* pre = inp W^T + bias, out = GELU(pre): the FFN input projection with the
 * bias and activation fused. pre may be NULL (not kept; then out holds the
 * activation only). out, pre [N,OC]; inp [N,IC]; w [OC,IC]; bias [OC].
 * _forward packs w for the call; _packed takes it packed, and scratch as
 * qac_gemm does. With int8 weights GELU is the int8 FFN's
 * (qac_vm_gelu_q8, vecmath.h), as in qac_matmul_gelu_q8. */
qac_status qac_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w, const float *bias, int N,
                                   int IC, int OC, qac_pool *pool);
qac_status qac_matmul_gelu_packed(float *out, float *pre, const float *inp, const qac_packed_w *pw,
                                  const float *bias, int N, void *scratch, qac_pool *pool);
/* The same (pre NULL) for the int8 FFN, whose activation only feeds the
 * next product: each block of finished rows quantised into q8
 * (qac_gemm_q8_bytes(N, OC) bytes, gemm.h) while it is in cache, for that
 * product's qac_gemm_q8. out [N, OC] is the blocks' scratch
 * (qac_gemm_then_local): it is left without the activation. */
qac_status qac_matmul_gelu_q8(float *out, const float *inp, const qac_packed_w *pw, const float *bias, int N,
                              void *scratch, void *q8, qac_pool *pool);

/* Backward of out = inp W^T + bias, each part skipped when its output is NULL:
 * dinp [N,IC] = dout [N,OC] W [OC,IC] (+ dresid [N,IC]; written, dresid may
 * alias dinp), dw [OC,IC] += dout^T inp, db [OC] += column sums of dout.
 * scratch holds qac_matmul_backward_scratch(N, IC, OC) floats (W^T
 * packed); dw's blocks of rows are allocated per call. */
size_t qac_matmul_backward_scratch(int N, int IC, int OC);
qac_status qac_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *dresid, int N, int IC, int OC, float *scratch, qac_pool *pool);
/* qac_gemm_pack_into over the pool, one 16-column panel per task. */
void qac_gemm_pack_parallel(float *packed, const float *w, int OC, int IC, int ldw, int transposed, qac_pool *pool);

/* Multi-head self-attention over fused projections.
 * qkv [B,T,3C]: per row Q | K | V, head h in columns [h*hs, (h+1)*hs) of each.
 * out [B,T,C]: softmax(Q K^T / sqrt(hs) + mask) V, heads concatenated.
 * att [B,NH,T,T]: the probabilities, kept for backward (masked keys hold 0),
 * or NULL. scratch: qac_pool_size(pool) times qac_attention_scratch_floats
 * (T, C, NH, dropout on) floats (a thread's packed K and V, and the
 * probabilities when att is NULL or dropout is on), or NULL. */
size_t qac_attention_scratch_floats(int T, int C, int NH, int dropout);
qac_status qac_attention_forward(float *out, float *att, float *scratch, const float *qkv, const int *lens, int B,
                                 int T, int C, int NH, qac_pool *pool);
/* The same with dropout on the probabilities (att keeps them undropped). */
qac_status qac_attention_forward_drop(float *out, float *att, float *scratch, const float *qkv, const int *lens,
                                      const qac_dropout *drop, int layer, int B, int T, int C, int NH, qac_pool *pool);
/* Inference over packed rows (no padding): sequence b holds rows
 * [offs[b], offs[b] + lens[b]) of qkv [N,3C] and out [N,C]; T >= every
 * lens[b] sizes scratch (as above, no dropout). Each real row gets the
 * same bits as qac_attention_forward gives it in any padded batch. */
qac_status qac_attention_forward_packed(float *out, float *scratch, const float *qkv, const int *lens,
                                        const int *offs, int B, int T, int C, int NH, qac_pool *pool);
/* Any of the above with a local window (window > 0: query t sees key j
 * only when |t - j| <= window, ModernBERT's local layers). A local layer's
 * query rows go in blocks whose scores cover only the keys their windows
 * reach: the cost grows with the window, not with T. att (when kept) holds
 * zero outside the window; offs NULL: padded rows. scratch as above. */
qac_status qac_attention_forward_window(float *out, float *att, float *scratch, const float *qkv, const int *lens,
                                        const int *offs, int window, const qac_dropout *drop, int layer, int B, int T,
                                        int C, int NH, qac_pool *pool);
/* The same for one query row of each sequence, row rows[b] of sequence b
 * (0 <= rows[b] < lens[b]), over all its keys: out [B,C], row b the same
 * bits as that row of qac_attention_forward_packed_bf16's out with the same
 * bf16 (0: qac_attention_forward_packed's). Global attention only (no
 * window). */
qac_status qac_attention_forward_packed_rows(float *out, float *scratch, const float *qkv, const int *lens,
                                             const int *offs, const int *rows, int B, int T, int C, int NH, int bf16,
                                             qac_pool *pool);
/* Inference over packed rows (as qac_attention_forward_packed) with one or
 * both products in bf16 when the CPU has AVX512_BF16 (bf16 a mask of
 * QAC_ATT_BF16_QK and QAC_ATT_BF16_PV; without AVX512_BF16, or bf16 0,
 * exactly qac_attention_forward_packed). QK: per (sequence, head) Q times
 * 1 / sqrt(hs) and K rounded to bf16, S = Q K^T summed by vdpbf16ps in
 * fp32 (else as the fp32 attention). The softmax in fp32. PV: P and V
 * rounded to bf16, out = P V by vdpbf16ps (else fp32). A row still
 * depends on its own sequence only. The int8 encoder's attention. scratch:
 * as qac_attention_forward_drop's (with dropout: the rounded P takes that
 * room). */
enum { QAC_ATT_BF16_QK = 1, QAC_ATT_BF16_PV = 2 };
qac_status qac_attention_forward_packed_bf16(float *out, float *scratch, const float *qkv, const int *lens,
                                             const int *offs, int B, int T, int C, int NH, int bf16,
                                             qac_pool *pool);
/* Inference over packed rows from Q|K|V already rounded to bf16 (qkv16
 * [N, 3C]; the int8 encoder's Q|K|V product writes them so): both products
 * by vdpbf16ps as QAC_ATT_BF16_QK | QAC_ATT_BF16_PV, but Q rounded as it
 * is, each score's sum then multiplied by 1 / sqrt(hs) in fp32, and the
 * softmax qac_vm_softmax_row_b16 (P is rounded to bf16 next). rows
 * NULL: every row; else one query row a sequence, as
 * qac_attention_forward_packed_rows. Needs AVX512_BF16 or runs the same
 * bits emulated; hs even. */
qac_status qac_attention_forward_bf16_qkv(float *out, float *scratch, const uint16_t *qkv16, const int *lens,
                                          const int *offs, const int *rows, int B, int T, int C, int NH,
                                          qac_pool *pool);
/* Sequence b's heads of qac_attention_forward_bf16_qkv alone, on the
 * calling thread, with the same bits; scratch: that thread's
 * qac_attention_scratch_floats(T, C, NH, 1) floats. */
void qac_attention_bf16_qkv_seq(float *out, float *scratch, const uint16_t *qkv16, const int *lens, const int *offs,
                                const int *rows, int b, int T, int C, int NH);
/* dqkv [B,T,3C] (written) from datty [B,T,C], the kept probabilities att
 * [B,NH,T,T] and qkv; keys past lens[b] get zero gradient. */
qac_status qac_attention_backward(float *dqkv, const float *datty, const float *qkv, const float *att,
                                  const int *lens, const qac_dropout *drop, int layer, int B, int T, int C, int NH,
                                  qac_pool *pool);

/* Causal self-attention with an optional window (decoders: the query
 * generator of model/head_nets.c). Row i of sequence b attends to key j when
 * j <= i, j < lens[b], and either window <= 0 (plain causal) or j == 0 or
 * j > i - window: the first position (the encoder's [CLS]) stays visible
 * and so do the last `window` positions up to i. Padded rows (i >= lens[b])
 * are computed too, over the real keys their rule allows, as Hugging Face
 * does. Other keys get exactly zero weight. Dropout (drop NULL: none) on
 * the probabilities, with the masks of qac_attention_forward_drop at
 * `layer`. qkv [B,T,3C] as above; out [B,T,C]; att [B,NH,T,T] kept for
 * backward (undropped, masked entries 0). */
qac_status qac_attention_causal_forward(float *out, float *att, const float *qkv, const int *lens, int window,
                                        const qac_dropout *drop, int layer, int B, int T, int C, int NH,
                                        qac_pool *pool);
/* dqkv [B,T,3C] (written) from datty [B,T,C], qkv and the kept att. */
qac_status qac_attention_causal_backward(float *dqkv, const float *datty, const float *qkv, const float *att,
                                         const int *lens, int window, const qac_dropout *drop, int layer, int B, int T,
                                         int C, int NH, qac_pool *pool);

/* ---- fused attention (FlashAttention-2): the CPU twin of the CUDA kernels
 * in kernels/flash_attention.cu, in their order of work (attention_flash.c).
 * Per (sequence, head) the keys are taken in tiles of bk with an online
 * softmax in fp32 (running maximum and sum, the partial output rescaled when
 * the maximum grows); no T x T matrix is stored. The same results as
 * qac_attention_forward_drop / qac_attention_causal_forward up to rounding.
 * Rows: with offs NULL the padded layout, sequence b in rows [b*T, b*T + T),
 * all T query rows computed as qac_attention_forward does; else packed,
 * sequence b in rows [offs[b], offs[b+1]) (offs [B+1]). Keys: the
 * sequence's first lens[b] rows (lens NULL: all of its rows). qkv [N,3C]
 * holds Q | K | V per row (head h at columns h*hs of each), qkv_b [3C] (NULL:
 * none) is added on load. causal, window: the decoder mask of
 * qac_attention_causal_forward (0, 0: bidirectional). drop (NULL: none):
 * the probability masks of qac_attention_forward_drop at `layer`.
 * out [N,C]; lse [NH,N] (may be NULL): log2 sum_j 2^v_j of the row's scores
 * in base 2, v = q.k log2(e) / sqrt(hs); a row that sees no key gets out 0
 * and lse +inf. round (QAC_PREC_FP32: none) rounds what the GPU kernels
 * hold in bf16 or fp16 the same way: Q, K, V on load (before and after the
 * bias), the probabilities before P V, dS before its products, dout and
 * out as the backward reads them, and every output. */
qac_status qac_flash_attention_forward(float *out, float *lse, const float *qkv, const float *qkv_b, const int *offs,
                                       const int *lens, int B, int T, int C, int NH, int causal, int window,
                                       const qac_dropout *drop, int layer, int bk, qac_precision round,
                                       qac_pool *pool);
/* dqkv [N,3C] (written in full: keys past lens[b] get 0) from dout [N,C],
 * the forward's out and lse, and qkv (+ qkv_b): D = rowsum(dout * out),
 * the probabilities recomputed from lse, dK and dV per key over query tiles
 * of bq, then dQ per query over key tiles of bk. */
qac_status qac_flash_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse,
                                        const float *qkv, const float *qkv_b, const int *offs, const int *lens, int B,
                                        int T, int C, int NH, int causal, int window, const qac_dropout *drop,
                                        int layer, int bq, int bk, qac_precision round, qac_pool *pool);

/* Pool the last hidden state: CLS (row 0) or the mean over the lens[b] real
 * tokens, then, when normalize, x / max(||x||_2, 1e-12) (F.normalize).
 * out [B,C]; hidden [B,T,C]. */
void qac_pooling_forward(float *out, const float *hidden, const int *lens, int B, int T, int C,
                         qac_pooling pooling, int normalize);
/* Same, pooling token rows [from[b], lens[b]) of each sequence (from may be
 * NULL: all from 0): CLS takes row from[b]; when from[b] >= lens[b] the
 * mean is 0 and CLS takes row 0, as sentence-transformers does with an
 * all-masked sequence. */
void qac_pooling_forward_from(float *out, const float *hidden, const int *lens, const int *from, int B, int T, int C,
                              qac_pooling pooling, int normalize);
/* dhidden [B,T,C] (written, zero where pooling reads nothing) from dout
 * [B,C]; the normalisation is recomputed from hidden. */
void qac_pooling_backward(float *dhidden, const float *dout, const float *hidden, const int *lens, int B, int T,
                          int C, qac_pooling pooling, int normalize);
/* y = x / max(||x||, 1e-12): dx [C] from dy [C] and x. */
void qac_l2norm_backward(float *dx, const float *dy, const float *x, int C);

/* ---- the whole encoder ----
 * Activations live in one allocation sized for (B, T) and views into it, in
 * one of three modes:
 *   QAC_ACTS_INFER   (0) inference: the views alias each other as far as one
 *                    layer's dataflow allows (about 6 C + max(4C, I) floats
 *                    per token) and only `last` is meaningful afterwards;
 *                    the views marked (NULL) are dropped;
 *   QAC_ACTS_KEEP    (1) every layer's tensors are kept for backward: index
 *                    layer l as qkv + l * B*T*3C and so on (Lk = L);
 *   QAC_ACTS_RECOMPUTE (2) only the layer inputs (hidden) are kept and one
 *                    layer's tensors (Lk = 1); backward re-runs each layer's
 *                    forward before its backward. */
enum { QAC_ACTS_INFER = 0, QAC_ACTS_KEEP = 1, QAC_ACTS_RECOMPUTE = 2 };
typedef struct qac_bert_acts {
    int B, T, keep, layers_kept, nthreads;
    float *mem;
    size_t n_floats;
    float *emb;        /* [B,T,C] embedding sum, LayerNorm input */
    float *emb_mean;   /* [B,T] (NULL) */
    float *emb_rstd;   /* [B,T] (NULL) */
    float *hidden;     /* [L+1,B,T,C]: hidden[0] = embeddings, hidden[l+1] = layer l output
                          (infer: two [B,T,C] work rows, no history) */
    float *qkv;        /* [Lk,B,T,3C] */
    float *att;        /* [Lk,B,NH,T,T] (NULL) */
    float *scratch;    /* [nthreads, qac_bert_scratch_floats / nthreads]: the attention's and
                          the matrix products' per-thread memory */
    float *atty;       /* [Lk,B,T,C] attention context before the output projection */
    float *res1;       /* [Lk,B,T,C] layer input + attention output (LN1 input) */
    float *ln1_mean;   /* [Lk,B,T] (NULL) */
    float *ln1_rstd;   /* [Lk,B,T] (NULL) */
    float *ln1;        /* [Lk,B,T,C] post-LN: LN1(res1); pre-LN: LN1(layer input), the
                          attention's input (layer 0 reads its input itself) */
    float *ffn_pre;    /* [Lk,B,T,F] before GELU (NULL but with GeGLU); F = 2I with GeGLU */
    float *ffn_act;    /* [Lk,B,T,I] after GELU (GeGLU: times the gate) */
    float *res2;       /* [Lk,B,T,C] ln1 + FFN output (LN2 input; NULL pre-LN) */
    float *ln2_mean;   /* [Lk,B,T] (NULL) */
    float *ln2_rstd;   /* [Lk,B,T] (NULL) */
    float *ffn_in;     /* [Lk,B,T,C] the FFN's input: post-LN ln1 itself, pre-LN LN2(res1) */
    float *final_mean; /* [B,T] pre-LN: the final LayerNorm's statistics (NULL otherwise) */
    float *final_rstd; /* [B,T] */
    float *last;       /* [B,T,C] the final hidden state after qac_bert_forward (pre-LN:
                          the final LayerNorm of hidden[L]) */
    int32_t *pos;      /* [B,T] position ids (qac_positions_fill) */
    float *rope;       /* [2,T,hs] rotary cos|sin: global theta, then local (NULL: no rotary) */
    int rope_T;        /* positions rope holds (0: not yet filled) */
    /* qac_bert_forward_packed asks cancel(cancel_user) before each layer and
     * stops with QAC_ERR_CANCELLED on nonzero (NULL: never); kept by alloc */
    int (*cancel)(void *cancel_user);
    void *cancel_user;
    /* int8 FFN: the activation [B,T,I] quantised by the GELU step for the
     * output product (qac_gemm_q8), q8_bytes long; NULL: that product
     * quantises it itself (the same bits, the float rows read back from
     * memory). Made by qac_bert_acts_q8, kept by alloc. */
    void *q8;
    size_t q8_bytes;
} qac_bert_acts;

/* Floats of scratch a forward over (B, T) rows of config c takes from its
 * activations, for nthreads threads (the attention's, with dropout, and
 * qac_gemm's, for weights in any mode). */
size_t qac_bert_scratch_floats(const qac_bert_config *c, int T, int nthreads);
/* Floats needed for (B, T); nthreads sizes the scratch. */
size_t qac_bert_acts_size(const qac_bert_config *c, int B, int T, int keep, int nthreads);
/* Allocate (or grow: an existing allocation is reused when large enough)
 * and bind the views for (B, T). a must be zeroed before its first use. */
qac_status qac_bert_acts_alloc(qac_bert_acts *a, const qac_bert_config *c, int B, int T, int keep,
                               int nthreads);
void qac_bert_acts_free(qac_bert_acts *a);
/* For int8 weights, after alloc: room in a->q8 for the FFN's activation of
 * the B*T rows, quantised, and, earlier in each layer, for Q|K|V in bf16
 * with the attention's scratch (grown when short). Optional: without it the
 * FFN output product quantises its input itself (the same bits), and the
 * attention runs in fp32 with P V in bf16 (qac_attention_forward_packed_bf16:
 * other bits, so an int8 encoder either always has it or never). */
qac_status qac_bert_acts_q8(qac_bert_acts *a, const qac_bert_config *c);

/* The linear layers' weights packed for qac_gemm, once per model (and again
 * after every optimiser step): [L] each of qkv, attention output, FFN in
 * and FFN out. */
typedef struct qac_bert_packed {
    int L;
    qac_packed_w *qkv, *attn_out, *ffn_in, *ffn_out;
} qac_bert_packed;
qac_status qac_bert_pack(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p);
/* The same with the weights in bf16 (inference only: repack needs fp32). */
qac_status qac_bert_pack_bf16(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p);
/* The same with the weights in int8, per output channel (inference only). */
qac_status qac_bert_pack_int8(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p);
/* Re-pack changed weights into pk's existing buffers (no allocation). */
void qac_bert_repack(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p, qac_pool *pool);
void qac_bert_packed_free(qac_bert_packed *pk);

/* Run the encoder on ids [B,T] (type ids 0) with lens [B]. a must have been
 * allocated for exactly this B and T. hidden_out, when not NULL, receives
 * every hidden state as Hugging Face's output_hidden_states does:
 * [L+1,B,T,C], index 0 the embedding output. The result is a->last. */
qac_status qac_bert_forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                            const qac_bert_packed *pk, const int32_t *ids, const int *lens, int B, int T,
                            float *hidden_out, qac_pool *pool);
/* Inference without padding: the same result as qac_bert_forward on ids
 * [B,T] padded to T, bit for bit, but only the sum of lens rows are
 * computed. packed_ids holds the sequences back to back (sequence b at
 * offs[b], offs[b+1] = offs[b] + lens[b]), packed_types their token types
 * in the same layout (NULL: type 0 everywhere; a cross-encoder's pairs
 * have 1 over the second text); a is allocated for B and T as for
 * qac_bert_forward. The result: rows of a->last in the packed layout. */
qac_status qac_bert_forward_packed(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                   const qac_bert_packed *pk, const int32_t *packed_ids, const int32_t *packed_types,
                                   const int *lens, const int *offs, int B, int T, qac_pool *pool);
/* The same with the last layer pruned to one row per sequence, as CLS
 * pooling reads it (the CUDA encoder prunes the same way): every layer
 * before the last and the last one's Q, K and V over all rows, then its
 * attention, output projection, FFN and LayerNorms for row rows[b] of each
 * sequence b alone (0 <= rows[b] < lens[b]). The result: a->last [B,C],
 * row b the same bits as row offs[b] + rows[b] of qac_bert_forward_packed's
 * a->last (every step after the keys and values is per row). */
qac_status qac_bert_forward_packed_rows(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                        const qac_bert_packed *pk, const int32_t *packed_ids,
                                        const int32_t *packed_types, const int *lens, const int *offs,
                                        const int *rows, int B, int T, qac_pool *pool);
/* Whether qac_bert_forward_packed_rows takes c: its last layer is BERT's
 * (post-LN, GELU FFN, absolute positions, global attention: BERT, RoBERTa,
 * XLM-R); ModernBERT's pre-LN, GeGLU, rotary layers run whole. */
int qac_bert_prunes_last(const qac_bert_config *c);
/* The training forward: token types (NULL: 0) and dropout (NULL: none).
 * With drop NULL it computes exactly what qac_bert_forward does. */
qac_status qac_bert_forward_train(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                  const qac_bert_packed *pk, const int32_t *ids, const int32_t *type_ids,
                                  const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool);

/* One encoder layer's forward, from x [B,T,C] to y, keeping its tensors in
 * slot s of a (s = l when every layer is kept, else 0). */
qac_status qac_bert_layer_forward(qac_bert_acts *a, int l, int s, const float *x, float *y, const qac_bert_config *c,
                                  const qac_bert_params *p, const qac_bert_packed *pk, const int *lens, int B, int T,
                                  const qac_dropout *drop, qac_pool *pool);

/* ---- backward ----
 * Work buffers for one backward pass over (B, T), reused across steps. */
typedef struct qac_bert_bwd {
    int B, T;
    float *mem;
    size_t n_floats;
    float *dy, *dres, *dln1, *datty, *dbig, *scratch;
} qac_bert_bwd;
qac_status qac_bert_bwd_alloc(qac_bert_bwd *w, const qac_bert_config *c, int B, int T);
void qac_bert_bwd_free(qac_bert_bwd *w);

/* Back-propagate injected gradients on the hidden states into g, a
 * parameter-gradient block in the same layout as p (accumulated: +=).
 * dh[l] is dL/dhidden[l] [B,T,C] for l in 0..L (hidden[L] = a->last), NULL
 * where nothing reads that state; heads that read a middle layer's token
 * states inject there. a holds the forward of the same inputs and dropout
 * (mode KEEP or RECOMPUTE). The pooler gets no gradient. */
qac_status qac_bert_backward(qac_bert_params *g, qac_bert_bwd *w, const float *const *dh, qac_bert_acts *a,
                             const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                             const int32_t *ids, const int32_t *type_ids, const int *lens, int B, int T,
                             const qac_dropout *drop, qac_pool *pool);

/* One layer's backward: w->dy holds dL/d(layer l output) on entry and
 * dL/d(layer l input) on exit; parameter gradients accumulate into g. */
qac_status qac_bert_layer_backward(qac_bert_params *g, qac_bert_bwd *w, qac_bert_acts *a, int l,
                                   const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                                   const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool);

/* ---- layer stacks without embeddings (heads: Condenser, CoT-MAE) ----
 * The same layers fed hidden states x [B,T,C] instead of token ids; the
 * stack's own parameters use the qac_bert_params layout (its embedding
 * views unused). Forward leaves the output in a->last; backward takes dL/d
 * output and leaves dL/dx in w->dy. */
/* A stack's parameters alone: tensors [QAC_BERT_LAYER_FIRST,
 * QAC_BERT_LAYER_END) of the qac_bert_params layout (qkv_w .. ln2_b, L =
 * c->num_layers), contiguous in that order; the embedding and pooler views
 * are bound to NULL. */
#define QAC_BERT_LAYER_FIRST 5
#define QAC_BERT_LAYER_END 17
size_t qac_bert_stack_param_count(const qac_bert_config *c);
void qac_bert_stack_bind(qac_bert_params *p, const qac_bert_config *c, float *base);
qac_status qac_bert_layers_forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                                   const qac_bert_packed *pk, const float *x, const int *lens, int B, int T,
                                   const qac_dropout *drop, qac_pool *pool);
qac_status qac_bert_layers_backward(qac_bert_params *g, qac_bert_bwd *w, const float *dout, qac_bert_acts *a,
                                    const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                                    const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool);

#ifdef __cplusplus
}
#endif
#endif
