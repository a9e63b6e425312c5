/* The int8 encoder's attention in bf16 (qac_attention_forward_packed_bf16,
 * model/layers.c), on packed sequences of lengths 1..37 (odd ones, and
 * across the 16-key panels), head sizes 32 and 64, with P V in bf16 (the
 * encoder's choice), Q K^T in bf16, and both:
 *  - where the CPU has AVX512_BF16, every output bit-equal to a plain C
 *    model of the documented arithmetic: Q times 1 / sqrt(hs) and K
 *    rounded to bf16, each score one chain of vdpbf16ps steps,
 *    qac_bf16_step, odd product then even (with Q K^T in fp32: the fp32
 *    attention's own probabilities, kept by qac_attention_forward); the
 *    fp32 softmax; P and V rounded, P V the same way. With only Q K^T in
 *    bf16 the fp32 P V has no C model here: that mode is held to the bound
 *    below. Without AVX512_BF16 (or with bf16 0), the fp32 attention's own
 *    bits;
 *  - against the fp32 attention, within the bound the roundings of both
 *    products give (derived at bound(); each mode rounds a subset of them);
 *  - batch invariance: a sequence alone, or in the batch, on 1 or 2
 *    threads, gets the same bits; and one row a sequence
 *    (qac_attention_forward_packed_rows) the same bits as the whole.
 * The same for the attention from Q|K|V already in bf16
 * (qac_attention_forward_bf16_qkv, the int8 encoder's): Q rounded
 * unscaled, each score then multiplied by the scale, the softmax's exp
 * to bf16's needs (qac_vm_softmax_row_b16); bit-equal to its C model on
 * every CPU (without AVX512_BF16 it runs the steps emulated: checked again
 * with the ISA set to AVX2). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_bf16.h"
#include "qac_cpu.h"
#include "testutil.h"
#include "vecmath.h"

static unsigned long long rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
}

static float bf(float x) { return qac_bf16_in(qac_bf16_from_float(x)); }

/* FROM16: the attention from Q|K|V already in bf16
 * (qac_attention_forward_bf16_qkv, the int8 encoder's choice), a mode of
 * this test's own */
enum { FROM16 = 4 };

/* one (sequence, head): q, k, v rows at stride ld, out rows at stride ldo;
 * in16: Q rounded as it is, each score's sum then times the scale, and
 * the softmax of qac_vm_softmax_row_b16 */
static void model(float *out, int ldo, const float *q, const float *k, const float *v, int ld, int len, int hs,
                  const float *p32, int T, int in16) {
    float scale = 1.0f / sqrtf((float)hs), qs = in16 ? 1.0f : scale;
    float *s = malloc(sizeof(float) * (size_t)len);
    for (int t = 0; t < len; t++) {
        if (p32) /* Q K^T and the softmax in fp32: the fp32 attention's probabilities */
            memcpy(s, p32 + (size_t)t * T, sizeof(float) * (size_t)len);
        for (int j = 0; j < len && !p32; j++) {
            float acc = 0;
            for (int k2 = 0; k2 < (hs + 1) / 2; k2++) {
                int a = 2 * k2, b = 2 * k2 + 1;
                float q1 = b < hs ? bf(q[(size_t)t * ld + b] * qs) : 0, k1 = b < hs ? bf(k[(size_t)j * ld + b]) : 0;
                acc = qac_bf16_step(q1, k1, acc);
                acc = qac_bf16_step(bf(q[(size_t)t * ld + a] * qs), bf(k[(size_t)j * ld + a]), acc);
            }
            s[j] = acc;
        }
        for (int j = 0; in16 && j < len; j++) s[j] *= scale;
        if (in16) qac_vm_softmax_row_b16(s, len);
        else if (!p32) qac_vm_softmax_row(s, len);
        for (int d = 0; d < hs; d++) {
            float acc = 0;
            for (int j2 = 0; j2 < (len + 1) / 2; j2++) {
                int a = 2 * j2, b = 2 * j2 + 1;
                float p1 = b < len ? bf(s[b]) : 0, v1 = b < len ? bf(v[(size_t)b * ld + d]) : 0;
                acc = qac_bf16_step(p1, v1, acc);
                acc = qac_bf16_step(bf(s[a]), bf(v[(size_t)a * ld + d]), acc);
            }
            out[(size_t)t * ldo + d] = acc;
        }
    }
    free(s);
}

