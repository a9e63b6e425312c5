/* Every CUDA training kernel against its CPU twin at several shapes (odd
 * sizes, padding, T not a multiple of any tile), on fresh random inputs:
 * embeddings, LayerNorm, GELU, linear-layer and attention backward (the
 * encoder's and the decoder's causal windowed attention), the
 * query-generation decoder's GPT-2 blocks as a whole, dropout
 * (identical masks), pooling backward, InfoNCE, gradient clipping + AdamW,
 * and the pre-training losses: coCondenser's contrastive loss and the MLM
 * cross-entropy over the vocabulary; and the fused passes of the layer
 * stack (bias + dropout + residual + LayerNorm forward and backward, bias +
 * GELU forward and backward).
 *
 * Tolerances (relative Frobenius error per tensor): fp32 1e-5 (fp32
 * arithmetic in another order); bf16 from the 8-bit mantissa: every input
 * rounded once (2^-9 relative) and the product rounded once more, so a few
 * times 2^-8 ~ 4e-3, with room for cancellation: 1.5e-2 for products,
 * 3e-2 for attention (softmax then two products). Dropout and AdamW are
 * element-wise in the same float operations and must match bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gpu_testutil.h"
#include "qac_cuda_train_kernels.h"
#include "qac_heads.h"
#include "qac_train.h"
#include "testutil.h"

static const qac_precision PRECS[2] = {QAC_PREC_FP32, QAC_PREC_BF16};

static double tol_for(qac_precision p, double fp32, double bf16) { return p == QAC_PREC_FP32 ? fp32 : bf16; }

static void report(const char *what, qac_precision p, const char *shape, const float *got, const float *want,
                   size_t n, double tol) {
    double mx;
    const double rel = gpu_test_rel_err(got, want, n, &mx);
    printf("%-24s %-5s %-30s rel %.3g max|d| %.3g (tol %.1g)\n", what, gpu_test_prec_name(p), shape, rel, mx, tol);
    CHECK_MSG(rel <= tol, "%s %s %s: relative error %g > %g", what, gpu_test_prec_name(p), shape, rel, tol);
}

/* exact equality, element by element */
static void report_exact(const char *what, const char *shape, const float *got, const float *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) bad++;
    printf("%-24s %-5s %-30s %zu of %zu elements differ (must be 0)\n", what, "fp32", shape, bad, n);
    CHECK_MSG(bad == 0, "%s %s: %zu elements differ", what, shape, bad);
}

static float *rnd(size_t n, float lo, float hi) {
    float *a = malloc(n * sizeof *a);
    gpu_test_fill(a, n, lo, hi);
    return a;
}

static float *copy_of(const float *a, size_t n) {
    float *b = malloc(n * sizeof *b);
    memcpy(b, a, n * sizeof *b);
    return b;
}

static int *random_lens(int B, int T) {
    int *lens = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) lens[b] = gpu_test_int(1, T);
    lens[0] = T;
    if (B > 1) lens[B - 1] = 1;
    return lens;
}

static void test_embeddings_backward(int B, int T, int C, int V, int Tt, int with_types) {
    const int N = B * T, P = T + 5;
    float *dout = rnd((size_t)N * C, -1, 1);
    float *dword = rnd((size_t)V * C, -1, 1), *dpos = rnd((size_t)P * C, -1, 1), *dtype = rnd((size_t)Tt * C, -1, 1);
    float *gword = copy_of(dword, (size_t)V * C), *gpos = copy_of(dpos, (size_t)P * C),
          *gtype = copy_of(dtype, (size_t)Tt * C);
    int32_t *ids = malloc(sizeof(int32_t) * N), *types = with_types ? malloc(sizeof(int32_t) * N) : NULL;
    for (int i = 0; i < N; i++) ids[i] = gpu_test_int(0, V - 1);
    if (types)
        for (int i = 0; i < N; i++) types[i] = gpu_test_int(0, Tt - 1);
    qac_embeddings_backward(dword, dpos, dtype, dout, ids, types, B, T, C);
    CHECK_OK(qac_cuda_embeddings_backward(gword, gpos, gtype, dout, ids, types, B, T, C, V, P, Tt));
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d V%d%s", B, T, C, V, types ? " types" : "");
    report("embeddings bwd (word)", QAC_PREC_FP32, shape, gword, dword, (size_t)V * C, 1e-6);
    report_exact("embeddings bwd (pos)", shape, gpos, dpos, (size_t)P * C);
    report("embeddings bwd (type)", QAC_PREC_FP32, shape, gtype, dtype, (size_t)Tt * C, 1e-6);
    free(dout), free(dword), free(dpos), free(dtype), free(gword), free(gpos), free(gtype), free(ids), free(types);
}

