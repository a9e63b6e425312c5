// Internal to kernels/: what the training kernels' files share (the warp
// and block sums, the CPU's dropout draw, GELU, the column-sum chunking and
// the launch helpers). The kernels themselves, each beside its launcher:
//   train_embed.cu      embeddings (learned or offset positions), forward
//                       and backward;
//   train_layers.cu     column sums, LayerNorm, bias + dropout +
//                       residual, dropout, the GEMM wrapper and linear layers;
//   train_fused.cu      GELU and the fused passes (bias + dropout + residual
//                       + LayerNorm, bias + GELU), forward and backward;
//   train_family.cu     ModernBERT's rotary and GeGLU backward;
//   train_attention.cu  the unfused (materialised) attention and pooling;
//   train_loss.cu       InfoNCE, the pre-training heads' losses, the gradient
//                       norm and AdamW.
// Launchers and contracts: train_kernels.cuh; CPU twins: model/layers.c,
// trainer/loss.c, trainer/optim.c.
//
// First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md; what
// changed since is checked by scripts/gpu_train_verify.sh on the next one.
#ifndef QAC_TRAIN_COMMON_CUH
#define QAC_TRAIN_COMMON_CUH

#include <math.h>
#include <string.h>

#include "train_kernels.cuh"

extern "C" {
#include "bert_cpu.h"
#include "qac_rng.h"
}

namespace {

#define KT_DISPATCH(prec, ...)                                                             \
    switch (prec) {                                                                        \
    case QAC_PREC_FP32: { typedef float E; __VA_ARGS__; } break;                           \
    case QAC_PREC_BF16: { typedef __nv_bfloat16 E; __VA_ARGS__; } break;                   \
    default: return cudaErrorInvalidValue;                                                 \
    }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide sums: every thread of the block calls them and gets the total.
// blockDim.x is a multiple of 32; red holds 32 values. The trailing barrier
// lets red be reused by the next call.
__device__ inline float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += red[i];
    __syncthreads();
    return t;
}
__device__ inline double block_sum_d(double v, double *red) {
    v = warp_sum_d(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += red[i];
    __syncthreads();
    return t;
}

// The CPU's dropout draw (model/layers.c): keep when the top 24 bits of the
// counter-th value of the stream are at or above thresh.
__device__ __forceinline__ float drop_factor(uint64_t stream, uint64_t counter, uint32_t thresh, float scale) {
    return (uint32_t)(qac_rng_u64(stream, counter) >> 40) >= thresh ? scale : 0.0f;
}
__device__ __forceinline__ uint64_t drop_stream(uint64_t key, uint64_t seq, int layer, int site) {
    return qac_rng_key(key, seq, (uint64_t)layer, (uint64_t)site);
}
// Threshold and scale exactly as the CPU computes them (float arithmetic).
struct drop_consts {
    uint32_t thresh;
    float scale;
};
inline drop_consts drop_consts_for(float p) {
    drop_consts d;
    d.thresh = (uint32_t)(p * 16777216.0f);
    d.scale = 1.0f / (1.0f - p);
    return d;
}

inline size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

inline unsigned grid_1d(size_t n, unsigned threads) {
    size_t g = (n + threads - 1) / threads;
    const size_t cap = 65535u * 64u;
    return (unsigned)(g > cap ? cap : (g ? g : 1));
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_grad(float x) {
    const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

// Column sums (bias and LayerNorm parameter gradients) run in two fixed-order
// passes: per-chunk partials of COL_ROWS rows, then the chunks in order.
constexpr int COL_ROWS = 64; // rows per partial sum
constexpr int COL_THREADS = 128;
inline int col_chunks(int N) { return (N + COL_ROWS - 1) / COL_ROWS; }

// Threads of the one-block-a-row LayerNorm kernels (plain and fused).
constexpr int LN_THREADS = 256;

} // namespace

#endif
