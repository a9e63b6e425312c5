// Training kernels: the forward pieces that keep what backward needs, each
// layer's backward beside them, the InfoNCE loss, the gradient norm and the
// fused AdamW update. Launchers and contracts: train_kernels.cuh; CPU twins:
// model/layers.c, trainer/loss.c, trainer/optim.c.
//
// First run on a GPU (an H200) on 2026-11-26: see bench/RESULTS.md; what
// changed since is checked by scripts/gpu_train_verify.sh on the next one.
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
__device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += red[i];
    __syncthreads();
    return t;
}
__device__ double block_sum_d(double v, double *red) {
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
drop_consts drop_consts_for(float p) {
    drop_consts d;
    d.thresh = (uint32_t)(p * 16777216.0f);
    d.scale = 1.0f / (1.0f - p);
    return d;
}

size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

unsigned grid_1d(size_t n, unsigned threads) {
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

// ---- embeddings ----

__global__ void embed_fwd_kernel(float *emb, const int32_t *ids, const int32_t *types, const float *word,
                                 const float *pos, const float *type, int T_, int C) {
    const size_t r = blockIdx.x;
    const float *w = word + (size_t)ids[r] * C;
    const float *p = pos + (size_t)(r % T_) * C;
    const float *t = type + (size_t)(types ? types[r] : 0) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) emb[r * C + c] = w[c] + p[c] + t[c];
}

// one thread per (t, c): the sequences' rows in order, as the CPU adds them
__global__ void pos_bwd_kernel(float *dpos, const float *dout, int B, int T_, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T_ * C) return;
    float acc = dpos[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * T_ * C + i];
    dpos[i] = acc;
}

// partial[seg, c] = sum of the segment's rows (in order)
__global__ void scatter_partial_kernel(float *partial, const float *dout, const int32_t *rows,
                                       const int32_t *seg_begin, int C) {
    const int seg = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int i = seg_begin[seg]; i < seg_begin[seg + 1]; i++) acc += dout[(size_t)rows[i] * C + c];
    partial[(size_t)seg * C + c] = acc;
}

// dst[key, c] += the key's segments in order
__global__ void scatter_finish_kernel(float *dst, const float *partial, const int32_t *key_seg,
                                      const int32_t *keys, int C) {
    const int k = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (int s = key_seg[k]; s < key_seg[k + 1]; s++) acc += partial[(size_t)s * C + c];
    dst[(size_t)keys[k] * C + c] += acc;
}

// ---- column reductions (bias and LayerNorm parameter gradients) ----

constexpr int COL_ROWS = 64;    // rows per partial sum
constexpr int COL_THREADS = 128;

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

int col_chunks(int N) { return (N + COL_ROWS - 1) / COL_ROWS; }

// ---- LayerNorm ----

constexpr int LN_THREADS = 256;

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
        const float y = (x[c] - m) * rs * w[c] + b[c];
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

template <typename T>
__global__ void bias_gelu_fwd_kernel(T *pre, T *act, const float *bias, size_t n, int I) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float x = qac_to_float<T>(pre[i]) + bias[i % I];
        pre[i] = qac_from_float<T>(x);
        act[i] = qac_from_float<T>(gelu_erf(x));
    }
}

template <typename T>
__global__ void gelu_bwd_kernel(T *dinp, const T *dout, const T *pre, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = qac_from_float<T>(qac_to_float<T>(dout[i]) * gelu_grad(qac_to_float<T>(pre[i])));
}

