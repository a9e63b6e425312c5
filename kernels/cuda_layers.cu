// The BERT layer stack of the CUDA training backends (kernels/cuda_layers.cuh).
//
// First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md; what
// changed since is checked by scripts/gpu_train_verify.sh on the next one.
#include "cuda_layers.cuh"

size_t qac_kl_align(size_t x) { return (x + 255) & ~(size_t)255; }

const void *qac_kl_act_w(const qac_kl_ctx *t, const float *view) {
    if (t->prec == QAC_PREC_FP32) return view;
    return t->params_act + (view - t->params);
}

void qac_kl_ctx_attention(qac_kl_ctx *t) {
    t->fused = qac_cuda_attention_fused() && qac_fa_supported(t->cfg.hidden_size, t->cfg.num_heads, t->prec);
    t->tiles = qac_fa_tiles_default();
}

qac_kt_drop qac_kl_drop(float p, uint64_t key, uint64_t seq_base) {
    qac_kt_drop d;
    d.p = p;
    d.key = key;
    d.seq_base = seq_base;
    return d;
}

// GeGLU (ModernBERT, kernels/prenorm_layers.cu): its two gradients, [N,2I]
// and [N,I], side by side
static size_t big_cols(const qac_bert_config *c) {
    const size_t f = (size_t)(c->glu ? 3 : 1) * c->intermediate_size, q = (size_t)3 * c->hidden_size;
    return f > q ? f : q;
}

void qac_kl_acts_bind(const qac_kl_ctx *t, qac_kl_acts *s, qac_kl_bump *b, int B, int T, int L_, int with_emb,
                      int recompute) {
    const qac_bert_config *c = &t->cfg;
    const size_t N = (size_t)B * T, C = c->hidden_size, I = c->intermediate_size, L = (size_t)L_;
    // the layer inputs for all L layers; the rest for Lk (one when recomputed)
    const size_t Lk = recompute ? 1 : L;
    const size_t NH = c->num_heads, es = t->esize, nP = (size_t)B * NH * T * T;
    if (with_emb) {
        b->take(&s->emb, N * C * 4);
        b->take(&s->emb_mean, N * 4);
        b->take(&s->emb_rstd, N * 4);
    } else {
        s->emb = s->emb_mean = s->emb_rstd = NULL;
    }
    b->take(&s->hidden, (L + 1) * N * C * 4);
    if (t->prec == QAC_PREC_FP32)
        s->hidden_act = s->hidden;
    else
        b->take((char **)&s->hidden_act, (L + 1) * N * C * es);
    if (t->fused) {
        s->q = s->k = s->v = s->P = NULL;
        b->take((char **)&s->qkv, Lk * N * 3 * C * es);
        b->take(&s->lse, Lk * NH * N * 4);
    } else {
        s->qkv = NULL;
        s->lse = NULL;
        b->take((char **)&s->q, Lk * N * C * es);
        b->take((char **)&s->k, Lk * N * C * es);
        b->take((char **)&s->v, Lk * N * C * es);
        b->take((char **)&s->P, Lk * nP * es);
    }
    b->take((char **)&s->atty, Lk * N * C * es);
    b->take(&s->res1, Lk * N * C * 4);
    b->take(&s->ln1, Lk * N * C * 4);
    b->take(&s->res2, Lk * N * C * 4);
    if (t->prec == QAC_PREC_FP32)
        s->ln1_act = s->ln1;
    else
        b->take((char **)&s->ln1_act, Lk * N * C * es);
    b->take(&s->ln1_mean, Lk * N * 4);
    b->take(&s->ln1_rstd, Lk * N * 4);
    b->take(&s->ln2_mean, Lk * N * 4);
    b->take(&s->ln2_rstd, Lk * N * 4);
    b->take((char **)&s->ffn_pre, Lk * N * I * es);
    b->take((char **)&s->ffn_act, Lk * N * I * es);
    s->B = B;
    s->T = T;
    s->L = L_;
    s->recompute = recompute;
}

size_t qac_kl_work_bind(const qac_kl_ctx *t, qac_kl_work *w, char *base, size_t N, size_t nP) {
    const qac_bert_config *c = &t->cfg;
    const size_t C = c->hidden_size, es = t->esize;
    // the fused attention needs none of the unfused one's buffers
    const size_t nPu = t->fused ? 0 : nP, NCu = t->fused ? 0 : N * C;
    qac_kl_bump b = {base, 0};
    b.take((char **)&w->big, N * big_cols(c) * es);
    b.take((char **)&w->proj, N * C * es);
    b.take(&w->S, nPu * 4);
    b.take((char **)&w->Pd, nPu * es);
    b.take((char **)&w->dS, nPu * es);
    b.take((char **)&w->O, NCu * es);
    b.take((char **)&w->dq, NCu * es);
    b.take((char **)&w->dk, NCu * es);
    b.take((char **)&w->dv, NCu * es);
    b.take((char **)&w->datty, N * C * es);
    b.take(&w->dvec, N * c->num_heads * 4);
    b.take(&w->dy, N * C * 4);
    b.take(&w->dres, N * C * 4);
    b.take(&w->dln1, N * C * 4);
    size_t np = qac_kt_colsum_floats((int)N, (int)C, 3); // the fused LayerNorm backward's three sums
    const size_t n2 = qac_kt_colsum_floats((int)N, qac_bert_ffn_rows(c), 1), n3 = qac_kt_colsum_floats((int)N, (int)(3 * C), 1);
    np = np > n2 ? np : n2;
    np = np > n3 ? np : n3;
    b.take(&w->partial, np * 4);
    return b.off;
}

