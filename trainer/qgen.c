/* The query-generation decoder (see qac_heads.h for the recipe and its
 * readings): GPT-2 blocks composed from the layer math of model/layers.c,
 * forward and backward side by side, and the whole objective (encoder MLM
 * plus next-token loss) as one call for the pre-training engine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gemm.h"
#include "qac_heads.h"
#include "qac_rng.h"
#include "qac_util.h"

void qac_qgen_config_default(qac_qgen_config *q, const qac_bert_config *enc) {
    q->layers = 1;
    q->hidden = enc->hidden_size;
    q->heads = enc->num_heads;
    q->inner = 4 * enc->hidden_size;
    q->window = 3;
    q->ln_eps = enc->layer_norm_eps;
    q->pooling = QAC_POOL_CLS;
}

static const char *tensor_names[QAC_QGEN_NUM_TENSORS] = {
    "ln1_w", "ln1_b", "qkv_w", "qkv_b", "attn_proj_w", "attn_proj_b", "ln2_w",
    "ln2_b", "fc_w",  "fc_b",  "fc_proj_w", "fc_proj_b", "lnf_w", "lnf_b"};

const char *qac_qgen_tensor_name(int i) { return i >= 0 && i < QAC_QGEN_NUM_TENSORS ? tensor_names[i] : NULL; }

size_t qac_qgen_tensor_size(const qac_qgen_config *q, int i) {
    size_t L = (size_t)q->layers, C = (size_t)q->hidden, I = (size_t)q->inner;
    switch (i) {
    case 2: return L * 3 * C * C;
    case 3: return L * 3 * C;
    case 4: return L * C * C;
    case 8: return L * I * C;
    case 9: return L * I;
    case 10: return L * C * I;
    case 12: case 13: return C;
    default: return i >= 0 && i < QAC_QGEN_NUM_TENSORS ? L * C : 0;
    }
}

size_t qac_qgen_param_count(const qac_qgen_config *q) {
    size_t n = 0;
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS; i++) n += qac_qgen_tensor_size(q, i);
    return n;
}

/* qac_qgen_params is QAC_QGEN_NUM_TENSORS float pointers in block order */
static float **views(qac_qgen_params *p) { return (float **)p; }

void qac_qgen_bind(qac_qgen_params *p, const qac_qgen_config *q, float *base) {
    float **v = views(p);
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS; i++) {
        v[i] = base;
        base += qac_qgen_tensor_size(q, i);
    }
}

