// The fused attention's backward (FlashAttention-2), probabilities
// recomputed from the forward's log-sum-exp, in three deterministic passes
// (no atomics: dQ has its own pass instead of accumulating across key
// blocks):
//   dot:  D = rowsum(dO * O) per (row, head);
//   dkdv: one block of BKV/16 warps per (key tile, head, sequence), each
//         warp 16 keys, over query tiles of BQ streamed through shared
//         memory: S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - D),
//         dV += P^T dO, dK += dS^T Q;
//   dq:   one block of BQ/16 warps per (query tile, head, sequence) over
//         key tiles of BK: S, P, dP = dO V^T, dS, dQ += dS K.
// Contract: flash_attention.cuh; CPU twin: model/attention_flash.c.
#include <math.h>
#include <string.h>

#include "flash_attention.cuh"

using namespace qac_fa;

namespace {

template <typename E, int D>
__global__ void fa_dot_kernel(float *dvec, const E *dout, const E *o, int N, int C, int NH) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; // (row, head), heads fastest
    if (i >= (size_t)N * NH) return;
    const size_t r = i / NH;
    const int h = (int)(i % NH);
    const E *a = dout + r * C + (size_t)h * D, *b = o + r * C + (size_t)h * D;
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < D; c += 8) {
        const uint4 ra = *reinterpret_cast<const uint4 *>(a + c), rb = *reinterpret_cast<const uint4 *>(b + c);
        E va[8], vb[8]; // copies of the registers, not aliases
        memcpy((void *)va, &ra, 16);
        memcpy((void *)vb, &rb, 16);
#pragma unroll
        for (int j = 0; j < 8; j++) s += qac_to_float<E>(va[j]) * qac_to_float<E>(vb[j]);
    }
    dvec[(size_t)h * N + r] = s;
}

template <typename E, int D, int BKV, int BQ, int ST> struct dkdv_cfg {
    static constexpr int NW = BKV / 16, NT = NW * 32, LD = lay<D>::LD;
    static constexpr size_t smem = (size_t)(2 * BKV + 2 * ST * BQ) * LD * sizeof(E) + (size_t)2 * ST * BQ * 4;
};

