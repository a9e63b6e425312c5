/* Encoder plumbing: matrix files, the thread pool, batching and ordering,
 * pooling edge cases and bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_cpu.h"
#include "qac_encoder.h"
#include "qac_matrix.h"
#include "qac_pool.h"
#include "qac_util.h"
#include "testutil.h"

static void sum_task(void *ctx, int64_t b, int64_t e, int tid) {
    int *hits = ctx;
    for (int64_t i = b; i < e; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
}

static void test_pool(void) {
    qac_pool *p;
    CHECK_OK(qac_pool_create(&p, 3));
    CHECK(qac_pool_size(p) == 3);
    int hits[1000];
    for (int round = 0; round < 50; round++) {
        memset(hits, 0, sizeof hits);
        qac_pool_for(p, 1000, round % 7, sum_task, hits);
        int ok = 1;
        for (int i = 0; i < 1000; i++) ok &= hits[i] == 1;
        CHECK_MSG(ok, "pool round %d: an index ran not exactly once", round);
    }
    qac_pool_free(p);
    memset(hits, 0, sizeof hits);
    qac_pool_for(NULL, 10, 0, sum_task, hits);
    CHECK(hits[0] == 1 && hits[9] == 1 && qac_pool_size(NULL) == 1);
}

static void test_matrix(void) {
    const char *dir = qac_test_tmpdir("matrix");
    float data[5 * 3];
    for (int i = 0; i < 15; i++) data[i] = (float)i * 0.5f - 3.0f;
    const char *names[] = {"m.qmat", "m.npy"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        CHECK_OK(qac_matrix_write(path, data, 5, 3));
        float *got = NULL;
        int64_t n = 0;
        int d = 0;
        CHECK_OK(qac_matrix_read(path, &got, &n, &d));
        CHECK(n == 5 && d == 3 && got && memcmp(got, data, sizeof data) == 0);
        free(got);
        /* truncation is detected */
        char *blob;
        size_t len;
        CHECK_OK(qac_read_file(path, &blob, &len));
        FILE *f = fopen(path, "wb");
        fwrite(blob, 1, len - 4, f);
        fclose(f);
        free(blob);
        CHECK_ERR(qac_matrix_read(path, &got, &n, &d), QAC_ERR_FORMAT, "size");
    }
    /* streamed writes fill in the count; an empty matrix is valid */
    char path[4096];
    snprintf(path, sizeof path, "%s/s.npy", dir);
    qac_matrix_writer *w;
    CHECK_OK(qac_matrix_writer_open(&w, path, 3));
    CHECK_OK(qac_matrix_writer_append(w, data, 2));
    CHECK_OK(qac_matrix_writer_append(w, data + 6, 3));
    CHECK(qac_matrix_writer_count(w) == 5);
    CHECK_OK(qac_matrix_writer_close(w));
    float *got;
    int64_t n;
    int d;
    CHECK_OK(qac_matrix_read(path, &got, &n, &d));
    CHECK(n == 5 && d == 3 && memcmp(got, data, sizeof data) == 0);
    free(got);
    snprintf(path, sizeof path, "%s/e.qmat", dir);
    CHECK_OK(qac_matrix_write(path, data, 0, 3));
    CHECK_OK(qac_matrix_read(path, &got, &n, &d));
    CHECK(n == 0 && d == 3);
    free(got);
    snprintf(path, sizeof path, "%s/bad.qmat", dir);
    FILE *f = fopen(path, "wb");
    fputs("not a matrix at all, really not", f);
    fclose(f);
    CHECK_ERR(qac_matrix_read(path, &got, &n, &d), QAC_ERR_FORMAT, "magic");
    snprintf(path, sizeof path, "%s/missing.qmat", dir);
    CHECK_ERR(qac_matrix_read(path, &got, &n, &d), QAC_ERR_NOT_FOUND, "missing.qmat");
    /* an aborted writer leaves nothing behind */
    snprintf(path, sizeof path, "%s/aborted.qmat", dir);
    CHECK_OK(qac_matrix_writer_open(&w, path, 3));
    qac_matrix_writer_abort(w);
    CHECK(fopen(path, "rb") == NULL);
}

static void test_pooling(void) {
    float h[2 * 3 * 2] = {1, 2, 3, 4, 100, 100, /* b0: len 2 */ 3, 4, 0, 0, 0, 0 /* b1: len 1 */};
    int lens[2] = {2, 1};
    float out[4];
    qac_pooling_forward(out, h, lens, 2, 3, 2, QAC_POOL_MEAN, 0);
    CHECK(out[0] == 2 && out[1] == 3 && out[2] == 3 && out[3] == 4);
    qac_pooling_forward(out, h, lens, 2, 3, 2, QAC_POOL_CLS, 1);
    CHECK(fabsf(out[2] - 0.6f) < 1e-7f && fabsf(out[3] - 0.8f) < 1e-7f);
    float z[2] = {0, 0};
    int one = 1;
    qac_pooling_forward(out, z, &one, 1, 1, 2, QAC_POOL_MEAN, 1);
    CHECK(out[0] == 0 && out[1] == 0); /* F.normalize of a zero vector is zero, not NaN */
}

