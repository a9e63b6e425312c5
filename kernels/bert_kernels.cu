// BERT forward kernels: embeddings + LayerNorm, bias + residual + LayerNorm,
// bias + GELU, masked self-attention, pooling + L2 normalisation, and the
// cuBLAS matrix product. CPU twins: model/bert_cpu.h.
#include <math.h>
#include <mma.h>

#include "bert_kernels.cuh"

namespace {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block; every thread must call it. red holds 32 floats.
__device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
    const int nw = blockDim.x >> 5;
    for (int i = 0; i < nw; i++) t += red[i];
    __syncthreads();
    return t;
}

constexpr int LN_THREADS = 256;

// Normalise the row held in shared memory and write it out. Two passes
// (mean, then centred variance) as the CPU reference does.
template <typename T>
__device__ void ln_finish(float *x, T *xh, const float *row, const float *w, const float *b, int C,
                          float eps, float sum, float *red) {
    const float mean = block_sum(sum, red) / C;
    float sq = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = row[c] - mean;
        sq += d * d;
    }
    const float rstd = 1.0f / sqrtf(block_sum(sq, red) / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float y = (row[c] - mean) * rstd * w[c] + (b ? b[c] : 0.f); // b NULL: a norm without bias
        x[c] = y;
        if (xh) xh[c] = qac_from_float<T>(y);
    }
}

template <typename T>
__global__ void __launch_bounds__(LN_THREADS)
embed_ln_kernel(float *x, T *xh, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids, const float *word_emb,
                const float *pos_emb, const float *type_emb, const float *w, const float *b, int T_, int C, float eps) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const size_t r = blockIdx.x;
    const float *we = word_emb + (size_t)ids[r] * C;
    // rotary families have neither table (NULL): the word vector alone
    const float *pe = pos_emb ? pos_emb + (size_t)(pos_ids ? pos_ids[r] : (int)(r % T_)) * C : nullptr;
    const float *te = type_emb ? type_emb + (size_t)(type_ids ? type_ids[r] : 0) * C : nullptr;
    float sum = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = we[c] + (pe ? pe[c] : 0.f) + (te ? te[c] : 0.f);
        row[c] = v;
        sum += v;
    }
    ln_finish<T>(x + r * C, xh ? xh + r * C : nullptr, row, w, b, C, eps, sum, red);
}

template <typename T>
__global__ void __launch_bounds__(LN_THREADS)
residual_ln_kernel(float *x, T *xh, const T *rin, const float *bias, const float *w, const float *b,
                   int C, float eps) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const size_t r = blockIdx.x;
    float *xr = x + r * C;
    const T *rr = rin + r * C;
    float sum = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = xr[c] + (qac_to_float<T>(rr[c]) + (bias ? bias[c] : 0.f));
        row[c] = v;
        sum += v;
    }
    ln_finish<T>(xr, xh ? xh + r * C : nullptr, row, w, b, C, eps, sum, red);
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// 16-byte vectors when the row length allows it, scalars otherwise.
template <typename T>
__global__ void bias_gelu_kernel(T *h, const float *bias, size_t n, int I) {
    constexpr int V = 16 / sizeof(T);
    const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i0 >= n) return;
    const int c0 = (int)(i0 % I);
    if (I % V == 0) {
        uint4 raw = *reinterpret_cast<const uint4 *>(h + i0);
        T *v = reinterpret_cast<T *>(&raw);
#pragma unroll
        for (int j = 0; j < V; j++) v[j] = qac_from_float<T>(gelu_erf(qac_to_float<T>(v[j]) + bias[c0 + j]));
        *reinterpret_cast<uint4 *>(h + i0) = raw;
    } else {
        for (int j = 0; j < V && i0 + j < n; j++) {
            const size_t i = i0 + j;
            h[i] = qac_from_float<T>(gelu_erf(qac_to_float<T>(h[i]) + bias[i % I]));
        }
    }
}

template <typename T>
__global__ void from_f32_kernel(T *dst, const float *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = qac_from_float<T>(src[i]);
}

template <typename T>
__global__ void to_f32_kernel(float *dst, const T *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = qac_to_float<T>(src[i]);
}

