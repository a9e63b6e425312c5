/* Every CUDA encoder kernel against its CPU twin (model/bert_cpu.h) at
 * several shapes, in fp32, fp16 and bf16, on fresh random inputs; the
 * one-warp-a-row LayerNorms and the fused last LayerNorm + pooling also
 * against the kernels they replace, and the row-blocked bias + GELU bit for
 * bit against the one it replaces. */
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "gpu_testutil.h"
#include "qac_cuda_kernels.h"
#include "testutil.h"

static const qac_precision PRECS[3] = {QAC_PREC_FP32, QAC_PREC_FP16, QAC_PREC_BF16};

/* Relative-error bounds: fp32 arithmetic, then fp16 / bf16 rounding of the
 * activations (2^-11 and 2^-8 relative per element, a few roundings deep). */
static double tol_for(qac_precision p, double fp32, double fp16, double bf16) {
    return p == QAC_PREC_FP32 ? fp32 : p == QAC_PREC_FP16 ? fp16 : bf16;
}

static void report(const char *what, qac_precision p, const char *shape, const float *got, const float *want,
                   size_t n, double tol) {
    double mx;
    const double rel = gpu_test_rel_err(got, want, n, &mx);
    printf("%-22s %-5s %-24s rel %.3g max|d| %.3g (tol %.1g)\n", what, gpu_test_prec_name(p), shape, rel, mx, tol);
    CHECK_MSG(rel <= tol, "%s %s %s: relative error %g > %g", what, gpu_test_prec_name(p), shape, rel, tol);
}

/* LayerNorm variants: 0 the one-block-a-row kernel, else rows per block of
 * the one-warp-a-row kernel (which needs C a multiple of 4 up to 1024). */
static const int LN_WARPS[4] = {0, 1, 4, 16};
static int ln_warps_fit(int warps, int C) { return warps == 0 || (C % 4 == 0 && C <= 1024); }

static void test_embeddings(int B, int T, int C) {
    const int V = 97, P = T + 3, N = B * T;
    const float eps = 1e-12f;
    float *word = malloc(sizeof(float) * V * C), *pos = malloc(sizeof(float) * P * C);
    float *type = malloc(sizeof(float) * 2 * C), *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
    int32_t *ids = malloc(sizeof(int32_t) * N);
    float *want = malloc(sizeof(float) * N * C), *got = malloc(sizeof(float) * N * C);
    float *got_act = malloc(sizeof(float) * N * C), *old = malloc(sizeof(float) * N * C);
    gpu_test_fill(word, (size_t)V * C, -1, 1);
    gpu_test_fill(pos, (size_t)P * C, -0.5f, 0.5f);
    gpu_test_fill(type, (size_t)2 * C, -0.2f, 0.2f);
    gpu_test_fill(w, C, 0.5f, 1.5f);
    gpu_test_fill(b, C, -0.3f, 0.3f);
    for (int i = 0; i < N; i++) ids[i] = gpu_test_int(0, V - 1);
    qac_embeddings_forward(want, ids, NULL, word, pos, type, B, T, C, NULL);
    qac_layernorm_forward(want, NULL, NULL, want, w, b, N, C, eps, NULL);
    for (int vi = 0; vi < 4; vi++) {
        const int warps = LN_WARPS[vi];
        if (!ln_warps_fit(warps, C)) continue;
        char shape[64];
        snprintf(shape, sizeof shape, "B%d T%d C%d w%d", B, T, C, warps);
        for (int pi = 0; pi < 3; pi++) {
            gpu_test_poison(got, (size_t)N * C);
            gpu_test_poison(got_act, (size_t)N * C);
            CHECK_OK(qac_cuda_embeddings_layernorm(got, got_act, ids, word, pos, type, w, b, B, T, C, V, P, eps,
                                                   PRECS[pi], warps));
            report("embeddings+layernorm", PRECS[pi], shape, got, want, (size_t)N * C, 1e-5);
            report("  (activation copy)", PRECS[pi], shape, got_act, want, (size_t)N * C,
                   tol_for(PRECS[pi], 1e-5, 1e-3, 8e-3));
            if (warps == 0) continue;
            /* against the kernel it replaces: both within 1e-5 of the twin */
            CHECK_OK(qac_cuda_embeddings_layernorm(old, NULL, ids, word, pos, type, w, b, B, T, C, V, P, eps,
                                                   PRECS[pi], 0));
            report("  (vs one block a row)", PRECS[pi], shape, got, old, (size_t)N * C, 2e-5);
        }
    }
    free(word), free(pos), free(type), free(w), free(b), free(ids), free(want), free(got), free(got_act), free(old);
}

