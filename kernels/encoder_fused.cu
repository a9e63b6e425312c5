// The CUDA encoder's memory-bound passes at memory speed: LayerNorm one warp
// per row with the row in registers (after the embeddings, and after the
// bias + residual of each sub-layer), the last LayerNorm fused with the
// pooling and the L2 normalisation (the last layer's other rows are never
// written), the pooled rows gathered for a last layer pruned to them, and
// bias + GELU with each thread's bias reused over several rows. Launchers
// and contracts: bert_kernels.cuh; CPU twins: qac_layernorm_forward,
// qac_gelu_forward and qac_pooling_forward_from (model/bert_cpu.h). Every
// sum is in one order, fixed by the row alone: a row's bits do not depend
// on the rest of the batch. Under QAC_FA_EMULATE only the kernels are
// compiled, for tests/gpu/test_encoder_emulated.cpp.
#include <math.h>
#include <string.h>

#include "bert_kernels.cuh"

namespace qac_enc {

__device__ __forceinline__ float warp_allsum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Four consecutive elements as floats, and back (16 bytes of fp32, 8 of a
// half type; the callers keep the addresses aligned to that).
template <typename E> __device__ __forceinline__ void load4(float (&d)[4], const E *p) {
    uint2 raw = *reinterpret_cast<const uint2 *>(p);
    E v[4];
    memcpy((void *)v, &raw, 8);
#pragma unroll
    for (int j = 0; j < 4; j++) d[j] = qac_to_float<E>(v[j]);
}
template <> __device__ __forceinline__ void load4<float>(float (&d)[4], const float *p) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
}
template <typename E> __device__ __forceinline__ void store4(E *p, const float (&s)[4]) {
    E v[4];
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = qac_from_float<E>(s[j]);
    uint2 raw;
    memcpy(&raw, (const void *)v, 8);
    *reinterpret_cast<uint2 *>(p) = raw;
}
template <> __device__ __forceinline__ void store4<float>(float *p, const float (&s)[4]) {
    *reinterpret_cast<float4 *>(p) = make_float4(s[0], s[1], s[2], s[3]);
}

// Lane `lane` holds columns (k * 32 + lane) * 4 .. + 3 for k < NCH (those
// at or past C are zeros): coalesced 16-byte pieces, the row in registers.
__device__ __forceinline__ int col_of(int k, int lane) { return (k * 32 + lane) * 4; }

// One row through LayerNorm in registers: the mean, then the centred
// variance (two passes, as the CPU's), each a lane's columns in order then
// the warp's butterfly; v becomes (v - mean) * rstd * w + b.
template <int NCH>
__device__ __forceinline__ void ln_registers(float (&v)[NCH][4], const float *w, const float *b, int C, float eps,
                                             int lane) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < NCH; k++)
#pragma unroll
        for (int j = 0; j < 4; j++) s += v[k][j];
    const float mean = warp_allsum(s) / C;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < NCH; k++)
        if (col_of(k, lane) < C)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float d = v[k][j] - mean;
                q += d * d;
            }
    const float rstd = 1.0f / sqrtf(warp_allsum(q) / C + eps);
#pragma unroll
    for (int k = 0; k < NCH; k++) {
        const int c = col_of(k, lane);
        if (c >= C) continue;
        float wv[4], bv[4] = {0.f, 0.f, 0.f, 0.f}; // b NULL: a norm without bias
        load4<float>(wv, w + c);
        if (b) load4<float>(bv, b + c);
#pragma unroll
        for (int j = 0; j < 4; j++) v[k][j] = (v[k][j] - mean) * rstd * wv[j] + bv[j];
    }
}

