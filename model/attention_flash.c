/* Fused (FlashAttention-2) attention on the CPU: the twin of
 * kernels/flash_attention.cu, in the same order of work. Contracts in
 * bert_cpu.h (qac_flash_attention_forward, qac_flash_attention_backward).
 *
 * Scores live in the base-2 domain as on the GPU: v = (q . k) * log2(e) /
 * sqrt(hs), probabilities exp2(v - max); the saved log-sum-exp is
 * log2 sum_j 2^v_j. Per (sequence, head) task, the heads' rows are copied
 * with the bias added ("on load"), so the loops below read contiguous rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_bf16.h"
#include "qac_rng.h"
#include "qac_util.h"

#define LOG2E 1.4426950408889634f

typedef struct flash_ctx {
    float *out, *lse, *dqkv;
    const float *qkv, *qkv_b, *dout, *fout, *flse;
    const int *offs, *lens;
    const qac_dropout *drop;
    int layer, T, C, NH, N, causal, window, bq, bk;
    qac_precision round;
    float *scratch; /* per thread `stride` floats: a (sequence, head)'s Q, K, V (and dO) and small rows */
    size_t stride;
} flash_ctx;

/* x rounded to fp16 (to nearest, ties to even; subnormals kept), as a float */
static float round_fp16(float x) {
    float ax = fabsf(x);
    if (!(ax < INFINITY)) return x;
    if (ax >= 65520.0f) return copysignf(INFINITY, x);
    if (ax < 0x1p-14f) return copysignf(nearbyintf(ax * 0x1p24f) * 0x1p-24f, x); /* spacing 2^-24 */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x0fffu + ((u >> 13) & 1u)) & ~0x1fffu; /* 10 fraction bits */
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x as the GPU kernels hold it in the element precision p */
static inline float round_el(float x, qac_precision p) {
    if (p == QAC_PREC_BF16) {
        uint32_t u = (uint32_t)qac_bf16_from_float(x) << 16;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    return p == QAC_PREC_FP16 ? round_fp16(x) : x;
}

/* The rows of sequence b: the first row, query rows, key rows. */
static void seq_rows(const flash_ctx *c, int b, size_t *row0, int *nq, int *len) {
    *row0 = c->offs ? (size_t)c->offs[b] : (size_t)b * c->T;
    *nq = c->offs ? c->offs[b + 1] - c->offs[b] : c->T;
    *len = c->lens ? c->lens[b] : *nq;
    if (*len > *nq) *len = *nq;
}

/* Query t sees key j (j < len is the caller's): the causal decoder's rule of
 * qac_attention_causal_forward, key 0 always; bidirectional, every key, or
 * with a window those within it on either side (ModernBERT's local layers,
 * qac_attention_forward_window). */
static inline int visible(int j, int t, int causal, int window) {
    if (!causal) return window <= 0 || (j - t <= window && t - j <= window);
    if (j == 0) return 1;
    if (j > t) return 0;
    return window <= 0 || j > t - window;
}

/* A bidirectional window's first tile of keys for the queries from t (or
 * of queries for the keys from j): the tiles before it see nothing. */
static inline int window_start(int t, int causal, int window, int tile) {
    if (causal || window <= 0 || t - window <= 0) return 0;
    return (t - window) / tile * tile;
}

/* ...and its end: one past the last key (query) of index up to u it reaches. */
static inline int window_end(int u, int n, int causal, int window) {
    if (causal || window <= 0) return n;
    return u + window + 1 < n ? u + window + 1 : n;
}

/* The dropout factor of key j in row t of head h: 0 or 1/(1-p), from the
 * counters of qac_attention_forward_drop (model/layers.c). */
typedef struct att_drop {
    uint64_t stream;
    uint32_t thresh;
    float scale;
    int on;
} att_drop;

static att_drop att_drop_for(const qac_dropout *d, int b, int layer) {
    att_drop a = {0, 0, 1.0f, 0};
    if (!qac_dropout_active(d, QAC_DROP_ATT)) return a;
    uint64_t seq = d->seq_ids ? d->seq_ids[b] : (uint64_t)b;
    a.stream = qac_rng_key(d->key, seq, (uint64_t)layer, (uint64_t)QAC_DROP_ATT);
    a.thresh = (uint32_t)(d->attn * 16777216.0f);
    a.scale = 1.0f / (1.0f - d->attn);
    a.on = 1;
    return a;
}

static inline float att_factor(const att_drop *a, int h, int t, int j) {
    if (!a->on) return 1.0f;
    uint64_t ctr = ((uint64_t)h << 40) | ((uint64_t)t << 20) | (uint64_t)j;
    return (uint32_t)(qac_rng_u64(a->stream, ctr) >> 40) >= a->thresh ? a->scale : 0.0f;
}

/* Head h of part (0 Q, 1 K, 2 V) of the sequence's n rows, bias added,
 * into dst [n, hs]. */
static void load_part(float *dst, const flash_ctx *c, size_t row0, int n, int h, int part) {
    int C = c->C, hs = C / c->NH;
    const float *bias = c->qkv_b ? c->qkv_b + (size_t)part * C + (size_t)h * hs : NULL;
    for (int r = 0; r < n; r++) {
        const float *src = c->qkv + (row0 + r) * 3 * (size_t)C + (size_t)part * C + (size_t)h * hs;
        for (int d = 0; d < hs; d++)
            dst[(size_t)r * hs + d] = round_el(round_el(src[d], c->round) + (bias ? bias[d] : 0.0f), c->round);
    }
}

static inline float dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* keys a row block [q0, q1) can see: all real ones, up to the last query
 * for a causal decoder, up to the last one's window for a local layer */
static inline int key_end(const flash_ctx *c, int len, int q1) {
    if (c->causal) return q1 < len ? q1 : len;
    return window_end(q1 - 1, len, 0, c->window);
}

static void fwd_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const flash_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, bk = c->bk;
    float sl2 = LOG2E / sqrtf((float)hs);
    float *buf = c->scratch + (size_t)tid * c->stride;
    float *Q = buf, *K = Q + (size_t)T * hs, *V = K + (size_t)T * hs, *s = V + (size_t)T * hs, *acc = s + bk;
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH), nq, len;
        size_t row0;
        seq_rows(c, b, &row0, &nq, &len);
        att_drop dr = att_drop_for(c->drop, b, c->layer);
        load_part(Q, c, row0, nq, h, 0);
        load_part(K, c, row0, len, h, 1);
        load_part(V, c, row0, len, h, 2);
        for (int t = 0; t < nq; t++) {
            const float *q = Q + (size_t)t * hs;
            float m = -INFINITY, l = 0.0f, m_use = 0.0f;
            memset(acc, 0, (size_t)hs * sizeof *acc);
            /* one key tile at a time, as the kernel's inner loop */
            int kend = key_end(c, len, t + 1), kbeg = window_start(t, c->causal, c->window, bk);
            if (kbeg >= kend) kbeg = 0; /* no key: one all-masked tile from 0 */
            for (int k0 = kbeg; k0 < (kend > 0 ? kend : 1); k0 += bk) {
                int nk = kend - k0 < bk ? kend - k0 : bk;
                float mt = -INFINITY;
                for (int j = 0; j < nk; j++) {
                    int key = k0 + j;
                    s[j] = visible(key, t, c->causal, c->window) ? dot(q, K + (size_t)key * hs, hs) * sl2 : -INFINITY;
                    mt = s[j] > mt ? s[j] : mt;
                }
                float m_new = m > mt ? m : mt;
                m_use = m_new == -INFINITY ? 0.0f : m_new;
                float corr = exp2f(m - m_use);
                l *= corr;
                for (int d = 0; d < hs; d++) acc[d] *= corr;
                for (int j = 0; j < nk; j++) {
                    float p = exp2f(s[j] - m_use);
                    l += p;
                    float pd = round_el(p * att_factor(&dr, h, t, k0 + j), c->round);
                    const float *v = V + (size_t)(k0 + j) * hs;
                    for (int d = 0; d < hs; d++) acc[d] += pd * v[d];
                }
                m = m_new;
            }
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            float *o = c->out + (row0 + t) * (size_t)C + (size_t)h * hs;
            for (int d = 0; d < hs; d++) o[d] = round_el(acc[d] * inv, c->round);
            if (c->lse) c->lse[(size_t)h * c->N + row0 + t] = l > 0.0f ? m_use + log2f(l) : INFINITY;
        }
    }
}