// Rows [B*T, C]; element (b, t, c) draws counter t*C + c of its sequence's stream.
template <typename T>
__global__ void bias_dropout_residual_kernel(float *out, const T *proj, const float *bias, const float *resid,
                                             uint64_t key, uint64_t seq_base, uint32_t thresh, float scale,
                                             int dropping, int layer, int site, int T_, int C, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / C;
        const int c = (int)(i % C);
        float v = qac_to_float<T>(proj[i]) + bias[c];
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
// those two kernels in sequence, in one read of the row.
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
            float v = qac_to_float<T>(proj[i]) + bias[c];
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
        if (threadIdx.x + k * LN_THREADS < C) {
            const float d = x[k] - m;
            sq += d * d;
        }
    const float rs = 1.0f / sqrtf(block_sum(sq, red) / C + eps);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = threadIdx.x + k * LN_THREADS;
        if (c < C) {
            const float y = (x[k] - m) * rs * w[c] + b[c];
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
    float *d = dst.d[way];
    if (c >= C || !d) return;
    const float *p = partial + (size_t)way * nch * C;
    float acc = 0.f;
    for (int ch = 0; ch < nch; ch++) acc += p[(size_t)ch * C + c];
    d[c] += acc;
}

// act = GELU(pre + bias), pre left as the product wrote it.
template <typename T>
__global__ void bias_gelu_kernel(T *act, const T *pre, const float *bias, size_t n, int I) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        act[i] = qac_from_float<T>(gelu_erf(qac_to_float<T>(pre[i]) + bias[i % I]));
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

// ---- attention ----

// Iterates in the [B,T,3C] order so reads are coalesced; head h of part p
// goes to dst_p[((b*NH + h)*T + t)*hs + d].
template <typename T>
__global__ void qkv_split_kernel(T *q, T *k, T *v, const T *qkv, const float *bias, int T_, int C, int NH,
                                 size_t n) {
    const int hs = C / NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / (3 * (size_t)C);
        const int col = (int)(i % (3 * (size_t)C));
        const int part = col / C, rem = col % C, h = rem / hs, d = rem % hs;
        const size_t b = r / T_, t = r % T_;
        T *dst = part == 0 ? q : part == 1 ? k : v;
        const float val = qac_to_float<T>(qkv[i]) + (bias ? bias[col] : 0.f);
        dst[((b * NH + h) * T_ + t) * hs + d] = qac_from_float<T>(val);
    }
}

template <typename T>
__global__ void qkv_merge_kernel(T *dqkv, const T *dq, const T *dk, const T *dv, int T_, int C, int NH,
                                 size_t n) {
    const int hs = C / NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / (3 * (size_t)C);
        const int col = (int)(i % (3 * (size_t)C));
        const int part = col / C, rem = col % C, h = rem / hs, d = rem % hs;
        const size_t b = r / T_, t = r % T_;
        const T *src = part == 0 ? dq : part == 1 ? dk : dv;
        dqkv[i] = src[((b * NH + h) * T_ + t) * hs + d];
    }
}

// merge = 0: dst [B,NH,T,hs] from src [B,T,C]; merge = 1: the reverse.
// Iterates in the [B,T,C] order.
template <typename T>
__global__ void heads_kernel(T *dst, const T *src, int T_, int C, int NH, int merge, size_t n) {
    const int hs = C / NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / C;
        const int col = (int)(i % C), h = col / hs, d = col % hs;
        const size_t b = r / T_, t = r % T_;
        const size_t j = ((b * NH + h) * T_ + t) * hs + d;
        if (merge)
            dst[i] = src[j];
        else
            dst[j] = src[i];
    }
}

// The attention-probability counter of (h, t, j), as the CPU's drop_att_row.
__device__ __forceinline__ uint64_t att_counter(int h, int t, int j) {
    return ((uint64_t)h << 40) | ((uint64_t)t << 20) | (uint64_t)j;
}

constexpr int SM_WARPS = 4;

// Whether query row t sees key j: the real keys (j < len), and for a causal
// decoder (model/layers.c, causal attention) only j <= t, and with a window
// only key 0 and the last `window` keys up to t. Key 0 is always visible,
// so no row is empty.
__device__ __forceinline__ bool key_visible(int j, int t, int len, int causal, int window) {
    if (j >= len) return false;
    if (!causal || j == 0) return true;
    if (j > t) return false;
    const int first = window > 0 && t - window + 1 > 1 ? t - window + 1 : 1;
    return j >= first;
}