static void test_residual_ln(int N, int C) {
    const float eps = 1e-12f;
    float *x = malloc(sizeof(float) * N * C), *r = malloc(sizeof(float) * N * C), *rb = malloc(sizeof(float) * N * C);
    float *bias = malloc(sizeof(float) * C), *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
    float *want = malloc(sizeof(float) * N * C), *got = malloc(sizeof(float) * N * C);
    float *got_act = malloc(sizeof(float) * N * C), *old = malloc(sizeof(float) * N * C);
    gpu_test_fill(x, (size_t)N * C, -2, 2);
    gpu_test_fill(r, (size_t)N * C, -2, 2);
    gpu_test_fill(bias, C, -0.5f, 0.5f);
    gpu_test_fill(w, C, 0.5f, 1.5f);
    gpu_test_fill(b, C, -0.3f, 0.3f);
    /* Twin: the residual sum, then qac_layernorm_forward. */
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            const size_t j = (size_t)i * C + c;
            rb[j] = x[j] + (r[j] + bias[c]);
        }
    qac_layernorm_forward(want, NULL, NULL, rb, w, b, N, C, eps, NULL);
    for (int vi = 0; vi < 4; vi++) {
        const int warps = LN_WARPS[vi];
        if (!ln_warps_fit(warps, C)) continue;
        char shape[64];
        snprintf(shape, sizeof shape, "N%d C%d w%d", N, C, warps);
        for (int pi = 0; pi < 3; pi++) {
            gpu_test_poison(got, (size_t)N * C);
            gpu_test_poison(got_act, (size_t)N * C);
            CHECK_OK(qac_cuda_residual_layernorm(got, got_act, x, r, bias, w, b, N, C, eps, PRECS[pi], warps));
            /* r is rounded to the precision on upload: its rounding, not the sums, sets the bound */
            report("residual+layernorm", PRECS[pi], shape, got, want, (size_t)N * C,
                   tol_for(PRECS[pi], 1e-5, 1e-3, 6e-3));
            report("  (activation copy)", PRECS[pi], shape, got_act, want, (size_t)N * C,
                   tol_for(PRECS[pi], 1e-5, 1.5e-3, 1e-2));
            if (warps == 0) continue;
            /* the same rounded inputs on both: only the fp32 sums' order differs */
            CHECK_OK(qac_cuda_residual_layernorm(old, NULL, x, r, bias, w, b, N, C, eps, PRECS[pi], 0));
            report("  (vs one block a row)", PRECS[pi], shape, got, old, (size_t)N * C, 2e-5);
        }
    }
    free(x), free(r), free(rb), free(bias), free(w), free(b), free(want), free(got), free(got_act), free(old);
}

/* The last LayerNorm fused with the pooling and the normalisation, over
 * ragged sequences (packed, and padded to T), some with prompt rows
 * skipped (some with none left), against LayerNorm + pooling on the CPU
 * and on the GPU's separate kernels (padded only: theirs). */
