// The CUDA trainer's ModernBERT kernels (kernels/train_family.cu) run on the
// CPU (tests/gpu/cuda_emu.h: the kernels' own source, blocks one at a time)
// against their CPU twins in model/family_layers.c:
//  - the rotary embeddings' backward (qac_rope_backward) with both of
//    ModernBERT's tables (global theta 160,000, local 10,000, from
//    qac_rope_table), positions past the first row's, head sizes from 4 to
//    64: the same rounded products and sums on both sides, so exact in fp32;
//    in bf16 the twin runs on the stored (rounded) gradient and its result is
//    rounded once, as the kernel's is: exact too. The V part must be left
//    as it is (bit for bit).
//  - GeGLU's backward (qac_geglu_backward), out of place and in place over
//    pre, without and with the FFN's bias (added as pre is read): bound 1e-5 on the relative norm of the difference in fp32 (GELU's
//    erf and exp written differently on the two sides; the one
//    test_train_emulated and test_gpu_train_kernels hold GELU's backward
//    to), 4e-3 in bf16 (a value stored rounded: bf16 keeps 8 significant
//    bits, 2^-8).
//  - the LayerNorm's forward (with its statistics) and backward
//    (qac_layernorm_forward, qac_layernorm_backward) without a bias, as
//    ModernBERT's norms are (b NULL, db NULL), and with one: the launch
//    sequence of qac_kt_layernorm_bwd (column partials of 64 rows, their
//    sums, the rows); bound 1e-5 on the relative norm of the difference in
//    fp32 (the mean, variance and column sums added in other orders; the
//    bound test_gpu_train_kernels derives for the LayerNorm), 4e-3 for the
//    bf16 copy of the output (stored rounded, 2^-8).
//  - bias + dropout + residual (the pre-norm FFN's output onto the residual
//    stream) without a bias and with one, against the residual sum of
//    qac_residual_layernorm_forward (the same rounded operations: exact);
//  - the unfused attention's masked softmax (the trainer's fallback where
//    the fused kernels do not take the shape) with a local window on either
//    side, against the probabilities qac_attention_forward_window keeps:
//    the scores S are formed here in float (q.k in order, times 1/sqrt(hs),
//    as the GEMM's alpha), the twin forms its own in another order. Each
//    score then differs by at most 2 hs u sum|q_i k_i| / sqrt(hs) (u =
//    2^-24; two dot products, each within hs u sum|q_i k_i|), so exp(S - m)
//    / sum by a factor within 1 +- 2 dS (the maximum and the sum move too)
//    and a few roundings: each real row's P within P (4 dS + 8u) of the
//    twin's; outside the window (and past the length) both exactly 0.
//    Padding rows are not compared (their context is never read).
// Grids smaller than the work (the launchers cap grid_1d): the grid-stride
// loops must cover every element. Outputs of the GeGLU pass start as NaN.
//
// What this cannot show, and test_gpu_train_families does on a GPU: the
// device's erff and expf, the layers composed in a training step.
#include "cuda_emu.h"

#undef __shared__
#define __shared__ static

#include "../../kernels/train_family.cu"
#include "../../kernels/train_layers.cu"
#include "../../kernels/train_attention.cu"

#define EMU_TEST_SEED 0x3C6EF372A54FF53Aull
#include "emu_testutil.h"

extern "C" {
#include "bert_cpu.h"
}

