/* qac index build's pipeline (a reader thread tokenising chunks ahead on a
 * pool, several encoders taking a chunk's batches): the Cranfield corpus
 * with the default model on the CPU, in shards of 300 (so chunks stop at
 * shard boundaries and the chunk slots are reused), built twice: one
 * encoder, one tokenising thread, batch 64; then three encoders, four
 * tokenising threads, batch 7. Every shard row must equal the encoder's
 * own vector for that passage (encoded directly, one call for all), bit
 * for bit (the CPU encoder gives a text the same vector in any batch), the
 * docids and offsets must follow the corpus, and both builds must write
 * identical shards and docid tables. The run's statistics must add up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_internal.h"
#include "qac_index.h"
#include "testutil.h"

#define MAX_LEN 32

int main(void) {
    char corpus[4096];
    snprintf(corpus, sizeof corpus, "%s", qac_test_data("cranfield/cran.all.1400"));
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return qac_test_summary();
    qac_encoder_opts eo = qac_encoder_default_opts();
    eo.device = QAC_DEVICE_CPU;
    eo.threads = 1;
    qac_encoder *enc[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) CHECK_OK(qac_encoder_create(&enc[i], m, &eo));
    const int dim = qac_encoder_dim(enc[0]);

    /* the reference: every passage encoded directly */
    qac_reader *r = NULL;
    CHECK_OK(qac_reader_open(&r, corpus, QAC_READ_CORPUS, QAC_FMT_AUTO));
    int n = 0, cap = 2048;
    char **texts = malloc(sizeof(char *) * cap), **ids = malloc(sizeof(char *) * cap);
    uint64_t *offsets = malloc(sizeof(uint64_t) * cap);
    for (;;) {
        qac_record rec;
        int got = 0;
        CHECK_OK(qac_reader_next(r, &rec, &got));
        if (!got || n == cap) break;
        texts[n] = strndup(rec.text, rec.text_len);
        ids[n] = strdup(rec.id);
        offsets[n] = rec.offset;
        n++;
    }
    qac_reader_free(r);
    CHECK(n == 1400);
    float *want = malloc(sizeof(float) * (size_t)n * dim);
    CHECK_OK(qac_encoder_encode_texts(enc[0], (const char *const *)texts, NULL, n, MAX_LEN, want));

    const char *tmp = qac_test_tmpdir("index-pipeline");
    char dir[2][4096];
    for (int run = 0; run < 2; run++) {
        snprintf(dir[run], sizeof dir[run], "%s/run%d", tmp, run);
        qac_index_build_opts o = qac_index_default_build_opts();
        qac_index_build_stats st;
        o.max_len = MAX_LEN;
        o.shard_size = 300;
        o.stats = &st;
        if (run == 0) {
            o.tokenize_threads = 1;
        } else {
            o.batch = 7;
            o.more_encoders = enc + 1;
            o.n_more_encoders = 2;
            o.tokenize_threads = 4;
        }
        CHECK_OK(qac_index_build(dir[run], enc[0], corpus, &o));
        printf("run %d: %llu passages in %.2f s, %d encoders, %d tokenising threads, busy %.2f s, waited %.2f s, "
               "shards %.2f s, device %.1f\n",
               run, (unsigned long long)st.passages, st.encode_s, st.encoders, st.tokenize_threads, st.busy_s,
               st.wait_s, st.flush_s, st.device_s);
        CHECK(st.passages == 1400 && st.encoders == (run ? 3 : 1) && st.tokenize_threads == (run ? 4 : 1));
        CHECK(st.busy_s > 0 && st.busy_s <= st.encode_s + 1e-6 && st.wait_s >= 0 && st.flush_s >= 0);
        CHECK(st.device_s == -1.0); /* the CPU encoder does not time a device */
        /* every row: the passage's own vector, id and offset */
        int64_t row = 0, bad = 0, bad_ids = 0;
        for (int s = 0; s < 5; s++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/emb-%05d.qemb", dir[run], s);
            qac_shard sh;
            qac_status rs = qac_shard_read(path, 0, &sh);
            CHECK_OK(rs);
            if (rs) break;
            CHECK(sh.first_row == (uint64_t)row && sh.count == (s < 4 ? 300u : 200u));
            for (uint64_t i = 0; i < sh.count; i++, row++) {
                if (memcmp(sh.vectors + i * (size_t)dim, want + (size_t)row * dim, sizeof(float) * dim)) bad++;
                if (strcmp(sh.docids[i], ids[row]) || sh.offsets[i] != offsets[row]) bad_ids++;
            }
            qac_shard_free(&sh);
        }
        CHECK_MSG(row == n && bad == 0 && bad_ids == 0,
                  "run %d: %lld of %lld rows differ from the encoder's own vectors, %lld ids or offsets misplaced", run,
                  (long long)bad, (long long)row, (long long)bad_ids);
    }
    for (int s = 0; s < 5; s++) {
        char a[4200], b[4200];
        snprintf(a, sizeof a, "%s/emb-%05d.qemb", dir[0], s);
        snprintf(b, sizeof b, "%s/emb-%05d.qemb", dir[1], s);
        CHECK_MSG(qac_test_same_file(a, b), "shard %d differs between the two builds", s);
    }
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/docids.qdoc", dir[0]);
    snprintf(b, sizeof b, "%s/docids.qdoc", dir[1]);
    CHECK_MSG(qac_test_same_file(a, b), "the docid tables differ between the two builds");

    for (int i = 0; i < n; i++) free(texts[i]), free(ids[i]);
    free(texts), free(ids), free(offsets), free(want);
    for (int i = 0; i < 3; i++) qac_encoder_free(enc[i]);
    qac_model_free(m);
    return qac_test_summary();
}
