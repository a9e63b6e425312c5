#include "bert_cpu.h"

#include "gemm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- vector math ----
 * expf and erff from libm are scalar calls; GELU and softmax evaluate them
 * for every FFN and attention element, so both use branch-free polynomial
 * forms the compiler vectorises (fixed-size blocks), with an AVX2/FMA clone
 * picked at load time where the CPU has it. Accuracy: exp within 2 ulp
 * (Cephes coefficients); erf within 1.5e-7 absolute (Abramowitz & Stegun
 * 7.1.26, the form PyTorch's vectorised CPU erf uses). */
/* Dispatch on features, not CPU model: "arch=haswell" is picked only on Intel
 * Haswell-family parts (__builtin_cpu_is), so AMD fell back to SSE2. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    __GNUC__ >= 12
#define QAC_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define QAC_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define QAC_MULTIVERSION
#endif

#define VBLOCK 16

/* Range clamps are selects only when comparisons may be assumed not to trap;
 * nothing here relies on floating-point exceptions. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

static inline __attribute__((always_inline)) float exp_poly(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick; r = x - n ln 2 in two parts */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return y * scale;
}

static inline __attribute__((always_inline)) float gelu_one(float x) {
    float z = x * 0.70710678118654752f;
    float az = fabsf(z);
    float t = 1.0f / (1.0f + 0.3275911f * az);
    float poly = t * (0.254829592f +
                      t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float erf_abs = 1.0f - poly * exp_poly(-az * az);
    float erf_z = copysignf(erf_abs, z);
    return 0.5f * x * (1.0f + erf_z);
}

QAC_MULTIVERSION
static void gelu_range(float *out, const float *inp, size_t n) {
    size_t i = 0;
    for (; i + VBLOCK <= n; i += VBLOCK) {
        float v[VBLOCK]; /* out may alias inp: a local block keeps the loop vectorisable */
        memcpy(v, inp + i, sizeof v);
        for (int j = 0; j < VBLOCK; j++) v[j] = gelu_one(v[j]);
        memcpy(out + i, v, sizeof v);
    }
    for (; i < n; i++) out[i] = gelu_one(inp[i]);
}

/* One row: v = pre + bias (kept in pre when keep), out = GELU(v). Adding the
 * bias here saves a separate bias pre-fill pass over the [N,I] output. */
QAC_MULTIVERSION
static void bias_gelu_row(float *out, float *pre, const float *bias, int n, int keep) {
    int i = 0;
    for (; i + VBLOCK <= n; i += VBLOCK) {
        float v[VBLOCK];
        for (int j = 0; j < VBLOCK; j++) v[j] = pre[i + j] + bias[i + j];
        if (keep) memcpy(pre + i, v, sizeof v);
        for (int j = 0; j < VBLOCK; j++) v[j] = gelu_one(v[j]);
        memcpy(out + i, v, sizeof v);
    }
    for (; i < n; i++) {
        float v = pre[i] + bias[i];
        if (keep) pre[i] = v;
        out[i] = gelu_one(v);
    }
}

/* x[i] = exp(x[i] - max); returns the sum. */
QAC_MULTIVERSION
static float exp_shift_sum(float *x, int n, float max) {
    float acc[VBLOCK] = {0};
    int i = 0;
    for (; i + VBLOCK <= n; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) {
            float e = exp_poly(x[i + j] - max);
            x[i + j] = e;
            acc[j] += e;
        }
    float sum = 0;
    for (; i < n; i++) {
        x[i] = exp_poly(x[i] - max);
        sum += x[i];
    }
    for (int j = 0; j < VBLOCK; j++) sum += acc[j];
    return sum;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* ---- embeddings ---- */

typedef struct emb_ctx {
    float *out;
    const int32_t *ids, *type_ids;
    const float *word, *pos, *type;
    int T, C;
} emb_ctx;

static void emb_task(void *vctx, int64_t b, int64_t e, int tid) {
    const emb_ctx *c = vctx;
    int C = c->C;
    for (int64_t r = b; r < e; r++) {
        const float *w = c->word + (size_t)c->ids[r] * C;
        const float *p = c->pos + (size_t)(r % c->T) * C;
        const float *t = c->type + (size_t)(c->type_ids ? c->type_ids[r] : 0) * C;
        float *o = c->out + (size_t)r * C;
        for (int i = 0; i < C; i++) o[i] = w[i] + p[i] + t[i];
    }
}

void qac_embeddings_forward(float *out, const int32_t *ids, const int32_t *type_ids,
                            const float *word_emb, const float *pos_emb, const float *type_emb,
                            int B, int T, int C, qac_pool *pool) {
    emb_ctx c = {out, ids, type_ids, word_emb, pos_emb, type_emb, T, C};
    qac_pool_for(pool, (int64_t)B * T, 0, emb_task, &c);
}

/* ---- layernorm ---- */

typedef struct ln_ctx {
    float *out, *mean, *rstd;
    const float *inp, *w, *b;
    int C;
    float eps;
} ln_ctx;

/* Lane-wise partial sums let the reductions vectorise (strict FP order
 * otherwise keeps them scalar). */
QAC_MULTIVERSION
static void ln_row(float *o, float *mean, float *rstd, const float *x, const float *w, const float *bb,
                   int C, float eps) {
    float acc[VBLOCK] = {0};
    int i = 0;
    for (; i + VBLOCK <= C; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) acc[j] += x[i + j];
    float s = 0;
    for (; i < C; i++) s += x[i];
    for (int j = 0; j < VBLOCK; j++) s += acc[j];
    float m = s / C;
    for (int j = 0; j < VBLOCK; j++) acc[j] = 0;
    for (i = 0; i + VBLOCK <= C; i += VBLOCK)
        for (int j = 0; j < VBLOCK; j++) {
            float d = x[i + j] - m;
            acc[j] += d * d;
        }
    float v = 0;
    for (; i < C; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    for (int j = 0; j < VBLOCK; j++) v += acc[j];
    float rs = 1.0f / sqrtf(v / C + eps);
    for (i = 0; i < C; i++) o[i] = (x[i] - m) * rs * w[i] + bb[i];
    if (mean) *mean = m;
    if (rstd) *rstd = rs;
}

static void ln_task(void *vctx, int64_t b, int64_t e, int tid) {
    const ln_ctx *c = vctx;
    int C = c->C;
    for (int64_t r = b; r < e; r++)
        ln_row(c->out + (size_t)r * C, c->mean ? c->mean + r : NULL, c->rstd ? c->rstd + r : NULL,
               c->inp + (size_t)r * C, c->w, c->b, C, c->eps);
}

void qac_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, int N, int C, float eps, qac_pool *pool) {
    ln_ctx c = {out, mean, rstd, inp, w, b, C, eps};
    qac_pool_for(pool, N, 0, ln_task, &c);
}

/* ---- matmul ---- */

/* ---- matrix products (model/gemm.c: sequential FMA chains, batch-invariant) ---- */

typedef struct bgelu_ctx {
    float *out, *pre;
    const float *bias;
    int OC;
} bgelu_ctx;

static void bias_gelu_task(void *vctx, int64_t b, int64_t e, int tid) {
    const bgelu_ctx *c = vctx;
    float *dst = c->pre ? c->pre : c->out;
    for (int64_t r = b; r < e; r++) {
        size_t o = (size_t)r * c->OC;
        if (c->bias)
            bias_gelu_row(c->out + o, dst + o, c->bias, c->OC, c->pre != NULL);
        else
            gelu_range(c->out + o, dst + o, (size_t)c->OC);
    }
}

/* out = GELU(inp W^T + bias); pre keeps the pre-activation when not NULL */
static void matmul_gelu_packed(float *out, float *pre, const float *inp, const qac_packed_w *pw, const float *bias,
                               int N, qac_pool *pool) {
    qac_gemm(pre ? pre : out, inp, pw, NULL, NULL, N, pool);
    bgelu_ctx c = {out, pre, bias, pw->OC};
    qac_pool_for(pool, N, 0, bias_gelu_task, &c);
}

void qac_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                        const float *resid, int N, int IC, int OC, qac_pool *pool) {
    qac_packed_w pw;
    if (qac_gemm_pack(&pw, w, OC, IC)) abort(); /* out of memory: no status to return here */
    qac_gemm(out, inp, &pw, bias, resid, N, pool);
    qac_gemm_packed_free(&pw);
}

void qac_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w,
                             const float *bias, int N, int IC, int OC, qac_pool *pool) {
    qac_packed_w pw;
    if (qac_gemm_pack(&pw, w, OC, IC)) abort();
    matmul_gelu_packed(out, pre, inp, &pw, bias, N, pool);
    qac_gemm_packed_free(&pw);
}

