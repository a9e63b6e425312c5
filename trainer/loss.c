/* Contrastive losses over pooled representations. Each returns its value
 * and dL/d(representation), so a plain step and GradCache share them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_train.h"

static double dot(const float *a, const float *b, int C) {
    double s = 0;
    for (int i = 0; i < C; i++) s += (double)a[i] * b[i];
    return s;
}

/* rows of x scaled to unit length (F.normalize, eps 1e-12) */
static void normalize_rows(float *out, const float *x, int n, int C) {
    for (int r = 0; r < n; r++) {
        const float *v = x + (size_t)r * C;
        double nn = sqrt(dot(v, v, C));
        float inv = 1.0f / (float)(nn > 1e-12 ? nn : 1e-12);
        for (int i = 0; i < C; i++) out[(size_t)r * C + i] = v[i] * inv;
    }
}

qac_status qac_infonce(double *loss, float *dq, float *dp, const float *q, const float *p, int nq, int n, int C,
                       float tau, qac_similarity sim) {
    if (nq < 1 || n < 1 || C < 1 || !(tau > 0))
        return qac_set_error(QAC_ERR_INVALID, "infonce: bad shape or temperature (nq=%d n=%d C=%d tau=%g)", nq, n,
                             C, (double)tau);
    int np = nq * n;
    size_t nf = sim == QAC_SIM_COS ? (size_t)(nq + np) * C : 0;
    float *norm = nf ? malloc(nf * sizeof *norm) : NULL;
    float *gq = dq ? calloc((size_t)(nq + np) * C, sizeof *gq) : NULL;
    double *s = malloc((size_t)np * sizeof *s);
    if ((nf && !norm) || (dq && !gq) || !s) {
        free(norm), free(gq), free(s);
        return qac_set_error(QAC_ERR_NOMEM, "infonce: out of memory");
    }
    const float *qq = q, *pp = p;
    if (norm) {
        normalize_rows(norm, q, nq, C);
        normalize_rows(norm + (size_t)nq * C, p, np, C);
        qq = norm;
        pp = norm + (size_t)nq * C;
    }
    float *gp = gq ? gq + (size_t)nq * C : NULL;
    double total = 0;
    for (int i = 0; i < nq; i++) {
        const float *qi = qq + (size_t)i * C;
        double mx = -INFINITY;
        for (int j = 0; j < np; j++) {
            s[j] = dot(qi, pp + (size_t)j * C, C) / tau;
            mx = s[j] > mx ? s[j] : mx;
        }
        double z = 0;
        for (int j = 0; j < np; j++) z += exp(s[j] - mx);
        double lse = mx + log(z);
        total += lse - s[i * n];
        if (!gq) continue;
        /* dL/ds_ij = (softmax_ij - [j = i n]) / nq; s = q.p / tau */
        for (int j = 0; j < np; j++) {
            double g = (exp(s[j] - lse) - (j == i * n)) / nq / tau;
            const float *pj = pp + (size_t)j * C;
            float *gqi = gq + (size_t)i * C, *gpj = gp + (size_t)j * C;
            for (int k = 0; k < C; k++) {
                gqi[k] += (float)(g * pj[k]);
                gpj[k] += (float)(g * qi[k]);
            }
        }
    }
    *loss = total / nq;
    if (gq) {
        if (norm) {
            for (int r = 0; r < nq; r++) qac_l2norm_backward(dq + (size_t)r * C, gq + (size_t)r * C, q + (size_t)r * C, C);
            for (int r = 0; r < np; r++) qac_l2norm_backward(dp + (size_t)r * C, gp + (size_t)r * C, p + (size_t)r * C, C);
        } else {
            memcpy(dq, gq, (size_t)nq * C * sizeof *dq);
            memcpy(dp, gp, (size_t)np * C * sizeof *dp);
        }
    }
    free(norm), free(gq), free(s);
    return QAC_OK;
}

/* CE of anchor a over candidates c[0..m) (target t) with weight w: adds
 * w * loss to *total and w * dL/d(anchor), dL/d(candidate j) into ga, gc[j] */
static void ce_row(double *total, float *ga, float **gc, const float *a, const float *const *c, int m, int t, int C,
                   double w, double *s) {
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < m; j++) {
        s[j] = dot(a, c[j], C);
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < m; j++) z += exp(s[j] - mx);
    double lse = mx + log(z);
    *total += w * (lse - s[t]);
    if (!ga) return;
    for (int j = 0; j < m; j++) {
        double g = w * (exp(s[j] - lse) - (j == t));
        for (int k = 0; k < C; k++) {
            ga[k] += (float)(g * c[j][k]);
            gc[j][k] += (float)(g * a[k]);
        }
    }
}

qac_status qac_pair_loss(double *loss, float *dq, float *dp, const float *q, const float *p, int nq, int n, int C,
                         float alpha) {
    if (nq < 1 || n < 1 || C < 1 || !(alpha >= 0 && alpha <= 1))
        return qac_set_error(QAC_ERR_INVALID, "pair loss: bad shape or alpha (nq=%d n=%d alpha=%g)", nq, n,
                             (double)alpha);
    int np = nq * n, m = np; /* both sides have np candidates: np passages, or nq queries + np - nq negatives */
    const float **cand = malloc((size_t)m * sizeof *cand);
    float **grad = malloc((size_t)m * sizeof *grad);
    double *s = malloc((size_t)m * sizeof *s);
    if (!cand || !grad || !s) {
        free(cand), free(grad), free(s);
        return qac_set_error(QAC_ERR_NOMEM, "pair loss: out of memory");
    }
    if (dq) memset(dq, 0, (size_t)nq * C * sizeof *dq), memset(dp, 0, (size_t)np * C * sizeof *dp);
    double total = 0;
    /* L_q: every passage of the batch */
    for (int j = 0; j < np; j++) cand[j] = p + (size_t)j * C, grad[j] = dp ? dp + (size_t)j * C : NULL;
    for (int i = 0; i < nq; i++)
        ce_row(&total, dq ? dq + (size_t)i * C : NULL, grad, q + (size_t)i * C, cand, np, i * n, C,
               (1.0 - alpha) / nq, s);
    /* L_p: the queries, then the negative passages */
    int k = 0;
    for (int i = 0; i < nq; i++) cand[k] = q + (size_t)i * C, grad[k++] = dq ? dq + (size_t)i * C : NULL;
    for (int j = 0; j < np; j++)
        if (j % n) cand[k] = p + (size_t)j * C, grad[k++] = dp ? dp + (size_t)j * C : NULL;
    for (int i = 0; i < nq; i++)
        ce_row(&total, dp ? dp + (size_t)i * n * C : NULL, grad, p + (size_t)i * n * C, cand, k, i, C,
               (double)alpha / nq, s);
    *loss = total;
    free(cand), free(grad), free(s);
    return QAC_OK;
}
