// The passes the encoder families beyond BERT add on the GPU: rotary
// positions (with the QKV bias added first), GeGLU, and the pre-LayerNorm
// residual step (the residual sum kept in fp32, its LayerNorm written as the
// next product's input). Contracts in bert_kernels.cuh; CPU twins in
// model/family_layers.c (qac_rope_forward, qac_geglu_forward,
// qac_add_layernorm_forward). Products and sums are rounded one by one
// (no fused multiply-add), as the CPU twins compute them, so in fp32 they
// agree bit for bit but for GELU's erf. Under QAC_FA_EMULATE only the kernels
// are compiled, for tests/gpu/test_encoder_emulated.cpp.
#include <math.h>

#include "bert_kernels.cuh"

namespace qac_fam {

#ifndef QAC_FA_EMULATE
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
#else
inline float mul(float a, float b) { return a * b; }
inline float add(float a, float b) { return a + b; }
#endif

// One thread per (row, pair): pairs [0, C/2) of the Q part, [C/2, C) of
// the K part (pair i of head h: elements h hs + i and h hs + i + hs/2);
// with a bias, thread p also adds V's element p.
template <typename E>
__global__ void rope_kernel(E *qkv, const float *bias, const int32_t *pos, const float *cs, int N, int C, int hs) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    const int r = (int)(idx / C), p = (int)(idx % C), h2 = hs / 2;
    const int part = p / (C / 2), pp = p % (C / 2), h = pp / h2, i = pp % h2;
    E *row = qkv + (size_t)r * 3 * C;
    const int c1 = part * C + h * hs + i, c2 = c1 + h2;
    float x1 = qac_to_float<E>(row[c1]), x2 = qac_to_float<E>(row[c2]);
    if (bias) {
        x1 = add(x1, bias[c1]);
        x2 = add(x2, bias[c2]);
        row[2 * C + p] = qac_from_float<E>(add(qac_to_float<E>(row[2 * C + p]), bias[2 * C + p]));
    }
    const float *co = cs + (size_t)pos[r] * hs, *si = co + h2;
    row[c1] = qac_from_float<E>(add(mul(x1, co[i]), mul(-x2, si[i])));
    row[c2] = qac_from_float<E>(add(mul(x2, co[i]), mul(x1, si[i])));
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// act [N,I] = GELU(pre[:, :I] + b) * (pre[:, I:] + b'): one thread per output.
template <typename E>
__global__ void geglu_kernel(E *act, const E *pre, const float *bias, int N, int I) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * I) return;
    const size_t r = idx / I;
    const int i = (int)(idx % I);
    const E *x = pre + r * 2 * I;
    float a = qac_to_float<E>(x[i]), g = qac_to_float<E>(x[I + i]);
    if (bias) {
        a = add(a, bias[i]);
        g = add(g, bias[I + i]);
    }
    act[idx] = qac_from_float<E>(mul(gelu_erf(a), g));
}

constexpr int ADD_LN_THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block, warps in order; every thread calls it. red: 32 floats.
__device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    const int nw = blockDim.x >> 5;
    for (int i = 0; i < nw; i++) t += red[i];
    __syncthreads();
    return t;
}

// One block per row: x += r + bias (r NULL: x as it is), then xn =
// LayerNorm(x) in the activation type (b NULL: no bias). row: the block's
// C floats of shared memory.
template <typename E>
__device__ __forceinline__ void add_ln_kernel(float *x, E *xn, const E *rin, const float *bias, const float *w,
                                              const float *b, int C, float eps, float *row, float *red) {
    const size_t r = blockIdx.x;
    float *xr = x + r * C;
    float sum = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = xr[c];
        if (rin) {
            const float p = qac_to_float<E>(rin[r * C + c]);
            v = add(v, bias ? add(p, bias[c]) : p);
            xr[c] = v;
        }
        row[c] = v;
        sum += v;
    }
    const float mean = block_sum(sum, red) / C;
    float sq = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = row[c] - mean;
        sq += d * d;
    }
    const float rstd = 1.0f / sqrtf(block_sum(sq, red) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float y = mul(mul(row[c] - mean, rstd), w[c]);
        xn[r * C + c] = qac_from_float<E>(b ? add(y, b[c]) : y);
    }
}

} // namespace qac_fam

#ifndef QAC_FA_EMULATE
using namespace qac_fam;

namespace {

template <typename E>
__global__ void __launch_bounds__(ADD_LN_THREADS)
add_ln_entry(float *x, E *xn, const E *rin, const float *bias, const float *w, const float *b, int C, float eps) {
    extern __shared__ float fam_row[];
    __shared__ float red[32];
    add_ln_kernel<E>(x, xn, rin, bias, w, b, C, eps, fam_row, red);
}

} // namespace

cudaError_t qac_k_rope(void *qkv, const float *qkv_b, const int32_t *pos, const float *cs, int N, int C, int NH,
                       qac_precision prec, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    if (NH <= 0 || C % NH || (C / NH) % 2) return cudaErrorInvalidValue;
    const unsigned grid = qac_div_up((size_t)N * C, 256);
    const int hs = C / NH;
    switch (prec) {
    case QAC_PREC_FP32: rope_kernel<float><<<grid, 256, 0, s>>>((float *)qkv, qkv_b, pos, cs, N, C, hs); break;
    case QAC_PREC_FP16: rope_kernel<__half><<<grid, 256, 0, s>>>((__half *)qkv, qkv_b, pos, cs, N, C, hs); break;
    case QAC_PREC_BF16:
        rope_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>((__nv_bfloat16 *)qkv, qkv_b, pos, cs, N, C, hs);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t qac_k_geglu(void *act, const void *pre, const float *bias, int N, int I, qac_precision prec,
                        cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const unsigned grid = qac_div_up((size_t)N * I, 256);
    switch (prec) {
    case QAC_PREC_FP32: geglu_kernel<float><<<grid, 256, 0, s>>>((float *)act, (const float *)pre, bias, N, I); break;
    case QAC_PREC_FP16: geglu_kernel<__half><<<grid, 256, 0, s>>>((__half *)act, (const __half *)pre, bias, N, I); break;
    case QAC_PREC_BF16:
        geglu_kernel<__nv_bfloat16>
            <<<grid, 256, 0, s>>>((__nv_bfloat16 *)act, (const __nv_bfloat16 *)pre, bias, N, I);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t qac_k_add_ln(float *x, void *xn, const void *r, const float *bias, const float *w, const float *b, int N,
                         int C, float eps, qac_precision prec, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const size_t smem = (size_t)C * sizeof(float);
    if (smem > 48 * 1024) return cudaErrorInvalidValue;
    switch (prec) {
    case QAC_PREC_FP32:
        add_ln_entry<float><<<N, ADD_LN_THREADS, smem, s>>>(x, (float *)xn, (const float *)r, bias, w, b, C, eps);
        break;
    case QAC_PREC_FP16:
        add_ln_entry<__half><<<N, ADD_LN_THREADS, smem, s>>>(x, (__half *)xn, (const __half *)r, bias, w, b, C, eps);
        break;
    case QAC_PREC_BF16:
        add_ln_entry<__nv_bfloat16><<<N, ADD_LN_THREADS, smem, s>>>(x, (__nv_bfloat16 *)xn,
                                                                    (const __nv_bfloat16 *)r, bias, w, b, C, eps);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
#endif