static void test_layernorm(int N, int C) {
    const float eps = 1e-12f;
    float *inp = rnd((size_t)N * C, -2, 2), *w = rnd(C, 0.5f, 1.5f), *b = rnd(C, -0.3f, 0.3f);
    float *out = malloc(sizeof(float) * N * C), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    float *gout = malloc(sizeof(float) * N * C), *gmean = malloc(sizeof(float) * N), *grstd = malloc(sizeof(float) * N);
    qac_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, NULL);
    CHECK_OK(qac_cuda_layernorm_forward(gout, gmean, grstd, inp, w, b, N, C, eps));
    char shape[64];
    snprintf(shape, sizeof shape, "N%d C%d", N, C);
    report("layernorm fwd", QAC_PREC_FP32, shape, gout, out, (size_t)N * C, 1e-5);
    report("layernorm fwd (mean)", QAC_PREC_FP32, shape, gmean, mean, N, 1e-5);
    report("layernorm fwd (rstd)", QAC_PREC_FP32, shape, grstd, rstd, N, 1e-5);

    float *dout = rnd((size_t)N * C, -1, 1), *dw = rnd(C, -1, 1), *db = rnd(C, -1, 1);
    float *gdw = copy_of(dw, C), *gdb = copy_of(db, C);
    float *dinp = malloc(sizeof(float) * N * C), *gdinp = malloc(sizeof(float) * N * C);
    qac_layernorm_backward(dinp, dw, db, dout, inp, mean, rstd, w, N, C, NULL);
    CHECK_OK(qac_cuda_layernorm_backward(gdinp, gdw, gdb, dout, inp, mean, rstd, w, N, C));
    report("layernorm bwd (dinp)", QAC_PREC_FP32, shape, gdinp, dinp, (size_t)N * C, 1e-5);
    report("layernorm bwd (dw)", QAC_PREC_FP32, shape, gdw, dw, C, 1e-5);
    report("layernorm bwd (db)", QAC_PREC_FP32, shape, gdb, db, C, 1e-5);
    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(gout), free(gmean), free(grstd);
    free(dout), free(dw), free(db), free(gdw), free(gdb), free(dinp), free(gdinp);
}

static void test_gelu(int N, int I) {
    const size_t n = (size_t)N * I;
    float *inp = rnd(n, -4, 4), *bias = rnd(I, -1, 1), *dout = rnd(n, -1, 1);
    float *pre = malloc(sizeof(float) * n), *act = malloc(sizeof(float) * n), *dinp = malloc(sizeof(float) * n);
    float *gpre = malloc(sizeof(float) * n), *gact = malloc(sizeof(float) * n), *gdinp = malloc(sizeof(float) * n);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < I; c++) pre[(size_t)r * I + c] = inp[(size_t)r * I + c] + bias[c];
    qac_gelu_forward(act, pre, n, NULL);
    qac_gelu_backward(dinp, dout, pre, n, NULL);
    char shape[64];
    snprintf(shape, sizeof shape, "N%d I%d", N, I);
    for (int pi = 0; pi < 2; pi++) {
        gpu_test_poison(gpre, n), gpu_test_poison(gact, n), gpu_test_poison(gdinp, n);
        CHECK_OK(qac_cuda_bias_gelu_train(gpre, gact, inp, bias, N, I, PRECS[pi]));
        report("bias+gelu fwd (pre)", PRECS[pi], shape, gpre, pre, n, tol_for(PRECS[pi], 1e-6, 1e-2));
        report("bias+gelu fwd (act)", PRECS[pi], shape, gact, act, n, tol_for(PRECS[pi], 1e-5, 1.5e-2));
        CHECK_OK(qac_cuda_gelu_backward(gdinp, dout, pre, n, PRECS[pi]));
        report("gelu bwd", PRECS[pi], shape, gdinp, dinp, n, tol_for(PRECS[pi], 1e-5, 1.5e-2));
    }
    free(inp), free(bias), free(dout), free(pre), free(act), free(dinp), free(gpre), free(gact), free(gdinp);
}

/* x rounded to the nearest bf16 (ties to even), as the GPU's uploads do */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static float *rounded(const float *a, size_t n, qac_precision p) {
    float *b = copy_of(a, n);
    if (p == QAC_PREC_BF16)
        for (size_t i = 0; i < n; i++) b[i] = bf16_round(b[i]);
    return b;
}

/* The fused bias + dropout + residual + LayerNorm, forward and backward,
 * against the CPU twin fed the same (rounded) inputs. The arithmetic before
 * any store is fp32 on both sides: the residual sum is exact (the same
 * rounded operations), the rest 1e-5 as LayerNorm's; in bf16 the act copy
 * of the output and the masked gradient are stored rounded (at most 2^-8
 * relative each: bf16 keeps 8 significant bits; 2^-8 plus fp32's 1e-5 on
 * the norm: 4e-3), and the bias gradient sums those rounded terms:
 * independent errors of 2^-8 / sqrt(3) standard deviation per term add to
 * about 2.3e-3 of a sum that does not cancel on random data; 5e-3. */