template <typename E, int D, int BKV, int BQ, int ST, int MB>
__global__ void __launch_bounds__(BKV * 2, MB > 1 ? MB : 0) fa_dkdv_kernel(const params p) {
    using cfg = dkdv_cfg<E, D, BKV, BQ, ST>;
    constexpr int NT = cfg::NT, LD = cfg::LD;
    static_assert(BKV % 16 == 0 && BQ % 16 == 0 && D % 16 == 0 && (ST == 1 || ST == 2), "tile shape");
    extern __shared__ __align__(16) unsigned char fa_smem[];
    E *sK = reinterpret_cast<E *>(fa_smem);
    E *sV = sK + BKV * LD;
    E *sQ = sV + BKV * LD;      // [ST][BQ][LD]
    E *sdO = sQ + ST * BQ * LD; // [ST][BQ][LD]
    float *sL = reinterpret_cast<float *>(sdO + ST * BQ * LD); // [ST][BQ] lse
    float *sD = sL + ST * BQ;                                   // [ST][BQ] dvec

    const int b = p.b0 + (int)blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * BKV;
    int row0, nq, len;
    seq_rows(p, b, row0, nq, len);
    if (k0 >= nq) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qi = lane & 3;
    const size_t C3 = 3 * (size_t)p.C;
    const int hc = h * D;
    E *dk_out = reinterpret_cast<E *>(p.dqkv) + (size_t)(row0 + k0 + warp * 16) * C3 + p.C + hc;
    E *dv_out = dk_out + p.C;
    if (k0 >= len) { // padded keys only: their gradients are zero
        for (int i = tid; i < BKV * lay<D>::CH; i += NT) {
            const int r = i / lay<D>::CH, c = (i % lay<D>::CH) * 8;
            if (k0 + r >= nq) continue;
            E *dst = reinterpret_cast<E *>(p.dqkv) + (size_t)(row0 + k0 + r) * C3 + p.C + hc + c;
            *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4 *>(dst + p.C) = make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    const E *seq = reinterpret_cast<const E *>(p.qkv) + (size_t)row0 * C3;
    const E *dseq = reinterpret_cast<const E *>(p.dout) + (size_t)row0 * p.C;
    const float *bq = p.qkv_b ? p.qkv_b + hc : nullptr;
    const float *bk = p.qkv_b ? p.qkv_b + p.C + hc : nullptr;
    const float *bv = p.qkv_b ? p.qkv_b + 2 * p.C + hc : nullptr;
    const float *lse = p.lse + (size_t)h * p.N + row0, *dvec = p.dvec + (size_t)h * p.N + row0;
    // queries that can see these keys: all, (causal) from the tile of k0 on
    // (key 0 is in the block with k0 = 0, which starts at query 0), or
    // (a local layer) those whose windows reach them
    const int qfirst = p.causal ? k0 / BQ * BQ : window_first(p, k0, BQ);
    const int qend = p.causal ? nq : window_end(p, k0 + BKV, nq);
    const int ntiles = max(1, (qend - qfirst + BQ - 1) / BQ); // at least one tile: its loads are waited for
    const uint64_t stream = p.dropping ? qac_rng_key(p.key, p.seq_base + b, (uint64_t)p.layer, QAC_DROP_ATT) : 0;

    auto load_q = [&](int buf, int q0) {
        load_rows<E, D, NT>(sQ + buf * BQ * LD, seq, C3, hc, q0, BQ, nq, tid);
        load_rows<E, D, NT>(sdO + buf * BQ * LD, dseq, (size_t)p.C, hc, q0, BQ, nq, tid);
        for (int i = tid; i < BQ; i += NT) {
            const bool ok = q0 + i < nq;
            cp4(sL + buf * BQ + i, ok ? lse + q0 + i : lse, ok);
            cp4(sD + buf * BQ + i, ok ? dvec + q0 + i : dvec, ok);
        }
    };
    load_rows<E, D, NT>(sK, seq, C3, p.C + hc, k0, BKV, len, tid);
    load_rows<E, D, NT>(sV, seq, C3, 2 * p.C + hc, k0, BKV, len, tid);
    load_q(0, qfirst);
    cp_commit();

    const bool active = k0 + warp * 16 < len;
    const int j_lo = k0 + warp * 16 + g, j_hi = j_lo + 8;
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.f;
        dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;
    }

    for (int it = 0; it < ntiles; it++) {
        const int buf = ST == 2 ? (it & 1) : 0, q0 = qfirst + it * BQ;
        E *Qt = sQ + buf * BQ * LD, *dOt = sdO + buf * BQ * LD;
        const float *Lt = sL + buf * BQ, *Dt = sD + buf * BQ;
        cp_wait_all();
        if (it == 0) {
            bias_rows<E, D, NT>(sK, bk, k0, BKV, len, tid);
            bias_rows<E, D, NT>(sV, bv, k0, BKV, len, tid);
        }
        bias_rows<E, D, NT>(Qt, bq, q0, BQ, nq, tid);
        __syncthreads();
        if (ST == 2 && it + 1 < ntiles) {
            load_q(buf ^ 1, q0 + BQ);
            cp_commit();
        }
        if (active) {
            // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys
            float st[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
            for (int i = 0; i < BQ / 8; i++) {
                st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.f;
                dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.f;
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t ka[4], va[4];
                frag_a<D>(ka, sK, warp * 16, kk * 16, lane);
                frag_a<D>(va, sV, warp * 16, kk * 16, lane);
#pragma unroll
                for (int np = 0; np < BQ / 16; np++) {
                    uint32_t bf[4];
                    frag_bt<D>(bf, Qt, np * 16, kk * 16, lane);
                    mma<E>::run(st[2 * np], ka, bf[0], bf[1]);
                    mma<E>::run(st[2 * np + 1], ka, bf[2], bf[3]);
                    frag_bt<D>(bf, dOt, np * 16, kk * 16, lane);
                    mma<E>::run(dpt[2 * np], va, bf[0], bf[1]);
                    mma<E>::run(dpt[2 * np + 1], va, bf[2], bf[3]);
                }
            }
            // P^T (dropped, for dV) and dS^T as A fragments (k = queries)
            uint32_t pa[BQ / 16][4], sa[BQ / 16][4];
#pragma unroll
            for (int kc = 0; kc < BQ / 16; kc++) {
                float pr[2][4], ds[2][4];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int nt = 2 * kc + half;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int tq = nt * 8 + 2 * qi + (e & 1), t = q0 + tq, j = e < 2 ? j_lo : j_hi;
                        const bool ok = t < nq && j < len && visible(p, j, t);
                        const float pv = ok ? exp2f(st[nt][e] * p.sl2 - Lt[tq]) : 0.f;
                        const float f = p.dropping && pv != 0.f ? drop_factor(p, stream, h, t, j) : 1.0f;
                        pr[half][e] = pv * f;
                        ds[half][e] = pv * (dpt[nt][e] * f - Dt[tq]);
                    }
                }
                acc_to_a<E>(pa[kc], pr[0], pr[1]);
                acc_to_a<E>(sa[kc], ds[0], ds[1]);
            }
            // dV += P^T dO, dK += dS^T Q
#pragma unroll
            for (int kc = 0; kc < BQ / 16; kc++)
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t bf[4];
                    frag_b<D>(bf, dOt, kc * 16, dp * 16, lane);
                    mma<E>::run(dv[2 * dp], pa[kc], bf[0], bf[1]);
                    mma<E>::run(dv[2 * dp + 1], pa[kc], bf[2], bf[3]);
                    frag_b<D>(bf, Qt, kc * 16, dp * 16, lane);
                    mma<E>::run(dk[2 * dp], sa[kc], bf[0], bf[1]);
                    mma<E>::run(dk[2 * dp + 1], sa[kc], bf[2], bf[3]);
                }
        }
        if (ST == 1 && it + 1 < ntiles) {
            __syncthreads();
            load_q(0, q0 + BQ);
            cp_commit();
        }
    }
    // this warp's rows of sK and sV are its own: only it reads them
    const int rows_left = nq - (k0 + warp * 16), real_left = len - (k0 + warp * 16);
    stage_store<E, D>(sK + warp * 16 * LD, dk, p.scale, p.scale, dk_out, C3, rows_left, real_left, lane);
    stage_store<E, D>(sV + warp * 16 * LD, dv, 1.0f, 1.0f, dv_out, C3, rows_left, real_left, lane);
}

