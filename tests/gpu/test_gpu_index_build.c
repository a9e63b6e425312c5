/* qac index build on CUDA: the Cranfield corpus with the default model,
 * built with one CUDA encoder and with three (each its own stream, taking
 * a chunk's batches in turn), eight tokenising threads. A batch is the
 * same computation whichever encoder runs it, so the two builds must write
 * identical shards; each shard row must be close to the CPU encoder's
 * vector for the passage (cosine bound from test_gpu_encoder's measured
 * bf16 deviation, 0.99996: we allow 0.9999). Prints passages/s and the
 * encoders' busy share, the figures `qac index build` reports. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_internal.h"
#include "qac_index.h"
#include "testutil.h"

#define MAX_LEN 128

int main(void) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    char corpus[4096];
    snprintf(corpus, sizeof corpus, "%s", qac_test_data("cranfield/cran.all.1400"));
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return qac_test_summary();
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = QAC_DEVICE_CUDA;
    eo.max_batch = 128;
    qac_encoder *gpu[3] = {NULL, NULL, NULL}, *cpu = NULL;
    for (int i = 0; i < 3; i++) CHECK_OK(qac_encoder_create(&gpu[i], m, &eo));
    eo.device = QAC_DEVICE_CPU;
    CHECK_OK(qac_encoder_create(&cpu, m, &eo));
    if (!gpu[2] || !cpu) return qac_test_summary();
    const int dim = qac_encoder_dim(cpu);
    const char *tmp = qac_test_tmpdir("gpu-index-build");
    char dir[2][4096];
    for (int run = 0; run < 2; run++) {
        snprintf(dir[run], sizeof dir[run], "%s/run%d", tmp, run);
        qac_index_build_opts o = qac_index_default_build_opts();
        qac_index_build_stats st;
        o.batch = 128;
        o.max_len = MAX_LEN;
        o.shard_size = 500;
        o.stats = &st;
        o.tokenize_threads = 8;
        if (run) {
            o.more_encoders = gpu + 1;
            o.n_more_encoders = 2;
        }
        CHECK_OK(qac_index_build(dir[run], gpu[0], corpus, &o));
        printf("%d CUDA encoder%s: %llu passages in %.3f s (%.0f passages/s), encoders busy %.0f%%, device %.3f s, "
               "waited %.3f s for tokens, %.3f s writing shards\n",
               st.encoders, st.encoders > 1 ? "s" : "", (unsigned long long)st.passages, st.encode_s,
               st.passages / st.encode_s, 100 * st.busy_s / st.encode_s, st.device_s, st.wait_s, st.flush_s);
        CHECK(st.passages == 1400 && st.encoders == (run ? 3 : 1) && st.busy_s > 0 && st.busy_s <= st.encode_s + 1e-6);
    }
    /* every passage on the CPU, in corpus order (the rows' order) */
    qac_reader *rd = NULL;
    CHECK_OK(qac_reader_open(&rd, corpus, QAC_READ_CORPUS, QAC_FMT_AUTO));
    char **texts = malloc(sizeof(char *) * 1400);
    int n = 0;
    for (; rd && n < 1400; n++) {
        qac_record rec;
        int got = 0;
        if (qac_reader_next(rd, &rec, &got) || !got) break;
        texts[n] = strndup(rec.text, rec.text_len);
    }
    qac_reader_free(rd);
    CHECK(n == 1400);
    float *want = malloc(sizeof(float) * (size_t)n * dim);
    CHECK_OK(qac_encoder_encode_texts(cpu, (const char *const *)texts, NULL, n, MAX_LEN, want));
    /* identical shards; rows close to the CPU's vectors */
    double worst = 1;
    int64_t row = 0;
    for (int s = 0; s < 3; s++) {
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/emb-%05d.qemb", dir[0], s);
        snprintf(b, sizeof b, "%s/emb-%05d.qemb", dir[1], s);
        CHECK_MSG(qac_test_same_file(a, b), "shard %d differs between one and three CUDA encoders", s);
        qac_shard sh;
        if (qac_shard_read(a, 0, &sh) != QAC_OK) {
            CHECK_MSG(0, "read %s: %s", a, qac_last_error());
            continue;
        }
        for (uint64_t i = 0; i < sh.count && row < n; i++, row++) {
            double dot = 0, na = 0, nb = 0;
            for (int d = 0; d < dim; d++) {
                const double x = sh.vectors[i * (size_t)dim + d], y = want[(size_t)row * dim + d];
                dot += x * y, na += x * x, nb += y * y;
            }
            const double cosv = dot / sqrt(na * nb);
            if (!(cosv >= worst)) worst = cosv;
        }
        qac_shard_free(&sh);
    }
    CHECK(row == n);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts), free(want);
    printf("CUDA index rows against the CPU encoder: min cosine %.8f\n", worst);
    CHECK_MSG(worst >= 0.9999, "a CUDA row's cosine to the CPU vector is %.6f", worst);
    for (int i = 0; i < 3; i++) qac_encoder_free(gpu[i]);
    qac_encoder_free(cpu);
    qac_model_free(m);
    return qac_test_summary();
}