static void test_ln_pool(int B, int T, int C) {
    const float eps = 1e-12f;
    const size_t NP = (size_t)B * T;
    float *x = malloc(sizeof(float) * NP * C), *r = malloc(sizeof(float) * NP * C);
    float *pre = malloc(sizeof(float) * NP * C), *ln = malloc(sizeof(float) * NP * C);
    float *xp = malloc(sizeof(float) * NP * C), *rp = malloc(sizeof(float) * NP * C);
    float *bias = malloc(sizeof(float) * C), *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C);
    float *want = malloc(sizeof(float) * B * C), *got = malloc(sizeof(float) * B * C);
    float *old = malloc(sizeof(float) * B * C);
    int *lens = malloc(sizeof(int) * B), *from = malloc(sizeof(int) * B), *offs = malloc(sizeof(int) * (B + 1));
    gpu_test_fill(x, NP * C, -2, 2);
    gpu_test_fill(r, NP * C, -2, 2);
    gpu_test_fill(bias, C, -0.5f, 0.5f);
    gpu_test_fill(w, C, 0.5f, 1.5f);
    gpu_test_fill(b, C, -0.3f, 0.3f);
    for (int i = 0; i < B; i++) {
        lens[i] = i == 0 ? T : gpu_test_int(1, T);
        from[i] = i % 3 == 2 ? lens[i] + 1 : gpu_test_int(0, lens[i] - 1);
    }
    offs[0] = 0;
    for (int i = 0; i < B; i++) { /* the packed copy: sequence i's real rows back to back */
        offs[i + 1] = offs[i] + lens[i];
        memcpy(xp + (size_t)offs[i] * C, x + (size_t)i * T * C, sizeof(float) * lens[i] * C);
        memcpy(rp + (size_t)offs[i] * C, r + (size_t)i * T * C, sizeof(float) * lens[i] * C);
    }
    for (size_t j = 0; j < NP; j++)
        for (int c = 0; c < C; c++) pre[j * C + c] = x[j * C + c] + (r[j * C + c] + bias[c]);
    qac_layernorm_forward(ln, NULL, NULL, pre, w, b, (int)NP, C, eps, NULL);
    for (int mode = 0; mode < 16; mode++) {
        const qac_pooling pool = mode & 1 ? QAC_POOL_MEAN : QAC_POOL_CLS;
        const int norm = (mode >> 1) & 1, packed = (mode >> 3) & 1;
        const int *f = (mode >> 2) & 1 ? from : NULL;
        qac_pooling_forward_from(want, ln, lens, f, B, T, C, pool, norm);
        char shape[80];
        snprintf(shape, sizeof shape, "B%d T%d C%d %s%s%s%s", B, T, C, pool == QAC_POOL_MEAN ? "mean" : "cls",
                 norm ? "+l2" : "", f ? " from" : "", packed ? " packed" : "");
        for (int pi = 0; pi < 3; pi++) {
            gpu_test_poison(got, (size_t)B * C);
            CHECK_OK(qac_cuda_ln_pool(got, packed ? xp : x, packed ? rp : r, bias, w, b, packed ? offs : NULL, lens,
                                      f, B, T, packed ? offs[B] : (int)NP, C, eps, pool, norm, PRECS[pi], 4));
            /* residual + LayerNorm's bounds: the mean and the norm add fp32 sums only */
            report("layernorm+pool", PRECS[pi], shape, got, want, (size_t)B * C,
                   tol_for(PRECS[pi], 1e-5, 1e-3, 6e-3));
            if (packed) continue;
            /* the separate kernels on the same rounded inputs */
            CHECK_OK(qac_cuda_residual_layernorm(pre, NULL, x, r, bias, w, b, (int)NP, C, eps, PRECS[pi], 0));
            CHECK_OK(qac_cuda_pooling(old, pre, lens, f, B, T, C, pool, norm));
            report("  (vs LN, then pool)", PRECS[pi], shape, got, old, (size_t)B * C, 2e-5);
        }
    }
    /* an empty sequence (a bucket's padding) gives zeros, its neighbours unchanged */
    lens[B - 1] = 0;
    offs[B] = offs[B - 1];
    CHECK_OK(qac_cuda_ln_pool(got, xp, rp, bias, w, b, offs, lens, NULL, B, T, offs[B] > 0 ? offs[B] : 1, C, eps,
                              QAC_POOL_MEAN, 1, QAC_PREC_BF16, 4));
    int zeros = 1;
    for (int c = 0; c < C; c++) zeros &= got[(size_t)(B - 1) * C + c] == 0.0f;
    CHECK_MSG(zeros, "layernorm+pool: an empty sequence must pool to zeros");
    free(x), free(r), free(pre), free(ln), free(xp), free(rp), free(bias), free(w), free(b);
    free(want), free(got), free(old), free(lens), free(from), free(offs);
}