qac_status qac_kl_work_ensure(const qac_kl_ctx *t, qac_kl_work *w, size_t N, size_t nP) {
    const size_t need = qac_kl_work_bind(t, w, NULL, N, nP);
    if (need > w->cap) {
        QAC_CU(cudaStreamSynchronize(t->stream));
        cudaFree(w->mem);
        w->mem = NULL;
        w->cap = 0;
        cudaError_t e = cudaMalloc(&w->mem, need);
        if (e != cudaSuccess)
            return qac_set_error(QAC_ERR_NOMEM, "CUDA trainer: cannot allocate %.2f GiB of work buffers (%s)",
                                 (double)need / (1 << 30), cudaGetErrorString(e));
        w->cap = need;
    }
    qac_kl_work_bind(t, w, (char *)w->mem, N, nP);
    return QAC_OK;
}

qac_status qac_kl_embed_fwd_into(const qac_kl_ctx *t, float *out, float *emb, float *mean, float *rstd,
                                 const int32_t *ids, const int32_t *pos_ids, const qac_bert_params *w, int B, int T,
                                 uint64_t key, uint64_t seq_base, int drop_layer) {
    const qac_bert_config *c = &t->cfg;
    const int N = B * T, C = c->hidden_size;
    const qac_kt_drop dh = qac_kl_drop(t->p_hidden, key, seq_base);
    cudaStream_t st = t->stream;
    QAC_CU(qac_kt_embed_fwd(emb, ids, NULL, pos_ids, w->word_emb, w->pos_emb, w->type_emb, N, T, C, st));
    QAC_CU(qac_kt_layernorm_fwd(out, NULL, mean, rstd, emb, w->emb_ln_w, w->emb_ln_b, N, C, c->layer_norm_eps,
                                t->prec, st));
    if (t->p_hidden > 0)
        QAC_CU(qac_kt_dropout(out, out, dh, drop_layer, QAC_DROP_EMB, B, T, C, QAC_PREC_FP32, st));
    return QAC_OK;
}

qac_status qac_kl_embed_fwd(const qac_kl_ctx *t, qac_kl_acts *s, const int32_t *ids, const qac_bert_params *w,
                            uint64_t key, uint64_t seq_base) {
    return qac_kl_embed_fwd_into(t, s->hidden, s->emb, s->emb_mean, s->emb_rstd, ids, s->pos_ids, w, s->B, s->T, key,
                                 seq_base, 0);
}

// The attention's backward into k->big = dL/d(QKV product) from k->datty,
// from slot j of the kept tensors: the fused kernels (qkv, lse and the
// output atty) or the unfused ones (q, k, v, P).
static qac_status attention_bwd(const qac_kl_ctx *t, qac_kl_work *k, void *qkv, float *lse, void *q, void *kk, void *v,
                                void *P, void *atty, int j, const float *qkv_b, const int *lens, qac_kt_drop da, int l,
                                int B, int T, int causal, int window) {
    const int C = t->cfg.hidden_size, NH = t->cfg.num_heads, N = B * T;
    const size_t NC = (size_t)N * C, nP = (size_t)B * NH * T * T;
    if (t->fused) {
        const qac_fa_rows rows = {NULL, lens, B, T, N};
        QAC_CU(qac_fa_backward(k->big, k->dvec, k->datty, QAC_KL_ACT(t, atty, j, NC), QAC_KL_AT(lse, j, (size_t)NH * N),
                               QAC_KL_ACT(t, qkv, j, NC * 3), qkv_b, rows, C, NH, causal, window, da, l, t->prec,
                               &t->tiles, t->stream));
        return QAC_OK;
    }
    // the unfused kernels read q, k, v with the bias already added
    return qac_kt_attention_bwd(t->blas, k->big, k->datty, QAC_KL_ACT(t, q, j, NC), QAC_KL_ACT(t, kk, j, NC),
                                QAC_KL_ACT(t, v, j, NC), QAC_KL_ACT(t, P, j, nP), k->S, k->Pd, k->dS, k->O, k->dq,
                                k->dk, k->dv, lens, da, l, B, T, C, NH, t->prec, t->stream);
}

