// GPU exact inner-product search (kernels/qac_gpu_flat.h).
//
// The corpus lives on the device in fp16. A hit is a 64-bit key (the
// score's order-preserving image, then the row's tie rank: qac_topk.h), so
// "the k best" is one exact set, ties included. Two paths:
//
// Fused (1 to 16 queries; a search this size is bound by reading the
// corpus once). One kernel scores every row against every query on the
// tensor cores (mma.sync m16n8k16, fp16 in, fp32 sums) straight from
// registers: each lane loads 16 contiguous bytes of two rows per 32-column
// chunk and the queries' columns are taken in the same permuted order, so
// the A fragments need no shared memory. A row is kept when its key is at
// or above the query's threshold: the k-th best key of a strided sample of
// the corpus, scored first by the same kernel (the k-th best of a subset is
// at most the k-th best of the whole, so no row of the answer is dropped).
// About rows x k / sample rows pass; one radix selection over them and a
// sort finish. Too many candidates for their room, or too few (cannot
// happen with equal arithmetic, checked anyway), rerun the pass tiled.
//
// Tiled (more queries). cuBLAS scores corpus tiles (fp16 in, fp32 out) on
// one stream while the other filters the previous tile: a row is appended
// to its query's list when its key beats the query's running k-th key, and
// a list longer than compact_factor x k is cut back to k by a radix
// selection, which also raises the threshold. Two score buffers let tile
// i+1's product run while tile i is filtered.
//
// The radix selection (one block per query): AND/OR over the keys to skip
// the shared high bits, then radix_bits-bit digits from the top, a shared-
// memory histogram per digit over the keys matching the prefix, the
// digit's choice by a warp scan, until the keys matching the prefix are
// exactly those still needed; then one gather. The CPU twin
// (topk_twin.c) runs the same passes and thresholds.
//
// Device memory: capacity x dim x 2 bytes for the corpus (8,841,823 x 768:
// 13.6 GB), a 64 K-row fp32 staging buffer for adds (dim x 256 KiB), the
// cuBLAS workspace (32 MiB), two score tiles of nq x tile floats (64 MiB
// each at the default tile), lists of nq x (compact_factor k + tile) keys
// (143 MiB at 256 queries, k 1000) or candidates of nq x about 8 rows / 64
// keys (fused), a sample of nq x k x oversample keys, and with a tie order
// 8 bytes a row.
#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"
#include "qac_topk.h"

extern "C" {
#include "qac_gpu_flat.h"
}

// QAC_TOPK_EMULATE: compiled as host C++ by tests/index/test_gpu_flat_emulated.cpp,
// which supplies the warp instructions, the launches and the runtime.
#ifdef QAC_TOPK_EMULATE
#define QAC_LAUNCH(kernel, grid, block, smem, stream) qac_emu_launcher(kernel, grid, block, smem)
#else
#define QAC_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#endif