static void test_bias_gelu(int N, int I) {
    static const int ROWS[4] = {0, 1, 4, 64};
    const size_t n = (size_t)N * I;
    float *inp = malloc(sizeof(float) * n), *pre = malloc(sizeof(float) * n), *bias = malloc(sizeof(float) * I);
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n), *old = malloc(sizeof(float) * n);
    gpu_test_fill(inp, n, -4, 4);
    gpu_test_fill(bias, I, -1, 1);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < I; c++) pre[(size_t)i * I + c] = inp[(size_t)i * I + c] + bias[c];
    qac_gelu_forward(want, pre, n, NULL);
    for (int ri = 0; ri < 4; ri++) {
        char shape[64];
        snprintf(shape, sizeof shape, "N%d I%d rows%d", N, I, ROWS[ri]);
        for (int pi = 0; pi < 3; pi++) {
            gpu_test_poison(got, n);
            CHECK_OK(qac_cuda_bias_gelu(got, inp, bias, N, I, PRECS[pi], ROWS[ri]));
            report("bias+gelu", PRECS[pi], shape, got, want, n, tol_for(PRECS[pi], 1e-6, 2e-3, 1.2e-2));
            if (!ROWS[ri]) continue;
            /* each element's arithmetic is the one-thread-per-16-bytes kernel's: the same bits */
            CHECK_OK(qac_cuda_bias_gelu(old, inp, bias, N, I, PRECS[pi], 0));
            CHECK_MSG(!memcmp(got, old, sizeof(float) * n), "bias+gelu %s %s: bits differ from the kernel it replaces",
                      gpu_test_prec_name(PRECS[pi]), shape);
        }
    }
    free(inp), free(pre), free(bias), free(want), free(got), free(old);
}

static void test_attention(int B, int T, int C, int NH) {
    const size_t N = (size_t)B * T;
    float *qkv = malloc(sizeof(float) * N * 3 * C), *qkvb = malloc(sizeof(float) * N * 3 * C);
    float *bias = malloc(sizeof(float) * 3 * C);
    float *want = malloc(sizeof(float) * N * C), *got = malloc(sizeof(float) * N * C);
    int *lens = malloc(sizeof(int) * B);
    gpu_test_fill(qkv, N * 3 * C, -1, 1);
    gpu_test_fill(bias, (size_t)3 * C, -0.5f, 0.5f);
    for (size_t i = 0; i < N; i++)
        for (int c = 0; c < 3 * C; c++) qkvb[i * 3 * C + c] = qkv[i * 3 * C + c] + bias[c];
    for (int b = 0; b < B; b++) lens[b] = gpu_test_int(1, T);
    lens[0] = T;
    CHECK_OK(qac_attention_forward(want, NULL, NULL, qkvb, lens, B, T, C, NH, NULL));
    char shape[64];
    snprintf(shape, sizeof shape, "B%d T%d C%d H%d", B, T, C, NH);
    for (int pi = 0; pi < 3; pi++) {
        gpu_test_poison(got, N * C);
        CHECK_OK(qac_cuda_attention(got, qkv, bias, lens, B, T, C, NH, PRECS[pi]));
        report("attention", PRECS[pi], shape, got, want, N * C, tol_for(PRECS[pi], 1e-5, 4e-3, 2.5e-2));
    }
    free(qkv), free(qkvb), free(bias), free(want), free(got), free(lens);
}