// offs NULL: sequence b at row b * T_; else at row offs[b] (packed); rows
// [from[b], lens[b]) are pooled (from NULL: from 0)
__global__ void pool_kernel(float *out, const float *x, const int *offs, const int *lens, const int *from, int T_,
                            int C,
                            int mean_pooling, int normalize) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const int b = blockIdx.x;
    const int L = lens[b];
    int S = from && from[b] > 0 ? from[b] : 0;
    if (S >= L) S = mean_pooling ? L : 0;
    const float *xb = x + ((offs ? (size_t)offs[b] : (size_t)b * T_) + (size_t)S) * C;
    float sq = 0.f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v;
        if (mean_pooling) {
            float s = 0.f;
            for (int t = 0; t < L - S; t++) s += xb[(size_t)t * C + c];
            v = s / (float)(L > S ? L - S : 1);
        } else {
            v = xb[c];
        }
        row[c] = v;
        sq += v * v;
    }
    const float norm = normalize ? fmaxf(sqrtf(block_sum(sq, red)), 1e-12f) : 1.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[(size_t)b * C + c] = row[c] / norm;
}

// ---- attention ----

// One warp per query row, online softmax over the real keys (window > 0:
// those within window of the row, ModernBERT's local layers; a row that
// sees none gets zeros). Any head size 32 * DPL; used for fp32, for shapes
// the tensor-core kernel does not take, and for local layers. qkv_b may be
// NULL (added already, or none).
template <typename T, int DPL>
__global__ void __launch_bounds__(128)
attention_simt_kernel(T *out, const T *qkv, const float *qkv_b, const int *lens, int T_, int C,
                      float scale, int window) {
    constexpr int D = DPL * 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * 4 + warp, h = blockIdx.y, b = blockIdx.z;
    if (t >= T_) return;
    const int L = lens[b];
    const size_t C3 = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * C3 + (size_t)h * D;
    float q[DPL], kb[DPL], vb[DPL], acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        const int d = lane + 32 * j;
        q[j] = qac_to_float<T>(base[t * C3 + d]) + (qkv_b ? qkv_b[h * D + d] : 0.f);
        kb[j] = qkv_b ? qkv_b[C + h * D + d] : 0.f;
        vb[j] = qkv_b ? qkv_b[2 * C + h * D + d] : 0.f;
        acc[j] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int s0 = window > 0 && t - window > 0 ? t - window : 0;
    const int s1 = window > 0 && t + window + 1 < L ? t + window + 1 : L;
    for (int s = s0; s < s1; s++) {
        const T *kr = base + s * C3 + C;
        const T *vr = kr + C;
        float p = 0.f;
#pragma unroll
        for (int j = 0; j < DPL; j++) p += q[j] * (qac_to_float<T>(kr[lane + 32 * j]) + kb[j]);
        p = warp_sum(p) * scale;
        const float mn = fmaxf(m, p);
        const float corr = expf(m - mn);
        const float e = expf(p - mn);
        l = l * corr + e;
#pragma unroll
        for (int j = 0; j < DPL; j++) acc[j] = acc[j] * corr + e * (qac_to_float<T>(vr[lane + 32 * j]) + vb[j]);
        m = mn;
    }
    T *o = out + ((size_t)b * T_ + t) * C + (size_t)h * D;
#pragma unroll
    for (int j = 0; j < DPL; j++) o[lane + 32 * j] = qac_from_float<T>(l > 0.f ? acc[j] / l : 0.f);
}

// Tensor-core attention for T <= 512 and head size 32 or 64: one block of 4
// warps per (query tile, head, sequence). Q K^T goes into shared memory in
// fp32, the masked softmax runs there in fp32, then P V. Key tiles past the
// sequence's last real token are skipped.
constexpr int ATT_WARPS = 4;

struct att_layout {
    int QT, Tp, LDH, LDS, LDP;
    size_t bytes;
};

__host__ __device__ inline att_layout att_layout_for(int T_, int D) {
    att_layout a;
    a.Tp = (T_ + 15) & ~15;
    a.QT = a.Tp <= 128 ? (a.Tp < 64 ? a.Tp : 64) : a.Tp <= 256 ? 32 : 16;
    a.LDH = D + 8;
    a.LDS = (a.Tp > D ? a.Tp : D) + 4;
    a.LDP = a.Tp + 8;
    a.bytes = (size_t)a.QT * a.LDH * 2 + (size_t)a.Tp * a.LDH * 2 + (size_t)a.QT * a.LDS * 4 +
              (size_t)a.QT * a.LDP * 2;
    return a;
}

