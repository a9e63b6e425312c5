// Training kernels, layers: column
// sums for bias and LayerNorm parameter gradients, LayerNorm forward with
// its statistics and backward, bias + dropout + residual and dropout (the
// CPU's counter-based masks), the cuBLAS GEMM wrapper and the linear layer
// forward and backward. Contracts: train_kernels.cuh; shared helpers:
// train_common.cuh; CPU twins: model/layers.c. The kernels alone compile
// for the CPU (QAC_FA_EMULATE): tests/gpu/test_train_family_emulated.cpp
// runs the LayerNorm's there.
#include "train_common.cuh"

namespace {

// ---- column reductions (bias and LayerNorm parameter gradients) ----

template <typename T>
__global__ void bias_partial_kernel(float *partial, const T *dout, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int ch = blockIdx.y;
    if (c >= C) return;
    const int r0 = ch * COL_ROWS, r1 = min(N, r0 + COL_ROWS);
    float acc = 0.f;
    for (int r = r0; r < r1; r++) acc += qac_to_float<T>(dout[(size_t)r * C + c]);
    partial[(size_t)ch * C + c] = acc;
}

__global__ void ln_partial_kernel(float *partial, const float *dout, const float *inp, const float *mean,
                                  const float *rstd, int N, int C, int nch) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int ch = blockIdx.y;
    if (c >= C) return;
    const int r0 = ch * COL_ROWS, r1 = min(N, r0 + COL_ROWS);
    float sw = 0.f, sb = 0.f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * C + c;
        const float g = dout[i];
        sw += g * ((inp[i] - mean[r]) * rstd[r]);
        sb += g;
    }
    partial[(size_t)ch * C + c] = sw;
    partial[(size_t)(nch + ch) * C + c] = sb;
}

// dst[c] += sum over the nch partials of column c, in order
__global__ void colsum_finish_kernel(float *dst, const float *partial, int nch, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int ch = 0; ch < nch; ch++) acc += partial[(size_t)ch * C + c];
    dst[c] += acc;
}


// ---- LayerNorm ----

template <typename T>
__global__ void __launch_bounds__(LN_THREADS)
ln_fwd_kernel(float *out, T *out_act, float *mean, float *rstd, const float *inp, const float *w, const float *b,
              int C, float eps) {
    __shared__ float red[32];
    const size_t r = blockIdx.x;
    const float *x = inp + r * C;
    float s = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    const float m = block_sum(s, red) / C;
    float sq = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = x[c] - m;
        sq += d * d;
    }
    const float rs = 1.0f / sqrtf(block_sum(sq, red) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float y = b ? (x[c] - m) * rs * w[c] + b[c] : (x[c] - m) * rs * w[c]; // b NULL: no bias (ModernBERT)
        out[r * C + c] = y;
        if (out_act) out_act[r * C + c] = qac_from_float<T>(y);
    }
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

// Each thread reads and writes only its own columns, so dinp may alias dout.
__global__ void __launch_bounds__(LN_THREADS)
ln_bwd_kernel(float *dinp, const float *dout, const float *inp, const float *mean, const float *rstd,
              const float *w, int C) {
    __shared__ float red[32];
    const size_t r = blockIdx.x;
    const float *g = dout + r * C, *x = inp + r * C;
    const float m = mean[r], rs = rstd[r];
    float s1 = 0.f, s2 = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float dn = g[c] * w[c];
        s1 += dn;
        s2 += dn * ((x[c] - m) * rs);
    }
    s1 = block_sum(s1, red) / C;
    s2 = block_sum(s2, red) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float nrm = (x[c] - m) * rs;
        dinp[r * C + c] = (g[c] * w[c] - s1 - nrm * s2) * rs;
    }
}

// ---- element-wise ----

// Rows [B*T, C]; element (b, t, c) draws counter t*C + c of its sequence's stream.
template <typename T>
__global__ void bias_dropout_residual_kernel(float *out, const T *proj, const float *bias, const float *resid,
                                             uint64_t key, uint64_t seq_base, uint32_t thresh, float scale,
                                             int dropping, int layer, int site, int T_, int C, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / C;
        const int c = (int)(i % C);
        float v = bias ? qac_to_float<T>(proj[i]) + bias[c] : qac_to_float<T>(proj[i]); // NULL: no bias
        if (dropping) {
            const int b = (int)(r / T_), t = (int)(r % T_);
            v = __fmul_rn(v, drop_factor(drop_stream(key, seq_base + b, layer, site), (uint64_t)t * C + c, thresh,
                                         scale));
        }
        out[i] = __fadd_rn(v, resid[i]); // no fused multiply-add: the CPU rounds the product first
    }
}

template <typename T>
__global__ void dropout_kernel(T *out, const float *inp, uint64_t key, uint64_t seq_base, uint32_t thresh,
                               float scale, int dropping, int layer, int site, int T_, int C, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = inp[i];
        if (dropping) {
            const size_t r = i / C;
            const int c = (int)(i % C), b = (int)(r / T_), t = (int)(r % T_);
            v = v * drop_factor(drop_stream(key, seq_base + b, layer, site), (uint64_t)t * C + c, thresh, scale);
        }
        out[i] = qac_from_float<T>(v);
    }
}

} // namespace

#ifndef QAC_FA_EMULATE
// ---- launchers ----

size_t qac_kt_colsum_floats(int N, int C, int ways) { return (size_t)ways * col_chunks(N) * (size_t)C; }