namespace {

constexpr int KMAX = QAC_GPU_FLAT_KMAX;
constexpr int FQ = QAC_GPU_FLAT_FUSED_MAXQ;
constexpr int TQ = QAC_TOPK_TILED_MAXQ;
constexpr int QMAX = TQ > FQ ? TQ : FQ;
constexpr int HIST_MAX = 1 << 12;
constexpr int STAGE_ROWS = 65536;
constexpr size_t CUBLAS_WORKSPACE = 32u << 20;
constexpr unsigned FULL = 0xffffffffu;
typedef unsigned long long u64;

__device__ __forceinline__ uint32_t rank_of(const uint32_t *rank, int64_t row) {
    return rank ? __ldg(rank + row) : qac_topk_default_rank(row);
}

__device__ __forceinline__ int64_t row_of_rank(const int32_t *row_of, uint32_t r) {
    return row_of ? (int64_t)row_of[r] : (int64_t)(0xffffffffu - r);
}

// Slot in an append-only array for lanes with take, -1 for the others.
// Every lane of the warp must call it.
__device__ __forceinline__ int warp_append(int *counter, bool take) {
    const int lane = threadIdx.x & 31;
    const unsigned bal = __ballot_sync(FULL, take);
    if (!bal) return -1;
    const int leader = __ffs(bal) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(counter, __popc(bal));
    base = __shfl_sync(FULL, base, leader);
    return take ? base + __popc(bal & ((1u << lane) - 1u)) : -1;
}

// ---------------- the radix selection ----------------

struct select_shared {
    uint32_t hist[HIST_MAX];
    qac_topk_radix r;
    u64 all_and, all_or, kth;
    int out_count, eq_count;
};

// Warp 0: the digit holding the remaining-th largest key (the serial walk
// of qac_topk_pick_digit, by segments of bins, lane 0 the highest), then
// one lane fixes it.
__device__ void pick_digit_warp(select_shared &sh, int nb, int bits) {
    const int lane = threadIdx.x & 31;
    const long long rem = sh.r.remaining;
    const int per = nb >= 32 ? nb / 32 : 1;
    const int hi = nb - lane * per; // this lane's bins: [hi - per, hi)
    long long s = 0;
    for (int j = 1; j <= per; j++)
        if (hi - j >= 0) s += sh.hist[hi - j];
    long long incl = s;
    for (int off = 1; off < 32; off <<= 1) {
        const long long y = __shfl_up_sync(FULL, incl, off);
        if (lane >= off) incl += y;
    }
    const long long excl = incl - s;
    const unsigned bal = __ballot_sync(FULL, excl < rem && rem <= incl);
    if (!bal) { // cannot happen: the keys matching the prefix are never fewer than those still needed
        if (lane == 0) sh.r.done = 1;
        return;
    }
    if (lane == __ffs(bal) - 1) {
        long long acc = excl;
        int d = hi - 1;
        for (; d > hi - per && d > 0; d--) {
            if (acc + sh.hist[d] >= rem) break;
            acc += sh.hist[d];
        }
        qac_topk_radix_step(&sh.r, bits, d, acc, sh.hist[d]);
    }
}

// The k largest of keys[0, n) (n > k >= 1, distinct keys) into out[0, k),
// sh.kth the smallest of them. Every thread of the block calls it.
__device__ __forceinline__ void block_select(const u64 *keys, int64_t n, int k, int rb, u64 *out, select_shared &sh) {
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    u64 a = ~0ull, o = 0ull;
    for (int64_t i = tid; i < n; i += nt) {
        const u64 v = keys[i];
        a &= v;
        o |= v;
    }
    for (int off = 16; off; off >>= 1) {
        a &= __shfl_xor_sync(FULL, a, off);
        o |= __shfl_xor_sync(FULL, o, off);
    }
    if (tid == 0) {
        sh.all_and = ~0ull;
        sh.all_or = 0ull;
    }
    __syncthreads();
    if (lane == 0) {
        atomicAnd(&sh.all_and, a);
        atomicOr(&sh.all_or, o);
    }
    __syncthreads();
    if (tid == 0) qac_topk_radix_start(&sh.r, sh.all_and, sh.all_or, k);
    __syncthreads();
    while (!sh.r.done) {
        const int bits = qac_topk_radix_bits(&sh.r, rb), nb = 1 << bits, shift = sh.r.shift - bits;
        const u64 mask = sh.r.mask, prefix = sh.r.prefix;
        for (int i = tid; i < nb; i += nt) sh.hist[i] = 0;
        __syncthreads();
        for (int64_t i = tid; i < n; i += nt) {
            const u64 v = keys[i];
            if ((v & mask) == prefix) atomicAdd(&sh.hist[(v >> shift) & (u64)(nb - 1)], 1u);
        }
        __syncthreads();
        if (warp == 0) pick_digit_warp(sh, nb, bits);
        __syncthreads();
    }
    if (tid == 0) {
        sh.out_count = 0;
        sh.eq_count = 0;
        sh.kth = ~0ull;
    }
    __syncthreads();
    const u64 mask = sh.r.mask, prefix = sh.r.prefix;
    const long long rem = sh.r.remaining;
    u64 lo = ~0ull;
    for (int64_t base = 0; base < n; base += nt) {
        const int64_t i = base + tid;
        const u64 v = i < n ? keys[i] : 0ull;
        const u64 mv = v & mask;
        const bool eq = i < n && mv == prefix;
        const int pe = warp_append(&sh.eq_count, eq);
        const bool take = i < n && (mv > prefix || (eq && pe < rem));
        const int pos = warp_append(&sh.out_count, take);
        if (take && pos < k) {
            out[pos] = v;
            lo = v < lo ? v : lo;
        }
    }
    for (int off = 16; off; off >>= 1) {
        const u64 y = __shfl_xor_sync(FULL, lo, off);
        lo = y < lo ? y : lo;
    }
    if (lane == 0) atomicMin(&sh.kth, lo);
    __syncthreads();
}

enum { SEL_THRESHOLD = 0, SEL_COMPACT = 1, SEL_FINAL = 2 };

struct sel_args {
    u64 *keys;        // [nq, ld]: a sample, a list or candidates per query
    int64_t ld;
    int *count;       // per query; NULL: n_fixed keys each
    int64_t n_fixed;
    int keff, radix_bits;
    int compact_at;   // COMPACT: cut lists longer than this
    int64_t cap;      // FINAL: candidate room; 0: no check (tiled)
    u64 *thr;         // THRESHOLD, COMPACT: the k-th key per query
    int kout;         // FINAL: the caller's k (row stride of the outputs)
    float *out_scores;
    int64_t *out_rows;
    int *bad;         // FINAL with cap: candidates overflowed or fell short
    const int32_t *row_of;
};

// One block per query. THRESHOLD: the k-th key of a sample; COMPACT: a list
// cut back to k; FINAL: the k best, sorted, as scores and rows. The minimum
// of one block per SM is explicit: with the thread count alone ptxas 13.0
// aimed at two 1,024-thread blocks (32 registers) and spilled 32 bytes to a
// stack frame; so it takes 40 and none (the default 512 threads still fit
// three blocks an SM).
__global__ void __launch_bounds__(1024, 1) select_kernel(sel_args a, int mode) {
    __shared__ select_shared sh;
    __shared__ u64 sel[KMAX];
    const int q = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    u64 *keys = a.keys + (size_t)q * a.ld;
    const int64_t n = a.count ? (int64_t)a.count[q] : a.n_fixed;
    if (mode == SEL_THRESHOLD) {
        if (n <= a.keff) {
            if (tid == 0) a.thr[q] = 0ull;
            return;
        }
        block_select(keys, n, a.keff, a.radix_bits, sel, sh);
        if (tid == 0) a.thr[q] = sh.kth;
        return;
    }
    if (mode == SEL_COMPACT) {
        if (n <= a.compact_at) return;
        block_select(keys, n, a.keff, a.radix_bits, sel, sh);
        for (int i = tid; i < a.keff; i += nt) keys[i] = sel[i];
        if (tid == 0) {
            a.count[q] = a.keff;
            a.thr[q] = sh.kth;
        }
        return;
    }
    if (a.cap && (n > a.cap || n < a.keff)) {
        if (tid == 0) a.bad[q] = 1;
        return;
    }
    int m;
    if (n > a.keff) {
        block_select(keys, n, a.keff, a.radix_bits, sel, sh);
        m = a.keff;
    } else {
        m = (int)n;
        for (int i = tid; i < m; i += nt) sel[i] = keys[i];
    }
    int P = 1;
    while (P < m) P <<= 1;
    for (int i = m + tid; i < P; i += nt) sel[i] = 0ull;
    __syncthreads();
    // bitonic sort, descending
    for (int size = 2; size <= P; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = tid; i < P; i += nt) {
                const int j = i ^ stride;
                if (j <= i) continue;
                const u64 x = sel[i], y = sel[j];
                if ((i & size) == 0 ? x < y : x > y) {
                    sel[i] = y;
                    sel[j] = x;
                }
            }
            __syncthreads();
        }
    for (int i = tid; i < a.kout; i += nt) {
        const size_t o = (size_t)q * a.kout + i;
        if (i < m) {
            a.out_scores[o] = qac_topk_key_score((uint32_t)(sel[i] >> 32));
            a.out_rows[o] = row_of_rank(a.row_of, (uint32_t)sel[i]);
        } else {
            a.out_scores[o] = -FLT_MAX;
            a.out_rows[o] = -1;
        }
    }
}

