// ModernBERT's encoder on the training device (kernels/prenorm_layers.cuh):
// the pre-LayerNorm layers forward and backward side by side, the
// embeddings and the final LayerNorm. The CPU's steps
// (model/bert_cpu.c layer_forward, model/bert_backward.c
// qac_bert_layer_backward) in the same order:
//
//   forward, layer l:  a   = l ? LN1(x) : x
//                      qkv = rope(a Wqkv^T + bqkv)        (global or local table)
//                      r   = x + drop(attn(qkv) Wo^T + bo)   (a window in local layers)
//                      m   = LN2(r)
//                      y   = r + drop(GeGLU(m Wi^T + bi) Wo2^T + bo2)
//   backward reads it bottom-up; dL/dx = dL/dr + LN1'(dL/da).
//
// Launchers only, no copies: tests/gpu/test_prenorm_emulated.cpp compiles
// this file with the launchers emulated on the CPU.
#include "prenorm_layers.cuh"

namespace {

// A bias or norm view at an offset, NULL when the family has none.
inline float *at(float *p, size_t off) { return p ? p + off : nullptr; }

inline qac_kt_drop drop_of(float p, uint64_t key, uint64_t seq_base) {
    qac_kt_drop d;
    d.p = p;
    d.key = key;
    d.seq_base = seq_base;
    return d;
}

// The rotary table of layer l: the global theta's, or the local one's.
inline const float *rope_of(const qac_kl_ctx *t, const qac_kl_pn_acts *a, int l) {
    const int hs = t->cfg.hidden_size / t->cfg.num_heads;
    return a->rope + (qac_bert_layer_window(&t->cfg, l) ? (size_t)a->rope_P * hs : 0);
}

} // namespace

void qac_kl_pn_bind(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_bump *b, int B, int T, int recompute) {
    const qac_bert_config *c = &t->cfg;
    const size_t N = (size_t)B * T, C = c->hidden_size, I = c->intermediate_size, L = c->num_layers;
    const size_t Lk = recompute ? 1 : L, NH = c->num_heads, es = t->esize, nP = (size_t)B * NH * T * T;
    const int f32 = t->prec == QAC_PREC_FP32;
    b->take(&a->emb, N * C * 4);
    b->take(&a->emb_mean, N * 4);
    b->take(&a->emb_rstd, N * 4);
    b->take(&a->hidden, (L + 1) * N * C * 4);
    if (f32)
        a->x0_act = a->hidden;
    else
        b->take((char **)&a->x0_act, N * C * es);
    b->take((char **)&a->ln1_act, Lk * N * C * es);
    b->take(&a->ln1_mean, Lk * N * 4);
    b->take(&a->ln1_rstd, Lk * N * 4);
    if (t->fused) {
        a->q = a->k = a->v = a->P = NULL;
        b->take((char **)&a->qkv, Lk * N * 3 * C * es);
        b->take(&a->lse, Lk * NH * N * 4);
    } else {
        a->qkv = NULL;
        a->lse = NULL;
        b->take((char **)&a->q, Lk * N * C * es);
        b->take((char **)&a->k, Lk * N * C * es);
        b->take((char **)&a->v, Lk * N * C * es);
        b->take((char **)&a->P, Lk * nP * es);
    }
    b->take((char **)&a->atty, Lk * N * C * es);
    b->take(&a->res1, Lk * N * C * 4);
    b->take((char **)&a->ln2_act, Lk * N * C * es);
    b->take(&a->ln2_mean, Lk * N * 4);
    b->take(&a->ln2_rstd, Lk * N * 4);
    b->take((char **)&a->ffn_pre, Lk * N * 2 * I * es);
    b->take((char **)&a->ffn_act, Lk * N * I * es);
    b->take(&a->last, N * C * 4);
    b->take(&a->fin_mean, N * 4);
    b->take(&a->fin_rstd, N * 4);
    a->B = B;
    a->T = T;
    a->L = (int)L;
    a->recompute = recompute;
}

