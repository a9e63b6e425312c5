/* BERT layer math on the CPU: each layer's forward and its backward twin
 * side by side, plain functions over flat row-major arrays (shapes in
 * bert_cpu.h). Matrix products go through gemm.c and element-wise work
 * through vecmath.c; both keep one sequential chain per output element, so
 * results depend on neither the batch nor the thread count. Reductions over
 * rows (bias and LayerNorm parameter gradients) run per column, in row
 * order, for the same reason. */
#include "bert_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "qac_cpu.h"
#include "qac_rng.h"
#include "qac_util.h"
#include "vecmath.h"

/* ---- dropout ----
 * The mask of element i of row (sequence s, position t) at a site is a pure
 * function of (key, s, site, t, i): a sequence keeps its masks whatever
 * batch, chunk or padding it is computed in. */

static inline uint64_t drop_stream(const qac_dropout *d, int b, int layer, int site) {
    uint64_t seq = d->seq_ids ? d->seq_ids[b] : (uint64_t)b;
    return qac_rng_key(d->key, seq, (uint64_t)layer, (uint64_t)site);
}

/* keep when the 24-bit uniform is at or above p */
static inline float drop_scale(uint64_t stream, uint64_t counter, uint32_t thresh, float scale) {
    return (uint32_t)(qac_rng_u64(stream, counter) >> 40) >= thresh ? scale : 0.0f;
}

typedef struct drop_ctx {
    float *out;
    const float *inp, *resid;
    const qac_dropout *d;
    int layer, site, T, C;
} drop_ctx;

static void drop_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const drop_ctx *c = vctx;
    float p = c->site == QAC_DROP_EMB || c->site >= QAC_DROP_ATT_OUT ? c->d->hidden : c->d->attn;
    uint32_t thresh = (uint32_t)(p * 16777216.0f);
    float scale = 1.0f / (1.0f - p);
    int C = c->C;
    for (int64_t r = begin; r < end; r++) {
        int b = (int)(r / c->T), t = (int)(r % c->T);
        uint64_t s = drop_stream(c->d, b, c->layer, c->site);
        const float *x = c->inp + (size_t)r * C;
        const float *res = c->resid ? c->resid + (size_t)r * C : NULL;
        float *o = c->out + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            float v = x[i] * drop_scale(s, (uint64_t)t * C + i, thresh, scale);
            o[i] = res ? v + res[i] : v;
        }
    }
}

int qac_dropout_active(const qac_dropout *d, int site) {
    if (!d) return 0;
    return (site == QAC_DROP_ATT ? d->attn : d->hidden) > 0.0f;
}

void qac_dropout_forward(float *out, const float *inp, const float *resid, const qac_dropout *d, int layer, int site,
                         int B, int T, int C, qac_pool *pool) {
    drop_ctx c = {out, inp, resid, d, layer, site, T, C};
    qac_pool_for(pool, (int64_t)B * T, 0, drop_task, &c);
}

/* attention probabilities of (b, h), row t, keys [from, to): scale kept
 * entries in place */
static void drop_att_span(float *row, int from, int to, const qac_dropout *d, int b, int layer, int h, int t) {
    uint32_t thresh = (uint32_t)(d->attn * 16777216.0f);
    float scale = 1.0f / (1.0f - d->attn);
    uint64_t s = drop_stream(d, b, layer, QAC_DROP_ATT);
    uint64_t base = ((uint64_t)h << 40) | ((uint64_t)t << 20);
    for (int j = from; j < to; j++) row[j] *= drop_scale(s, base | (uint64_t)j, thresh, scale);
}

static void drop_att_row(float *row, int len, const qac_dropout *d, int b, int layer, int h, int t) {
    drop_att_span(row, 0, len, d, b, layer, h, t);
}

/* ---- embeddings ---- */

typedef struct emb_ctx {
    float *out;
    const int32_t *ids, *type_ids, *pos_ids;
    const float *word, *pos, *type;
    int T, C;
} emb_ctx;

static void emb_task(void *vctx, int64_t b, int64_t e, int tid) {
    const emb_ctx *c = vctx;
    int C = c->C;
    for (int64_t r = b; r < e; r++) {
        const float *w = c->word + (size_t)c->ids[r] * C;
        const float *p = c->pos ? c->pos + (size_t)(c->pos_ids ? c->pos_ids[r] : r % c->T) * C : NULL;
        const float *t = c->type ? c->type + (size_t)(c->type_ids ? c->type_ids[r] : 0) * C : NULL;
        float *o = c->out + (size_t)r * C;
        if (p && t)
            for (int i = 0; i < C; i++) o[i] = w[i] + p[i] + t[i];
        else if (p || t)
            for (int i = 0; i < C; i++) o[i] = w[i] + (p ? p : t)[i];
        else /* rotary families: the word vector alone */
            memcpy(o, w, (size_t)C * sizeof *o);
    }
}

void qac_embeddings_forward(float *out, const int32_t *ids, const int32_t *type_ids, const float *word_emb,
                            const float *pos_emb, const float *type_emb, int B, int T, int C, qac_pool *pool) {
    qac_embeddings_forward_at(out, ids, type_ids, NULL, word_emb, pos_emb, type_emb, B, T, C, pool);
}

void qac_embeddings_forward_at(float *out, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                               const float *word_emb, const float *pos_emb, const float *type_emb, int B, int T, int C,
                               qac_pool *pool) {
    emb_ctx c = {out, ids, type_ids, pos_ids, word_emb, pos_emb, type_emb, T, C};
    qac_pool_for(pool, (int64_t)B * T, 0, emb_task, &c);
}

void qac_embeddings_backward(float *dword, float *dpos, float *dtype, const float *dout, const int32_t *ids,
                             const int32_t *type_ids, int B, int T, int C) {
    qac_embeddings_backward_at(dword, dpos, dtype, dout, ids, type_ids, NULL, -1, -1, B, T, C);
}

/* Rows in order, so a repeated token's contributions always add up in the
 * same order. */
void qac_embeddings_backward_at(float *dword, float *dpos, float *dtype, const float *dout, const int32_t *ids,
                                const int32_t *type_ids, const int32_t *pos_ids, int32_t pad_id, int32_t pad_pos,
                                int B, int T, int C) {
    for (int64_t r = 0; r < (int64_t)B * T; r++) {
        const float *g = dout + (size_t)r * C;
        if (ids[r] != pad_id) {
            float *w = dword + (size_t)ids[r] * C;
            for (int i = 0; i < C; i++) w[i] += g[i];
        }
        if (dpos && !(pos_ids && pos_ids[r] == pad_pos)) {
            float *p = dpos + (size_t)(pos_ids ? pos_ids[r] : r % T) * C;
            for (int i = 0; i < C; i++) p[i] += g[i];
        }
        if (dtype) {
            float *t = dtype + (size_t)(type_ids ? type_ids[r] : 0) * C;
            for (int i = 0; i < C; i++) t[i] += g[i];
        }
    }
}

/* ---- layernorm ---- */

typedef struct ln_ctx {
    float *out, *mean, *rstd;
    const float *inp, *w, *b;
    int C;
    float eps;
} ln_ctx;

