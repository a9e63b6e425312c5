/* The pre-training heads' networks (head_nets.h): the MLM head's
 * parameters, and the query-generation decoder's GPT-2 blocks composed from
 * the layer math of model/layers.c, forward and backward side by side. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gemm.h"
#include "head_nets.h"
#include "qac_rng.h"
#include "qac_util.h"

/* ---- the MLM head ---- */

size_t qac_mlm_param_count(int C, int V) { return (size_t)C * C + 3 * (size_t)C + (size_t)V; }

void qac_mlm_bind(qac_mlm_head *h, float *base, int C, int V) {
    (void)V;
    h->dense_w = base;
    h->dense_b = h->dense_w + (size_t)C * C;
    h->ln_w = h->dense_b + C;
    h->ln_b = h->ln_w + C;
    h->bias = h->ln_b + C;
}

void qac_mlm_init(qac_mlm_head *h, int C, int V, uint64_t seed) {
    uint64_t key = qac_rng_key(seed, 0x6D6C6D, 0, 0);
    for (size_t i = 0; i < (size_t)C * C; i += 2) { /* Box-Muller pairs */
        double u1 = (qac_rng_u64(key, i) >> 11) * 0x1p-53, u2 = (qac_rng_u64(key, i + 1) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1 > 0 ? u1 : 0x1p-53)) * 0.02;
        h->dense_w[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < (size_t)C * C) h->dense_w[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
    for (int i = 0; i < C; i++) h->dense_b[i] = 0, h->ln_w[i] = 1, h->ln_b[i] = 0;
    memset(h->bias, 0, (size_t)V * sizeof(float));
}

/* ---- the query-generation decoder ---- */

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
        pw[k] = (qac_packed_w){.p = base, .IC = ic[k], .OC = oc[k]};
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
        /* fp32 weights: the products need no scratch */
        if ((st = qac_gemm(qkv, ln1, &pw[0], p->qkv_b + lc * 3, NULL, n, NULL, pool)) ||
            (st = qac_attention_causal_forward(atty, a->att + (size_t)l * B * NH * T * T, qkv, lens, q->window, drop,
                                               l, B, T, C, NH, pool)) ||
            (st = qac_gemm(res1, atty, &pw[1], p->attn_proj_b + lc, drop_out ? NULL : h, n, NULL, pool)))
            return st;
        if (drop_out) qac_dropout_forward(res1, res1, h, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
        qac_layernorm_forward(ln2, a->ln2_mean + l * N, a->ln2_rstd + l * N, res1, p->ln2_w + lc, p->ln2_b + lc, n, C,
                              eps, pool);
        float *y = a->hidden + (l + 1) * NC;
        if ((st = qac_matmul_gelu_packed(act, pre, ln2, &pw[2], p->fc_b + (size_t)l * I, n, NULL, pool)) ||
            (st = qac_gemm(y, act, &pw[3], p->fc_proj_b + lc, drop_out ? NULL : res1, n, NULL, pool)))
            return st;
        if (drop_out) qac_dropout_forward(y, y, res1, drop, l, QAC_DROP_FFN_OUT, B, T, C, pool);
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
        if ((st = qac_matmul_backward(a->dbig, g->fc_proj_w + lc * I, g->fc_proj_b + lc, dfo, a->fc_act + l * N * I,
                                      p->fc_proj_w + lc * I, NULL, n, I, C, a->scratch, pool)))
            return st;
        qac_gelu_backward(a->dbig, a->dbig, a->fc_pre + l * N * I, N * I, pool);
        if ((st = qac_matmul_backward(a->dtmp, g->fc_w + (size_t)l * I * C, g->fc_b + (size_t)l * I, a->dbig,
                                      a->ln2 + l * NC, p->fc_w + (size_t)l * I * C, NULL, n, C, I, a->scratch, pool)))
            return st;
        qac_layernorm_backward(a->dr, g->ln2_w + lc, g->ln2_b + lc, a->dtmp, a->res1 + l * NC, a->ln2_mean + l * N,
                               a->ln2_rstd + l * N, p->ln2_w + lc, n, C, pool);
        add_into(a->dr, a->dh, NC); /* the residual path */
        /* res1 = h + dropout(Attn(LN1(h)) Wo + bo) */
        const float *dao = a->dr;
        if (drop_out) {
            qac_dropout_forward(a->dtmp, a->dr, NULL, drop, l, QAC_DROP_ATT_OUT, B, T, C, pool);
            dao = a->dtmp;
        }
        if ((st = qac_matmul_backward(a->datty, g->attn_proj_w + lc * C, g->attn_proj_b + lc, dao, a->atty + l * NC,
                                      p->attn_proj_w + lc * C, NULL, n, C, C, a->scratch, pool)) ||
            (st = qac_attention_causal_backward(a->dbig, a->datty, a->qkv + l * 3 * NC,
                                                a->att + (size_t)l * B * NH * T * T, lens, q->window, drop, l, B, T, C,
                                                NH, pool)) ||
            (st = qac_matmul_backward(a->dtmp, g->qkv_w + lc * 3 * C, g->qkv_b + lc * 3, a->dbig, a->ln1 + l * NC,
                                      p->qkv_w + lc * 3 * C, NULL, n, C, 3 * C, a->scratch, pool)))
            return st;
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