// x [row] + (r [row] + bias): the sub-layer's output added to the residual
// stream, the order of residual_ln_kernel and of the CPU.
template <typename E, int NCH>
__device__ __forceinline__ void load_residual(float (&v)[NCH][4], const float *x, const E *r, const float *bias, int C,
                                              int lane) {
#pragma unroll
    for (int k = 0; k < NCH; k++) {
        const int c = col_of(k, lane);
        if (c >= C) {
            v[k][0] = v[k][1] = v[k][2] = v[k][3] = 0.f;
            continue;
        }
        float xv[4], rv[4], bv[4] = {0.f, 0.f, 0.f, 0.f};
        load4<float>(xv, x + c);
        load4<E>(rv, r + c);
        if (bias) load4<float>(bv, bias + c);
#pragma unroll
        for (int j = 0; j < 4; j++) v[k][j] = xv[j] + (rv[j] + bv[j]);
    }
}

// What a LayerNorm kernel reads and writes; the embedding inputs or the
// residual ones are unused by the other kind.
struct ln_args {
    float *x;       // [N,C] fp32: the output (and the residual's input)
    void *xh;       // [N,C] act copy of the output, or NULL
    const void *r;  // [N,C] act: the sub-layer's output
    const float *bias;
    const int32_t *ids, *type_ids, *pos_ids; // [N]; type_ids NULL: type 0; pos_ids NULL: row % T
    const float *word, *pos, *type;
    const float *w, *b;
    int N, C, T;
    float eps;
};

// One warp per row, blockDim.x / 32 rows per block; EMBED: the row is
// word[ids] + pos[t] + type[type_ids], else x + (r + bias).
template <typename E, int NCH, bool EMBED> __global__ void ln_warp_kernel(const ln_args a) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= a.N) return; // the whole warp
    const size_t off = (size_t)row * a.C;
    float v[NCH][4];
    if (EMBED) {
        const float *we = a.word + (size_t)a.ids[row] * a.C;
        const float *pe = a.pos ? a.pos + (size_t)(a.pos_ids ? a.pos_ids[row] : row % a.T) * a.C : nullptr;
        const float *te = a.type ? a.type + (size_t)(a.type_ids ? a.type_ids[row] : 0) * a.C : nullptr;
#pragma unroll
        for (int k = 0; k < NCH; k++) {
            const int c = col_of(k, lane);
            if (c >= a.C) {
                v[k][0] = v[k][1] = v[k][2] = v[k][3] = 0.f;
                continue;
            }
            float wv[4], pv[4] = {0.f, 0.f, 0.f, 0.f}, tv[4] = {0.f, 0.f, 0.f, 0.f};
            load4<float>(wv, we + c);
            if (pe) load4<float>(pv, pe + c);
            if (te) load4<float>(tv, te + c);
#pragma unroll
            for (int j = 0; j < 4; j++) v[k][j] = wv[j] + pv[j] + tv[j];
        }
    } else {
        load_residual<E, NCH>(v, a.x + off, reinterpret_cast<const E *>(a.r) + off, a.bias, a.C, lane);
    }
    ln_registers<NCH>(v, a.w, a.b, a.C, a.eps, lane);
    E *xh = a.xh ? reinterpret_cast<E *>(a.xh) + off : nullptr;
#pragma unroll
    for (int k = 0; k < NCH; k++) {
        const int c = col_of(k, lane);
        if (c >= a.C) continue;
        store4<float>(a.x + off + c, v[k]);
        if (xh) store4<E>(xh + c, v[k]);
    }
}

// The last LayerNorm, the pooling and the normalisation of one sequence per
// block: sequence b's rows start at offs[b] (packed) or b * T (offs NULL);
// lens NULL means one row each (the gathered rows of a pruned layer). Rows
// [S, L) for the mean, row S alone for CLS, S from `from` by
// qac_pooling_forward_from's rule; an empty sequence (L = 0, a bucket's
// padding) gets zeros. Warp w takes rows S + w, S + w + W, ...; the warps'
// partial sums meet in shared memory, added in warp order.
struct pool_args {
    float *out; // [B,C]
    const float *x;
    const void *r;
    const float *bias, *w, *b;
    const int *offs, *lens, *from;
    int T, C;
    float eps;
    int mean, normalize;
};

