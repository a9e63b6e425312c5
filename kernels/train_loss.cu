// Training kernels, losses and the optimiser: L2 normalisation, InfoNCE
// (scores, softmax and representation gradients in fp64, as the CPU's
// double dot products), the pre-training heads' pieces (row gathers, the
// MLM cross-entropy over the vocabulary, coCondenser's pair loss), the
// global gradient norm (two passes, fixed order) and the fused AdamW update
// with the CPU's float operations. Contracts: train_kernels.cuh; shared
// helpers: train_common.cuh; CPU twins: trainer/loss.c, trainer/optim.c,
// trainer/trainer.c.
#include "train_common.cuh"

namespace {

// ---- losses ----

__global__ void __launch_bounds__(256) l2norm_rows_kernel(float *out, const float *x, int C) {
    __shared__ double redd[32];
    const size_t r = blockIdx.x;
    const float *v = x + r * C;
    double ss = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += (double)v[c] * v[c];
    const double nn = sqrt(block_sum_d(ss, redd));
    const float inv = 1.0f / (float)(nn > 1e-12 ? nn : 1e-12);
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[r * C + c] = v[c] * inv;
}

// y = x / n: dx = (dy - y (y . dy)) / n, as qac_l2norm_backward; own columns only.
__global__ void __launch_bounds__(256) l2norm_bwd_rows_kernel(float *dx, const float *dy, const float *x, int C) {
    __shared__ double redd[32];
    const size_t r = blockIdx.x;
    const float *v = x + r * C, *g = dy + r * C;
    double ss = 0.0, dot = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        ss += (double)v[c] * v[c];
        dot += (double)v[c] * g[c];
    }
    ss = block_sum_d(ss, redd);
    const float fdot = (float)block_sum_d(dot, redd);
    float n = (float)sqrt(ss);
    n = n > 1e-12f ? n : 1e-12f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dx[r * C + c] = (g[c] - v[c] / n * (fdot / n)) / n;
}

// One block per query row; each thread reads and writes only its own
// columns of the row, so S is overwritten in place safely.
__global__ void __launch_bounds__(256) ce_rows_kernel(double *S, double *rowloss, int np, int n, double gscale) {
    __shared__ double redd[32];
    const int i = blockIdx.x;
    double *s = S + (size_t)i * np;
    double mx = -INFINITY;
    for (int j = threadIdx.x; j < np; j += blockDim.x) mx = fmax(mx, s[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) redd[threadIdx.x >> 5] = mx;
    __syncthreads();
    double bm = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) bm = fmax(bm, redd[w]);
    __syncthreads(); // redd is reused by block_sum_d
    double z = 0.0;
    for (int j = threadIdx.x; j < np; j += blockDim.x) z += exp(s[j] - bm);
    z = block_sum_d(z, redd);
    const double lse = bm + log(z);
    const int target = i * n;
    if (threadIdx.x == 0) rowloss[i] = lse - s[target];
    // thread 0 reads s[target], which another thread may own: read before any write
    __syncthreads();
    for (int j = threadIdx.x; j < np; j += blockDim.x) s[j] = (exp(s[j] - lse) - (j == target ? 1.0 : 0.0)) * gscale;
}

