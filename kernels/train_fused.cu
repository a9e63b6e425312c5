// Training kernels, GELU and the fused passes: bias + GELU and GELU's
// backward, then the one-read-of-the-row passes of a post-LN sublayer's
// tail (bias + dropout + residual + LayerNorm forward, and its backward
// with the LayerNorm parameters' and the bias's column partials), the
// FFN's bias + GELU and its backward with the bias gradient. Each gives
// the bits of the unfused kernels it replaces (train_layers.cu), so the
// CPU twins are theirs: model/layers.c (qac_residual_layernorm_forward /
// _backward, qac_bias_gelu_forward / _backward). Contracts:
// train_kernels.cuh; shared helpers: train_common.cuh.
//
// The kernels alone compile for the CPU (QAC_FA_EMULATE):
// tests/gpu/test_train_emulated.cpp runs them there against the twins.
#include "train_common.cuh"

namespace {

// ---- GELU ----

// The element-wise passes over [N, I] rows: a thread takes column c of
// rows y, y + gridDim.y, ... (gelu_grid), so the bias is read once and no
// element pays a 64-bit division for its column.
constexpr int GELU_THREADS = 256;

// pre = pre + bias (rounded to T), act = GELU(pre).
template <typename T>
__global__ void bias_gelu_fwd_kernel(T *pre, T *act, const float *bias, int N, int I) {
    const int c = blockIdx.x * GELU_THREADS + threadIdx.x;
    if (c >= I) return;
    const float bc = bias[c];
    for (int r = blockIdx.y; r < N; r += gridDim.y) {
        const size_t i = (size_t)r * I + c;
        const float x = qac_to_float<T>(pre[i]) + bc;
        pre[i] = qac_from_float<T>(x);
        act[i] = qac_from_float<T>(gelu_erf(x));
    }
}

template <typename T>
__global__ void gelu_bwd_kernel(T *dinp, const T *dout, const T *pre, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = qac_from_float<T>(qac_to_float<T>(dout[i]) * gelu_grad(qac_to_float<T>(pre[i])));
}

// ---- fused: bias + dropout + residual + LayerNorm, bias + GELU ----

// The fused LayerNorm kernels keep a row's K = ceil(C / LN_THREADS) columns
// per thread in registers between their passes; K is a template argument.
constexpr int FUSED_MAX_K = 16;

// Block sums of the same values as block_sum, n at a time (one pair of
// barriers for all): v[i] becomes the block's total of v[i]. red holds
// 32 n floats.
template <int NV> __device__ __forceinline__ void block_sums(float (&v)[NV], float *red) {
    const int warp = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const float w = warp_sum(v[i]);
        if ((threadIdx.x & 31) == 0) red[i * 32 + warp] = w;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NV; i++) {
        float t = 0.f;
        for (int j = 0; j < nw; j++) t += red[i * 32 + j];
        v[i] = t;
    }
    __syncthreads();
}

// One block per row: res = resid + dropout(proj + bias) as
// bias_dropout_residual_kernel, out = LayerNorm(res) as ln_fwd_kernel,
// with the same columns per thread and the same block sums: the bits of
// those two kernels in sequence, in one read of the row. bias and b may be
// NULL (none: ModernBERT's pre-norm step, x += proj, then LN2(x)).
template <typename T, int K>
__global__ void __launch_bounds__(LN_THREADS)
residual_ln_fwd_kernel(float *res, float *out, T *out_act, float *mean, float *rstd, const T *proj, const float *bias,
                       const float *resid, const float *w, const float *b, uint64_t key, uint64_t seq_base,
                       uint32_t thresh, float scale, int dropping, int layer, int site, int T_, int C, float eps) {
    __shared__ float red[32];
    const size_t r = blockIdx.x;
    const int t = (int)(r % T_);
    const uint64_t stream = dropping ? drop_stream(key, seq_base + r / T_, layer, site) : 0;
    float x[K];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = threadIdx.x + k * LN_THREADS;
        x[k] = 0.f;
        if (c < C) {
            const size_t i = r * C + c;
            float v = bias ? qac_to_float<T>(proj[i]) + bias[c] : qac_to_float<T>(proj[i]);
            if (dropping) v = __fmul_rn(v, drop_factor(stream, (uint64_t)t * C + c, thresh, scale));
            v = __fadd_rn(v, resid[i]); // the CPU rounds the product first: no fused multiply-add
            res[i] = v;
            x[k] = v;
            s += v;
        }
    }
    const float m = block_sum(s, red) / C;
    float sq = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++)
        if ((int)threadIdx.x + k * LN_THREADS < C) {
            const float d = x[k] - m;
            sq += d * d;
        }
    const float rs = 1.0f / sqrtf(block_sum(sq, red) / C + eps);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = threadIdx.x + k * LN_THREADS;
        if (c < C) {
            const float y = b ? (x[k] - m) * rs * w[c] + b[c] : (x[k] - m) * rs * w[c];
            out[r * C + c] = y;
            if (out_act) out_act[r * C + c] = qac_from_float<T>(y);
        }
    }
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

