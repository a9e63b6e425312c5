/* The fused (FlashAttention-2) attention's CPU twin (model/attention_flash.c)
 * against the reference attention of model/layers.c, which the encoder and
 * training parity tests hold to PyTorch: the forward output and its
 * log-sum-exp, and the backward's dQ, dK, dV, with and without attention
 * dropout (the same masks), for the encoder's bidirectional attention in
 * the padded and the packed layout, ModernBERT's local layers (a window on
 * either side; the reference: qac_attention_forward_window) and the query
 * decoder's causal windowed attention. Head sizes 32 and 64, lengths 1 to 512, ragged batches, key
 * tiles of 16 to 128.
 *
 * Bounds: every element's worst-case error budget, derived from the two
 * sides' summation orders in fp32 (tests/encoder/attention_bound.h); the
 * worst ratio of difference to bound is printed. The packed layout must
 * give the padded layout's bits on the real rows. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_bound.h"
#include "bert_cpu.h"
#include "qac_bf16.h"
#include "testutil.h"

#define U32 0x1p-24 /* fp32 unit roundoff */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float uni(float lo, float hi) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}
static void fill(float *a, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) a[i] = uni(lo, hi);
}

/* the GPU's element roundings, by other means than the twin's */
static float round_to(float x, qac_precision p) {
    if (p == QAC_PREC_FP16) return (float)(_Float16)x;
    if (p == QAC_PREC_BF16) {
        uint32_t u = (uint32_t)qac_bf16_from_float(x) << 16;
        memcpy(&x, &u, sizeof x);
    }
    return x;
}

static void check_worst(const char *what, const char *shape, const float *got, const float *want,
                        const float *bound, size_t n) {
    double max_abs, worst = att_worst(got, want, bound, n, &max_abs);
    printf("%-26s %-44s max|d| %.3g, worst d/bound %.3g\n", what, shape, max_abs, worst);
    CHECK_MSG(worst <= 1.0, "%s %s: difference %.3g times its bound", what, shape, worst);
}

/* exact lse (log2) of every row from the reference probabilities' scores */
static void exact_lse(float *lse, const att_shape *s, const float *qkv) {
    size_t N = att_rows(s);
    int hs = s->C / s->NH;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++) {
            size_t row0;
            int nq, len;
            att_seq(s, b, &row0, &nq, &len);
            for (int i = 0; i < nq; i++) {
                double mx = -INFINITY, z = 0, *sc = malloc(sizeof(double) * (len > 0 ? len : 1));
                for (int j = 0; j < len; j++) {
                    double d = 0;
                    for (int e = 0; e < hs; e++)
                        d += (double)qkv[(row0 + i) * 3 * s->C + (size_t)h * hs + e] *
                             qkv[(row0 + j) * 3 * s->C + s->C + (size_t)h * hs + e];
                    sc[j] = att_visible(s, j, i, len) ? d / sqrt((double)hs) : -INFINITY;
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j < len && mx > -INFINITY; j++) z += exp(sc[j] - mx);
                /* a row that sees no key (padded, past every window): +inf, the contract's */
                lse[(size_t)h * N + row0 + i] = mx > -INFINITY ? (float)((mx + log(z)) * 1.4426950408889634) : INFINITY;
                free(sc);
            }
        }
}

/* One case in the padded layout: twin vs reference, forward and backward.
 * round: the twin rounds as the GPU kernels do in bf16 or fp16 (the
 * reference gets the rounded inputs), so the bounds' rounding terms are
 * held to what rounding does. */
