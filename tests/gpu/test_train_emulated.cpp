// The CUDA trainer's GELU and fused passes (kernels/train_fused.cu) run on
// the CPU (tests/gpu/cuda_emu.h: the kernels' own source, shuffles and
// barriers emulated, blocks one at a time) against their CPU twins in
// model/layers.c, in the default suite: bias + GELU and GELU's backward,
// bias + dropout + residual + LayerNorm forward and backward (with the
// LayerNorm parameters' and the bias's column sums; also without either
// bias, as ModernBERT's pre-norm step runs it), the FFN's bias + GELU
// forward and backward with its bias gradient; fp32 and bf16; hidden sizes
// that end inside a thread's columns, 1 to 16 columns a thread, several
// 64-row chunks of the column sums; more rows than gridDim.y takes (the
// row-blocked GELU passes stride over them: only the blocks of the rows
// checked run). Outputs start as NaN: every element must be written.
//
// Bounds: the GPU test's (tests/gpu/test_gpu_train_kernels.c, where each
// is derived), on the relative norm of the difference: 1e-5 in fp32 (sums
// in other orders; GELU's erf and exp written differently on the two
// sides), and in bf16 4e-3 for a value stored rounded (2^-8: bf16 keeps 8
// significant bits) and 5e-3 for a sum of rounded terms; exact where both
// sides do the same rounded operations (the residual sum, pre + bias).
//
// What this cannot show, and test_gpu_train_kernels does on a GPU: the
// real instructions (erff's and expf's device implementations), speed.
#include "cuda_emu.h"

// static in a kernel's body: one array for the block's threads (the
// fibers share the OS thread, and blocks run one after another)
#undef __shared__
#define __shared__ static

#include "../../kernels/train_fused.cu"

#define EMU_TEST_SEED 0x7A3B9C1D2E4F5061ull
#include "emu_testutil.h"

extern "C" {
#include "bert_cpu.h"
}

