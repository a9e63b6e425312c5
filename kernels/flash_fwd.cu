// The fused attention's forward (FlashAttention-2): one block of BQ/16
// warps per (query tile, head, sequence), each warp 16 query rows; K and V
// stream through shared memory in tiles of BK keys (ST = 2: the next tile
// loads while this one is computed); scores, the online softmax (fp32) and
// the probabilities stay in registers, P V on the tensor cores. Contract:
// flash_attention.cuh; CPU twin: model/attention_flash.c.
#include <math.h>
#include <string.h>

#include "flash_attention.cuh"

using namespace qac_fa;

namespace {

template <typename E, int D, int BQ, int BK, int ST> struct fwd_cfg {
    static constexpr int NW = BQ / 16, NT = NW * 32, LD = lay<D>::LD;
    static constexpr size_t smem = (size_t)(BQ + 2 * ST * BK) * LD * sizeof(E);
};

template <typename E, int D, int BQ, int BK, int ST, int MB>
__global__ void __launch_bounds__(BQ * 2, MB > 1 ? MB : 0) fa_fwd_kernel(const params p) {
    using cfg = fwd_cfg<E, D, BQ, BK, ST>;
    constexpr int NT = cfg::NT, LD = cfg::LD;
    static_assert(BQ % 16 == 0 && BK % 16 == 0 && D % 16 == 0 && (ST == 1 || ST == 2), "tile shape");
    extern __shared__ __align__(16) unsigned char fa_smem[];
    E *sQ = reinterpret_cast<E *>(fa_smem);
    E *sK = sQ + BQ * LD;
    E *sV = sK + ST * BK * LD;

    const int b = p.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ;
    int row0, nq, len;
    seq_rows(p, b, row0, nq, len);
    if (q0 >= nq) return; // the whole block: no barrier is skipped by part of it

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, qi = lane & 3;
    const size_t C3 = 3 * (size_t)p.C;
    const E *seq = reinterpret_cast<const E *>(p.qkv) + (size_t)row0 * C3;
    const int hc = h * D;
    const float *bq = p.qkv_b ? p.qkv_b + hc : nullptr;
    const float *bk = p.qkv_b ? p.qkv_b + p.C + hc : nullptr;
    const float *bv = p.qkv_b ? p.qkv_b + 2 * p.C + hc : nullptr;
    // keys this block can see: all real ones, up to its last query (causal),
    // or those its rows' windows reach (a local layer)
    const int kfirst = window_first(p, q0, BK);
    const int kend = p.causal ? min(len, q0 + BQ) : window_end(p, q0 + BQ, len);
    const int ntiles = max(1, (kend - kfirst + BK - 1) / BK); // one (all masked) tile when there is no key
    const uint64_t stream = p.dropping ? qac_rng_key(p.key, p.seq_base + b, (uint64_t)p.layer, QAC_DROP_ATT) : 0;

    load_rows<E, D, NT>(sQ, seq, C3, hc, q0, BQ, nq, tid);
    load_rows<E, D, NT>(sK, seq, C3, p.C + hc, kfirst, BK, len, tid);
    load_rows<E, D, NT>(sV, seq, C3, 2 * p.C + hc, kfirst, BK, len, tid);
    cp_commit();

    // this warp's rows; a warp past the sequence only helps load
    const bool active = q0 + warp * 16 < nq;
    const int t_lo = q0 + warp * 16 + g, t_hi = t_lo + 8;
    uint32_t qf[D / 16][4];
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;

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
            for (int kk = 0; kk < D / 16; kk++) frag_a<D>(qf[kk], sQ, warp * 16, kk * 16, lane);
        }
        if (ST == 2 && kt + 1 < ntiles) { // the next tile into the other buffer, read last in tile kt-1
            E *Kn = sK + (buf ^ 1) * BK * LD, *Vn = sV + (buf ^ 1) * BK * LD;
            load_rows<E, D, NT>(Kn, seq, C3, p.C + hc, kb + BK, BK, len, tid);
            load_rows<E, D, NT>(Vn, seq, C3, 2 * p.C + hc, kb + BK, BK, len, tid);
            cp_commit();
        }
        if (active) {
            // S = Q K^T for this warp's 16 rows and the tile's BK keys
            float s[BK / 8][4];
#pragma unroll
            for (int i = 0; i < BK / 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
                for (int np = 0; np < BK / 16; np++) {
                    uint32_t bf[4];
                    frag_bt<D>(bf, Kt, np * 16, kk * 16, lane);
                    mma<E>::run(s[2 * np], qf[kk], bf[0], bf[1]);
                    mma<E>::run(s[2 * np + 1], qf[kk], bf[2], bf[3]);
                }
            }
            // base-2 scores, masked keys at -inf, the tile's row maxima
            float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = kb + nt * 8 + 2 * qi + (e & 1), t = e < 2 ? t_lo : t_hi;
                    const float v = j < len && visible(p, j, t) ? s[nt][e] * p.sl2 : -INFINITY;
                    s[nt][e] = v;
                    if (e < 2)
                        mx_lo = fmaxf(mx_lo, v);
                    else
                        mx_hi = fmaxf(mx_hi, v);
                }
            const float mn_lo = fmaxf(m_lo, quad_max(mx_lo)), mn_hi = fmaxf(m_hi, quad_max(mx_hi));
            // a row with no key yet keeps a finite reference, so exp2 gives 0, never NaN
            const float mu_lo = mn_lo == -INFINITY ? 0.f : mn_lo, mu_hi = mn_hi == -INFINITY ? 0.f : mn_hi;
            const float c_lo = exp2f(m_lo - mu_lo), c_hi = exp2f(m_hi - mu_hi);
            m_lo = mn_lo;
            m_hi = mn_hi;
            l_lo *= c_lo;
            l_hi *= c_hi;
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                o[i][0] *= c_lo, o[i][1] *= c_lo;
                o[i][2] *= c_hi, o[i][3] *= c_hi;
            }
            // probabilities (the normaliser takes them undropped), dropout, A fragments
            uint32_t pa[BK / 16][4];