typedef struct gelu_ctx {
    float *out;
    const float *inp;
} gelu_ctx;

static void gelu_task(void *vctx, int64_t b, int64_t e, int tid) {
    const gelu_ctx *c = vctx;
    gelu_range(c->out + b, c->inp + b, (size_t)(e - b));
}

void qac_gelu_forward(float *out, const float *inp, size_t n, qac_pool *pool) {
    gelu_ctx c = {out, inp};
    qac_pool_for(pool, (int64_t)n, 1 << 16, gelu_task, &c);
}

/* ---- attention ---- */

typedef struct att_ctx {
    float *out, *att, *scratch;
    const float *qkv;
    const int *lens;
    int T, C, NH;
} att_ctx;

static void att_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const att_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    /* packed K^T [T x hs] and V [hs x T] of one head (gemm.h layout) */
    size_t nk = qac_gemm_packed_floats(T, hs), nv = qac_gemm_packed_floats(hs, T);
    float *pk = malloc((nk + nv) * sizeof *pk), *pv = pk + nk;
    if (!pk) abort(); /* out of memory: no status to return here */
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH);
        int len = c->lens[b];
        const float *q = c->qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
        const float *k = q + C;
        const float *v = q + 2 * C;
        float *att = c->att ? c->att + (size_t)bh * T * T : c->scratch + (size_t)tid * T * T;
        /* scores for the real keys only: masked keys get exactly zero weight */
        qac_gemm_pack_into(pk, k, len, hs, 3 * C, 0);
        qac_gemm_strided(att, T, q, 3 * C, pk, hs, len, scale, T);
        for (int t = 0; t < T; t++) {
            float *row = att + (size_t)t * T;
            float mx = row[0];
            for (int j = 1; j < len; j++) mx = row[j] > mx ? row[j] : mx;
            float inv = 1.0f / exp_shift_sum(row, len, mx);
            for (int j = 0; j < len; j++) row[j] *= inv;
            if (c->att)
                for (int j = len; j < T; j++) row[j] = 0.0f;
        }
        qac_gemm_pack_into(pv, v, hs, len, 3 * C, 1);
        qac_gemm_strided(c->out + (size_t)b * T * C + (size_t)h * hs, C, att, T, pv, len, hs, 1.0f, T);
    }
    free(pk);
}