static void run_case(int B, int T, int C, int NH, const int *lens, int causal, int window, float p_attn, int bq,
                     int bk, float qscale, qac_precision round) {
    const size_t N = (size_t)B * T, n3 = N * 3 * C, nP = (size_t)B * NH * T * T;
    float *qkv = malloc(sizeof(float) * n3), *qkvb = malloc(sizeof(float) * n3), *bias = malloc(sizeof(float) * 3 * C);
    float *out_ref = malloc(sizeof(float) * N * C), *att = malloc(sizeof(float) * nP);
    float *out = malloc(sizeof(float) * N * C), *lse = malloc(sizeof(float) * N * NH), *lse_x = malloc(sizeof(float) * N * NH);
    float *bO = malloc(sizeof(float) * N * C), *bL = malloc(sizeof(float) * N * NH);
    float *dout = malloc(sizeof(float) * N * C), *dq_ref = malloc(sizeof(float) * n3), *dq = malloc(sizeof(float) * n3);
    float *bd = malloc(sizeof(float) * n3);
    fill(qkv, n3, -1, 1);
    fill(bias, (size_t)3 * C, -0.5f, 0.5f);
    for (size_t r = 0; r < N; r++)
        for (int c = 0; c < 3 * C; c++) {
            if (c < C) qkv[r * 3 * C + c] *= qscale; /* sharper softmax */
            qkvb[r * 3 * C + c] = round_to(round_to(qkv[r * 3 * C + c], round) + bias[c], round);
        }
    fill(dout, N * C, -1, 1);
    float *dout_r = malloc(sizeof(float) * N * C);
    for (size_t i = 0; i < N * C; i++) dout_r[i] = round_to(dout[i], round);
    const double ue = round == QAC_PREC_BF16 ? 0x1p-8 : round == QAC_PREC_FP16 ? 0x1p-11 : 0;
    const double ae = round == QAC_PREC_FP16 ? 0x1p-25 : 0;
    qac_dropout drop = {0.1f, p_attn, 0x5eed0000ull + (uint64_t)T, NULL}, *dp = p_attn > 0 ? &drop : NULL;
    const int layer = 3;
    att_shape s = {B, T, C, NH, causal, window, NULL, lens, dp, layer, (T + 15) / 16 + 1};
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%d T%d hs%d%s%s p%.1f bq%d bk%d",
             round == QAC_PREC_BF16 ? "bf16" : round == QAC_PREC_FP16 ? "fp16" : "fp32", B, T, C / NH,
             causal ? " causal" : "", window ? "+win" : "", p_attn, bq, bk);

    if (causal) {
        CHECK_OK(qac_attention_causal_forward(out_ref, att, qkvb, lens, window, dp, layer, B, T, C, NH, NULL));
        CHECK_OK(qac_attention_causal_backward(dq_ref, dout_r, qkvb, att, lens, window, dp, layer, B, T, C, NH, NULL));
    } else {
        CHECK_OK(qac_attention_forward_window(out_ref, att, NULL, qkvb, lens, NULL, window, dp, layer, B, T, C, NH,
                                              NULL));
        CHECK_OK(qac_attention_backward(dq_ref, dout_r, qkvb, att, lens, dp, layer, B, T, C, NH, NULL));
    }
    CHECK_OK(qac_flash_attention_forward(out, lse, qkv, bias, NULL, lens, B, T, C, NH, causal, window, dp, layer, bk,
                                         round, NULL));
    CHECK_OK(qac_flash_attention_backward(dq, dout, out, lse, qkv, bias, NULL, lens, B, T, C, NH, causal, window, dp,
                                          layer, bq, bk, round, NULL));

    /* two fp32 sides (us = 2 u32) and the twin's roundings (ue, ae) */
    att_bound_forward(bO, bL, &s, qkvb, out, lse, 2 * U32, ue, ae);
    check_worst("forward out", shape, out, out_ref, bO, N * C);
    exact_lse(lse_x, &s, qkvb);
    check_worst("forward lse", shape, lse, lse_x, bL, N * NH);
    att_bound_backward(bd, &s, qkvb, dout_r, out, bO, 2 * U32, ue, ae);
    check_worst("backward dqkv", shape, dq, dq_ref, bd, n3);

    free(qkv), free(qkvb), free(bias), free(out_ref), free(att), free(out), free(lse), free(lse_x), free(bO), free(bL);
    free(dout), free(dout_r), free(dq_ref), free(dq), free(bd);
}

/* The packed layout gives the padded layout's bits on every real row
 * (padded rows' output gradients zero, so they add exact zeros). */