template <typename E, int NCH> __global__ void ln_pool_kernel(const pool_args a) {
    extern __shared__ __align__(16) float enc_smem[]; // [W][C] partial sums, then 32 for the norm
    const int b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, W = blockDim.x >> 5;
    const int C = a.C;
    float *out = a.out + (size_t)b * C;
    const int L = a.lens ? a.lens[b] : 1;
    if (L <= 0) { // the whole block, before any barrier
        for (int c = tid; c < C; c += blockDim.x) out[c] = 0.f;
        return;
    }
    int S = a.from && a.from[b] > 0 ? a.from[b] : 0;
    if (S >= L) S = a.mean ? L : 0;
    const int count = a.mean ? L - S : 1;
    const size_t first = (a.offs ? (size_t)a.offs[b] : (size_t)b * a.T) + (size_t)S;
    float acc[NCH][4];
#pragma unroll
    for (int k = 0; k < NCH; k++) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.f;
    for (int t = warp; t < count; t += W) {
        const size_t off = (first + (size_t)t) * C;
        float v[NCH][4];
        load_residual<E, NCH>(v, a.x + off, reinterpret_cast<const E *>(a.r) + off, a.bias, C, lane);
        ln_registers<NCH>(v, a.w, a.b, C, a.eps, lane);
#pragma unroll
        for (int k = 0; k < NCH; k++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[k][j] += v[k][j];
    }
#pragma unroll
    for (int k = 0; k < NCH; k++) {
        const int c = col_of(k, lane);
        if (c < C) store4<float>(enc_smem + (size_t)warp * C + c, acc[k]);
    }
    __syncthreads();
    float *red = enc_smem + (size_t)W * C;
    const float inv = 1.0f / (float)(count > 0 ? count : 1);
    float sq = 0.f;
    for (int c = tid; c < C; c += blockDim.x) {
        float s = 0.f;
        for (int i = 0; i < W; i++) s += enc_smem[(size_t)i * C + c];
        s = a.mean ? s * inv : s;
        enc_smem[c] = s; // column c of row 0 is read by this thread only
        sq += s * s;
    }
    float norm = 1.0f;
    if (a.normalize) {
        sq = warp_allsum(sq);
        if (lane == 0) red[warp] = sq;
        __syncthreads();
        float t = 0.f;
        for (int i = 0; i < W; i++) t += red[i];
        norm = fmaxf(sqrtf(t), 1e-12f);
    }
    for (int c = tid; c < C; c += blockDim.x) out[c] = enc_smem[c] / norm;
}

// The pooled row of each sequence (by ln_pool_kernel's rule, CLS) copied
// from x (fp32) and ctx (act) into xg, ctxg [B,C]; zeros for an empty one.
template <typename E>
__global__ void gather_rows_kernel(float *xg, E *ctxg, const float *x, const E *ctx, const int *offs, const int *lens,
                                   const int *from, int T, int C) {
    const int b = blockIdx.x;
    const int L = lens[b];
    const int S = from && from[b] > 0 && from[b] < L ? from[b] : 0;
    const size_t row = (offs ? (size_t)offs[b] : (size_t)b * T) + (size_t)S;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        xg[(size_t)b * C + c] = L > 0 ? x[row * C + c] : 0.f;
        ctxg[(size_t)b * C + c] = L > 0 ? ctx[row * C + c] : qac_from_float<E>(0.f);
    }
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// h = GELU(h + bias) over [N,I] (I a multiple of V = 16 bytes of elements):
// thread i takes column chunk i % (I/V) of rows R * (i / (I/V)) .. + R - 1,
// its V biases loaded once. The arithmetic of bias_gelu_kernel, so the
// same bits.
template <typename E, int V>
__global__ void gelu_rows_kernel(E *h, const float *bias, int N, int I, int R, unsigned threads) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= threads) return;
    const unsigned chunks = (unsigned)(I / V);
    const int c0 = (int)(i % chunks) * V, r0 = (int)(i / chunks) * R;
    float bv[V];