static void test_residual_ln(int B, int T, int C, float p, int with_dadd) {
    const int N = B * T;
    const size_t n = (size_t)N * C;
    const float eps = 1e-12f;
    float *proj0 = rnd(n, -2, 2), *bias = rnd(C, -0.5f, 0.5f), *resid = rnd(n, -2, 2), *w = rnd(C, 0.5f, 1.5f),
          *b = rnd(C, -0.3f, 0.3f), *dout = rnd(n, -1, 1), *dadd = with_dadd ? rnd(n, -1, 1) : NULL;
    float *dw0 = rnd(C, -1, 1), *db0 = rnd(C, -1, 1), *dbias0 = rnd(C, -1, 1);
    const uint64_t key = gpu_test_next();
    const int layer = gpu_test_int(0, 11), site = with_dadd || gpu_test_int(0, 1) ? QAC_DROP_ATT_OUT : QAC_DROP_FFN_OUT;
    qac_dropout d = {p, p, key, NULL};
    float *res = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * N),
          *rstd = malloc(sizeof(float) * N), *dres = malloc(sizeof(float) * n), *dproj = malloc(sizeof(float) * n);
    float *gres = malloc(sizeof(float) * n), *gout = malloc(sizeof(float) * n), *gact = malloc(sizeof(float) * n),
          *gmean = malloc(sizeof(float) * N), *grstd = malloc(sizeof(float) * N), *gdres = malloc(sizeof(float) * n),
          *gdproj = malloc(sizeof(float) * n);
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d p%.1f%s", B, T, C, (double)p, with_dadd ? " +dadd" : "");
    for (int pi = 0; pi < 2; pi++) {
        const qac_precision pr = PRECS[pi];
        float *proj = rounded(proj0, n, pr);
        float *dw = copy_of(dw0, C), *db = copy_of(db0, C), *dbias = copy_of(dbias0, C);
        float *gdw = copy_of(dw0, C), *gdb = copy_of(db0, C), *gdbias = copy_of(dbias0, C);
        qac_residual_layernorm_forward(res, out, mean, rstd, proj, bias, resid, w, b, &d, layer, site, B, T, C, eps,
                                       NULL);
        qac_residual_layernorm_backward(dres, dproj, dw, db, dbias, dout, dadd, res, mean, rstd, w, &d, layer, site, B,
                                        T, C, NULL);
        gpu_test_poison(gres, n), gpu_test_poison(gout, n), gpu_test_poison(gact, n), gpu_test_poison(gdres, n),
            gpu_test_poison(gdproj, n);
        CHECK_OK(qac_cuda_residual_layernorm_train(gres, gout, gact, gmean, grstd, gdres, gdproj, gdw, gdb, gdbias,
                                                   proj0, bias, resid, w, b, dout, dadd, p, key, layer, site, B, T, C,
                                                   eps, pr));
        report_exact("residual+ln fwd (res)", shape, gres, res, n);
        report("residual+ln fwd (out)", pr, shape, gout, out, n, 1e-5);
        report("residual+ln fwd (act)", pr, shape, gact, out, n, tol_for(pr, 1e-5, 4e-3));
        report("residual+ln fwd (mean)", pr, shape, gmean, mean, N, 1e-5);
        report("residual+ln fwd (rstd)", pr, shape, grstd, rstd, N, 1e-5);
        report("residual+ln bwd (dres)", pr, shape, gdres, dres, n, 1e-5);
        report("residual+ln bwd (dproj)", pr, shape, gdproj, dproj, n, tol_for(pr, 1e-5, 4e-3));
        report("residual+ln bwd (dw)", pr, shape, gdw, dw, C, 1e-5);
        report("residual+ln bwd (db)", pr, shape, gdb, db, C, 1e-5);
        report("residual+ln bwd (dbias)", pr, shape, gdbias, dbias, C, tol_for(pr, 1e-5, 5e-3));
        free(proj), free(dw), free(db), free(dbias), free(gdw), free(gdb), free(gdbias);
    }
    free(proj0), free(bias), free(resid), free(w), free(b), free(dout), free(dadd), free(dw0), free(db0), free(dbias0);
    free(res), free(out), free(mean), free(rstd), free(dres), free(dproj);
    free(gres), free(gout), free(gact), free(gmean), free(grstd), free(gdres), free(gdproj);
}

/* The FFN's fused bias + GELU against the CPU twin on the same (rounded)
 * inputs: fp32 1e-5 as the unfused GELU; bf16 stores act and dpre rounded
 * (4e-3) and sums the rounded dpre into the bias gradient (5e-3, as
 * test_residual_ln's). */
static void test_bias_gelu(int N, int I) {
    const size_t n = (size_t)N * I;
    float *pre0 = rnd(n, -4, 4), *bias = rnd(I, -1, 1), *dout0 = rnd(n, -1, 1), *dbias0 = rnd(I, -1, 1);
    float *act = malloc(sizeof(float) * n), *dpre = malloc(sizeof(float) * n);
    float *gact = malloc(sizeof(float) * n), *gdpre = malloc(sizeof(float) * n);
    char shape[64];
    snprintf(shape, sizeof shape, "N%d I%d", N, I);
    for (int pi = 0; pi < 2; pi++) {
        const qac_precision pr = PRECS[pi];
        float *pre = rounded(pre0, n, pr), *dout = rounded(dout0, n, pr);
        float *dbias = copy_of(dbias0, I), *gdbias = copy_of(dbias0, I);
        qac_bias_gelu_forward(act, pre, bias, N, I, NULL);
        qac_bias_gelu_backward(dpre, dbias, dout, pre, bias, N, I, NULL);
        gpu_test_poison(gact, n), gpu_test_poison(gdpre, n);
        CHECK_OK(qac_cuda_bias_gelu_fused(gact, gdpre, gdbias, pre0, bias, dout0, N, I, pr));
        report("bias+gelu fused (act)", pr, shape, gact, act, n, tol_for(pr, 1e-5, 4e-3));
        report("bias+gelu fused (dpre)", pr, shape, gdpre, dpre, n, tol_for(pr, 1e-5, 4e-3));
        report("bias+gelu fused (dbias)", pr, shape, gdbias, dbias, I, tol_for(pr, 1e-5, 5e-3));
        free(pre), free(dout), free(dbias), free(gdbias);
    }
    free(pre0), free(bias), free(dout0), free(dbias0), free(act), free(dpre), free(gact), free(gdpre);
}

