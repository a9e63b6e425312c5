// The fused attention's CUDA kernels run on the CPU (tests/gpu/cuda_emu.h:
// the kernels' own source, warp instructions emulated) against the CPU twin
// (model/attention_flash.c with the kernels' roundings), in the default
// suite: forward output and log-sum-exp, backward dQ, dK, dV, every
// compiled tile variant of the three kernels, bf16 and fp16, head sizes 32
// and 64, padded and packed, causal windowed, local windows on either side
// (ModernBERT), dropout, lengths 1 to 200,
// tiles that end inside a sequence and sequences shorter than a tile. Every
// dQKV element must be written (the buffer starts as NaN), and shared
// memory starts as NaN in every block. A batch of more sequences than
// gridDim.z takes (65,535) must run in chunks (the emulator refuses a grid
// a GPU refuses); its last sequences are checked. The bounds are
// tests/encoder/attention_bound.h's with both sides' fp32 sums (2 x 2^-24:
// the emulated mma adds in order) and both sides' roundings (2 x 2^-8 in
// bf16, 2 x 2^-11 plus 2 x 2^-25 absolute in fp16).
//
// The asynchronous copies land at once in one pass and only when their
// thread waits in another (a tile read before its wait and barrier would
// be stale). What this cannot show, and test_gpu_attention does on a GPU:
// the real instructions' behaviour and timing, speed.
#include "cuda_emu.h"

namespace {
alignas(16) unsigned char fa_smem[1 << 18];
}

#include "../../kernels/flash_bwd.cu"
#include "../../kernels/flash_fwd.cu"

#include <cstdlib>

#define EMU_TEST_SEED 0x9E3779B97F4A7C15ull
#include "emu_testutil.h"

extern "C" {
#include "../encoder/attention_bound.h"
#include "bert_cpu.h"
}

using namespace qac_fa;