// The backward of the above (with dadd, of a pre-LN block's tail too):
// one block per COL_ROWS rows, RB rows at a time sharing their block sums'
// barriers. Per row as ln_bwd_kernel: dres = LN'(dout) (+ dadd), then
// dproj = dropout(dres) in act as dropout_kernel; per column the block's
// sums of the LayerNorm parameters' terms (as ln_partial_kernel) and of
// dproj as stored (as bias_partial_kernel) over its rows in order: the bits
// of those kernels, in one read of dout and res. dres may alias dout or
// dadd (each row is read whole before it is written).
template <typename T, int K, int RB>
__global__ void __launch_bounds__(LN_THREADS)
residual_ln_bwd_kernel(float *dres, T *dproj, float *partial, const float *dout, const float *dadd, const float *res,
                       const float *mean, const float *rstd, const float *w, uint64_t key, uint64_t seq_base,
                       uint32_t thresh, float scale, int dropping, int layer, int site, int T_, int C, int N,
                       int nch) {
    __shared__ float red[2 * RB * 32];
    const int ch = blockIdx.x, r0 = ch * COL_ROWS, r1 = min(N, r0 + COL_ROWS);
    float pw[K], pb[K], pp[K], wk[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = threadIdx.x + k * LN_THREADS;
        pw[k] = pb[k] = pp[k] = 0.f;
        wk[k] = c < C ? w[c] : 0.f;
    }
    for (int rb = r0; rb < r1; rb += RB) {
        float g[RB][K], xn[RB][K], sums[2 * RB], rsv[RB];
#pragma unroll
        for (int j = 0; j < RB; j++) {
            const int r = rb + j;
            const bool row = r < r1;
            const float m = row ? mean[r] : 0.f, rs = row ? rstd[r] : 0.f;
            float s1 = 0.f, s2 = 0.f;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = threadIdx.x + k * LN_THREADS;
                g[j][k] = xn[j][k] = 0.f;
                if (row && c < C) {
                    const size_t i = (size_t)r * C + c;
                    const float gv = dout[i];
                    const float nrm = (res[i] - m) * rs;
                    const float dn = gv * wk[k];
                    s1 += dn;
                    s2 += dn * nrm;
                    g[j][k] = gv;
                    xn[j][k] = nrm;
                }
            }
            sums[2 * j] = s1;
            sums[2 * j + 1] = s2;
            rsv[j] = rs;
        }
        block_sums(sums, red);
#pragma unroll
        for (int j = 0; j < RB; j++) {
            const int r = rb + j;
            if (r >= r1) break;
            const float s1 = sums[2 * j] / C, s2 = sums[2 * j + 1] / C;
            const int bseq = r / T_, t = r % T_;
            const uint64_t stream = dropping ? drop_stream(key, seq_base + bseq, layer, site) : 0;
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int c = threadIdx.x + k * LN_THREADS;
                if (c >= C) continue;
                const size_t i = (size_t)r * C + c;
                float v = (g[j][k] * wk[k] - s1 - xn[j][k] * s2) * rsv[j];
                if (dadd) v += dadd[i];
                dres[i] = v;
                pw[k] += g[j][k] * xn[j][k];
                pb[k] += g[j][k];
                if (dropping) v = v * drop_factor(stream, (uint64_t)t * C + c, thresh, scale);
                const T stored = qac_from_float<T>(v);
                dproj[i] = stored;
                pp[k] += qac_to_float<T>(stored);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = threadIdx.x + k * LN_THREADS;
        if (c >= C) continue;
        partial[(size_t)ch * C + c] = pw[k];
        partial[(size_t)(nch + ch) * C + c] = pb[k];
        partial[(size_t)(2 * nch + ch) * C + c] = pp[k];
    }
}

