/* Whole-word MLM masking and the tied MLM head's loss (see qac_heads.h; the head's parameters: model/head_nets.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gemm.h"
#include "qac_heads.h"
#include "qac_rng.h"

qac_status qac_word_starts(uint8_t **out, const qac_tokenizer *tok) {
    int V = qac_tokenizer_vocab_size(tok);
    uint8_t *ws = malloc((size_t)V);
    if (!ws) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < V; i++) {
        const char *t = qac_tokenizer_id_to_token(tok, i);
        ws[i] = !(t && t[0] == '#' && t[1] == '#');
    }
    *out = ws;
    return QAC_OK;
}

static int is_special(int32_t id, const qac_special_ids *sp) {
    return id == sp->cls || id == sp->sep || id == sp->pad || id == sp->mask;
}

void qac_mask_whole_words(int32_t *ids, int32_t *labels, int len, const uint8_t *word_start, const qac_special_ids *sp,
                          const qac_mask_opts *o, uint64_t key) {
    /* word w spans [start[w], end[w]) of the original ids: spans are fixed
     * before any token changes (a random replacement may be a "##" piece) */
    int *start = malloc((size_t)(2 * len + 1) * sizeof *start), *end = start + len, nw = 0;
    for (int t = 0; t < len; t++) {
        labels[t] = -100;
        if (is_special(ids[t], sp)) {
            if (nw && end[nw - 1] < 0) end[nw - 1] = t;
            continue;
        }
        if (nw == 0 || word_start[ids[t]] || is_special(ids[t - 1], sp)) {
            if (nw && end[nw - 1] < 0) end[nw - 1] = t;
            start[nw] = t, end[nw] = -1, nw++;
        }
    }
    if (nw && end[nw - 1] < 0) end[nw - 1] = len;
    if (nw == 0) {
        free(start);
        return;
    }
    int k = (int)lround(nw * (double)o->rate);
    k = k < 1 ? 1 : k > nw ? nw : k;
    /* the first k of a seeded Fisher-Yates shuffle of the words */
    int *order = malloc((size_t)nw * sizeof *order);
    for (int i = 0; i < nw; i++) order[i] = i;
    for (int i = 0; i < k; i++) {
        int j = i + (int)qac_rng_below(key, (uint64_t)i, (uint64_t)(nw - i));
        int tmp = order[i];
        order[i] = order[j], order[j] = tmp;
    }
    uint64_t tk = qac_rng_mix(key ^ 0x746F6B656E73ull);
    for (int i = 0; i < k; i++) {
        int w = order[i];
        for (int t = start[w]; t < end[w]; t++) {
            labels[t] = ids[t];
            float u = qac_rng_uniform(tk, 2 * (uint64_t)t);
            if (u < 0.8f) ids[t] = o->mask_id;
            else if (qac_rng_uniform(tk, 2 * (uint64_t)t + 1) < 0.5f)
                ids[t] = (int32_t)qac_rng_below(tk, ((uint64_t)1 << 32) + (uint64_t)t, (uint64_t)o->vocab_size);
        }
    }
    free(order);
    free(start);
}

/* cross-entropy of rows [b, e) of logits [M,V] against labels, each row's
 * loss into row_loss; with grad, the row becomes dL/dlogits = (softmax -
 * onehot) / M */
typedef struct ce_ctx {
    float *logits;
    const int32_t *labels;
    double *row_loss;
    int V, M, grad;
} ce_ctx;

static void ce_task(void *vctx, int64_t b, int64_t e, int tid) {
    (void)tid;
    const ce_ctx *c = vctx;
    int V = c->V, M = c->M;
    for (int64_t i = b; i < e; i++) {
        float *row = c->logits + (size_t)i * V;
        double mx = row[0];
        for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        double z = 0;
        for (int v = 0; v < V; v++) z += exp(row[v] - mx);
        double lse = mx + log(z);
        c->row_loss[i] = lse - row[c->labels[i]];
        if (c->grad) {
            for (int v = 0; v < V; v++) row[v] = (float)(exp(row[v] - lse) / M);
            row[c->labels[i]] -= 1.0f / M;
        }
    }
}