static void fill_normal(float *x, size_t n, double std, uint64_t key) {
    for (size_t i = 0; i < n; i += 2) { /* Box-Muller pairs */
        double u1 = (qac_rng_u64(key, i) >> 11) * 0x1p-53, u2 = (qac_rng_u64(key, i + 1) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1 > 0 ? u1 : 0x1p-53)) * std;
        x[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

void qac_qgen_init(qac_qgen_params *p, const qac_qgen_config *q, uint64_t seed) {
    float **v = views(p);
    double proj_std = 0.02 / sqrt(2.0 * q->layers); /* the residual path adds 2 per block */
    for (int i = 0; i < QAC_QGEN_NUM_TENSORS; i++) {
        size_t n = qac_qgen_tensor_size(q, i);
        const char *nm = tensor_names[i];
        size_t len = strlen(nm);
        if (!strcmp(nm + len - 2, "_w") && nm[0] != 'l')
            fill_normal(v[i], n, strstr(nm, "proj") ? proj_std : 0.02, qac_rng_key(seed, 0x7167656E, (uint64_t)i, 0));
        else
            for (size_t j = 0; j < n; j++) v[i][j] = nm[0] == 'l' && nm[len - 1] == 'w' ? 1.0f : 0.0f;
    }
}

/* ---- activations ---- */

static size_t packed_per_layer(const qac_qgen_config *q) {
    int C = q->hidden, I = q->inner;
    return qac_gemm_packed_floats(3 * C, C) + qac_gemm_packed_floats(C, C) + qac_gemm_packed_floats(I, C) +
           qac_gemm_packed_floats(C, I);
}

qac_status qac_qgen_acts_alloc(qac_qgen_acts *a, const qac_qgen_config *q, int B, int T) {
    if (B < 1 || T < 1 || q->layers < 1 || q->hidden < 1 || q->heads < 1 || q->hidden % q->heads || q->inner < 1)
        return qac_set_error(QAC_ERR_INVALID, "qgen: bad shape B=%d T=%d (layers %d, hidden %d, heads %d)", B, T,
                             q->layers, q->hidden, q->heads);
    size_t N = (size_t)B * T, C = (size_t)q->hidden, I = (size_t)q->inner, L = (size_t)q->layers;
    size_t NH = (size_t)q->heads, big = I > 3 * C ? I : 3 * C;
    size_t s1 = qac_matmul_backward_scratch((int)N, (int)C, (int)(3 * C));
    size_t s2 = qac_matmul_backward_scratch((int)N, (int)C, (int)I);
    size_t s3 = qac_matmul_backward_scratch((int)N, (int)I, (int)C);
    size_t scr = s1 > s2 ? s1 : s2;
    scr = scr > s3 ? scr : s3;
    size_t sizes[] = {(L + 1) * N * C, L * N * C, L * N, L * N, L * N * 3 * C, L * B * NH * T * T, L * N * C,
                      L * N * C, L * N * C, L * N, L * N, L * N * I, L * N * I, N * C, N, N,
                      L * packed_per_layer(q), N * C, N * C, N * C, N * C, N * big, scr};
    float **dst[] = {&a->hidden, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->att, &a->atty, &a->res1, &a->ln2,
                     &a->ln2_mean, &a->ln2_rstd, &a->fc_pre, &a->fc_act, &a->out, &a->lnf_mean, &a->lnf_rstd,
                     &a->packed, &a->dh, &a->dr, &a->dtmp, &a->datty, &a->dbig, &a->scratch};
    size_t total = 0, n = sizeof sizes / sizeof *sizes;
    for (size_t i = 0; i < n; i++) total += sizes[i];
    if (total > a->n_floats) {
        float *m = qac_malloc_lines(total * sizeof *m);
        if (!m)
            return qac_set_error(QAC_ERR_NOMEM, "qgen: cannot allocate %.1f MiB for B=%d T=%d",
                                 (double)total * 4 / (1 << 20), B, T);
        free(a->mem);
        a->mem = m;
        a->n_floats = total;
    }
    float *m = a->mem;
    for (size_t i = 0; i < n; i++) {
        *dst[i] = m;
        m += sizes[i];
    }
    a->B = B, a->T = T;
    return QAC_OK;
}

void qac_qgen_acts_free(qac_qgen_acts *a) {
    if (!a) return;
    free(a->mem);
    memset(a, 0, sizeof *a);
}

/* ---- forward and backward ---- */

/* layer l's four packed matrices: c_attn, attn c_proj, c_fc, mlp c_proj */
static void layer_packed(qac_packed_w pw[4], const qac_qgen_acts *a, const qac_qgen_config *q, int l) {
    int C = q->hidden, I = q->inner;
    float *base = a->packed + (size_t)l * packed_per_layer(q);
    int oc[4] = {3 * C, C, I, C}, ic[4] = {C, C, C, I};
    for (int k = 0; k < 4; k++) {
        pw[k] = (qac_packed_w){base, ic[k], oc[k], NULL};
        base += qac_gemm_packed_floats(oc[k], ic[k]);
    }
}

static qac_status check(const qac_qgen_acts *a, const int *lens, int B, int T) {
    if (!a->mem || a->B != B || a->T != T)
        return qac_set_error(QAC_ERR_INVALID, "qgen: activations not allocated for B=%d T=%d", B, T);
    for (int b = 0; b < B; b++)
        if (lens[b] < 1 || lens[b] > T)
            return qac_set_error(QAC_ERR_INVALID, "qgen: sequence %d has length %d (T=%d)", b, lens[b], T);
    return QAC_OK;
}

qac_status qac_qgen_forward(qac_qgen_acts *a, const qac_qgen_config *q, const qac_qgen_params *p, const float *x,
                            const int *lens, const qac_dropout *drop, int B, int T, qac_pool *pool) {
    qac_status st = check(a, lens, B, T);
    if (st) return st;
    int C = q->hidden, I = q->inner, NH = q->heads, n = B * T;
    size_t N = (size_t)n, NC = N * C;
    float eps = q->ln_eps;
    int drop_out = qac_dropout_active(drop, QAC_DROP_ATT_OUT);
    if (qac_dropout_active(drop, QAC_DROP_EMB)) /* GPT-2's dropout on its input */
        qac_dropout_forward(a->hidden, x, NULL, drop, 0, QAC_DROP_EMB, B, T, C, pool);
    else
        memcpy(a->hidden, x, NC * sizeof *x);
    for (int l = 0; l < q->layers; l++) {
        size_t lc = (size_t)l * C;
        qac_packed_w pw[4];
        layer_packed(pw, a, q, l);
        qac_gemm_pack_parallel(pw[0].p, p->qkv_w + lc * 3 * C, 3 * C, C, C, 0, pool);
        qac_gemm_pack_parallel(pw[1].p, p->attn_proj_w + lc * C, C, C, C, 0, pool);
        qac_gemm_pack_parallel(pw[2].p, p->fc_w + (size_t)l * I * C, I, C, C, 0, pool);
        qac_gemm_pack_parallel(pw[3].p, p->fc_proj_w + lc * I, C, I, I, 0, pool);
        const float *h = a->hidden + l * NC;
        float *ln1 = a->ln1 + l * NC, *qkv = a->qkv + l * 3 * NC, *atty = a->atty + l * NC, *res1 = a->res1 + l * NC;
        float *ln2 = a->ln2 + l * NC, *pre = a->fc_pre + l * N * I, *act = a->fc_act + l * N * I;
        /* h' = r + MLP(LN2(r)), r = h + Attn(LN1(h)) */
        qac_layernorm_forward(ln1, a->ln1_mean + l * N, a->ln1_rstd + l * N, h, p->ln1_w + lc, p->ln1_b + lc, n, C, eps,
                              pool);
        qac_gemm(qkv, ln1, &pw[0], p->qkv_b + lc * 3, NULL, n, pool);
        qac_attention_causal_forward(atty, a->att + (size_t)l * B * NH * T * T, qkv, lens, q->window, drop, l, B, T, C,
                                     NH, pool);
        if (drop_out) {
            qac_gemm(res1, atty, &pw[1], p->attn_proj_b + lc, NULL, n, pool);
            qac_dropout_forward(res1, res1, h, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
        } else {
            qac_gemm(res1, atty, &pw[1], p->attn_proj_b + lc, h, n, pool);
        }
        qac_layernorm_forward(ln2, a->ln2_mean + l * N, a->ln2_rstd + l * N, res1, p->ln2_w + lc, p->ln2_b + lc, n, C,
                              eps, pool);
        qac_matmul_gelu_packed(act, pre, ln2, &pw[2], p->fc_b + (size_t)l * I, n, pool);
        float *y = a->hidden + (l + 1) * NC;
        if (drop_out) {
            qac_gemm(y, act, &pw[3], p->fc_proj_b + lc, NULL, n, pool);
            qac_dropout_forward(y, y, res1, drop, l, QAC_DROP_FFN_OUT, B, T, C, pool);
        } else {
            qac_gemm(y, act, &pw[3], p->fc_proj_b + lc, res1, n, pool);
        }
    }
    qac_layernorm_forward(a->out, a->lnf_mean, a->lnf_rstd, a->hidden + (size_t)q->layers * NC, p->lnf_w, p->lnf_b, n,
                          C, eps, pool);
    return QAC_OK;
}

static void add_into(float *d, const float *s, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] += s[i];
}

qac_status qac_qgen_backward(float *dx, qac_qgen_params *g, qac_qgen_acts *a, const float *dout,
                             const qac_qgen_config *q, const qac_qgen_params *p, const int *lens,
                             const qac_dropout *drop, int B, int T, qac_pool *pool) {
    qac_status st = check(a, lens, B, T);
    if (st) return st;
    int C = q->hidden, I = q->inner, NH = q->heads, n = B * T;
    size_t N = (size_t)n, NC = N * C;
    int drop_out = qac_dropout_active(drop, QAC_DROP_ATT_OUT);
    qac_layernorm_backward(a->dh, g->lnf_w, g->lnf_b, dout, a->hidden + (size_t)q->layers * NC, a->lnf_mean,
                           a->lnf_rstd, p->lnf_w, n, C, pool);
    for (int l = q->layers - 1; l >= 0; l--) {
        size_t lc = (size_t)l * C;
        const float *h = a->hidden + l * NC;
        /* out = res1 + dropout(GELU(LN2(res1) Wfc + bfc) Wp + bp); a->dh holds dL/dout */
        const float *dfo = a->dh;
        if (drop_out) {
            qac_dropout_forward(a->dr, a->dh, NULL, drop, l, QAC_DROP_FFN_OUT, B, T, C, pool);
            dfo = a->dr;
        }
        qac_matmul_backward(a->dbig, g->fc_proj_w + lc * I, g->fc_proj_b + lc, dfo, a->fc_act + l * N * I,
                            p->fc_proj_w + lc * I, NULL, n, I, C, a->scratch, pool);
        qac_gelu_backward(a->dbig, a->dbig, a->fc_pre + l * N * I, N * I, pool);
        qac_matmul_backward(a->dtmp, g->fc_w + (size_t)l * I * C, g->fc_b + (size_t)l * I, a->dbig, a->ln2 + l * NC,
                            p->fc_w + (size_t)l * I * C, NULL, n, C, I, a->scratch, pool);
        qac_layernorm_backward(a->dr, g->ln2_w + lc, g->ln2_b + lc, a->dtmp, a->res1 + l * NC, a->ln2_mean + l * N,
                               a->ln2_rstd + l * N, p->ln2_w + lc, n, C, pool);
        add_into(a->dr, a->dh, NC); /* the residual path */
        /* res1 = h + dropout(Attn(LN1(h)) Wo + bo) */
        const float *dao = a->dr;
        if (drop_out) {
            qac_dropout_forward(a->dtmp, a->dr, NULL, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
            dao = a->dtmp;
        }
        qac_matmul_backward(a->datty, g->attn_proj_w + lc * C, g->attn_proj_b + lc, dao, a->atty + l * NC,
                            p->attn_proj_w + lc * C, NULL, n, C, C, a->scratch, pool);
        qac_attention_causal_backward(a->dbig, a->datty, a->qkv + l * 3 * NC, a->att + (size_t)l * B * NH * T * T,
                                      lens, q->window, drop, l, B, T, C, NH, pool);
        qac_matmul_backward(a->dtmp, g->qkv_w + lc * 3 * C, g->qkv_b + lc * 3, a->dbig, a->ln1 + l * NC,
                            p->qkv_w + lc * 3 * C, NULL, n, C, 3 * C, a->scratch, pool);
        qac_layernorm_backward(a->dh, g->ln1_w + lc, g->ln1_b + lc, a->dtmp, h, a->ln1_mean + l * N,
                               a->ln1_rstd + l * N, p->ln1_w + lc, n, C, pool);
        add_into(a->dh, a->dr, NC);
    }
    if (qac_dropout_active(drop, QAC_DROP_EMB))
        qac_dropout_forward(dx, a->dh, NULL, drop, 0, QAC_DROP_EMB, B, T, C, pool);
    else
        memcpy(dx, a->dh, NC * sizeof *dx);
    return QAC_OK;
}

void qac_qgen_targets(int32_t *labels, const int32_t *ids, const int *lens, int B, int T) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) labels[(size_t)b * T + t] = t + 1 < lens[b] ? ids[(size_t)b * T + t + 1] : -100;
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
