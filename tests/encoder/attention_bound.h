/* Worst-case bounds on the difference between two evaluations of the same
 * attention (forward and backward) that differ in summation order and in
 * the precision of their matrix-product operands: the CPU reference
 * (model/layers.c) against the fused twin (model/attention_flash.c), and
 * either against the CUDA kernels. Shared by test_attention_flash (default
 * suite) and test_gpu_attention (gpu).
 *
 * The bound of every output element is its error budget evaluated in double
 * on the actual data, standard forward error analysis (|fl(sum) - sum| <= n
 * u sum|terms| for n sequential additions at unit roundoff u):
 *   us: the two sides' fp32 unit roundoffs added (2^-24 each for the CPU;
 *       2^-22 for the GPU's tensor-core sums, which may truncate);
 *   ue: the two sides' element roundings added (2^-8 per bf16 rounding of a
 *       probability, a dS or an output, 2^-11 for fp16, 0 in fp32);
 *   ae: the absolute part of those roundings (fp16's subnormals below
 *       2^-14 are spaced 2^-24 apart: 2^-25 per rounding; 0 for bf16,
 *       whose exponent range is fp32's).
 * For query row i with a_ij = |q_i||k_j| / sqrt(hs) summed elementwise:
 *   the scores differ by at most hs us max_j a_ij on the two sides together,
 *   and a softmax turns a score error e into a relative probability error of
 *   at most 2e (numerator and normaliser); the normaliser adds T us, the
 *   online rescaling 3 us per key tile, exp, division and the base-2 scaling
 *   8 us. So every probability is off by at most rho_i p_ij with
 *     rho_i = 2 (hs + 2) us max_j a_ij + (T + 3 tiles + 8) us.
 *   out_id = sum_j p f v:   (rho_i + T us + ue) sum_j p_ij f_ij |v_jd| + ue |out_id|
 *                           + ae (sum_j f_ij |v_jd| + 1)
 *   lse_i (log2):           log2(e) rho_i + 4 us |lse_i|
 *   D_i = dO_i . out_i:     (rho_i + (T + 2 hs) us + 2 ue) W_i + sum_d |dO_id| errO_id,
 *                           W_i = sum_j p f |dO_i||v_j| (errO: an error already in out)
 *   dS_ij = p (f dP - D):   (rho_i + (hs + 4) us + ue) p (f |dO_i||v_j| + |D_i|) + p dD_i + ae
 *   dQ_id, dK_jd:           scale sum (dS error + (T us + ue) |dS| magnitude) |k_jd| (|q_id|) + ae
 *   dV_jd = sum_i p f dO:   (rho_i + T us + 2 ue) sum_i p_ij f_ij |dO_id| + ae (sum_i f_ij |dO_id| + 1)
 * plus an underflow floor of 1e-30 (exp2 flushing tiny probabilities). */
#ifndef QAC_ATTENTION_BOUND_H
#define QAC_ATTENTION_BOUND_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_rng.h"

typedef struct att_shape {
    int B, T, C, NH, causal, window;
    const int *offs, *lens; /* offs NULL: padded [B,T]; lens NULL: every row of a sequence is a key */
    const qac_dropout *drop;
    int layer;
    int tiles; /* the most key tiles any side's online softmax takes per row */
} att_shape;

#define ATT_BOUND_FLOOR 1e-30

static inline void att_seq(const att_shape *s, int b, size_t *row0, int *nq, int *len) {
    *row0 = s->offs ? (size_t)s->offs[b] : (size_t)b * s->T;
    *nq = s->offs ? s->offs[b + 1] - s->offs[b] : s->T;
    *len = s->lens ? s->lens[b] : *nq;
}

static inline size_t att_rows(const att_shape *s) { return s->offs ? (size_t)s->offs[s->B] : (size_t)s->B * s->T; }

static inline int att_visible(const att_shape *s, int j, int t, int len) {
    if (j >= len) return 0;
    if (!s->causal) return s->window <= 0 || (j - t <= s->window && t - j <= s->window); /* a local layer */
    if (j == 0) return 1;
    if (j > t) return 0;
    return s->window <= 0 || j > t - s->window;
}