// Layer l of the stack w on hidden[l] (hidden_act[l]) into hidden[l+1]
// (hidden_act[l+1]), its tensors in slot l of s (slot 0 when s recomputes).
// Dropout is keyed by l, never by the slot, so a re-run draws the same masks.
static qac_status layer_fwd(const qac_kl_ctx *t, qac_kl_acts *s, qac_kl_work *k, const qac_bert_params *w,
                            const int *lens, uint64_t key, uint64_t seq_base, int l) {
    const qac_bert_config *c = &t->cfg;
    const int B = s->B, T = s->T, N = B * T, C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I, nP = (size_t)B * NH * T * T;
    const qac_precision p = t->prec;
    const float eps = c->layer_norm_eps;
    const qac_kt_drop dh = qac_kl_drop(t->p_hidden, key, seq_base), da = qac_kl_drop(t->p_attn, key, seq_base);
    cudaStream_t st = t->stream;
    const int j = s->recompute ? 0 : l;
    const size_t lc = (size_t)l * C;
    const float *x = QAC_KL_AT(s->hidden, l, NC);
    const void *xa = QAC_KL_ACT(t, s->hidden_act, l, NC);
    void *atty = QAC_KL_ACT(t, s->atty, j, NC);
    void *ln1_act = QAC_KL_ACT(t, s->ln1_act, j, NC);
    void *ffn_pre = QAC_KL_ACT(t, s->ffn_pre, j, NI), *ffn_act = QAC_KL_ACT(t, s->ffn_act, j, NI);
    float *res1 = QAC_KL_AT(s->res1, j, NC), *ln1 = QAC_KL_AT(s->ln1, j, NC), *res2 = QAC_KL_AT(s->res2, j, NC);

    qac_status e;
    if (t->fused) { // the QKV product straight into the kept buffer, read in place
        void *qkv = QAC_KL_ACT(t, s->qkv, j, NC * 3);
        if ((e = qac_kt_linear_fwd(t->blas, qkv, xa, qac_kl_act_w(t, w->qkv_w + lc * 3 * C), N, C, 3 * C, p))) return e;
        const qac_fa_rows rows = {NULL, lens, B, T, N};
        QAC_CU(qac_fa_forward(atty, QAC_KL_AT(s->lse, j, (size_t)NH * N), qkv, w->qkv_b + lc * 3, rows, C, NH, 0, 0, da,
                              l, p, &t->tiles, st));
    } else {
        void *q = QAC_KL_ACT(t, s->q, j, NC), *kk = QAC_KL_ACT(t, s->k, j, NC), *v = QAC_KL_ACT(t, s->v, j, NC);
        if ((e = qac_kt_linear_fwd(t->blas, k->big, xa, qac_kl_act_w(t, w->qkv_w + lc * 3 * C), N, C, 3 * C, p)))
            return e;
        if ((e = qac_kt_attention_fwd(t->blas, atty, q, kk, v, QAC_KL_ACT(t, s->P, j, nP), k->S, k->Pd, k->O, k->big,
                                      w->qkv_b + lc * 3, lens, da, l, B, T, C, NH, 0, 0, p, st)))
            return e;
    }
    if ((e = qac_kt_linear_fwd(t->blas, k->proj, atty, qac_kl_act_w(t, w->attn_out_w + lc * C), N, C, C, p)))
        return e;
    // res1 = x + dropout(atty Wo^T + bo), ln1 = LN1(res1): one pass
    QAC_CU(qac_kt_residual_ln_fwd(res1, ln1, p == QAC_PREC_FP32 ? NULL : ln1_act, QAC_KL_AT(s->ln1_mean, j, N),
                                  QAC_KL_AT(s->ln1_rstd, j, N), k->proj, w->attn_out_b + lc, x, w->ln1_w + lc,
                                  w->ln1_b + lc, dh, l, QAC_DROP_ATT_OUT, B, T, C, eps, p, st));
    if ((e = qac_kt_linear_fwd(t->blas, ffn_pre, ln1_act, qac_kl_act_w(t, w->ffn_in_w + (size_t)l * I * C), N, C, I,
                               p)))
        return e;
    // ffn_pre keeps the product without its bias: the backward adds it again
    QAC_CU(qac_kt_bias_gelu(ffn_act, ffn_pre, w->ffn_in_b + (size_t)l * I, N, I, p, st));
    if ((e = qac_kt_linear_fwd(t->blas, k->proj, ffn_act, qac_kl_act_w(t, w->ffn_out_w + lc * I), N, I, C, p)))
        return e;
    // res2 = ln1 + dropout(ffn_act W2^T + b2), hidden[l+1] = LN2(res2): one pass
    QAC_CU(qac_kt_residual_ln_fwd(res2, QAC_KL_AT(s->hidden, l + 1, NC),
                                  p == QAC_PREC_FP32 ? NULL : QAC_KL_ACT(t, s->hidden_act, l + 1, NC),
                                  QAC_KL_AT(s->ln2_mean, j, N), QAC_KL_AT(s->ln2_rstd, j, N), k->proj,
                                  w->ffn_out_b + lc, ln1, w->ln2_w + lc, w->ln2_b + lc, dh, l, QAC_DROP_FFN_OUT, B, T,
                                  C, eps, p, st));
    return QAC_OK;
}

qac_status qac_kl_layers_fwd(const qac_kl_ctx *t, qac_kl_acts *s, qac_kl_work *k, const qac_bert_params *w,
                             const int *lens, uint64_t key, uint64_t seq_base) {
    const size_t NC = (size_t)s->B * s->T * t->cfg.hidden_size;
    if (t->prec != QAC_PREC_FP32) QAC_CU(qac_k_from_f32(s->hidden_act, s->hidden, NC, t->prec, t->stream));
    for (int l = 0; l < s->L; l++) {
        qac_status e = layer_fwd(t, s, k, w, lens, key, seq_base, l);
        if (e) return e;
    }
    return QAC_OK;
}