template <typename T, int D>
__global__ void __launch_bounds__(ATT_WARPS * 32)
attention_wmma_kernel(T *out, const T *qkv, const float *qkv_b, const int *lens, int T_, int C,
                      float scale) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    const att_layout lay = att_layout_for(T_, D);
    const int QT = lay.QT, LDH = lay.LDH, LDS = lay.LDS, LDP = lay.LDP;
    T *sQ = reinterpret_cast<T *>(smem);
    T *sKV = sQ + QT * LDH;
    float *sS = reinterpret_cast<float *>(sKV + lay.Tp * LDH);
    T *sP = reinterpret_cast<T *>(sS + QT * LDS);

    const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * QT;
    const int L = lens[b];
    const int Lk = (L + 15) & ~15;
    const size_t C3 = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * C3 + (size_t)h * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    // Rows [r0, r0 + nrows) of Q (part 0), K (1) or V (2) plus bias, 16 bytes
    // at a time; rows past T are zero.
    auto load = [&](T *dst, int r0, int nrows, int part) {
        const float *bias = qkv_b + (size_t)part * C + (size_t)h * D;
        for (int i = threadIdx.x; i < nrows * (D / 8); i += blockDim.x) {
            const int r = i / (D / 8), c = (i % (D / 8)) * 8;
            const int row = r0 + r;
            uint4 raw = make_uint4(0u, 0u, 0u, 0u);
            if (row < T_) {
                raw = *reinterpret_cast<const uint4 *>(base + row * C3 + (size_t)part * C + c);
                T *v = reinterpret_cast<T *>(&raw);
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = qac_from_float<T>(qac_to_float<T>(v[j]) + bias[c + j]);
            }
            *reinterpret_cast<uint4 *>(dst + r * LDH + c) = raw;
        }
    };

    load(sQ, q0, QT, 0);
    load(sKV, 0, Lk, 1);
    __syncthreads();

    const int nqt = QT / 16, nkt = Lk / 16;
    for (int tile = warp; tile < nqt * nkt; tile += ATT_WARPS) {
        const int i = tile / nkt, j = tile % nkt;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
            wmma::load_matrix_sync(fa, sQ + i * 16 * LDH + kk, LDH);
            wmma::load_matrix_sync(fb, sKV + j * 16 * LDH + kk, LDH);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(sS + i * 16 * LDS + j * 16, acc, LDS, wmma::mem_row_major);
    }
    __syncthreads();

    for (int r = warp; r < QT; r += ATT_WARPS) {
        float *srow = sS + r * LDS;
        T *prow = sP + r * LDP;
        float mx = -INFINITY;
        for (int c = lane; c < L; c += 32) mx = fmaxf(mx, srow[c]);
        mx = warp_max(mx);
        float sum = 0.f;
        for (int c = lane; c < Lk; c += 32) {
            const float e = c < L ? expf((srow[c] - mx) * scale) : 0.f;
            srow[c] = e;
            sum += e;
        }
        const float inv = 1.0f / warp_sum(sum);
        for (int c = lane; c < Lk; c += 32) prow[c] = qac_from_float<T>(srow[c] * inv);
    }
    __syncthreads();

    load(sKV, 0, Lk, 2);
    __syncthreads();

    constexpr int ndt = D / 16;
    for (int tile = warp; tile < nqt * ndt; tile += ATT_WARPS) {
        const int i = tile / ndt, j = tile % ndt;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kk = 0; kk < Lk; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, sP + i * 16 * LDP + kk, LDP);
            wmma::load_matrix_sync(fb, sKV + kk * LDH + j * 16, LDH);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(sS + i * 16 * LDS + j * 16, acc, LDS, wmma::mem_row_major);
    }
    __syncthreads();

    for (int i = threadIdx.x; i < QT * (D / 8); i += blockDim.x) {
        const int r = i / (D / 8), c = (i % (D / 8)) * 8;
        const int row = q0 + r;
        if (row >= T_) continue;
        uint4 raw;
        T *v = reinterpret_cast<T *>(&raw);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = qac_from_float<T>(sS[r * LDS + c + j]);
        *reinterpret_cast<uint4 *>(out + ((size_t)b * T_ + row) * C + (size_t)h * D + c) = raw;
    }
}

int max_optin_smem() {
    static int cached = -1;
    if (cached < 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            cudaGetLastError();
            v = 48 * 1024;
        }
        cached = v;
    }
    return cached;
}