// Up to three column sums finished at once: way y adds its nch partials
// (in order) into dst.d[y] (skipped when NULL), as colsum_finish_kernel.
struct colsum_dsts {
    float *d[3];
};
__global__ void colsum_finish_ways_kernel(colsum_dsts dst, const float *partial, int nch, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, way = blockIdx.y;
    // selected, not indexed: a run-time index would put dst in local memory
    float *d = way == 0 ? dst.d[0] : way == 1 ? dst.d[1] : dst.d[2];
    if (c >= C || !d) return;
    const float *p = partial + (size_t)way * nch * C;
    float acc = 0.f;
    for (int ch = 0; ch < nch; ch++) acc += p[(size_t)ch * C + c];
    d[c] += acc;
}

// act = GELU(pre + bias), pre left as the product wrote it (rows as
// bias_gelu_fwd_kernel's).
template <typename T>
__global__ void bias_gelu_kernel(T *act, const T *pre, const float *bias, int N, int I) {
    const int c = blockIdx.x * GELU_THREADS + threadIdx.x;
    if (c >= I) return;
    const float bc = bias[c];
    for (int r = blockIdx.y; r < N; r += gridDim.y) {
        const size_t i = (size_t)r * I + c;
        act[i] = qac_from_float<T>(gelu_erf(qac_to_float<T>(pre[i]) + bc));
    }
}

// dpre = dout GELU'(pre + bias) over one column chunk per block row, and
// the chunk's column sums of dpre as stored (bias_partial_kernel's order).
// dpre may alias dout.
template <typename T>
__global__ void bias_gelu_bwd_kernel(T *dpre, float *partial, const T *dout, const T *pre, const float *bias, int N,
                                     int I) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, ch = blockIdx.y;
    if (c >= I) return;
    const float bc = bias ? bias[c] : 0.f;
    const int r0 = ch * COL_ROWS, r1 = min(N, r0 + COL_ROWS);
    float acc = 0.f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * I + c;
        const T v = qac_from_float<T>(qac_to_float<T>(dout[i]) * gelu_grad(qac_to_float<T>(pre[i]) + bc));
        dpre[i] = v;
        acc += qac_to_float<T>(v);
    }
    partial[(size_t)ch * I + c] = acc;
}

#ifndef QAC_FA_EMULATE
// The grid of the row-blocked GELU passes: column blocks by row groups.
dim3 gelu_grid(int N, int I) {
    return dim3((unsigned)qac_div_up(I, GELU_THREADS), (unsigned)(N < 65535 ? N : 65535));
}

// Columns per thread of the fused LayerNorm kernels: the template argument
// at or above ceil(C / LN_THREADS).
int fused_k(int C) {
    const int k = (C + LN_THREADS - 1) / LN_THREADS;
    return k <= 4 ? k : k <= 8 ? 8 : 16;
}

#define KT_FUSED_K(k, ...)                                                                 \
    switch (k) {                                                                           \
    case 1: { constexpr int K = 1; __VA_ARGS__; } break;                                   \
    case 2: { constexpr int K = 2; __VA_ARGS__; } break;                                   \
    case 3: { constexpr int K = 3; __VA_ARGS__; } break;                                   \
    case 4: { constexpr int K = 4; __VA_ARGS__; } break;                                   \
    case 8: { constexpr int K = 8; __VA_ARGS__; } break;                                   \
    default: { constexpr int K = 16; __VA_ARGS__; } break;                                 \
    }

} // namespace

// ---- launchers ----

int qac_kt_fused_ln_supported(int C) { return C >= 1 && C <= LN_THREADS * FUSED_MAX_K; }

cudaError_t qac_kt_bias_gelu_fwd(void *pre, void *act, const float *bias, int N, int I, qac_precision prec,
                                 cudaStream_t s) {
    if (N <= 0 || I <= 0) return cudaSuccess;
    KT_DISPATCH(prec, bias_gelu_fwd_kernel<E><<<gelu_grid(N, I), GELU_THREADS, 0, s>>>((E *)pre, (E *)act, bias, N,
                                                                                      I));
    return cudaGetLastError();
}

