/* The fused (FlashAttention-2) CUDA attention against its CPU twin
 * (model/attention_flash.c, itself held to model/layers.c's attention by
 * test_attention_flash) and against the unfused CUDA kernels it replaces:
 * forward output and log-sum-exp, backward dQ, dK, dV; bf16 and fp16; head
 * sizes 32 and 64; lengths 1, 7, 128, 200, 512 in ragged batches, padded
 * and packed; the query decoder's causal windowed mask; attention dropout
 * (the CPU's masks); every compiled tile variant; bit-identical re-runs
 * (--recompute relies on it) and packed = padded bits on the real rows;
 * batches of more than 65,535 sequences (gridDim.z's limit: the launches
 * go in chunks). QAC_TEST_SMALL=1 (for compute-sanitizer) keeps the
 * shapes of at most 128 tokens and one case per tile variant.
 *
 * Bounds (tests/encoder/attention_bound.h, per element, worst case): the
 * twin runs with the kernels' roundings (round = the precision: Q, K, V on
 * load, probabilities, dS and outputs; the backward from the GPU forward's
 * own output and lse), so the two sides differ by fp32 summation order
 * (2^-24 on the CPU, 2^-22 on the tensor cores, whose sums may truncate)
 * and by roundings that may fall on either side of a tie: the two sides'
 * unit roundoffs added, 2 x 2^-8 in bf16 and 2 x 2^-11 in fp16 (plus
 * 2 x 2^-25 absolute below fp16's normal range). The unfused training
 * kernels round the probabilities once more before dS and dropout: three
 * roundings against the twin's one. A fused-vs-unfused difference is
 * bounded by the sum of both sides' bounds against the twin. */
#include <stdlib.h>
#include <string.h>

#include "../encoder/attention_bound.h"
#include "bert_cpu.h"
#include "gpu_testutil.h"
#include "qac_cuda_attention.h"
#include "qac_cuda_kernels.h"
#include "qac_bf16.h"
#include "qac_cuda_train_kernels.h"
#include "qac_pool.h"
#include "testutil.h"

#define U32 0x1p-24
#define U22 0x1p-22

static qac_pool *pool;
static int small; /* QAC_TEST_SMALL */