static void packed_case(int B, int T, int C, int NH, const int *lens, float p_attn, int bq, int bk) {
    const size_t N = (size_t)B * T;
    int *offs = malloc(sizeof(int) * (B + 1));
    offs[0] = 0;
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lens[b];
    const size_t M = (size_t)offs[B];
    float *qkv = malloc(sizeof(float) * N * 3 * C), *bias = malloc(sizeof(float) * 3 * C);
    float *dout = calloc(N * C, sizeof(float)), *pq = malloc(sizeof(float) * M * 3 * C), *pdo = malloc(sizeof(float) * M * C);
    float *out = malloc(sizeof(float) * N * C), *lse = malloc(sizeof(float) * N * NH), *dq = malloc(sizeof(float) * N * 3 * C);
    float *pout = malloc(sizeof(float) * M * C), *plse = malloc(sizeof(float) * M * NH), *pdq = malloc(sizeof(float) * M * 3 * C);
    fill(qkv, N * 3 * C, -1.5f, 1.5f);
    fill(bias, (size_t)3 * C, -0.5f, 0.5f);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < lens[b]; t++) {
            fill(dout + ((size_t)b * T + t) * C, (size_t)C, -1, 1);
            memcpy(pq + ((size_t)offs[b] + t) * 3 * C, qkv + ((size_t)b * T + t) * 3 * C, sizeof(float) * 3 * C);
            memcpy(pdo + ((size_t)offs[b] + t) * C, dout + ((size_t)b * T + t) * C, sizeof(float) * C);
        }
    qac_dropout drop = {0.1f, p_attn, 77, NULL}, *dp = p_attn > 0 ? &drop : NULL;
    CHECK_OK(qac_flash_attention_forward(out, lse, qkv, bias, NULL, lens, B, T, C, NH, 0, 0, dp, 1, bk, QAC_PREC_FP32,
                                         NULL));
    CHECK_OK(qac_flash_attention_backward(dq, dout, out, lse, qkv, bias, NULL, lens, B, T, C, NH, 0, 0, dp, 1, bq, bk,
                                          QAC_PREC_FP32, NULL));
    CHECK_OK(qac_flash_attention_forward(pout, plse, pq, bias, offs, NULL, B, T, C, NH, 0, 0, dp, 1, bk, QAC_PREC_FP32,
                                         NULL));
    CHECK_OK(qac_flash_attention_backward(pdq, pdo, pout, plse, pq, bias, offs, NULL, B, T, C, NH, 0, 0, dp, 1, bq, bk,
                                          QAC_PREC_FP32, NULL));
    size_t diff = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < lens[b]; t++) {
            const size_t r = (size_t)b * T + t, p = (size_t)offs[b] + t;
            for (int c = 0; c < C; c++) diff += out[r * C + c] != pout[p * C + c];
            for (int c = 0; c < 3 * C; c++) diff += dq[r * 3 * C + c] != pdq[p * 3 * C + c];
            for (int h = 0; h < NH; h++) diff += lse[(size_t)h * N + r] != plse[(size_t)h * M + p];
        }
    printf("packed = padded bits        B%d T%d hs%d p%.1f: %zu elements differ\n", B, T, C / NH, p_attn, diff);
    CHECK_MSG(diff == 0, "packed layout: %zu elements differ from the padded layout", diff);
    free(offs), free(qkv), free(bias), free(dout), free(pq), free(pdo), free(out), free(lse), free(dq), free(pout);
    free(plse), free(pdq);
}

int main(void) {
    int l1[1] = {1}, l2[2] = {7, 3}, l3[3] = {128, 77, 1}, l4[2] = {512, 301}, l5[4] = {33, 32, 16, 1};
    const qac_precision F = QAC_PREC_FP32, BF = QAC_PREC_BF16, H = QAC_PREC_FP16;
    /* MiniLM's head size (32) and BERT-base's (64); dropout off and on */
    run_case(1, 1, 64, 2, l1, 0, 0, 0.0f, 64, 64, 1.0f, F);
    run_case(2, 7, 64, 2, l2, 0, 0, 0.0f, 64, 16, 1.0f, F);
    run_case(2, 7, 128, 2, l2, 0, 0, 0.1f, 64, 64, 1.0f, F);
    run_case(3, 128, 96, 3, l3, 0, 0, 0.0f, 64, 32, 3.0f, F);
    run_case(3, 128, 192, 3, l3, 0, 0, 0.1f, 32, 64, 1.0f, F);
    run_case(2, 512, 128, 2, l4, 0, 0, 0.1f, 64, 128, 2.0f, F);
    run_case(4, 33, 64, 2, l5, 0, 0, 0.5f, 16, 16, 1.0f, F);
    /* the query decoder: plain causal and the released window of 3 */
    run_case(2, 7, 64, 2, l2, 1, 0, 0.0f, 64, 64, 1.0f, F);
    run_case(4, 33, 128, 2, l5, 1, 3, 0.1f, 16, 32, 2.0f, F);
    run_case(3, 128, 96, 3, l3, 1, 3, 0.0f, 64, 32, 1.0f, F);
    run_case(3, 128, 192, 3, l3, 1, 0, 0.1f, 32, 64, 1.0f, F);
    /* ModernBERT's local layers: a window on either side, tiles the window
     * starts and ends inside, rows padded past every key's window */
    run_case(3, 128, 96, 3, l3, 0, 8, 0.0f, 64, 32, 2.0f, F);
    run_case(2, 512, 128, 2, l4, 0, 64, 0.1f, 64, 64, 1.0f, F);
    run_case(4, 33, 64, 2, l5, 0, 5, 0.1f, 16, 16, 1.0f, F);
    /* the GPU kernels' roundings, emulated */
    run_case(3, 128, 96, 3, l3, 0, 8, 0.1f, 64, 32, 2.0f, BF);
    run_case(3, 128, 96, 3, l3, 0, 0, 0.1f, 64, 64, 2.0f, BF);
    run_case(2, 512, 128, 2, l4, 0, 0, 0.0f, 64, 64, 2.0f, BF);
    run_case(4, 33, 128, 2, l5, 1, 3, 0.1f, 64, 32, 2.0f, BF);
    run_case(3, 128, 192, 3, l3, 0, 0, 0.1f, 64, 64, 2.0f, H);
    run_case(4, 33, 96, 3, l5, 1, 3, 0.0f, 64, 32, 3.0f, H);

    packed_case(3, 128, 96, 3, l3, 0.0f, 64, 64);
    packed_case(4, 33, 128, 2, l5, 0.1f, 32, 32);
    return qac_test_summary();
}