// One warp per row (b, h, t) of S [B,NH,T,T].
template <typename T>
__global__ void __launch_bounds__(SM_WARPS * 32)
softmax_fwd_kernel(T *P, T *Pd, const float *S, const int *lens, uint64_t key, uint64_t seq_base,
                   uint32_t thresh, float scale, int layer, int NH, int T_, int causal, int window, size_t rows) {
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return; // the whole warp leaves together: no block barrier below
    const int t = (int)(row % T_), h = (int)((row / T_) % NH);
    const int b = (int)(row / ((size_t)T_ * NH));
    const int len = lens[b];
    const float *s = S + row * T_;
    float mx = -INFINITY;
    for (int j = lane; j < len; j += 32)
        if (key_visible(j, t, len, causal, window)) mx = fmaxf(mx, s[j]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int j = lane; j < len; j += 32)
        if (key_visible(j, t, len, causal, window)) sum += expf(s[j] - mx);
    const float inv = 1.0f / warp_sum(sum);
    const uint64_t stream = Pd ? drop_stream(key, seq_base + b, layer, QAC_DROP_ATT) : 0;
    for (int j = lane; j < T_; j += 32) {
        const float p = key_visible(j, t, len, causal, window) ? expf(s[j] - mx) * inv : 0.f;
        P[row * T_ + j] = qac_from_float<T>(p);
        if (Pd) {
            const float pd = p != 0.f ? p * drop_factor(stream, att_counter(h, t, j), thresh, scale) : 0.f;
            Pd[row * T_ + j] = qac_from_float<T>(pd);
        }
    }
}

template <typename T>
__global__ void att_dropout_kernel(T *Pd, const T *P, const int *lens, uint64_t key, uint64_t seq_base,
                                   uint32_t thresh, float scale, int layer, int NH, int T_, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(i % T_), t = (int)((i / T_) % T_);
        const size_t bh = i / ((size_t)T_ * T_);
        const int h = (int)(bh % NH), b = (int)(bh / NH);
        float v = 0.f;
        if (j < lens[b])
            v = qac_to_float<T>(P[i]) *
                drop_factor(drop_stream(key, seq_base + b, layer, QAC_DROP_ATT), att_counter(h, t, j), thresh, scale);
        Pd[i] = qac_from_float<T>(v);
    }
}

// Keys a row does not see have P = 0, so their dS is 0 and they add nothing
// to the row sum: the same kernel serves the causal decoder.
template <typename T>
__global__ void __launch_bounds__(SM_WARPS * 32)
softmax_bwd_kernel(T *dS, const T *P, const float *dPd, const int *lens, uint64_t key, uint64_t seq_base,
                   uint32_t thresh, float dscale, int dropping, int layer, int NH, int T_, float scale,
                   size_t rows) {
    const int lane = threadIdx.x & 31;
    const size_t row = (size_t)blockIdx.x * SM_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int t = (int)(row % T_), h = (int)((row / T_) % NH);
    const int b = (int)(row / ((size_t)T_ * NH));
    const int len = lens[b];
    const T *p = P + row * T_;
    const float *dp = dPd + row * T_;
    const uint64_t stream = dropping ? drop_stream(key, seq_base + b, layer, QAC_DROP_ATT) : 0;
    float s = 0.f;
    for (int j = lane; j < len; j += 32) {
        float g = dp[j];
        if (dropping) g = g * drop_factor(stream, att_counter(h, t, j), thresh, dscale);
        s += qac_to_float<T>(p[j]) * g;
    }
    s = warp_sum(s);
    for (int j = lane; j < T_; j += 32) {
        float out = 0.f;
        if (j < len) {
            float g = dp[j];
            if (dropping) g = g * drop_factor(stream, att_counter(h, t, j), thresh, dscale);
            out = qac_to_float<T>(p[j]) * (g - s) * scale;
        }
        dS[row * T_ + j] = qac_from_float<T>(out);
    }
}

// ---- pooling ----

constexpr int POOL_THREADS = 256;
constexpr int POOL_MAX_C = 4096; // two rows of C floats (32 KiB) plus the reduction buffer, under 48 KiB

