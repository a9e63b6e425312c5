/* coCondenser (TRAINING.md): the symmetric in-batch contrastive loss and
 * the Condenser head's input wiring. The head's layers are ordinary BERT
 * layers (qac_bert_layers_forward/backward) and its MLM goes through the
 * tied head of mlm.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qac_heads.h"

qac_status qac_cocondenser_loss(double *loss, float *dx, const float *x, int n2, int C, float tau) {
    if (n2 < 2 || n2 % 2 || C < 1 || !(tau > 0))
        return qac_set_error(QAC_ERR_INVALID, "cocondenser loss: need an even number of representations (got %d)", n2);
    double *s = malloc((size_t)n2 * n2 * sizeof *s);
    if (!s) return qac_set_error(QAC_ERR_NOMEM, "cocondenser loss: out of memory");
    for (int i = 0; i < n2; i++)
        for (int j = 0; j < n2; j++) {
            double d = 0;
            for (int k = 0; k < C; k++) d += (double)x[(size_t)i * C + k] * x[(size_t)j * C + k];
            s[(size_t)i * n2 + j] = d / tau;
        }
    double total = 0;
    for (int i = 0; i < n2; i++) {
        double *row = s + (size_t)i * n2, mx = -INFINITY, z = 0;
        int target = i ^ 1;
        for (int j = 0; j < n2; j++)
            if (j != i) mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < n2; j++)
            if (j != i) z += exp(row[j] - mx);
        double lse = mx + log(z);
        total += lse - row[target];
        /* row now holds dL/dS_ij = (softmax - onehot) / n2, 0 on the diagonal */
        for (int j = 0; j < n2; j++) row[j] = j == i ? 0 : (exp(row[j] - lse) - (j == target)) / n2;
    }
    *loss = total / n2;
    if (dx) {
        /* S_ij = x_i . x_j / tau: dx_i = sum_j (G_ij + G_ji) x_j / tau */
        for (int i = 0; i < n2; i++) {
            float *d = dx + (size_t)i * C;
            for (int k = 0; k < C; k++) {
                double acc = 0;
                for (int j = 0; j < n2; j++)
                    acc += (s[(size_t)i * n2 + j] + s[(size_t)j * n2 + i]) * x[(size_t)j * C + k];
                d[k] = (float)(acc / tau);
            }
        }
    }
    free(s);
    return QAC_OK;
}

void qac_condenser_input(float *x, const float *cls, const float *mid, int B, int T, int C) {
    size_t row = (size_t)T * C;
    for (int b = 0; b < B; b++) {
        memcpy(x + b * row, cls + (size_t)b * C, (size_t)C * sizeof *x);
        memcpy(x + b * row + C, mid + b * row + C, (row - C) * sizeof *x);
    }
}

void qac_condenser_input_backward(float *dcls, float *dmid, const float *dx, int B, int T, int C) {
    size_t row = (size_t)T * C;
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < C; k++) dcls[(size_t)b * C + k] += dx[b * row + k];
        for (size_t k = C; k < row; k++) dmid[b * row + k] += dx[b * row + k];
    }
}