qac_status qac_kl_pn_layer_fwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                               const int *lens, uint64_t key, uint64_t seq_base, int l) {
    const qac_bert_config *c = &t->cfg;
    const int B = a->B, T = a->T, N = B * T, C = c->hidden_size, I = c->intermediate_size, F = 2 * I;
    const int NH = c->num_heads, window = qac_bert_layer_window(c, l);
    const size_t NC = (size_t)N * C, lc = (size_t)l * C, nP = (size_t)B * NH * T * T;
    const qac_precision p = t->prec;
    const int f32 = p == QAC_PREC_FP32;
    const float eps = c->layer_norm_eps;
    const qac_kt_drop dh = drop_of(t->p_hidden, key, seq_base), da = drop_of(t->p_attn, key, seq_base);
    cudaStream_t st = t->stream;
    const int j = a->recompute ? 0 : l;
    const float *x = QAC_KL_AT(a->hidden, l, NC);
    void *ln1 = QAC_KL_ACT(t, a->ln1_act, j, NC), *ln2 = QAC_KL_ACT(t, a->ln2_act, j, NC);
    void *atty = QAC_KL_ACT(t, a->atty, j, NC);
    void *ffn_pre = QAC_KL_ACT(t, a->ffn_pre, j, (size_t)N * F), *ffn_act = QAC_KL_ACT(t, a->ffn_act, j, (size_t)N * I);
    float *res1 = QAC_KL_AT(a->res1, j, NC);
    qac_status e;

    // the attention's input: LN1(x), or x itself in layer 0 (its attn_norm
    // is the identity); in bf16 the fp32 LayerNorm output goes to scratch
    const void *ain = a->x0_act;
    if (l > 0) {
        QAC_CU(qac_kt_layernorm_fwd(f32 ? (float *)ln1 : k->dln1, f32 ? NULL : ln1, QAC_KL_AT(a->ln1_mean, j, N),
                                    QAC_KL_AT(a->ln1_rstd, j, N), x, w->ln1_w + lc, at(w->ln1_b, lc), N, C, eps, p,
                                    st));
        ain = ln1;
    }
    // qkv = rope(ain Wqkv^T + b): the bias goes in with the rotation, so the
    // attention reads the rotated product as it is (no bias)
    void *qkv = t->fused ? QAC_KL_ACT(t, a->qkv, j, NC * 3) : k->big;
    if ((e = qac_kt_linear_fwd(t->blas, qkv, ain, qac_kl_act_w(t, w->qkv_w + lc * 3 * C), N, C, 3 * C, p))) return e;
    QAC_CU(qac_k_rope(qkv, at(w->qkv_b, lc * 3), a->pos, rope_of(t, a, l), N, C, NH, p, st));
    if (t->fused) {
        const qac_fa_rows rows = {NULL, lens, B, T, N};
        QAC_CU(qac_fa_forward(atty, QAC_KL_AT(a->lse, j, (size_t)NH * N), qkv, NULL, rows, C, NH, 0, window, da, l, p,
                              &t->tiles, st));
    } else if ((e = qac_kt_attention_fwd(t->blas, atty, QAC_KL_ACT(t, a->q, j, NC), QAC_KL_ACT(t, a->k, j, NC),
                                         QAC_KL_ACT(t, a->v, j, NC), QAC_KL_ACT(t, a->P, j, nP), k->S, k->Pd, k->O,
                                         qkv, NULL, lens, da, l, B, T, C, NH, 0, window, p, st))) {
        return e;
    }
    if ((e = qac_kt_linear_fwd(t->blas, k->proj, atty, qac_kl_act_w(t, w->attn_out_w + lc * C), N, C, C, p)))
        return e;
    // res1 = x + dropout(atty Wo^T + bo), and LN2(res1), the MLP's input, in one pass
    QAC_CU(qac_kt_residual_ln_fwd(res1, f32 ? (float *)ln2 : k->dln1, f32 ? NULL : ln2, QAC_KL_AT(a->ln2_mean, j, N),
                                  QAC_KL_AT(a->ln2_rstd, j, N), k->proj, at(w->attn_out_b, lc), x, w->ln2_w + lc,
                                  at(w->ln2_b, lc), dh, l, QAC_DROP_ATT_OUT, B, T, C, eps, p, st));
    // y = res1 + dropout(GeGLU(LN2 Wi^T + bi) Wo2^T + bo2); ffn_pre keeps the
    // product without its bias (GeGLU's forward and backward add it)
    if ((e = qac_kt_linear_fwd(t->blas, ffn_pre, ln2, qac_kl_act_w(t, w->ffn_in_w + (size_t)l * F * C), N, C, F, p)))
        return e;
    QAC_CU(qac_k_geglu(ffn_act, ffn_pre, at(w->ffn_in_b, (size_t)l * F), N, I, p, st));
    if ((e = qac_kt_linear_fwd(t->blas, k->proj, ffn_act, qac_kl_act_w(t, w->ffn_out_w + lc * I), N, I, C, p)))
        return e;
    QAC_CU(qac_kt_bias_dropout_residual(QAC_KL_AT(a->hidden, l + 1, NC), k->proj, at(w->ffn_out_b, lc), res1, dh, l,
                                        QAC_DROP_FFN_OUT, B, T, C, p, st));
    return QAC_OK;
}

