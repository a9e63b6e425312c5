// Internal to kernels/: the fused (FlashAttention-2) attention. Launchers
// (flash_fwd.cu, flash_bwd.cu) and the device code they share. CPU twin:
// model/attention_flash.c (qac_flash_attention_forward / _backward), whose
// contract this follows: rows padded (offs NULL, sequence b at rows b*T..)
// or packed (offs [B+1]), keys the first lens[b] rows of a sequence, Q | K
// | V per row of qkv [N,3C] as the QKV product writes it (the bias added
// on load), the output written straight into out [N,C] at the head's
// columns, lse [NH,N] in base 2.
//
// Every kernel is deterministic: no atomics, every sum in one order, so a
// re-run (--recompute) gives the same bits.
#ifndef QAC_FLASH_ATTENTION_CUH
#define QAC_FLASH_ATTENTION_CUH

#include <math.h>
#include <string.h>

#include "train_kernels.cuh"

extern "C" {
#include "bert_cpu.h"
#include "qac_cuda_attention.h"
#include "qac_rng.h"
}

// Where the sequences are, on the device.
struct qac_fa_rows {
    const int *offs; // [B+1] packed row offsets, or NULL: padded, sequence b at b*T
    const int *lens; // [B] keys per sequence, or NULL: every row of the sequence
    int B, T;        // T: the padded length, or at least the longest sequence when packed
                     // (B has no limit of its own: the launches fold it into grid.x)
    int N;           // rows in all (B*T padded, offs[B] packed): the stride of lse's heads
};

// Whether the fused kernels take this shape and precision.
int qac_fa_supported(int C, int NH, qac_precision prec);

// out [N,C] = attention of qkv [N,3C] (+ qkv_b [3C], may be NULL); lse
// [NH,N] fp32 (may be NULL: inference). causal, window: the decoder mask
// (causal 0 and window > 0: a bidirectional window, |t - j| <= window);
// d.p > 0: dropout on the probabilities at (layer, QAC_DROP_ATT) with the
// CPU's counters (sequence b draws with id d.seq_base + b). tiles NULL:
// qac_fa_tiles_default().
cudaError_t qac_fa_forward(void *out, float *lse, const void *qkv, const float *qkv_b, qac_fa_rows rows, int C,
                           int NH, int causal, int window, qac_kt_drop d, int layer, qac_precision prec,
                           const qac_fa_tiles *tiles, cudaStream_t s);
// dqkv [N,3C] (written in full) from dout [N,C] and the forward's out and
// lse; dvec [NH,N] fp32 scratch (D = rowsum(dout * out)).
cudaError_t qac_fa_backward(void *dqkv, float *dvec, const void *dout, const void *out, const float *lse,
                            const void *qkv, const float *qkv_b, qac_fa_rows rows, int C, int NH, int causal,
                            int window, qac_kt_drop d, int layer, qac_precision prec, const qac_fa_tiles *tiles,
                            cudaStream_t s);

// The compiled variants of each kernel: (block, tile, stages, blocks per
// SM). The last is the kernel's __launch_bounds__ minimum: 2 caps a
// 128-row block (256 threads) at 128 registers a thread so that two blocks
// share an SM (16 warps) where the compiler would otherwise take up to 255
// and leave one; 1 gives no minimum (an explicit 1 lets ptxas take about
// 30 more registers than none, and fewer blocks fit). The register counts
// and spills of each are in docs/gpu-attention.md.
#define QAC_FA_FWD_VARIANTS(X)                                                                              \
    X(64, 32, 1, 1) X(64, 32, 2, 1) X(64, 64, 1, 1) X(64, 64, 2, 1) X(128, 32, 2, 1) X(128, 64, 1, 1)         \
        X(128, 64, 2, 1) X(128, 128, 2, 1) X(128, 64, 2, 2)
#define QAC_FA_DKDV_VARIANTS(X) \
    X(64, 32, 2, 1) X(64, 64, 1, 1) X(64, 64, 2, 1) X(128, 32, 2, 1) X(128, 64, 2, 1) X(128, 32, 2, 2)
#define QAC_FA_DQ_VARIANTS(X) \
    X(64, 32, 2, 1) X(64, 64, 1, 1) X(64, 64, 2, 1) X(128, 32, 2, 1) X(128, 64, 2, 1) X(128, 64, 2, 2)