void qac_mlm_ws_free(qac_mlm_ws *w) {
    if (!w) return;
    free(w->mem);
    w->mem = NULL, w->cap = 0;
}

qac_status qac_mlm_loss(double *loss, float *dstates, qac_mlm_head *g, float *dword, const qac_mlm_head *h,
                        const float *word_emb, const float *states, const int32_t *labels, int M, int C, int V,
                        float ln_eps, qac_pool *pool) {
    qac_mlm_ws ws = {0};
    qac_status st = qac_mlm_loss_ws(&ws, loss, dstates, g, dword, h, word_emb, states, labels, M, C, V, ln_eps, pool);
    qac_mlm_ws_free(&ws);
    return st;
}

qac_status qac_mlm_loss_ws(qac_mlm_ws *ws, double *loss, float *dstates, qac_mlm_head *g, float *dword,
                           const qac_mlm_head *h, const float *word_emb, const float *states, const int32_t *labels,
                           int M, int C, int V, float ln_eps, qac_pool *pool) {
    *loss = 0;
    if (M < 1) return QAC_OK;
    for (int i = 0; i < M; i++)
        if (labels[i] < 0 || labels[i] >= V)
            return qac_set_error(QAC_ERR_INVALID, "mlm: label %d out of range [0, %d)", labels[i], V);
    size_t MC = (size_t)M * C, MV = (size_t)M * V;
    size_t nW = qac_gemm_packed_floats(C, C), nE = qac_gemm_packed_floats(V, C);
    size_t scratch = g ? qac_matmul_backward_scratch(M, C, V) : 0;
    size_t total = 4 * MC + 2 * (size_t)M + MV + nW + nE + scratch + 2 * (size_t)M + 1; /* + row losses (doubles, 8-aligned) */
    if (total > ws->cap) {
        float *grown = malloc(total * sizeof *grown);
        if (!grown)
            return qac_set_error(QAC_ERR_NOMEM, "mlm: cannot allocate %.1f MiB for %d positions",
                                 (double)total * 4 / (1 << 20), M);
        free(ws->mem);
        ws->mem = grown, ws->cap = total;
    }
    float *mem = ws->mem;
    float *pre = mem, *act = pre + MC, *u = act + MC, *du = u + MC, *mean = du + MC, *rstd = mean + M;
    float *logits = rstd + M, *pw = logits + MV, *pe = pw + nW, *scr = pe + nE;
    double *row_loss = (double *)(scr + scratch + ((uintptr_t)(scr + scratch) % 8 ? 1 : 0));
    qac_gemm_pack_parallel(pw, h->dense_w, C, C, C, 0, pool);
    qac_gemm_pack_parallel(pe, word_emb, V, C, C, 0, pool);
    qac_packed_w W = {.p = pw, .IC = C, .OC = C}, E = {.p = pe, .IC = C, .OC = V};
    qac_status st = qac_matmul_gelu_packed(act, pre, states, &W, h->dense_b, M, NULL, pool); /* fp32: no scratch */
    if (st) return st;
    qac_layernorm_forward(u, mean, rstd, act, h->ln_w, h->ln_b, M, C, ln_eps, pool);
    if ((st = qac_gemm(logits, u, &E, h->bias, NULL, M, NULL, pool))) return st;
    ce_ctx cc = {logits, labels, row_loss, V, M, g != NULL};
    qac_pool_for(pool, M, 0, ce_task, &cc);
    double total_loss = 0;
    for (int i = 0; i < M; i++) total_loss += row_loss[i]; /* in row order, whatever the threads */
    *loss = total_loss / M;
    if (g) {
        if ((st = qac_matmul_backward(du, dword, g->bias, logits, u, word_emb, NULL, M, C, V, scr, pool))) return st;
        qac_layernorm_backward(du, g->ln_w, g->ln_b, du, act, mean, rstd, h->ln_w, M, C, pool);
        qac_gelu_backward(du, du, pre, MC, pool);
        return qac_matmul_backward(dstates, g->dense_w, g->dense_b, du, states, h->dense_w, NULL, M, C, C, scr, pool);
    }
    return QAC_OK;
}