template <typename E, int D, int BQ, int BK, int ST> struct dq_cfg {
    static constexpr int NW = BQ / 16, NT = NW * 32, LD = lay<D>::LD;
    static constexpr size_t smem = (size_t)(2 * BQ + 2 * ST * BK) * LD * sizeof(E);
};

template <typename E, int D, int BQ, int BK, int ST, int MB>
__global__ void __launch_bounds__(BQ * 2, MB > 1 ? MB : 0) fa_dq_kernel(const params p) {
    using cfg = dq_cfg<E, D, BQ, BK, ST>;
    constexpr int NT = cfg::NT, LD = cfg::LD;
    static_assert(BQ % 16 == 0 && BK % 16 == 0 && D % 16 == 0 && (ST == 1 || ST == 2), "tile shape");
    extern __shared__ __align__(16) unsigned char fa_smem[];
    E *sQ = reinterpret_cast<E *>(fa_smem);
    E *sdO = sQ + BQ * LD;
    E *sK = sdO + BQ * LD;      // [ST][BK][LD]
    E *sV = sK + ST * BK * LD;  // [ST][BK][LD]

    const int b = p.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ;
    int row0, nq, len;
    seq_rows(p, b, row0, nq, len);
    if (q0 >= nq) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qi = lane & 3;
    const size_t C3 = 3 * (size_t)p.C;
    const int hc = h * D;
    const E *seq = reinterpret_cast<const E *>(p.qkv) + (size_t)row0 * C3;
    const E *dseq = reinterpret_cast<const E *>(p.dout) + (size_t)row0 * p.C;
    const float *bq = p.qkv_b ? p.qkv_b + hc : nullptr;
    const float *bk = p.qkv_b ? p.qkv_b + p.C + hc : nullptr;
    const float *bv = p.qkv_b ? p.qkv_b + 2 * p.C + hc : nullptr;
    const int kfirst = window_first(p, q0, BK);
    const int kend = p.causal ? min(len, q0 + BQ) : window_end(p, q0 + BQ, len);
    const int ntiles = max(1, (kend - kfirst + BK - 1) / BK);
    const uint64_t stream = p.dropping ? qac_rng_key(p.key, p.seq_base + b, (uint64_t)p.layer, QAC_DROP_ATT) : 0;

    load_rows<E, D, NT>(sQ, seq, C3, hc, q0, BQ, nq, tid);
    load_rows<E, D, NT>(sdO, dseq, (size_t)p.C, hc, q0, BQ, nq, tid);
    load_rows<E, D, NT>(sK, seq, C3, p.C + hc, kfirst, BK, len, tid);
    load_rows<E, D, NT>(sV, seq, C3, 2 * p.C + hc, kfirst, BK, len, tid);
    cp_commit();

    const bool active = q0 + warp * 16 < nq;
    const int t_lo = q0 + warp * 16 + g, t_hi = t_lo + 8;
    // rows past the sequence see nothing (lse +inf: P = 0)
    const float L_lo = t_lo < nq ? p.lse[(size_t)h * p.N + row0 + t_lo] : INFINITY;
    const float L_hi = t_hi < nq ? p.lse[(size_t)h * p.N + row0 + t_hi] : INFINITY;
    const float D_lo = t_lo < nq ? p.dvec[(size_t)h * p.N + row0 + t_lo] : 0.f;
    const float D_hi = t_hi < nq ? p.dvec[(size_t)h * p.N + row0 + t_hi] : 0.f;
    uint32_t qf[D / 16][4], df[D / 16][4];
    float dq[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;

    for (int kt = 0; kt < ntiles; kt++) {
        const int buf = ST == 2 ? (kt & 1) : 0, kb = kfirst + kt * BK;
        E *Kt = sK + buf * BK * LD, *Vt = sV + buf * BK * LD;
        cp_wait_all();
        if (kt == 0) bias_rows<E, D, NT>(sQ, bq, q0, BQ, nq, tid);
        bias_rows<E, D, NT>(Kt, bk, kb, BK, len, tid);
        bias_rows<E, D, NT>(Vt, bv, kb, BK, len, tid);
        __syncthreads();
        if (kt == 0 && active) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                frag_a<D>(qf[kk], sQ, warp * 16, kk * 16, lane);
                frag_a<D>(df[kk], sdO, warp * 16, kk * 16, lane);
            }
        }
        if (ST == 2 && kt + 1 < ntiles) {
            E *Kn = sK + (buf ^ 1) * BK * LD, *Vn = sV + (buf ^ 1) * BK * LD;
            load_rows<E, D, NT>(Kn, seq, C3, p.C + hc, kb + BK, BK, len, tid);
            load_rows<E, D, NT>(Vn, seq, C3, 2 * p.C + hc, kb + BK, BK, len, tid);
            cp_commit();
        }
        if (active) {
            float s[BK / 8][4], dpv[BK / 8][4];
#pragma unroll
            for (int i = 0; i < BK / 8; i++) {
                s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
                dpv[i][0] = dpv[i][1] = dpv[i][2] = dpv[i][3] = 0.f;
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
                for (int np = 0; np < BK / 16; np++) {
                    uint32_t bf[4];
                    frag_bt<D>(bf, Kt, np * 16, kk * 16, lane);
                    mma<E>::run(s[2 * np], qf[kk], bf[0], bf[1]);
                    mma<E>::run(s[2 * np + 1], qf[kk], bf[2], bf[3]);
                    frag_bt<D>(bf, Vt, np * 16, kk * 16, lane);
                    mma<E>::run(dpv[2 * np], df[kk], bf[0], bf[1]);
                    mma<E>::run(dpv[2 * np + 1], df[kk], bf[2], bf[3]);
                }
            uint32_t sa[BK / 16][4];
#pragma unroll
            for (int kc = 0; kc < BK / 16; kc++) {
                float ds[2][4];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int nt = 2 * kc + half;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = kb + nt * 8 + 2 * qi + (e & 1), t = e < 2 ? t_lo : t_hi;
                        const bool ok = j < len && visible(p, j, t);
                        const float pv = ok ? exp2f(s[nt][e] * p.sl2 - (e < 2 ? L_lo : L_hi)) : 0.f;
                        const float f = p.dropping && pv != 0.f ? drop_factor(p, stream, h, t, j) : 1.0f;
                        ds[half][e] = pv * (dpv[nt][e] * f - (e < 2 ? D_lo : D_hi));
                    }
                }
                acc_to_a<E>(sa[kc], ds[0], ds[1]);
            }
            // dQ += dS K
#pragma unroll
            for (int kc = 0; kc < BK / 16; kc++)
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t bf[4];
                    frag_b<D>(bf, Kt, kc * 16, dp * 16, lane);
                    mma<E>::run(dq[2 * dp], sa[kc], bf[0], bf[1]);
                    mma<E>::run(dq[2 * dp + 1], sa[kc], bf[2], bf[3]);
                }
        }
        if (ST == 1 && kt + 1 < ntiles) {
            __syncthreads();
            load_rows<E, D, NT>(sK, seq, C3, p.C + hc, kb + BK, BK, len, tid);
            load_rows<E, D, NT>(sV, seq, C3, 2 * p.C + hc, kb + BK, BK, len, tid);
            cp_commit();
        }
    }
    if (!active) return;
    E *dq_out = reinterpret_cast<E *>(p.dqkv) + (size_t)(row0 + q0 + warp * 16) * C3 + hc;
    stage_store<E, D>(sQ + warp * 16 * LD, dq, p.scale, p.scale, dq_out, C3, nq - (q0 + warp * 16), 16, lane);
}

