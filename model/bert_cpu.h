/* The CPU reference BERT forward pass (fp32).
 *
 * Layer math is plain functions over flat row-major arrays, outputs first,
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
#include "qac_model.h"
#include "qac_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[b,t,:] = word_emb[ids[b,t]] + pos_emb[t] + type_emb[type_ids[b,t]]
 * (type 0 everywhere when type_ids is NULL). No LayerNorm.
 * out [B,T,C]; ids, type_ids [B,T]; word_emb [V,C]; pos_emb [P,C]; type_emb [Tt,C]. */
void qac_embeddings_forward(float *out, const int32_t *ids, const int32_t *type_ids,
                            const float *word_emb, const float *pos_emb, const float *type_emb,
                            int B, int T, int C, qac_pool *pool);

/* out = (inp - mean) * rstd * w + b per row. mean, rstd [N] may be NULL.
 * out, inp [N,C] (out may alias inp); w, b [C]. */
void qac_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C, float eps, qac_pool *pool);

/* GELU, erf form: out = 0.5 x (1 + erf(x / sqrt 2)). out may alias inp. [n] */
void qac_gelu_forward(float *out, const float *inp, size_t n, qac_pool *pool);

/* pre = inp W^T + bias, out = GELU(pre): the FFN input projection with the
 * bias and activation fused. pre may be NULL (not kept; then out holds the
 * activation only). out, pre [N,OC]; inp [N,IC]; w [OC,IC]; bias [OC]. */
void qac_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w,
                             const float *bias, int N, int IC, int OC, qac_pool *pool);

/* Multi-head self-attention over fused projections.
 * qkv [B,T,3C]: per row Q | K | V, head h in columns [h*hs, (h+1)*hs) of each.
 * out [B,T,C]: softmax(Q K^T / sqrt(hs) + mask) V, heads concatenated.
 * att [B,NH,T,T]: the probabilities, kept for backward (masked keys hold 0);
 * when att is NULL, scratch [qac_pool_size(pool), T, T] holds them briefly. */
void qac_attention_forward(float *out, float *att, float *scratch, const float *qkv,
                           const int *lens, int B, int T, int C, int NH, qac_pool *pool);

/* Pool the last hidden state: CLS (row 0) or the mean over the lens[b] real
 * tokens, then, when normalize, x / max(||x||_2, 1e-12) (F.normalize).
 * out [B,C]; hidden [B,T,C]. */
void qac_pooling_forward(float *out, const float *hidden, const int *lens, int B, int T, int C,
                         qac_pooling pooling, int normalize);

/* ---- the whole encoder ----
 * Activations live in one allocation sized for (B, T) and views into it.
 * With keep = 1 every layer's tensors are kept for a backward pass: index
 * layer l as qkv + l * B*T*3C and so on. With keep = 0 (inference) the views
 * alias each other as far as one layer's dataflow allows (about 6 C + max(4C,
 * I) floats per token in all) and only `last` is meaningful afterwards;
 * the NULL views below are the ones keep = 0 drops. */
typedef struct qac_bert_acts {
    int B, T, keep, layers_kept, nthreads;
    float *mem;
    size_t n_floats;
    float *emb;        /* [B,T,C] embedding sum, LayerNorm input */
    float *emb_mean;   /* [B,T] (NULL) */
    float *emb_rstd;   /* [B,T] (NULL) */
    float *hidden;     /* [L+1,B,T,C]: hidden[0] = embeddings, hidden[l+1] = layer l output
                          (keep = 0: two [B,T,C] work rows, no history) */
    float *qkv;        /* [Lk,B,T,3C] */
    float *att;        /* [Lk,B,NH,T,T] (keep only, else NULL) */
    float *scratch;    /* [nthreads,T,T] (keep = 0 only, else NULL) */
    float *atty;       /* [Lk,B,T,C] attention context before the output projection */
    float *res1;       /* [Lk,B,T,C] layer input + attention output (LN1 input) */
    float *ln1_mean;   /* [Lk,B,T] (NULL) */
    float *ln1_rstd;   /* [Lk,B,T] (NULL) */
    float *ln1;        /* [Lk,B,T,C] */
    float *ffn_pre;    /* [Lk,B,T,I] before GELU (keep only, else NULL) */
    float *ffn_act;    /* [Lk,B,T,I] after GELU */
    float *res2;       /* [Lk,B,T,C] ln1 + FFN output (LN2 input) */
    float *ln2_mean;   /* [Lk,B,T] (NULL) */
    float *ln2_rstd;   /* [Lk,B,T] (NULL) */
    float *last;       /* [B,T,C] the final hidden state after qac_bert_forward */
} qac_bert_acts;

/* Floats needed for (B, T); nthreads sizes the attention scratch. */
size_t qac_bert_acts_size(const qac_bert_config *c, int B, int T, int keep, int nthreads);
/* Allocate (or grow: an existing allocation is reused when large enough)
 * and bind the views for (B, T). a must be zeroed before its first use. */
qac_status qac_bert_acts_alloc(qac_bert_acts *a, const qac_bert_config *c, int B, int T, int keep,
                               int nthreads);
void qac_bert_acts_free(qac_bert_acts *a);

/* The linear layers' weights packed for qac_gemm, once per model:
 * [L] each of qkv, attention output, FFN in and FFN out. */
typedef struct qac_bert_packed {
    int L;
    qac_packed_w *qkv, *attn_out, *ffn_in, *ffn_out;
} qac_bert_packed;
qac_status qac_bert_pack(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p);
void qac_bert_packed_free(qac_bert_packed *pk);

/* Run the encoder on ids [B,T] (type ids 0) with lens [B]. a must have been
 * allocated for exactly this B and T. hidden_out, when not NULL, receives
 * every hidden state as Hugging Face's output_hidden_states does:
 * [L+1,B,T,C], index 0 the embedding output. The result is a->last. */
qac_status qac_bert_forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                            const qac_bert_packed *pk, const int32_t *ids, const int *lens, int B, int T,
                            float *hidden_out, qac_pool *pool);

#ifdef __cplusplus
}
#endif
#endif