__global__ void f32_to_f64_kernel(double *dst, const float *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
__global__ void f64_to_f32_kernel(float *dst, const double *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = (float)src[i];
}

__global__ void mean_loss_kernel(double *loss, const double *rowloss, int nq) {
    double t = 0.0;
    for (int i = 0; i < nq; i++) t += rowloss[i];
    *loss = t / nq;
}

// ---- pre-training ----

__global__ void add_kernel(float *y, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

__global__ void gather_rows_kernel(float *out, const float *src, const int32_t *idx, int C) {
    const size_t r = blockIdx.x;
    const float *s = src + (size_t)idx[r] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[r * C + c] = s[c];
}

__global__ void scatter_add_rows_kernel(float *dst, const float *src, const int32_t *idx, int C) {
    const size_t r = blockIdx.x;
    float *d = dst + (size_t)idx[r] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) d[c] += src[r * C + c];
}

// One block per row: the logits get their bias (the CPU's gemm adds it in
// float), the loss is lse - z[label] with double sums, the gradient
// (float)(exp(z - lse) / M) less 1/M at the label, as ce_task in mlm.c.
__global__ void __launch_bounds__(256) mlm_ce_kernel(float *logits, double *rowloss, const float *bias,
                                                     const int32_t *labels, int V, int M, int grad) {
    __shared__ double redd[32];
    const size_t i = blockIdx.x;
    float *row = logits + i * V;
    double mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float z = __fadd_rn(row[j], bias[j]);
        row[j] = z;
        mx = fmax(mx, (double)z);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) redd[threadIdx.x >> 5] = mx;
    __syncthreads();
    double bm = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) bm = fmax(bm, redd[w]);
    __syncthreads(); // redd is reused by block_sum_d
    double z = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) z += exp((double)row[j] - bm);
    z = block_sum_d(z, redd);
    const double lse = bm + log(z);
    const int label = labels[i];
    if (threadIdx.x == 0) rowloss[i] = lse - (double)row[label];
    __syncthreads(); // row[label] is read above before any thread rewrites it
    if (!grad) return;
    const float inv = 1.0f / (float)M;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float gj = (float)(exp((double)row[j] - lse) / M);
        row[j] = j == label ? __fsub_rn(gj, inv) : gj;
    }
}

// One block per row i of S [n2,n2]: the diagonal excluded, target i ^ 1.
__global__ void __launch_bounds__(256) pair_ce_rows_kernel(double *S, double *rowloss, int n2) {
    __shared__ double redd[32];
    const int i = blockIdx.x;
    double *s = S + (size_t)i * n2;
    double mx = -INFINITY;
    for (int j = threadIdx.x; j < n2; j += blockDim.x)
        if (j != i) mx = fmax(mx, s[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) redd[threadIdx.x >> 5] = mx;
    __syncthreads();
    double bm = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) bm = fmax(bm, redd[w]);
    __syncthreads();
    double z = 0.0;
    for (int j = threadIdx.x; j < n2; j += blockDim.x)
        if (j != i) z += exp(s[j] - bm);
    z = block_sum_d(z, redd);
    const double lse = bm + log(z);
    const int target = i ^ 1;
    if (threadIdx.x == 0) rowloss[i] = lse - s[target];
    __syncthreads();
    for (int j = threadIdx.x; j < n2; j += blockDim.x)
        s[j] = j == i ? 0.0 : (exp(s[j] - lse) - (j == target ? 1.0 : 0.0)) / n2;
}

__global__ void div_f64_kernel(double *x, double d, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] /= d;
}

// G + G^T in place, G [n2,n2] (each pair once).
__global__ void symmetrize_kernel(double *G, int n2) {
    const size_t n = (size_t)n2 * n2;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(k / n2), j = (int)(k % n2);
        if (j < i) continue;
        const double a = G[(size_t)i * n2 + j], b = G[(size_t)j * n2 + i];
        G[(size_t)i * n2 + j] = a + b;
        G[(size_t)j * n2 + i] = a + b;
    }
}

// ---- optimiser ----

