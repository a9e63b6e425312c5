/* Pre-training heads and their data-side helpers (TRAINING.md): whole-word
 * MLM masking and HF's BertOnlyMLMHead with its decoder tied to the word
 * embeddings. Each head is a forward/backward pair over token states; its
 * parameters live in one flat block with named views, like the encoder's. */
#ifndef QAC_HEADS_H
#define QAC_HEADS_H

#include <stddef.h>
#include <stdint.h>

#include "qac_common.h"
#include "qac_model.h"
#include "qac_pool.h"
#include "qac_tokenizer.h"

/* ---- whole-word masking ----
 * Words are WordPiece runs (a "##" piece continues the word before it);
 * specials and padding are never chosen. Exactly max(1, round(n_words *
 * rate)) words are chosen by a seeded shuffle; each of their tokens becomes
 * [MASK] with probability 0.8, else a random vocabulary token with
 * probability 0.5, else stays. ids [T] is masked in place; labels [T]
 * receive the original id at chosen positions and -100 elsewhere. Every
 * draw comes from qac_rng keyed by `key` (e.g. from seed, step, sequence). */
typedef struct qac_mask_opts {
    float rate;        /* 0.15 for BERT, 0.30 CoT-MAE's encoder, 0.45 its decoder */
    int32_t mask_id;   /* [MASK] */
    int vocab_size;
} qac_mask_opts;
/* is_word_start [vocab]: 1 for ids that start a word (no "##"), 0 for
 * continuations; specials are passed separately (never masked). */
qac_status qac_word_starts(uint8_t **out, const qac_tokenizer *tok);
void qac_mask_whole_words(int32_t *ids, int32_t *labels, int len, const uint8_t *word_start, const qac_special_ids *sp,
                          const qac_mask_opts *o, uint64_t key);

/* ---- the MLM head (BertOnlyMLMHead) ----
 * logits = LN(GELU(h W^T + b)) E^T + bias, E the word embeddings (tied). */
typedef struct qac_mlm_head {
    float *dense_w; /* [C, C] */
    float *dense_b; /* [C] */
    float *ln_w;    /* [C] */
    float *ln_b;    /* [C] */
    float *bias;    /* [V] */
} qac_mlm_head;
#define QAC_MLM_NUM_TENSORS 5
size_t qac_mlm_param_count(int C, int V);
void qac_mlm_bind(qac_mlm_head *h, float *base, int C, int V);
/* HF's initialisation: dense N(0, 0.02) (from seed), LayerNorm 1 and 0,
 * bias 0. */
void qac_mlm_init(qac_mlm_head *h, int C, int V, uint64_t seed);

/* Mean cross-entropy over the M positions of states [M,C] with labels [M]
 * (all >= 0). When g is not NULL, accumulates the head's gradients into g
 * and the decoder's into dword [V,C], and writes dstates [M,C]. */
qac_status qac_mlm_loss(double *loss, float *dstates, qac_mlm_head *g, float *dword, const qac_mlm_head *h,
                        const float *word_emb, const float *states, const int32_t *labels, int M, int C, int V,
                        float ln_eps, qac_pool *pool);

/* ---- coCondenser's contrastive loss ----
 * x [n2, C] holds n2 = 2B representations, siblings adjacent (two spans of
 * one document, or a passage and one of its queries). S = x x^T / tau with
 * the diagonal excluded; the target of row 2i is 2i+1 and of 2i+1 is 2i;
 * mean cross-entropy over all rows (every representation is an anchor).
 * dx [n2, C] (NULL: none) receives dL/dx. */
qac_status qac_cocondenser_loss(double *loss, float *dx, const float *x, int n2, int C, float tau);

/* ---- the Condenser head's input ----
 * x [B,T,C]: position 0 from last (the backbone's last-layer [CLS]),
 * positions 1.. from mid (the states after layer skip_from). The backward
 * splits dx the same way, adding into dlast and dmid. */
void qac_condenser_input(float *x, const float *last, const float *mid, int B, int T, int C);
void qac_condenser_input_backward(float *dlast, float *dmid, const float *dx, int B, int T, int C);

/* ---- CoT-MAE's decoder input ----
 * The backbone's embedding layer on the other text's ids [B,T] (word +
 * position + type 0, LayerNorm), with position 0 replaced by the encoder's
 * raw last-layer [CLS] cls [B,C]. emb [B,T,C] and mean, rstd [B,T] are kept
 * for the backward, which adds dL/dcls into dcls [B,C] and the embedding
 * gradients into g (scratch: 2 B T C floats). */
void qac_cotmae_input(float *x, float *emb, float *mean, float *rstd, const int32_t *ids, const float *cls,
                      const qac_bert_config *c, const qac_bert_params *p, int B, int T, qac_pool *pool);
void qac_cotmae_input_backward(float *dcls, qac_bert_params *g, const float *dx, const float *emb, const float *mean,
                               const float *rstd, const int32_t *ids, const qac_bert_config *c, const qac_bert_params *p,
                               int B, int T, float *scratch, qac_pool *pool);

#endif