// Each thread touches only its own columns of the shared rows: no barrier
// is needed around them beyond those inside block_sum_d.
__global__ void __launch_bounds__(POOL_THREADS)
pool_bwd_kernel(float *dhidden, const float *dout, const float *hidden, const int *lens, int T_, int C,
                int mean_pooling, int normalize) {
    extern __shared__ float sh[];
    __shared__ double redd[32];
    float *x = sh, *g = sh + C;
    const int b = blockIdx.x, len = lens[b];
    const float *hb = hidden + (size_t)b * T_ * C, *dy = dout + (size_t)b * C;
    const float inv_len = 1.0f / (float)(len > 0 ? len : 1);
    if (normalize) {
        double ss = 0.0, dot = 0.0;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float v;
            if (mean_pooling) {
                v = 0.f;
                for (int t = 0; t < len; t++) v += hb[(size_t)t * C + c];
                v *= inv_len;
            } else {
                v = hb[c];
            }
            x[c] = v;
            ss += (double)v * v;
            dot += (double)v * dy[c];
        }
        ss = block_sum_d(ss, redd);
        const float fdot = (float)block_sum_d(dot, redd);
        float n = (float)sqrt(ss);
        n = n > 1e-12f ? n : 1e-12f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) g[c] = (dy[c] - x[c] / n * (fdot / n)) / n;
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) g[c] = dy[c];
    }
    float *dh = dhidden + (size_t)b * T_ * C;
    for (int t = 0; t < T_; t++)
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float v = 0.f;
            if (mean_pooling)
                v = t < len ? g[c] * inv_len : 0.f;
            else if (t == 0)
                v = g[c];
            dh[(size_t)t * C + c] = v;
        }
}

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

cudaError_t qac_kt_embed_fwd(float *emb, const int32_t *ids, const int32_t *type_ids, const float *word,
                             const float *pos, const float *type, int N, int T, int C, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    embed_fwd_kernel<<<N, 256, 0, s>>>(emb, ids, type_ids, word, pos, type, T, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_pos_bwd(float *dpos, const float *dout, int B, int T, int C, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    pos_bwd_kernel<<<qac_div_up((size_t)T * C, 256), 256, 0, s>>>(dpos, dout, B, T, C);
    return cudaGetLastError();
}

cudaError_t qac_kt_scatter_add(float *dst, const float *dout, qac_scatter_plan plan, const int32_t *d_plan,
                               float *partial, int C, cudaStream_t s) {
    if (plan.n_rows <= 0) return cudaSuccess;
    const size_t N = (size_t)plan.n_rows;
    const int32_t *rows = d_plan, *seg_begin = d_plan + N, *key_seg = d_plan + 2 * N + 1, *keys = d_plan + 3 * N + 2;
    if (plan.n_segs > 65535 * 64 || plan.n_keys > 65535) return cudaErrorInvalidValue;
    dim3 g1(qac_div_up(C, COL_THREADS), 1);
    // gridDim.y is limited to 65535: launch the segments in slices
    for (int s0 = 0; s0 < plan.n_segs; s0 += 65535) {
        const int ns = plan.n_segs - s0 < 65535 ? plan.n_segs - s0 : 65535;
        g1.y = ns;
        scatter_partial_kernel<<<g1, COL_THREADS, 0, s>>>(partial + (size_t)s0 * C, dout, rows, seg_begin + s0, C);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    dim3 g2(qac_div_up(C, COL_THREADS), plan.n_keys);
    scatter_finish_kernel<<<g2, COL_THREADS, 0, s>>>(dst, partial, key_seg, keys, C);
    return cudaGetLastError();
}

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
    colsum_finish_kernel<<<qac_div_up(C, COL_THREADS), COL_THREADS, 0, s>>>(db, partial + (size_t)nch * C, nch, C);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
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

cudaError_t qac_kt_bias_gelu_fwd(void *pre, void *act, const float *bias, int N, int I, qac_precision prec,
                                 cudaStream_t s) {
    const size_t n = (size_t)N * I;
    if (n == 0) return cudaSuccess;
    KT_DISPATCH(prec, bias_gelu_fwd_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)pre, (E *)act, bias, n, I));
    return cudaGetLastError();
}

cudaError_t qac_kt_gelu_bwd(void *dinp, const void *dout, const void *pre, size_t n, qac_precision prec,
                            cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    KT_DISPATCH(prec, gelu_bwd_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)dinp, (const E *)dout,
                                                                          (const E *)pre, n));
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

int qac_kt_fused_ln_supported(int C) { return C >= 1 && C <= LN_THREADS * FUSED_MAX_K; }