static void test_matmul_backward(int N, int IC, int OC) {
    float *dout = rnd((size_t)N * OC, -1, 1), *inp = rnd((size_t)N * IC, -1, 1), *w = rnd((size_t)OC * IC, -0.1f, 0.1f);
    float *dw0 = rnd((size_t)OC * IC, -0.5f, 0.5f), *db0 = rnd(OC, -0.5f, 0.5f);
    float *dinp = malloc(sizeof(float) * N * IC), *dw = copy_of(dw0, (size_t)OC * IC), *db = copy_of(db0, OC);
    float *scratch = malloc(sizeof(float) * qac_matmul_backward_scratch(N, IC, OC));
    CHECK_OK(qac_matmul_backward(dinp, dw, db, dout, inp, w, NULL, N, IC, OC, scratch, NULL));
    float *gdinp = malloc(sizeof(float) * N * IC);
    char shape[64];
    snprintf(shape, sizeof shape, "N%d IC%d OC%d", N, IC, OC);
    for (int pi = 0; pi < 2; pi++) {
        float *gdw = copy_of(dw0, (size_t)OC * IC), *gdb = copy_of(db0, OC);
        gpu_test_poison(gdinp, (size_t)N * IC);
        CHECK_OK(qac_cuda_matmul_backward(gdinp, gdw, gdb, dout, inp, w, N, IC, OC, PRECS[pi]));
        report("matmul bwd (dinp)", PRECS[pi], shape, gdinp, dinp, (size_t)N * IC, tol_for(PRECS[pi], 1e-5, 1.5e-2));
        report("matmul bwd (dw)", PRECS[pi], shape, gdw, dw, (size_t)OC * IC, tol_for(PRECS[pi], 1e-5, 1.5e-2));
        report("matmul bwd (db)", PRECS[pi], shape, gdb, db, OC, tol_for(PRECS[pi], 1e-5, 1e-2));
        free(gdw), free(gdb);
    }
    free(dout), free(inp), free(w), free(dw0), free(db0), free(dinp), free(dw), free(db), free(scratch), free(gdinp);
}

static void test_dropout(int B, int T, int C, float p) {
    const size_t n = (size_t)B * T * C;
    float *inp = rnd(n, -1, 1), *res = rnd(n, -1, 1);
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    const uint64_t key = gpu_test_next();
    qac_dropout d = {p, p, key, NULL};
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d p%.2f", B, T, C, (double)p);
    const int sites[3] = {QAC_DROP_EMB, QAC_DROP_ATT_OUT, QAC_DROP_FFN_OUT};
    for (int si = 0; si < 3; si++) {
        const int layer = si == 0 ? 0 : gpu_test_int(0, 11);
        qac_dropout_forward(want, inp, NULL, &d, layer, sites[si], B, T, C, NULL);
        gpu_test_poison(got, n);
        CHECK_OK(qac_cuda_dropout(got, inp, NULL, p, key, layer, sites[si], B, T, C));
        report_exact("dropout", shape, got, want, n);
        qac_dropout_forward(want, inp, res, &d, layer, sites[si], B, T, C, NULL);
        gpu_test_poison(got, n);
        CHECK_OK(qac_cuda_dropout(got, inp, res, p, key, layer, sites[si], B, T, C));
        report_exact("dropout + residual", shape, got, want, n);
    }
    free(inp), free(res), free(want), free(got);
}