#ifdef QAC_FA_EMULATE // the kernels alone, run on the CPU by tests/gpu/cuda_emu.h
} // namespace
#else
template <typename K> cudaError_t opt_in(K kernel, size_t smem, unsigned *done) {
    if (smem <= 48 * 1024) return cudaSuccess;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const unsigned bit = dev < 32 ? 1u << dev : 0u;
    if (bit && (__atomic_load_n(done, __ATOMIC_ACQUIRE) & bit)) return cudaSuccess;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess && bit) __atomic_fetch_or(done, bit, __ATOMIC_ACQ_REL);
    return e;
}

template <typename E, int D, int BKV, int BQ, int ST, int MB>
cudaError_t launch_dkdv(const params &p, int B, int NH, cudaStream_t s) {
    using cfg = dkdv_cfg<E, D, BKV, BQ, ST>;
    static unsigned done = 0;
    cudaError_t e = opt_in(fa_dkdv_kernel<E, D, BKV, BQ, ST, MB>, cfg::smem, &done);
    if (e != cudaSuccess) return e;
    return qac_fa_chunks(p, B, [&](const params &c, int nb) {
        fa_dkdv_kernel<E, D, BKV, BQ, ST, MB><<<dim3(qac_div_up((size_t)c.T, BKV), NH, nb), cfg::NT, cfg::smem, s>>>(c);
        return cudaGetLastError();
    });
}