/* |out - fp32 out| for row t, column d. With u = 2^-8 (bf16's unit
 * roundoff) a score's two rounded factors give each product a relative
 * error of at most 2u + u^2, and the fp32 chains of hs steps (either side)
 * at most hs 2^-24 of the sum of |products| each: so |dS_j| <= D = max_j
 * (2u + u^2 + hs 2^-23) sum_k |q_k scale k_jk|. Softmax then moves each
 * probability by a factor within [e^-2D, e^2D]: |dP_j| <= P_j (e^2D - 1).
 * P and V rounded add 2u + u^2 relative to each product P'_j V_jd, and the
 * two fp32 chains of len steps len 2^-23 of sum P |V| (the probabilities
 * themselves: the fp32 softmax, the same function on both sides, up to its
 * own rounding of a few ulps, 8 2^-24 a probability). FROM16 rounds Q
 * unscaled and multiplies each score by the scale in fp32 instead: the
 * same roundings of the factors, and one more of the score, 2^-24 |S_j|. */
static double bound(const float *q, const float *k, const float *v, int ld, int t, int d, int len, int hs,
                    const float *p, int in16) {
    double u = 1.0 / 256, scale = 1.0 / sqrt((double)hs), D = 0, smax = 0;
    for (int j = 0; j < len; j++) {
        double s = 0;
        for (int x = 0; x < hs; x++) s += fabs((double)q[(size_t)t * ld + x] * scale * k[(size_t)j * ld + x]);
        D = fmax(D, (2 * u + u * u + hs * 0x1p-23 + 0x1p-24) * s); /* 2^-24: FROM16's scale, after the sum */
        smax = fmax(smax, s);
    }
    double g = exp(2 * D) - 1, sum = 0;
    for (int j = 0; j < len; j++) sum += p[j] * fabs((double)v[(size_t)j * ld + d]);
    /* FROM16's softmax: each exp within 2.7e-6 of exact (vecmath.h) after
     * its argument's roundings (the subtraction of the max, t = s log2 e:
     * relative 2^-24 each of at most 2 smax, an absolute error in the exp's
     * argument), twice (an element and the sum) */
    double soft = in16 ? 2 * (2.7e-6 + 2 * 2 * smax * 0x1p-24) : 0;
    return (g + (1 + g) * (2 * u + u * u) + len * 0x1p-23 + 8 * 0x1p-24 + soft) * sum * 1.0001 + 1e-30;
}

/* the attention under test: mode a mask of QAC_ATT_BF16_QK and _PV, or FROM16 */
static void attend(float *out, const float *qkv, const uint16_t *qkv16, const int *lens, const int *offs,
                   const int *rows, int B, int T, int C, int NH, int mode, qac_pool *pool) {
    if (mode == FROM16) {
        CHECK_OK(qac_attention_forward_bf16_qkv(out, NULL, qkv16, lens, offs, rows, B, T, C, NH, pool));
    } else if (rows) {
        CHECK_OK(qac_attention_forward_packed_rows(out, NULL, qkv, lens, offs, rows, B, T, C, NH, mode, pool));
    } else {
        CHECK_OK(qac_attention_forward_packed_bf16(out, NULL, qkv, lens, offs, B, T, C, NH, mode, pool));
    }
}