cudaError_t qac_kt_layernorm_fwd(float *out, void *out_act, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, int N, int C, float eps, qac_precision prec,
                                 cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    KT_DISPATCH(prec, ln_fwd_kernel<E><<<N, LN_THREADS, 0, s>>>(out, (E *)out_act, mean, rstd, inp, w, b, C, eps));
    return cudaGetLastError();
}

cudaError_t qac_kt_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, const float *w, float *partial, int N,
                                 int C, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const int nch = col_chunks(N);
    if (nch > 65535) return cudaErrorInvalidValue;
    // parameter gradients first: dinp may overwrite dout
    dim3 g(qac_div_up(C, COL_THREADS), nch);
    ln_partial_kernel<<<g, COL_THREADS, 0, s>>>(partial, dout, inp, mean, rstd, N, C, nch);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    colsum_finish_kernel<<<qac_div_up(C, COL_THREADS), COL_THREADS, 0, s>>>(dw, partial, nch, C);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (db) { // NULL: a LayerNorm without a bias
        colsum_finish_kernel<<<qac_div_up(C, COL_THREADS), COL_THREADS, 0, s>>>(db, partial + (size_t)nch * C, nch, C);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    ln_bwd_kernel<<<N, LN_THREADS, 0, s>>>(dinp, dout, inp, mean, rstd, w, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_bias_bwd(float *db, const void *dout, float *partial, int N, int C, qac_precision prec,
                            cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const int nch = col_chunks(N);
    if (nch > 65535) return cudaErrorInvalidValue;
    dim3 g(qac_div_up(C, COL_THREADS), nch);
    KT_DISPATCH(prec, bias_partial_kernel<E><<<g, COL_THREADS, 0, s>>>(partial, (const E *)dout, N, C));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    colsum_finish_kernel<<<qac_div_up(C, COL_THREADS), COL_THREADS, 0, s>>>(db, partial, nch, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_bias_dropout_residual(float *out, const void *proj, const float *bias, const float *resid,
                                         qac_kt_drop d, int layer, int site, int B, int T, int C,
                                         qac_precision prec, cudaStream_t s) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(prec, bias_dropout_residual_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>(
                          out, (const E *)proj, bias, resid, d.key, d.seq_base, k.thresh, k.scale, dropping, layer,
                          site, T, C, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_dropout(void *out, const float *inp, qac_kt_drop d, int layer, int site, int B, int T, int C,
                           qac_precision out_prec, cudaStream_t s) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(out_prec, dropout_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)out, inp, d.key, d.seq_base,
                                                                             k.thresh, k.scale, dropping, layer,
                                                                             site, T, C, n));
    return cudaGetLastError();
}

cublasStatus_t qac_kt_gemm(cublasHandle_t h, int transA, int transB, int M, int N, int K, float alpha,
                           const void *A, int lda, long long strideA, const void *B, int ldb, long long strideB,
                           float beta, void *C, int ldc, long long strideC, int batch, qac_precision ab_prec,
                           qac_precision c_prec) {
    if ((ab_prec != QAC_PREC_FP32 && ab_prec != QAC_PREC_BF16) || (c_prec != QAC_PREC_FP32 && c_prec != ab_prec))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (M <= 0 || N <= 0 || batch <= 0) return CUBLAS_STATUS_SUCCESS;
    const cudaDataType_t ab = ab_prec == QAC_PREC_FP32 ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t ct = c_prec == QAC_PREC_FP32 ? CUDA_R_32F : CUDA_R_16BF;
    const cublasComputeType_t comp = ab_prec == QAC_PREC_FP32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    // Row-major C [M,N] is column-major C^T [N,M] = op(B)^T op(A)^T: swap the operands.
    const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        return cublasGemmEx(h, opB, opA, N, M, K, &alpha, B, ab, ldb, A, ab, lda, &beta, C, ct, ldc, comp,
                            CUBLAS_GEMM_DEFAULT);
    return cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, B, ab, ldb, strideB, A, ab, lda, strideA, &beta,
                                      C, ct, ldc, strideC, batch, comp, CUBLAS_GEMM_DEFAULT);
}

#endif

// The composites call launchers only, so the launchers' CPU emulation
// (tests/gpu/train_emu_launchers.h) builds these very functions over its
// emulated launchers.
#if !defined(QAC_FA_EMULATE) || defined(QAC_KT_EMU_COMPOSITES)

// ---- composites ----

qac_status qac_kt_linear_fwd(cublasHandle_t h, void *out, const void *inp, const void *W, int N, int IC, int OC,
                             qac_precision prec) {
    QAC_CUBLAS(qac_kt_gemm(h, 0, 1, N, OC, IC, 1.0f, inp, IC, 0, W, IC, 0, 0.0f, out, OC, 0, 1, prec, prec));
    return QAC_OK;
}

qac_status qac_kt_linear_bwd(cublasHandle_t h, void *dinp, qac_precision dinp_prec, float dinp_beta, float *dW,
                             float *db, const void *dout, const void *inp, const void *W, float *partial, int N,
                             int IC, int OC, qac_precision prec, cudaStream_t s) {
    if (dW)
        QAC_CUBLAS(qac_kt_gemm(h, 1, 0, OC, IC, N, 1.0f, dout, OC, 0, inp, IC, 0, 1.0f, dW, IC, 0, 1, prec,
                               QAC_PREC_FP32));
    if (db) QAC_CU(qac_kt_bias_bwd(db, dout, partial, N, OC, prec, s));
    if (dinp)
        QAC_CUBLAS(qac_kt_gemm(h, 0, 0, N, IC, OC, 1.0f, dout, OC, 0, W, IC, 0, dinp_beta, dinp, IC, 0, 1, prec,
                               dinp_prec));
    return QAC_OK;
}
#endif
