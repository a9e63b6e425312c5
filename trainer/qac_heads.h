/* Pre-training objectives and their data-side helpers (TRAINING.md):
 * whole-word MLM masking, the MLM loss through HF's BertOnlyMLMHead tied to
 * the word embeddings, coCondenser's and CoT-MAE's pieces and the
 * query-generation objective. The heads' networks (the MLM head's
 * parameters, the query-generation decoder) are in model/head_nets.h. */
#ifndef QAC_HEADS_H
#define QAC_HEADS_H

#include <stddef.h>
#include <stdint.h>

#include "head_nets.h"
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

/* ---- the MLM head's loss (its parameters: head_nets.h) ---- */
/* Mean cross-entropy over the M positions of states [M,C] with labels [M]
 * (all >= 0). When g is not NULL, accumulates the head's gradients into g
 * and the decoder's into dword [V,C], and writes dstates [M,C]. */
qac_status qac_mlm_loss(double *loss, float *dstates, qac_mlm_head *g, float *dword, const qac_mlm_head *h,
                        const float *word_emb, const float *states, const int32_t *labels, int M, int C, int V,
                        float ln_eps, qac_pool *pool);
/* The same with a workspace kept between calls (zeroed before first use,
 * grown as needed, freed with qac_mlm_ws_free): a step's [M,V] logits and
 * packed embeddings are not mapped and faulted in afresh every call. */
typedef struct qac_mlm_ws {
    float *mem;
    size_t cap;
} qac_mlm_ws;
qac_status qac_mlm_loss_ws(qac_mlm_ws *ws, double *loss, float *dstates, qac_mlm_head *g, float *dword,
                           const qac_mlm_head *h, const float *word_emb, const float *states, const int32_t *labels,
                           int M, int C, int V, float ln_eps, qac_pool *pool);
void qac_mlm_ws_free(qac_mlm_ws *w);

/* ---- coCondenser's contrastive loss ----
 * x [n2, C] holds n2 = 2B representations, siblings adjacent (two spans of
 * one document, or a passage and one of its queries). S = x x^T / tau with
 * the diagonal excluded; the target of row 2i is 2i+1 and of 2i+1 is 2i;
 * mean cross-entropy over all rows (every representation is an anchor).
 * dx [n2, C] (NULL: none) receives dL/dx. */
qac_status qac_cocondenser_loss(double *loss, float *dx, const float *x, int n2, int C, float tau);

/* ---- the Condenser head's input ----
 * x [B,T,C]: position 0 from cls [B,C] (the bottleneck: the backbone's
 * last-layer [CLS] as released, or the pooled vector of a mean-pooled
 * checkpoint, before normalisation), positions 1.. from mid [B,T,C] (the
 * states after layer skip_from). The backward splits dx the same way,
 * adding into dcls [B,C] and dmid [B,T,C]. */
void qac_condenser_input(float *x, const float *cls, const float *mid, int B, int T, int C);
void qac_condenser_input_backward(float *dcls, float *dmid, const float *dx, int B, int T, int C);

/* ---- CoT-MAE's decoder input ----
 * The backbone's embedding layer on the other text's ids [B,T] (word +
 * position + type 0, LayerNorm), with position 0 replaced by the encoder's
 * bottleneck cls [B,C] (the raw last-layer [CLS] as released, or the
 * pooled vector of a mean-pooled checkpoint). emb [B,T,C] and mean, rstd [B,T] are kept
 * for the backward, which adds dL/dcls into dcls [B,C] and the embedding
 * gradients into g (scratch: 2 B T C floats). */
void qac_cotmae_input(float *x, float *emb, float *mean, float *rstd, const int32_t *ids, const float *cls,
                      const qac_bert_config *c, const qac_bert_params *p, int B, int T, qac_pool *pool);
void qac_cotmae_input_backward(float *dcls, qac_bert_params *g, const float *dx, const float *emb, const float *mean,
                               const float *rstd, const int32_t *ids, const qac_bert_config *c, const qac_bert_params *p,
                               int B, int T, float *scratch, qac_pool *pool);



/* The whole objective for one batch of B (passage, query) pairs: the
 * encoder reads the masked passages (p_labels: the MLM labels, -100 where
 * unmasked), the decoder the unmasked queries. Runs the encoder's training
 * forward (dropout drop, NULL: none; the decoder's masks come from the
 * same key salted with QAC_QGEN_DROP_SALT) into a (QAC_ACTS_KEEP or RECOMPUTE,
 * allocated for B, Tp), the decoder into da (allocated for B, Tq), both
 * losses through the tied head, and the whole backward: gradients
 * accumulate into g (encoder, word embeddings included: tied head and
 * decoder input), dg (decoder) and mg (MLM head). w: the encoder's backward
 * buffers for (B, Tp). */
typedef struct qac_qgen_losses {
    double total, enc_mlm, dec; /* total = enc_mlm + dec */
    int enc_positions, dec_positions;
} qac_qgen_losses;
typedef struct qac_qgen_batch {
    int B, Tp, Tq;
    const int32_t *p_ids, *p_labels; /* [B,Tp] masked passages and their MLM labels */
    const int *p_lens;               /* [B] */
    const int32_t *q_ids;            /* [B,Tq] unmasked queries, [CLS] .. [SEP] */
    const int *q_lens;               /* [B] */
} qac_qgen_batch;
qac_status qac_qgen_objective_grads(qac_qgen_losses *out, const qac_qgen_batch *batch, const qac_bert_config *c,
                                    const qac_bert_params *p, const struct qac_bert_packed *pk, qac_bert_params *g,
                                    struct qac_bert_acts *a, struct qac_bert_bwd *w, const struct qac_dropout *drop,
                                    const qac_qgen_config *q, const qac_qgen_params *dp, qac_qgen_params *dg,
                                    qac_qgen_acts *da, const qac_mlm_head *mh, qac_mlm_head *mg, qac_pool *pool);

#endif