/* qac_attention_forward_drop's mask (model/layers.c): 0 or 1/(1-p) */
static inline double att_f(const att_shape *s, int b, int h, int t, int j) {
    const qac_dropout *d = s->drop;
    if (!d || d->attn <= 0.0f) return 1.0;
    uint64_t seq = d->seq_ids ? d->seq_ids[b] : (uint64_t)b;
    uint64_t st = qac_rng_key(d->key, seq, (uint64_t)s->layer, (uint64_t)QAC_DROP_ATT);
    uint64_t ctr = ((uint64_t)h << 40) | ((uint64_t)t << 20) | (uint64_t)j;
    uint32_t thresh = (uint32_t)(d->attn * 16777216.0f);
    return (uint32_t)(qac_rng_u64(st, ctr) >> 40) >= thresh ? (double)(1.0f / (1.0f - d->attn)) : 0.0;
}

/* One (sequence, head) in double: exact probabilities p [nq, len] with
 * the dropout factors f, and rho [nq]. */
typedef struct att_head {
    int nq, len, hs;
    size_t row0;
    const float *qkv; /* row r, part x, element d: qkv[(row0 + r) * 3C + x*C + h*hs + d] */
    int C, h;
    double *p, *f, *rho;
} att_head;

static inline double att_e(const att_head *a, int r, int part, int d) {
    return a->qkv[(a->row0 + r) * 3 * (size_t)a->C + (size_t)part * a->C + (size_t)a->h * a->hs + d];
}

static void att_head_fill(att_head *a, const att_shape *s, const float *qkv, int b, int h, double us) {
    att_seq(s, b, &a->row0, &a->nq, &a->len);
    a->hs = s->C / s->NH;
    a->C = s->C;
    a->h = h;
    a->qkv = qkv;
    int nq = a->nq, len = a->len, hs = a->hs;
    double scale = 1.0 / sqrt((double)hs);
    a->p = (double *)calloc((size_t)nq * (len > 0 ? len : 1), sizeof *a->p);
    a->f = (double *)calloc((size_t)nq * (len > 0 ? len : 1), sizeof *a->f);
    a->rho = (double *)calloc((size_t)(nq > 0 ? nq : 1), sizeof *a->rho);
    for (int i = 0; i < nq; i++) {
        double mx = -INFINITY, amax = 0, z = 0;
        for (int j = 0; j < len; j++) {
            if (!att_visible(s, j, i, len)) continue;
            double dotv = 0, ab = 0;
            for (int d = 0; d < hs; d++) {
                dotv += att_e(a, i, 0, d) * att_e(a, j, 1, d);
                ab += fabs(att_e(a, i, 0, d) * att_e(a, j, 1, d));
            }
            a->p[(size_t)i * len + j] = dotv * scale;
            if (dotv * scale > mx) mx = dotv * scale;
            if (ab * scale > amax) amax = ab * scale;
        }
        for (int j = 0; j < len; j++) {
            double *pp = &a->p[(size_t)i * len + j];
            *pp = att_visible(s, j, i, len) ? exp(*pp - mx) : 0.0;
            z += *pp;
            a->f[(size_t)i * len + j] = att_f(s, b, h, i, j);
        }
        for (int j = 0; j < len; j++) a->p[(size_t)i * len + j] /= z;
        a->rho[i] = 2.0 * (hs + 2) * us * amax + (s->T + 3.0 * s->tiles + 8.0) * us;
    }
}

static void att_head_free(att_head *a) { free(a->p), free(a->f), free(a->rho); }

/* bO [N,C] and bL [NH,N] (may be NULL) bound |out_a - out_b|, |lse_a -
 * lse_b|; out and lse are one side's results (for the rounding terms). */
static void att_bound_forward(float *bO, float *bL, const att_shape *s, const float *qkv, const float *out,
                              const float *lse, double us, double ue, double ae) {
    size_t N = att_rows(s);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++) {
            att_head a;
            att_head_fill(&a, s, qkv, b, h, us);
            for (int i = 0; i < a.nq; i++) {
                size_t r = a.row0 + i;
                for (int d = 0; d < a.hs; d++) {
                    double m = 0, mf = 0;
                    for (int j = 0; j < a.len; j++) {
                        m += a.p[(size_t)i * a.len + j] * a.f[(size_t)i * a.len + j] * fabs(att_e(&a, j, 2, d));
                        mf += a.f[(size_t)i * a.len + j] * fabs(att_e(&a, j, 2, d));
                    }
                    size_t o = r * s->C + (size_t)h * a.hs + d;
                    bO[o] = (float)((a.rho[i] + s->T * us + ue) * m + ue * fabs(out[o]) + ae * (mf + 1) +
                                    ATT_BOUND_FLOOR);
                }
                if (bL) bL[(size_t)h * N + r] = (float)(1.4426950408889634 * a.rho[i] + 4 * us * fabs(lse[(size_t)h * N + r]));
            }
            att_head_free(&a);
        }
}