namespace {

void check(const char *what, const char *shape, const std::vector<float> &got, const std::vector<float> &want,
           const std::vector<float> &bound) {
    double mx, w = att_worst(got.data(), want.data(), bound.data(), got.size(), &mx);
    printf("%-24s %-60s max|d| %.3g, worst d/bound %.3g\n", what, shape, mx, w);
    CHECK_MSG(w <= 1.0, "%s %s: difference %.3g times its bound", what, shape, w);
}

struct tiles3 {
    int f[4], k[4], q[4]; // (block, tile, stages, blocks per SM)
};

// The launches of qac_fa_forward / qac_fa_backward (the same chunks of
// sequences, qac_fa_chunks), on the emulator.
const params *g_chunk; // the chunk being launched (its b0 places blockIdx.z)
template <typename E, int D> struct runner {
    template <typename K> static void chunks(const params &p, int B, int NH, int A, K kernel) {
        qac_fa_chunks(p, B, [&](const params &c, int nb) {
            g_chunk = &c;
            emu_launch({(unsigned)((c.T + A - 1) / A), (unsigned)NH, (unsigned)nb}, A * 2, [&] { kernel(c); });
            return cudaSuccess;
        });
    }
    template <int A, int Bt, int S, int M> static void fwd(const params &p, int B, int NH) {
        chunks(p, B, NH, A, [](const params &c) { fa_fwd_kernel<E, D, A, Bt, S, M>(c); });
    }
    template <int A, int Bt, int S, int M> static void dkdv(const params &p, int B, int NH) {
        chunks(p, B, NH, A, [](const params &c) { fa_dkdv_kernel<E, D, A, Bt, S, M>(c); });
    }
    template <int A, int Bt, int S, int M> static void dq(const params &p, int B, int NH) {
        chunks(p, B, NH, A, [](const params &c) { fa_dq_kernel<E, D, A, Bt, S, M>(c); });
    }
    static void forward(const tiles3 &t, const params &p, int B, int NH) {
#define X(A, Bt, S, M) \
    if (t.f[0] == A && t.f[1] == Bt && t.f[2] == S && t.f[3] == M) return fwd<A, Bt, S, M>(p, B, NH);
        QAC_FA_FWD_VARIANTS(X)
#undef X
        CHECK_MSG(0, "forward variant %dx%dx%dx%d not compiled", t.f[0], t.f[1], t.f[2], t.f[3]);
    }
    static void backward(const tiles3 &t, const params &p, int B, int NH, int N) {
        const unsigned n = (unsigned)N * NH;
        emu_launch({(n + 255) / 256, 1, 1}, 256, [&] {
            fa_dot_kernel<E, D>(const_cast<float *>(p.dvec), (const E *)p.dout, (const E *)p.o, N, p.C, NH);
        });
#define X(A, Bt, S, M) \
    if (t.k[0] == A && t.k[1] == Bt && t.k[2] == S && t.k[3] == M) dkdv<A, Bt, S, M>(p, B, NH);
        QAC_FA_DKDV_VARIANTS(X)
#undef X
#define X(A, Bt, S, M) \
    if (t.q[0] == A && t.q[1] == Bt && t.q[2] == S && t.q[3] == M) dq<A, Bt, S, M>(p, B, NH);
        QAC_FA_DQ_VARIANTS(X)
#undef X
    }
};

template <typename E, int D>
void run_case(int B, int T, int NH, const int *lens_in, int packed, int causal, int window, float pdrop,
              const tiles3 &t) {
    const qac_precision pr = std::is_same<E, __half>::value ? QAC_PREC_FP16 : QAC_PREC_BF16;
    const int C = D * NH, layer = 3;
    std::vector<int> offs(B + 1, 0), lens(lens_in, lens_in + B);
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lens[b];
    const int N = packed ? offs[B] : B * T;
    const size_t n3 = (size_t)N * 3 * C, nc = (size_t)N * C;
    std::vector<float> qkv(n3), bias(3 * C), dout(nc);
    for (auto &v : qkv) v = uni(-1.5f, 1.5f);
    for (auto &v : bias) v = uni(-0.5f, 0.5f);
    for (auto &v : dout) v = uni(-1, 1);
    std::vector<E> qkv_e = to_e<E>(qkv), dout_e = to_e<E>(dout);
    std::vector<float> dout_r = to_f<E>(dout_e), qb(n3);
    for (size_t r = 0; r < (size_t)N; r++)
        for (int c = 0; c < 3 * C; c++)
            qb[r * 3 * C + c] = qac_to_float<E>(qac_from_float<E>(qac_to_float<E>(qkv_e[r * 3 * C + c]) + bias[c]));
    const qac_fa_rows rows = {packed ? offs.data() : nullptr, packed ? nullptr : lens.data(), B, T, N};
    const qac_kt_drop d = {pdrop, 0xE1A7ull + (uint64_t)T, 0};
    std::vector<E> out_e(nc), dqkv_e(n3);
    std::vector<float> lse((size_t)N * NH), dvec((size_t)N * NH);
    params p = make_params(qkv_e.data(), bias.data(), rows, C, NH, causal, window, d, layer);
    p.out = out_e.data();
    p.lse = lse.data();
    runner<E, D>::forward(t, p, B, NH);
    std::vector<float> out = to_f<E>(out_e);
    p.dout = dout_e.data();
    p.o = out_e.data();
    p.dvec = dvec.data();
    p.dqkv = dqkv_e.data();
    for (auto &x : dqkv_e) x = qac_from_float<E>(NAN); // every element must be written
    runner<E, D>::backward(t, p, B, NH, N);
    std::vector<float> dq = to_f<E>(dqkv_e);

    qac_dropout drop = {0.0f, pdrop, d.key, NULL};
    const qac_dropout *dp = pdrop > 0 ? &drop : NULL;
    const int *toffs = packed ? offs.data() : NULL, *tlens = packed ? NULL : lens.data();
    std::vector<float> tout(nc), tlse((size_t)N * NH), tdq(n3), bO(nc), bL((size_t)N * NH), bd(n3);
    CHECK_OK(qac_flash_attention_forward(tout.data(), tlse.data(), qkv.data(), bias.data(), toffs, tlens, B, T, C, NH,
                                         causal, window, dp, layer, t.f[1], pr, NULL));
    CHECK_OK(qac_flash_attention_backward(tdq.data(), dout_r.data(), out.data(), lse.data(), qkv.data(), bias.data(),
                                          toffs, tlens, B, T, C, NH, causal, window, dp, layer, t.k[1], t.q[1], pr,
                                          NULL));
    att_shape s = {B, T, C, NH, causal, window, toffs, tlens, dp, layer, (T + 15) / 16 + 1};
    const double us = 2 * 0x1p-24, ue = 2 * (pr == QAC_PREC_FP16 ? 0x1p-11 : 0x1p-8);
    const double ae = pr == QAC_PREC_FP16 ? 2 * 0x1p-25 : 0;
    att_bound_forward(bO.data(), bL.data(), &s, qb.data(), tout.data(), tlse.data(), us, ue, ae);
    att_bound_backward(bd.data(), &s, qb.data(), dout_r.data(), out.data(), NULL, us, ue, ae);
    char shape[160];
    snprintf(shape, sizeof shape, "%s B%d T%d hs%d%s%s%s p%.1f %dx%dx%dx%d/%dx%dx%dx%d/%dx%dx%dx%d",
             pr == QAC_PREC_FP16 ? "fp16" : "bf16", B, T, D, packed ? " packed" : "", causal ? " causal" : "",
             window ? "+win" : "", pdrop, t.f[0], t.f[1], t.f[2], t.f[3], t.k[0], t.k[1], t.k[2], t.k[3],
             t.q[0], t.q[1], t.q[2], t.q[3]);
    check("emulated fwd out", shape, out, tout, bO);
    check("emulated fwd lse", shape, lse, tlse, bL);
    check("emulated bwd dqkv", shape, dq, tdq, bd);
}

// A packed batch of more sequences than one launch's gridDim.z takes
// (65,535 + 3): ones of a token, then three longer ones. Only the blocks of
// the last sequences run (the rest of the grid alike, one launch of
// 65,535 sequences, is what the other cases check), and their rows are
// compared with the twin on those sequences alone (no dropout, whose masks
// depend on the sequence's place in the batch).
template <typename E, int D> void big_batch(const tiles3 &t) {
    const qac_precision pr = std::is_same<E, __half>::value ? QAC_PREC_FP16 : QAC_PREC_BF16;
    const int B = 65535 + 3, NH = 2, C = D * NH, first = B - 4, layer = 1;
    std::vector<int> lens(B, 1), offs(B + 1, 0);
    lens[B - 3] = 5, lens[B - 2] = 17, lens[B - 1] = 2;
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lens[b];
    const int N = offs[B], T = 17, r0 = offs[first], M = N - r0;
    std::vector<E> qkv_e((size_t)N * 3 * C, qac_from_float<E>(0.0f)), dout_e((size_t)N * C, qac_from_float<E>(0.0f));
    std::vector<float> qkv((size_t)M * 3 * C), bias(3 * C), dout((size_t)M * C), qb((size_t)M * 3 * C);
    for (auto &v : qkv) v = uni(-1.5f, 1.5f);
    for (auto &v : bias) v = uni(-0.5f, 0.5f);
    for (auto &v : dout) v = uni(-1, 1);
    for (size_t i = 0; i < qkv.size(); i++) {
        qkv_e[(size_t)r0 * 3 * C + i] = qac_from_float<E>(qkv[i]);
        qkv[i] = qac_to_float<E>(qkv_e[(size_t)r0 * 3 * C + i]);
        qb[i] = qac_to_float<E>(qac_from_float<E>(qkv[i] + bias[i % (3 * C)]));
    }
    for (size_t i = 0; i < dout.size(); i++) {
        dout_e[(size_t)r0 * C + i] = qac_from_float<E>(dout[i]);
        dout[i] = qac_to_float<E>(dout_e[(size_t)r0 * C + i]);
    }
    std::vector<E> out_e((size_t)N * C, qac_from_float<E>(NAN)), dqkv_e((size_t)N * 3 * C, qac_from_float<E>(NAN));
    std::vector<float> lse((size_t)N * NH, NAN), dvec((size_t)N * NH, NAN);
    const qac_fa_rows rows = {offs.data(), nullptr, B, T, N};
    params p = make_params(qkv_e.data(), bias.data(), rows, C, NH, 0, 0, qac_kt_drop{0.0f, 0, 0}, layer);
    p.out = out_e.data();
    p.lse = lse.data();
    p.dout = dout_e.data();
    p.o = out_e.data();
    p.dvec = dvec.data();
    p.dqkv = dqkv_e.data();
    // the last sequences' blocks of the attention kernels (grid: tiles, heads,
    // sequences), and of the dot kernel (256 (row, head) pairs a block) those
    // that reach their rows
    emu_block_filter = [&](emu_dim bi) {
        if (gridDim.y == 1) return ((size_t)bi.x * 256 + 255) / NH >= (size_t)r0;
        return g_chunk->b0 + (int)bi.z >= first;
    };
    runner<E, D>::forward(t, p, B, NH);
    runner<E, D>::backward(t, p, B, NH, N);
    emu_block_filter = nullptr;

    // the twin on the last four sequences alone
    const int Bt = B - first;
    std::vector<int> toffs(offs.begin() + first, offs.end());
    for (int &o : toffs) o -= r0;
    std::vector<float> out(M * C), olse((size_t)M * NH), dq((size_t)M * 3 * C);
    for (int r = 0; r < M; r++) {
        for (int c = 0; c < C; c++) out[(size_t)r * C + c] = qac_to_float<E>(out_e[(size_t)(r0 + r) * C + c]);
        for (int c = 0; c < 3 * C; c++)
            dq[(size_t)r * 3 * C + c] = qac_to_float<E>(dqkv_e[(size_t)(r0 + r) * 3 * C + c]);
        for (int h = 0; h < NH; h++) olse[(size_t)h * M + r] = lse[(size_t)h * N + r0 + r];
    }
    std::vector<float> tout((size_t)M * C), tlse((size_t)M * NH), tdq((size_t)M * 3 * C), bO((size_t)M * C),
        bL((size_t)M * NH), bd((size_t)M * 3 * C);
    CHECK_OK(qac_flash_attention_forward(tout.data(), tlse.data(), qkv.data(), bias.data(), toffs.data(), NULL, Bt, T,
                                         C, NH, 0, 0, NULL, layer, t.f[1], pr, NULL));
    CHECK_OK(qac_flash_attention_backward(tdq.data(), dout.data(), out.data(), olse.data(), qkv.data(), bias.data(),
                                          toffs.data(), NULL, Bt, T, C, NH, 0, 0, NULL, layer, t.k[1], t.q[1], pr,
                                          NULL));
    att_shape s = {Bt, T, C, NH, 0, 0, toffs.data(), NULL, NULL, layer, (T + 15) / 16 + 1};
    const double us = 2 * 0x1p-24, ue = 2 * (pr == QAC_PREC_FP16 ? 0x1p-11 : 0x1p-8);
    const double ae = pr == QAC_PREC_FP16 ? 2 * 0x1p-25 : 0;
    att_bound_forward(bO.data(), bL.data(), &s, qb.data(), tout.data(), tlse.data(), us, ue, ae);
    att_bound_backward(bd.data(), &s, qb.data(), dout.data(), out.data(), NULL, us, ue, ae);
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%d hs%d packed, sequences %d.. (second launch)",
             pr == QAC_PREC_FP16 ? "fp16" : "bf16", B, D, first);
    check("emulated fwd out", shape, out, tout, bO);
    check("emulated fwd lse", shape, olse, tlse, bL);
    check("emulated bwd dqkv", shape, dq, tdq, bd);
}

} // namespace