static void ln_task(void *vctx, int64_t b, int64_t e, int tid) {
    const ln_ctx *c = vctx;
    int C = c->C;
    for (int64_t r = b; r < e; r++)
        qac_vm_layernorm_row(c->out + (size_t)r * C, c->mean ? c->mean + r : NULL, c->rstd ? c->rstd + r : NULL,
                             c->inp + (size_t)r * C, c->w, c->b, C, c->eps);
}

void qac_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                           int N, int C, float eps, qac_pool *pool) {
    ln_ctx c = {out, mean, rstd, inp, w, b, C, eps};
    qac_pool_for(pool, N, 0, ln_task, &c);
}

typedef struct lnb_ctx {
    float *dinp, *dw, *db;
    const float *dout, *inp, *mean, *rstd, *w;
    int N, C;
} lnb_ctx;

/* dinp = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dout w */
static void lnb_rows(void *vctx, int64_t begin, int64_t end, int tid) {
    const lnb_ctx *c = vctx;
    int C = c->C;
    for (int64_t r = begin; r < end; r++) {
        const float *g = c->dout + (size_t)r * C, *x = c->inp + (size_t)r * C;
        float m = c->mean[r], rs = c->rstd[r];
        float s1 = 0, s2 = 0;
        for (int i = 0; i < C; i++) {
            float dn = g[i] * c->w[i];
            s1 += dn;
            s2 += dn * (x[i] - m) * rs;
        }
        s1 /= C;
        s2 /= C;
        float *d = c->dinp + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            float nrm = (x[i] - m) * rs;
            d[i] = (g[i] * c->w[i] - s1 - nrm * s2) * rs;
        }
    }
}

#define COLS 16

/* dw += sum_r dout * norm, db += sum_r dout, over blocks of 16 columns */
static void lnb_cols(void *vctx, int64_t begin, int64_t end, int tid) {
    const lnb_ctx *c = vctx;
    int C = c->C;
    for (int64_t blk = begin; blk < end; blk++) {
        int c0 = (int)blk * COLS, nc = C - c0 < COLS ? C - c0 : COLS;
        float sw[COLS] = {0}, sb[COLS] = {0};
        for (int r = 0; r < c->N; r++) {
            const float *g = c->dout + (size_t)r * C + c0, *x = c->inp + (size_t)r * C + c0;
            float m = c->mean[r], rs = c->rstd[r];
            for (int i = 0; i < nc; i++) {
                sw[i] += g[i] * ((x[i] - m) * rs);
                sb[i] += g[i];
            }
        }
        for (int i = 0; i < nc; i++) {
            c->dw[c0 + i] += sw[i];
            if (c->db) c->db[c0 + i] += sb[i];
        }
    }
}

void qac_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *mean, const float *rstd, const float *w, int N, int C, qac_pool *pool) {
    lnb_ctx c = {dinp, dw, db, dout, inp, mean, rstd, w, N, C};
    qac_pool_for(pool, (int64_t)(C + COLS - 1) / COLS, 1, lnb_cols, &c);
    qac_pool_for(pool, N, 0, lnb_rows, &c);
}

/* ---- linear layers ---- */

typedef struct bgelu_ctx {
    float *out, *pre;
    const float *bias;
    int OC;
    void *q8; /* qac_matmul_gelu_q8: the rows quantised here */
    int N;
    int int8; /* int8 weights: the int8 FFN's GELU (qac_vm_gelu_q8), as qac_matmul_gelu_q8's */
} bgelu_ctx;

static void bias_gelu_rows(void *vctx, int b, int e) {
    const bgelu_ctx *c = vctx;
    float *dst = c->pre ? c->pre : c->out;
    for (int64_t r = b; r < e; r++) {
        size_t o = (size_t)r * c->OC;
        float lo, hi;
        if (c->int8) { /* the pre-activation (kept: + bias, in place) GELU'd into out */
            if (c->pre) {
                for (int j = 0; c->bias && j < c->OC; j++) c->pre[o + j] += c->bias[j];
                memcpy(c->out + o, c->pre + o, (size_t)c->OC * sizeof *c->out);
            }
            qac_vm_gelu_q8(c->out + o, c->pre ? NULL : c->bias, c->OC, &lo, &hi);
        } else if (c->bias)
            qac_vm_bias_gelu(c->out + o, dst + o, c->bias, c->OC, c->pre != NULL);
        else
            qac_vm_gelu(c->out + o, dst + o, (size_t)c->OC);
    }
}

qac_status qac_matmul_gelu_packed(float *out, float *pre, const float *inp, const qac_packed_w *pw,
                                  const float *bias, int N, void *scratch, qac_pool *pool) {
    bgelu_ctx c = {out, pre, bias, pw->OC, NULL, N, pw->pq != NULL};
    /* GELU while the rows are in cache */
    return qac_gemm_then(pre ? pre : out, inp, pw, NULL, NULL, N, scratch, pool, bias_gelu_rows, &c);
}

/* a block's rows at rows (its thread's lines): bias + GELU there, then
 * each group of 12 rows quantised from the ranges GELU found, while they
 * are in cache */
static void bias_gelu_q8_at(void *vctx, int r0, int r1, float *rows, int tid) {
    const bgelu_ctx *c = vctx;
    (void)tid;
    enum { G = 12 }; /* the quantiser's groups (qac_gemm_int8_group_rows): r0 is a multiple */
    for (int g0 = 0; g0 < r1 - r0; g0 += G) {
        int g = r1 - r0 - g0 < G ? r1 - r0 - g0 : G;
        float lo[G], hi[G];
        for (int r = 0; r < g; r++) qac_vm_gelu_q8(rows + (size_t)(g0 + r) * c->OC, c->bias, c->OC, &lo[r], &hi[r]);
        qac_gemm_q8_quantize_ranged(c->q8, c->N, c->OC, rows + (size_t)g0 * c->OC, r0 + g0, g, lo, hi);
    }
}

qac_status qac_matmul_gelu_q8(float *out, const float *inp, const qac_packed_w *pw, const float *bias, int N,
                              void *scratch, void *q8, qac_pool *pool) {
    bgelu_ctx c = {out, NULL, bias, pw->OC, q8, N, 1};
    return qac_gemm_then_local(out, inp, pw, NULL, N, scratch, pool, bias_gelu_q8_at, &c);
}

qac_status qac_matmul_gelu_forward(float *out, float *pre, const float *inp, const float *w, const float *bias, int N,
                                   int IC, int OC, qac_pool *pool) {
    qac_packed_w pw;
    qac_status st = qac_gemm_pack(&pw, w, OC, IC);
    if (st == QAC_OK) st = qac_matmul_gelu_packed(out, pre, inp, &pw, bias, N, NULL, pool);
    qac_gemm_packed_free(&pw);
    return st;
}

/* dw accumulates over row blocks of KB: each block's operands stay in cache
 * (one long chain over all N rows streamed both through memory). The block
 * sums add into dw in row order, so the result depends on neither the
 * thread count nor anything but N. */
#define KB 256