#pragma unroll
            for (int kc = 0; kc < BK / 16; kc++) {
                float pr[2][4];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int nt = 2 * kc + half;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float pv = exp2f(s[nt][e] - (e < 2 ? mu_lo : mu_hi));
                        if (e < 2)
                            l_lo += pv;
                        else
                            l_hi += pv;
                        if (p.dropping && pv != 0.f)
                            pv *= drop_factor(p, stream, h, e < 2 ? t_lo : t_hi, kb + nt * 8 + 2 * qi + (e & 1));
                        pr[half][e] = pv;
                    }
                }
                acc_to_a<E>(pa[kc], pr[0], pr[1]);
            }
            // O += P V
#pragma unroll
            for (int kc = 0; kc < BK / 16; kc++)
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t bf[4];
                    frag_b<D>(bf, Vt, kc * 16, dp * 16, lane);
                    mma<E>::run(o[2 * dp], pa[kc], bf[0], bf[1]);
                    mma<E>::run(o[2 * dp + 1], pa[kc], bf[2], bf[3]);
                }
        }
        if (ST == 1 && kt + 1 < ntiles) { // the single buffer is free once every warp is done with it
            __syncthreads();
            load_rows<E, D, NT>(sK, seq, C3, p.C + hc, kb + BK, BK, len, tid);
            load_rows<E, D, NT>(sV, seq, C3, 2 * p.C + hc, kb + BK, BK, len, tid);
            cp_commit();
        }
    }
    if (!active) return;
    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
    // this warp's rows of sQ are its own since its Q fragments were loaded
    E *out = reinterpret_cast<E *>(p.out) + (size_t)(row0 + q0 + warp * 16) * p.C + hc;
    stage_store<E, D>(sQ + warp * 16 * LD, o, l_lo > 0.f ? 1.0f / l_lo : 0.f, l_hi > 0.f ? 1.0f / l_hi : 0.f, out,
                      (size_t)p.C, nq - (q0 + warp * 16), 16, lane);
    if (p.lse && qi == 0) {
        if (t_lo < nq) p.lse[(size_t)h * p.N + row0 + t_lo] = l_lo > 0.f ? m_lo + log2f(l_lo) : INFINITY;
        if (t_hi < nq) p.lse[(size_t)h * p.N + row0 + t_hi] = l_hi > 0.f ? m_hi + log2f(l_hi) : INFINITY;
    }
}