void qac_attention_forward(float *out, float *att, float *scratch, const float *qkv,
                           const int *lens, int B, int T, int C, int NH, qac_pool *pool) {
    att_ctx c = {out, att, scratch, qkv, lens, T, C, NH};
    qac_pool_for(pool, (int64_t)B * NH, 1, att_task, &c);
}

/* ---- pooling ---- */

void qac_pooling_forward(float *out, const float *hidden, const int *lens, int B, int T, int C,
                         qac_pooling pooling, int normalize) {
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * C;
        const float *h = hidden + (size_t)b * T * C;
        if (pooling == QAC_POOL_MEAN) {
            int len = lens[b];
            for (int i = 0; i < C; i++) o[i] = 0.0f;
            for (int t = 0; t < len; t++)
                for (int i = 0; i < C; i++) o[i] += h[(size_t)t * C + i];
            float inv = 1.0f / (float)(len > 0 ? len : 1);
            for (int i = 0; i < C; i++) o[i] *= inv;
        } else {
            memcpy(o, h, (size_t)C * sizeof *o);
        }
        if (normalize) {
            double ss = 0;
            for (int i = 0; i < C; i++) ss += (double)o[i] * o[i];
            float norm = (float)sqrt(ss);
            float inv = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
            for (int i = 0; i < C; i++) o[i] *= inv;
        }
    }
}

