/* cuDNN's fused attention, as the CUDA encoder loads and runs it
 * (kernels/cudnn_attention.cu), against qac's fused kernel and against
 * their CPU twin (model/attention_flash.c with the kernels' roundings):
 * packed ragged batches (lengths 1 to 512), bf16 and fp16, head sizes 32
 * and 64. Then the encoder with cuDNN's attention forced on against the
 * same encoder with it off, on the default model: bulk batches and query
 * batches (replayed as CUDA graphs: a replay must give the direct run's
 * bits), with every shape's choice cuDNN (a disagreement with qac's kernel
 * is a failure here, where cuDNN is there and new enough).
 *
 * Skips without a GPU, and, saying why, where cuDNN cannot be loaded or
 * predates the fused SDPA operation of its backend API (9.13).
 *
 * Bounds (tests/encoder/attention_bound.h, per element): qac's kernel
 * against the twin as in test_gpu_attention (fp32 sums 2^-24 + 2^-22, both
 * sides' roundings 2 x 2^-8 in bf16, 2 x 2^-11 + 2 x 2^-25 absolute in
 * fp16). cuDNN's kernel is closed: it rounds Q, K, V on load, the
 * probabilities before P V and the output, as qac's does, but may scale in
 * another place; it gets one rounding more (3 units). cuDNN against qac:
 * the sum of both bounds. Encoder outputs: cosine 0.9999 per vector, the
 * bound test_gpu_encoder holds bf16 to against the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../encoder/attention_bound.h"
#include "bert_cpu.h"
#include "gpu_testutil.h"
#include "qac_bf16.h"
#include "qac_cuda_attention.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "testutil.h"

#define U32 0x1p-24
#define U22 0x1p-22

static float round_to(float x, qac_precision p) {
    if (p == QAC_PREC_FP16) return (float)(_Float16)x;
    uint32_t u = (uint32_t)qac_bf16_from_float(x) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static double unit_of(qac_precision p) { return p == QAC_PREC_FP16 ? 0x1p-11 : 0x1p-8; }
static double abs_of(qac_precision p) { return p == QAC_PREC_FP16 ? 0x1p-25 : 0; }

static void check(const char *what, const char *shape, const float *got, const float *want, const float *bound,
                  size_t n) {
    double mx, w = att_worst(got, want, bound, n, &mx);
    printf("%-24s %-40s max|d| %.3g, worst d/bound %.3g\n", what, shape, mx, w);
    CHECK_MSG(w <= 1.0, "%s %s: difference %.3g times its bound", what, shape, w);
}

static void kernels_case(int B, const int *lens, int hs, qac_precision pr) {
    const int NH = hs == 32 ? 3 : 2, C = hs * NH;
    int *offs = malloc(sizeof(int) * (B + 1)), T = 0;
    offs[0] = 0;
    for (int b = 0; b < B; b++) offs[b + 1] = offs[b] + lens[b], T = lens[b] > T ? lens[b] : T;
    const size_t N = (size_t)offs[B], n3 = N * 3 * C, nc = N * C;
    float *qkv = malloc(sizeof(float) * n3), *bias = malloc(sizeof(float) * 3 * C), *qb = malloc(sizeof(float) * n3);
    float *ours = malloc(sizeof(float) * nc), *cud = malloc(sizeof(float) * nc), *tout = malloc(sizeof(float) * nc);
    float *tlse = malloc(sizeof(float) * N * NH), *bq = malloc(sizeof(float) * nc), *bc = malloc(sizeof(float) * nc);
    gpu_test_fill(qkv, n3, -1, 1);
    gpu_test_fill(bias, (size_t)3 * C, -0.5f, 0.5f);
    for (size_t r = 0; r < N; r++)
        for (int c = 0; c < 3 * C; c++) {
            if (c < C) qkv[r * 3 * C + c] *= 2.0f; /* a sharper softmax than uniform */
            qkv[r * 3 * C + c] = round_to(qkv[r * 3 * C + c], pr);
            qb[r * 3 * C + c] = round_to(qkv[r * 3 * C + c] + bias[c], pr);
        }
    char shape[96];
    snprintf(shape, sizeof shape, "%s B%d T%d hs%d packed", gpu_test_prec_name(pr), B, T, hs);
    CHECK_OK(qac_cuda_fa_forward(ours, NULL, qkv, bias, offs, NULL, B, T, C, NH, 0, 0, 0.0f, 0, 0, pr, NULL));
    const qac_status st = qac_cudnn_fa_forward(cud, qkv, bias, offs, B, T, C, NH, pr);
    CHECK_MSG(st == QAC_OK, "cuDNN %s: %s", shape, qac_last_error());
    if (st == QAC_OK) {
        CHECK_OK(qac_flash_attention_forward(tout, tlse, qkv, bias, offs, NULL, B, T, C, NH, 0, 0, NULL, 0, 64, pr,
                                             NULL));
        att_shape s = {B, T, C, NH, 0, 0, offs, NULL, NULL, 0, (T + 15) / 16 + 1};
        att_bound_forward(bq, NULL, &s, qb, tout, tlse, U32 + U22, 2 * unit_of(pr), 2 * abs_of(pr));
        att_bound_forward(bc, NULL, &s, qb, tout, tlse, U32 + U22, 3 * unit_of(pr), 3 * abs_of(pr));
        check("qac vs twin", shape, ours, tout, bq, nc);
        check("cuDNN vs twin", shape, cud, tout, bc, nc);
        for (size_t i = 0; i < nc; i++) bc[i] += bq[i];
        check("cuDNN vs qac", shape, cud, ours, bc, nc);
    }
    free(offs), free(qkv), free(bias), free(qb), free(ours), free(cud), free(tout), free(tlse), free(bq), free(bc);
}