template <typename T, int D>
cudaError_t launch_attention_wmma(T *out, const T *qkv, const float *qkv_b, const int *lens, int B,
                                  int T_, int C, int NH, cudaStream_t s) {
    const att_layout lay = att_layout_for(T_, D);
    if (lay.bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attention_wmma_kernel<T, D>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)lay.bytes);
        if (e != cudaSuccess) return e;
    }
    dim3 grid(qac_div_up(T_, lay.QT), NH, B);
    attention_wmma_kernel<T, D><<<grid, ATT_WARPS * 32, lay.bytes, s>>>(out, qkv, qkv_b, lens, T_, C,
                                                                        1.0f / sqrtf((float)D));
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_attention_simt(T *out, const T *qkv, const float *qkv_b, const int *lens, int B, int T_,
                                  int C, int NH, cudaStream_t s, int window = 0) {
    const int D = C / NH;
    const float scale = 1.0f / sqrtf((float)D);
    dim3 grid(qac_div_up(T_, 4), NH, B);
    switch (D / 32) {
    case 1: attention_simt_kernel<T, 1><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 2: attention_simt_kernel<T, 2><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 3: attention_simt_kernel<T, 3><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 4: attention_simt_kernel<T, 4><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 5: attention_simt_kernel<T, 5><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 6: attention_simt_kernel<T, 6><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 7: attention_simt_kernel<T, 7><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    case 8: attention_simt_kernel<T, 8><<<grid, 128, 0, s>>>(out, qkv, qkv_b, lens, T_, C, scale, window); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_attention_half(T *out, const T *qkv, const float *qkv_b, const int *lens, int B, int T_,
                                  int C, int NH, cudaStream_t s) {
    const int D = C / NH;
    if (T_ <= 512 && C % 8 == 0 && (D == 32 || D == 64) &&
        att_layout_for(T_, D).bytes <= (size_t)max_optin_smem()) {
        if (D == 32) return launch_attention_wmma<T, 32>(out, qkv, qkv_b, lens, B, T_, C, NH, s);
        return launch_attention_wmma<T, 64>(out, qkv, qkv_b, lens, B, T_, C, NH, s);
    }
    return launch_attention_simt<T>(out, qkv, qkv_b, lens, B, T_, C, NH, s);
}

unsigned grid_for(size_t n, unsigned threads) {
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g > 65535u * 8u ? 65535u * 8u : (g ? g : 1));
}

} // namespace

// ---- launchers ----

// Runs the statement with T bound to the element type of prec.
#define QAC_DISPATCH(prec, ...)                                                            \
    switch (prec) {                                                                        \
    case QAC_PREC_FP32: { typedef float T; __VA_ARGS__; } break;                           \
    case QAC_PREC_FP16: { typedef __half T; __VA_ARGS__; } break;                          \
    case QAC_PREC_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                   \
    default: return cudaErrorInvalidValue;                                                 \
    }

cudaError_t qac_k_embed_ln(float *x, void *xh, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                           const float *word_emb,
                           const float *pos_emb, const float *type_emb, const float *w,
                           const float *b, int N, int seq_len, int C, float eps, qac_precision prec,
                           cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const size_t sm = (size_t)C * sizeof(float);
    QAC_DISPATCH(prec, embed_ln_kernel<T><<<N, LN_THREADS, sm, s>>>(x, (T *)xh, ids, type_ids, pos_ids, word_emb, pos_emb,
                                                                     type_emb, w, b, seq_len, C, eps));
    return cudaGetLastError();
}

cudaError_t qac_k_residual_ln(float *x, void *xh, const void *r, const float *bias, const float *w,
                              const float *b, int N, int C, float eps, qac_precision prec,
                              cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    const size_t sm = (size_t)C * sizeof(float);
    QAC_DISPATCH(prec, residual_ln_kernel<T><<<N, LN_THREADS, sm, s>>>(x, (T *)xh, (const T *)r, bias, w,
                                                                        b, C, eps));
    return cudaGetLastError();
}

cudaError_t qac_k_bias_gelu(void *h, const float *bias, int N, int I, qac_precision prec, cudaStream_t s) {
    const size_t n = (size_t)N * I;
    if (n == 0) return cudaSuccess;
    const size_t vec = 16 / qac_prec_size(prec);
    const unsigned blocks = qac_div_up(qac_div_up(n, vec), 256);
    QAC_DISPATCH(prec, bias_gelu_kernel<T><<<blocks, 256, 0, s>>>((T *)h, bias, n, I));
    return cudaGetLastError();
}