/* ---- activations ---- */

typedef struct acts_layout {
    size_t emb, emb_mean, emb_rstd, hidden, qkv, att, scratch, atty, res1, ln1_mean, ln1_rstd, ln1,
        ffn_pre, ffn_act, res2, ln2_mean, ln2_rstd, total;
} acts_layout;

#define NONE ((size_t)-1)

static acts_layout layout(const qac_bert_config *c, int B, int T, int keep, int nthreads) {
    acts_layout l;
    size_t N = (size_t)B * T, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t L = (size_t)c->num_layers, NH = (size_t)c->num_heads;
    size_t off = 0;
#define TAKE(field, n) (l.field = off, off += (n))
    if (keep) {
        TAKE(emb, N * C);
        TAKE(emb_mean, N);
        TAKE(emb_rstd, N);
        TAKE(hidden, (L + 1) * N * C);
        TAKE(qkv, L * N * 3 * C);
        TAKE(att, L * B * NH * T * T);
        l.scratch = NONE;
        TAKE(atty, L * N * C);
        TAKE(res1, L * N * C);
        TAKE(ln1_mean, L * N);
        TAKE(ln1_rstd, L * N);
        TAKE(ln1, L * N * C);
        TAKE(ffn_pre, L * N * I);
        TAKE(ffn_act, L * N * I);
        TAKE(res2, L * N * C);
        TAKE(ln2_mean, L * N);
        TAKE(ln2_rstd, L * N);
    } else {
        /* row A: layer input, residual 2, output; row B: residual 1 / LN1;
         * "big": Q|K|V and the attention context, later the FFN activation */
        size_t A = off;
        off += N * C;
        size_t Bq = off;
        off += N * C;
        size_t big = off;
        off += N * (4 * C > I ? 4 * C : I);
        l.emb = l.hidden = l.res2 = A;
        l.res1 = l.ln1 = Bq;
        l.qkv = l.ffn_act = big;
        l.atty = big + N * 3 * C;
        l.emb_mean = l.emb_rstd = l.ln1_mean = l.ln1_rstd = l.ln2_mean = l.ln2_rstd = NONE;
        l.att = l.ffn_pre = NONE;
        TAKE(scratch, (size_t)(nthreads > 0 ? nthreads : 1) * T * T);
    }
#undef TAKE
    l.total = off;
    return l;
}

size_t qac_bert_acts_size(const qac_bert_config *c, int B, int T, int keep, int nthreads) {
    return layout(c, B, T, keep, nthreads).total;
}

static float *view(float *mem, size_t off) { return off == NONE ? NULL : mem + off; }