// ---------------- the fused scan ----------------

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
#ifdef QAC_TOPK_EMULATE
    qac_emu_mma16816(d, a0, a1, a2, a3, b0, b1);
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

struct fused_args {
    const __half *x;     // corpus [n, dim]
    int64_t n;
    int dim, dpad;       // dpad: the queries' row stride in shared memory (halves)
    const __half *q16;   // [nq, dim]
    int nq;
    int64_t groups;      // groups of 16 rows (or sampled rows) to score
    int64_t sample;      // SAMPLE: sampled rows
    u64 *out;            // SAMPLE: keys [nq, sample]; else candidates [nq, cap]
    int64_t cap;
    const u64 *thr;      // per query: keep keys >= thr
    int *count;          // per query: candidates found (may pass cap)
    const uint32_t *rank;
};

// Warp w scores rows [16 g, 16 g + 16) of its groups against NT x 8 query
// slots. Fragments (m16n8k16, A row-major rows x columns, B the queries):
// lane (g = lane / 4, t = lane % 4) loads columns [32 c + 8 t, + 8) of rows
// g and g + 8 as one uint4 each; k-step s of chunk c takes halves
// 4 s .. 4 s + 3 of them, which stand for the fragment columns 2t, 2t+1
// (a0 / a1) and 2t+8, 2t+9 (a2 / a3). The B fragment of query g takes the
// same columns of the query, so each product pairs equal columns.
template <int NT, int U, bool SAMPLE>
__global__ void fused_scan_kernel(fused_args a) {
#ifdef QAC_TOPK_EMULATE
    __half *qs = (__half *)qac_emu_dyn_smem;
#else
    extern __shared__ __align__(16) __half qs[]; // [NT * 8, dpad], zero past dim and nq
#endif
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int warps = blockDim.x >> 5, warp = tid >> 5;
    for (int i = tid; i < NT * 8 * a.dpad; i += blockDim.x) {
        const int qi = i / a.dpad, c = i - qi * a.dpad;
        qs[i] = qi < a.nq && c < a.dim ? a.q16[(size_t)qi * a.dim + c] : __float2half(0.0f);
    }
    u64 th[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int qi = nt * 8 + 2 * t + j;
            th[nt][j] = SAMPLE || qi >= a.nq ? ~0ull : a.thr[qi];
        }
    __syncthreads();
    const int nchunks = (a.dim + 31) >> 5;
    const int64_t gstride = (int64_t)gridDim.x * warps;
    for (int64_t gi = (int64_t)blockIdx.x * warps + warp; gi < a.groups; gi += gstride) {
        const int64_t j_lo = gi * 16 + g, j_hi = j_lo + 8;
        bool v_lo, v_hi;
        int64_t r_lo, r_hi;
        if (SAMPLE) {
            v_lo = j_lo < a.sample;
            v_hi = j_hi < a.sample;
            r_lo = v_lo ? qac_topk_sample_row(j_lo, a.n, a.sample) : 0;
            r_hi = v_hi ? qac_topk_sample_row(j_hi, a.n, a.sample) : 0;
        } else {
            v_lo = j_lo < a.n;
            v_hi = j_hi < a.n;
            r_lo = v_lo ? j_lo : 0;
            r_hi = v_hi ? j_hi : 0;
        }
        const __half *p_lo = a.x + (size_t)r_lo * a.dim + 8 * t, *p_hi = a.x + (size_t)r_hi * a.dim + 8 * t;
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
        for (int c0 = 0; c0 < nchunks; c0 += U) {
            uint4 lo[U], hi[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const bool in = (c0 + u) * 32 + 8 * t < a.dim;
                lo[u] = in && v_lo ? __ldcs((const uint4 *)(p_lo + (c0 + u) * 32)) : make_uint4(0u, 0u, 0u, 0u);
                hi[u] = in && v_hi ? __ldcs((const uint4 *)(p_hi + (c0 + u) * 32)) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (c0 + u >= nchunks) break;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const uint4 b = *(const uint4 *)(qs + (nt * 8 + g) * a.dpad + (c0 + u) * 32 + 8 * t);
                    mma16816(acc[nt], lo[u].x, hi[u].x, lo[u].y, hi[u].y, b.x, b.y);
                    mma16816(acc[nt], lo[u].z, hi[u].z, lo[u].w, hi[u].w, b.z, b.w);
                }
            }
        }
        // acc[nt][i]: query nt * 8 + 2 t + (i & 1), row g (i < 2) or g + 8
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int qi = nt * 8 + 2 * t + (i & 1);
                const bool up = i >= 2;
                if (qi >= a.nq || !(up ? v_hi : v_lo)) continue;
                const int64_t row = up ? r_hi : r_lo;
                if (SAMPLE) {
                    a.out[(size_t)qi * a.sample + (up ? j_hi : j_lo)] = qac_topk_key(acc[nt][i], rank_of(a.rank, row));
                } else {
                    const uint32_t sk = qac_topk_score_key(acc[nt][i]);
                    const uint32_t th_hi = (uint32_t)(th[nt][i & 1] >> 32);
                    if (sk < th_hi) continue;
                    const uint32_t rk = rank_of(a.rank, row);
                    if (sk == th_hi && rk < (uint32_t)th[nt][i & 1]) continue;
                    const int pos = atomicAdd(&a.count[qi], 1);
                    if (pos < a.cap) a.out[(size_t)qi * a.cap + pos] = ((u64)sk << 32) | rk;
                }
            }
    }
}

