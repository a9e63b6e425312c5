/* The encoder's backward pass, composed from the layer math in layers.c:
 * the forward of bert_cpu.c read bottom-up. */
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_util.h"

qac_status qac_bert_bwd_alloc(qac_bert_bwd *w, const qac_bert_config *c, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t F = (size_t)qac_bert_ffn_rows(c), ffn = c->glu ? F + I : I; /* GeGLU: dpre [N,2I] and dact [N,I] */
    size_t big = ffn > 3 * C ? ffn : 3 * C;
    size_t s1 = qac_matmul_backward_scratch((int)N, (int)C, (int)(3 * C));
    size_t s2 = qac_matmul_backward_scratch((int)N, (int)C, (int)F);
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

#define AT(ptr, l, n) ((ptr) ? (ptr) + (size_t)(l) * (n) : NULL)

static void add_into(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* The forward of bert_cpu.c's layer_forward read bottom-up, step for step
 * (post-LN or pre-LN, GELU or GeGLU, rotary or not); w->dy carries
 * dL/d(output) in and dL/d(input) out. */
qac_status qac_bert_layer_backward(qac_bert_params *g, qac_bert_bwd *w, qac_bert_acts *a, int l,
                                   const qac_bert_config *c, const qac_bert_params *p, const qac_bert_packed *pk,
                                   const int *lens, int B, int T, const qac_dropout *drop, qac_pool *pool) {
    int C = c->hidden_size, I = c->intermediate_size, F = qac_bert_ffn_rows(c), NH = c->num_heads,
        L = c->num_layers;
    int pre = c->pre_norm, window = qac_bert_layer_window(c, l);
    size_t N = (size_t)B * T, NC = N * C;
    int n = (int)N, drop_out = qac_dropout_active(drop, QAC_DROP_ATT_OUT);
    int s = a->keep == QAC_ACTS_KEEP ? l : 0;
    const float *x = a->hidden + (size_t)l * NC;
    qac_status st = QAC_OK;
    if (a->keep == QAC_ACTS_RECOMPUTE && l < L - 1 &&
        (st = qac_bert_layer_forward(a, l, s, x, a->hidden + (size_t)(l + 1) * NC, c, p, pk, lens, B, T, drop, pool)))
        return st;
    size_t lc = (size_t)l * C;
    const float *atty = AT(a->atty, s, NC), *ffn_in = AT(a->ffn_in, s, NC);
    const float *ffn_pre = AT(a->ffn_pre, s, N * F), *ffn_act = AT(a->ffn_act, s, N * I);
    float *dact = c->glu ? w->dbig + N * F : w->dbig; /* GeGLU: dpre [N,2I] first, dact [N,I] after */

    /* post-LN: y = LN2(res2), res2 = ln1 + dropout(act W2 + b2); w->dres = dL/dres2.
     * pre-LN:  y = res1 + dropout(act W2 + b2); dL/dres1 gathers in w->dy. */
    const float *dsum = w->dy;
    if (!pre) {
        qac_layernorm_backward(w->dres, g->ln2_w + lc, AT(g->ln2_b, l, C), w->dy, AT(a->res2, s, NC),
                               AT(a->ln2_mean, s, N), AT(a->ln2_rstd, s, N), p->ln2_w + lc, n, C, pool);
        dsum = w->dres;
    }
    const float *dfo = dsum;
    if (drop_out) {
        qac_dropout_forward(w->datty, dsum, NULL, drop, l, QAC_DROP_FFN_OUT, B, T, C, pool);
        dfo = w->datty;
    }
    if ((st = qac_matmul_backward(dact, g->ffn_out_w + lc * I, AT(g->ffn_out_b, l, C), dfo, ffn_act,
                                  p->ffn_out_w + lc * I, NULL, n, I, C, w->scratch, pool)))
        return st;
    /* act = GELU(ffn_in W1 + b1), or GeGLU of it */
    if (c->glu) qac_geglu_backward(w->dbig, dact, ffn_pre, n, I, pool);
    else qac_gelu_backward(w->dbig, w->dbig, ffn_pre, N * I, pool);
    /* post-LN: dL/dln1 = the FFN's and the residual's (dres); pre-LN: the FFN's alone */
    if ((st = qac_matmul_backward(w->dln1, g->ffn_in_w + (size_t)l * F * C, AT(g->ffn_in_b, l, F), w->dbig, ffn_in,
                                  p->ffn_in_w + (size_t)l * F * C, pre ? NULL : w->dres, n, C, F, w->scratch, pool)))
        return st;
    float *dres1 = w->dres; /* dL/dres1 */
    if (pre) { /* ffn_in = LN2(res1): res1's gradient is dy plus LN2's */
        qac_layernorm_backward(w->dres, g->ln2_w + lc, AT(g->ln2_b, l, C), w->dln1, AT(a->res1, s, NC),
                               AT(a->ln2_mean, s, N), AT(a->ln2_rstd, s, N), p->ln2_w + lc, n, C, pool);
        add_into(w->dy, w->dres, NC);
        dres1 = w->dy;
    } else { /* ln1 = LN1(res1) */
        qac_layernorm_backward(w->dres, g->ln1_w + lc, AT(g->ln1_b, l, C), w->dln1, AT(a->res1, s, NC),
                               AT(a->ln1_mean, s, N), AT(a->ln1_rstd, s, N), p->ln1_w + lc, n, C, pool);
    }
    /* res1 = x + dropout(atty Wo + bo) */
    const float *dao = dres1;
    if (drop_out) {
        qac_dropout_forward(w->dln1, dres1, NULL, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
        dao = w->dln1;
    }
    if ((st = qac_matmul_backward(w->datty, g->attn_out_w + lc * C, AT(g->attn_out_b, l, C), dao, atty,
                                  p->attn_out_w + lc * C, NULL, n, C, C, w->scratch, pool)))
        return st;
    /* atty = attention(rope(ain Wqkv + bqkv)) */
    if ((st = qac_attention_backward(w->dbig, w->datty, AT(a->qkv, s, N * 3 * C),
                                     AT(a->att, s, (size_t)B * NH * T * T), lens, drop, l, B, T, C, NH, pool)))
        return st;
    if (c->positions == QAC_POS_ROTARY)
        qac_rope_backward(w->dbig, a->pos, a->rope + (window ? (size_t)T * (C / NH) : 0), n, C, NH, pool);
    if (pre && l > 0) { /* ain = LN1(x); dL/dx = dres1 + LN1's */
        if ((st = qac_matmul_backward(w->dln1, g->qkv_w + lc * 3 * C, AT(g->qkv_b, l, 3 * C), w->dbig,
                                      AT(a->ln1, s, NC), p->qkv_w + lc * 3 * C, NULL, n, C, 3 * C, w->scratch, pool)))
            return st;
        qac_layernorm_backward(w->dres, g->ln1_w + lc, AT(g->ln1_b, l, C), w->dln1, x, AT(a->ln1_mean, s, N),
                               AT(a->ln1_rstd, s, N), p->ln1_w + lc, n, C, pool);
        add_into(w->dy, w->dres, NC);
        return QAC_OK;
    }
    /* ain = x */
    return qac_matmul_backward(w->dy, g->qkv_w + lc * 3 * C, AT(g->qkv_b, l, 3 * C), w->dbig, x,
                               p->qkv_w + lc * 3 * C, dres1, n, C, 3 * C, w->scratch, pool);
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
    if (dh[L] && c->pre_norm) /* last = LN_final(hidden[L]) */
        qac_layernorm_backward(w->dy, g->final_ln_w, g->final_ln_b, dh[L], a->hidden + (size_t)L * NC, a->final_mean,
                               a->final_rstd, p->final_ln_w, B * T, C, pool);
    else if (dh[L])
        memcpy(w->dy, dh[L], NC * sizeof(float));
    else
        memset(w->dy, 0, NC * sizeof(float));
    if ((st = layers_backward(g, w, dh, a, c, p, pk, lens, B, T, drop, pool))) return st;

    /* hidden[0] = dropout(LN(word + pos + type)) */
    if (qac_dropout_active(drop, QAC_DROP_EMB))
        qac_dropout_forward(w->dy, w->dy, NULL, drop, 0, QAC_DROP_EMB, B, T, C, pool);
    qac_layernorm_backward(w->dres, g->emb_ln_w, g->emb_ln_b, w->dy, a->emb, a->emb_mean, a->emb_rstd, p->emb_ln_w,
                           (int)B * T, C, pool);
    /* the padding index's rows are frozen, as transformers' embeddings
     * (padding_idx = pad_token_id) freeze them: the word row in every
     * family, the position row where positions are offset past it */
    qac_embeddings_backward_at(g->word_emb, g->pos_emb, g->type_emb, w->dres, ids, type_ids, a->pos, c->pad_token_id,
                               c->positions == QAC_POS_OFFSET ? c->pad_token_id : -1, B, T, C);
    return QAC_OK;
}
