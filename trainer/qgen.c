/* The query-generation objective (the recipe and its readings:
 * model/head_nets.h, which holds the decoder): the encoder's MLM plus the
 * decoder's next-token loss as one call for the pre-training engine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gemm.h"
#include "qac_heads.h"
#include "qac_rng.h"
#include "qac_util.h"

static void add_into(float *d, const float *s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

/* ---- the whole objective ---- */

/* The backbone's embedding layer drops its output in training, and the
 * released code takes the query's embeddings from it: positions 1.. of x
 * get that dropout (layer 1 of the decoder's key, embedding site; the
 * decoder's own input dropout is layer 0), position 0 (the [CLS]) does
 * not. The same call is the backward. keep [B,C]: room to save row 0. */
static void query_emb_dropout(float *x, float *keep, const qac_dropout *dd, int B, int T, int C, qac_pool *pool) {
    for (int b = 0; b < B; b++) memcpy(keep + (size_t)b * C, x + (size_t)b * T * C, (size_t)C * sizeof *keep);
    qac_dropout_forward(x, x, NULL, dd, 1, QAC_DROP_EMB, B, T, C, pool);
    for (int b = 0; b < B; b++) memcpy(x + (size_t)b * T * C, keep + (size_t)b * C, (size_t)C * sizeof *keep);
}

/* rows of states [BT,C] whose label is >= 0, in order; returns the count */
static int gather_rows(float *out, int32_t *lab, const float *states, const int32_t *labels, int BT, int C) {
    int k = 0;
    for (int i = 0; i < BT; i++)
        if (labels[i] >= 0) {
            memcpy(out + (size_t)k * C, states + (size_t)i * C, (size_t)C * sizeof *out);
            lab[k++] = labels[i];
        }
    return k;
}

static void scatter_rows(float *d, const float *rows, const int32_t *labels, int BT, int C) {
    for (int i = 0, k = 0; i < BT; i++)
        if (labels[i] >= 0) add_into(d + (size_t)i * C, rows + (size_t)(k++) * C, (size_t)C);
}