static void test_attention(int B, int T, int C, int NH, float p_attn) {
    const size_t N = (size_t)B * T, nP = (size_t)B * NH * T * T;
    float *qkv = rnd(N * 3 * C, -1, 1), *datty = rnd(N * C, -1, 1);
    int *lens = random_lens(B, T);
    const uint64_t key = gpu_test_next();
    const int layer = gpu_test_int(0, 11);
    qac_dropout d = {0.0f, p_attn, key, NULL};
    float *out = malloc(sizeof(float) * N * C), *att = malloc(sizeof(float) * nP), *dqkv = malloc(sizeof(float) * N * 3 * C);
    float *gout = malloc(sizeof(float) * N * C), *gatt = malloc(sizeof(float) * nP), *gdqkv = malloc(sizeof(float) * N * 3 * C);
    CHECK_OK(qac_attention_forward_drop(out, att, NULL, qkv, lens, &d, layer, B, T, C, NH, NULL));
    CHECK_OK(qac_attention_backward(dqkv, datty, qkv, att, lens, &d, layer, B, T, C, NH, NULL));
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d H%d p%.2f", B, T, C, NH, (double)p_attn);
    for (int pi = 0; pi < 2; pi++) {
        gpu_test_poison(gout, N * C), gpu_test_poison(gatt, nP), gpu_test_poison(gdqkv, N * 3 * C);
        CHECK_OK(qac_cuda_attention_train(gout, gatt, qkv, lens, p_attn, key, layer, B, T, C, NH, PRECS[pi]));
        report("attention fwd (out)", PRECS[pi], shape, gout, out, N * C, tol_for(PRECS[pi], 1e-5, 3e-2));
        report("attention fwd (probs)", PRECS[pi], shape, gatt, att, nP, tol_for(PRECS[pi], 1e-5, 1e-2));
        CHECK_OK(qac_cuda_attention_backward(gdqkv, datty, qkv, lens, p_attn, key, layer, B, T, C, NH, PRECS[pi]));
        report("attention bwd (dqkv)", PRECS[pi], shape, gdqkv, dqkv, N * 3 * C, tol_for(PRECS[pi], 1e-5, 3e-2));
    }
    free(qkv), free(datty), free(lens), free(out), free(att), free(dqkv), free(gout), free(gatt), free(gdqkv);
}

/* the decoder's causal attention (window <= 0: plain causal) */
static void test_causal_attention(int B, int T, int C, int NH, int window, float p_attn) {
    const size_t N = (size_t)B * T, nP = (size_t)B * NH * T * T;
    float *qkv = rnd(N * 3 * C, -1, 1), *datty = rnd(N * C, -1, 1);
    int *lens = random_lens(B, T);
    const uint64_t key = gpu_test_next();
    qac_dropout d = {0.0f, p_attn, key, NULL};
    float *out = malloc(sizeof(float) * N * C), *att = malloc(sizeof(float) * nP), *dqkv = malloc(sizeof(float) * N * 3 * C);
    float *gout = malloc(sizeof(float) * N * C), *gatt = malloc(sizeof(float) * nP), *gdqkv = malloc(sizeof(float) * N * 3 * C);
    CHECK_OK(qac_attention_causal_forward(out, att, qkv, lens, window, &d, 0, B, T, C, NH, NULL));
    CHECK_OK(qac_attention_causal_backward(dqkv, datty, qkv, att, lens, window, &d, 0, B, T, C, NH, NULL));
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d H%d w%d p%.2f", B, T, C, NH, window, (double)p_attn);
    for (int pi = 0; pi < 2; pi++) {
        gpu_test_poison(gout, N * C), gpu_test_poison(gatt, nP), gpu_test_poison(gdqkv, N * 3 * C);
        CHECK_OK(qac_cuda_attention_causal_train(gout, gatt, qkv, lens, window, p_attn, key, 0, B, T, C, NH, PRECS[pi]));
        report("causal attn fwd (out)", PRECS[pi], shape, gout, out, N * C, tol_for(PRECS[pi], 1e-5, 3e-2));
        report("causal attn fwd (probs)", PRECS[pi], shape, gatt, att, nP, tol_for(PRECS[pi], 1e-5, 1e-2));
        CHECK_OK(qac_cuda_attention_causal_backward(gdqkv, datty, qkv, lens, window, p_attn, key, 0, B, T, C, NH,
                                                    PRECS[pi]));
        report("causal attn bwd (dqkv)", PRECS[pi], shape, gdqkv, dqkv, N * 3 * C, tol_for(PRECS[pi], 1e-5, 3e-2));
    }
    free(qkv), free(datty), free(lens), free(out), free(att), free(dqkv), free(gout), free(gatt), free(gdqkv);
}

/* The query-generation decoder's blocks (kernels/cuda_layers) against
 * qac_qgen_forward and qac_qgen_backward: the output, the input's gradient
 * and every parameter tensor's. bf16: a block holds about a dozen roundings
 * between its input and a parameter gradient (the layer count of
 * tests/gpu/test_gpu_pretrain_step.c), sqrt(12 L) 2^-9 with room for the
 * reductions' cancellation: 3e-2 for the output (its last LayerNorm
 * renormalises), 6e-2 for the gradients. */