static void test_pooling(int B, int T, int C) {
    float *hidden = malloc(sizeof(float) * B * T * C);
    float *want = malloc(sizeof(float) * B * C), *got = malloc(sizeof(float) * B * C);
    int *lens = malloc(sizeof(int) * B), *from = malloc(sizeof(int) * B);
    gpu_test_fill(hidden, (size_t)B * T * C, -3, 3);
    for (int b = 0; b < B; b++) lens[b] = gpu_test_int(1, T);
    /* prompt tokens skipped by the pooling: some past the end (nothing left) */
    for (int b = 0; b < B; b++) from[b] = b % 3 == 2 ? lens[b] + 1 : gpu_test_int(0, lens[b] - 1);
    for (int mode = 0; mode < 8; mode++) {
        const qac_pooling pool = mode & 1 ? QAC_POOL_MEAN : QAC_POOL_CLS;
        const int norm = (mode >> 1) & 1;
        const int *f = mode >> 2 ? from : NULL;
        qac_pooling_forward_from(want, hidden, lens, f, B, T, C, pool, norm);
        gpu_test_poison(got, (size_t)B * C);
        CHECK_OK(qac_cuda_pooling(got, hidden, lens, f, B, T, C, pool, norm));
        char shape[64];
        snprintf(shape, sizeof shape, "B%d T%d C%d %s%s%s", B, T, C, pool == QAC_POOL_MEAN ? "mean" : "cls",
                 norm ? "+l2" : "", f ? " from" : "");
        report("pooling", QAC_PREC_FP32, shape, got, want, (size_t)B * C, 1e-6);
    }
    free(hidden), free(want), free(got), free(lens), free(from);
}

static void test_matmul(int N, int IC, int OC) {
    float *inp = malloc(sizeof(float) * N * IC), *w = malloc(sizeof(float) * OC * IC);
    float *want = malloc(sizeof(float) * N * OC), *got = malloc(sizeof(float) * N * OC);
    float *act = malloc(sizeof(float) * N * OC), *zero = calloc((size_t)OC, sizeof(float));
    gpu_test_fill(inp, (size_t)N * IC, -1, 1);
    gpu_test_fill(w, (size_t)OC * IC, -0.1f, 0.1f);
    /* Twin: the pre-activation of the fused FFN product with a zero bias. */
    CHECK_OK(qac_matmul_gelu_forward(act, want, inp, w, zero, N, IC, OC, NULL));
    char shape[64];
    snprintf(shape, sizeof shape, "N%d IC%d OC%d", N, IC, OC);
    for (int pi = 0; pi < 3; pi++) {
        gpu_test_poison(got, (size_t)N * OC);
        CHECK_OK(qac_cuda_matmul(got, inp, w, N, IC, OC, PRECS[pi]));
        report("matmul", PRECS[pi], shape, got, want, (size_t)N * OC, tol_for(PRECS[pi], 1e-5, 3e-3, 1.5e-2));
    }
    free(inp), free(w), free(want), free(got), free(act), free(zero);
}

int main(void) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    gpu_test_seed();

    test_embeddings(2, 7, 384);
    test_embeddings(3, 33, 768);
    test_embeddings(1, 128, 100);
    test_embeddings(2, 5, 1000);

    test_residual_ln(64, 384);
    test_residual_ln(37, 768);
    test_residual_ln(5, 1000);

    test_residual_ln(3, 1024);

    test_ln_pool(6, 33, 384);
    test_ln_pool(3, 128, 768);
    test_ln_pool(4, 9, 100); /* C not a multiple of 128: lanes past the row */

    test_bias_gelu(64, 1536);
    test_bias_gelu(33, 3072);
    test_bias_gelu(7, 37); /* no 16-byte vectors */
    test_bias_gelu(5, 24); /* rows past the last thread's chunk */

    test_attention(2, 9, 384, 12);   /* head size 32, tensor cores */
    test_attention(3, 128, 768, 12); /* head size 64 */
    test_attention(2, 200, 768, 12); /* 32-row query tiles */
    test_attention(1, 512, 768, 12); /* 16-row query tiles, the longest */
    test_attention(4, 61, 256, 4);
    test_attention(2, 40, 384, 4);   /* head size 96: the SIMT kernel */
    test_attention(1, 600, 256, 2);  /* past 512 tokens: the SIMT kernel */

    test_pooling(5, 17, 384);
    test_pooling(3, 128, 768);

    test_matmul(17, 384, 1152);
    test_matmul(64, 768, 3072);
    test_matmul(5, 3072, 768);
    return qac_test_summary();
}
