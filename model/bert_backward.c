/* The encoder's backward pass, composed from the layer math in layers.c:
 * the forward of bert_cpu.c read bottom-up. */
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_util.h"

qac_status qac_bert_bwd_alloc(qac_bert_bwd *w, const qac_bert_config *c, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t big = I > 3 * C ? I : 3 * C;
    size_t s1 = qac_matmul_backward_scratch((int)N, (int)C, (int)(3 * C));
    size_t s2 = qac_matmul_backward_scratch((int)N, (int)C, (int)I);
    size_t s3 = qac_matmul_backward_scratch((int)N, (int)I, (int)C);
    size_t scratch = s1 > s2 ? s1 : s2;
    scratch = scratch > s3 ? scratch : s3;
    size_t total = 4 * N * C + N * big + scratch;
    if (total > w->n_floats) {
        float *m = qac_malloc_lines(total * sizeof(float));
        if (!m)
            return qac_set_error(QAC_ERR_NOMEM, "backward: cannot allocate %.1f MiB for B=%d T=%d",
                                 (double)total * 4 / (1 << 20), B, T);
        free(w->mem);
        w->mem = m;
        w->n_floats = total;
    }
    w->B = B;
    w->T = T;
    w->dy = w->mem;
    w->dres = w->dy + N * C;
    w->dln1 = w->dres + N * C;
    w->datty = w->dln1 + N * C;
    w->dbig = w->datty + N * C;
    w->scratch = w->dbig + N * big;
    return QAC_OK;
}

void qac_bert_bwd_free(qac_bert_bwd *w) {
    if (!w) return;
    free(w->mem);
    memset(w, 0, sizeof *w);
}

#define AT(ptr, l, n) ((ptr) + (size_t)(l) * (n))

