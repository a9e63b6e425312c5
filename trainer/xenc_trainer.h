/* Internal to trainer/: the cross-encoder trainer (a reranker, Tevatron's
 * reranker and RocketQA's cross-encoder) and its step over pairs already
 * tokenized. The run (xenc_run.c) builds the batches; the parity test
 * (tests/xenc) feeds the fixture's.
 *
 * A batch is G groups of n pairs, pair j of group g at row g*n + j, the
 * positive first. A pair's score is its raw score (the logit, or l1 - l0
 * with two labels: api/qac_xenc.h); the loss is the softmax cross-entropy
 * of each group's scores with the positive as the target, averaged over
 * the groups:  L = 1/G sum_g (logsumexp_j s_gj - s_g0).
 *
 * The step: encoder forward with the pairs' token types and dropout ->
 * each pair's last-layer [CLS] -> pooler, dropout, classifier
 * (model/cls_head.c) -> loss -> the head's backward, its [CLS] gradient
 * injected into the last hidden state -> encoder backward (every tensor,
 * the pooler and the token-type embeddings included) -> clip -> AdamW over
 * [encoder | classifier]. GradCache (chunk > 0) reorders the same calls.
 * Dropout masks are keyed by (seed, step, pair row), so a re-forward, a
 * chunk or a resumed step draws the same. CPU only. */
#ifndef QAC_XENC_TRAINER_H
#define QAC_XENC_TRAINER_H

#include "bert_cpu.h"
#include "cls_head.h"
#include "qac_train.h"
#include "qac_xenc.h"
#include "trainer_internal.h"

typedef struct qac_xenc_batch {
    int groups, n, T;
    const int32_t *ids;   /* [groups*n, T] padded */
    const int32_t *types; /* [groups*n, T] */
    const int *lens;      /* [groups*n] */
} qac_xenc_batch;

typedef struct qac_xtrainer {
    qac_xenc *x;             /* borrowed; trained in place */
    qac_train_opts o;
    qac_pool *pool;
    qac_dropout drop;        /* the encoder's */
    float head_dropout;      /* classifier_dropout, else the hidden dropout */
    size_t n_enc, n_cls;     /* encoder parameters (x->bert->n_params), classifier parameters */
    float *grad_mem;         /* [n_enc + n_cls]: the encoder's gradients, then the classifier's */
    float *adam_m, *adam_v;  /* the same layout */
    qac_bert_params g;       /* views into grad_mem */
    float *g_cls_w, *g_cls_b;
    qac_bert_packed pk;
    qac_bert_acts acts;
    qac_bert_bwd bwd;
    float *cls, *pooled, *kept, *dcls, *scratch; /* [pairs, C] */
    float *logits, *dlogits;                     /* [pairs, NL] */
    double *scores, *dscores;                    /* [pairs] */
    float *dlast;                                /* [chunk pairs, T, C] */
    uint64_t *seq_ids;
    size_t cap_pairs, cap_last;
    long step;
    const void *save_cursor; /* the data cursor of the checkpoint being written */
    size_t save_cursor_len;
} qac_xtrainer;

/* Validates the options (CPU only; o->tau, sim, pair_alpha unused). */
qac_status qac_xtrainer_create(qac_xtrainer **out, qac_xenc *x, const qac_train_opts *o, float head_dropout);
void qac_xtrainer_free(qac_xtrainer *t);
/* Zero the gradients and accumulate the batch's; *loss its loss. */
qac_status qac_xtrainer_grads(qac_xtrainer *t, const qac_xenc_batch *b, double *loss);
/* grads, then clip, AdamW, re-pack. */
qac_status qac_xtrainer_step(qac_xtrainer *t, const qac_xenc_batch *b, qac_step_stats *out);

/* A checkpoint: the cross-encoder's directory plus QAC_STATE_FILE (AdamW
 * state, step, options, cursor), as qac_trainer_save. */
qac_status qac_xtrainer_save(qac_xtrainer *t, const char *dir, const void *cursor, size_t cursor_len);
/* Load a checkpoint into t; a recorded option that shapes the steps and
 * differs from t's is refused (QAC_ERR_MISMATCH) by name. The cursor is
 * malloc'd for the caller. */
qac_status qac_xtrainer_resume(qac_xtrainer *t, const char *dir, void **cursor, size_t *cursor_len);

#endif