// Columns per thread of the fused LayerNorm kernels: the template argument
// at or above ceil(C / LN_THREADS).
static int fused_k(int C) {
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
    const size_t n = (size_t)N * I;
    if (n == 0) return cudaSuccess;
    KT_DISPATCH(prec, bias_gelu_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)act, (const E *)pre, bias, n, I));
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
    colsum_finish_kernel<<<qac_div_up(I, COL_THREADS), COL_THREADS, 0, s>>>(dbias, partial, nch, I);
    return cudaGetLastError();
}

cudaError_t qac_kt_qkv_split(void *q, void *k, void *v, const void *qkv, const float *qkv_b, int B, int T, int C,
                             int NH, qac_precision prec, cudaStream_t s) {
    const size_t n = (size_t)B * T * 3 * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, qkv_split_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)q, (E *)k, (E *)v, (const E *)qkv,
                                                                           qkv_b, T, C, NH, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_qkv_merge(void *dqkv, const void *dq, const void *dk, const void *dv, int B, int T, int C,
                             int NH, qac_precision prec, cudaStream_t s) {
    const size_t n = (size_t)B * T * 3 * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, qkv_merge_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)dqkv, (const E *)dq, (const E *)dk,
                                                                           (const E *)dv, T, C, NH, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_heads_split(void *dst, const void *src, int B, int T, int C, int NH, qac_precision prec,
                               cudaStream_t s) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, heads_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)dst, (const E *)src, T, C, NH, 0, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_heads_merge(void *dst, const void *src, int B, int T, int C, int NH, qac_precision prec,
                               cudaStream_t s) {
    const size_t n = (size_t)B * T * C;
    if (n == 0) return cudaSuccess;
    if (NH <= 0 || C % NH) return cudaErrorInvalidValue;
    KT_DISPATCH(prec, heads_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)dst, (const E *)src, T, C, NH, 1, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_softmax_fwd(void *P, void *Pd, const float *S, const int *lens, qac_kt_drop d, int layer, int B,
                               int NH, int T, int causal, int window, qac_precision prec, cudaStream_t s) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return cudaSuccess;
    if (T >= (1 << 20) || NH >= (1 << 23)) return cudaErrorInvalidValue; // the counter's fields
    const drop_consts k = drop_consts_for(d.p);
    void *pd = d.p > 0.0f ? Pd : NULL;
    const unsigned blocks = qac_div_up(rows, SM_WARPS);
    KT_DISPATCH(prec, softmax_fwd_kernel<E><<<blocks, SM_WARPS * 32, 0, s>>>((E *)P, (E *)pd, S, lens, d.key,
                                                                              d.seq_base, k.thresh, k.scale, layer,
                                                                              NH, T, causal, window, rows));
    return cudaGetLastError();
}

cudaError_t qac_kt_att_dropout(void *Pd, const void *P, const int *lens, qac_kt_drop d, int layer, int B, int NH,
                               int T, qac_precision prec, cudaStream_t s) {
    const size_t n = (size_t)B * NH * T * T;
    if (n == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    KT_DISPATCH(prec, att_dropout_kernel<E><<<grid_1d(n, 256), 256, 0, s>>>((E *)Pd, (const E *)P, lens, d.key,
                                                                             d.seq_base, k.thresh, k.scale, layer,
                                                                             NH, T, n));
    return cudaGetLastError();
}

cudaError_t qac_kt_softmax_bwd(void *dS, const void *P, const float *dPd, const int *lens, qac_kt_drop d,
                               int layer, int B, int NH, int T, float scale, qac_precision prec, cudaStream_t s) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return cudaSuccess;
    const drop_consts k = drop_consts_for(d.p);
    const int dropping = d.p > 0.0f;
    const unsigned blocks = qac_div_up(rows, SM_WARPS);
    KT_DISPATCH(prec, softmax_bwd_kernel<E><<<blocks, SM_WARPS * 32, 0, s>>>((E *)dS, (const E *)P, dPd, lens,
                                                                              d.key, d.seq_base, k.thresh, k.scale,
                                                                              dropping, layer, NH, T, scale, rows));
    return cudaGetLastError();
}