static int rows_total(const int *offs, int B, int T) { return offs ? offs[B] : B * T; }

/* Every (sequence, head) through task, with `stride` floats of scratch a
 * thread, allocated for the call before the loop. */
static qac_status flash_run(flash_ctx *c, int B, size_t stride, qac_pool_fn task, qac_pool *pool, const char *what) {
    int nt = qac_pool_size(pool);
    c->stride = (stride + 15) & ~(size_t)15;
    if (!(c->scratch = qac_malloc_lines((size_t)nt * c->stride * sizeof(float))))
        return qac_set_error(QAC_ERR_NOMEM, "%s: cannot allocate %.1f MiB of scratch for %d threads (T=%d)", what,
                             (double)nt * c->stride * 4 / (1 << 20), nt, c->T);
    qac_pool_for(pool, (int64_t)B * c->NH, 1, task, c);
    free(c->scratch);
    return QAC_OK;
}

qac_status qac_flash_attention_forward(float *out, float *lse, const float *qkv, const float *qkv_b, const int *offs,
                                       const int *lens, int B, int T, int C, int NH, int causal, int window,
                                       const qac_dropout *drop, int layer, int bk, qac_precision round,
                                       qac_pool *pool) {
    flash_ctx c = {out, lse, NULL, qkv, qkv_b, NULL, NULL, NULL, offs, lens, drop, layer, T, C, NH,
                   rows_total(offs, B, T), causal, window, 0, bk > 0 ? bk : 64, round, NULL, 0};
    size_t hs = (size_t)(C / NH);
    return flash_run(&c, B, 3 * (size_t)T * hs + (size_t)c.bk + hs, fwd_task, pool, "fused attention");
}