qac_status qac_kl_layers_bwd(const qac_kl_ctx *t, qac_kl_acts *s, qac_kl_work *k, const qac_bert_params *w,
                             const qac_bert_params *g, const int *lens, uint64_t key, uint64_t seq_base,
                             const float *dh_add, int add_at) {
    const qac_bert_config *c = &t->cfg;
    const int B = s->B, T = s->T, N = B * T, C = c->hidden_size, I = c->intermediate_size;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I;
    const qac_precision p = t->prec;
    const qac_kt_drop dh = qac_kl_drop(t->p_hidden, key, seq_base), da = qac_kl_drop(t->p_attn, key, seq_base);
    cudaStream_t st = t->stream;
    qac_status e;
    for (int l = s->L - 1; l >= 0; l--) {
        const size_t lc = (size_t)l * C, li = (size_t)l * I;
        // recompute: the layer again from its kept input, the same kernels
        // and masks (hidden[l+1] is rewritten with the values it holds)
        if (s->recompute && (e = layer_fwd(t, s, k, w, lens, key, seq_base, l))) return e;
        const int j = s->recompute ? 0 : l; // the slot of layer l's tensors
        // y = LN2(res2), res2 = ln1 + dropout(ffn_act W2^T + b2): in one
        // pass k->dln1 = dL/d res2 (the residual's share of dL/d ln1), the
        // masked gradient of the FFN output, and LN2's and b2's gradients
        QAC_CU(qac_kt_residual_ln_bwd(k->dln1, k->proj, g->ln2_w + lc, g->ln2_b + lc, g->ffn_out_b + lc, k->dy, NULL,
                                      QAC_KL_AT(s->res2, j, NC), QAC_KL_AT(s->ln2_mean, j, N),
                                      QAC_KL_AT(s->ln2_rstd, j, N), w->ln2_w + lc, k->partial, dh, l,
                                      QAC_DROP_FFN_OUT, B, T, C, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->big, p, 0.0f, g->ffn_out_w + lc * I, NULL, k->proj,
                                   QAC_KL_ACT(t, s->ffn_act, j, NI), qac_kl_act_w(t, w->ffn_out_w + lc * I), k->partial,
                                   N, I, C, p, st)))
            return e;
        // ffn_act = GELU(ln1 W1^T + b1), and b1's gradient
        QAC_CU(qac_kt_bias_gelu_bwd(k->big, g->ffn_in_b + li, k->big, QAC_KL_ACT(t, s->ffn_pre, j, NI),
                                    w->ffn_in_b + li, k->partial, N, I, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->dln1, QAC_PREC_FP32, 1.0f, g->ffn_in_w + li * C, NULL, k->big,
                                   QAC_KL_ACT(t, s->ln1_act, j, NC), qac_kl_act_w(t, w->ffn_in_w + li * C), k->partial,
                                   N, C, I, p, st)))
            return e;
        // ln1 = LN1(res1), res1 = x + dropout(atty Wo^T + bo): k->dy = dL/d
        // res1 (the residual's share of dL/d x) in the same way
        QAC_CU(qac_kt_residual_ln_bwd(k->dy, k->proj, g->ln1_w + lc, g->ln1_b + lc, g->attn_out_b + lc, k->dln1, NULL,
                                      QAC_KL_AT(s->res1, j, NC), QAC_KL_AT(s->ln1_mean, j, N),
                                      QAC_KL_AT(s->ln1_rstd, j, N), w->ln1_w + lc, k->partial, dh, l,
                                      QAC_DROP_ATT_OUT, B, T, C, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->datty, p, 0.0f, g->attn_out_w + lc * C, NULL, k->proj,
                                   QAC_KL_ACT(t, s->atty, j, NC), qac_kl_act_w(t, w->attn_out_w + lc * C), k->partial,
                                   N, C, C, p, st)))
            return e;
        // atty = attention(x Wqkv^T + bqkv)
        if ((e = attention_bwd(t, k, s->qkv, s->lse, s->q, s->k, s->v, s->P, s->atty, j, w->qkv_b + lc * 3, lens, da,
                               l, B, T, 0, 0)))
            return e;
        if ((e = qac_kt_linear_bwd(t->blas, k->dy, QAC_PREC_FP32, 1.0f, g->qkv_w + lc * 3 * C, g->qkv_b + lc * 3,
                                   k->big, QAC_KL_ACT(t, s->hidden_act, l, NC), qac_kl_act_w(t, w->qkv_w + lc * 3 * C),
                                   k->partial, N, C, 3 * C, p, st)))
            return e;
        // k->dy is now dL/d hidden[l]: a reader of that layer adds its share
        if (dh_add && l == add_at) QAC_CU(qac_kt_add(k->dy, dh_add, NC, st));
    }
    return QAC_OK;
}