__global__ void __launch_bounds__(256) sumsq_kernel(double *partial, const float *g, size_t n) {
    __shared__ double redd[32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = block_sum_d(s, redd);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(256) clip_scale_kernel(float *scale, double *norm, const double *partial, int np,
                                                         double max_norm) {
    __shared__ double redd[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) s += partial[i];
    s = block_sum_d(s, redd);
    if (threadIdx.x == 0) {
        const double nrm = sqrt(s);
        *norm = nrm;
        float sc = 1.0f;
        if (max_norm > 0) {
            const double coef = max_norm / (nrm + 1e-6);
            if (coef < 1.0) sc = (float)coef;
        }
        *scale = sc;
    }
}

// Rounded operations (_rn) keep nvcc from fusing multiply-adds, so each
// element follows qac_adamw_update's float arithmetic step for step.
__global__ void adamw_kernel(float *p, __nv_bfloat16 *p_act, const float *g, float *m, float *v,
                             const float *scale, qac_kt_tensors tensors, qac_kt_adamw a) {
    const size_t n = tensors.bounds[tensors.n];
    const float sc = *scale;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int j = 0;
        while (j + 1 < tensors.n && i >= tensors.bounds[j + 1]) j++;
        if (tensors.decays[j] < 0) continue; // a gap that is not trained
        const float gi = __fmul_rn(g[i], sc);
        const float pi = tensors.decays[j] ? __fmul_rn(p[i], a.decay) : p[i];
        float mi = m[i];
        mi = a.w1 < 0.5f ? __fadd_rn(mi, __fmul_rn(a.w1, __fsub_rn(gi, mi)))
                         : __fsub_rn(gi, __fmul_rn(__fsub_rn(gi, mi), __fsub_rn(1.0f, a.w1)));
        const float vi = __fadd_rn(__fmul_rn(v[i], a.b2), __fmul_rn(__fmul_rn(a.w2, gi), gi));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
        const float pn = __fadd_rn(pi, __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
        p[i] = pn;
        m[i] = mi;
        v[i] = vi;
        if (p_act) p_act[i] = __float2bfloat16_rn(pn);
    }
}

} // namespace

// ---- launchers ----

cudaError_t qac_kt_l2norm_rows(float *out, const float *x, int n, int C, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    l2norm_rows_kernel<<<n, 256, 0, s>>>(out, x, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_l2norm_bwd_rows(float *dx, const float *dy, const float *x, int n, int C, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    l2norm_bwd_rows_kernel<<<n, 256, 0, s>>>(dx, dy, x, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_ce_rows(double *S, double *rowloss, int nq, int np, int n, double gscale, cudaStream_t s) {
    if (nq <= 0) return cudaSuccess;
    ce_rows_kernel<<<nq, 256, 0, s>>>(S, rowloss, np, n, gscale);
    return cudaGetLastError();
}

cudaError_t qac_kt_f32_to_f64(double *dst, const float *src, size_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    f32_to_f64_kernel<<<grid_1d(n, 256), 256, 0, s>>>(dst, src, n);
    return cudaGetLastError();
}

cudaError_t qac_kt_f64_to_f32(float *dst, const double *src, size_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    f64_to_f32_kernel<<<grid_1d(n, 256), 256, 0, s>>>(dst, src, n);
    return cudaGetLastError();
}

cudaError_t qac_kt_mean_loss(double *loss, const double *rowloss, int nq, cudaStream_t s) {
    mean_loss_kernel<<<1, 1, 0, s>>>(loss, rowloss, nq);
    return cudaGetLastError();
}

cudaError_t qac_kt_sumsq(double *partial, const float *g, size_t n, cudaStream_t s) {
    sumsq_kernel<<<QAC_KT_NORM_BLOCKS, 256, 0, s>>>(partial, g, n);
    return cudaGetLastError();
}

cudaError_t qac_kt_clip_scale(float *scale, double *norm, const double *partial, double max_norm, cudaStream_t s) {
    clip_scale_kernel<<<1, 256, 0, s>>>(scale, norm, partial, QAC_KT_NORM_BLOCKS, max_norm);
    return cudaGetLastError();
}

cudaError_t qac_kt_adamw_step(float *p, void *p_act, const float *g, float *m, float *v, const float *scale,
                              const qac_kt_tensors *tensors, qac_kt_adamw a, cudaStream_t s) {
    if (tensors->n < 1 || tensors->n > QAC_KT_MAX_TENSORS) return cudaErrorInvalidValue;
    const size_t n = tensors->bounds[tensors->n];
    if (n == 0) return cudaSuccess;
    adamw_kernel<<<grid_1d(n, 256), 256, 0, s>>>(p, (__nv_bfloat16 *)p_act, g, m, v, scale, *tensors, a);
    return cudaGetLastError();
}

cudaError_t qac_kt_clip_adamw(float *p, void *p_act, const float *g, float *m, float *v, double *partial, double *norm,
                              float *scale, const qac_kt_tensors *tensors, long step, double lr, double beta1,
                              double beta2, double eps, double wd, double max_norm, cudaStream_t s) {
    if (tensors->n < 1 || tensors->n > QAC_KT_MAX_TENSORS) return cudaErrorInvalidValue;
    // the scalars exactly as qac_adamw_update derives them
    qac_kt_adamw a;
    a.decay = (float)(1.0 - lr * wd);
    a.w1 = (float)(1.0 - beta1);
    a.b2 = (float)beta2;
    a.w2 = (float)(1.0 - beta2);
    a.step_size = (float)(-(lr / (1.0 - pow(beta1, (double)step))));
    a.bc2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step));
    a.eps = (float)eps;
    cudaError_t e = qac_kt_sumsq(partial, g, tensors->bounds[tensors->n], s);
    if (e == cudaSuccess) e = qac_kt_clip_scale(scale, norm, partial, max_norm, s);
    if (e == cudaSuccess) e = qac_kt_adamw_step(p, p_act, g, m, v, scale, tensors, a, s);
    return e;
}

// Row-major C [M,N] = alpha op(A) op(B) in fp64 (see qac_kt_gemm).
static cublasStatus_t gemm_f64(cublasHandle_t h, int transA, int transB, int M, int N, int K, double alpha,
                               const double *A, int lda, const double *B, int ldb, double *C, int ldc) {
    const double zero = 0.0;
    return cublasDgemm(h, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                       ldb, A, lda, &zero, C, ldc);
}

size_t qac_kt_infonce_scratch(int nq, int n, int C) {
    const size_t np = (size_t)nq * n, rows = (size_t)nq + np;
    // normalised rows (fp32), the rows and their gradients (fp64), scores, row losses
    return align256(rows * C * sizeof(float)) + 2 * align256(rows * C * sizeof(double)) +
           align256((size_t)nq * np * sizeof(double)) + align256((size_t)nq * sizeof(double));
}

qac_status qac_kt_infonce(cublasHandle_t h, double *loss, float *dq, float *dp, const float *q, const float *p,
                          int nq, int n, int C, float tau, qac_similarity sim, void *scratch, cudaStream_t s) {
    const int np = nq * n;
    const size_t rows = (size_t)nq + np;
    char *b = (char *)scratch;
    float *xn = (float *)b;
    b += align256(rows * C * sizeof(float));
    double *xd = (double *)b;
    b += align256(rows * C * sizeof(double));
    double *gd = (double *)b;
    b += align256(rows * C * sizeof(double));
    double *S = (double *)b;
    b += align256((size_t)nq * np * sizeof(double));
    double *rowloss = (double *)b;
    const float *qq = q, *pp = p;
    if (sim == QAC_SIM_COS) {
        QAC_CU(qac_kt_l2norm_rows(xn, q, nq, C, s));
        QAC_CU(qac_kt_l2norm_rows(xn + (size_t)nq * C, p, np, C, s));
        qq = xn, pp = xn + (size_t)nq * C;
    }
    double *qd = xd, *pd = xd + (size_t)nq * C, *gq = gd, *gp = gd + (size_t)nq * C;
    QAC_CU(qac_kt_f32_to_f64(qd, qq, (size_t)nq * C, s));
    QAC_CU(qac_kt_f32_to_f64(pd, pp, (size_t)np * C, s));
    const double itau = 1.0 / (double)tau;
    QAC_CUBLAS(gemm_f64(h, 0, 1, nq, np, C, itau, qd, C, pd, C, S, np));
    QAC_CU(qac_kt_ce_rows(S, rowloss, nq, np, n, 1.0 / nq, s));
    QAC_CU(qac_kt_mean_loss(loss, rowloss, nq, s));
    QAC_CUBLAS(gemm_f64(h, 0, 0, nq, C, np, itau, S, np, pd, C, gq, C));
    QAC_CUBLAS(gemm_f64(h, 1, 0, np, C, nq, itau, S, np, qd, C, gp, C));
    QAC_CU(qac_kt_f64_to_f32(dq, gq, (size_t)nq * C, s));
    QAC_CU(qac_kt_f64_to_f32(dp, gp, (size_t)np * C, s));
    if (sim == QAC_SIM_COS) {
        QAC_CU(qac_kt_l2norm_bwd_rows(dq, dq, q, nq, C, s));
        QAC_CU(qac_kt_l2norm_bwd_rows(dp, dp, p, np, C, s));
    }
    return QAC_OK;
}

cudaError_t qac_kt_add(float *y, const float *x, size_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    add_kernel<<<grid_1d(n, 256), 256, 0, s>>>(y, x, n);
    return cudaGetLastError();
}

cudaError_t qac_kt_gather_rows(float *out, const float *src, const int32_t *idx, int M, int C, cudaStream_t s) {
    if (M <= 0) return cudaSuccess;
    gather_rows_kernel<<<M, 128, 0, s>>>(out, src, idx, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_scatter_add_rows(float *dst, const float *src, const int32_t *idx, int M, int C,
                                    cudaStream_t s) {
    if (M <= 0) return cudaSuccess;
    scatter_add_rows_kernel<<<M, 128, 0, s>>>(dst, src, idx, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_mlm_ce(float *logits, double *rowloss, const float *bias, const int32_t *labels, int M, int V,
                          int grad, cudaStream_t s) {
    if (M <= 0) return cudaSuccess;
    mlm_ce_kernel<<<M, 256, 0, s>>>(logits, rowloss, bias, labels, V, M, grad);
    return cudaGetLastError();
}

cudaError_t qac_kt_pair_ce_rows(double *S, double *rowloss, int n2, cudaStream_t s) {
    if (n2 <= 0) return cudaSuccess;
    pair_ce_rows_kernel<<<n2, 256, 0, s>>>(S, rowloss, n2);
    return cudaGetLastError();
}

size_t qac_kt_cocondenser_scratch(int n2, int C) {
    // the rows and their gradients (fp64), the scores, the row losses
    return 2 * align256((size_t)n2 * C * sizeof(double)) + align256((size_t)n2 * n2 * sizeof(double)) +
           align256((size_t)n2 * sizeof(double));
}

qac_status qac_kt_cocondenser(cublasHandle_t h, double *loss, float *dx, const float *x, int n2, int C, float tau,
                              void *scratch, cudaStream_t s) {
    char *b = (char *)scratch;
    double *xd = (double *)b;
    b += align256((size_t)n2 * C * sizeof(double));
    double *gd = (double *)b;
    b += align256((size_t)n2 * C * sizeof(double));
    double *S = (double *)b;
    b += align256((size_t)n2 * n2 * sizeof(double));
    double *rowloss = (double *)b;
    QAC_CU(qac_kt_f32_to_f64(xd, x, (size_t)n2 * C, s));
    // S = x x^T / tau, as the CPU's d / tau (division, not a scaled product)
    QAC_CUBLAS(gemm_f64(h, 0, 1, n2, n2, C, 1.0, xd, C, xd, C, S, n2));
    div_f64_kernel<<<grid_1d((size_t)n2 * n2, 256), 256, 0, s>>>(S, (double)tau, (size_t)n2 * n2);
    QAC_CU(cudaGetLastError());
    QAC_CU(qac_kt_pair_ce_rows(S, rowloss, n2, s));
    QAC_CU(qac_kt_mean_loss(loss, rowloss, n2, s));
    // dx = (G + G^T) x / tau
    symmetrize_kernel<<<grid_1d((size_t)n2 * n2, 256), 256, 0, s>>>(S, n2);
    QAC_CU(cudaGetLastError());
    QAC_CUBLAS(gemm_f64(h, 0, 0, n2, C, n2, 1.0, S, n2, xd, C, gd, C));
    div_f64_kernel<<<grid_1d((size_t)n2 * C, 256), 256, 0, s>>>(gd, (double)tau, (size_t)n2 * C);
    QAC_CU(cudaGetLastError());
    QAC_CU(qac_kt_f64_to_f32(dx, gd, (size_t)n2 * C, s));
    return QAC_OK;
}
