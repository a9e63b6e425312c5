/* The CPU encoder in int8 (QAC_PREC_INT8) on the default model:
 *  - accuracy: on the texts of the parity fixture (Cranfield documents at
 *    256 and 128 tokens, and a batch of lengths 1..256), each vector's
 *    cosine to sentence-transformers' fp32 vector. The bound is ONNX
 *    Runtime's own int8 model of the same checkpoint on the same token ids
 *    (tests/reference/gen_int8_ort_fixture.py): per set, qac's mean and
 *    largest deviation (1 - cosine) must be no larger than ONNX Runtime's;
 *  - batch invariance: a text's vector is the same bits alone (1 thread,
 *    batches of 1) or in a batch beside longer and shorter texts (2
 *    threads), on each VNNI path the CPU has (AVX512-VNNI, AVX-VNNI);
 *  - no VNNI: on the generic path (forced, as --cpu-isa generic does) an
 *    int8 encoder runs in fp32, says so (precision FP32 and a note naming
 *    VNNI), and gives fp32's bits, not a slow or different int8. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "qac_cpu.h"
#include "qac_encoder.h"
#include "testutil.h"

/* the per-set cosines of tests/reference/encoder/minilm_ort_int8.bin */
static int read_ort(const char *path, int n_sets, int *ns, float **cos) {
    FILE *f = fopen(path, "rb");
    char magic[8];
    int32_t k = 0;
    if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, "QACORT01", 8) || fread(&k, 4, 1, f) != 1 || k != n_sets) {
        printf("cannot read %s (or not %d sets): run tests/reference/gen_int8_ort_fixture.py\n", path, n_sets);
        if (f) fclose(f);
        return -1;
    }
    for (int s = 0; s < n_sets; s++) {
        int32_t n;
        if (fread(&n, 4, 1, f) != 1 || n < 1 || !(cos[s] = malloc(sizeof(float) * (size_t)n)) ||
            fread(cos[s], sizeof(float), (size_t)n, f) != (size_t)n) {
            fclose(f);
            return -1;
        }
        ns[s] = n;
    }
    fclose(f);
    return 0;
}

static double cosine(const float *a, const float *b, int C) {
    double d = 0, na = 0, nb = 0;
    for (int j = 0; j < C; j++) d += (double)a[j] * b[j], na += (double)a[j] * a[j], nb += (double)b[j] * b[j];
    return d / sqrt(na * nb + 1e-30);
}