int qac_kt_pool_bwd_supported(int C) { return C >= 1 && C <= POOL_MAX_C; }

cudaError_t qac_kt_pool_bwd(float *dhidden, const float *dout, const float *hidden, const int *lens, int B, int T,
                            int C, int mean_pooling, int normalize, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    if (!qac_kt_pool_bwd_supported(C)) return cudaErrorInvalidValue;
    pool_bwd_kernel<<<B, POOL_THREADS, 2 * (size_t)C * sizeof(float), s>>>(dhidden, dout, hidden, lens, T, C,
                                                                          mean_pooling, normalize);
    return cudaGetLastError();
}

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

qac_status qac_kt_attention_fwd(cublasHandle_t h, void *atty, void *q, void *k, void *v, void *P, float *S,
                                void *Pd, void *O, const void *qkv, const float *qkv_b, const int *lens,
                                qac_kt_drop d, int layer, int B, int T, int C, int NH, int causal, int window,
                                qac_precision prec, cudaStream_t s) {
    const int hs = C / NH, BH = B * NH;
    const long long sh = (long long)T * hs, ss = (long long)T * T;
    QAC_CU(qac_kt_qkv_split(q, k, v, qkv, qkv_b, B, T, C, NH, prec, s));
    QAC_CUBLAS(qac_kt_gemm(h, 0, 1, T, T, hs, 1.0f / sqrtf((float)hs), q, hs, sh, k, hs, sh, 0.0f, S, T, ss, BH,
                           prec, QAC_PREC_FP32));
    QAC_CU(qac_kt_softmax_fwd(P, Pd, S, lens, d, layer, B, NH, T, causal, window, prec, s));
    const void *probs = d.p > 0.0f ? Pd : P;
    QAC_CUBLAS(qac_kt_gemm(h, 0, 0, T, hs, T, 1.0f, probs, T, ss, v, hs, sh, 0.0f, O, hs, sh, BH, prec, prec));
    QAC_CU(qac_kt_heads_merge(atty, O, B, T, C, NH, prec, s));
    return QAC_OK;
}

qac_status qac_kt_attention_bwd(cublasHandle_t h, void *dqkv, const void *datty, const void *q, const void *k,
                                const void *v, const void *P, float *dP, void *Pd, void *dS, void *dO, void *dq,
                                void *dk, void *dv, const int *lens, qac_kt_drop d, int layer, int B, int T, int C,
                                int NH, qac_precision prec, cudaStream_t s) {
    const int hs = C / NH, BH = B * NH;
    const long long sh = (long long)T * hs, ss = (long long)T * T;
    QAC_CU(qac_kt_heads_split(dO, datty, B, T, C, NH, prec, s));
    const void *probs = P;
    if (d.p > 0.0f) {
        QAC_CU(qac_kt_att_dropout(Pd, P, lens, d, layer, B, NH, T, prec, s));
        probs = Pd;
    }
    // dV = Pd^T dO; dPd = dO V^T; dS = softmax backward; dQ = dS K; dK = dS^T Q
    QAC_CUBLAS(qac_kt_gemm(h, 1, 0, T, hs, T, 1.0f, probs, T, ss, dO, hs, sh, 0.0f, dv, hs, sh, BH, prec, prec));
    QAC_CUBLAS(qac_kt_gemm(h, 0, 1, T, T, hs, 1.0f, dO, hs, sh, v, hs, sh, 0.0f, dP, T, ss, BH, prec,
                           QAC_PREC_FP32));
    QAC_CU(qac_kt_softmax_bwd(dS, P, dP, lens, d, layer, B, NH, T, 1.0f / sqrtf((float)hs), prec, s));
    QAC_CUBLAS(qac_kt_gemm(h, 0, 0, T, hs, T, 1.0f, dS, T, ss, k, hs, sh, 0.0f, dq, hs, sh, BH, prec, prec));
    QAC_CUBLAS(qac_kt_gemm(h, 1, 0, T, hs, T, 1.0f, dS, T, ss, q, hs, sh, 0.0f, dk, hs, sh, BH, prec, prec));
    QAC_CU(qac_kt_qkv_merge(dqkv, dq, dk, dv, B, T, C, NH, prec, s));
    return QAC_OK;
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