static void test_qgen_block(int B, int T, int C, int NH, int layers, int window, float p) {
    qac_qgen_config q;
    memset(&q, 0, sizeof q);
    q.layers = layers, q.hidden = C, q.heads = NH, q.inner = 4 * C, q.window = window, q.ln_eps = 1e-12f;
    q.pooling = QAC_POOL_CLS;
    const size_t N = (size_t)B * T, NC = N * C, np = qac_qgen_param_count(&q);
    float *params = rnd(np, -0.06f, 0.06f), *x = rnd(NC, -1, 1), *dout = rnd(NC, -1, 1);
    qac_qgen_params pv;
    qac_qgen_bind(&pv, &q, params);
    for (int l = 0; l < layers * C; l++)
        pv.ln1_w[l] = gpu_test_uniform(0.9f, 1.1f), pv.ln2_w[l] = gpu_test_uniform(0.9f, 1.1f);
    for (int k = 0; k < C; k++) pv.lnf_w[k] = gpu_test_uniform(0.9f, 1.1f);
    int *lens = random_lens(B, T);
    const uint64_t key = gpu_test_next();
    qac_dropout d = {p, p, key, NULL};
    qac_qgen_acts a;
    memset(&a, 0, sizeof a);
    CHECK_OK(qac_qgen_acts_alloc(&a, &q, B, T));
    float *dx = malloc(sizeof(float) * NC), *dparams = calloc(np, sizeof(float));
    CHECK_OK(qac_qgen_forward(&a, &q, &pv, x, lens, &d, B, T, NULL));
    qac_qgen_params gv;
    qac_qgen_bind(&gv, &q, dparams);
    CHECK_OK(qac_qgen_backward(dx, &gv, &a, dout, &q, &pv, lens, &d, B, T, NULL));
    float *gout = malloc(sizeof(float) * NC), *gdx = malloc(sizeof(float) * NC), *gdparams = malloc(sizeof(float) * np);
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d H%d L%d w%d p%.2f", B, T, C, NH, layers, window, (double)p);
    for (int pi = 0; pi < 2; pi++) {
        gpu_test_poison(gout, NC), gpu_test_poison(gdx, NC);
        memset(gdparams, 0, np * sizeof(float));
        CHECK_OK(qac_cuda_qgen_block(gout, gdx, gdparams, params, x, dout, lens, &q, p, p, key, B, T, PRECS[pi]));
        report("qgen block fwd (out)", PRECS[pi], shape, gout, a.out, NC, tol_for(PRECS[pi], 1e-5, 3e-2));
        report("qgen block bwd (dx)", PRECS[pi], shape, gdx, dx, NC, tol_for(PRECS[pi], 1e-5, 6e-2));
        for (size_t i = 0, off = 0; i < QAC_QGEN_NUM_TENSORS; off += qac_qgen_tensor_size(&q, (int)i), i++) {
            char what[48];
            snprintf(what, sizeof what, "qgen block bwd (%s)", qac_qgen_tensor_name((int)i));
            report(what, PRECS[pi], shape, gdparams + off, dparams + off, qac_qgen_tensor_size(&q, (int)i),
                   tol_for(PRECS[pi], 1e-5, 6e-2));
        }
    }
    qac_qgen_acts_free(&a);
    free(params), free(x), free(dout), free(lens), free(dx), free(dparams), free(gout), free(gdx), free(gdparams);
}

static void test_pooling_backward(int B, int T, int C) {
    float *hidden = rnd((size_t)B * T * C, -3, 3), *dout = rnd((size_t)B * C, -1, 1);
    float *want = malloc(sizeof(float) * B * T * C), *got = malloc(sizeof(float) * B * T * C);
    int *lens = random_lens(B, T);
    for (int mode = 0; mode < 4; mode++) {
        const qac_pooling pool = mode & 1 ? QAC_POOL_MEAN : QAC_POOL_CLS;
        const int norm = mode >> 1;
        qac_pooling_backward(want, dout, hidden, lens, B, T, C, pool, norm);
        gpu_test_poison(got, (size_t)B * T * C);
        CHECK_OK(qac_cuda_pooling_backward(got, dout, hidden, lens, B, T, C, pool, norm));
        char shape[64];
        snprintf(shape, sizeof shape, "B%d T%d C%d %s%s", B, T, C, pool == QAC_POOL_MEAN ? "mean" : "cls",
                 norm ? "+l2" : "");
        report("pooling bwd", QAC_PREC_FP32, shape, got, want, (size_t)B * T * C, 1e-5);
    }
    free(hidden), free(dout), free(want), free(got), free(lens);
}

static void test_infonce(int nq, int n, int C, float tau, qac_similarity sim) {
    const int np = nq * n;
    float *q = rnd((size_t)nq * C, -1, 1), *p = rnd((size_t)np * C, -1, 1);
    float *dq = malloc(sizeof(float) * nq * C), *dp = malloc(sizeof(float) * np * C);
    float *gdq = malloc(sizeof(float) * nq * C), *gdp = malloc(sizeof(float) * np * C);
    double loss, gloss;
    CHECK_OK(qac_infonce(&loss, dq, dp, q, p, nq, n, C, tau, sim));
    CHECK_OK(qac_cuda_infonce(&gloss, gdq, gdp, q, p, nq, n, C, tau, sim));
    char shape[64];
    snprintf(shape, sizeof shape, "nq%d n%d C%d tau%.2f %s", nq, n, C, (double)tau, sim == QAC_SIM_COS ? "cos" : "dot");
    const double lrel = fabs(gloss - loss) / fabs(loss);
    printf("%-24s %-5s %-30s loss %.9g vs %.9g rel %.3g (tol 1e-5)\n", "infonce", "fp32", shape, gloss, loss, lrel);
    CHECK_MSG(lrel <= 1e-5, "infonce loss %s: %g vs %g", shape, gloss, loss);
    report("infonce (dq)", QAC_PREC_FP32, shape, gdq, dq, (size_t)nq * C, 1e-5);
    report("infonce (dp)", QAC_PREC_FP32, shape, gdp, dp, (size_t)np * C, 1e-5);
    free(q), free(p), free(dq), free(dp), free(gdq), free(gdp);
}