template <typename E, int D, int BQ, int BK, int ST, int MB>
cudaError_t launch_dq(const params &p, int B, int NH, cudaStream_t s) {
    using cfg = dq_cfg<E, D, BQ, BK, ST>;
    static unsigned done = 0;
    cudaError_t e = opt_in(fa_dq_kernel<E, D, BQ, BK, ST, MB>, cfg::smem, &done);
    if (e != cudaSuccess) return e;
    return qac_fa_chunks(p, B, [&](const params &c, int nb) {
        fa_dq_kernel<E, D, BQ, BK, ST, MB><<<dim3(qac_div_up((size_t)c.T, BQ), NH, nb), cfg::NT, cfg::smem, s>>>(c);
        return cudaGetLastError();
    });
}

#define QAC_FA_BY_TYPE(fn, ...)                                                            \
    if (prec == QAC_PREC_BF16) {                                                           \
        if (D == 32) return fn<__nv_bfloat16, 32, __VA_ARGS__>(p, B, NH, s);                \
        if (D == 64) return fn<__nv_bfloat16, 64, __VA_ARGS__>(p, B, NH, s);                \
    } else if (prec == QAC_PREC_FP16) {                                                    \
        if (D == 32) return fn<__half, 32, __VA_ARGS__>(p, B, NH, s);                       \
        if (D == 64) return fn<__half, 64, __VA_ARGS__>(p, B, NH, s);                       \
    }                                                                                      \
    return cudaErrorInvalidValue;