static float round_to(float x, qac_precision p) {
    if (p == QAC_PREC_FP16) return (float)(_Float16)x;
    if (p == QAC_PREC_BF16) {
        uint32_t u = (uint32_t)qac_bf16_from_float(x) << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return x;
}

static double unit_of(qac_precision p) { return p == QAC_PREC_FP16 ? 0x1p-11 : p == QAC_PREC_BF16 ? 0x1p-8 : 0; }
static double abs_of(qac_precision p) { return p == QAC_PREC_FP16 ? 0x1p-25 : 0; }

static void check(const char *what, const char *shape, const float *got, const float *want, const float *bound,
                  size_t n) {
    double mx, w = att_worst(got, want, bound, n, &mx);
    printf("%-30s %-52s max|d| %.3g, worst d/bound %.3g\n", what, shape, mx, w);
    CHECK_MSG(w <= 1.0, "%s %s: difference %.3g times its bound", what, shape, w);
}

static void check_same(const char *what, const char *shape, const float *a, const float *b, size_t n) {
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += !(a[i] == b[i]); /* a NaN differs */
    printf("%-30s %-52s %zu of %zu differ\n", what, shape, diff, n);
    CHECK_MSG(diff == 0, "%s %s: %zu elements differ", what, shape, diff);
}

typedef struct gcase {
    int B, T, C, NH, causal, window, packed;
    const int *lens;
    float p;
    qac_precision prec;
    const qac_fa_tiles *tiles;
} gcase;

static void run(const gcase *g) {
    const int B = g->B, T = g->T, C = g->C, NH = g->NH, layer = 2;
    const uint64_t key = 0xA77E4710ull + (uint64_t)T;
    const qac_precision pr = g->prec;
    int *offs = NULL;
    if (g->packed) {
        offs = malloc(sizeof(int) * (B + 1));
        offs[0] = 0;
        for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + g->lens[b];
    }
    const size_t N = offs ? (size_t)offs[B] : (size_t)B * T, n3 = N * 3 * C, nc = N * C;
    const int *lens = g->packed ? NULL : g->lens;
    float *qkv = malloc(sizeof(float) * n3), *bias = malloc(sizeof(float) * 3 * C), *qb = malloc(sizeof(float) * n3);
    float *dout = malloc(sizeof(float) * nc), *out = malloc(sizeof(float) * nc), *lse = malloc(sizeof(float) * N * NH);
    float *out2 = malloc(sizeof(float) * nc), *lse2 = malloc(sizeof(float) * N * NH);
    float *dq = malloc(sizeof(float) * n3), *dq2 = malloc(sizeof(float) * n3);
    float *tout = malloc(sizeof(float) * nc), *tlse = malloc(sizeof(float) * N * NH), *tdq = malloc(sizeof(float) * n3);
    float *bO = malloc(sizeof(float) * nc), *bL = malloc(sizeof(float) * N * NH), *bd = malloc(sizeof(float) * n3);
    gpu_test_fill(qkv, n3, -1, 1);
    gpu_test_fill(bias, (size_t)3 * C, -0.5f, 0.5f);
    gpu_test_fill(dout, nc, -1, 1);
    for (size_t r = 0; r < N; r++)
        for (int c = 0; c < 3 * C; c++) {
            if (c < C) qkv[r * 3 * C + c] *= 2.0f; /* a sharper softmax than uniform */
            qkv[r * 3 * C + c] = round_to(qkv[r * 3 * C + c], pr);
            qb[r * 3 * C + c] = round_to(qkv[r * 3 * C + c] + bias[c], pr);
        }
    for (size_t i = 0; i < nc; i++) dout[i] = round_to(dout[i], pr);
    qac_dropout drop = {0.0f, g->p, key, NULL}, *dp = g->p > 0 ? &drop : NULL;
    att_shape s = {B, T, C, NH, g->causal, g->window, offs, lens, dp, layer, (T + 15) / 16 + 1};
    char shape[160];
    const qac_fa_tiles t = g->tiles ? *g->tiles : qac_fa_tiles_default();
    snprintf(shape, sizeof shape, "%s B%d T%d hs%d%s%s%s p%.1f %dx%dx%dx%d/%dx%dx%dx%d/%dx%dx%dx%d",
             gpu_test_prec_name(pr), B, T, C / NH, g->packed ? " packed" : "", g->causal ? " causal" : "",
             g->causal && g->window ? "+win" : "", g->p, t.bq, t.bk, t.stages, qac_fa_minb(t.minb), t.kv_bk, t.kv_bq,
             t.kv_stages, qac_fa_minb(t.kv_minb), t.dq_bq, t.dq_bk, t.dq_stages, qac_fa_minb(t.dq_minb));
    const double us = U32 + U22, ue = 2 * unit_of(pr), ae = 2 * abs_of(pr); /* both sides round */
    const double ue_old = 3 * unit_of(pr), ae_old = 3 * abs_of(pr);

    /* fused forward and backward, twice: the same bits */
    CHECK_OK(qac_cuda_fa_forward(out, lse, qkv, bias, offs, lens, B, T, C, NH, g->causal, g->window, g->p, key, layer,
                                 pr, g->tiles));
    CHECK_OK(qac_cuda_fa_backward(dq, dout, out, lse, qkv, bias, offs, lens, B, T, C, NH, g->causal, g->window, g->p,
                                  key, layer, pr, g->tiles));
    CHECK_OK(qac_cuda_fa_forward(out2, lse2, qkv, bias, offs, lens, B, T, C, NH, g->causal, g->window, g->p, key,
                                 layer, pr, g->tiles));
    CHECK_OK(qac_cuda_fa_backward(dq2, dout, out2, lse2, qkv, bias, offs, lens, B, T, C, NH, g->causal, g->window,
                                  g->p, key, layer, pr, g->tiles));
    check_same("re-run: forward", shape, out, out2, nc);
    check_same("re-run: backward", shape, dq, dq2, n3);

    /* against the twin on the same inputs */
    CHECK_OK(qac_flash_attention_forward(tout, tlse, qkv, bias, offs, lens, B, T, C, NH, g->causal, g->window, dp,
                                         layer, t.bk, pr, pool));
    CHECK_OK(qac_flash_attention_backward(tdq, dout, out, lse, qkv, bias, offs, lens, B, T, C, NH, g->causal, g->window,
                                          dp, layer, t.kv_bq, t.dq_bk, pr, pool));
    att_bound_forward(bO, bL, &s, qb, tout, tlse, us, ue, ae);
    check("fused fwd out vs twin", shape, out, tout, bO, nc);
    check("fused fwd lse vs twin", shape, lse, tlse, bL, N * NH);
    att_bound_backward(bd, &s, qb, dout, out, NULL, us, ue, ae);
    check("fused bwd dqkv vs twin", shape, dq, tdq, bd, n3);

    /* against the unfused kernels (padded layout only) */
    if (!g->packed && !g->causal && g->p == 0) { /* the encoder's */
        float *oo = malloc(sizeof(float) * nc), *bo2 = malloc(sizeof(float) * nc);
        CHECK_OK(qac_cuda_attention(oo, qkv, bias, lens, B, T, C, NH, pr));
        att_bound_forward(bo2, NULL, &s, qb, tout, tlse, us, ue, ae);
        check("unfused encoder vs twin", shape, oo, tout, bo2, nc);
        for (size_t i = 0; i < nc; i++) bo2[i] += bO[i];
        check("fused vs unfused encoder", shape, out, oo, bo2, nc);
        free(oo), free(bo2);
    }
    if (!g->packed && pr == QAC_PREC_BF16) { /* the trainer's, bias already added */
        float *oo = malloc(sizeof(float) * nc), *bo2 = malloc(sizeof(float) * nc);
        float *dd = malloc(sizeof(float) * n3), *bd2 = malloc(sizeof(float) * n3);
        if (g->causal) {
            CHECK_OK(qac_cuda_attention_causal_train(oo, NULL, qb, lens, g->window, g->p, key, layer, B, T, C, NH, pr));
            CHECK_OK(qac_cuda_attention_causal_backward(dd, dout, qb, lens, g->window, g->p, key, layer, B, T, C, NH,
                                                        pr));
        } else {
            CHECK_OK(qac_cuda_attention_train(oo, NULL, qb, lens, g->p, key, layer, B, T, C, NH, pr));
            CHECK_OK(qac_cuda_attention_backward(dd, dout, qb, lens, g->p, key, layer, B, T, C, NH, pr));
        }
        att_bound_forward(bo2, NULL, &s, qb, tout, tlse, us, ue_old, ae_old);
        check("unfused training fwd vs twin", shape, oo, tout, bo2, nc);
        for (size_t i = 0; i < nc; i++) bo2[i] += bO[i];
        check("fused vs unfused training fwd", shape, out, oo, bo2, nc);
        /* the twin's backward read the fused output (errO: its bound); the
         * unfused one rounds P before dS as well as dS itself */
        att_bound_backward(bd2, &s, qb, dout, out, bO, us, ue_old, ae_old);
        check("unfused training bwd vs twin", shape, dd, tdq, bd2, n3);
        for (size_t i = 0; i < n3; i++) bd2[i] += bd[i];
        check("fused vs unfused training bwd", shape, dq, dd, bd2, n3);
        free(oo), free(bo2), free(dd), free(bd2);
    }
    free(offs), free(qkv), free(bias), free(qb), free(dout), free(out), free(lse), free(out2), free(lse2), free(dq);
    free(dq2), free(tout), free(tlse), free(tdq), free(bO), free(bL), free(bd);
}

/* packed rows give the padded layout's bits on every real row (the padded
 * rows' output gradients zero: they add exact zeros) */
static void packed_equals_padded(int B, int T, int C, int NH, const int *lens, float p, qac_precision pr) {
    int *offs = malloc(sizeof(int) * (B + 1));
    offs[0] = 0;
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lens[b];
    const size_t N = (size_t)B * T, M = (size_t)offs[B];
    float *qkv = malloc(sizeof(float) * N * 3 * C), *bias = malloc(sizeof(float) * 3 * C);
    float *dout = calloc(N * C, sizeof(float)), *pq = malloc(sizeof(float) * M * 3 * C), *pdo = malloc(sizeof(float) * M * C);
    float *out = malloc(sizeof(float) * N * C), *lse = malloc(sizeof(float) * N * NH), *dq = malloc(sizeof(float) * N * 3 * C);
    float *pout = malloc(sizeof(float) * M * C), *plse = malloc(sizeof(float) * M * NH), *pdq = malloc(sizeof(float) * M * 3 * C);
    float *a = malloc(sizeof(float) * M * 3 * C), *bb = malloc(sizeof(float) * M * 3 * C);
    gpu_test_fill(qkv, N * 3 * C, -1.5f, 1.5f);
    gpu_test_fill(bias, (size_t)3 * C, -0.5f, 0.5f);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < lens[b]; t++) {
            gpu_test_fill(dout + ((size_t)b * T + t) * C, (size_t)C, -1, 1);
            memcpy(pq + ((size_t)offs[b] + t) * 3 * C, qkv + ((size_t)b * T + t) * 3 * C, sizeof(float) * 3 * C);
            memcpy(pdo + ((size_t)offs[b] + t) * C, dout + ((size_t)b * T + t) * C, sizeof(float) * C);
        }
    CHECK_OK(qac_cuda_fa_forward(out, lse, qkv, bias, NULL, lens, B, T, C, NH, 0, 0, p, 9, 1, pr, NULL));
    CHECK_OK(qac_cuda_fa_backward(dq, dout, out, lse, qkv, bias, NULL, lens, B, T, C, NH, 0, 0, p, 9, 1, pr, NULL));
    CHECK_OK(qac_cuda_fa_forward(pout, plse, pq, bias, offs, NULL, B, T, C, NH, 0, 0, p, 9, 1, pr, NULL));
    CHECK_OK(qac_cuda_fa_backward(pdq, pdo, pout, plse, pq, bias, offs, NULL, B, T, C, NH, 0, 0, p, 9, 1, pr, NULL));
    size_t k = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < lens[b]; t++, k++) {
            const size_t r = (size_t)b * T + t;
            memcpy(a + k * 3 * C, out + r * C, sizeof(float) * C);
            memcpy(bb + k * 3 * C, pout + k * C, sizeof(float) * C);
            memcpy(a + k * 3 * C + C, dq + r * 3 * C, sizeof(float) * 2 * C);
            memcpy(bb + k * 3 * C + C, pdq + k * 3 * C, sizeof(float) * 2 * C);
        }
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%d T%d hs%d p%.1f (out, dQ, dK)", gpu_test_prec_name(pr), B, T, C / NH, p);
    check_same("packed = padded", shape, a, bb, M * 3 * C);
    k = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < lens[b]; t++, k++) /* dV, and the lse */
            for (int c = 0; c < C; c++) {
                a[k * C + c] = dq[((size_t)b * T + t) * 3 * C + 2 * C + c];
                bb[k * C + c] = pdq[k * 3 * C + 2 * C + c];
            }
    check_same("packed = padded (dV)", shape, a, bb, M * C);
    free(offs), free(qkv), free(bias), free(dout), free(pq), free(pdo), free(out), free(lse), free(dq), free(pout);
    free(plse), free(pdq), free(a), free(bb);
}

