/* The cross-encoder's classification head (cls_head.h): the pooler and the
 * classifier, forward beside backward. */
#include "cls_head.h"

#include <math.h>
#include <string.h>

/* gelu of a float, as torch's GELU (erf) or its tanh approximation */
static float gelu(float v, int tanh_form) {
    double x = v;
    if (tanh_form) return (float)(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))));
    return (float)(0.5 * x * (1.0 + erf(x * 0.7071067811865476)));
}

/* ModernBERT's prediction head on row y (its dense output, [C]): act, then
 * LayerNorm with mean and variance summed in double */
static void modernbert_norm(float *y, const qac_cls_head *h) {
    const int C = h->C;
    double mean = 0, var = 0;
    for (int o = 0; o < C; o++) mean += (y[o] = gelu(y[o], h->gelu_tanh));
    mean /= C;
    for (int o = 0; o < C; o++) var += (y[o] - mean) * (y[o] - mean);
    double inv = 1.0 / sqrt(var / C + h->norm_eps);
    for (int o = 0; o < C; o++) y[o] = (float)((y[o] - mean) * inv * h->norm_w[o] + h->norm_b[o]);
}

void qac_cls_head_forward(float *logits, float *pooled, float *kept, const float *cls, const qac_cls_head *h,
                          const qac_dropout *drop, int B) {
    const int C = h->C, NL = h->NL, modern = h->mode == QAC_CLS_HEAD_MODERNBERT;
    for (int b = 0; b < B; b++) {
        const float *x = cls + (size_t)b * C;
        float *y = pooled + (size_t)b * C;
        for (int o = 0; o < C; o++) {
            const float *w = h->pool_w + (size_t)o * C;
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)x[i] * w[i];
            y[o] = modern ? (float)(s + h->pool_b[o]) : tanhf((float)(s + h->pool_b[o]));
        }
        if (modern) modernbert_norm(y, h);
    }
    if (qac_dropout_active(drop, QAC_DROP_EMB))
        qac_dropout_forward(kept, pooled, NULL, drop, h->drop_layer, QAC_DROP_EMB, B, 1, C, NULL);
    else if (kept != pooled)
        memcpy(kept, pooled, (size_t)B * C * sizeof *kept);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < NL; k++) {
            const float *x = kept + (size_t)b * C, *w = h->w + (size_t)k * C;
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)x[i] * w[i];
            logits[(size_t)b * NL + k] = (float)(s + h->b[k]);
        }
}

void qac_cls_head_backward(float *dcls, float *dpool_w, float *dpool_b, float *dw, float *db, const float *dlogits,
                           const float *pooled, const float *kept, const float *cls, const qac_cls_head *h,
                           const qac_dropout *drop, int B, float *scratch) {
    const int C = h->C, NL = h->NL;
    /* the classifier: dw += dlogits^T kept, db += column sums, dkept = dlogits Wc */
    for (int k = 0; k < NL; k++) {
        double sb = 0;
        for (int b = 0; b < B; b++) sb += dlogits[(size_t)b * NL + k];
        db[k] += (float)sb;
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int b = 0; b < B; b++) s += (double)dlogits[(size_t)b * NL + k] * kept[(size_t)b * C + i];
            dw[(size_t)k * C + i] += (float)s;
        }
    }
    float *dpre = scratch; /* dL/d(pooler's pre-activation) [B,C] */
    for (int b = 0; b < B; b++)
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int k = 0; k < NL; k++) s += (double)dlogits[(size_t)b * NL + k] * h->w[(size_t)k * C + i];
            dpre[(size_t)b * C + i] = (float)s;
        }
    /* dropout's backward is the same mask on the gradient */
    if (qac_dropout_active(drop, QAC_DROP_EMB))
        qac_dropout_forward(dpre, dpre, NULL, drop, h->drop_layer, QAC_DROP_EMB, B, 1, C, NULL);
    for (size_t j = 0; j < (size_t)B * C; j++) dpre[j] *= 1.0f - pooled[j] * pooled[j]; /* tanh' */
    /* the pooler: dWp += dpre^T cls, dbp += column sums, dcls = dpre Wp */
    for (int o = 0; o < C; o++) {
        double sb = 0;
        for (int b = 0; b < B; b++) sb += dpre[(size_t)b * C + o];
        dpool_b[o] += (float)sb;
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int b = 0; b < B; b++) s += (double)dpre[(size_t)b * C + o] * cls[(size_t)b * C + i];
            dpool_w[(size_t)o * C + i] += (float)s;
        }
    }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int o = 0; o < C; o++) s += (double)dpre[(size_t)b * C + o] * h->pool_w[(size_t)o * C + i];
            dcls[(size_t)b * C + i] = (float)s;
        }
}