size_t qac_matmul_backward_scratch(int N, int IC, int OC) {
    (void)N;
    return qac_gemm_packed_floats(IC, OC); /* W^T packed for dinp; dw's blocks are per thread */
}

typedef struct pack_ctx {
    float *packed;
    const float *w;
    int OC, IC, ldw, transposed;
} pack_ctx;

/* one 16-column panel per index: the panels are independent */
static void pack_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const pack_ctx *c = vctx;
    for (int64_t j = begin; j < end; j++) {
        int o0 = (int)j * QAC_GEMM_PANEL, n = c->OC - o0 < QAC_GEMM_PANEL ? c->OC - o0 : QAC_GEMM_PANEL;
        const float *src = c->transposed ? c->w + o0 : c->w + (size_t)o0 * c->ldw;
        qac_gemm_pack_into(c->packed + (size_t)j * c->IC * QAC_GEMM_PANEL, src, n, c->IC, c->ldw, c->transposed);
    }
}

void qac_gemm_pack_parallel(float *packed, const float *w, int OC, int IC, int ldw, int transposed, qac_pool *pool) {
    pack_ctx c = {packed, w, OC, IC, ldw, transposed};
    qac_pool_for(pool, (OC + QAC_GEMM_PANEL - 1) / QAC_GEMM_PANEL, 1, pack_task, &c);
}

/* dw [OC, IC] += dout^T inp and db [OC] += column sums of dout, for a range
 * of output rows per task: one parallel section per call (a K-blocked loop
 * of parallel sections waits on every thread hundreds of times a step).
 * Every element keeps its chain: block sums in row order, added into dw. */
typedef struct dw_ctx {
    float *dw, *db;
    const float *dout, *inp;
    int N, IC, OC;
    float *scratch;       /* per thread `stride` floats: dout^T, inp^T packed, the block's product */
    size_t stride;
} dw_ctx;

/* A task's rows of dw: `rows` (a multiple of COLS, or OC) */
static size_t dw_scratch_floats(int rows, int IC) {
    size_t n = (size_t)rows * KB + qac_gemm_packed_floats(IC, KB) + (size_t)rows * IC;
    return (n + 15) & ~(size_t)15;
}

static void dw_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const dw_ctx *c = vctx;
    int o0 = (int)begin * COLS, o1 = (int)end * COLS < c->OC ? (int)end * COLS : c->OC, no = o1 - o0, IC = c->IC;
    if (c->db)
        for (int blk = o0; blk < o1; blk += COLS) {
            int nc = o1 - blk < COLS ? o1 - blk : COLS;
            float s[COLS] = {0};
            for (int r = 0; r < c->N; r++)
                for (int i = 0; i < nc; i++) s[i] += c->dout[(size_t)r * c->OC + blk + i];
            for (int i = 0; i < nc; i++) c->db[blk + i] += s[i];
        }
    if (!c->dw) return;
    size_t ndt = (size_t)no * KB, npk = qac_gemm_packed_floats(IC, KB);
    float *dT = c->scratch + (size_t)tid * c->stride, *inpT = dT + ndt, *tmp = inpT + npk;
    for (int n0 = 0; n0 < c->N; n0 += KB) {
        int nb = c->N - n0 < KB ? c->N - n0 : KB;
        for (int n = 0; n < nb; n++) {
            const float *src = c->dout + (size_t)(n0 + n) * c->OC + o0;
            for (int o = 0; o < no; o++) dT[(size_t)o * nb + n] = src[o];
        }
        qac_gemm_pack_into(inpT, c->inp + (size_t)n0 * IC, IC, nb, IC, 1);
        qac_gemm_strided(tmp, IC, dT, nb, inpT, nb, IC, 1.0f, no);
        for (int o = 0; o < no; o++) {
            float *d = c->dw + (size_t)(o0 + o) * IC;
            const float *t = tmp + (size_t)o * IC;
            for (int i = 0; i < IC; i++) d[i] = t[i] + d[i];
        }
    }
}

qac_status qac_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *dresid, int N, int IC, int OC, float *scratch,
                               qac_pool *pool) {
    if (db || dw) {
        /* one contiguous range of COLS-row blocks per thread (grain 0 below) */
        int64_t blocks = (OC + COLS - 1) / COLS, nt = qac_pool_size(pool);
        int rows = (int)((blocks + nt - 1) / nt) * COLS;
        dw_ctx c = {dw, db, dout, inp, N, IC, OC, NULL, dw_scratch_floats(rows < OC ? rows : OC, IC)};
        if (dw && !(c.scratch = qac_malloc_lines((size_t)nt * c.stride * sizeof(float))))
            return qac_set_error(QAC_ERR_NOMEM, "matmul backward: cannot allocate %.1f MiB for dW's blocks (%d x %d)",
                                 (double)nt * c.stride * 4 / (1 << 20), OC, IC);
        qac_pool_for(pool, blocks, 0, dw_task, &c);
        free(c.scratch);
    }
    if (dinp) {
        /* dinp [N, IC] = dout [N, OC] . W [OC, IC] (+ dresid) */
        qac_gemm_pack_parallel(scratch, w, IC, OC, IC, 1, pool);
        qac_packed_w pw = {.p = scratch, .IC = OC, .OC = IC};
        return qac_gemm(dinp, dout, &pw, NULL, dresid, N, NULL, pool); /* fp32: no scratch */
    }
    return QAC_OK;
}

typedef struct gelu_ctx {
    float *out;
    const float *inp, *pre;
} gelu_ctx;

static void gelu_task(void *vctx, int64_t b, int64_t e, int tid) {
    const gelu_ctx *c = vctx;
    qac_vm_gelu(c->out + b, c->inp + b, (size_t)(e - b));
}

void qac_gelu_forward(float *out, const float *inp, size_t n, qac_pool *pool) {
    gelu_ctx c = {out, inp, NULL};
    qac_pool_for(pool, (int64_t)n, 1 << 16, gelu_task, &c);
}

static void gelu_bwd_task(void *vctx, int64_t b, int64_t e, int tid) {
    const gelu_ctx *c = vctx;
    qac_vm_gelu_backward(c->out + b, c->inp + b, c->pre + b, (size_t)(e - b));
}

void qac_gelu_backward(float *dinp, const float *dout, const float *pre, size_t n, qac_pool *pool) {
    gelu_ctx c = {dinp, dout, pre};
    qac_pool_for(pool, (int64_t)n, 1 << 16, gelu_bwd_task, &c);
}

/* ---- the CUDA trainer's fused passes, as compositions of the above ---- */

void qac_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *proj,
                                    const float *bias, const float *resid, const float *w, const float *b,
                                    const qac_dropout *d, int layer, int site, int B, int T, int C, float eps,
                                    qac_pool *pool) {
    const size_t N = (size_t)B * T;
    for (size_t r = 0; r < N; r++)
        for (int c = 0; c < C; c++) res[r * C + c] = bias ? proj[r * C + c] + bias[c] : proj[r * C + c];
    if (qac_dropout_active(d, site))
        qac_dropout_forward(res, res, resid, d, layer, site, B, T, C, pool);
    else
        for (size_t i = 0; i < N * C; i++) res[i] += resid[i];
    qac_layernorm_forward(out, mean, rstd, res, w, b, (int)N, C, eps, pool);
}

