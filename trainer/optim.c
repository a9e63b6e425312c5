/* AdamW and learning-rate schedules over flat parameter blocks, following
 * torch.optim.AdamW (single-tensor path) and transformers' schedules
 * operation for operation, so trajectories match PyTorch's. */
#include <math.h>

#include "qac_train.h"

double qac_lr_at(qac_schedule s, double base_lr, long step, long warmup, long total) {
    if (step < warmup) return base_lr * (double)step / (double)(warmup > 1 ? warmup : 1);
    if (s == QAC_SCHED_CONSTANT) return base_lr;
    double progress = (double)(step - warmup) / (double)(total - warmup > 1 ? total - warmup : 1);
    if (s == QAC_SCHED_COSINE) {
        double f = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress));
        return base_lr * (f > 0 ? f : 0);
    }
    double f = (double)(total - step) / (double)(total - warmup > 1 ? total - warmup : 1);
    return base_lr * (f > 0 ? f : 0);
}

void qac_adamw_update(float *p, const float *g, float *m, float *v, size_t n, long t, double lr, double beta1,
                      double beta2, double eps, double wd) {
    /* scalars in double as Python computes them, applied in float as the
     * tensor kernels do */
    float decay = (float)(1.0 - lr * wd), w1 = (float)(1.0 - beta1), b2 = (float)beta2, w2 = (float)(1.0 - beta2);
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    float step_size = (float)(-(lr / bc1)), bc2_sqrt = (float)sqrt(bc2), feps = (float)eps;
    for (size_t i = 0; i < n; i++) {
        float pi = wd != 0 ? p[i] * decay : p[i];
        float gi = g[i], mi = m[i];
        /* torch.lerp with weight < 0.5: self + w (end - self) */
        mi = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1);
        float vi = v[i] * b2 + w2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + feps;
        p[i] = pi + step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
}