qac_status qac_kl_embed_bwd_from(const qac_kl_ctx *t, qac_kl_work *k, const float *emb, const float *mean,
                                 const float *rstd, int B, int T, const qac_bert_params *g, const qac_bert_params *w,
                                 qac_scatter_plan pw, const int32_t *plan_w, qac_scatter_plan pt,
                                 const int32_t *plan_t, qac_scatter_plan pp, const int32_t *plan_p, uint64_t key,
                                 uint64_t seq_base, int drop_layer) {
    const int N = B * T, C = t->cfg.hidden_size;
    const qac_kt_drop dh = qac_kl_drop(t->p_hidden, key, seq_base);
    cudaStream_t st = t->stream;
    // out = dropout(LN(word + pos + type))
    if (t->p_hidden > 0)
        QAC_CU(qac_kt_dropout(k->dy, k->dy, dh, drop_layer, QAC_DROP_EMB, B, T, C, QAC_PREC_FP32, st));
    QAC_CU(qac_kt_layernorm_bwd(k->dres, g->emb_ln_w, g->emb_ln_b, k->dy, emb, mean, rstd, w->emb_ln_w, k->partial, N,
                                C, st));
    // dln1 (N*C floats) holds the scatter partials: at most one segment per row
    if (plan_p)
        QAC_CU(qac_kt_scatter_add(g->pos_emb, k->dres, pp, plan_p, k->dln1, C, st));
    else
        QAC_CU(qac_kt_pos_bwd(g->pos_emb, k->dres, B, T, C, st));
    QAC_CU(qac_kt_scatter_add(g->word_emb, k->dres, pw, plan_w, k->dln1, C, st));
    QAC_CU(qac_kt_scatter_add(g->type_emb, k->dres, pt, plan_t, k->dln1, C, st));
    return QAC_OK;
}

qac_status qac_kl_embed_bwd(const qac_kl_ctx *t, qac_kl_acts *s, qac_kl_work *k, const qac_bert_params *g,
                            const qac_bert_params *w, qac_scatter_plan pw, const int32_t *plan_w,
                            qac_scatter_plan pt, const int32_t *plan_t, uint64_t key, uint64_t seq_base) {
    return qac_kl_embed_bwd_from(t, k, s->emb, s->emb_mean, s->emb_rstd, s->B, s->T, g, w, pw, plan_w, pt, plan_t,
                                 s->pp, s->plan_p, key, seq_base, 0);
}

void qac_kl_gpt_acts_bind(const qac_kl_ctx *t, qac_kl_gpt_acts *s, qac_kl_bump *b, int B, int T, int L_, int I_) {
    const qac_bert_config *c = &t->cfg;
    const size_t N = (size_t)B * T, C = c->hidden_size, I = (size_t)I_, L = (size_t)L_;
    const size_t NH = c->num_heads, es = t->esize, nP = (size_t)B * NH * T * T;
    const int f32 = t->prec == QAC_PREC_FP32;
    b->take(&s->emb, N * C * 4);
    b->take(&s->emb_mean, N * 4);
    b->take(&s->emb_rstd, N * 4);
    b->take(&s->hidden, (L + 1) * N * C * 4);
    b->take(&s->ln1, L * N * C * 4);
    b->take(&s->ln2, L * N * C * 4);
    if (f32) {
        s->ln1_act = s->ln1, s->ln2_act = s->ln2;
    } else {
        b->take((char **)&s->ln1_act, L * N * C * es);
        b->take((char **)&s->ln2_act, L * N * C * es);
    }
    b->take(&s->ln1_mean, L * N * 4);
    b->take(&s->ln1_rstd, L * N * 4);
    b->take(&s->ln2_mean, L * N * 4);
    b->take(&s->ln2_rstd, L * N * 4);
    if (t->fused) {
        s->q = s->k = s->v = s->P = NULL;
        b->take((char **)&s->qkv, L * N * 3 * C * es);
        b->take(&s->lse, L * NH * N * 4);
    } else {
        s->qkv = NULL;
        s->lse = NULL;
        b->take((char **)&s->q, L * N * C * es);
        b->take((char **)&s->k, L * N * C * es);
        b->take((char **)&s->v, L * N * C * es);
        b->take((char **)&s->P, L * nP * es);
    }
    b->take((char **)&s->atty, L * N * C * es);
    b->take(&s->res1, L * N * C * 4);
    b->take((char **)&s->fc_pre, L * N * I * es);
    b->take((char **)&s->fc_act, L * N * I * es);
    b->take(&s->out, N * C * 4);
    b->take(&s->lnf_mean, N * 4);
    b->take(&s->lnf_rstd, N * 4);
    s->B = B, s->T = T, s->L = L_, s->I = I_;
}