void qac_residual_layernorm_backward(float *dres, float *dproj, float *dw, float *db, float *dbias, const float *dout,
                                     const float *dadd, const float *res, const float *mean, const float *rstd,
                                     const float *w, const qac_dropout *d, int layer, int site, int B, int T, int C,
                                     qac_pool *pool) {
    const size_t N = (size_t)B * T;
    qac_layernorm_backward(dres, dw, db, dout, res, mean, rstd, w, (int)N, C, pool);
    if (dadd)
        for (size_t i = 0; i < N * C; i++) dres[i] += dadd[i];
    if (qac_dropout_active(d, site))
        qac_dropout_forward(dproj, dres, NULL, d, layer, site, B, T, C, pool);
    else
        memcpy(dproj, dres, N * C * sizeof(float));
    if (dbias)
        for (int c = 0; c < C; c++) {
            float s = 0;
            for (size_t r = 0; r < N; r++) s += dproj[r * C + c];
            dbias[c] += s;
        }
}

void qac_bias_gelu_forward(float *act, const float *pre, const float *bias, int N, int I, qac_pool *pool) {
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c = 0; c < I; c++) act[r * I + c] = pre[r * I + c] + bias[c];
    qac_gelu_forward(act, act, (size_t)N * I, pool);
}

void qac_bias_gelu_backward(float *dpre, float *dbias, const float *dout, const float *pre, const float *bias, int N,
                            int I, qac_pool *pool) {
    (void)pool;
    float x[256]; /* pre + bias, a piece of a row at a time (dpre may alias dout) */
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c0 = 0; c0 < I; c0 += 256) {
            const int n = I - c0 < 256 ? I - c0 : 256;
            const size_t o = r * I + c0;
            for (int j = 0; j < n; j++) x[j] = pre[o + j] + (bias ? bias[c0 + j] : 0.0f);
            qac_gelu_backward(dpre + o, dout + o, x, (size_t)n, NULL);
        }
    if (dbias)
        for (int c = 0; c < I; c++) {
            float s = 0;
            for (size_t r = 0; r < (size_t)N; r++) s += dpre[r * I + c];
            dbias[c] += s;
        }
}

/* ---- attention ---- */

typedef struct att_ctx {
    float *out, *att, *scratch; /* scratch: per thread `stride` floats */
    const float *qkv;
    const int *lens;
    const int *offs; /* packed rows: sequence b starts at row offs[b] and has lens[b] rows */
    const int *qrows; /* packed, one query row per sequence: row qrows[b] of sequence b, its output row b */
    const qac_dropout *drop;
    int layer, T, C, NH;
    size_t stride;
    int window; /* > 0: key j seen from query t when |t - j| <= window */
    int bf16;   /* QAC_ATT_BF16_QK, _PV: those products in bf16 (qac_attention_forward_packed_bf16) */
    const uint16_t *qkv16; /* Q|K|V already in bf16 (qac_attention_forward_bf16_qkv): qkv unused */
} att_ctx;

/* both products in bf16 (the mode, and the scratch, of Q|K|V from bf16) */
#define QK_PV (QAC_ATT_BF16_QK | QAC_ATT_BF16_PV)

/* A thread's scratch: the probabilities of one (sequence, head) [T, T],
 * packed K^T [T x hs] of one head (gemm.h layout), room for V [hs x T] on
 * the paths that pack it (qac_gemm_strided_b), and the dropped
 * probabilities [T, T] when dropout is on. */
size_t qac_attention_scratch_floats(int T, int C, int NH, int dropout) {
    int hs = C / NH;
    size_t n = (size_t)T * T + qac_gemm_packed_floats(T, hs) + qac_gemm_packed_floats(hs, T) +
               (dropout ? (size_t)T * T : 0);
    return (n + 15) & ~(size_t)15; /* each thread's on cache lines of its own */
}

/* Query rows of a local layer per block: a block's scores cover only the
 * keys its rows' windows reach. */
#define LOCAL_QB 32

/* One (sequence, head) of a local layer, query rows [0, M) in blocks of
 * LOCAL_QB: block [t0, t1) scores only keys [t0 - w, t1 + w) within [0,
 * len) (from the 16-key panel that holds the first), so the keys outside
 * every window are never multiplied (at 512 tokens and a window of 64 each
 * side a block scores 160 keys, not 512); inside the block, a row's entries
 * outside its own window are zeroed after the scores. K is packed once
 * (pk: every key, gemm.h's panels of QAC_GEMM_PANEL). S holds row t at S +
 * t * T, columns by key; kept (att not NULL) it is the full probability
 * matrix, zero outside the window. */
static void att_local(const att_ctx *c, float *S, float *pk, float *pv, float *pd, const float *q, float *out, int b,
                      int h, int len, int M) {
    int T = c->T, C = c->C, hs = C / c->NH, w = c->window;
    int dropping = qac_dropout_active(c->drop, QAC_DROP_ATT);
    float scale = 1.0f / sqrtf((float)hs);
    const float *k = q + C, *v = q + 2 * C;
    qac_gemm_pack_into(pk, k, len, hs, 3 * C, 0);
    for (int t0 = 0; t0 < M; t0 += LOCAL_QB) {
        int t1 = t0 + LOCAL_QB < M ? t0 + LOCAL_QB : M;
        int k0 = t0 - w > 0 ? t0 - w : 0, k1 = t1 + w < len ? t1 + w : len;
        k0 = k0 / QAC_GEMM_PANEL * QAC_GEMM_PANEL; /* a whole panel of the packed keys */
        int nk = k1 - k0;
        if (nk > 0)
            qac_gemm_strided(S + (size_t)t0 * T + k0, T, q + (size_t)t0 * 3 * C, 3 * C,
                             pk + (size_t)(k0 / QAC_GEMM_PANEL) * hs * QAC_GEMM_PANEL, hs, nk, scale, t1 - t0);
        for (int t = t0; t < t1; t++) {
            float *row = S + (size_t)t * T;
            int j0 = t - w > k0 ? t - w : k0, j1 = t + w + 1 < k1 ? t + w + 1 : k1;
            if (j1 > j0) qac_vm_softmax_row(row + j0, j1 - j0);
            else j0 = j1 = k0 > 0 ? k0 : 0; /* a padded row past every key's window: all zero */
            for (int j = k0; j < j0; j++) row[j] = 0.0f;
            for (int j = j1 > k0 ? j1 : k0; j < k1; j++) row[j] = 0.0f;
            if (c->att) {
                for (int j = 0; j < k0 && j < T; j++) row[j] = 0.0f;
                for (int j = k1 > 0 ? k1 : 0; j < T; j++) row[j] = 0.0f;
            }
            if (dropping && nk > 0) {
                memcpy(pd + (size_t)t * T + k0, row + k0, (size_t)nk * sizeof *row);
                drop_att_span(pd + (size_t)t * T, k0, k1, c->drop, b, c->layer, h, t);
            }
        }
        float *o = out + (size_t)t0 * C;
        if (nk > 0)
            qac_gemm_strided_b(o, C, (dropping ? pd : S) + (size_t)t0 * T + k0, T, v + (size_t)k0 * 3 * C, 3 * C,
                               nk, hs, 1.0f, t1 - t0, pv);
        else
            for (int t = t0; t < t1; t++) memset(o + (size_t)(t - t0) * C, 0, (size_t)hs * sizeof *o);
    }
}

