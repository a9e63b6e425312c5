// Training kernels, the unfused attention and pooling: Q, K, V split into
// heads (the QKV bias added) and merged back, the masked softmax forward
// with attention dropout and its backward (one warp a row), the
// probabilities' dropout, the strided-batched GEMMs that join them
// (qac_kt_attention_fwd / _bwd), and the pooling's backward. The fused
// attention that replaces them where it can is flash_fwd.cu / flash_bwd.cu.
// Contracts: train_kernels.cuh; shared helpers: train_common.cuh; CPU twins:
// model/layers.c. The kernels alone compile for the CPU (QAC_FA_EMULATE):
// tests/gpu/test_train_family_emulated.cpp runs the softmax there.
#include "train_common.cuh"

namespace {

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

// Whether query row t sees key j: the real keys (j < len); bidirectional
// with a window (ModernBERT's local layers, qac_attention_forward_window)
// only |t - j| <= window; for a causal decoder (model/layers.c, causal
// attention) only j <= t, and with a window only key 0 and the last
// `window` keys up to t. A real row sees at least itself (bidirectional)
// or key 0 (causal), so no real row is empty; a padding row past a
// bidirectional window's reach sees nothing and gets P = 0.
__device__ __forceinline__ bool key_visible(int j, int t, int len, int causal, int window) {
    if (j >= len) return false;
    if (!causal) return window <= 0 || (j - t <= window && t - j <= window);
    if (j == 0) return true;
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

#ifndef QAC_FA_EMULATE // dynamic shared memory: not built for the emulator
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
#endif

} // namespace

#ifndef QAC_FA_EMULATE
// ---- launchers ----

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

#endif

// The composites call launchers only, so the launchers' CPU emulation
// (tests/gpu/train_emu_launchers.h) builds these very functions over its
// emulated launchers.
#if !defined(QAC_FA_EMULATE) || defined(QAC_KT_EMU_COMPOSITES)

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
#endif