static void test_cocondenser(int B, int C, float tau) {
    const int n2 = 2 * B;
    float *x = rnd((size_t)n2 * C, -1, 1), *dx = malloc(sizeof(float) * n2 * C), *gdx = malloc(sizeof(float) * n2 * C);
    double loss, gloss;
    CHECK_OK(qac_cocondenser_loss(&loss, dx, x, n2, C, tau));
    CHECK_OK(qac_cuda_cocondenser_loss(&gloss, gdx, x, n2, C, tau));
    char shape[64];
    snprintf(shape, sizeof shape, "n2 %d C%d tau%.2f", n2, C, (double)tau);
    const double lrel = fabs(gloss - loss) / fabs(loss);
    printf("%-24s %-5s %-30s loss %.9g vs %.9g rel %.3g (tol 1e-9)\n", "cocondenser", "fp32", shape, gloss, loss,
           lrel);
    CHECK_MSG(lrel <= 1e-9, "cocondenser loss %s: %g vs %g", shape, gloss, loss);
    report("cocondenser (dx)", QAC_PREC_FP32, shape, gdx, dx, (size_t)n2 * C, 1e-6);
    free(x), free(dx), free(gdx);
}

/* The twin of ce_task in trainer/mlm.c (static there): logits + bias in
 * float, double sums, float gradients. */
static double mlm_ce_ref(float *dl, const float *logits, const float *bias, const int32_t *labels, int M, int V) {
    double total = 0;
    for (int i = 0; i < M; i++) {
        float *row = dl + (size_t)i * V;
        for (int v = 0; v < V; v++) row[v] = logits[(size_t)i * V + v] + bias[v];
        double mx = row[0], z = 0;
        for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < V; v++) z += exp(row[v] - mx);
        const double lse = mx + log(z);
        total += lse - row[labels[i]];
        for (int v = 0; v < V; v++) row[v] = (float)(exp(row[v] - lse) / M);
        row[labels[i]] -= 1.0f / M;
    }
    return total / M;
}

static void test_mlm_ce(int M, int V) {
    float *logits = rnd((size_t)M * V, -4, 4), *bias = rnd(V, -1, 1);
    float *dl = malloc(sizeof(float) * M * V), *gdl = malloc(sizeof(float) * M * V);
    int32_t *labels = malloc(sizeof(int32_t) * M);
    for (int i = 0; i < M; i++) labels[i] = gpu_test_int(0, V - 1);
    const double loss = mlm_ce_ref(dl, logits, bias, labels, M, V);
    double gloss = 0;
    CHECK_OK(qac_cuda_mlm_ce(&gloss, gdl, logits, bias, labels, M, V));
    char shape[64];
    snprintf(shape, sizeof shape, "M%d V%d", M, V);
    const double lrel = fabs(gloss - loss) / fabs(loss);
    printf("%-24s %-5s %-30s loss %.12g vs %.12g rel %.3g (tol 1e-12)\n", "mlm ce", "fp32", shape, gloss, loss, lrel);
    CHECK_MSG(lrel <= 1e-12, "mlm ce loss %s: %g vs %g", shape, gloss, loss);
    /* the same float and double operations; exp may differ by an ulp */
    report("mlm ce (dlogits)", QAC_PREC_FP32, shape, gdl, dl, (size_t)M * V, 1e-6);
    free(logits), free(bias), free(dl), free(gdl), free(labels);
}