#ifdef QAC_FA_EMULATE // the kernels alone, run on the CPU by tests/gpu/cuda_emu.h
} // namespace
#else
// Kernels above 48 KiB of shared memory opt in once per device.
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

template <typename E, int D, int BQ, int BK, int ST, int MB>
cudaError_t launch_fwd(const params &p, int B, int NH, cudaStream_t s) {
    using cfg = fwd_cfg<E, D, BQ, BK, ST>;
    static unsigned done = 0;
    cudaError_t e = opt_in(fa_fwd_kernel<E, D, BQ, BK, ST, MB>, cfg::smem, &done);
    if (e != cudaSuccess) return e;
    return qac_fa_chunks(p, B, [&](const params &c, int nb) {
        fa_fwd_kernel<E, D, BQ, BK, ST, MB><<<dim3(qac_div_up((size_t)c.T, BQ), NH, nb), cfg::NT, cfg::smem, s>>>(c);
        return cudaGetLastError();
    });
}

template <int BQ, int BK, int ST, int MB>
cudaError_t dispatch_fwd(const params &p, int B, int NH, int D, qac_precision prec, cudaStream_t s) {
    if (prec == QAC_PREC_BF16) {
        if (D == 32) return launch_fwd<__nv_bfloat16, 32, BQ, BK, ST, MB>(p, B, NH, s);
        if (D == 64) return launch_fwd<__nv_bfloat16, 64, BQ, BK, ST, MB>(p, B, NH, s);
    } else if (prec == QAC_PREC_FP16) {
        if (D == 32) return launch_fwd<__half, 32, BQ, BK, ST, MB>(p, B, NH, s);
        if (D == 64) return launch_fwd<__half, 64, BQ, BK, ST, MB>(p, B, NH, s);
    }
    return cudaErrorInvalidValue;
}

} // namespace

int qac_fa_supported(int C, int NH, qac_precision prec) {
    if (prec != QAC_PREC_BF16 && prec != QAC_PREC_FP16) return 0;
    if (NH <= 0 || C % NH || C % 8) return 0;
    const int D = C / NH;
    return D == 32 || D == 64;
}

cudaError_t qac_fa_forward(void *out, float *lse, const void *qkv, const float *qkv_b, qac_fa_rows rows, int C,
                           int NH, int causal, int window, qac_kt_drop d, int layer, qac_precision prec,
                           const qac_fa_tiles *tiles, cudaStream_t s) {
    if (!qac_fa_supported(C, NH, prec) || rows.T >= (1 << 20) || NH > QAC_FA_MAX_Z) return cudaErrorInvalidValue;
    if (rows.B <= 0 || rows.T <= 0) return cudaSuccess;
    const qac_fa_tiles t = tiles ? *tiles : qac_fa_tiles_default();
    const int D = C / NH;
    params p = make_params(qkv, qkv_b, rows, C, NH, causal, window, d, layer);
    p.out = out;
    p.lse = lse;
    const int mb = qac_fa_minb(t.minb);
#define QAC_FA_TRY(BQ, BK, ST, MB)                                    \
    if (t.bq == BQ && t.bk == BK && t.stages == ST && mb == MB) \
        return dispatch_fwd<BQ, BK, ST, MB>(p, rows.B, NH, D, prec, s);
    QAC_FA_FWD_VARIANTS(QAC_FA_TRY)
#undef QAC_FA_TRY
    return cudaErrorInvalidValue;
}
#endif