qac_status qac_bert_acts_alloc(qac_bert_acts *a, const qac_bert_config *c, int B, int T, int keep,
                               int nthreads) {
    if (B < 1 || T < 1 || T > c->max_position)
        return qac_set_error(QAC_ERR_INVALID, "activations: bad shape B=%d T=%d (max %d positions)", B, T,
                             c->max_position);
    if (nthreads < 1) nthreads = 1;
    acts_layout l = layout(c, B, T, keep, nthreads);
    if (l.total > a->n_floats) {
        float *m = malloc(l.total * sizeof(float));
        if (!m)
            return qac_set_error(QAC_ERR_NOMEM, "activations: cannot allocate %.1f MiB for B=%d T=%d",
                                 (double)l.total * 4 / (1 << 20), B, T);
        free(a->mem);
        a->mem = m;
        a->n_floats = l.total;
    }
    float *m = a->mem;
    a->B = B;
    a->T = T;
    a->keep = keep ? 1 : 0;
    a->layers_kept = keep ? c->num_layers : 1;
    a->nthreads = nthreads;
    a->emb = view(m, l.emb);
    a->emb_mean = view(m, l.emb_mean);
    a->emb_rstd = view(m, l.emb_rstd);
    a->hidden = view(m, l.hidden);
    a->qkv = view(m, l.qkv);
    a->att = view(m, l.att);
    a->scratch = view(m, l.scratch);
    a->atty = view(m, l.atty);
    a->res1 = view(m, l.res1);
    a->ln1_mean = view(m, l.ln1_mean);
    a->ln1_rstd = view(m, l.ln1_rstd);
    a->ln1 = view(m, l.ln1);
    a->ffn_pre = view(m, l.ffn_pre);
    a->ffn_act = view(m, l.ffn_act);
    a->res2 = view(m, l.res2);
    a->ln2_mean = view(m, l.ln2_mean);
    a->ln2_rstd = view(m, l.ln2_rstd);
    a->last = keep ? a->hidden + (size_t)c->num_layers * B * T * c->hidden_size : a->hidden;
    return QAC_OK;
}

void qac_bert_acts_free(qac_bert_acts *a) {
    if (!a) return;
    free(a->mem);
    memset(a, 0, sizeof *a);
}

/* ---- forward ---- */

#define AT(ptr, l, n) ((ptr) ? (ptr) + (size_t)(l) * (n) : NULL)

void qac_bert_packed_free(qac_bert_packed *pk) {
    if (!pk) return;
    for (int l = 0; l < pk->L; l++) {
        if (pk->qkv) qac_gemm_packed_free(&pk->qkv[l]);
        if (pk->attn_out) qac_gemm_packed_free(&pk->attn_out[l]);
        if (pk->ffn_in) qac_gemm_packed_free(&pk->ffn_in[l]);
        if (pk->ffn_out) qac_gemm_packed_free(&pk->ffn_out[l]);
    }
    free(pk->qkv), free(pk->attn_out), free(pk->ffn_in), free(pk->ffn_out);
    memset(pk, 0, sizeof *pk);
}

qac_status qac_bert_pack(qac_bert_packed *pk, const qac_bert_config *c, const qac_bert_params *p) {
    memset(pk, 0, sizeof *pk);
    int C = c->hidden_size, I = c->intermediate_size, L = c->num_layers;
    pk->qkv = calloc((size_t)L, sizeof *pk->qkv);
    pk->attn_out = calloc((size_t)L, sizeof *pk->attn_out);
    pk->ffn_in = calloc((size_t)L, sizeof *pk->ffn_in);
    pk->ffn_out = calloc((size_t)L, sizeof *pk->ffn_out);
    pk->L = L;
    qac_status st = pk->qkv && pk->attn_out && pk->ffn_in && pk->ffn_out
                        ? QAC_OK
                        : qac_set_error(QAC_ERR_NOMEM, "out of memory packing the encoder weights");
    for (int l = 0; !st && l < L; l++) {
        size_t lc = (size_t)l * C;
        if ((st = qac_gemm_pack(&pk->qkv[l], p->qkv_w + lc * 3 * C, 3 * C, C)) ||
            (st = qac_gemm_pack(&pk->attn_out[l], p->attn_out_w + lc * C, C, C)) ||
            (st = qac_gemm_pack(&pk->ffn_in[l], p->ffn_in_w + (size_t)l * I * C, I, C)))
            break;
        st = qac_gemm_pack(&pk->ffn_out[l], p->ffn_out_w + (size_t)l * C * I, C, I);
    }
    if (st) qac_bert_packed_free(pk);
    return st;
}