namespace {

// grid: the blocks launched (fewer than the work's: the stride loop covers the rest)
template <typename E> void test_rope(int N, int C, int NH, int P, float theta, unsigned grid) {
    const int hs = C / NH;
    std::vector<float> cs((size_t)P * hs);
    qac_rope_table(cs.data(), P, hs, theta);
    std::vector<int32_t> pos(N);
    for (int r = 0; r < N; r++) pos[r] = (int32_t)((r * 7 + 3) % P);
    const std::vector<float> dy = rounded<E>(rnd((size_t)N * 3 * C, -2.f, 2.f));
    std::vector<E> k = to_e<E>(dy);
    emu_launch({grid, 1, 1}, 256, [&] { rope_bwd_kernel<E>(k.data(), pos.data(), cs.data(), N, C, hs); });
    std::vector<float> want = dy;
    qac_rope_backward(want.data(), pos.data(), cs.data(), N, C, NH, NULL);
    char shape[96];
    snprintf(shape, sizeof shape, "N%d C%d NH%d theta %.0f grid %u", N, C, NH, theta, grid);
    report_exact("rope bwd", pname<E>(), shape, to_f<E>(k), rounded<E>(want));
}

// bias_on: the kernel adds the bias to pre as it reads it (the encoder's
// forward keeps pre without it); the twin gets pre + bias, summed here in
// the same float addition.
template <typename E> void test_geglu(int N, int I, unsigned grid, bool bias_on = false) {
    const std::vector<float> pre = rounded<E>(rnd((size_t)N * 2 * I, -4.f, 4.f));
    const std::vector<float> dact = rounded<E>(rnd((size_t)N * I, -1.f, 1.f));
    const std::vector<float> bias = rnd((size_t)2 * I, -0.5f, 0.5f);
    const float *bp = bias_on ? bias.data() : nullptr;
    std::vector<float> biased = pre;
    if (bias_on)
        for (size_t i = 0; i < biased.size(); i++) biased[i] = pre[i] + bias[i % (2 * (size_t)I)];
    std::vector<float> want((size_t)N * 2 * I);
    qac_geglu_backward(want.data(), dact.data(), biased.data(), N, I, NULL);
    char shape[96];
    snprintf(shape, sizeof shape, "N%d I%d grid %u%s", N, I, grid, bias_on ? " bias" : "");
    const double tol = is_bf16<E>() ? 4e-3 : 1e-5;

    const std::vector<E> pe = to_e<E>(pre), de = to_e<E>(dact);
    std::vector<E> out((size_t)N * 2 * I, qac_from_float<E>(NAN));
    emu_launch({grid, 1, 1}, 256, [&] { geglu_bwd_kernel<E>(out.data(), de.data(), pe.data(), bp, N, I); });
    report("geglu bwd", pname<E>(), shape, to_f<E>(out), want, tol);

    std::vector<E> inplace = pe; // dpre over pre
    emu_launch({grid, 1, 1}, 256, [&] { geglu_bwd_kernel<E>(inplace.data(), de.data(), inplace.data(), bp, N, I); });
    report("geglu bwd (in place)", pname<E>(), shape, to_f<E>(inplace), want, tol);
}

// The LayerNorm, bias or none (ModernBERT's), fp32 with a bf16 or fp32 copy of the output.
template <typename E> void test_layernorm(int N, int C, bool bias) {
    const float eps = 1e-5f;
    const std::vector<float> inp = rnd((size_t)N * C, -3.f, 3.f), w = rnd(C, 0.5f, 1.5f), bv = rnd(C, -1.f, 1.f);
    const float *b = bias ? bv.data() : NULL;
    char shape[96];
    snprintf(shape, sizeof shape, "N%d C%d %s", N, C, bias ? "bias" : "no bias");
    std::vector<float> out((size_t)N * C, NAN), mean(N, NAN), rstd(N, NAN);
    std::vector<E> out_e((size_t)N * C, qac_from_float<E>(NAN));
    emu_launch({(unsigned)N, 1, 1}, LN_THREADS, [&] {
        ln_fwd_kernel<E>(out.data(), out_e.data(), mean.data(), rstd.data(), inp.data(), w.data(), b, C, eps);
    });
    std::vector<float> tout((size_t)N * C), tmean(N), trstd(N);
    qac_layernorm_forward(tout.data(), tmean.data(), trstd.data(), inp.data(), w.data(), b, N, C, eps, NULL);
    report("layernorm fwd", "fp32", shape, out, tout, 1e-5);
    report("layernorm fwd (copy)", pname<E>(), shape, to_f<E>(out_e), tout, is_bf16<E>() ? 4e-3 : 1e-5);
    report("layernorm mean", "fp32", shape, mean, tmean, 1e-5);
    report("layernorm rstd", "fp32", shape, rstd, trstd, 1e-5);

    // backward, as qac_kt_layernorm_bwd launches it, on the twin's statistics
    const std::vector<float> dout = rnd((size_t)N * C, -1.f, 1.f), dw0 = rnd(C, -1.f, 1.f), db0 = rnd(C, -1.f, 1.f);
    std::vector<float> dinp((size_t)N * C, NAN), dw = dw0, db = db0;
    const int nch = col_chunks(N);
    std::vector<float> partial((size_t)2 * nch * C, NAN);
    const unsigned gc = (unsigned)((C + COL_THREADS - 1) / COL_THREADS);
    emu_launch({gc, (unsigned)nch, 1}, COL_THREADS, [&] {
        ln_partial_kernel(partial.data(), dout.data(), inp.data(), tmean.data(), trstd.data(), N, C, nch);
    });
    emu_launch({gc, 1, 1}, COL_THREADS, [&] { colsum_finish_kernel(dw.data(), partial.data(), nch, C); });
    if (bias)
        emu_launch({gc, 1, 1}, COL_THREADS,
                   [&] { colsum_finish_kernel(db.data(), partial.data() + (size_t)nch * C, nch, C); });
    emu_launch({(unsigned)N, 1, 1}, LN_THREADS, [&] {
        ln_bwd_kernel(dinp.data(), dout.data(), inp.data(), tmean.data(), trstd.data(), w.data(), C);
    });
    std::vector<float> tdinp((size_t)N * C), tdw = dw0, tdb = db0;
    qac_layernorm_backward(tdinp.data(), tdw.data(), bias ? tdb.data() : NULL, dout.data(), inp.data(), tmean.data(),
                           trstd.data(), w.data(), N, C, NULL);
    report("layernorm bwd (dinp)", "fp32", shape, dinp, tdinp, 1e-5);
    report("layernorm bwd (dw)", "fp32", shape, dw, tdw, 1e-5);
    report("layernorm bwd (db)", "fp32", shape, db, tdb, 1e-5);
}

// bias + dropout + residual, bias or none, with dropout at (layer 2, the FFN's site).
template <typename E> void test_bias_dropout_residual(int B, int T, int C, float p, bool bias_on) {
    const int N = B * T, layer = 2, site = QAC_DROP_FFN_OUT;
    const size_t n = (size_t)N * C;
    const uint64_t key = 0xB1A5D0ull + (uint64_t)C;
    const std::vector<float> proj = rounded<E>(rnd(n, -2.f, 2.f)), resid = rnd(n, -2.f, 2.f),
                             bias = rnd(C, -0.5f, 0.5f), w(C, 1.f);
    const float *bp = bias_on ? bias.data() : nullptr;
    const std::vector<E> proj_e = to_e<E>(proj);
    const drop_consts dc = drop_consts_for(p);
    std::vector<float> out(n, NAN);
    emu_launch({(unsigned)((n + 255) / 256), 1, 1}, 256, [&] {
        bias_dropout_residual_kernel<E>(out.data(), proj_e.data(), bp, resid.data(), key, 0, dc.thresh, dc.scale,
                                        p > 0.f, layer, site, T, C, n);
    });
    qac_dropout d = {p, p, key, NULL};
    std::vector<float> res(n), lnout(n), mean(N), rstd(N);
    qac_residual_layernorm_forward(res.data(), lnout.data(), mean.data(), rstd.data(), proj.data(), bp, resid.data(),
                                   w.data(), NULL, &d, layer, site, B, T, C, 1e-5f, NULL);
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d C%d p%.1f %s", B, T, C, (double)p, bias_on ? "bias" : "no bias");
    report_exact("bias+dropout+residual", pname<E>(), shape, out, res);
}

// The masked softmax with a bidirectional window, fp32.
void test_softmax_window(int B, int T, int NH, int hs, int window, const std::vector<int> &lens) {
    const int C = NH * hs, N = B * T;
    const float sc = 1.0f / sqrtf((float)hs);
    const std::vector<float> qkv = rnd((size_t)N * 3 * C, -1.f, 1.f);
    const size_t rows = (size_t)B * NH * T;
    std::vector<float> S(rows * T), bound(rows, 0.f);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * NH + h) * T + t;
                const float *q = &qkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs];
                for (int j = 0; j < T; j++) {
                    const float *k = &qkv[((size_t)b * T + j) * 3 * C + C + (size_t)h * hs];
                    float d = 0.f, a = 0.f;
                    for (int i = 0; i < hs; i++) d += q[i] * k[i], a += fabsf(q[i] * k[i]);
                    S[row * T + j] = d * sc;
                    const float ds = 2.f * hs * 0x1p-24f * a * sc;
                    bound[row] = ds > bound[row] ? ds : bound[row];
                }
            }
    std::vector<float> P(rows * T, NAN);
    emu_launch({(unsigned)((rows + SM_WARPS - 1) / SM_WARPS), 1, 1}, SM_WARPS * 32, [&] {
        softmax_fwd_kernel<float>(P.data(), nullptr, S.data(), lens.data(), 0, 0, 0, 1.f, 3, NH, T, 0, window, rows);
    });
    std::vector<float> out((size_t)N * C), att(rows * T);
    std::vector<float> scratch(qac_attention_scratch_floats(T, C, NH, 0));
    CHECK_OK(qac_attention_forward_window(out.data(), att.data(), scratch.data(), qkv.data(), lens.data(), NULL,
                                          window, NULL, 3, B, T, C, NH, NULL));
    size_t bad = 0, n = 0;
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < lens[b]; t++) {
                const size_t row = ((size_t)b * NH + h) * T + t;
                for (int j = 0; j < T; j++, n++) {
                    const float g = P[row * T + j], w = att[row * T + j];
                    const bool inside = j < lens[b] && abs(j - t) <= window;
                    if (!inside) {
                        bad += g != 0.f || w != 0.f;
                        continue;
                    }
                    const double lim = w * (4.0 * bound[row] + 8 * 0x1p-24);
                    const double d = fabs((double)g - w);
                    bad += !(d <= lim) || w == 0.f;
                    worst = lim > 0 && d / lim > worst ? d / lim : worst;
                }
            }
    printf("softmax window %-3d   fp32  B%d T%d NH%d hs%d %28s %zu of %zu outside the bound (worst %.2f of it)\n",
           window, B, T, NH, hs, "", bad, n, worst);
    CHECK_MSG(bad == 0, "softmax window %d: %zu probabilities differ from the twin's", window, bad);
}

} // namespace