static void check(int hs, int mode) {
    enum { B = 5 };
    const int NH = 2, C = NH * hs;
    const int lens[B] = {1, 7, 16, 37, 2};
    int offs[B], N = 0, T = 0;
    for (int b = 0; b < B; b++) offs[b] = N, N += lens[b], T = lens[b] > T ? lens[b] : T;
    float *qkv = malloc(sizeof(float) * (size_t)N * 3 * C), *got = malloc(sizeof(float) * (size_t)N * C);
    float *ref = malloc(sizeof(float) * (size_t)N * C), *want = malloc(sizeof(float) * (size_t)N * C);
    float *alone = malloc(sizeof(float) * (size_t)N * C), *p = malloc(sizeof(float) * (size_t)T);
    uint16_t *qkv16 = malloc(sizeof(uint16_t) * (size_t)N * 3 * C);
    for (size_t i = 0; i < (size_t)N * 3 * C; i++) qkv[i] = 4 * frand(), qkv16[i] = qac_bf16_from_float(qkv[i]);
    qac_pool *two = NULL;
    CHECK_OK(qac_pool_create(&two, 2));
    CHECK_OK(qac_attention_forward_packed(ref, NULL, qkv, lens, offs, B, T, C, NH, NULL));
    CHECK_OK(qac_attention_forward_packed_bf16(got, NULL, qkv, lens, offs, B, T, C, NH, 0, NULL));
    CHECK_MSG(memcmp(got, ref, sizeof(float) * (size_t)N * C) == 0, "hs %d: bf16 0 is not the fp32 attention", hs);
    /* the fp32 probabilities [B, NH, T, T], from the padded layout */
    float *pad = calloc((size_t)B * T * 3 * C, sizeof(float)), *po = malloc(sizeof(float) * (size_t)B * T * C);
    float *p32 = malloc(sizeof(float) * (size_t)B * NH * T * T);
    for (int b = 0; b < B; b++)
        memcpy(pad + (size_t)b * T * 3 * C, qkv + (size_t)offs[b] * 3 * C, sizeof(float) * (size_t)lens[b] * 3 * C);
    CHECK_OK(qac_attention_forward(po, p32, NULL, pad, lens, B, T, C, NH, NULL));
    attend(got, qkv, qkv16, lens, offs, NULL, B, T, C, NH, mode, two);
    /* FROM16 has no fp32 fallback: without AVX512_BF16 it runs the same steps emulated */
    int bf16 = qac_cpu_bf16() || mode == FROM16, bad = 0, over = 0, differ = 0;
    int modelled = !!(mode & QAC_ATT_BF16_PV) || mode == FROM16;
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)offs[b] * 3 * C + (size_t)h * hs;
            model(want + (size_t)offs[b] * C + (size_t)h * hs, C, q, q + C, q + 2 * C, 3 * C, lens[b], hs,
                  mode & (QAC_ATT_BF16_QK | FROM16) ? NULL : p32 + ((size_t)b * NH + h) * T * T, T, mode == FROM16);
            for (int t = 0; t < lens[b]; t++) {
                float scale = 1.0f / sqrtf((float)hs);
                for (int j = 0; j < lens[b]; j++) { /* the fp32 probabilities, for the bound */
                    double s = 0;
                    for (int x = 0; x < hs; x++) s += (double)q[(size_t)t * 3 * C + x] * scale * q[(size_t)j * 3 * C + C + x];
                    p[j] = (float)s;
                }
                qac_vm_softmax_row(p, lens[b]);
                for (int d = 0; d < hs; d++) {
                    size_t at = (size_t)(offs[b] + t) * C + (size_t)h * hs + d;
                    double err = fabs((double)got[at] - ref[at]);
                    double bd = bound(q, q + C, q + 2 * C, 3 * C, t, d, lens[b], hs, p, mode == FROM16);
                    over += err > bd;
                    worst = fmax(worst, err / bd);
                }
            }
        }
    for (size_t i = 0; i < (size_t)N * C; i++)
        bad += bf16 ? modelled && memcmp(&got[i], &want[i], sizeof(float)) != 0
                    : memcmp(&got[i], &ref[i], sizeof(float)) != 0;
    for (int b = 0; b < B; b++) { /* each sequence alone, 1 thread */
        int l1[1] = {lens[b]}, o1[1] = {0};
        attend(alone + (size_t)offs[b] * C, qkv + (size_t)offs[b] * 3 * C, qkv16 + (size_t)offs[b] * 3 * C, l1, o1,
               NULL, 1, lens[b], C, NH, mode, NULL);
    }
    differ = memcmp(alone, got, sizeof(float) * (size_t)N * C) != 0;
    int rows[B];
    for (int b = 0; b < B; b++) rows[b] = (lens[b] * 5) / 7; /* any row of each */
    attend(alone, qkv, qkv16, lens, offs, rows, B, T, C, NH, mode, two);
    for (int b = 0; b < B; b++)
        differ |= memcmp(alone + (size_t)b * C, got + (size_t)(offs[b] + rows[b]) * C, sizeof(float) * (size_t)C) != 0;
    CHECK_MSG(bad == 0, "hs %d mode %d: %d outputs differ from the %s", hs, mode, bad,
              bf16 ? "C model of the bf16 steps" : "fp32 attention");
    CHECK_MSG(over == 0, "hs %d mode %d: %d outputs past the rounding bound of the fp32 attention (worst %.3f of it)",
              hs, mode, over, worst);
    CHECK_MSG(differ == 0, "hs %d mode %d: a sequence's bits depend on the batch, the threads or the rows asked", hs,
              mode);
    printf("attention hs %d, bf16 mode %d (%s): %s, within %.3f of the bound to fp32, batch/thread/row-invariant\n",
           hs, mode,
           mode == FROM16 && !qac_cpu_bf16() ? "no AVX512_BF16: emulated"
           : bf16                            ? "AVX512_BF16"
                                             : "no AVX512_BF16: fp32",
           !bf16 ? "fp32's bits" : modelled ? "bit-equal to the C model" : "no C model", worst);
    qac_pool_free(two);
    free(qkv), free(qkv16), free(got), free(ref), free(want), free(alone), free(p), free(pad), free(po), free(p32);
}

int main(void) {
    for (int mode = QAC_ATT_BF16_QK; mode <= (QAC_ATT_BF16_QK | QAC_ATT_BF16_PV); mode++) {
        check(32, mode);
        check(64, mode);
    }
    check(32, FROM16);
    check(64, FROM16);
    if (qac_cpu_bf16()) { /* FROM16 emulated, as a CPU without AVX512_BF16 runs it: the same bits */
        qac_cpu_set_isa(QAC_ISA_AVX2);
        check(32, FROM16);
        check(64, FROM16);
    }
    return qac_test_summary();
}