/* bd [N,3C] bounds |dqkv_a - dqkv_b| given the same dout [N,C] on both
 * sides; out [N,C] is what the sides read as the forward's output (a fused
 * side computes D from it) and errO [N,C] (may be NULL) a bound on its own
 * error, for a side that computes D from the probabilities instead. */
static void att_bound_backward(float *bd, const att_shape *s, const float *qkv, const float *dout, const float *out,
                               const float *errO, double us, double ue, double ae) {
    int C = s->C, hs = C / s->NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++) {
            att_head a;
            att_head_fill(&a, s, qkv, b, h, us);
            int nq = a.nq, len = a.len;
            size_t nn = (size_t)nq * (len > 0 ? len : 1);
            double *adp = (double *)malloc(nn * sizeof *adp), *eds = (double *)malloc(nn * sizeof *eds);
            double *mds = (double *)malloc(nn * sizeof *mds);
            for (int i = 0; i < nq; i++) {
                const float *go = dout + (a.row0 + i) * C + (size_t)h * hs;
                const float *fo = out + (a.row0 + i) * C + (size_t)h * hs;
                double W = 0, D = 0, eo = 0;
                for (int d = 0; d < hs; d++) {
                    D += (double)go[d] * fo[d];
                    if (errO) eo += fabs(go[d]) * errO[(a.row0 + i) * C + (size_t)h * hs + d];
                }
                for (int j = 0; j < len; j++) {
                    double m = 0;
                    for (int d = 0; d < hs; d++) m += fabs(go[d] * att_e(&a, j, 2, d));
                    adp[(size_t)i * len + j] = m;
                    W += a.p[(size_t)i * len + j] * a.f[(size_t)i * len + j] * m;
                }
                double dD = (a.rho[i] + (s->T + 2.0 * hs) * us + 2 * ue) * W + eo;
                for (int j = 0; j < len; j++) {
                    size_t ij = (size_t)i * len + j;
                    double p = a.p[ij];
                    mds[ij] = p * (a.f[ij] * adp[ij] + fabs(D));
                    eds[ij] = (a.rho[i] + (hs + 4.0) * us + ue) * mds[ij] + p * dD + ae;
                }
            }
            for (int i = 0; i < nq; i++) /* dQ */
                for (int d = 0; d < hs; d++) {
                    double m = 0;
                    for (int j = 0; j < len; j++) {
                        size_t ij = (size_t)i * len + j;
                        m += (eds[ij] + (s->T * us + ue) * mds[ij]) * fabs(att_e(&a, j, 1, d));
                    }
                    bd[(a.row0 + i) * 3 * (size_t)C + (size_t)h * hs + d] = (float)(scale * m + ae + ATT_BOUND_FLOOR);
                }
            for (int j = 0; j < nq; j++) /* dK, dV: keys past len get none */
                for (int d = 0; d < hs; d++) {
                    double mk = 0, mv = 0, mf = 0;
                    for (int i = 0; j < len && i < nq; i++) {
                        size_t ij = (size_t)i * len + j;
                        const float *go = dout + (a.row0 + i) * C + (size_t)h * hs;
                        mk += (eds[ij] + (s->T * us + ue) * mds[ij]) * fabs(att_e(&a, i, 0, d));
                        mv += (a.rho[i] + s->T * us + 2 * ue) * a.p[ij] * a.f[ij] * fabs(go[d]);
                        mf += a.f[ij] * fabs(go[d]);
                    }
                    double ak = j < len ? ae : 0; /* padded keys: exact zeros on both sides */
                    size_t o = (a.row0 + j) * 3 * (size_t)C + (size_t)h * hs + d;
                    bd[o + C] = (float)(scale * mk + ak + ATT_BOUND_FLOOR);
                    bd[o + 2 * (size_t)C] = (float)(mv + ak * (mf + 1) + ATT_BOUND_FLOOR);
                }
            free(adp), free(eds), free(mds);
            att_head_free(&a);
        }
}

/* The worst |a - b| / bound over n elements (+inf on a NaN); *max_abs the
 * largest |a - b|. */
static double att_worst(const float *a, const float *b, const float *bound, size_t n, double *max_abs) {
    double w = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) {
            if (max_abs) *max_abs = INFINITY;
            return INFINITY;
        }
        if (isinf(a[i]) && a[i] == b[i]) continue; /* a row that sees no key: lse +inf on both sides */
        double d = fabs((double)a[i] - b[i]), r = d / bound[i];
        if (d > mx) mx = d;
        if (r > w) w = r;
    }
    if (max_abs) *max_abs = mx;
    return w;
}

#endif