namespace {

template <typename E> double tol(double fp32, double bf16) { return is_bf16<E>() ? bf16 : fp32; }

// The row-blocked GELU passes' launch (gelu_grid, GELU_THREADS), on the emulator.
template <typename K> void gelu_launch(int N, int I, K kernel) {
    emu_launch({(unsigned)((I + GELU_THREADS - 1) / GELU_THREADS), (unsigned)(N < 65535 ? N : 65535), 1},
               GELU_THREADS, kernel);
}

// bias + GELU (pre kept rounded), GELU's backward, and the fused bias +
// GELU forward and backward with the bias gradient. rows: the rows to
// check (all when empty; else only the blocks that reach them run).
template <typename E> void test_gelu(int N, int I, const std::vector<int> &rows) {
    const size_t n = (size_t)N * I;
    const std::vector<float> pre0 = rnd(n, -4, 4), bias = rnd(I, -1, 1), dout0 = rnd(n, -1, 1),
                             dbias0 = rnd(I, -1, 1);
    std::vector<int> check = rows;
    if (check.empty())
        for (int r = 0; r < N; r++) check.push_back(r);
    if (!rows.empty()) // the blocks whose row set (y, y + 65535, ...) meets the rows checked
        emu_block_filter = [&](emu_dim b) {
            for (int r : rows)
                if (r % 65535 == (int)b.y) return true;
            return false;
        };
    std::vector<E> pre_e = to_e<E>(pre0), dout_e = to_e<E>(dout0), act_e(n, qac_from_float<E>(NAN));
    const std::vector<float> pre = to_f<E>(pre_e), dout = to_f<E>(dout_e);
    char shape[64];
    snprintf(shape, sizeof shape, "N%d I%d%s", N, I, rows.empty() ? "" : " (rows past 65,535)");
    auto pick = [&](const std::vector<float> &v) { // the checked rows of [N, I]
        std::vector<float> r;
        for (int row : check) r.insert(r.end(), v.begin() + (size_t)row * I, v.begin() + (size_t)(row + 1) * I);
        return r;
    };

    // bias + GELU, pre kept: pre' = E(pre + bias), act = E(GELU(pre + bias))
    std::vector<E> pk = pre_e;
    gelu_launch(N, I, [&] { bias_gelu_fwd_kernel<E>(pk.data(), act_e.data(), bias.data(), N, I); });
    std::vector<float> sum(n), act(n);
    for (size_t i = 0; i < n; i++) sum[i] = pre[i] + bias[i % I];
    qac_gelu_forward(act.data(), sum.data(), n, NULL);
    report_exact("bias+gelu fwd (pre)", pname<E>(), shape, pick(to_f<E>(pk)).data(), pick(rounded<E>(sum)).data(),
                 check.size() * I);
    report("bias+gelu fwd (act)", pname<E>(), shape, pick(to_f<E>(act_e)), pick(act), tol<E>(1e-5, 4e-3));

    // the fused pair: act from pre as the product wrote it, then dpre in place of dout and dbias
    act_e.assign(n, qac_from_float<E>(NAN));
    gelu_launch(N, I, [&] { bias_gelu_kernel<E>(act_e.data(), pre_e.data(), bias.data(), N, I); });
    std::vector<float> tact(n);
    qac_bias_gelu_forward(tact.data(), pre.data(), bias.data(), N, I, NULL);
    report("bias+gelu fused (act)", pname<E>(), shape, pick(to_f<E>(act_e)), pick(tact), tol<E>(1e-5, 4e-3));
    emu_block_filter = nullptr;
    if (!rows.empty()) return; // the backward's chunks cover every row: the small shapes check it
    const int nch = col_chunks(N);
    std::vector<E> dpre_e = dout_e;
    std::vector<float> partial((size_t)nch * I, NAN), gdbias = dbias0;
    emu_launch({(unsigned)((I + COL_THREADS - 1) / COL_THREADS), (unsigned)nch, 1}, COL_THREADS, [&] {
        bias_gelu_bwd_kernel<E>(dpre_e.data(), partial.data(), dpre_e.data(), pre_e.data(), bias.data(), N, I);
    });
    const colsum_dsts dst = {{gdbias.data(), nullptr, nullptr}};
    emu_launch({(unsigned)((I + COL_THREADS - 1) / COL_THREADS), 1, 1}, COL_THREADS,
               [&] { colsum_finish_ways_kernel(dst, partial.data(), nch, I); });
    std::vector<float> dpre(n), dbias = dbias0;
    qac_bias_gelu_backward(dpre.data(), dbias.data(), dout.data(), pre.data(), bias.data(), N, I, NULL);
    report("bias+gelu fused (dpre)", pname<E>(), shape, to_f<E>(dpre_e), dpre, tol<E>(1e-5, 4e-3));
    report("bias+gelu fused (dbias)", pname<E>(), shape, gdbias, dbias, tol<E>(1e-5, 5e-3));

    // GELU's backward alone (grid-stride over the elements)
    std::vector<E> din_e(n, qac_from_float<E>(NAN));
    emu_launch({(unsigned)((n + 255) / 256 < 64 ? (n + 255) / 256 : 64), 1, 1}, 256,
               [&] { gelu_bwd_kernel<E>(din_e.data(), dout_e.data(), pre_e.data(), n); });
    std::vector<float> din(n);
    qac_gelu_backward(din.data(), dout.data(), pre.data(), n, NULL);
    report("gelu bwd", pname<E>(), shape, to_f<E>(din_e), din, tol<E>(1e-5, 4e-3));
}

// bias + dropout + residual + LayerNorm and its backward, as
// qac_kt_residual_ln_fwd / _bwd launch them.
// nobias: the projection's bias and the LayerNorm's bias NULL (ModernBERT's
// pre-norm step), their gradients NULL too.
template <typename E, int K> void test_residual_ln(int B, int T, int C, float p, int with_dadd, bool nobias = false) {
    const int N = B * T, nch = col_chunks(N), layer = 5;
    const size_t n = (size_t)N * C;
    const float eps = 1e-12f;
    const uint64_t key = 0xD0C5EEDull + (uint64_t)C;
    const int site = with_dadd ? QAC_DROP_ATT_OUT : QAC_DROP_FFN_OUT;
    const std::vector<float> proj0 = rnd(n, -2, 2), bias = rnd(C, -0.5f, 0.5f), resid = rnd(n, -2, 2),
                             w = rnd(C, 0.5f, 1.5f), b = rnd(C, -0.3f, 0.3f), dout = rnd(n, -1, 1),
                             dadd = rnd(n, -1, 1), dw0 = rnd(C, -1, 1), db0 = rnd(C, -1, 1), dbias0 = rnd(C, -1, 1);
    const std::vector<E> proj_e = to_e<E>(proj0);
    const std::vector<float> proj = to_f<E>(proj_e);
    const drop_consts dc = drop_consts_for(p);
    const int dropping = p > 0.0f;
    std::vector<float> res(n, NAN), out(n, NAN), mean(N, NAN), rstd(N, NAN), dres(n, NAN);
    std::vector<E> act_e(n, qac_from_float<E>(NAN)), dproj_e(n, qac_from_float<E>(NAN));
    emu_launch({(unsigned)N, 1, 1}, LN_THREADS, [&] {
        residual_ln_fwd_kernel<E, K>(res.data(), out.data(), act_e.data(), mean.data(), rstd.data(), proj_e.data(),
                                     nobias ? nullptr : bias.data(), resid.data(), w.data(),
                                     nobias ? nullptr : b.data(), key, 0, dc.thresh, dc.scale,
                                     dropping, layer, site, T, C, eps);
    });
    constexpr int RB = K <= 4 ? 4 : K <= 8 ? 2 : 1;
    std::vector<float> partial((size_t)3 * nch * C, NAN), gdw = dw0, gdb = db0, gdbias = dbias0;
    emu_launch({(unsigned)nch, 1, 1}, LN_THREADS, [&] {
        residual_ln_bwd_kernel<E, K, RB>(dres.data(), dproj_e.data(), partial.data(), dout.data(),
                                         with_dadd ? dadd.data() : nullptr, res.data(), mean.data(), rstd.data(),
                                         w.data(), key, 0, dc.thresh, dc.scale, dropping, layer, site, T, C, N, nch);
    });
    const colsum_dsts dst = {{gdw.data(), nobias ? nullptr : gdb.data(), nobias ? nullptr : gdbias.data()}};
    emu_launch({(unsigned)((C + COL_THREADS - 1) / COL_THREADS), 3, 1}, COL_THREADS,
               [&] { colsum_finish_ways_kernel(dst, partial.data(), nch, C); });

    qac_dropout d = {p, p, key, NULL};
    std::vector<float> tres(n), tout(n), tmean(N), trstd(N), tdres(n), tdproj(n), dw = dw0, db = db0, dbias = dbias0;
    qac_residual_layernorm_forward(tres.data(), tout.data(), tmean.data(), trstd.data(), proj.data(),
                                   nobias ? NULL : bias.data(), resid.data(), w.data(), nobias ? NULL : b.data(), &d,
                                   layer, site, B, T, C, eps, NULL);
    qac_residual_layernorm_backward(tdres.data(), tdproj.data(), dw.data(), nobias ? NULL : db.data(),
                                    nobias ? NULL : dbias.data(), dout.data(),
                                    with_dadd ? dadd.data() : NULL, tres.data(), tmean.data(), trstd.data(), w.data(),
                                    &d, layer, site, B, T, C, NULL);
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d p%.1f%s%s", B, T, C, (double)p, with_dadd ? " +dadd" : "",
             nobias ? " nobias" : "");
    const char *pn = pname<E>();
    report_exact("residual+ln fwd (res)", pn, shape, res.data(), tres.data(), n);
    report("residual+ln fwd (out)", pn, shape, out, tout, 1e-5);
    report("residual+ln fwd (act)", pn, shape, to_f<E>(act_e), tout, tol<E>(1e-5, 4e-3));
    report("residual+ln fwd (mean)", pn, shape, mean, tmean, 1e-5);
    report("residual+ln fwd (rstd)", pn, shape, rstd, trstd, 1e-5);
    report("residual+ln bwd (dres)", pn, shape, dres, tdres, 1e-5);
    report("residual+ln bwd (dproj)", pn, shape, to_f<E>(dproj_e), tdproj, tol<E>(1e-5, 4e-3));
    report("residual+ln bwd (dw)", pn, shape, gdw, dw, 1e-5);
    report("residual+ln bwd (db)", pn, shape, gdb, db, 1e-5);
    report("residual+ln bwd (dbias)", pn, shape, gdbias, dbias, tol<E>(1e-5, 5e-3));
}

} // namespace