/* Backward of one (sequence, head), FlashAttention-2 with the dQ pass
 * separate (no accumulation across key blocks, so the kernels need no
 * atomics and every sum has one order):
 *   D_t = dO_t . O_t;  p_tj = exp2(v_tj - lse_t);  f_tj the dropout factor;
 *   dV_j = sum_t p f dO_t;  dP_tj = f (dO_t . V_j);  dS_tj = p (dP_tj - D_t);
 *   dK_j = scale sum_t dS_tj Q_t (per key block, query tiles of bq);
 *   dQ_t = scale sum_j dS_tj K_j (per query row, key tiles of bk). */
static void bwd_task(void *vctx, int64_t begin, int64_t end, int tid) {
    const flash_ctx *c = vctx;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs), sl2 = LOG2E * scale;
    float *buf = c->scratch + (size_t)tid * c->stride;
    float *Q = buf, *K = Q + (size_t)T * hs, *V = K + (size_t)T * hs, *dO = V + (size_t)T * hs;
    float *D = dO + (size_t)T * hs, *L = D + T, *g1 = L + T, *g2 = g1 + hs;
    for (int64_t bh = begin; bh < end; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH), nq, len;
        size_t row0;
        seq_rows(c, b, &row0, &nq, &len);
        att_drop dr = att_drop_for(c->drop, b, c->layer);
        load_part(Q, c, row0, nq, h, 0);
        load_part(K, c, row0, len, h, 1);
        load_part(V, c, row0, len, h, 2);
        for (int t = 0; t < nq; t++) {
            const float *go = c->dout + (row0 + t) * (size_t)C + (size_t)h * hs;
            const float *fo = c->fout + (row0 + t) * (size_t)C + (size_t)h * hs;
            for (int d = 0; d < hs; d++) {
                dO[(size_t)t * hs + d] = round_el(go[d], c->round);
                g1[d] = round_el(fo[d], c->round);
            }
            D[t] = dot(dO + (size_t)t * hs, g1, hs);
            L[t] = c->flse[(size_t)h * c->N + row0 + t];
        }
        /* dK, dV: each key row over the query tiles */
        for (int j = 0; j < nq; j++) {
            float *dk = c->dqkv + (row0 + j) * (size_t)C3 + C + (size_t)h * hs, *dv = dk + C;
            memset(g1, 0, (size_t)hs * sizeof *g1); /* dV */
            memset(g2, 0, (size_t)hs * sizeof *g2); /* dK / scale */
            int t0 = c->causal ? j / c->bq * c->bq : window_start(j, 0, c->window, c->bq);
            int tend = c->causal ? nq : window_end(j, nq, 0, c->window);
            for (int q0 = j < len ? t0 : nq; q0 < tend; q0 += c->bq) {
                int q1 = q0 + c->bq < nq ? q0 + c->bq : nq;
                for (int t = q0; t < q1; t++) {
                    if (!visible(j, t, c->causal, c->window)) continue;
                    float p = exp2f(dot(K + (size_t)j * hs, Q + (size_t)t * hs, hs) * sl2 - L[t]);
                    float f = att_factor(&dr, h, t, j), pd = round_el(p * f, c->round);
                    float dp = dot(V + (size_t)j * hs, dO + (size_t)t * hs, hs) * f;
                    float ds = round_el(p * (dp - D[t]), c->round);
                    for (int d = 0; d < hs; d++) {
                        g1[d] += pd * dO[(size_t)t * hs + d];
                        g2[d] += ds * Q[(size_t)t * hs + d];
                    }
                }
            }
            for (int d = 0; d < hs; d++) {
                dv[d] = round_el(g1[d], c->round);
                dk[d] = round_el(g2[d] * scale, c->round);
            }
        }
        /* dQ: each query row over the key tiles */
        for (int t = 0; t < nq; t++) {
            float *dq = c->dqkv + (row0 + t) * (size_t)C3 + (size_t)h * hs;
            memset(g1, 0, (size_t)hs * sizeof *g1);
            int kend = key_end(c, len, t / c->bq * c->bq + c->bq);
            for (int k0 = window_start(t / c->bq * c->bq, c->causal, c->window, c->bk); k0 < kend; k0 += c->bk) {
                int k1 = k0 + c->bk < kend ? k0 + c->bk : kend;
                for (int j = k0; j < k1; j++) {
                    if (!visible(j, t, c->causal, c->window)) continue;
                    float p = exp2f(dot(Q + (size_t)t * hs, K + (size_t)j * hs, hs) * sl2 - L[t]);
                    float f = att_factor(&dr, h, t, j);
                    float dp = dot(dO + (size_t)t * hs, V + (size_t)j * hs, hs) * f;
                    float ds = round_el(p * (dp - D[t]), c->round);
                    for (int d = 0; d < hs; d++) g1[d] += ds * K[(size_t)j * hs + d];
                }
            }
            for (int d = 0; d < hs; d++) dq[d] = round_el(g1[d] * scale, c->round);
        }
    }
}

qac_status qac_flash_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse,
                                        const float *qkv, const float *qkv_b, const int *offs, const int *lens, int B,
                                        int T, int C, int NH, int causal, int window, const qac_dropout *drop,
                                        int layer, int bq, int bk, qac_precision round, qac_pool *pool) {
    flash_ctx c = {NULL, NULL, dqkv, qkv, qkv_b, dout, out, lse, offs, lens, drop, layer, T, C, NH,
                   rows_total(offs, B, T), causal, window, bq > 0 ? bq : 64, bk > 0 ? bk : 64, round, NULL, 0};
    size_t hs = (size_t)(C / NH);
    return flash_run(&c, B, 4 * (size_t)T * hs + 2 * (size_t)T + 2 * hs, bwd_task, pool, "fused attention backward");
}