qac_status qac_qgen_objective_grads(qac_qgen_losses *out, const qac_qgen_batch *bt, const qac_bert_config *c,
                                    const qac_bert_params *p, const struct qac_bert_packed *pk, qac_bert_params *g,
                                    struct qac_bert_acts *a, struct qac_bert_bwd *w, const struct qac_dropout *drop,
                                    const qac_qgen_config *q, const qac_qgen_params *dp, qac_qgen_params *dg,
                                    qac_qgen_acts *da, const qac_mlm_head *mh, qac_mlm_head *mg, qac_pool *pool) {
    memset(out, 0, sizeof *out);
    int B = bt->B, Tp = bt->Tp, Tq = bt->Tq, C = c->hidden_size, V = c->vocab_size, L = c->num_layers;
    if (q->hidden != C || q->heads != c->num_heads)
        return qac_set_error(QAC_ERR_INVALID, "qgen: decoder width %d/%d heads, encoder %d/%d", q->hidden, q->heads, C,
                             c->num_heads);
    if (Tq > c->max_position)
        return qac_set_error(QAC_ERR_INVALID, "qgen: queries of %d tokens, %d positions", Tq, c->max_position);
    for (int i = 0; i < B * Tq; i++)
        if (bt->q_ids[i] < 0 || bt->q_ids[i] >= V)
            return qac_set_error(QAC_ERR_INVALID, "qgen: query token id %d out of range [0, %d)", bt->q_ids[i], V);
    size_t NP = (size_t)B * Tp, NQ = (size_t)B * Tq, R = NP > NQ ? NP : NQ, NPC = NP * C, NQC = NQ * C;
    size_t total = NPC + 5 * NQC + 2 * NQ + 2 * (size_t)B * C + 2 * R * C;
    float *mem = malloc(total * sizeof *mem);
    int32_t *lab = malloc((R + NQ) * sizeof *lab);
    const float **dh = calloc((size_t)L + 1, sizeof *dh);
    if (!mem || !lab || !dh) {
        free(mem), free(lab), free(dh);
        return qac_set_error(QAC_ERR_NOMEM, "qgen: cannot allocate %.1f MiB of work space", (double)total * 4 / (1 << 20));
    }
    float *dlast = mem, *x = dlast + NPC, *emb = x + NQC, *ddec = emb + NQC, *scr = ddec + NQC;
    float *mean = scr + 2 * NQC, *rstd = mean + NQ, *cls = rstd + NQ, *dcls = cls + (size_t)B * C;
    float *st = dcls + (size_t)B * C, *dst = st + R * C;
    int32_t *targets = lab + R;
    memset(dlast, 0, NPC * sizeof *dlast);
    memset(ddec, 0, NQC * sizeof *ddec);
    memset(dcls, 0, (size_t)B * C * sizeof *dcls);

    /* the decoder's masks: its own key, so they never repeat the encoder's */
    qac_dropout dd_mem, *dd = NULL;
    if (drop) {
        dd_mem = *drop;
        dd_mem.key = qac_rng_mix(drop->key ^ QAC_QGEN_DROP_SALT);
        dd = &dd_mem;
    }
    qac_status s = qac_bert_forward_train(a, c, p, pk, bt->p_ids, NULL, bt->p_lens, B, Tp, drop, pool);
    if (s) goto done;
    /* the bottleneck: the passage's [CLS] (or mean), before any normalisation */
    qac_pooling_forward(cls, a->last, bt->p_lens, B, Tp, C, q->pooling, 0);
    /* decoder: the query's embeddings with the passage's bottleneck at position 0 */
    qac_cotmae_input(x, emb, mean, rstd, bt->q_ids, cls, c, p, B, Tq, pool);
    int emb_drop = qac_dropout_active(dd, QAC_DROP_EMB);
    if (emb_drop) query_emb_dropout(x, st, dd, B, Tq, C, pool);
    if ((s = qac_qgen_forward(da, q, dp, x, bt->q_lens, dd, B, Tq, pool))) goto done;
    qac_qgen_targets(targets, bt->q_ids, bt->q_lens, B, Tq);
    int M = gather_rows(st, lab, da->out, targets, B * Tq, C);
    out->dec_positions = M;
    if ((s = qac_mlm_loss(&out->dec, dst, mg, g->word_emb, mh, p->word_emb, st, lab, M, C, V, c->layer_norm_eps, pool)))
        goto done;
    scatter_rows(ddec, dst, targets, B * Tq, C);
    if ((s = qac_qgen_backward(x, dg, da, ddec, q, dp, bt->q_lens, dd, B, Tq, pool))) goto done;
    if (emb_drop) query_emb_dropout(x, dst, dd, B, Tq, C, pool);
    qac_cotmae_input_backward(dcls, g, x, emb, mean, rstd, bt->q_ids, c, p, B, Tq, scr, pool);
    /* encoder MLM through the same head */
    M = gather_rows(st, lab, a->last, bt->p_labels, B * Tp, C);
    out->enc_positions = M;
    if ((s = qac_mlm_loss(&out->enc_mlm, dst, mg, g->word_emb, mh, p->word_emb, st, lab, M, C, V, c->layer_norm_eps,
                          pool)))
        goto done;
    scatter_rows(dlast, dst, bt->p_labels, B * Tp, C);
    /* back through the pooling (dst, R >= B*Tp rows, is free again) */
    qac_pooling_backward(dst, dcls, a->last, bt->p_lens, B, Tp, C, q->pooling, 0);
    add_into(dlast, dst, NPC);
    dh[L] = dlast;
    s = qac_bert_backward(g, w, dh, a, c, p, pk, bt->p_ids, NULL, bt->p_lens, B, Tp, drop, pool);
    out->total = out->enc_mlm + out->dec;
done:
    free(mem), free(lab), free(dh);
    return s;
}