int main() {
    test_gelu<float>(130, 300, {});
    test_gelu<__nv_bfloat16>(7, 37, {});
    test_gelu<__nv_bfloat16>(200, 520, {});
    // more rows than gridDim.y: rows 0, 1, 65534 and the ones past 65,535 that share their blocks
    test_gelu<__nv_bfloat16>(65535 + 3, 8, {0, 1, 65534, 65535, 65536, 65537});
    // K = ceil(C / 256) columns a thread: 1, 3 (768 = BERT-base), 4 (1000: the last thread's last column empty),
    // 16 (4096); 2 or more 64-row chunks of the column sums
    test_residual_ln<float, 1>(3, 37, 100, 0.1f, 0);
    test_residual_ln<__nv_bfloat16, 1>(2, 65, 100, 0.0f, 0);
    test_residual_ln<__nv_bfloat16, 3>(3, 37, 768, 0.1f, 1);
    test_residual_ln<float, 4>(5, 7, 1000, 0.3f, 1);
    test_residual_ln<__nv_bfloat16, 16>(1, 9, 4096, 0.1f, 0);
    // ModernBERT's pre-norm step: no projection bias, no LayerNorm bias (the
    // untouched db and dbias must stay as they were: checked against the
    // twin's, which are left alone too)
    test_residual_ln<float, 1>(3, 37, 100, 0.1f, 1, true);
    test_residual_ln<__nv_bfloat16, 3>(2, 21, 768, 0.0f, 1, true);
    return qac_test_summary();
}