qac_status qac_kl_gpt_fwd(const qac_kl_ctx *t, qac_kl_gpt_acts *s, qac_kl_work *k, const qac_qgen_params *w,
                          int window, const int *lens, uint64_t key, uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const int B = s->B, T = s->T, N = B * T, C = c->hidden_size, I = s->I, NH = c->num_heads;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I, nP = (size_t)B * NH * T * T;
    const qac_precision p = t->prec;
    const int f32 = p == QAC_PREC_FP32;
    const float eps = c->layer_norm_eps;
    const qac_kt_drop dh = qac_kl_drop(t->p_hidden, key, seq_base), da = qac_kl_drop(t->p_attn, key, seq_base);
    cudaStream_t st = t->stream;
    qac_status e;
    for (int l = 0; l < s->L; l++) {
        const size_t lc = (size_t)l * C;
        const float *x = QAC_KL_AT(s->hidden, l, NC);
        float *res1 = QAC_KL_AT(s->res1, l, NC);
        void *ln1_act = QAC_KL_ACT(t, s->ln1_act, l, NC), *ln2_act = QAC_KL_ACT(t, s->ln2_act, l, NC);
        void *atty = QAC_KL_ACT(t, s->atty, l, NC);
        void *fc_pre = QAC_KL_ACT(t, s->fc_pre, l, NI), *fc_act = QAC_KL_ACT(t, s->fc_act, l, NI);
        // res1 = x + dropout(Attn(LN1(x)) Wo^T + bo)
        QAC_CU(qac_kt_layernorm_fwd(QAC_KL_AT(s->ln1, l, NC), f32 ? NULL : ln1_act, QAC_KL_AT(s->ln1_mean, l, N),
                                    QAC_KL_AT(s->ln1_rstd, l, N), x, w->ln1_w + lc, w->ln1_b + lc, N, C, eps, p, st));
        if (t->fused) {
            void *qkv = QAC_KL_ACT(t, s->qkv, l, NC * 3);
            if ((e = qac_kt_linear_fwd(t->blas, qkv, ln1_act, qac_kl_act_w(t, w->qkv_w + lc * 3 * C), N, C, 3 * C, p)))
                return e;
            const qac_fa_rows rows = {NULL, lens, B, T, N};
            QAC_CU(qac_fa_forward(atty, QAC_KL_AT(s->lse, l, (size_t)NH * N), qkv, w->qkv_b + lc * 3, rows, C, NH, 1,
                                  window, da, l, p, &t->tiles, st));
        } else {
            if ((e = qac_kt_linear_fwd(t->blas, k->big, ln1_act, qac_kl_act_w(t, w->qkv_w + lc * 3 * C), N, C, 3 * C,
                                       p)))
                return e;
            if ((e = qac_kt_attention_fwd(t->blas, atty, QAC_KL_ACT(t, s->q, l, NC), QAC_KL_ACT(t, s->k, l, NC),
                                          QAC_KL_ACT(t, s->v, l, NC), QAC_KL_ACT(t, s->P, l, nP), k->S, k->Pd, k->O,
                                          k->big, w->qkv_b + lc * 3, lens, da, l, B, T, C, NH, 1, window, p, st)))
                return e;
        }
        if ((e = qac_kt_linear_fwd(t->blas, k->proj, atty, qac_kl_act_w(t, w->attn_proj_w + lc * C), N, C, C, p)))
            return e;
        // and LN2(res1), the MLP's input, in the same pass
        QAC_CU(qac_kt_residual_ln_fwd(res1, QAC_KL_AT(s->ln2, l, NC), f32 ? NULL : ln2_act,
                                      QAC_KL_AT(s->ln2_mean, l, N), QAC_KL_AT(s->ln2_rstd, l, N), k->proj,
                                      w->attn_proj_b + lc, x, w->ln2_w + lc, w->ln2_b + lc, dh, l, QAC_DROP_ATT_OUT, B,
                                      T, C, eps, p, st));
        // hidden[l+1] = res1 + dropout(GELU(LN2(res1) Wfc^T + bfc) Wp^T + bp)
        if ((e = qac_kt_linear_fwd(t->blas, fc_pre, ln2_act, qac_kl_act_w(t, w->fc_w + (size_t)l * I * C), N, C, I,
                                   p)))
            return e;
        QAC_CU(qac_kt_bias_gelu(fc_act, fc_pre, w->fc_b + (size_t)l * I, N, I, p, st));
        if ((e = qac_kt_linear_fwd(t->blas, k->proj, fc_act, qac_kl_act_w(t, w->fc_proj_w + lc * I), N, I, C, p)))
            return e;
        QAC_CU(qac_kt_bias_dropout_residual(QAC_KL_AT(s->hidden, l + 1, NC), k->proj, w->fc_proj_b + lc, res1, dh, l,
                                            QAC_DROP_FFN_OUT, B, T, C, p, st));
    }
    QAC_CU(qac_kt_layernorm_fwd(s->out, NULL, s->lnf_mean, s->lnf_rstd, QAC_KL_AT(s->hidden, s->L, NC), w->lnf_w,
                                w->lnf_b, N, C, eps, p, st));
    return QAC_OK;
}