// gridDim.z's limit: a pass over more sequences (a training batch may hold
// 65,536) is launched in chunks of at most this many, each with its first
// sequence in params.b0 (qac_fa_chunks).
#define QAC_FA_MAX_Z 65535

// ---- device code shared by the kernels ----
namespace qac_fa {

// Everything a kernel reads, by value.
struct params {
    const void *qkv;
    const float *qkv_b;
    void *out;    // forward: [N,C]
    float *lse;   // [NH,N]
    const void *dout, *o; // backward: dO and the forward's output [N,C]
    const float *dvec;    // [NH,N]
    void *dqkv;           // [N,3C]
    const int *offs, *lens;
    int T, N, C, causal, window;
    int b0; // the first sequence of this launch (blockIdx.z counts from it)
    float scale, sl2; // 1/sqrt(D), and that times log2(e)
    uint64_t key, seq_base;
    uint32_t thresh;
    float dscale; // 1 / (1 - p)
    int dropping, layer;
};

// The parameters of a pass (host side).
inline params make_params(const void *qkv, const float *qkv_b, const qac_fa_rows &rows, int C, int NH, int causal,
                          int window, const qac_kt_drop &d, int layer) {
    params p;
    memset(&p, 0, sizeof p);
    p.qkv = qkv;
    p.qkv_b = qkv_b;
    p.offs = rows.offs;
    p.lens = rows.lens;
    p.T = rows.T;
    p.N = rows.N;
    p.C = C;
    p.causal = causal;
    p.window = window;
    p.scale = 1.0f / sqrtf((float)(C / NH));
    p.sl2 = p.scale * 1.4426950408889634f;
    p.dropping = d.p > 0.0f;
    p.key = d.key;
    p.seq_base = d.seq_base;
    p.thresh = (uint32_t)(d.p * 16777216.0f);
    p.dscale = 1.0f / (1.0f - d.p);
    p.layer = layer;
    return p;
}

__device__ __forceinline__ void seq_rows(const params &p, int b, int &row0, int &nq, int &len) {
    if (p.offs) {
        row0 = p.offs[b];
        nq = p.offs[b + 1] - row0;
    } else {
        row0 = b * p.T;
        nq = p.T;
    }
    len = p.lens ? min(p.lens[b], nq) : nq;
}

// Runs launch(p, nb) over the B sequences in chunks of at most
// QAC_FA_MAX_Z, p.b0 the chunk's first sequence: a grid of (row tiles,
// heads, nb) each. A chunk per launch keeps the kernels' own indexing
// (blockIdx.z) as cheap as a single launch's: folding the sequence into
// grid.x (two divisions per block) cost the forward some 30 registers a
// thread under ptxas 13.0.
template <typename L> inline cudaError_t qac_fa_chunks(params p, int B, L launch) {
    for (int b0 = 0; b0 < B; b0 += QAC_FA_MAX_Z) {
        p.b0 = b0;
        const cudaError_t e = launch(p, B - b0 < QAC_FA_MAX_Z ? B - b0 : QAC_FA_MAX_Z);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// Query t sees key j (j < len checked by the caller): qac_attention_causal_forward's rule;
// bidirectional, all keys or (window > 0: ModernBERT's local layers) those within the window.
__device__ __forceinline__ bool visible(const params &p, int j, int t) {
    if (!p.causal) return p.window <= 0 || (j - t <= p.window && t - j <= p.window);
    if (j == 0) return true;
    if (j > t) return false;
    return p.window <= 0 || j > t - p.window;
}

// The tiles of `tile` rows a bidirectional window reaches from rows [r0,
// r1): the first tile's start (from 0 otherwise) and one past the last row
// of [0, n) it can see (n otherwise). The tiles outside are never loaded.
__device__ __forceinline__ int window_first(const params &p, int r0, int tile) {
    return !p.causal && p.window > 0 && r0 > p.window ? (r0 - p.window) / tile * tile : 0;
}
__device__ __forceinline__ int window_end(const params &p, int r1, int n) {
    return !p.causal && p.window > 0 ? min(n, r1 + p.window) : n;
}

// The CPU's attention-dropout draw (model/layers.c, drop_att_row).
__device__ __forceinline__ float drop_factor(const params &p, uint64_t stream, int h, int t, int j) {
    const uint64_t ctr = ((uint64_t)h << 40) | ((uint64_t)t << 20) | (uint64_t)j;
    return (uint32_t)(qac_rng_u64(stream, ctr) >> 40) >= p.thresh ? p.dscale : 0.0f;
}

#ifndef QAC_FA_EMULATE
__device__ __forceinline__ uint32_t smem_addr(const void *ptr) {
    return (uint32_t)__cvta_generic_to_shared(ptr);
}

// 16 bytes global -> shared, asynchronously; zeros when !valid.
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void *ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(ptr))
                 : "memory");
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void *ptr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(ptr))
                 : "memory");
}
#else
// The instructions emulated on the CPU (tests/gpu/cuda_emu.h runs these
// kernels' source there): the same operands, the same lanes' results.
void emu_cp(void *dst, const void *src, int bytes, bool valid);
void emu_cp_wait();
void emu_ldsm4(uint32_t (&r)[4], const void *ptr, bool trans);
template <typename E> void emu_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
inline void cp16(void *dst, const void *src, bool valid) { emu_cp(dst, src, 16, valid); }
inline void cp4(void *dst, const void *src, bool valid) { emu_cp(dst, src, 4, valid); }
inline void cp_commit() {}
inline void cp_wait_all() { emu_cp_wait(); }
inline void ldsm4(uint32_t (&r)[4], const void *ptr) { emu_ldsm4(r, ptr, false); }
inline void ldsm4t(uint32_t (&r)[4], const void *ptr) { emu_ldsm4(r, ptr, true); }
#endif

