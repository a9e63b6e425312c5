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