/* A cancel hook that says stop at its `at`-th question, counting them. */
typedef struct cancel_count {
    int asked, at;
} cancel_count;

static int cancel_at(void *user) {
    cancel_count *c = user;
    return ++c->asked >= c->at;
}

/* Cancellation: the hook is asked before each batch and between layers;
 * saying stop ends the call with QAC_ERR_CANCELLED at once, the encoder
 * stays usable (the next call gives the reference bits) and counts no
 * truncation for the texts it did not encode. a holds the texts' vectors. */
static void test_cancel(qac_encoder *e_batched, qac_encoder *e_single, const char **texts, int n, const float *a,
                        float *b, int C) {
    int layers = qac_encoder_model(e_batched)->cfg.num_layers;
    for (int which = 0; which < 2; which++) {
        qac_encoder *e = which ? e_single : e_batched; /* max_batch 1: a batch per text */
        cancel_count never = {0, 1 << 30};
        qac_encoder_set_cancel(e, cancel_at, &never);
        CHECK_OK(qac_encoder_encode_texts(e, texts, NULL, n, 64, b));
        int batches = which ? n : 1;
        /* asked once per batch, then before each layer of it */
        CHECK_MSG(never.asked == batches * (1 + layers), "asked %d times for %d batches of %d layers", never.asked,
                  batches, layers);
        for (int at = 1; at <= never.asked; at += layers / 2 + 1) {
            cancel_count stop = {0, at};
            int64_t cut = qac_encoder_truncated(e);
            qac_encoder_set_cancel(e, cancel_at, &stop);
            CHECK_ERR(qac_encoder_encode_texts(e, texts, NULL, n, 2, b), QAC_ERR_CANCELLED, "cancelled");
            CHECK_MSG(stop.asked == at, "asked %d times after saying stop at %d", stop.asked, at);
            CHECK(qac_encoder_truncated(e) == cut);
            qac_encoder_set_cancel(e, NULL, NULL);
            memset(b, 0, (size_t)n * C * sizeof *b);
            CHECK_OK(qac_encoder_encode_texts(e, texts, NULL, n, 64, b));
            CHECK_MSG(memcmp(a, b, (size_t)n * C * sizeof *b) == 0, "after a cancel at %d the vectors differ", at);
        }
    }
    printf("cancel: asked before each batch and layer, stops there, the encoder stays usable\n");
}