// c += a b for one m16n8k16 tile, fp32 accumulators. Fragments (lane =
// 4g + i): a0 (row g, k 2i..2i+1), a1 (row g+8), a2 (row g, k 8+2i..),
// a3 (row g+8, k 8+2i..); b0 (k 2i..2i+1, col g), b1 (k 8+2i..); c0, c1
// (row g, cols 2i, 2i+1), c2, c3 (row g+8).
template <typename E> struct mma;
template <> struct mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifndef QAC_FA_EMULATE
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
        emu_mma<__nv_bfloat16>(c, a, b0, b1);
#endif
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        uint32_t r;
        memcpy(&r, &v, 4);
        return r;
    }
};
template <> struct mma<__half> {
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifndef QAC_FA_EMULATE
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
        emu_mma<__half>(c, a, b0, b1);
#endif
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        uint32_t r;
        memcpy(&r, &v, 4);
        return r;
    }
};

// Shared-memory rows of D elements padded to D + 8: consecutive rows start
// 16 bytes apart modulo 128, so the 8 row addresses of an ldmatrix hit
// distinct banks.
template <int D> struct lay {
    static constexpr int LD = D + 8, CH = D / 8; // row stride, 16-byte chunks per row
};

// Rows [r0, r0 + rows) of a sequence's part (col: its first column, the
// head's) into dst [rows][LD], asynchronously; rows at or past `valid` are
// zeros. Thread tid of NT takes chunks tid, tid + NT, ...
template <typename E, int D, int NT>
__device__ __forceinline__ void load_rows(E *dst, const E *seq, size_t ld, int col, int r0, int rows, int valid,
                                          int tid) {
    constexpr int LD = lay<D>::LD, CH = lay<D>::CH;
    for (int i = tid; i < rows * CH; i += NT) {
        const int r = i / CH, c = (i % CH) * 8;
        const bool ok = r0 + r < valid;
        cp16(dst + r * LD + c, ok ? seq + (size_t)(r0 + r) * ld + col + c : seq, ok);
    }
}