/* More sequences than gridDim.z takes (65,535): lengths 1 to 3 and a
 * longer one last, packed and padded, dropout on (the sequence ids past
 * 65,535 draw their own masks). */
static void big_batch(int packed) {
    const int B = 65535 + 4, T = packed ? 9 : 3, NH = 2, C = 64;
    int *lens = malloc(sizeof(int) * B);
    for (int b = 0; b < B; b++) lens[b] = 1 + b % 3;
    lens[B - 1] = T;
    gcase g = {B, T, C, NH, 0, 0, packed, lens, 0.1f, QAC_PREC_BF16, NULL};
    run(&g);
    free(lens);
}

int main(void) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    small = getenv("QAC_TEST_SMALL") && strcmp(getenv("QAC_TEST_SMALL"), "0") != 0;
    gpu_test_seed();
    if (qac_pool_create(&pool, 0)) return 1;
    const qac_precision precs[2] = {QAC_PREC_BF16, QAC_PREC_FP16};
    int l1[1] = {1}, l7[3] = {7, 3, 1}, l128[3] = {128, 77, 1}, l512[2] = {512, 301}, l33[4] = {33, 32, 16, 1};
    int l200[3] = {200, 131, 5};
    for (int pi = 0; pi < 2; pi++)
        for (int hs = 32; hs <= 64; hs += 32) {
            const qac_precision pr = precs[pi];
            const int NH = hs == 32 ? 3 : 2, C = hs * NH;
            gcase cases[] = {
                {1, 1, C, NH, 0, 0, 0, l1, 0.0f, pr, NULL},     {3, 7, C, NH, 0, 0, 0, l7, 0.0f, pr, NULL},
                {3, 7, C, NH, 0, 0, 1, l7, 0.1f, pr, NULL},     {3, 128, C, NH, 0, 0, 0, l128, 0.0f, pr, NULL},
                {3, 128, C, NH, 0, 0, 0, l128, 0.1f, pr, NULL}, {3, 128, C, NH, 0, 0, 1, l128, 0.1f, pr, NULL},
                {2, 512, C, NH, 0, 0, 0, l512, 0.1f, pr, NULL}, {2, 512, C, NH, 0, 0, 1, l512, 0.0f, pr, NULL},
                {4, 33, C, NH, 1, 3, 0, l33, 0.1f, pr, NULL},   {3, 128, C, NH, 1, 0, 0, l128, 0.0f, pr, NULL},
                {3, 200, C, NH, 1, 3, 1, l200, 0.1f, pr, NULL},
            };
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                if (!small || cases[i].T <= 128) run(&cases[i]);
        }
    /* every compiled tile variant of each kernel */
    int fv[32][4], kv[32][4], qv[32][4];
    const int nf = qac_fa_variants('f', fv, 32), nk = qac_fa_variants('k', kv, 32), nqv = qac_fa_variants('q', qv, 32);
    const int nmax = nf > nk ? (nf > nqv ? nf : nqv) : (nk > nqv ? nk : nqv);
    for (int i = 0; i < nmax; i++) {
        const int *f = fv[i % nf], *k = kv[i % nk], *q = qv[i % nqv];
        qac_fa_tiles t = {f[0], f[1], f[2], k[0], k[1], k[2], q[0], q[1], q[2], f[3], k[3], q[3]};
        gcase a = {3, 200, 128, 2, 0, 0, 0, l200, 0.1f, QAC_PREC_BF16, &t};
        gcase b = {4, 33, 96, 3, 1, 3, 1, l33, 0.1f, QAC_PREC_FP16, &t};
        gcase c = {3, 128, 96, 3, 0, 0, 1, l128, 0.0f, QAC_PREC_BF16, &t};
        if (!small) run(&a), run(&b);
        run(&c);
    }
    packed_equals_padded(3, 128, 128, 2, l128, 0.1f, QAC_PREC_BF16);
    if (!small) {
        packed_equals_padded(3, 200, 96, 3, l200, 0.0f, QAC_PREC_FP16);
        big_batch(1);
        big_batch(0);
    }
    qac_pool_free(pool);
    return qac_test_summary();
}