static double min_cos(const float *a, const float *b, int n, int d) {
    double worst = 1;
    for (int i = 0; i < n; i++) {
        double ab = 0, aa = 0, bb = 0;
        for (int j = 0; j < d; j++) {
            const double x = a[(size_t)i * d + j], y = b[(size_t)i * d + j];
            ab += x * y, aa += x * x, bb += y * y;
        }
        const double c = ab / sqrt(aa * bb + 1e-300);
        if (!(c >= worst)) worst = c; /* NaN counts as worst */
    }
    return worst;
}

/* The encoder with cuDNN on against it off: n sequences of random ids,
 * lengths lo..hi, as one call (bulk or, when small, a query batch). */
static void encoder_case(qac_encoder *on, qac_encoder *off, const qac_model *m, int n, int lo, int hi) {
    const int d = qac_encoder_dim(on);
    int32_t **ids = malloc(sizeof(int32_t *) * n);
    int *lens = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) {
        lens[i] = gpu_test_int(lo, hi);
        ids[i] = malloc(sizeof(int32_t) * lens[i]);
        for (int t = 0; t < lens[i]; t++) ids[i][t] = gpu_test_int(1000, m->cfg.vocab_size - 1);
        ids[i][0] = 101, ids[i][lens[i] - 1] = 102;
    }
    float *a = malloc(sizeof(float) * n * d), *b = malloc(sizeof(float) * n * d), *c = malloc(sizeof(float) * n * d);
    CHECK_OK(qac_encoder_encode_ids(on, (const int32_t *const *)ids, lens, n, a));
    CHECK_OK(qac_encoder_encode_ids(off, (const int32_t *const *)ids, lens, n, b));
    const double cs = min_cos(a, b, n, d);
    printf("encoder cuDNN on vs off: %d sequences of %d..%d tokens: min cosine %.8f\n", n, lo, hi, cs);
    CHECK_MSG(cs >= 0.9999, "%d sequences of %d..%d: min cosine %.8f", n, lo, hi, cs);
    for (int rep = 0; rep < 2; rep++) { /* captured, then replayed (query batches); the same bits */
        CHECK_OK(qac_encoder_encode_ids(on, (const int32_t *const *)ids, lens, n, c));
        CHECK_MSG(!memcmp(a, c, sizeof(float) * n * d), "%d sequences: call %d differs from the first", n, rep + 2);
    }
    for (int i = 0; i < n; i++) free(ids[i]);
    free(ids), free(lens), free(a), free(b), free(c);
}

int main(void) {
    (void)att_bound_backward; /* the header's backward bound: not used here */
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    char why[512], msg[700];
    const int v = qac_cudnn_version();
    if (v == 0) {
        snprintf(msg, sizeof msg, "no cuDNN here: %s", qac_cudnn_status(why, sizeof why));
        qac_test_skip(msg);
    }
    if (v < 91300) {
        snprintf(msg, sizeof msg, "%s: its backend API has no fused SDPA operation before 9.13",
                 qac_cudnn_status(why, sizeof why));
        qac_test_skip(msg);
    }
    printf("%s\n", qac_cudnn_status(why, sizeof why));
    gpu_test_seed();
    const qac_precision precs[2] = {QAC_PREC_BF16, QAC_PREC_FP16};
    int l1[1] = {1}, l7[3] = {7, 3, 1}, l128[3] = {128, 77, 1}, l512[2] = {512, 301}, l200[3] = {200, 131, 5};
    int l33[4] = {33, 32, 16, 1};
    struct {
        int B;
        const int *lens;
    } sets[] = {{1, l1}, {3, l7}, {3, l128}, {2, l512}, {3, l200}, {4, l33}};
    for (int pi = 0; pi < 2; pi++)
        for (int hs = 32; hs <= 64; hs += 32)
            for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
                kernels_case(sets[i].B, sets[i].lens, hs, precs[pi]);

    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return qac_test_summary();
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = QAC_DEVICE_CUDA;
    qac_encoder *on = NULL, *off = NULL;
    setenv("QAC_CUDA_CUDNN", "off", 1);
    CHECK_OK(qac_encoder_create(&off, m, &eo));
    setenv("QAC_CUDA_CUDNN", "on", 1); /* read when an encoder is made */
    CHECK_OK(qac_encoder_create(&on, m, &eo));
    unsetenv("QAC_CUDA_CUDNN");
    if (on && off) {
        encoder_case(on, off, m, 200, 8, 128); /* bulk */
        encoder_case(on, off, m, 1, 5, 32);    /* query batches: buckets and graphs */
        encoder_case(on, off, m, 13, 3, 32);
        char choices[4096];
        const int n = qac_cuda_attention_choices(choices, sizeof choices);
        printf("choices: %s\n", choices);
        CHECK_MSG(n > 0 && !strstr(choices, ": qac"), "a shape kept qac's kernel: %s", choices);
    }
    qac_encoder_free(on);
    qac_encoder_free(off);
    qac_model_free(m);
    return qac_test_summary();
}