qac_status qac_kl_pn_layer_bwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                               const qac_bert_params *g, const int *lens, uint64_t key, uint64_t seq_base, int l) {
    const qac_bert_config *c = &t->cfg;
    const int B = a->B, T = a->T, N = B * T, C = c->hidden_size, I = c->intermediate_size, F = 2 * I;
    const int NH = c->num_heads, window = qac_bert_layer_window(c, l);
    const size_t NC = (size_t)N * C, lc = (size_t)l * C, lf = (size_t)l * F, nP = (size_t)B * NH * T * T;
    const qac_precision p = t->prec;
    const qac_kt_drop dh = drop_of(t->p_hidden, key, seq_base), da = drop_of(t->p_attn, key, seq_base);
    cudaStream_t st = t->stream;
    qac_status e;
    if (a->recompute && (e = qac_kl_pn_layer_fwd(t, a, k, w, lens, key, seq_base, l))) return e;
    const int j = a->recompute ? 0 : l;
    const void *ln1 = QAC_KL_ACT(t, a->ln1_act, j, NC), *ln2 = QAC_KL_ACT(t, a->ln2_act, j, NC);
    const void *atty = QAC_KL_ACT(t, a->atty, j, NC);
    const void *ffn_pre = QAC_KL_ACT(t, a->ffn_pre, j, (size_t)N * F);
    const void *ffn_act = QAC_KL_ACT(t, a->ffn_act, j, (size_t)N * I);
    void *dpre = k->big, *dact = (char *)k->big + (size_t)N * F * t->esize; // [N,2I] then [N,I]

    // y = res1 + dropout(act Wo2^T + bo2): k->proj = the masked gradient
    QAC_CU(qac_kt_dropout(k->proj, k->dy, dh, l, QAC_DROP_FFN_OUT, B, T, C, p, st));
    if ((e = qac_kt_linear_bwd(t->blas, dact, p, 0.0f, g->ffn_out_w + lc * I, at(g->ffn_out_b, lc), k->proj, ffn_act,
                               qac_kl_act_w(t, w->ffn_out_w + lc * I), k->partial, N, I, C, p, st)))
        return e;
    // act = GeGLU(LN2 Wi^T + bi): dpre, then Wi's and bi's gradients and dL/d LN2
    QAC_CU(qac_kt_geglu_bwd(dpre, dact, ffn_pre, at(w->ffn_in_b, lf), N, I, p, st));
    if ((e = qac_kt_linear_bwd(t->blas, k->dln1, QAC_PREC_FP32, 0.0f, g->ffn_in_w + lf * C, at(g->ffn_in_b, lf), dpre,
                               ln2, qac_kl_act_w(t, w->ffn_in_w + lf * C), k->partial, N, C, F, p, st)))
        return e;
    // LN2 = LN(res1): k->dy = dL/d res1 = dy + LN2'(dln1) in place, k->proj =
    // its masked share through the attention's output dropout, and the
    // gradients of LN2's weight (and bias) and of bo
    QAC_CU(qac_kt_residual_ln_bwd(k->dy, k->proj, g->ln2_w + lc, at(g->ln2_b, lc), at(g->attn_out_b, lc), k->dln1,
                                  k->dy, QAC_KL_AT(a->res1, j, NC), QAC_KL_AT(a->ln2_mean, j, N),
                                  QAC_KL_AT(a->ln2_rstd, j, N), w->ln2_w + lc, k->partial, dh, l, QAC_DROP_ATT_OUT, B,
                                  T, C, p, st));
    if ((e = qac_kt_linear_bwd(t->blas, k->datty, p, 0.0f, g->attn_out_w + lc * C, NULL, k->proj, atty,
                               qac_kl_act_w(t, w->attn_out_w + lc * C), k->partial, N, C, C, p, st)))
        return e;
    // the attention into k->big = dL/d qkv (rotated), then turned back
    if (t->fused) {
        const qac_fa_rows rows = {NULL, lens, B, T, N};
        QAC_CU(qac_fa_backward(k->big, k->dvec, k->datty, atty, QAC_KL_AT(a->lse, j, (size_t)NH * N),
                               QAC_KL_ACT(t, a->qkv, j, NC * 3), NULL, rows, C, NH, 0, window, da, l, p, &t->tiles,
                               st));
    } else if ((e = qac_kt_attention_bwd(t->blas, k->big, k->datty, QAC_KL_ACT(t, a->q, j, NC),
                                         QAC_KL_ACT(t, a->k, j, NC), QAC_KL_ACT(t, a->v, j, NC),
                                         QAC_KL_ACT(t, a->P, j, nP), k->S, k->Pd, k->dS, k->O, k->dq, k->dk, k->dv,
                                         lens, da, l, B, T, C, NH, p, st))) {
        return e;
    }
    QAC_CU(qac_kt_rope_bwd(k->big, a->pos, rope_of(t, a, l), N, C, NH, p, st));
    if (l == 0) { // the attention read x itself: its gradient joins dL/d res1
        return qac_kt_linear_bwd(t->blas, k->dy, QAC_PREC_FP32, 1.0f, g->qkv_w, at(g->qkv_b, 0), k->big, a->x0_act,
                                 qac_kl_act_w(t, w->qkv_w), k->partial, N, C, 3 * C, p, st);
    }
    if ((e = qac_kt_linear_bwd(t->blas, k->dln1, QAC_PREC_FP32, 0.0f, g->qkv_w + lc * 3 * C, at(g->qkv_b, lc * 3),
                               k->big, ln1, qac_kl_act_w(t, w->qkv_w + lc * 3 * C), k->partial, N, C, 3 * C, p, st)))
        return e;
    // a = LN1(x): dL/dx = dL/d res1 + LN1'(dln1)
    QAC_CU(qac_kt_layernorm_bwd(k->dres, g->ln1_w + lc, at(g->ln1_b, lc), k->dln1, QAC_KL_AT(a->hidden, l, NC),
                                QAC_KL_AT(a->ln1_mean, j, N), QAC_KL_AT(a->ln1_rstd, j, N), w->ln1_w + lc, k->partial,
                                N, C, st));
    QAC_CU(qac_kt_add(k->dy, k->dres, NC, st));
    return QAC_OK;
}