// The bias of those rows, added by the threads that loaded them once their
// copies have landed (before the barrier that publishes the tile): the
// value the unfused kernels use, E(E(x) + bias).
template <typename E, int D, int NT>
__device__ __forceinline__ void bias_rows(E *dst, const float *bias, int r0, int rows, int valid, int tid) {
    constexpr int LD = lay<D>::LD, CH = lay<D>::CH;
    if (!bias) return;
    for (int i = tid; i < rows * CH; i += NT) {
        const int r = i / CH, c = (i % CH) * 8;
        if (r0 + r >= valid) continue;
        uint4 raw = *reinterpret_cast<uint4 *>(dst + r * LD + c);
        E v[8]; // copies of the registers, not aliases
        memcpy((void *)v, &raw, 16);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = qac_from_float<E>(qac_to_float<E>(v[j]) + __ldg(bias + c + j));
        memcpy(&raw, (const void *)v, 16);
        *reinterpret_cast<uint4 *>(dst + r * LD + c) = raw;
    }
}

// A fragments (16 rows x 16 k) of the rows r0.. of a row-major tile.
template <int D>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const void *tile, int r0, int k0, int lane) {
    const char *t = reinterpret_cast<const char *>(tile);
    ldsm4(a, t + ((size_t)(r0 + (lane & 15)) * lay<D>::LD + k0 + (lane >> 4) * 8) * 2);
}
// B fragments of two n-tiles (rows n0..n0+15 of a row-major tile holding
// B^T, k k0..k0+15): b[0], b[1] for n-tile n0/8, b[2], b[3] for the next.
template <int D>
__device__ __forceinline__ void frag_bt(uint32_t (&b)[4], const void *tile, int n0, int k0, int lane) {
    const char *t = reinterpret_cast<const char *>(tile);
    const int mi = lane >> 3;
    ldsm4(b, t + ((size_t)(n0 + (mi >> 1) * 8 + (lane & 7)) * lay<D>::LD + k0 + (mi & 1) * 8) * 2);
}
// B fragments of a row-major tile holding B itself (rows = k k0..k0+15,
// columns n0..n0+15): b[0], b[1] for n-tile n0/8, b[2], b[3] for the next.
template <int D>
__device__ __forceinline__ void frag_b(uint32_t (&b)[4], const void *tile, int k0, int n0, int lane) {
    const char *t = reinterpret_cast<const char *>(tile);
    const int mi = lane >> 3;
    ldsm4t(b, t + ((size_t)(k0 + (mi & 1) * 8 + (lane & 7)) * lay<D>::LD + n0 + (mi >> 1) * 8) * 2);
}

// Accumulators of n-tiles 2kc and 2kc+1 as the A fragment of k-chunk kc:
// an accumulator's (row, 2i..2i+1) is the A operand's (row, k 2i..2i+1).
template <typename E>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
    a[0] = mma<E>::pack(lo[0], lo[1]);
    a[1] = mma<E>::pack(lo[2], lo[3]);
    a[2] = mma<E>::pack(hi[0], hi[1]);
    a[3] = mma<E>::pack(hi[2], hi[3]);
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// A warp's 16 rows of accumulators [D/8][4] (rows g scaled by s_lo, rows
// g+8 by s_hi) rounded into its 16 rows of the staging tile, then copied in
// 16-byte pieces to dst (row stride ld): rows r < nvalid, zeros for rows
// r >= zero_from (the dK and dV of padded keys).
template <typename E, int D>
__device__ __forceinline__ void stage_store(E *stage, const float (&acc)[D / 8][4], float s_lo, float s_hi, E *dst,
                                            size_t ld, int nvalid, int zero_from, int lane) {
    constexpr int LD = lay<D>::LD, CH = lay<D>::CH;
    const int g = lane >> 2, i = lane & 3;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
        *reinterpret_cast<uint32_t *>(stage + g * LD + dt * 8 + 2 * i) = mma<E>::pack(acc[dt][0] * s_lo, acc[dt][1] * s_lo);
        *reinterpret_cast<uint32_t *>(stage + (g + 8) * LD + dt * 8 + 2 * i) =
            mma<E>::pack(acc[dt][2] * s_hi, acc[dt][3] * s_hi);
    }
    __syncwarp();
    for (int k = lane; k < 16 * CH; k += 32) {
        const int r = k / CH, c = (k % CH) * 8;
        if (r >= nvalid) continue;
        uint4 v = r >= zero_from ? make_uint4(0u, 0u, 0u, 0u) : *reinterpret_cast<const uint4 *>(stage + r * LD + c);
        *reinterpret_cast<uint4 *>(dst + (size_t)r * ld + c) = v;
    }
}

} // namespace qac_fa

#endif