qac_status qac_kl_gpt_bwd(const qac_kl_ctx *t, qac_kl_gpt_acts *s, qac_kl_work *k, const qac_qgen_params *w,
                          const qac_qgen_params *g, int window, const int *lens, const float *dout, uint64_t key,
                          uint64_t seq_base) {
    const qac_bert_config *c = &t->cfg;
    const int B = s->B, T = s->T, N = B * T, C = c->hidden_size, I = s->I;
    const size_t NC = (size_t)N * C, NI = (size_t)N * I;
    const qac_precision p = t->prec;
    const qac_kt_drop dh = qac_kl_drop(t->p_hidden, key, seq_base), da = qac_kl_drop(t->p_attn, key, seq_base);
    cudaStream_t st = t->stream;
    qac_status e;
    QAC_CU(qac_kt_layernorm_bwd(k->dy, g->lnf_w, g->lnf_b, dout, QAC_KL_AT(s->hidden, s->L, NC), s->lnf_mean,
                                s->lnf_rstd, w->lnf_w, k->partial, N, C, st));
    for (int l = s->L - 1; l >= 0; l--) {
        const size_t lc = (size_t)l * C, li = (size_t)l * I;
        // k->dy = dL/d hidden[l+1]: through the MLP's output dropout, c_proj, GELU, c_fc, LN2
        QAC_CU(qac_kt_dropout(k->proj, k->dy, dh, l, QAC_DROP_FFN_OUT, B, T, C, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->big, p, 0.0f, g->fc_proj_w + lc * I, g->fc_proj_b + lc, k->proj,
                                   QAC_KL_ACT(t, s->fc_act, l, NI), qac_kl_act_w(t, w->fc_proj_w + lc * I), k->partial,
                                   N, I, C, p, st)))
            return e;
        QAC_CU(qac_kt_bias_gelu_bwd(k->big, g->fc_b + li, k->big, QAC_KL_ACT(t, s->fc_pre, l, NI), w->fc_b + li,
                                    k->partial, N, I, p, st));
        if ((e = qac_kt_linear_bwd(t->blas, k->dln1, QAC_PREC_FP32, 0.0f, g->fc_w + li * C, NULL, k->big,
                                   QAC_KL_ACT(t, s->ln2_act, l, NC), qac_kl_act_w(t, w->fc_w + li * C), k->partial, N,
                                   C, I, p, st)))
            return e;
        // LN2, the residual path (dres = dL/d res1 = LN2'(dln1) + dy), then
        // res1 = x + dropout(atty Wo^T + bo): one pass
        QAC_CU(qac_kt_residual_ln_bwd(k->dres, k->proj, g->ln2_w + lc, g->ln2_b + lc, g->attn_proj_b + lc, k->dln1,
                                      k->dy, QAC_KL_AT(s->res1, l, NC), QAC_KL_AT(s->ln2_mean, l, N),
                                      QAC_KL_AT(s->ln2_rstd, l, N), w->ln2_w + lc, k->partial, dh, l,
                                      QAC_DROP_ATT_OUT, B, T, C, p, st));
        // atty = Attn(LN1(x))
        if ((e = qac_kt_linear_bwd(t->blas, k->datty, p, 0.0f, g->attn_proj_w + lc * C, NULL, k->proj,
                                   QAC_KL_ACT(t, s->atty, l, NC), qac_kl_act_w(t, w->attn_proj_w + lc * C), k->partial,
                                   N, C, C, p, st)))
            return e;
        if ((e = attention_bwd(t, k, s->qkv, s->lse, s->q, s->k, s->v, s->P, s->atty, l, w->qkv_b + lc * 3, lens, da,
                               l, B, T, 1, window)))
            return e;
        if ((e = qac_kt_linear_bwd(t->blas, k->dln1, QAC_PREC_FP32, 0.0f, g->qkv_w + lc * 3 * C, g->qkv_b + lc * 3,
                                   k->big, QAC_KL_ACT(t, s->ln1_act, l, NC), qac_kl_act_w(t, w->qkv_w + lc * 3 * C),
                                   k->partial, N, C, 3 * C, p, st)))
            return e;
        QAC_CU(qac_kt_layernorm_bwd(k->dy, g->ln1_w + lc, g->ln1_b + lc, k->dln1, QAC_KL_AT(s->hidden, l, NC),
                                    QAC_KL_AT(s->ln1_mean, l, N), QAC_KL_AT(s->ln1_rstd, l, N), w->ln1_w + lc,
                                    k->partial, N, C, st));
        QAC_CU(qac_kt_add(k->dy, k->dres, NC, st)); // k->dy = dL/d hidden[l]
    }
    return QAC_OK;
}

static constexpr size_t BLAS_WORKSPACE = 32u << 20;