#pragma unroll
    for (int j = 0; j < V; j++) bv[j] = bias[c0 + j];
    const int r1 = r0 + R < N ? r0 + R : N;
    for (int r = r0; r < r1; r++) {
        E *p = h + (size_t)r * I + c0;
        uint4 raw = *reinterpret_cast<const uint4 *>(p);
        E v[V];
        memcpy((void *)v, &raw, 16);
#pragma unroll
        for (int j = 0; j < V; j++) v[j] = qac_from_float<E>(gelu_erf(qac_to_float<E>(v[j]) + bv[j]));
        memcpy(&raw, (const void *)v, 16);
        *reinterpret_cast<uint4 *>(p) = raw;
    }
}

} // namespace qac_enc

#ifndef QAC_FA_EMULATE
using namespace qac_enc;

namespace {

// The register chunks a row of C columns needs (C a multiple of 4); 0: more
// than the compiled kernels hold.
int chunks_for(int C) {
    const int need = (C / 4 + 31) / 32;
    return need <= 1 ? 1 : need <= 2 ? 2 : need <= 3 ? 3 : need <= 4 ? 4 : need <= 6 ? 6 : need <= 8 ? 8 : 0;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Runs the statement with E bound to prec's element type and NCH to nch.
#define QAC_ENC_DISPATCH(prec, nch, ...)                                                    \
    switch (prec) {                                                                         \
    case QAC_PREC_FP32: { typedef float E; QAC_ENC_NCH(nch, __VA_ARGS__) } break;           \
    case QAC_PREC_FP16: { typedef __half E; QAC_ENC_NCH(nch, __VA_ARGS__) } break;          \
    case QAC_PREC_BF16: { typedef __nv_bfloat16 E; QAC_ENC_NCH(nch, __VA_ARGS__) } break;   \
    default: return cudaErrorInvalidValue;                                                  \
    }
#define QAC_ENC_NCH(nch, ...)                                                               \
    switch (nch) {                                                                          \
    case 1: { constexpr int NCH = 1; __VA_ARGS__; } break;                                  \
    case 2: { constexpr int NCH = 2; __VA_ARGS__; } break;                                  \
    case 3: { constexpr int NCH = 3; __VA_ARGS__; } break;                                  \
    case 4: { constexpr int NCH = 4; __VA_ARGS__; } break;                                  \
    case 6: { constexpr int NCH = 6; __VA_ARGS__; } break;                                  \
    case 8: { constexpr int NCH = 8; __VA_ARGS__; } break;                                  \
    default: return cudaErrorInvalidValue;                                                  \
    }

} // namespace

int qac_k_ln_warp_ok(int C, const void *const *ptrs, int n) {
    if (C <= 0 || C % 4 || !chunks_for(C)) return 0;
    for (int i = 0; i < n; i++)
        if (ptrs[i] && !aligned16(ptrs[i])) return 0;
    return 1;
}

cudaError_t qac_k_embed_ln_warp(float *x, void *xh, const int32_t *ids, const int32_t *type_ids, const int32_t *pos_ids,
                                const float *word_emb,
                                const float *pos_emb, const float *type_emb, const float *w, const float *b, int N,
                                int T, int C, float eps, qac_precision prec, int warps, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    if (warps < 1 || warps > 16) return cudaErrorInvalidValue;
    ln_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.xh = xh, a.ids = ids, a.type_ids = type_ids, a.pos_ids = pos_ids, a.word = word_emb, a.pos = pos_emb, a.type = type_emb;
    a.w = w, a.b = b, a.N = N, a.C = C, a.T = T, a.eps = eps;
    const unsigned grid = qac_div_up((size_t)N, (size_t)warps);
    QAC_ENC_DISPATCH(prec, chunks_for(C), ln_warp_kernel<E, NCH, true><<<grid, warps * 32, 0, s>>>(a));
    return cudaGetLastError();
}

cudaError_t qac_k_residual_ln_warp(float *x, void *xh, const void *r, const float *bias, const float *w, const float *b,
                                   int N, int C, float eps, qac_precision prec, int warps, cudaStream_t s) {
    if (N <= 0) return cudaSuccess;
    if (warps < 1 || warps > 16) return cudaErrorInvalidValue;
    ln_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.xh = xh, a.r = r, a.bias = bias, a.w = w, a.b = b, a.N = N, a.C = C, a.T = 1, a.eps = eps;
    const unsigned grid = qac_div_up((size_t)N, (size_t)warps);
    QAC_ENC_DISPATCH(prec, chunks_for(C), ln_warp_kernel<E, NCH, false><<<grid, warps * 32, 0, s>>>(a));
    return cudaGetLastError();
}

cudaError_t qac_k_ln_pool(float *out, const float *x, const void *r, const float *bias, const float *w, const float *b,
                          const int *offs, const int *lens, const int *from, int B, int T, int C, float eps,
                          int mean_pooling, int normalize, qac_precision prec, int warps, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    if (warps < 1 || warps > 16) return cudaErrorInvalidValue;
    // the partial sums fit the 48 KiB every GPU gives without opting in
    while (warps > 1 && ((size_t)warps * C + 32) * sizeof(float) > 48 * 1024) warps /= 2;
    pool_args a = {out, x, r, bias, w, b, offs, lens, from, T, C, eps, mean_pooling, normalize};
    const size_t smem = ((size_t)warps * C + 32) * sizeof(float);
    QAC_ENC_DISPATCH(prec, chunks_for(C), ln_pool_kernel<E, NCH><<<B, warps * 32, smem, s>>>(a));
    return cudaGetLastError();
}

cudaError_t qac_k_gather_rows(float *xg, void *ctxg, const float *x, const void *ctx, const int *offs, const int *lens,
                              const int *from, int B, int T, int C, qac_precision prec, cudaStream_t s) {
    if (B <= 0) return cudaSuccess;
    switch (prec) {
    case QAC_PREC_FP32:
        gather_rows_kernel<float><<<B, 256, 0, s>>>(xg, (float *)ctxg, x, (const float *)ctx, offs, lens, from, T, C);
        break;
    case QAC_PREC_FP16:
        gather_rows_kernel<__half><<<B, 256, 0, s>>>(xg, (__half *)ctxg, x, (const __half *)ctx, offs, lens, from, T,
                                                     C);
        break;
    case QAC_PREC_BF16:
        gather_rows_kernel<__nv_bfloat16><<<B, 256, 0, s>>>(xg, (__nv_bfloat16 *)ctxg, x, (const __nv_bfloat16 *)ctx,
                                                            offs, lens, from, T, C);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t qac_k_bias_gelu_rows(void *h, const float *bias, int N, int I, qac_precision prec, int rows,
                                 cudaStream_t s) {
    if ((size_t)N * I == 0) return cudaSuccess;
    const int V = (int)(16 / qac_prec_size(prec));
    if (rows < 1 || I % V || !aligned16(h)) return qac_k_bias_gelu(h, bias, N, I, prec, s);
    const size_t threads = (size_t)(I / V) * qac_div_up((size_t)N, (size_t)rows);
    if (threads >= (1u << 31)) return qac_k_bias_gelu(h, bias, N, I, prec, s);
    const unsigned blocks = qac_div_up(threads, 256), t = (unsigned)threads;
    switch (prec) {
    case QAC_PREC_FP32: gelu_rows_kernel<float, 4><<<blocks, 256, 0, s>>>((float *)h, bias, N, I, rows, t); break;
    case QAC_PREC_FP16: gelu_rows_kernel<__half, 8><<<blocks, 256, 0, s>>>((__half *)h, bias, N, I, rows, t); break;
    case QAC_PREC_BF16:
        gelu_rows_kernel<__nv_bfloat16, 8><<<blocks, 256, 0, s>>>((__nv_bfloat16 *)h, bias, N, I, rows, t);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
#endif
