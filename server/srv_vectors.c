/* Vectors as the routes hand them out. One L2 normalisation for every
 * route (/encode, /v1/embeddings, TEI's /embed): a sum of squares in
 * double, one float scale (TEI's arithmetic), and torch's
 * F.normalize rule for a vector of (near) zero length, x / max(|x|, eps):
 * a zero vector stays zero rather than becoming NaNs, which JSON cannot
 * carry. */
#include <math.h>

#include "srv_internal.h"

#define NORM_EPS 1e-12 /* torch.nn.functional.normalize's default eps */

void qac_srv_l2_normalize(float *v, int n, int dim) {
    for (int i = 0; i < n; i++) {
        float *x = v + (size_t)i * (size_t)dim;
        double ss = 0;
        for (int d = 0; d < dim; d++) ss += (double)x[d] * x[d];
        double norm = sqrt(ss);
        float scale = (float)(1.0 / (norm > NORM_EPS ? norm : NORM_EPS));
        for (int d = 0; d < dim; d++) x[d] *= scale;
    }
}