// ---------------- the tiled path's filter ----------------

// Block (x, q): rows [x per_block, + per_block) of query q's score row;
// keys above the query's threshold are appended to its list.
__global__ void filter_kernel(const float *scores, int ld, int rows_t, int64_t row0, int per_block, const u64 *thr,
                              u64 *list, int64_t list_cap, int *count, const uint32_t *rank) {
    const int q = blockIdx.y;
    const float *s = scores + (size_t)q * ld;
    const u64 th = thr[q];
    const uint32_t th_hi = (uint32_t)(th >> 32), th_lo = (uint32_t)th;
    const int begin = blockIdx.x * per_block;
    const int end = rows_t - begin < per_block ? rows_t : begin + per_block;
    int *cnt = count + q;
    u64 *lq = list + (size_t)q * list_cap;
    for (int base = begin; base < end; base += blockDim.x * 4) {
        const int i = base + threadIdx.x * 4;
        // ld and per_block are multiples of 4: a float4 never leaves the row's room
        const float4 v = i < end ? __ldcs((const float4 *)(s + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
        const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t sk = qac_topk_score_key(f[j]);
            bool take = i + j < end && sk >= th_hi;
            uint32_t rk = 0;
            if (take) {
                rk = rank_of(rank, row0 + i + j);
                take = sk > th_hi || rk > th_lo;
            }
            const int pos = warp_append(cnt, take);
            if (take) lq[pos] = ((u64)sk << 32) | rk;
        }
    }
}

// ---------------- helpers ----------------

__global__ void invert_rank_kernel(const uint32_t *rank, int32_t *row_of, int64_t n) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (int64_t)gridDim.x * blockDim.x)
        row_of[rank[r]] = (int32_t)r;
}

// A read-only pass: every 16-byte word loaded once, XOR-reduced; the result
// is written only when it equals a constant, so the loads stay.
template <int U> __global__ void read_kernel(const uint4 *p, size_t n16, unsigned *sink) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

} // namespace

struct qac_gpu_flat {
    pthread_mutex_t lock;
    int dim, device, sms;
    size_t smem_optin;
    int64_t capacity, n;
    __half *corpus;      // [capacity, dim]
    float *stage;        // [STAGE_ROWS, dim] fp32 staging for adds
    cudaStream_t s_gemm, s_sel;
    cudaEvent_t gemm_done[2], sel_done[2], ev0, ev1;
    cublasHandle_t blas;
    void *blas_ws;
    float *q32;          // [QMAX, dim]
    __half *q16;
    float *scores[2];    // product tiles, score_cap floats each
    size_t score_cap;
    u64 *keys;           // lists or candidates, keys_cap entries
    size_t keys_cap;
    u64 *sample;         // fused threshold sample, sample_cap entries
    size_t sample_cap;
    int *count;          // [QMAX]
    u64 *thr;            // [QMAX]
    int *bad;            // [QMAX]
    float *out_scores;   // [QMAX, KMAX]
    int64_t *out_rows;
    uint32_t *rank;      // tie order [capacity] (NULL: default)
    int32_t *row_of;
    int tie_order;       // rank and row_of hold the order of the current rows
    unsigned *sink;
    qac_gpu_flat_tuning tune;
    qac_gpu_flat_stats stats;
};