cudaError_t qac_kt_gelu_bwd(void *dinp, const void *dout, const void *pre, size_t n, qac_precision prec,
                            cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    KT_DISPATCH(prec, gelu_bwd_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)dinp, (const E *)dout,
                                                                          (const E *)pre, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_residual_ln_fwd(float *res, float *out, void *out_act, float *mean, float *rstd, const void *proj,
                                   const float *bias, const float *resid, const float *w, const float *b,
                                   qac_kt_drop d, int layer, int site, int B, int T, int C, float eps,
                                   qac_precision prec, cudaStream_t s) {
    const int N = B * T;
    if (N <= 0) return cudaSuccess;
    if (!qac_kt_fused_ln_supported(C)) return cudaErrorInvalidValue;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    KT_DISPATCH(prec, KT_FUSED_K(fused_k(C), residual_ln_fwd_kernel<E, K><<<N, LN_THREADS, 0, s>>>(
                                                 res, out, (E *)out_act, mean, rstd, (const E *)proj, bias, resid, w,
                                                 b, d.key, d.seq_base, k.thresh, k.scale, dropping, layer, site, T, C,
                                                 eps)));
    return cudaGetLastError();
}

cudaError_t qac_kt_residual_ln_bwd(float *dres, void *dproj, float *dw, float *db, float *dbias, const float *dout,
                                   const float *dadd, const float *res, const float *mean, const float *rstd,
                                   const float *w, float *partial, qac_kt_drop d, int layer, int site, int B, int T,
                                   int C, qac_precision prec, cudaStream_t s) {
    const int N = B * T;
    if (N <= 0) return cudaSuccess;
    if (!qac_kt_fused_ln_supported(C)) return cudaErrorInvalidValue;
    const int nch = col_chunks(N);
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    // rows batched 4 at a time while a thread's 4 K values fit in registers
    KT_DISPATCH(prec, KT_FUSED_K(fused_k(C), {
                    constexpr int RB = K <= 4 ? 4 : K <= 8 ? 2 : 1;
                    residual_ln_bwd_kernel<E, K, RB><<<nch, LN_THREADS, 0, s>>>(
                        dres, (E *)dproj, partial, dout, dadd, res, mean, rstd, w, d.key, d.seq_base, k.thresh,
                        k.scale, dropping, layer, site, T, C, N, nch);
                }));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    colsum_dsts dst = {{dw, db, dbias}};
    colsum_finish_ways_kernel<<<dim3(qac_div_up(C, COL_THREADS), 3), COL_THREADS, 0, s>>>(dst, partial, nch, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_bias_gelu(void *act, const void *pre, const float *bias, int N, int I, qac_precision prec,
                             cudaStream_t s) {
    if (N <= 0 || I <= 0) return cudaSuccess;
    KT_DISPATCH(prec, bias_gelu_kernel<E><<<gelu_grid(N, I), GELU_THREADS, 0, s>>>((E *)act, (const E *)pre, bias, N,
                                                                                  I));
    return cudaGetLastError();
}

cudaError_t qac_kt_bias_gelu_bwd(void *dpre, float *dbias, const void *dout, const void *pre, const float *bias,
                                 float *partial, int N, int I, qac_precision prec, cudaStream_t s) {
    if (N <= 0 || I <= 0) return cudaSuccess;
    const int nch = col_chunks(N);
    if (nch > 65535) return cudaErrorInvalidValue;
    dim3 g(qac_div_up(I, COL_THREADS), nch);
    KT_DISPATCH(prec, bias_gelu_bwd_kernel<E><<<g, COL_THREADS, 0, s>>>((E *)dpre, partial, (const E *)dout,
                                                                         (const E *)pre, bias, N, I));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !dbias) return e;
    colsum_dsts dst = {{dbias, NULL, NULL}};
    colsum_finish_ways_kernel<<<dim3(qac_div_up(I, COL_THREADS), 1), COL_THREADS, 0, s>>>(dst, partial, nch, I);
    return cudaGetLastError();
}
#else
} // namespace
#endif