qac_status qac_bert_layer_backward(qac_bert_params *g, qac_bert_bwd *w, qac_bert_acts *a, int l,
                                   const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                                   const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool) {
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads, L = c->num_layers;
    size_t N = (size_t)B * T, NC = N * C;
    int n = (int)N, drop_out = qac_dropout_active(drop, QAC_DROP_ATT_OUT);
    int s = a->keep == QAC_ACTS_KEEP ? l : 0;
    const float *x = a->hidden + (size_t)l * NC;
    qac_status st = QAC_OK;
    if (a->keep == QAC_ACTS_RECOMPUTE && l < L - 1 &&
        (st = qac_bert_layer_forward(a, l, s, x, a->hidden + (size_t)(l + 1) * NC, c, p, pk, lens, B, T, drop, pool)))
        return st;
    size_t lc = (size_t)l * C, li = (size_t)l * I;
    const float *atty = AT(a->atty, s, NC), *ln1 = AT(a->ln1, s, NC);
    const float *ffn_pre = AT(a->ffn_pre, s, N * I), *ffn_act = AT(a->ffn_act, s, N * I);

    /* y = LN2(res2), res2 = ln1 + dropout(ffn_act W2 + b2) */
    qac_layernorm_backward(w->dres, g->ln2_w + lc, g->ln2_b + lc, w->dy, AT(a->res2, s, NC), AT(a->ln2_mean, s, N),
                           AT(a->ln2_rstd, s, N), p->ln2_w + lc, n, C, pool);
    const float *dfo = w->dres;
    if (drop_out) {
        qac_dropout_forward(w->datty, w->dres, NULL, drop, l, QAC_DROP_FFN_OUT, B, T, C, pool);
        dfo = w->datty;
    }
    if ((st = qac_matmul_backward(w->dbig, g->ffn_out_w + lc * I, g->ffn_out_b + lc, dfo, ffn_act,
                                  p->ffn_out_w + lc * I, NULL, n, I, C, w->scratch, pool)))
        return st;
    /* ffn_act = GELU(ln1 W1 + b1) */
    qac_gelu_backward(w->dbig, w->dbig, ffn_pre, N * I, pool);
    if ((st = qac_matmul_backward(w->dln1, g->ffn_in_w + li * C, g->ffn_in_b + li, w->dbig, ln1, p->ffn_in_w + li * C,
                                  w->dres, n, C, I, w->scratch, pool)))
        return st;
    /* ln1 = LN1(res1), res1 = x + dropout(atty Wo + bo) */
    qac_layernorm_backward(w->dres, g->ln1_w + lc, g->ln1_b + lc, w->dln1, AT(a->res1, s, NC), AT(a->ln1_mean, s, N),
                           AT(a->ln1_rstd, s, N), p->ln1_w + lc, n, C, pool);
    const float *dao = w->dres;
    if (drop_out) {
        qac_dropout_forward(w->dln1, w->dres, NULL, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
        dao = w->dln1;
    }
    if ((st = qac_matmul_backward(w->datty, g->attn_out_w + lc * C, g->attn_out_b + lc, dao, atty,
                                  p->attn_out_w + lc * C, NULL, n, C, C, w->scratch, pool)))
        return st;
    /* atty = attention(x Wqkv + bqkv) */
    if ((st = qac_attention_backward(w->dbig, w->datty, AT(a->qkv, s, N * 3 * C),
                                     AT(a->att, s, (size_t)B * NH * T * T), lens, drop, l, B, T, C, NH, pool)))
        return st;
    return qac_matmul_backward(w->dy, g->qkv_w + lc * 3 * C, g->qkv_b + lc * 3, w->dbig, x, p->qkv_w + lc * 3 * C,
                               w->dres, n, C, 3 * C, w->scratch, pool);
}

static qac_status check_bwd(const qac_bert_bwd *w, const qac_bert_acts *a, int B, int T) {
    if (a->keep == QAC_ACTS_INFER || a->B != B || a->T != T)
        return qac_set_error(QAC_ERR_INVALID, "bert backward: activations were not kept for B=%d T=%d", B, T);
    if (!w->mem || w->B != B || w->T != T)
        return qac_set_error(QAC_ERR_INVALID, "bert backward: work buffers not allocated for B=%d T=%d", B, T);
    return QAC_OK;
}

/* layers L-1 .. 0: w->dy holds dL/dhidden[L] on entry, dL/dhidden[0] on exit */
static qac_status layers_backward(qac_bert_params *g, qac_bert_bwd *w, const float *const *dh, qac_bert_acts *a,
                                  const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                                  const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool) {
    size_t NC = (size_t)B * T * c->hidden_size;
    for (int l = c->num_layers - 1; l >= 0; l--) {
        qac_status st = qac_bert_layer_backward(g, w, a, l, c, p, pk, lens, B, T, drop, pool);
        if (st) return st;
        if (dh && dh[l])
            for (size_t i = 0; i < NC; i++) w->dy[i] += dh[l][i];
    }
    return QAC_OK;
}

qac_status qac_bert_layers_backward(qac_bert_params *g, qac_bert_bwd *w, const float *dout, qac_bert_acts *a,
                                    const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                                    const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool) {
    qac_status st = check_bwd(w, a, B, T);
    if (st) return st;
    memcpy(w->dy, dout, (size_t)B * T * c->hidden_size * sizeof(float));
    return layers_backward(g, w, NULL, a, c, p, pk, lens, B, T, drop, pool);
}

qac_status qac_bert_backward(qac_bert_params *g, qac_bert_bwd *w, const float *const *dh, qac_bert_acts *a,
                             const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                             const int32_t *ids, const int32_t *type_ids, const int *lens, int B, int T,
                             const qac_dropout *drop, qac_pool *pool) {
    qac_status st = check_bwd(w, a, B, T);
    if (st) return st;
    int C = c->hidden_size, L = c->num_layers;
    size_t NC = (size_t)B * T * C;
    if (dh[L])
        memcpy(w->dy, dh[L], NC * sizeof(float));
    else
        memset(w->dy, 0, NC * sizeof(float));
    if ((st = layers_backward(g, w, dh, a, c, p, pk, lens, B, T, drop, pool))) return st;

    /* hidden[0] = dropout(LN(word + pos + type)) */
    if (qac_dropout_active(drop, QAC_DROP_EMB))
        qac_dropout_forward(w->dy, w->dy, NULL, drop, 0, QAC_DROP_EMB, B, T, C, pool);
    qac_layernorm_backward(w->dres, g->emb_ln_w, g->emb_ln_b, w->dy, a->emb, a->emb_mean, a->emb_rstd, p->emb_ln_w,
                           (int)B * T, C, pool);
    qac_embeddings_backward(g->word_emb, g->pos_emb, g->type_emb, w->dres, ids, type_ids, B, T, C);
    return QAC_OK;
}