qac_status qac_kl_pn_fwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                         const int32_t *ids, const int *lens, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const int B = a->B, T = a->T, N = B * T, C = c->hidden_size, L = a->L;
    const size_t NC = (size_t)N * C;
    const float eps = c->layer_norm_eps;
    cudaStream_t st = t->stream;
    // hidden[0] = dropout(LN(word[ids])): no position or type table
    QAC_CU(qac_kt_embed_fwd(a->emb, ids, NULL, NULL, w->word_emb, NULL, NULL, N, T, C, st));
    QAC_CU(qac_kt_layernorm_fwd(a->hidden, NULL, a->emb_mean, a->emb_rstd, a->emb, w->emb_ln_w, w->emb_ln_b, N, C, eps,
                                t->prec, st));
    if (t->p_hidden > 0)
        QAC_CU(qac_kt_dropout(a->hidden, a->hidden, drop_of(t->p_hidden, key, seq_base), 0, QAC_DROP_EMB, B, T, C,
                              QAC_PREC_FP32, st));
    if (t->prec != QAC_PREC_FP32) QAC_CU(qac_k_from_f32(a->x0_act, a->hidden, NC, t->prec, st));
    for (int l = 0; l < L; l++) {
        qac_status e = qac_kl_pn_layer_fwd(t, a, k, w, lens, key, seq_base, l);
        if (e) return e;
    }
    // last = LN_final(hidden[L])
    QAC_CU(qac_kt_layernorm_fwd(a->last, NULL, a->fin_mean, a->fin_rstd, QAC_KL_AT(a->hidden, L, NC), w->final_ln_w,
                                w->final_ln_b, N, C, eps, t->prec, st));
    return QAC_OK;
}

qac_status qac_kl_pn_bwd(const qac_kl_ctx *t, qac_kl_pn_acts *a, qac_kl_work *k, const qac_bert_params *w,
                         const qac_bert_params *g, const int *lens, const float *dlast, qac_scatter_plan pw,
                         const int32_t *plan_w, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const int B = a->B, T = a->T, N = B * T, C = c->hidden_size, L = a->L;
    const size_t NC = (size_t)N * C;
    cudaStream_t st = t->stream;
    QAC_CU(qac_kt_layernorm_bwd(k->dy, g->final_ln_w, g->final_ln_b, dlast, QAC_KL_AT(a->hidden, L, NC), a->fin_mean,
                                a->fin_rstd, w->final_ln_w, k->partial, N, C, st));
    for (int l = L - 1; l >= 0; l--) {
        qac_status e = qac_kl_pn_layer_bwd(t, a, k, w, g, lens, key, seq_base, l);
        if (e) return e;
    }
    // hidden[0] = dropout(LN(word[ids]))
    if (t->p_hidden > 0)
        QAC_CU(qac_kt_dropout(k->dy, k->dy, drop_of(t->p_hidden, key, seq_base), 0, QAC_DROP_EMB, B, T, C,
                              QAC_PREC_FP32, st));
    QAC_CU(qac_kt_layernorm_bwd(k->dres, g->emb_ln_w, g->emb_ln_b, k->dy, a->emb, a->emb_mean, a->emb_rstd,
                                w->emb_ln_w, k->partial, N, C, st));
    // dln1 (N*C floats) holds the scatter's partials: at most one segment per row
    QAC_CU(qac_kt_scatter_add(g->word_emb, k->dres, pw, plan_w, k->dln1, C, st));
    return QAC_OK;
}