int qac_k_attention_supported(int T, int C, int NH) {
    if (NH <= 0 || C % NH) return 0;
    const int D = C / NH;
    return T >= 1 && T <= 4096 && D % 32 == 0 && D <= 256;
}

cudaError_t qac_k_attention(void *out, const void *qkv, const float *qkv_b, const int *lens, int B, int T,
                            int C, int NH, qac_precision prec, cudaStream_t s) {
    if (!qac_k_attention_supported(T, C, NH)) return cudaErrorInvalidValue;
    if (B <= 0) return cudaSuccess;
    switch (prec) {
    case QAC_PREC_FP32:
        return launch_attention_simt<float>((float *)out, (const float *)qkv, qkv_b, lens, B, T, C, NH, s);
    case QAC_PREC_FP16:
        return launch_attention_half<__half>((__half *)out, (const __half *)qkv, qkv_b, lens, B, T, C, NH, s);
    case QAC_PREC_BF16:
        return launch_attention_half<__nv_bfloat16>((__nv_bfloat16 *)out, (const __nv_bfloat16 *)qkv, qkv_b,
                                                    lens, B, T, C, NH, s);
    }
    return cudaErrorInvalidValue;
}

cudaError_t qac_k_attention_window(void *out, const void *qkv, const float *qkv_b, const int *lens, int window, int B,
                                   int T, int C, int NH, qac_precision prec, cudaStream_t s) {
    if (!qac_k_attention_supported(T, C, NH)) return cudaErrorInvalidValue;
    if (B <= 0) return cudaSuccess;
    if (window <= 0 && qkv_b) return qac_k_attention(out, qkv, qkv_b, lens, B, T, C, NH, prec, s);
    switch (prec) { // the one-warp-a-row kernel: it skips the keys outside the window
    case QAC_PREC_FP32:
        return launch_attention_simt<float>((float *)out, (const float *)qkv, qkv_b, lens, B, T, C, NH, s, window);
    case QAC_PREC_FP16:
        return launch_attention_simt<__half>((__half *)out, (const __half *)qkv, qkv_b, lens, B, T, C, NH, s, window);
    case QAC_PREC_BF16:
        return launch_attention_simt<__nv_bfloat16>((__nv_bfloat16 *)out, (const __nv_bfloat16 *)qkv, qkv_b, lens, B,
                                                    T, C, NH, s, window);
    }
    return cudaErrorInvalidValue;
}

cudaError_t qac_k_pool(float *out, const float *x, const int *lens, int B, int T, int C, int mean_pooling,
                       int normalize, cudaStream_t s) {
    return qac_k_pool_from(out, x, lens, NULL, B, T, C, mean_pooling, normalize, s);
}

cudaError_t qac_k_pool_from(float *out, const float *x, const int *lens, const int *from, int B, int T, int C,
                            int mean_pooling, int normalize, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    pool_kernel<<<B, 256, (size_t)C * sizeof(float), s>>>(out, x, NULL, lens, from, T, C, mean_pooling, normalize);
    return cudaGetLastError();
}

cudaError_t qac_k_pool_packed(float *out, const float *x, const int *offs, const int *lens, const int *from, int B,
                              int C, int mean_pooling, int normalize, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    pool_kernel<<<B, 256, (size_t)C * sizeof(float), s>>>(out, x, offs, lens, from, 0, C, mean_pooling, normalize);
    return cudaGetLastError();
}

cudaError_t qac_k_from_f32(void *dst, const float *src, size_t n, qac_precision prec, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (prec == QAC_PREC_FP32) return cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    QAC_DISPATCH(prec, from_f32_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)dst, src, n));
    return cudaGetLastError();
}

cudaError_t qac_k_to_f32(float *dst, const void *src, size_t n, qac_precision prec, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (prec == QAC_PREC_FP32) return cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    QAC_DISPATCH(prec, to_f32_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(dst, (const T *)src, n));
    return cudaGetLastError();
}

cublasStatus_t qac_k_matmul(cublasHandle_t h, void *out, const void *inp, const void *w, int N, int IC, int OC,
                            qac_precision prec) {
    // Column-major view: out^T [OC,N] = W [OC,IC] (stored as W^T col-major) x inp^T [IC,N].
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = qac_prec_cuda_type(prec);
    const cublasComputeType_t ct = prec == QAC_PREC_FP32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, t, IC, inp, t, IC, &zero, out, t, OC,
                        ct, CUBLAS_GEMM_DEFAULT);
}