namespace {

qac_status flat_init(qac_gpu_flat *g) {
    QAC_CU(cudaGetDevice(&g->device));
    cudaDeviceProp prop;
    QAC_CU(cudaGetDeviceProperties(&prop, g->device));
    g->sms = prop.multiProcessorCount;
    g->smem_optin = prop.sharedMemPerBlockOptin;
    QAC_CU(cudaMalloc((void **)&g->corpus, (size_t)g->capacity * g->dim * sizeof(__half)));
    QAC_CU(cudaMalloc((void **)&g->stage, (size_t)STAGE_ROWS * g->dim * sizeof(float)));
    QAC_CU(cudaStreamCreateWithFlags(&g->s_gemm, cudaStreamNonBlocking));
    QAC_CU(cudaStreamCreateWithFlags(&g->s_sel, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        QAC_CU(cudaEventCreateWithFlags(&g->gemm_done[i], cudaEventDisableTiming));
        QAC_CU(cudaEventCreateWithFlags(&g->sel_done[i], cudaEventDisableTiming));
    }
    QAC_CU(cudaEventCreate(&g->ev0));
    QAC_CU(cudaEventCreate(&g->ev1));
    QAC_CUBLAS(cublasCreate(&g->blas));
    QAC_CUBLAS(cublasSetStream(g->blas, g->s_gemm));
    QAC_CU(cudaMalloc(&g->blas_ws, CUBLAS_WORKSPACE));
    QAC_CUBLAS(cublasSetWorkspace(g->blas, g->blas_ws, CUBLAS_WORKSPACE));
    QAC_CU(cudaMalloc((void **)&g->q32, (size_t)QMAX * g->dim * sizeof(float)));
    QAC_CU(cudaMalloc((void **)&g->q16, (size_t)QMAX * g->dim * sizeof(__half)));
    QAC_CU(cudaMalloc((void **)&g->count, QMAX * sizeof(int)));
    QAC_CU(cudaMalloc((void **)&g->thr, QMAX * sizeof(u64)));
    QAC_CU(cudaMalloc((void **)&g->bad, QMAX * sizeof(int)));
    QAC_CU(cudaMalloc((void **)&g->out_scores, (size_t)QMAX * KMAX * sizeof(float)));
    QAC_CU(cudaMalloc((void **)&g->out_rows, (size_t)QMAX * KMAX * sizeof(int64_t)));
    QAC_CU(cudaMalloc((void **)&g->sink, sizeof(unsigned)));
    return QAC_OK;
}

// Grow a device buffer to hold `need` elements of `size` bytes (contents lost).
qac_status ensure(qac_gpu_flat *g, void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return QAC_OK;
    QAC_CU(cudaStreamSynchronize(g->s_gemm));
    QAC_CU(cudaStreamSynchronize(g->s_sel));
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    QAC_CU(cudaMalloc(p, need * size));
    *cap = need;
    return QAC_OK;
}

qac_status ensure_scores(qac_gpu_flat *g, size_t floats) {
    if (floats <= g->score_cap) return QAC_OK;
    size_t c0 = g->score_cap, c1 = g->score_cap;
    qac_status st = ensure(g, (void **)&g->scores[0], &c0, floats, sizeof(float));
    if (st == QAC_OK) st = ensure(g, (void **)&g->scores[1], &c1, floats, sizeof(float));
    g->score_cap = st == QAC_OK ? floats : 0;
    if (st != QAC_OK) { // keep the two in step
        cudaFree(g->scores[0]);
        cudaFree(g->scores[1]);
        g->scores[0] = g->scores[1] = NULL;
    }
    return st;
}

const uint32_t *rank_ptr(const qac_gpu_flat *g) { return g->tie_order ? g->rank : NULL; }
const int32_t *row_of_ptr(const qac_gpu_flat *g) { return g->tie_order ? g->row_of : NULL; }

qac_status upload_queries(qac_gpu_flat *g, const float *queries, int nq) {
    QAC_CU(cudaMemcpyAsync(g->q32, queries, (size_t)nq * g->dim * sizeof(float), cudaMemcpyHostToDevice, g->s_gemm));
    QAC_CU(qac_k_from_f32(g->q16, g->q32, (size_t)nq * g->dim, QAC_PREC_FP16, g->s_gemm));
    return QAC_OK;
}

sel_args base_sel_args(const qac_gpu_flat *g, const qac_topk_plan *p) {
    sel_args a;
    memset(&a, 0, sizeof a);
    a.keff = p->keff;
    a.radix_bits = g->tune.radix_bits;
    a.thr = g->thr;
    a.kout = p->k;
    a.out_scores = g->out_scores;
    a.out_rows = g->out_rows;
    a.bad = g->bad;
    a.row_of = row_of_ptr(g);
    return a;
}

qac_status fetch_results(qac_gpu_flat *g, cudaStream_t s, int nq, int k, float *scores, int64_t *rows) {
    QAC_CU(cudaMemcpyAsync(scores, g->out_scores, (size_t)nq * k * sizeof(float), cudaMemcpyDeviceToHost, s));
    QAC_CU(cudaMemcpyAsync(rows, g->out_rows, (size_t)nq * k * sizeof(int64_t), cudaMemcpyDeviceToHost, s));
    return QAC_OK;
}

typedef void (*fused_fn)(fused_args);

fused_fn fused_kernel(int nt, int unroll, bool sample) {
    if (nt == 1) {
        if (unroll == 4) return sample ? fused_scan_kernel<1, 4, true> : fused_scan_kernel<1, 4, false>;
        return sample ? fused_scan_kernel<1, 8, true> : fused_scan_kernel<1, 8, false>;
    }
    if (unroll == 4) return sample ? fused_scan_kernel<2, 4, true> : fused_scan_kernel<2, 4, false>;
    return sample ? fused_scan_kernel<2, 8, true> : fused_scan_kernel<2, 8, false>;
}

qac_status launch_fused(qac_gpu_flat *g, fused_args a, int nt, bool sample) {
    const int threads = g->tune.fused_threads, warps = threads / 32;
    const fused_fn fn = fused_kernel(nt, g->tune.fused_unroll, sample);
    const size_t smem = (size_t)nt * 8 * a.dpad * sizeof(__half);
    if (smem > 48u * 1024) QAC_CU(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaFuncAttributes fa;
    QAC_CU(cudaFuncGetAttributes(&fa, fn));
    if (threads > fa.maxThreadsPerBlock)
        return qac_set_error(QAC_ERR_INVALID, "GPU flat search: fused_threads %d exceeds the kernel's %d", threads,
                             fa.maxThreadsPerBlock);
    int64_t blocks = (int64_t)g->sms * g->tune.fused_blocks, need = (a.groups + warps - 1) / warps;
    if (blocks > need) blocks = need;
    if (blocks < 1) blocks = 1;
    QAC_LAUNCH(fn, (unsigned)blocks, threads, smem, g->s_gemm)(a);
    QAC_CU(cudaGetLastError());
    return QAC_OK;
}

qac_status launch_select(qac_gpu_flat *g, const sel_args &a, int mode, int nq, cudaStream_t s) {
    QAC_LAUNCH(select_kernel, nq, g->tune.select_threads, 0, s)(a, mode);
    QAC_CU(cudaGetLastError());
    return QAC_OK;
}

// One fused pass of nq <= 16 queries; *ok = 0 when it must be rerun tiled.
qac_status search_fused(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores, int64_t *rows, int *ok) {
    qac_topk_plan p;
    qac_topk_plan_make(&p, g->n, nq, k, &g->tune);
    const bool sampled = p.sample > p.keff;
    qac_status st = ensure(g, (void **)&g->keys, &g->keys_cap, (size_t)nq * p.cap, sizeof(u64));
    if (st == QAC_OK && sampled) st = ensure(g, (void **)&g->sample, &g->sample_cap, (size_t)nq * p.sample, sizeof(u64));
    if (st != QAC_OK) return st;
    if ((st = upload_queries(g, queries, nq))) return st;
    const int nt = nq <= 8 ? 1 : 2;
    fused_args a;
    memset(&a, 0, sizeof a);
    a.x = g->corpus;
    a.n = g->n;
    a.dim = g->dim;
    a.dpad = (g->dim + 63) / 64 * 64 + 32; // row stride = 64 mod 128 bytes: the 8 rows of a load phase miss each other's banks
    a.q16 = g->q16;
    a.nq = nq;
    a.rank = rank_ptr(g);
    a.thr = g->thr;
    sel_args sa = base_sel_args(g, &p);
    if (sampled) {
        a.sample = p.sample;
        a.groups = (p.sample + 15) / 16;
        a.out = g->sample;
        if ((st = launch_fused(g, a, nt, true))) return st;
        sa.keys = g->sample;
        sa.ld = p.sample;
        sa.n_fixed = p.sample;
        if ((st = launch_select(g, sa, SEL_THRESHOLD, nq, g->s_gemm))) return st;
    } else {
        QAC_CU(cudaMemsetAsync(g->thr, 0, nq * sizeof(u64), g->s_gemm));
    }
    QAC_CU(cudaMemsetAsync(g->count, 0, nq * sizeof(int), g->s_gemm));
    QAC_CU(cudaMemsetAsync(g->bad, 0, nq * sizeof(int), g->s_gemm));
    a.sample = 0;
    a.groups = (g->n + 15) / 16;
    a.out = g->keys;
    a.cap = p.cap;
    a.count = g->count;
    if ((st = launch_fused(g, a, nt, false))) return st;
    sa.keys = g->keys;
    sa.ld = p.cap;
    sa.count = g->count;
    sa.n_fixed = 0;
    sa.cap = p.cap;
    if ((st = launch_select(g, sa, SEL_FINAL, nq, g->s_gemm))) return st;
    int bad[FQ], count[FQ];
    QAC_CU(cudaMemcpyAsync(bad, g->bad, nq * sizeof(int), cudaMemcpyDeviceToHost, g->s_gemm));
    QAC_CU(cudaMemcpyAsync(count, g->count, nq * sizeof(int), cudaMemcpyDeviceToHost, g->s_gemm));
    if ((st = fetch_results(g, g->s_gemm, nq, k, scores, rows))) return st;
    QAC_CU(cudaStreamSynchronize(g->s_gemm));
    *ok = 1;
    for (int i = 0; i < nq; i++)
        if (bad[i]) *ok = 0;
    qac_gpu_flat_stats *s = &g->stats;
    memset(s, 0, sizeof *s);
    s->path = QAC_GPU_FLAT_FUSED;
    s->nq = nq;
    s->sample_rows = sampled ? p.sample : 0;
    s->candidate_cap = p.cap;
    for (int i = 0; i < nq; i++) s->candidates[i] = count[i];
    return QAC_OK;
}

// One tiled pass of nq <= 256 queries.
qac_status search_tiled(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores, int64_t *rows) {
    qac_topk_plan p;
    qac_topk_plan_make(&p, g->n, nq, k, &g->tune);
    const int tile = p.tile;
    qac_status st = ensure_scores(g, (size_t)nq * tile);
    if (st == QAC_OK) st = ensure(g, (void **)&g->keys, &g->keys_cap, (size_t)nq * p.list_cap, sizeof(u64));
    if (st != QAC_OK) return st;
    if ((st = upload_queries(g, queries, nq))) return st;
    QAC_CU(cudaMemsetAsync(g->count, 0, nq * sizeof(int), g->s_gemm));
    QAC_CU(cudaMemsetAsync(g->thr, 0, nq * sizeof(u64), g->s_gemm));
    // the selection stream starts after the resets
    QAC_CU(cudaEventRecord(g->gemm_done[1], g->s_gemm));
    QAC_CU(cudaStreamWaitEvent(g->s_sel, g->gemm_done[1], 0));
    sel_args sa = base_sel_args(g, &p);
    sa.keys = g->keys;
    sa.ld = p.list_cap;
    sa.count = g->count;
    sa.compact_at = p.compact_at;
    const int threads = g->tune.filter_threads, per_block = threads * 4 * 8;
    const float one = 1.0f, zero = 0.0f;
    int t = 0;
    for (int64_t start = 0; start < g->n; start += tile, t++) {
        const int b = t & 1;
        const int rows_t = (int)(g->n - start < tile ? g->n - start : tile);
        QAC_CU(cudaStreamWaitEvent(g->s_gemm, g->sel_done[b], 0));
        // Column-major: S^T [rows_t, nq] (ld tile) = X_tile [rows_t, dim] x Q^T [dim, nq].
        QAC_CUBLAS(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows_t, nq, g->dim, &one,
                                g->corpus + (size_t)start * g->dim, CUDA_R_16F, g->dim, g->q16, CUDA_R_16F, g->dim,
                                &zero, g->scores[b], CUDA_R_32F, tile, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        QAC_CU(cudaEventRecord(g->gemm_done[b], g->s_gemm));
        QAC_CU(cudaStreamWaitEvent(g->s_sel, g->gemm_done[b], 0));
        const dim3 grid((unsigned)((rows_t + per_block - 1) / per_block), (unsigned)nq);
        QAC_LAUNCH(filter_kernel, grid, threads, 0, g->s_sel)(g->scores[b], tile, rows_t, start, per_block, g->thr,
                                                             g->keys, p.list_cap, g->count, rank_ptr(g));
        QAC_CU(cudaGetLastError());
        if ((st = launch_select(g, sa, SEL_COMPACT, nq, g->s_sel))) return st;
        QAC_CU(cudaEventRecord(g->sel_done[b], g->s_sel));
    }
    if ((st = launch_select(g, sa, SEL_FINAL, nq, g->s_sel))) return st;
    if ((st = fetch_results(g, g->s_sel, nq, k, scores, rows))) return st;
    QAC_CU(cudaStreamSynchronize(g->s_sel));
    QAC_CU(cudaStreamSynchronize(g->s_gemm));
    qac_gpu_flat_stats *s = &g->stats;
    const int fallback = s->fallback;
    memset(s, 0, sizeof *s);
    s->path = QAC_GPU_FLAT_TILED;
    s->fallback = fallback;
    s->nq = nq;
    s->tiles = t;
    return QAC_OK;
}

} // namespace

extern "C" void qac_gpu_flat_free(qac_gpu_flat *g) {
    if (!g) return;
    if (g->s_gemm) cudaStreamSynchronize(g->s_gemm);
    if (g->s_sel) cudaStreamSynchronize(g->s_sel);
    cudaFree(g->corpus);
    cudaFree(g->stage);
    cudaFree(g->q32);
    cudaFree(g->q16);
    cudaFree(g->scores[0]);
    cudaFree(g->scores[1]);
    cudaFree(g->keys);
    cudaFree(g->sample);
    cudaFree(g->count);
    cudaFree(g->thr);
    cudaFree(g->bad);
    cudaFree(g->out_scores);
    cudaFree(g->out_rows);
    cudaFree(g->rank);
    cudaFree(g->row_of);
    cudaFree(g->sink);
    cudaFree(g->blas_ws);
    if (g->blas) cublasDestroy(g->blas);
    for (int i = 0; i < 2; i++) {
        if (g->gemm_done[i]) cudaEventDestroy(g->gemm_done[i]);
        if (g->sel_done[i]) cudaEventDestroy(g->sel_done[i]);
    }
    if (g->ev0) cudaEventDestroy(g->ev0);
    if (g->ev1) cudaEventDestroy(g->ev1);
    if (g->s_gemm) cudaStreamDestroy(g->s_gemm);
    if (g->s_sel) cudaStreamDestroy(g->s_sel);
    cudaGetLastError();
    pthread_mutex_destroy(&g->lock);
    free(g);
}

extern "C" qac_status qac_gpu_flat_create(qac_gpu_flat **out, int dim, int64_t capacity) {
    *out = NULL;
    if (!qac_cuda_available()) return qac_set_error(QAC_ERR_UNSUPPORTED, "GPU flat search: no usable CUDA GPU");
    if (dim < 1 || dim > 65536)
        return qac_set_error(QAC_ERR_INVALID, "GPU flat search: dimension %d out of range [1, 65536]", dim);
    if (capacity < 1 || capacity > INT32_MAX)
        return qac_set_error(QAC_ERR_INVALID, "GPU flat search: capacity %lld out of range [1, %d]",
                             (long long)capacity, INT32_MAX);
    qac_gpu_flat *g = (qac_gpu_flat *)calloc(1, sizeof *g);
    if (!g) return qac_set_error(QAC_ERR_NOMEM, "GPU flat search: out of host memory");
    pthread_mutex_init(&g->lock, NULL);
    g->dim = dim;
    g->capacity = capacity;
    qac_gpu_flat_tuning_default(&g->tune);
    qac_status st = flat_init(g);
    if (st != QAC_OK) {
        qac_gpu_flat_free(g);
        return qac_wrap_error(st, "GPU flat search: %lld x %d fp16 vectors (%.2f GB)", (long long)capacity, dim,
                              (double)capacity * dim * 2 / 1e9);
    }
    *out = g;
    return QAC_OK;
}

extern "C" qac_status qac_gpu_flat_add(qac_gpu_flat *g, const float *vectors, int64_t n) {
    if (n < 0) return qac_set_error(QAC_ERR_INVALID, "GPU flat search: negative count %lld", (long long)n);
    pthread_mutex_lock(&g->lock);
    qac_status st = QAC_OK;
    if (g->n + n > g->capacity) {
        st = qac_set_error(QAC_ERR_INVALID, "GPU flat search: adding %lld vectors to %lld exceeds capacity %lld",
                           (long long)n, (long long)g->n, (long long)g->capacity);
        goto done;
    }
    QAC_CU_GOTO(st, cudaSetDevice(g->device), done);
    for (int64_t i = 0; i < n; i += STAGE_ROWS) {
        const int64_t m = n - i < STAGE_ROWS ? n - i : STAGE_ROWS;
        const size_t elems = (size_t)m * g->dim;
        QAC_CU_GOTO(st, cudaMemcpyAsync(g->stage, vectors + (size_t)i * g->dim, elems * sizeof(float),
                                        cudaMemcpyHostToDevice, g->s_gemm), done);
        QAC_CU_GOTO(st, qac_k_from_f32(g->corpus + (size_t)(g->n + i) * g->dim, g->stage, elems, QAC_PREC_FP16,
                                       g->s_gemm), done);
    }
    QAC_CU_GOTO(st, cudaStreamSynchronize(g->s_gemm), done);
    g->n += n;
    g->tie_order = 0;
done:
    pthread_mutex_unlock(&g->lock);
    return st == QAC_OK ? st : qac_wrap_error(st, "GPU flat search: add");
}

extern "C" qac_status qac_gpu_flat_set_tie_order(qac_gpu_flat *g, const uint32_t *rank) {
    pthread_mutex_lock(&g->lock);
    qac_status st = QAC_OK;
    const int64_t n = g->n;
    unsigned char *seen = (unsigned char *)calloc((size_t)(n ? n : 1), 1);
    if (!seen) {
        st = qac_set_error(QAC_ERR_NOMEM, "GPU flat search: tie order of %lld rows", (long long)n);
        goto done;
    }
    for (int64_t r = 0; r < n; r++) {
        if ((int64_t)rank[r] >= n || seen[rank[r]]) {
            st = qac_set_error(QAC_ERR_INVALID, "GPU flat search: tie ranks are not a permutation of [0, %lld) "
                               "(row %lld has %u)", (long long)n, (long long)r, rank[r]);
            goto done;
        }
        seen[rank[r]] = 1;
    }
    g->tie_order = 0;
    QAC_CU_GOTO(st, cudaSetDevice(g->device), done);
    if (!g->rank) {
        QAC_CU_GOTO(st, cudaMalloc((void **)&g->rank, (size_t)g->capacity * sizeof(uint32_t)), done);
        QAC_CU_GOTO(st, cudaMalloc((void **)&g->row_of, (size_t)g->capacity * sizeof(int32_t)), done);
    }
    if (n) {
        QAC_CU_GOTO(st, cudaMemcpyAsync(g->rank, rank, (size_t)n * sizeof(uint32_t), cudaMemcpyHostToDevice, g->s_gemm),
                    done);
        const unsigned blocks = (unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535);
        QAC_LAUNCH(invert_rank_kernel, blocks, 256, 0, g->s_gemm)(g->rank, g->row_of, n);
        QAC_CU_GOTO(st, cudaGetLastError(), done);
    }
    QAC_CU_GOTO(st, cudaStreamSynchronize(g->s_gemm), done);
    g->tie_order = 1;
done:
    free(seen);
    pthread_mutex_unlock(&g->lock);
    return st == QAC_OK ? st : qac_wrap_error(st, "GPU flat search: tie order");
}

extern "C" qac_status qac_gpu_flat_set_tuning(qac_gpu_flat *g, const qac_gpu_flat_tuning *t) {
    qac_status st = qac_gpu_flat_tuning_check(t);
    if (st != QAC_OK) return st;
    pthread_mutex_lock(&g->lock);
    g->tune = *t;
    pthread_mutex_unlock(&g->lock);
    return QAC_OK;
}

extern "C" void qac_gpu_flat_get_tuning(const qac_gpu_flat *g, qac_gpu_flat_tuning *t) { *t = g->tune; }

extern "C" void qac_gpu_flat_last_stats(const qac_gpu_flat *g, qac_gpu_flat_stats *s) { *s = g->stats; }

extern "C" qac_status qac_gpu_flat_search(qac_gpu_flat *g, const float *queries, int nq, int k, float *scores,
                                          int64_t *rows) {
    if (nq < 0) return qac_set_error(QAC_ERR_INVALID, "GPU flat search: negative query count %d", nq);
    if (k < 1 || k > KMAX) return qac_set_error(QAC_ERR_INVALID, "GPU flat search: k %d out of range [1, %d]", k, KMAX);
    if (nq == 0) return QAC_OK;
    pthread_mutex_lock(&g->lock);
    qac_status st = QAC_OK;
    int path = qac_topk_pick_path(&g->tune, nq, g->dim);
    if (path == QAC_GPU_FLAT_FUSED &&
        (size_t)2 * 8 * ((g->dim + 63) / 64 * 64 + 32) * sizeof(__half) > g->smem_optin)
        path = QAC_GPU_FLAT_TILED; // the queries do not fit the multiprocessor's shared memory
    const int per = qac_topk_pass_queries(path);
    if (g->n == 0) {
        for (size_t i = 0; i < (size_t)nq * k; i++) {
            scores[i] = -FLT_MAX;
            rows[i] = -1;
        }
        goto done;
    }
    QAC_CU_GOTO(st, cudaSetDevice(g->device), done);
    for (int q0 = 0; q0 < nq; q0 += per) {
        const int m = nq - q0 < per ? nq - q0 : per;
        const float *qp = queries + (size_t)q0 * g->dim;
        float *sp = scores + (size_t)q0 * k;
        int64_t *rp = rows + (size_t)q0 * k;
        int ok = 0;
        if (path == QAC_GPU_FLAT_FUSED) st = search_fused(g, qp, m, k, sp, rp, &ok);
        if (st == QAC_OK && !ok) {
            g->stats.fallback = path == QAC_GPU_FLAT_FUSED;
            st = search_tiled(g, qp, m, k, sp, rp);
        }
        if (st != QAC_OK) break;
    }
done:
    pthread_mutex_unlock(&g->lock);
    return st == QAC_OK ? st : qac_wrap_error(st, "GPU flat search");
}

extern "C" int64_t qac_gpu_flat_count(const qac_gpu_flat *g) { return g ? g->n : 0; }

extern "C" qac_status qac_gpu_flat_read_floor(qac_gpu_flat *g, int reps, double *seconds, double *bytes) {
    pthread_mutex_lock(&g->lock);
    qac_status st = QAC_OK;
    const size_t nbytes = (size_t)g->n * g->dim * sizeof(__half), n16 = nbytes / 16;
    float best = 1e30f;
    *seconds = 0;
    *bytes = (double)n16 * 16;
    if (reps < 1) reps = 1;
    QAC_CU_GOTO(st, cudaSetDevice(g->device), done);
    if (n16 == 0) goto done;
    // a few launch shapes; the floor is the fastest
    for (int shape = 0; shape < 4; shape++) {
        const int per_sm = shape < 2 ? 4 : 8, unroll = shape & 1 ? 8 : 4;
        for (int r = 0; r <= reps; r++) { // the first run warms up
            QAC_CU_GOTO(st, cudaEventRecord(g->ev0, g->s_gemm), done);
            if (unroll == 4) QAC_LAUNCH(read_kernel<4>, g->sms * per_sm, 512, 0, g->s_gemm)((const uint4 *)g->corpus, n16, g->sink);
            else QAC_LAUNCH(read_kernel<8>, g->sms * per_sm, 512, 0, g->s_gemm)((const uint4 *)g->corpus, n16, g->sink);
            QAC_CU_GOTO(st, cudaGetLastError(), done);
            QAC_CU_GOTO(st, cudaEventRecord(g->ev1, g->s_gemm), done);
            QAC_CU_GOTO(st, cudaEventSynchronize(g->ev1), done);
            float ms = 0;
            QAC_CU_GOTO(st, cudaEventElapsedTime(&ms, g->ev0, g->ev1), done);
            if (r > 0 && ms < best) best = ms;
        }
    }
    *seconds = best / 1e3;
done:
    pthread_mutex_unlock(&g->lock);
    return st == QAC_OK ? st : qac_wrap_error(st, "GPU flat search: read floor");
}