static void test_clip_adamw(size_t n, double max_norm) {
    const size_t n_decay = n * 7 / 10;
    float *p = rnd(n, -1, 1), *m = rnd(n, -0.01f, 0.01f), *v = rnd(n, 0, 1e-4f);
    float *gp = copy_of(p, n), *gm = copy_of(m, n), *gv = copy_of(v, n), *pb = malloc(sizeof(float) * n);
    char shape[64];
    snprintf(shape, sizeof shape, "n%zu clip %.3g", n, max_norm);
    for (long t = 1; t <= 3; t++) {
        float *g = rnd(n, -0.05f, 0.05f);
        const double lr = 1e-3 * t, wd = 0.01;
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
        const double norm = sqrt(ss);
        float *gc = copy_of(g, n);
        const double coef = max_norm / (norm + 1e-6);
        if (max_norm > 0 && coef < 1.0)
            for (size_t i = 0; i < n; i++) gc[i] *= (float)coef;
        qac_adamw_update(p, gc, m, v, n_decay, t, lr, 0.9, 0.999, 1e-8, wd);
        qac_adamw_update(p + n_decay, gc + n_decay, m + n_decay, v + n_decay, n - n_decay, t, lr, 0.9, 0.999, 1e-8,
                         0.0);
        double gnorm = 0;
        CHECK_OK(qac_cuda_clip_adamw(gp, pb, g, gm, gv, n, n_decay, t, lr, 0.9, 0.999, 1e-8, wd, max_norm, &gnorm));
        const double nrel = fabs(gnorm - norm) / norm;
        printf("%-24s %-5s %-30s step %ld norm %.9g vs %.9g rel %.3g (tol 1e-9)\n", "grad norm", "fp32", shape, t,
               gnorm, norm, nrel);
        CHECK_MSG(nrel <= 1e-9, "grad norm %s step %ld: %g vs %g", shape, t, gnorm, norm);
        report_exact("adamw (p)", shape, gp, p, n);
        report_exact("adamw (m)", shape, gm, m, n);
        report_exact("adamw (v)", shape, gv, v, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += pb[i] != bf16_round(gp[i]);
        printf("%-24s %-5s %-30s %zu bf16 copies not round-to-nearest (must be 0)\n", "adamw (bf16 copy)", "bf16",
               shape, bad);
        CHECK_MSG(bad == 0, "adamw bf16 copy %s: %zu wrong", shape, bad);
        free(g), free(gc);
    }
    free(p), free(m), free(v), free(gp), free(gm), free(gv), free(pb);
}

/* An optional argument runs one group (embeddings, layernorm, gelu, matmul,
 * dropout, attention, pooling, infonce, pretrain, adamw): the sanitizer runs use it.
 * QAC_TEST_SMALL=1 drops the largest shapes. */
static const char *only;
static int small;
static int want(const char *group) { return !only || !strcmp(only, group); }

int main(int argc, char **argv) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    only = argc > 1 ? argv[1] : NULL;
    small = getenv("QAC_TEST_SMALL") && strcmp(getenv("QAC_TEST_SMALL"), "0") != 0;
    gpu_test_seed();

    if (want("embeddings")) {
        test_embeddings_backward(3, 7, 64, 50, 2, 1);
        test_embeddings_backward(4, 97, 768, 2, 2, 0); /* ~194 rows per key: several segments per key */
        test_embeddings_backward(2, 130, 100, 1000, 3, 1);
    }
    if (want("layernorm")) {
        test_layernorm(37, 768);
        test_layernorm(130, 100);
        test_layernorm(5, 1000);
        /* the fused sublayer tail: BERT-base's width over several 64-row
         * chunks, odd widths and row counts, columns per thread from 1
         * (C 100) to 16 (C 4096), a pre-LN block's dadd */
        test_residual_ln(3, 37, 768, 0.1f, 0);
        test_residual_ln(2, 65, 100, 0.0f, 0);
        test_residual_ln(5, 7, 1000, 0.3f, 1);
        test_residual_ln(2, 9, 1536, 0.1f, 1);
        if (!small) test_residual_ln(2, 33, 4096, 0.1f, 0);
    }
    if (want("gelu")) {
        test_gelu(64, 1536);
        test_gelu(7, 37);
        test_bias_gelu(130, 1536);
        test_bias_gelu(7, 37);
    }
    if (want("matmul")) {
        test_matmul_backward(17, 384, 1152);
        test_matmul_backward(130, 100, 37);
        if (!small) test_matmul_backward(64, 3072, 768);
    }
    if (want("dropout")) {
        test_dropout(3, 17, 384, 0.1f);
        test_dropout(2, 130, 100, 0.5f);
    }
    if (want("attention")) {
        test_attention(2, 9, 64, 2, 0.0f);
        test_attention(3, 37, 96, 3, 0.1f); /* head size 32 */
        if (!small) test_attention(2, 128, 768, 12, 0.1f);
        test_attention(1, 130, 64, 1, 0.0f); /* T not a multiple of 16 or 32 */
        test_attention(4, 33, 384, 6, 0.0f);
    }
    if (want("attention")) {
        test_causal_attention(3, 11, 64, 2, 3, 0.0f); /* the released window of 3 */
        test_causal_attention(2, 33, 96, 3, 3, 0.1f);
        test_causal_attention(2, 20, 64, 2, 0, 0.1f); /* plain causal */
    }
    if (want("qgen")) {
        test_qgen_block(3, 11, 64, 2, 1, 3, 0.0f); /* the released shape: 1 block, window 3 */
        test_qgen_block(2, 33, 96, 3, 2, 3, 0.1f);
        test_qgen_block(2, 20, 64, 2, 1, 0, 0.1f); /* plain causal */
    }
    if (want("pooling")) {
        test_pooling_backward(5, 17, 384);
        test_pooling_backward(3, 128, 768);
    }
    if (want("infonce")) {
        test_infonce(4, 3, 64, 1.0f, QAC_SIM_DOT);
        test_infonce(8, 8, 768, 0.05f, QAC_SIM_COS);
        test_infonce(5, 7, 100, 1.0f, QAC_SIM_COS);
    }
    if (want("pretrain")) {
        test_cocondenser(2, 64, 1.0f);
        test_cocondenser(9, 384, 0.05f); /* odd pair count */
        test_mlm_ce(7, 200);
        test_mlm_ce(130, 1000);
        if (!small) test_mlm_ce(64, 30522); /* BERT's vocabulary */
    }
    if (want("adamw")) {
        test_clip_adamw(100003, 1e9);  /* no clipping */
        test_clip_adamw(100003, 0.01); /* clipping active */
    }
    return qac_test_summary();
}