static void test_encoder(void) {
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return;
    const char *texts[] = {"wing", "", "the boundary layer on a flat plate at high mach numbers",
                           "wing", "shock waves", "a much longer text about heat transfer in hypersonic flow "
                           "over blunt bodies with ablation and radiation"};
    int n = 6, C = m->cfg.hidden_size;
    float *a = malloc((size_t)n * C * sizeof *a), *b = malloc((size_t)n * C * sizeof *b);
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    o.threads = 2;
    qac_encoder *e1, *e2;
    CHECK_OK(qac_encoder_create(&e1, m, &o));
    o.max_batch = 1;
    o.threads = 1;
    CHECK_OK(qac_encoder_create(&e2, m, &o));
    CHECK(qac_encoder_dim(e1) == C && qac_encoder_device(e1) == QAC_DEVICE_CPU && qac_encoder_model(e1) == m);
    CHECK_OK(qac_encoder_encode_texts(e1, texts, NULL, n, 64, a));
    CHECK_OK(qac_encoder_encode_texts(e2, texts, NULL, n, 64, b));
    /* The CPU encoder is batch-invariant: a text's vector is the same bits
     * alone or in a batch padded to a longer neighbour, with 1 or 2 threads,
     * on every ISA path. */
    int differ = 0;
    for (int i = 0; i < n; i++) differ += memcmp(a + (size_t)i * C, b + (size_t)i * C, sizeof(float) * C) != 0;
    printf("batch of %d (2 threads) vs one at a time (1 thread): %d of %d vectors differ\n", n, differ, n);
    CHECK_MSG(differ == 0, "batching changes %d vectors", differ);
    CHECK_MSG(memcmp(a, a + 3 * C, sizeof(float) * C) == 0, "duplicate texts in one batch differ");
    /* reused buffers: a second, smaller call gives the same rows */
    CHECK_OK(qac_encoder_encode_texts(e1, texts + 2, NULL, 2, 64, b));
    CHECK_MSG(memcmp(a + 2 * C, b, sizeof(float) * 2 * C) == 0, "re-encoding a subset differs");
    /* every ISA path the CPU has (kernels and element-wise math), batched
     * with 2 threads and one text at a time on 1 */
    qac_isa best = qac_cpu_isa_best();
    for (int isa = QAC_ISA_GENERIC; isa <= (int)best; isa++) {
        if (isa == (int)best) continue; /* the default path, checked above */
        qac_cpu_set_isa((qac_isa)isa);
        for (int alone = 0; alone < 2; alone++) {
            CHECK_OK(qac_encoder_encode_texts(alone ? e2 : e1, texts, NULL, n, 64, b));
            double maxd = 0;
            for (int i = 0; i < n * C; i++) maxd = fmax(maxd, fabs((double)a[i] - b[i]));
            printf("%s path (%s) vs %s: max|diff| %.3e\n", qac_cpu_isa_name((qac_isa)isa),
                   alone ? "one at a time" : "batched", qac_cpu_isa_name(best), maxd);
            CHECK_MSG(memcmp(a, b, sizeof(float) * n * C) == 0, "the %s path differs by %.3e",
                      qac_cpu_isa_name((qac_isa)isa), maxd);
        }
    }
    qac_cpu_set_isa(best);
    /* bf16 mode: batch-invariant as well, the same bits on every path
     * (vdpbf16ps or its scalar model), within bf16's rounding of fp32 */
    {
        qac_encoder_opts ob = qac_encoder_default_opts();
        ob.device = QAC_DEVICE_CPU;
        ob.cpu_precision = QAC_PREC_BF16;
        ob.threads = 2;
        qac_encoder *eb1, *eb2;
        CHECK_OK(qac_encoder_create(&eb1, m, &ob));
        ob.threads = 1;
        ob.max_batch = 1;
        CHECK_OK(qac_encoder_create(&eb2, m, &ob));
        float *c = malloc((size_t)n * C * sizeof *c), *d = malloc((size_t)n * C * sizeof *d);
        CHECK_OK(qac_encoder_encode_texts(eb1, texts, NULL, n, 64, c));
        double mincos = 1;
        for (int i = 0; i < n; i++) {
            double dot = 0, na = 0, nc = 0;
            for (int j = 0; j < C; j++) {
                dot += (double)a[(size_t)i * C + j] * c[(size_t)i * C + j];
                na += (double)a[(size_t)i * C + j] * a[(size_t)i * C + j];
                nc += (double)c[(size_t)i * C + j] * c[(size_t)i * C + j];
            }
            mincos = fmin(mincos, dot / sqrt(na * nc + 1e-30));
        }
        printf("bf16 mode vs fp32: min cosine %.6f\n", mincos);
        CHECK_MSG(mincos > 0.999, "bf16 mode: cosine to fp32 %.6f", mincos);
        int bdiff = 0;
        for (int isa = QAC_ISA_GENERIC; isa <= (int)best; isa++) {
            qac_cpu_set_isa((qac_isa)isa);
            CHECK_OK(qac_encoder_encode_texts(eb2, texts, NULL, n, 64, d));
            bdiff += memcmp(c, d, sizeof(float) * n * C) != 0;
        }
        qac_cpu_set_isa(best);
        printf("bf16 mode, batched (2 threads) vs one at a time (1 thread), every path: %d differ\n", bdiff);
        CHECK_MSG(bdiff == 0, "bf16 mode: %d paths differ from the batched run", bdiff);
        ob.cpu_precision = (qac_precision)7;
        qac_encoder *eb3 = NULL;
        CHECK_ERR(qac_encoder_create(&eb3, m, &ob), QAC_ERR_INVALID, "fp32, bf16 or int8");
        qac_encoder_free(eb1), qac_encoder_free(eb2);
        free(c), free(d);
    }
    test_cancel(e1, e2, texts, n, a, b, C);
    /* bad input */
    int32_t bad_ids[3] = {101, 999999, 102};
    const int32_t *pids[1] = {bad_ids};
    int lens[1] = {3};
    CHECK_ERR(qac_encoder_encode_ids(e1, pids, lens, 1, a), QAC_ERR_INVALID, "999999");
    lens[0] = 0;
    CHECK_ERR(qac_encoder_encode_ids(e1, pids, lens, 1, a), QAC_ERR_INVALID, "0 tokens");
    lens[0] = 100000;
    CHECK_ERR(qac_encoder_encode_ids(e1, pids, lens, 1, a), QAC_ERR_INVALID, "tokens");
    CHECK_OK(qac_encoder_encode_ids(e1, pids, lens, 0, a));
    o.device = QAC_DEVICE_CPU;
    o.threads = -1;
    qac_encoder *e3 = NULL;
    CHECK_ERR(qac_encoder_create(&e3, m, &o), QAC_ERR_INVALID, "threads");
    if (!qac_cuda_available()) {
        o.threads = 0;
        o.device = QAC_DEVICE_CUDA;
        CHECK(qac_encoder_create(&e3, m, &o) != QAC_OK && e3 == NULL);
        o.device = QAC_DEVICE_AUTO;
        CHECK_OK(qac_encoder_create(&e3, m, &o));
        CHECK(e3 && qac_encoder_device(e3) == QAC_DEVICE_CPU);
        qac_encoder_free(e3);
    }
    qac_encoder_free(e1);
    qac_encoder_free(e2);
    qac_encoder_free(NULL);
    qac_model_free(m);
    free(a);
    free(b);
}

int main(void) {
    test_pool();
    test_matrix();
    test_pooling();
    test_encoder();
    return qac_test_summary();
}