qac_status qac_bert_forward(qac_bert_acts *a, const qac_bert_config *c, const qac_bert_params *p,
                            const qac_bert_packed *pk, const int32_t *ids, const int *lens, int B, int T,
                            float *hidden_out, qac_pool *pool) {
    if (!pk || pk->L != c->num_layers) return qac_set_error(QAC_ERR_INVALID, "bert forward: weights not packed");
    if (!a->mem || a->B != B || a->T != T)
        return qac_set_error(QAC_ERR_INVALID, "bert forward: activations not allocated for B=%d T=%d", B, T);
    if (a->nthreads < qac_pool_size(pool) && !a->keep)
        return qac_set_error(QAC_ERR_INVALID, "bert forward: activations sized for %d threads, pool has %d",
                             a->nthreads, qac_pool_size(pool));
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_heads, L = c->num_layers;
    size_t N = (size_t)B * T, NC = N * C;
    for (int b = 0; b < B; b++)
        if (lens[b] < 1 || lens[b] > T)
            return qac_set_error(QAC_ERR_INVALID, "bert forward: sequence %d has length %d (T=%d)", b, lens[b], T);
    for (size_t i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return qac_set_error(QAC_ERR_INVALID, "bert forward: token id %d out of range [0, %d)", ids[i],
                                 c->vocab_size);
    float eps = c->layer_norm_eps;
    int k = a->keep;

    qac_embeddings_forward(a->emb, ids, NULL, p->word_emb, p->pos_emb, p->type_emb, B, T, C, pool);
    qac_layernorm_forward(a->hidden, a->emb_mean, a->emb_rstd, a->emb, p->emb_ln_w, p->emb_ln_b, (int)N, C,
                          eps, pool);
    if (hidden_out) memcpy(hidden_out, a->hidden, NC * sizeof(float));

    for (int l = 0; l < L; l++) {
        int s = k ? l : 0;
        const float *x = k ? a->hidden + (size_t)l * NC : a->hidden;
        float *y = k ? a->hidden + (size_t)(l + 1) * NC : a->hidden;
        float *qkv = AT(a->qkv, s, N * 3 * C), *atty = AT(a->atty, s, NC);
        float *res1 = AT(a->res1, s, NC), *ln1 = AT(a->ln1, s, NC), *res2 = AT(a->res2, s, NC);
        float *ffn_pre = AT(a->ffn_pre, s, N * I), *ffn_act = AT(a->ffn_act, s, N * I);
        float *att = AT(a->att, s, (size_t)B * NH * T * T);
        size_t lc = (size_t)l * C;

        qac_gemm(qkv, x, &pk->qkv[l], p->qkv_b + lc * 3, NULL, (int)N, pool);
        qac_attention_forward(atty, att, a->scratch, qkv, lens, B, T, C, NH, pool);
        qac_gemm(res1, atty, &pk->attn_out[l], p->attn_out_b + lc, x, (int)N, pool);
        qac_layernorm_forward(ln1, AT(a->ln1_mean, s, N), AT(a->ln1_rstd, s, N), res1, p->ln1_w + lc,
                              p->ln1_b + lc, (int)N, C, eps, pool);
        matmul_gelu_packed(ffn_act, ffn_pre, ln1, &pk->ffn_in[l], p->ffn_in_b + (size_t)l * I, (int)N, pool);
        qac_gemm(res2, ffn_act, &pk->ffn_out[l], p->ffn_out_b + lc, ln1, (int)N, pool);
        qac_layernorm_forward(y, AT(a->ln2_mean, s, N), AT(a->ln2_rstd, s, N), res2, p->ln2_w + lc,
                              p->ln2_b + lc, (int)N, C, eps, pool);
        if (hidden_out) memcpy(hidden_out + (size_t)(l + 1) * NC, y, NC * sizeof(float));
    }
    return QAC_OK;
}