/* Prefetch (into L2) the `bytes` bytes at byte col of each of rows rows of
 * Q|K|V from kq on (a head's part of Q, K or V: hs elements of 4 bytes, or
 * of 2 in bf16): its rows lie `row` bytes apart (3 C elements), a stride
 * the hardware prefetchers do not follow, so without this the packing of K
 * and the reads of V wait on every row's lines. */
static void att_prefetch_bytes(const void *kq, int rows, size_t row, size_t col, size_t bytes) {
    for (int r = 0; r < rows; r++)
        for (size_t d = 0; d < bytes; d += 64) {
            const char *at = (const char *)kq + (size_t)r * row + col + d;
#if defined(__x86_64__) && defined(__GNUC__)
            /* with __builtin_prefetch, GCC 12 at -O2 left no prefetch of this loop in the object code */
            __asm__ volatile("prefetcht1 %0" : : "m"(*at));
#else
            __builtin_prefetch(at, 0, 2);
#endif
        }
}

/* the fp32 Q|K|V's: hs floats at float column col */
static void att_prefetch(const float *kq, int rows, int col, int C, int hs) {
    att_prefetch_bytes(kq, rows, (size_t)3 * C * sizeof(float), (size_t)col * sizeof(float),
                       (size_t)hs * sizeof(float));
}

/* the bf16 Q|K|V's: hs elements at element column col */
static void att_prefetch16(const uint16_t *kq, int rows, int col, int C, int hs) {
    att_prefetch_bytes(kq, rows, (size_t)3 * C * sizeof(uint16_t), (size_t)col * sizeof(uint16_t),
                       (size_t)hs * sizeof(uint16_t));
}

/* One (sequence, head) from Q|K|V in bf16: as the bf16 mode with both
 * products (QAC_ATT_BF16_QK | QAC_ATT_BF16_PV), but the scale applied to
 * each score (one fp32 multiply, in the product's epilogue) instead of to
 * Q, and the softmax's exp to bf16's needs (qac_vm_softmax_row_b16). */
static void att_head16(const att_ctx *c, float *att, float *pk, float *pv, float *pd, int b, int h) {
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH;
    int len = c->lens[b], M = c->qrows ? 1 : len;
    size_t row0 = (size_t)c->offs[b];
    const uint16_t *kq = c->qkv16 + row0 * 3 * C + (size_t)h * hs, *k = kq + C, *v = kq + 2 * C;
    const uint16_t *q = c->qrows ? kq + (size_t)c->qrows[b] * 3 * C : kq;
    float *o = c->out + (c->qrows ? (size_t)b : row0) * C + (size_t)h * hs;
    uint16_t *kb = (uint16_t *)(void *)pk, *vb = (uint16_t *)(void *)pv, *pb = (uint16_t *)(void *)pd;
    int te = (len + 1) / 2 * 2;
    float scale = 1.0f / sqrtf((float)hs);
    qac_gemm_pack_bf16_from16(kb, k, len, hs, 3 * C, 0);
    qac_gemm_bf16_strided(att, T, q, 3 * C, kb, hs, len, scale, M);
    for (int t = 0; t < M; t++) { /* P is rounded to bf16: its exp need not be exact to fp32 */
        qac_vm_softmax_row_b16(att + (size_t)t * T, len);
        qac_gemm_round_bf16(pb + (size_t)t * te, att + (size_t)t * T, len, 1.0f);
    }
    qac_gemm_pack_bf16_from16(vb, v, hs, len, 3 * C, 1);
    qac_gemm_bf16_strided(o, C, pb, te, vb, len, hs, 1.0f, M);
}

static void att_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const att_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH;
    int dropping = qac_dropout_active(c->drop, QAC_DROP_ATT);
    float scale = 1.0f / sqrtf((float)hs);
    size_t nk = qac_gemm_packed_floats(T, hs), nv = qac_gemm_packed_floats(hs, T);
    float *mine = c->scratch + (size_t)tid * c->stride, *pk = mine + (size_t)T * T, *pv = pk + nk, *pd = pv + nv;
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH);
        int len = c->lens[b];
        if (c->qkv16) {
            const uint16_t *kq16 = c->qkv16 + (size_t)c->offs[b] * 3 * C + (size_t)h * hs;
            att_prefetch16(kq16, len, 2 * C, C, hs);
            if (bh + 1 < end && h + 1 < NH) {
                att_prefetch16(kq16 + hs, c->qrows ? 0 : len, 0, C, hs);
                att_prefetch16(kq16 + hs, len, C, C, hs);
            }
            att_head16(c, mine, pk, pv, pd, b, h);
            continue;
        }
        /* packed: only the real rows exist; padded: all T rows are computed */
        size_t row0 = c->offs ? (size_t)c->offs[b] : (size_t)b * T;
        int M = c->qrows ? 1 : c->offs ? len : T;
        const float *kq = c->qkv + row0 * 3 * C + (size_t)h * hs;
        const float *k = kq + C;
        const float *v = kq + 2 * C;
        /* one query row: the same per-row arithmetic as all of them (gemm.h) */
        const float *q = c->qrows ? kq + (size_t)c->qrows[b] * 3 * C : kq;
        float *o = c->out + (c->qrows ? (size_t)b : row0) * C + (size_t)h * hs;
        float *att = c->att ? c->att + (size_t)bh * T * T : mine;
        /* this head's V, read after its scores, and the next head's Q and K
         * (a chunk is a sequence's heads, att_run), read first */
        att_prefetch(kq, len, 2 * C, C, hs);
        if (bh + 1 < end && h + 1 < NH) {
            att_prefetch(kq + hs, c->qrows ? 0 : M, 0, C, hs);
            att_prefetch(kq + hs, len, C, C, hs);
        }
        if (c->window > 0) {
            att_local(c, att, pk, pv, pd, q, c->out + row0 * C + (size_t)h * hs, b, h, len, M);
            continue;
        }
        if (c->bf16) { /* K and Q (scaled) in the room of packed K, V in packed V's, P in the dropout's */
            uint16_t *kb = (uint16_t *)(void *)pk, *qb = kb + nk, *vb = (uint16_t *)(void *)pv;
            uint16_t *pb = (uint16_t *)(void *)pd;
            int hs2 = (hs + 1) / 2 * 2, te = (len + 1) / 2 * 2;
            if (c->bf16 & QAC_ATT_BF16_QK) {
                qac_gemm_pack_bf16_into(kb, k, len, hs, 3 * C, 0);
                for (int t = 0; t < M; t++) qac_gemm_round_bf16(qb + (size_t)t * hs2, q + (size_t)t * 3 * C, hs, scale);
                qac_gemm_bf16_strided(att, T, qb, hs2, kb, hs, len, 1.0f, M);
            } else {
                qac_gemm_pack_into(pk, k, len, hs, 3 * C, 0);
                qac_gemm_strided(att, T, q, 3 * C, pk, hs, len, scale, M);
            }
            for (int t = 0; t < M; t++) {
                qac_vm_softmax_row(att + (size_t)t * T, len);
                if (c->bf16 & QAC_ATT_BF16_PV) qac_gemm_round_bf16(pb + (size_t)t * te, att + (size_t)t * T, len, 1.0f);
            }
            if (c->bf16 & QAC_ATT_BF16_PV) {
                qac_gemm_pack_bf16_into(vb, v, hs, len, 3 * C, 1);
                qac_gemm_bf16_strided(o, C, pb, te, vb, len, hs, 1.0f, M);
            } else {
                qac_gemm_strided_b(o, C, att, T, v, 3 * C, len, hs, 1.0f, M, pv);
            }
            continue;
        }
        /* scores for the real keys only: masked keys get exactly zero weight */
        qac_gemm_pack_into(pk, k, len, hs, 3 * C, 0);
        qac_gemm_strided(att, T, q, 3 * C, pk, hs, len, scale, M);
        for (int t = 0; t < M; t++) {
            float *row = att + (size_t)t * T;
            qac_vm_softmax_row(row, len);
            if (c->att)
                for (int j = len; j < T; j++) row[j] = 0.0f;
            if (dropping) {
                memcpy(pd + (size_t)t * T, row, (size_t)len * sizeof *row);
                drop_att_row(pd + (size_t)t * T, len, c->drop, b, c->layer, h, t);
            }
        }
        qac_gemm_strided_b(o, C, dropping ? pd : att, T, v, 3 * C, len, hs, 1.0f, M, pv);
    }
}