static qac_encoder *make(const qac_model *m, qac_precision p, int threads, int batch) {
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    o.cpu_precision = p;
    o.threads = threads;
    o.max_batch = batch;
    qac_encoder *e = NULL;
    CHECK_OK(qac_encoder_create(&e, m, &o));
    return e;
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/encoder/minilm.bin", QAC_TEST_DATA);
    enc_fixture fx;
    if (enc_fixture_load(&fx, path) != 0) return 1;
    int ns[8] = {0};
    float *ort[8] = {0};
    snprintf(path, sizeof path, "%s/reference/encoder/minilm_ort_int8.bin", QAC_TEST_DATA);
    CHECK(fx.n_sets <= 8);
    if (read_ort(path, fx.n_sets, ns, ort) != 0) return 1;
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return qac_test_summary();
    int C = fx.C;
    qac_isa best = qac_cpu_isa_best();
    printf("CPU: best path %s, VNNI %d bits there\n", qac_cpu_isa_name(best), qac_cpu_vnni());
    if (!qac_cpu_vnni()) {
        /* nothing of int8 to measure on this CPU: its fallback is the test */
        printf("this CPU has no VNNI: only the fallback is checked\n");
    }
    qac_encoder *e8 = make(m, QAC_PREC_INT8, 2, 0), *e8one = make(m, QAC_PREC_INT8, 1, 1);
    qac_encoder *e32 = make(m, QAC_PREC_FP32, 2, 0);
    if (!e8 || !e8one || !e32) return qac_test_summary();
    int has_vnni = qac_cpu_vnni() != 0;
    CHECK(qac_encoder_cpu_precision(e8) == (has_vnni ? QAC_PREC_INT8 : QAC_PREC_FP32));
    CHECK(has_vnni ? qac_encoder_cpu_note(e8) == NULL : qac_encoder_cpu_note(e8) != NULL);

    for (int s = 0; has_vnni && s < fx.n_sets; s++) {
        const enc_set *set = &fx.sets[s];
        CHECK(ns[s] == set->n);
        float *got = malloc(sizeof(float) * (size_t)set->n * C), *one = malloc(sizeof(float) * (size_t)set->n * C);
        CHECK_OK(qac_encoder_encode_ids(e8, (const int32_t *const *)set->ids, set->lens, set->n, got));
        /* accuracy against fp32, bounded by ONNX Runtime's int8 */
        double sum = 0, worst = 0, osum = 0, oworst = 0;
        for (int i = 0; i < set->n; i++) {
            double dev = 1 - cosine(got + (size_t)i * C, set->emb + (size_t)i * C, C), odev = 1 - (double)ort[s][i];
            sum += dev, worst = fmax(worst, dev), osum += odev, oworst = fmax(oworst, odev);
        }
        printf("set %d (%d texts, max_len %d): 1 - cosine to fp32: qac int8 mean %.2e max %.2e; ONNX Runtime int8 "
               "mean %.2e max %.2e\n",
               s, set->n, set->max_len, sum / set->n, worst, osum / set->n, oworst);
        CHECK_MSG(sum <= osum, "set %d: mean deviation %.3e past ONNX Runtime's %.3e", s, sum / set->n, osum / set->n);
        CHECK_MSG(worst <= oworst, "set %d: largest deviation %.3e past ONNX Runtime's %.3e", s, worst, oworst);
        /* batch invariance, on every VNNI path (each against its own batched
         * bits: the AVX-512 path of a CPU with AVX512_BF16 runs the
         * attention in bf16, the others in fp32) */
        int differ = 0;
        for (int isa = QAC_ISA_AVX2; isa <= (int)best; isa++) {
            qac_cpu_set_isa((qac_isa)isa);
            if (!qac_cpu_vnni()) continue;
            CHECK_OK(qac_encoder_encode_ids(e8, (const int32_t *const *)set->ids, set->lens, set->n, got));
            CHECK_OK(qac_encoder_encode_ids(e8one, (const int32_t *const *)set->ids, set->lens, set->n, one));
            int d = memcmp(one, got, sizeof(float) * (size_t)set->n * C) != 0;
            printf("  %s (VNNI %d), one text at a time on 1 thread vs batched on 2: %s\n",
                   qac_cpu_isa_name((qac_isa)isa), qac_cpu_vnni(), d ? "DIFFER" : "the same bits");
            differ += d;
        }
        qac_cpu_set_isa(best);
        CHECK_MSG(differ == 0, "set %d: int8 vectors depend on the batch or threads", s);
        free(got), free(one);
    }

    /* no VNNI: fp32, said, and fp32's bits */
    qac_cpu_set_isa(QAC_ISA_GENERIC);
    qac_encoder *eg = make(m, QAC_PREC_INT8, 1, 0), *eg32 = make(m, QAC_PREC_FP32, 1, 0);
    if (eg && eg32) {
        const char *note = qac_encoder_cpu_note(eg);
        printf("generic path, int8 asked: runs in %s; note: %s\n", qac_precision_name(qac_encoder_cpu_precision(eg)),
               note ? note : "(none)");
        CHECK(qac_encoder_cpu_precision(eg) == QAC_PREC_FP32);
        CHECK_MSG(note && strstr(note, "VNNI") && strstr(note, "fp32"), "no-VNNI note: %s", note ? note : "(none)");
        CHECK(qac_encoder_cpu_note(eg32) == NULL);
        /* the shortest texts of the synthetic batch (lengths 1..): the portable path is slow */
        const enc_set *set = &fx.sets[fx.n_sets - 1];
        int n = set->n < 8 ? set->n : 8;
        float *a = malloc(sizeof(float) * (size_t)n * C), *b = malloc(sizeof(float) * (size_t)n * C);
        CHECK_OK(qac_encoder_encode_ids(eg, (const int32_t *const *)set->ids, set->lens, n, a));
        CHECK_OK(qac_encoder_encode_ids(eg32, (const int32_t *const *)set->ids, set->lens, n, b));
        CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)n * C) == 0, "the no-VNNI int8 encoder is not fp32's bits");
        free(a), free(b);
    }
    qac_encoder_free(eg), qac_encoder_free(eg32);
    qac_cpu_set_isa(best);
    /* names */
    qac_precision p;
    CHECK_OK(qac_precision_parse("int8", &p));
    CHECK(p == QAC_PREC_INT8 && !strcmp(qac_precision_name(p), "int8"));
    CHECK_ERR(qac_precision_parse("int4", &p), QAC_ERR_INVALID, "'int4'");
    CHECK_ERR(qac_precision_parse("fp16", &p), QAC_ERR_INVALID, "fp32|bf16|int8");

    qac_encoder_free(e8), qac_encoder_free(e8one), qac_encoder_free(e32);
    qac_model_free(m);
    for (int s = 0; s < fx.n_sets; s++) free(ort[s]);
    enc_fixture_free(&fx);
    return qac_test_summary();
}