int main() {
    for (bool bias_on : {false, true}) {
        test_bias_dropout_residual<float>(3, 17, 100, 0.1f, bias_on);
        test_bias_dropout_residual<__nv_bfloat16>(2, 9, 64, 0.0f, bias_on);
    }
    // ModernBERT's local layers (the unfused path): windows of 4 and 9 on either side, padded rows
    test_softmax_window(3, 40, 2, 16, 4, {40, 23, 1});
    test_softmax_window(2, 70, 1, 32, 9, {70, 50});
    // ModernBERT's norms have no bias; BERT's do
    for (bool bias : {false, true}) {
        test_layernorm<float>(70, 300, bias); // two column chunks, C past a block's threads
        test_layernorm<__nv_bfloat16>(5, 37, bias);
    }
    // ModernBERT's two tables (gte-modernbert-base: global 160,000, local 10,000)
    for (float theta : {160000.f, 10000.f}) {
        test_rope<float>(37, 96, 3, 64, theta, 14);      // hs 32, every element one thread
        test_rope<float>(50, 128, 2, 80, theta, 3);      // hs 64, the stride loop
        test_rope<float>(9, 8, 2, 16, theta, 1);         // hs 4
        test_rope<__nv_bfloat16>(21, 96, 3, 40, theta, 2);
    }
    test_geglu<float>(33, 300, 40);
    test_geglu<float>(7, 37, 1); // the stride loop
    test_geglu<__nv_bfloat16>(19, 130, 3);
    test_geglu<float>(33, 300, 40, true); // with the FFN's bias (mlp_bias)
    test_geglu<__nv_bfloat16>(19, 130, 3, true);
    return qac_test_summary();
}