qac_status qac_kl_dev_init(qac_kl_dev *t, int n_loss) {
    QAC_CU(cudaGetDevice(&t->device));
    cudaDeviceProp prop;
    QAC_CU(cudaGetDeviceProperties(&prop, t->device));
    if (prop.major < 8)
        return qac_set_error(QAC_ERR_UNSUPPORTED, "GPU %s has compute capability %d.%d; training needs 8.0 or newer",
                             prop.name, prop.major, prop.minor);
    QAC_CU(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
    QAC_CUBLAS(cublasCreate(&t->blas));
    QAC_CUBLAS(cublasSetStream(t->blas, t->stream));
    QAC_CU(cudaMalloc(&t->blas_ws, BLAS_WORKSPACE));
    QAC_CUBLAS(cublasSetWorkspace(t->blas, t->blas_ws, BLAS_WORKSPACE));
    // fp32: no TF32. bf16: split-K partial sums stay fp32 (cuBLAS may
    // otherwise reduce them in the bf16 output type): fp32 accumulation
    // throughout, as the mixed-precision recipe has it.
    QAC_CUBLAS(cublasSetMathMode(t->blas, t->prec == QAC_PREC_FP32 ? CUBLAS_PEDANTIC_MATH
                                                                   : CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    const size_t n = t->n_params, bytes = n * sizeof(float);
    QAC_CU(cudaMalloc((void **)&t->params, bytes));
    QAC_CU(cudaMalloc((void **)&t->grads, bytes));
    QAC_CU(cudaMalloc((void **)&t->adam_m, bytes));
    QAC_CU(cudaMalloc((void **)&t->adam_v, bytes));
    if (t->prec != QAC_PREC_FP32) QAC_CU(cudaMalloc((void **)&t->params_act, n * sizeof(__nv_bfloat16)));
    QAC_CU(cudaMalloc((void **)&t->norm_partial, QAC_KT_NORM_BLOCKS * sizeof(double)));
    QAC_CU(cudaMalloc((void **)&t->d_norm, sizeof(double)));
    QAC_CU(cudaMalloc((void **)&t->d_loss, (size_t)n_loss * sizeof(double)));
    QAC_CU(cudaMalloc((void **)&t->d_scale, sizeof(float)));
    QAC_CU(cudaMallocHost((void **)&t->h_scalars, ((size_t)n_loss + 1) * sizeof(double)));
    t->n_loss = n_loss;
    QAC_CU(cudaMemsetAsync(t->grads, 0, bytes, t->stream));
    QAC_CU(cudaMemsetAsync(t->adam_m, 0, bytes, t->stream));
    QAC_CU(cudaMemsetAsync(t->adam_v, 0, bytes, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    return QAC_OK;
}

void qac_kl_dev_release(qac_kl_dev *t) {
    cudaFree(t->params), cudaFree(t->grads), cudaFree(t->adam_m), cudaFree(t->adam_v), cudaFree(t->params_act);
    cudaFree(t->norm_partial), cudaFree(t->d_norm), cudaFree(t->d_loss), cudaFree(t->d_scale);
    cudaFreeHost(t->h_scalars);
    if (t->blas) cublasDestroy(t->blas);
    cudaFree(t->blas_ws);
    if (t->stream) cudaStreamDestroy(t->stream);
    cudaGetLastError();
}

qac_status qac_kl_dev_upload(qac_kl_dev *t, const float *const parts[], const size_t ends[], int n_parts,
                             const float *m, const float *v) {
    const size_t bytes = t->n_params * sizeof(float);
    QAC_CU(cudaStreamSynchronize(t->stream));
    int any = 0;
    for (int i = 0; i < n_parts; i++) {
        const size_t lo = i ? ends[i - 1] : 0;
        if (!parts[i]) continue;
        QAC_CU(cudaMemcpy(t->params + lo, parts[i], (ends[i] - lo) * sizeof(float), cudaMemcpyHostToDevice));
        any = 1;
    }
    if (m) QAC_CU(cudaMemcpy(t->adam_m, m, bytes, cudaMemcpyHostToDevice));
    if (v) QAC_CU(cudaMemcpy(t->adam_v, v, bytes, cudaMemcpyHostToDevice));
    if (any && t->params_act) QAC_CU(qac_k_from_f32(t->params_act, t->params, t->n_params, t->prec, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    return QAC_OK;
}

qac_status qac_kl_dev_download(qac_kl_dev *t, float *const parts[], const size_t ends[], int n_parts, float *grads,
                               float *m, float *v) {
    const size_t bytes = t->n_params * sizeof(float);
    QAC_CU(cudaStreamSynchronize(t->stream));
    for (int i = 0; i < n_parts; i++) {
        const size_t lo = i ? ends[i - 1] : 0;
        if (parts[i])
            QAC_CU(cudaMemcpy(parts[i], t->params + lo, (ends[i] - lo) * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (grads) QAC_CU(cudaMemcpy(grads, t->grads, bytes, cudaMemcpyDeviceToHost));
    if (m) QAC_CU(cudaMemcpy(m, t->adam_m, bytes, cudaMemcpyDeviceToHost));
    if (v) QAC_CU(cudaMemcpy(v, t->adam_v, bytes, cudaMemcpyDeviceToHost));
    return QAC_OK;
}

qac_status qac_kl_dev_losses(qac_kl_dev *t, double *out) {
    QAC_CU(cudaMemcpyAsync(t->h_scalars, t->d_loss, (size_t)t->n_loss * sizeof(double), cudaMemcpyDeviceToHost,
                           t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    for (int i = 0; i < t->n_loss; i++) out[i] = t->h_scalars[i];
    return QAC_OK;
}

qac_status qac_kl_dev_update(qac_kl_dev *t, const qac_kt_tensors *tensors, long step, double lr, double beta1,
                             double beta2, double eps, double wd, double max_norm, double *grad_norm) {
    QAC_CU(qac_kt_clip_adamw(t->params, t->params_act, t->grads, t->adam_m, t->adam_v, t->norm_partial, t->d_norm,
                             t->d_scale, tensors, step, lr, beta1, beta2, eps, wd, max_norm, t->stream));
    QAC_CU(cudaMemcpyAsync(&t->h_scalars[t->n_loss], t->d_norm, sizeof(double), cudaMemcpyDeviceToHost, t->stream));
    QAC_CU(cudaStreamSynchronize(t->stream));
    *grad_norm = t->h_scalars[t->n_loss];
    return QAC_OK;
}