template <int A, int Bt, int ST, int MB>
cudaError_t dispatch_dkdv(const params &p, int B, int NH, int D, qac_precision prec, cudaStream_t s) {
    QAC_FA_BY_TYPE(launch_dkdv, A, Bt, ST, MB)
}
template <int A, int Bt, int ST, int MB>
cudaError_t dispatch_dq(const params &p, int B, int NH, int D, qac_precision prec, cudaStream_t s) {
    QAC_FA_BY_TYPE(launch_dq, A, Bt, ST, MB)
}

cudaError_t run_dkdv(const qac_fa_tiles &t, const params &p, int B, int NH, int D, qac_precision prec,
                     cudaStream_t s) {
    const int mb = qac_fa_minb(t.kv_minb);
#define QAC_FA_TRY(A, Bt, ST, MB)                                                \
    if (t.kv_bk == A && t.kv_bq == Bt && t.kv_stages == ST && mb == MB) \
        return dispatch_dkdv<A, Bt, ST, MB>(p, B, NH, D, prec, s);
    QAC_FA_DKDV_VARIANTS(QAC_FA_TRY)
#undef QAC_FA_TRY
    return cudaErrorInvalidValue;
}

cudaError_t run_dq(const qac_fa_tiles &t, const params &p, int B, int NH, int D, qac_precision prec, cudaStream_t s) {
    const int mb = qac_fa_minb(t.dq_minb);
#define QAC_FA_TRY(A, Bt, ST, MB)                                                \
    if (t.dq_bq == A && t.dq_bk == Bt && t.dq_stages == ST && mb == MB) \
        return dispatch_dq<A, Bt, ST, MB>(p, B, NH, D, prec, s);
    QAC_FA_DQ_VARIANTS(QAC_FA_TRY)
#undef QAC_FA_TRY
    return cudaErrorInvalidValue;
}

} // namespace

cudaError_t qac_fa_backward(void *dqkv, float *dvec, const void *dout, const void *out, const float *lse,
                            const void *qkv, const float *qkv_b, qac_fa_rows rows, int C, int NH, int causal,
                            int window, qac_kt_drop d, int layer, qac_precision prec, const qac_fa_tiles *tiles,
                            cudaStream_t s) {
    if (!qac_fa_supported(C, NH, prec) || rows.T >= (1 << 20) || NH > QAC_FA_MAX_Z) return cudaErrorInvalidValue;
    if (rows.B <= 0 || rows.T <= 0 || rows.N <= 0) return cudaSuccess;
    const qac_fa_tiles t = tiles ? *tiles : qac_fa_tiles_default();
    const int D = C / NH;
    const size_t n = (size_t)rows.N * NH;
    if (prec == QAC_PREC_BF16) {
        if (D == 32)
            fa_dot_kernel<__nv_bfloat16, 32><<<qac_div_up(n, 256), 256, 0, s>>>(
                dvec, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)out, rows.N, C, NH);
        else
            fa_dot_kernel<__nv_bfloat16, 64><<<qac_div_up(n, 256), 256, 0, s>>>(
                dvec, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)out, rows.N, C, NH);
    } else {
        if (D == 32)
            fa_dot_kernel<__half, 32><<<qac_div_up(n, 256), 256, 0, s>>>(dvec, (const __half *)dout,
                                                                          (const __half *)out, rows.N, C, NH);
        else
            fa_dot_kernel<__half, 64><<<qac_div_up(n, 256), 256, 0, s>>>(dvec, (const __half *)dout,
                                                                          (const __half *)out, rows.N, C, NH);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    params p = make_params(qkv, qkv_b, rows, C, NH, causal, window, d, layer);
    p.lse = const_cast<float *>(lse);
    p.dout = dout;
    p.o = out;
    p.dvec = dvec;
    p.dqkv = dqkv;
    if ((e = run_dkdv(t, p, rows.B, NH, D, prec, s)) != cudaSuccess) return e;
    return run_dq(t, p, rows.B, NH, D, prec, s);
}
#endif