/* Run att_task over every (sequence, head) with the caller's scratch, or
 * with scratch of this call's when it gave none. */
static qac_status att_run(att_ctx *c, int B, qac_pool *pool) {
    int nt = qac_pool_size(pool);
    c->stride = qac_attention_scratch_floats(c->T, c->C, c->NH, c->bf16 || qac_dropout_active(c->drop, QAC_DROP_ATT));
    float *own = NULL;
    if (!c->scratch && !(c->scratch = own = qac_malloc_lines((size_t)nt * c->stride * sizeof(float))))
        return qac_set_error(QAC_ERR_NOMEM, "attention: cannot allocate %.1f MiB of scratch for %d threads (T=%d)",
                             (double)nt * c->stride * 4 / (1 << 20), nt, c->T);
    /* a sequence's heads a chunk (att_task prefetches the next head's rows),
     * but single heads where there are too few sequences to share */
    qac_pool_for(pool, (int64_t)B * c->NH, B >= 4 * nt ? c->NH : 1, att_task, c);
    free(own);
    return QAC_OK;
}

qac_status qac_attention_forward(float *out, float *att, float *scratch, const float *qkv, const int *lens, int B,
                                 int T, int C, int NH, qac_pool *pool) {
    return qac_attention_forward_drop(out, att, scratch, qkv, lens, NULL, 0, B, T, C, NH, pool);
}

qac_status qac_attention_forward_drop(float *out, float *att, float *scratch, const float *qkv, const int *lens,
                                      const qac_dropout *drop, int layer, int B, int T, int C, int NH,
                                      qac_pool *pool) {
    return qac_attention_forward_window(out, att, scratch, qkv, lens, NULL, 0, drop, layer, B, T, C, NH, pool);
}

qac_status qac_attention_forward_packed(float *out, float *scratch, const float *qkv, const int *lens,
                                        const int *offs, int B, int T, int C, int NH, qac_pool *pool) {
    return qac_attention_forward_window(out, NULL, scratch, qkv, lens, offs, 0, NULL, 0, B, T, C, NH, pool);
}

qac_status qac_attention_forward_window(float *out, float *att, float *scratch, const float *qkv, const int *lens,
                                        const int *offs, int window, const qac_dropout *drop, int layer, int B, int T,
                                        int C, int NH, qac_pool *pool) {
    att_ctx c = {out, att, scratch, qkv, lens, offs, NULL, drop, layer, T, C, NH, 0, window, 0, NULL};
    return att_run(&c, B, pool);
}

qac_status qac_attention_forward_packed_bf16(float *out, float *scratch, const float *qkv, const int *lens,
                                             const int *offs, int B, int T, int C, int NH, int bf16,
                                             qac_pool *pool) {
    att_ctx c = {out, NULL, scratch, qkv, lens, offs, NULL, NULL, 0, T, C, NH, 0, 0, qac_cpu_bf16() ? bf16 & 3 : 0,
                 NULL};
    return att_run(&c, B, pool);
}

qac_status qac_attention_forward_packed_rows(float *out, float *scratch, const float *qkv, const int *lens,
                                             const int *offs, const int *rows, int B, int T, int C, int NH, int bf16,
                                             qac_pool *pool) {
    att_ctx c = {out, NULL, scratch, qkv, lens, offs, rows, NULL, 0, T, C, NH, 0, 0, qac_cpu_bf16() ? bf16 & 3 : 0,
                 NULL};
    return att_run(&c, B, pool);
}

qac_status qac_attention_forward_bf16_qkv(float *out, float *scratch, const uint16_t *qkv16, const int *lens,
                                          const int *offs, const int *rows, int B, int T, int C, int NH,
                                          qac_pool *pool) {
    att_ctx c = {out, NULL, scratch, NULL, lens, offs, rows, NULL, 0, T, C, NH, 0, 0, QK_PV, qkv16};
    return att_run(&c, B, pool);
}

void qac_attention_bf16_qkv_seq(float *out, float *scratch, const uint16_t *qkv16, const int *lens, const int *offs,
                                const int *rows, int b, int T, int C, int NH) {
    att_ctx c = {out, NULL, scratch, NULL, lens, offs, rows, NULL, 0, T, C, NH, 0, 0, QK_PV, qkv16};
    att_task(&c, (int64_t)b * NH, (int64_t)(b + 1) * NH, 0);
}

typedef struct attb_ctx {
    float *dqkv;
    const float *datty, *qkv, *att;
    const int *lens;
    const qac_dropout *drop;
    int layer, T, C, NH;
    float *scratch; /* per thread `stride` floats: a packed operand and two [T, T] matrices */
    size_t stride;
} attb_ctx;

/* One (sequence, head): with P the probabilities, Pd = dropout(P),
 *   dV = Pd^T dO, dPd = dO V^T, dP = dropout(dPd),
 *   dS = P (dP - rowsum(P dP)) / sqrt(hs), dQ = dS K, dK = dS^T Q.
 * Keys past len get no gradient (their weight is exactly zero). */