int main() {
    emu_smem = fa_smem;
    emu_smem_bytes = sizeof fa_smem;
    int fv[32][4], kv[32][4], qv[32][4], nf = 0, nk = 0, nq = 0;
#define F(A, B, S, M) fv[nf][0] = A, fv[nf][1] = B, fv[nf][2] = S, fv[nf][3] = M, nf++;
#define K(A, B, S, M) kv[nk][0] = A, kv[nk][1] = B, kv[nk][2] = S, kv[nk][3] = M, nk++;
#define Q(A, B, S, M) qv[nq][0] = A, qv[nq][1] = B, qv[nq][2] = S, qv[nq][3] = M, nq++;
    QAC_FA_FWD_VARIANTS(F)
    QAC_FA_DKDV_VARIANTS(K)
    QAC_FA_DQ_VARIANTS(Q)
#undef F
#undef K
#undef Q
    const int l3[3] = {70, 33, 1}, l2[2] = {150, 129}, l4[4] = {33, 17, 16, 1}, l1[1] = {1}, l5[2] = {200, 131};
    const int n = nf > nk ? (nf > nq ? nf : nq) : (nk > nq ? nk : nq);
    for (int i = 0; i < 2 * n; i++) {
        emu_cp_deferred = i >= n;
        tiles3 t = {{fv[i % nf][0], fv[i % nf][1], fv[i % nf][2], fv[i % nf][3]},
                    {kv[i % nk][0], kv[i % nk][1], kv[i % nk][2], kv[i % nk][3]},
                    {qv[i % nq][0], qv[i % nq][1], qv[i % nq][2], qv[i % nq][3]}};
        printf("%s copies:\n", emu_cp_deferred ? "deferred" : "immediate");
        switch ((i + 3 * (i / n)) % 8) { /* each variant meets another case in each pass */
        case 0: run_case<__nv_bfloat16, 64>(3, 70, 2, l3, 0, 0, 0, 0.1f, t); break;
        case 1: run_case<__half, 32>(3, 70, 3, l3, 1, 0, 0, 0.0f, t); break;
        case 2: run_case<__nv_bfloat16, 32>(4, 33, 2, l4, 0, 1, 3, 0.1f, t); break;
        case 3: run_case<__half, 64>(2, 150, 2, l2, 1, 1, 0, 0.1f, t); break;
        case 4: run_case<__nv_bfloat16, 64>(1, 1, 2, l1, 0, 0, 0, 0.0f, t); break;
        case 5: run_case<__nv_bfloat16, 32>(2, 200, 2, l5, 1, 0, 0, 0.1f, t); break;
        /* ModernBERT's local layers: a window on either side, padded and packed */
        case 6: run_case<__nv_bfloat16, 64>(2, 200, 2, l5, 1, 0, 40, 0.0f, t); break;
        case 7: run_case<__half, 32>(3, 70, 2, l3, 0, 0, 9, 0.1f, t); break;
        }
    }
    emu_cp_deferred = 1;
    const tiles3 def = {{64, 64, 2, 1}, {64, 64, 2, 1}, {64, 64, 2, 1}};
    big_batch<__nv_bfloat16, 64>(def);
    const tiles3 wide = {{128, 64, 2, 2}, {128, 32, 2, 2}, {128, 64, 2, 2}};
    big_batch<__half, 32>(wide);
    return qac_test_summary();
}