static void attb_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const attb_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C;
    int dropping = qac_dropout_active(c->drop, QAC_DROP_ATT);
    float scale = 1.0f / sqrtf((float)hs);
    size_t npk = qac_gemm_packed_floats(T > hs ? T : hs, T > hs ? T : hs);
    float *pk = c->scratch + (size_t)tid * c->stride, *m1 = pk + npk, *m2 = m1 + (size_t)T * T;
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH), len = c->lens[b];
        size_t base = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = c->qkv + base, *k = q + C, *v = q + 2 * C;
        float *dq = c->dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        const float *dO = c->datty + (size_t)b * T * C + (size_t)h * hs;
        const float *P = c->att + (size_t)bh * T * T;
        /* m1 = Pd^T [len, T] */
        for (int t = 0; t < T; t++) {
            memcpy(m2, P + (size_t)t * T, (size_t)len * sizeof *m2);
            if (dropping) drop_att_row(m2, len, c->drop, b, c->layer, h, t);
            for (int j = 0; j < len; j++) m1[(size_t)j * T + t] = m2[j];
        }
        /* dV [len, hs] = Pd^T dO: B = dO [T, hs] */
        qac_gemm_strided_b(dv, C3, m1, T, dO, C, T, hs, 1.0f, len, pk);
        /* m2 = dPd [T, len] = dO V^T: W' = V [len, hs] */
        qac_gemm_pack_into(pk, v, len, hs, C3, 0);
        qac_gemm_strided(m2, T, dO, C, pk, hs, len, 1.0f, T);
        for (int t = 0; t < T; t++) {
            float *dp = m2 + (size_t)t * T;
            const float *p = P + (size_t)t * T;
            if (dropping) drop_att_row(dp, len, c->drop, b, c->layer, h, t);
            float s = 0;
            for (int j = 0; j < len; j++) s += p[j] * dp[j];
            for (int j = 0; j < len; j++) dp[j] = p[j] * (dp[j] - s) * scale;
        }
        /* dQ [T, hs] = dS K: B = K [len, hs] */
        qac_gemm_strided_b(dq, C3, m2, T, k, C3, len, hs, 1.0f, T, pk);
        /* dK [len, hs] = dS^T Q: inp = dS^T [len, T], B = Q [T, hs] */
        for (int t = 0; t < T; t++)
            for (int j = 0; j < len; j++) m1[(size_t)j * T + t] = m2[(size_t)t * T + j];
        qac_gemm_strided_b(dk, C3, m1, T, q, C3, T, hs, 1.0f, len, pk);
        for (int j = len; j < T; j++) {
            memset(dk + (size_t)j * C3, 0, (size_t)hs * sizeof(float));
            memset(dv + (size_t)j * C3, 0, (size_t)hs * sizeof(float));
        }
    }
}

/* Scratch of a call of `stride` floats per thread, or QAC_ERR_NOMEM naming what. */
static qac_status call_scratch(float **out, size_t stride, qac_pool *pool, const char *what) {
    int nt = qac_pool_size(pool);
    if (!(*out = qac_malloc_lines((size_t)nt * stride * sizeof(float))))
        return qac_set_error(QAC_ERR_NOMEM, "%s: cannot allocate %.1f MiB of scratch for %d threads", what,
                             (double)nt * stride * 4 / (1 << 20), nt);
    return QAC_OK;
}

qac_status qac_attention_backward(float *dqkv, const float *datty, const float *qkv, const float *att,
                                  const int *lens, const qac_dropout *drop, int layer, int B, int T, int C, int NH,
                                  qac_pool *pool) {
    int hs = C / NH, big = T > hs ? T : hs;
    size_t stride = (qac_gemm_packed_floats(big, big) + 2 * (size_t)T * T + 15) & ~(size_t)15;
    attb_ctx c = {dqkv, datty, qkv, att, lens, drop, layer, T, C, NH, NULL, stride};
    qac_status st = call_scratch(&c.scratch, stride, pool, "attention backward");
    if (st) return st;
    qac_pool_for(pool, (int64_t)B * NH, 1, attb_task, &c);
    free(c.scratch);
    return QAC_OK;
}

/* ---- causal (windowed) attention ----
 * Scalar loops over the visible keys only: with the released window of 3 a
 * row sees at most 4 keys, so packing panels for gemm would cost more than
 * the products. One (sequence, head) per task; every sum runs in key order.
 * Dropout on the probabilities draws the same masks as the encoder's
 * attention (drop_att_row) at the caller's layer index. */

static inline int causal_first(int i, int window) { return window > 0 && i - window + 1 > 1 ? i - window + 1 : 1; }

/* visible keys of a row: 0, then first..last (none when first > last) */
#define FOR_VISIBLE(j, first, last) for (int j = 0; j <= (last); j = j ? j + 1 : (first))

typedef struct catt_ctx {
    float *out, *dqkv;
    const float *att_in, *datty, *qkv;
    float *att;
    const int *lens;
    const qac_dropout *drop;
    int layer, window, T, C, NH;
    float *scratch; /* per thread 2T floats (rounded up to a cache line) */
} catt_ctx;

#define CATT_STRIDE(T) ((2 * (size_t)(T) + 15) & ~(size_t)15)

static void catt_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const catt_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C;
    int dropping = qac_dropout_active(c->drop, QAC_DROP_ATT);
    float scale = 1.0f / sqrtf((float)hs);
    float *pd = c->scratch + (size_t)tid * CATT_STRIDE(T); /* the dropped row, when dropping */
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH), len = c->lens[b];
        const float *qkv = c->qkv + (size_t)b * T * C3 + (size_t)h * hs;
        float *P = c->att + (size_t)bh * T * T;
        for (int i = 0; i < T; i++) {
            const float *q = qkv + (size_t)i * C3;
            float *row = P + (size_t)i * T, *o = c->out + ((size_t)b * T + i) * C + (size_t)h * hs;
            int last = i < len - 1 ? i : len - 1, first = causal_first(i, c->window);
            memset(row, 0, (size_t)T * sizeof *row);
            float mx = -INFINITY;
            FOR_VISIBLE(j, first, last) {
                const float *k = qkv + (size_t)j * C3 + C;
                float s = 0;
                for (int d = 0; d < hs; d++) s += q[d] * k[d];
                row[j] = s * scale;
                mx = row[j] > mx ? row[j] : mx;
            }
            float z = 0;
            FOR_VISIBLE(j, first, last) {
                row[j] = expf(row[j] - mx);
                z += row[j];
            }
            float inv = 1.0f / z;
            FOR_VISIBLE(j, first, last) row[j] *= inv;
            const float *w = row;
            if (dropping) {
                memcpy(pd, row, (size_t)(last + 1) * sizeof *pd);
                drop_att_row(pd, last + 1, c->drop, b, c->layer, h, i);
                w = pd;
            }
            for (int d = 0; d < hs; d++) o[d] = 0;
            FOR_VISIBLE(j, first, last) {
                const float *v = qkv + (size_t)j * C3 + 2 * C;
                for (int d = 0; d < hs; d++) o[d] += w[j] * v[d];
            }
        }
    }
}

static qac_status catt_run(catt_ctx *c, int B, qac_pool *pool, qac_pool_fn task, const char *what) {
    qac_status st = call_scratch(&c->scratch, CATT_STRIDE(c->T), pool, what);
    if (st) return st;
    qac_pool_for(pool, (int64_t)B * c->NH, 1, task, c);
    free(c->scratch);
    return QAC_OK;
}

qac_status qac_attention_causal_forward(float *out, float *att, const float *qkv, const int *lens, int window,
                                        const qac_dropout *drop, int layer, int B, int T, int C, int NH,
                                        qac_pool *pool) {
    catt_ctx c = {out, NULL, NULL, NULL, qkv, att, lens, drop, layer, window, T, C, NH, NULL};
    return catt_run(&c, B, pool, catt_task, "causal attention");
}

/* One (sequence, head), P the kept probabilities (zero where masked) and
 * Pd = dropout(P):
 *   dV_j = sum_i Pd_ij dO_i, dP_ij = dropout(dO_i . V_j),
 *   dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij') / sqrt(hs),
 *   dQ_i = sum_j dS_ij K_j, dK_j = sum_i dS_ij Q_i. */
static void cattb_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const catt_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C;
    int dropping = qac_dropout_active(c->drop, QAC_DROP_ATT);
    float scale = 1.0f / sqrtf((float)hs);
    float *ds = c->scratch + (size_t)tid * CATT_STRIDE(T), *pd = ds + T;
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH), len = c->lens[b];
        size_t base = (size_t)b * T * C3 + (size_t)h * hs;
        const float *qkv = c->qkv + base, *P = c->att_in + (size_t)bh * T * T;
        float *dqkv = c->dqkv + base;
        for (int t = 0; t < T; t++)
            for (int part = 0; part < 3; part++) memset(dqkv + (size_t)t * C3 + part * C, 0, (size_t)hs * sizeof(float));
        for (int i = 0; i < T; i++) {
            const float *dO = c->datty + ((size_t)b * T + i) * C + (size_t)h * hs, *p = P + (size_t)i * T;
            const float *q = qkv + (size_t)i * C3;
            float *dq = dqkv + (size_t)i * C3;
            int last = i < len - 1 ? i : len - 1, first = causal_first(i, c->window);
            const float *w = p;
            if (dropping) {
                memcpy(pd, p, (size_t)(last + 1) * sizeof *pd);
                drop_att_row(pd, last + 1, c->drop, b, c->layer, h, i);
                w = pd;
            }
            memset(ds, 0, (size_t)(last + 1) * sizeof *ds);
            FOR_VISIBLE(j, first, last) {
                const float *v = qkv + (size_t)j * C3 + 2 * C;
                float *dv = dqkv + (size_t)j * C3 + 2 * C, dp = 0;
                for (int d = 0; d < hs; d++) {
                    dp += dO[d] * v[d];
                    dv[d] += w[j] * dO[d];
                }
                ds[j] = dp;
            }
            if (dropping) drop_att_row(ds, last + 1, c->drop, b, c->layer, h, i);
            float s = 0;
            FOR_VISIBLE(j, first, last) s += p[j] * ds[j];
            FOR_VISIBLE(j, first, last) {
                float g = p[j] * (ds[j] - s) * scale;
                const float *k = qkv + (size_t)j * C3 + C;
                float *dk = dqkv + (size_t)j * C3 + C;
                for (int d = 0; d < hs; d++) {
                    dq[d] += g * k[d];
                    dk[d] += g * q[d];
                }
            }
        }
    }
}

qac_status qac_attention_causal_backward(float *dqkv, const float *datty, const float *qkv, const float *att,
                                         const int *lens, int window, const qac_dropout *drop, int layer, int B, int T,
                                         int C, int NH, qac_pool *pool) {
    catt_ctx c = {NULL, dqkv, att, datty, qkv, NULL, lens, drop, layer, window, T, C, NH, NULL};
    return catt_run(&c, B, pool, cattb_task, "causal attention backward");
}

#undef FOR_VISIBLE

/* ---- pooling ---- */

static void pool_one(float *o, const float *h, int len, int C, qac_pooling pooling) {
    if (pooling == QAC_POOL_MEAN) {
        for (int i = 0; i < C; i++) o[i] = 0.0f;
        for (int t = 0; t < len; t++)
            for (int i = 0; i < C; i++) o[i] += h[(size_t)t * C + i];
        float inv = 1.0f / (float)(len > 0 ? len : 1);
        for (int i = 0; i < C; i++) o[i] *= inv;
    } else {
        memcpy(o, h, (size_t)C * sizeof *o);
    }
}

static float l2_norm(const float *o, int C) {
    double ss = 0;
    for (int i = 0; i < C; i++) ss += (double)o[i] * o[i];
    float norm = (float)sqrt(ss);
    return norm > 1e-12f ? norm : 1e-12f;
}

void qac_pooling_forward(float *out, const float *hidden, const int *lens, int B, int T, int C, qac_pooling pooling,
                         int normalize) {
    qac_pooling_forward_from(out, hidden, lens, NULL, B, T, C, pooling, normalize);
}

void qac_pooling_forward_from(float *out, const float *hidden, const int *lens, const int *from, int B, int T, int C,
                              qac_pooling pooling, int normalize) {
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * C;
        int len = lens[b], s = from && from[b] > 0 ? from[b] : 0;
        /* nothing left after the skipped tokens: the mean of none is 0
         * (sentence-transformers' masked sum), CLS falls back to row 0 */
        if (s >= len) s = pooling == QAC_POOL_MEAN ? len : 0;
        pool_one(o, hidden + ((size_t)b * T + (size_t)s) * C, len - s, C, pooling);
        if (normalize) {
            float inv = 1.0f / l2_norm(o, C);
            for (int i = 0; i < C; i++) o[i] *= inv;
        }
    }
}

void qac_l2norm_backward(float *dx, const float *dy, const float *x, int C) {
    float n = l2_norm(x, C), dot = 0;
    for (int i = 0; i < C; i++) dot += x[i] * dy[i];
    /* y = x / n: dx = (dy - y (y . dy)) / n */
    for (int i = 0; i < C; i++) dx[i] = (dy[i] - x[i] / n * (dot / n)) / n;
}

/* With normalisation, the gradient before it, g, is worked out in the
 * sequence's first row of dhidden (pooled vector, then g in place: each
 * element of qac_l2norm_backward reads x[i] before it writes dx[i]), so no
 * memory beyond the output is needed. */
void qac_pooling_backward(float *dhidden, const float *dout, const float *hidden, const int *lens, int B, int T,
                          int C, qac_pooling pooling, int normalize) {
    memset(dhidden, 0, (size_t)B * T * C * sizeof *dhidden);
    for (int b = 0; b < B; b++) {
        float *dh = dhidden + (size_t)b * T * C; /* row 0: g */
        int len = lens[b];
        if (normalize) {
            pool_one(dh, hidden + (size_t)b * T * C, len, C, pooling);
            qac_l2norm_backward(dh, dout + (size_t)b * C, dh, C);
        } else {
            memcpy(dh, dout + (size_t)b * C, (size_t)C * sizeof *dh);
        }
        if (pooling == QAC_POOL_MEAN) {
            float inv = 1.0f / (float)(len > 0 ? len : 1);
            for (int t = len - 1; t >= 0; t--) /* row 0, which holds g, last */
                for (int i = 0; i < C; i++) dh[(size_t)t * C + i] = dh[i] * inv;
            if (len < 1) memset(dh, 0, (size_t)C * sizeof *dh); /* no token: no gradient */
        }
    }
}
