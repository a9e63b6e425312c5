/* The CUDA encoder against the CPU encoder: the default model on the
 * Cranfield collection (cosine per vector, and the top-10 of every query
 * identical up to near-ties), and a random BERT-base-shaped model on random
 * ids, in fp32, fp16 and bf16, through the fused attention with packed
 * batches and through the unfused one (qac_cuda_attention_select). fp32
 * takes the unfused kernels either way: it runs once. The random model also
 * runs with the last layer unpruned and with the older LayerNorm kernels
 * (QAC_CUDA_PRUNE, QAC_CUDA_LN_WARPS), within the same bounds. Query-sized
 * batches (1 to 16 short sequences) run as CUDA graphs: every call must
 * give the bits of the same batch launched kernel by kernel
 * (QAC_CUDA_GRAPHS=0), a graph replayed with new inputs included, and a
 * sequence the same bits in any batch of its bucket at the same place.
 * QAC_TEST_SMALL=1 (for compute-sanitizer) runs bf16 only, without
 * Cranfield. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_testutil.h"
#include "qac_cuda_attention.h"
#include "qac_cuda_kernels.h"
#include "qac_encoder.h"
#include "qac_encoder_plan.h"
#include "qac_model.h"
#include "testutil.h"

static const qac_precision PRECS[3] = {QAC_PREC_FP32, QAC_PREC_FP16, QAC_PREC_BF16};
static const char *PATHS[2] = {"fused", "unfused"};
static int small; /* QAC_TEST_SMALL: bf16 only, no Cranfield */

static double min_cos_for(qac_precision p) { return p == QAC_PREC_FP32 ? 0.999999 : 0.9999; }
/* Two documents whose CPU scores differ by less than this are a tie. */
static double tie_for(qac_precision p) { return p == QAC_PREC_FP32 ? 1e-5 : p == QAC_PREC_FP16 ? 1e-3 : 3e-3; }

/* ---- Cranfield (SMART format), parsed here to keep this test self-contained ---- */

typedef struct texts {
    char **v;
    int n, cap;
} texts;

static void texts_push(texts *t, char *s) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->v = realloc(t->v, sizeof(char *) * t->cap);
    }
    t->v[t->n++] = s;
}

static void texts_free(texts *t) {
    for (int i = 0; i < t->n; i++) free(t->v[i]);
    free(t->v);
}

/* Records start at ".I"; the text is the .T and .W fields joined. */
static int read_smart(const char *path, texts *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    char *cur = NULL;
    size_t len = 0;
    int keep = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '.' && line[1] && (line[2] == '\n' || line[2] == ' ' || line[2] == '\r' || !line[2])) {
            if (line[1] == 'I') {
                if (cur) texts_push(out, cur);
                cur = calloc(1, 1);
                len = 0;
            }
            keep = line[1] == 'T' || line[1] == 'W';
            continue;
        }
        if (!keep || !cur) continue;
        const size_t l = strlen(line);
        cur = realloc(cur, len + l + 2);
        for (size_t i = 0; i < l; i++) cur[len + i] = line[i] == '\n' || line[i] == '\r' ? ' ' : line[i];
        len += l;
        cur[len] = 0;
    }
    if (cur) texts_push(out, cur);
    fclose(f);
    return 0;
}

static double cosine(const float *a, const float *b, int d) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < d; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / (sqrt(aa * bb) + 1e-30);
}

static double min_cosine(const float *a, const float *b, int n, int d) {
    double m = 1;
    for (int i = 0; i < n; i++) {
        const double c = cosine(a + (size_t)i * d, b + (size_t)i * d, d);
        if (!(c >= m)) m = c; /* NaN lands here too */
    }
    return m;
}

static void top10(const float *q, const float *docs, int nd, int d, int *best, double *scores_out) {
    double s[10];
    int n = 0;
    for (int j = 0; j < nd; j++) {
        double v = 0;
        for (int c = 0; c < d; c++) v += (double)q[c] * docs[(size_t)j * d + c];
        if (n < 10 || v > s[n - 1]) {
            int i = n < 10 ? n++ : 9;
            while (i > 0 && s[i - 1] < v) {
                s[i] = s[i - 1];
                best[i] = best[i - 1];
                i--;
            }
            s[i] = v;
            best[i] = j;
        }
    }
    if (scores_out) memcpy(scores_out, s, sizeof s);
}

static double dot(const float *a, const float *b, int d) {
    double v = 0;
    for (int c = 0; c < d; c++) v += (double)a[c] * b[c];
    return v;
}

static void test_default_model(void) {
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return;
    char path[4096];
    texts docs = {0}, queries = {0};
    snprintf(path, sizeof path, "%s", qac_test_data("cranfield/cran.all.1400"));
    CHECK_MSG(read_smart(path, &docs) == 0 && docs.n == 1400, "%s: %d documents", path, docs.n);
    snprintf(path, sizeof path, "%s", qac_test_data("cranfield/cran.qry"));
    CHECK_MSG(read_smart(path, &queries) == 0 && queries.n == 225, "%s: %d queries", path, queries.n);
    if (docs.n == 0 || queries.n == 0) goto out;

    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    qac_encoder *cpu = NULL;
    CHECK_OK(qac_encoder_create(&cpu, m, &o));
    if (!cpu) goto out;
    const int d = qac_encoder_dim(cpu);
    float *dref = malloc(sizeof(float) * docs.n * d), *qref = malloc(sizeof(float) * queries.n * d);
    float *dgot = malloc(sizeof(float) * docs.n * d), *qgot = malloc(sizeof(float) * queries.n * d);
    CHECK_OK(qac_encoder_encode_texts(cpu, (const char *const *)docs.v, NULL, docs.n, 256, dref));
    CHECK_OK(qac_encoder_encode_texts(cpu, (const char *const *)queries.v, NULL, queries.n, 64, qref));
    qac_encoder_free(cpu);

    for (int run = 0; run < 6; run++) {
        const qac_precision p = PRECS[run % 3];
        const char *att = PATHS[run / 3];
        if (run / 3 && p == QAC_PREC_FP32) continue;
        qac_encoder *gpu = NULL;
        o.device = QAC_DEVICE_CUDA;
        o.precision = p;
        CHECK_OK(qac_cuda_attention_select(att));
        CHECK_OK(qac_encoder_create(&gpu, m, &o));
        if (!gpu) continue;
        CHECK(qac_encoder_device(gpu) == QAC_DEVICE_CUDA);
        gpu_test_poison(dgot, (size_t)docs.n * d);
        gpu_test_poison(qgot, (size_t)queries.n * d);
        CHECK_OK(qac_encoder_encode_texts(gpu, (const char *const *)docs.v, NULL, docs.n, 256, dgot));
        CHECK_OK(qac_encoder_encode_texts(gpu, (const char *const *)queries.v, NULL, queries.n, 64, qgot));
        qac_encoder_free(gpu);
        const double cd = min_cosine(dgot, dref, docs.n, d), cq = min_cosine(qgot, qref, queries.n, d);
        printf("default model %s %s: min cosine docs %.8f queries %.8f\n", gpu_test_prec_name(p), att, cd, cq);
        CHECK_MSG(cd >= min_cos_for(p) && cq >= min_cos_for(p), "%s %s: min cosine %.8f / %.8f < %.8f",
                  gpu_test_prec_name(p), att, cd, cq, min_cos_for(p));
        int identical = 0, bad = 0;
        for (int q = 0; q < queries.n; q++) {
            int bref[10], bgot[10];
            double sref[10];
            top10(qref + (size_t)q * d, dref, docs.n, d, bref, sref);
            top10(qgot + (size_t)q * d, dgot, docs.n, d, bgot, NULL);
            int same = 1, ok = 1;
            for (int i = 0; i < 10; i++) {
                if (bgot[i] != bref[i]) same = 0;
                /* Judge the GPU's choice with the CPU's scores: only near-ties may swap. */
                const double s = dot(qref + (size_t)q * d, dref + (size_t)bgot[i] * d, d);
                if (fabs(s - sref[i]) > tie_for(p)) ok = 0;
            }
            identical += same;
            bad += !ok;
        }
        printf("default model %s %s: Cranfield top-10 identical for %d/%d queries, %d differ beyond ties\n",
               gpu_test_prec_name(p), att, identical, queries.n, bad);
        CHECK_MSG(bad == 0, "%s %s: %d queries' top-10 differ beyond ties", gpu_test_prec_name(p), att, bad);
    }
    CHECK_OK(qac_cuda_attention_select(NULL));
    free(dref), free(qref), free(dgot), free(qgot);
out:
    texts_free(&docs);
    texts_free(&queries);
    qac_model_free(m);
}

static void fill_views(float *p, size_t n, float lo, float hi) { gpu_test_fill(p, n, lo, hi); }

static void test_random_base_model(void) {
    const qac_bert_config cfg = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12,
                                 .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2,
                                 .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
    qac_model *m = NULL;
    CHECK_OK(qac_model_create(&m, &cfg, NULL));
    if (!m) return;
    const int C = cfg.hidden_size, L = cfg.num_layers;
    /* BERT-like scales: weights ~ +-0.05, LayerNorm gains near 1. */
    fill_views(m->param_mem, m->n_params, -0.05f, 0.05f);
    fill_views(m->p.emb_ln_w, C, 0.9f, 1.1f);
    fill_views(m->p.ln1_w, (size_t)L * C, 0.9f, 1.1f);
    fill_views(m->p.ln2_w, (size_t)L * C, 0.9f, 1.1f);
    m->pooling = QAC_POOL_CLS;
    m->normalize = 1;

    enum { NSEQ = 24, TMAX = 128 };
    int32_t *ids[NSEQ];
    int lens[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        lens[i] = i == 0 ? TMAX : gpu_test_int(2, TMAX);
        ids[i] = malloc(sizeof(int32_t) * lens[i]);
        ids[i][0] = 101;
        for (int t = 1; t < lens[i]; t++) ids[i][t] = gpu_test_int(1000, cfg.vocab_size - 1);
        ids[i][lens[i] - 1] = 102;
    }
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    qac_encoder *cpu = NULL;
    float *ref = malloc(sizeof(float) * NSEQ * C), *got = malloc(sizeof(float) * NSEQ * C);
    CHECK_OK(qac_encoder_create(&cpu, m, &o));
    if (cpu) CHECK_OK(qac_encoder_encode_ids(cpu, (const int32_t *const *)ids, lens, NSEQ, ref));
    qac_encoder_free(cpu);
    /* runs 6 and 7: bf16 fused with the last layer on every row, then with
     * the one-block-a-row LayerNorms and the separate pooling */
    static const char *const ENV[8][2] = {{0}, {0}, {0}, {0}, {0}, {0}, {"QAC_CUDA_PRUNE", "0"},
                                          {"QAC_CUDA_LN_WARPS", "0"}};
    for (int run = 0; run < 8; run++) {
        const qac_precision p = run < 6 ? PRECS[run % 3] : QAC_PREC_BF16;
        const char *path = PATHS[run < 6 ? run / 3 : 0];
        if (run < 6 && run / 3 && p == QAC_PREC_FP32) continue;
        if (small && p != QAC_PREC_BF16) continue;
        if (ENV[run][0]) setenv(ENV[run][0], ENV[run][1], 1);
        qac_encoder *gpu = NULL;
        o.device = QAC_DEVICE_CUDA;
        o.precision = p;
        o.max_batch = 7; /* several batches, buffers grown and reused */
        CHECK_OK(qac_cuda_attention_select(path));
        CHECK_OK(qac_encoder_create(&gpu, m, &o));
        if (ENV[run][0]) unsetenv(ENV[run][0]);
        if (!gpu) continue;
        gpu_test_poison(got, (size_t)NSEQ * C);
        CHECK_OK(qac_encoder_encode_ids(gpu, (const int32_t *const *)ids, lens, NSEQ, got));
        qac_encoder_free(gpu);
        const double c = min_cosine(got, ref, NSEQ, C);
        const char *how = ENV[run][0] ? ENV[run][0] : "";
        printf("random BERT-base %s %s %s: min cosine %.8f\n", gpu_test_prec_name(p), path, how, c);
        CHECK_MSG(c >= min_cos_for(p), "random BERT-base %s %s %s: min cosine %.8f < %.8f", gpu_test_prec_name(p),
                  path, how, c, min_cos_for(p));
    }
    CHECK_OK(qac_cuda_attention_select(NULL));
    for (int i = 0; i < NSEQ; i++) free(ids[i]);
    free(ref), free(got);
    qac_model_free(m);
}

/* Query batches: nq sequences of query lengths (the first the longest, so
 * it leads every batch it is in), each batch encoded three times by a
 * graph encoder (the first run launches kernel by kernel, the second
 * captures, the third replays) and by one that never uses graphs. */
static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static void test_query_graphs(qac_model *m, const char *name, qac_precision p) {
    enum { NQ = 16, QMAX = 40 };
    const int C = m->cfg.hidden_size;
    int32_t *ids[NQ];
    int lens[NQ];
    for (int i = 0; i < NQ; i++) {
        lens[i] = i == 0 ? QMAX : gpu_test_int(2, QMAX - 8);
        ids[i] = malloc(sizeof(int32_t) * QMAX);
        ids[i][0] = 101;
        for (int t = 1; t < lens[i]; t++) ids[i][t] = gpu_test_int(1000, m->cfg.vocab_size - 1);
        ids[i][lens[i] - 1] = 102;
    }
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    qac_encoder *cpu = NULL, *with = NULL, *without = NULL;
    float *ref = malloc(sizeof(float) * NQ * C), *g = malloc(sizeof(float) * NQ * C);
    float *d = malloc(sizeof(float) * NQ * C), *first = malloc(sizeof(float) * C);
    CHECK_OK(qac_encoder_create(&cpu, m, &o));
    if (cpu) CHECK_OK(qac_encoder_encode_ids(cpu, (const int32_t *const *)ids, lens, NQ, ref));
    qac_encoder_free(cpu);
    o.device = QAC_DEVICE_CUDA;
    o.precision = p;
    CHECK_OK(qac_cuda_attention_select("fused"));
    CHECK_OK(qac_encoder_create(&with, m, &o));
    setenv("QAC_CUDA_GRAPHS", "0", 1);
    CHECK_OK(qac_encoder_create(&without, m, &o));
    unsetenv("QAC_CUDA_GRAPHS");
    CHECK_OK(qac_cuda_attention_select(NULL));
    if (!with || !without) goto out;
    static const int SIZES[] = {1, 2, 3, 5, 8, 13, 16};
    int differ = 0, calls = 0;
    double worst = 1;
    const unsigned long launches0 = qac_cuda_encoder_graph_launches();
    for (int si = 0; si < 7; si++) {
        const int n = SIZES[si];
        for (int rep = 0; rep < 3; rep++) {
            gpu_test_poison(g, (size_t)n * C);
            gpu_test_poison(d, (size_t)n * C);
            CHECK_OK(qac_encoder_encode_ids(with, (const int32_t *const *)ids, lens, n, g));
            CHECK_OK(qac_encoder_encode_ids(without, (const int32_t *const *)ids, lens, n, d));
            calls++;
            differ += !same_bits(g, d, (size_t)n * C);
            const double c = min_cosine(g, ref, n, C);
            worst = c < worst ? c : worst;
        }
    }
    /* a batch of 3 again, its last two sequences replaced: a graph replayed
     * with other inputs (or, when the rows move to the next bucket, a new one) */
    const int32_t *alt[3] = {ids[0], ids[NQ - 1], ids[NQ - 2]};
    const int alt_lens[3] = {lens[0], lens[NQ - 1], lens[NQ - 2]};
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(qac_encoder_encode_ids(with, alt, alt_lens, 3, g));
        CHECK_OK(qac_encoder_encode_ids(without, alt, alt_lens, 3, d));
        calls++;
        differ += !same_bits(g, d, (size_t)3 * C);
    }
    const unsigned long launches = qac_cuda_encoder_graph_launches() - launches0;
    printf("%s %s query batches: %d calls, graph and direct launches %s (%d differ), %lu graph launches, "
           "min cosine to the CPU %.8f\n",
           name, gpu_test_prec_name(p), calls, differ ? "DIFFER" : "bit-identical", differ, launches, worst);
    CHECK_MSG(differ == 0, "%s %s: %d query batches differ between graph and direct launches", name,
              gpu_test_prec_name(p), differ);
    CHECK_MSG(launches >= 7, "%s %s: only %lu graph launches", name, gpu_test_prec_name(p), launches);
    CHECK_MSG(worst >= min_cos_for(p), "%s %s query batches: min cosine %.8f < %.8f", name, gpu_test_prec_name(p),
              worst, min_cos_for(p));
    /* the leading sequence: alone, and first of batches of 2 and 3 */
    {
        const int32_t *b2[2] = {ids[0], ids[NQ - 1]}, *b3[3] = {ids[0], ids[1], ids[2]};
        const int l2[2] = {lens[0], lens[NQ - 1]}, l3[3] = {lens[0], lens[1], lens[2]};
        CHECK_OK(qac_encoder_encode_ids(with, (const int32_t *const *)ids, lens, 1, first));
        CHECK_OK(qac_encoder_encode_ids(with, b2, l2, 2, g));
        const int same2 = same_bits(first, g, C);
        CHECK_OK(qac_encoder_encode_ids(with, b3, l3, 3, d));
        const int same3 = same_bits(first, d, C);
        /* batches of 3 with the same bucket: the leading sequence's bits must not move */
        CHECK_OK(qac_encoder_encode_ids(with, alt, alt_lens, 3, g));
        const qac_enc_tunables tun = qac_enc_tunables_default();
        const qac_enc_layout la = qac_enc_layout_packed(alt_lens, 3, &tun), lb = qac_enc_layout_packed(l3, 3, &tun);
        const int same_bucket = la.rows == lb.rows && la.batch == lb.batch;
        printf("%s %s: a query alone and first of 2 / of 3: %s / %s; first of two batches of 3%s: %s\n", name,
               gpu_test_prec_name(p), same2 ? "same bits" : "differ", same3 ? "same bits" : "differ",
               same_bucket ? " in one bucket" : " in two buckets", same_bits(g, d, C) ? "same bits" : "differ");
        if (same_bucket)
            CHECK_MSG(same_bits(g, d, C), "%s %s: a sequence's bits moved within its bucket", name,
                      gpu_test_prec_name(p));
    }
out:
    qac_encoder_free(with);
    qac_encoder_free(without);
    for (int i = 0; i < NQ; i++) free(ids[i]);
    free(ref), free(g), free(d), free(first);
}

static void test_graphs(void) {
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (m) test_query_graphs(m, "default model", QAC_PREC_BF16);
    if (m && !small) test_query_graphs(m, "default model", QAC_PREC_FP16);
    qac_model_free(m);
    /* a BERT-base shape with CLS pooling: the pruned last layer */
    const qac_bert_config cfg = {.vocab_size = 30522, .hidden_size = 768, .num_layers = 12, .num_heads = 12,
                                 .intermediate_size = 3072, .max_position = 512, .type_vocab_size = 2,
                                 .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f,
                                 .attn_dropout = 0.1f};
    m = NULL;
    CHECK_OK(qac_model_create(&m, &cfg, NULL));
    if (!m) return;
    gpu_test_fill(m->param_mem, m->n_params, -0.05f, 0.05f);
    gpu_test_fill(m->p.emb_ln_w, cfg.hidden_size, 0.9f, 1.1f);
    gpu_test_fill(m->p.ln1_w, (size_t)cfg.num_layers * cfg.hidden_size, 0.9f, 1.1f);
    gpu_test_fill(m->p.ln2_w, (size_t)cfg.num_layers * cfg.hidden_size, 0.9f, 1.1f);
    m->pooling = QAC_POOL_CLS;
    m->normalize = 0;
    test_query_graphs(m, "random BERT-base", QAC_PREC_BF16);
    qac_model_free(m);
}

static void test_bad_input(void) {
    qac_model *m = NULL;
    CHECK_OK(qac_model_load(&m, qac_test_model_dir()));
    if (!m) return;
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CUDA;
    o.precision = (qac_precision)7;
    qac_encoder *e = NULL;
    CHECK_ERR(qac_encoder_create(&e, m, &o), QAC_ERR_INVALID, NULL);
    qac_encoder_free(e);
    e = NULL;
    o.precision = QAC_PREC_BF16;
    CHECK_OK(qac_encoder_create(&e, m, &o));
    if (e) {
        int32_t bad[3] = {101, m->cfg.vocab_size + 5, 102};
        const int32_t *seqs[1] = {bad};
        int len = 3;
        float out[1024];
        CHECK_ERR(qac_encoder_encode_ids(e, seqs, &len, 1, out), QAC_ERR_INVALID, NULL);
    }
    qac_encoder_free(e);
    qac_model_free(m);
}

int main(void) {
    if (!qac_cuda_available()) qac_test_skip("no usable CUDA GPU");
    gpu_test_seed();
    small = getenv("QAC_TEST_SMALL") && strcmp(getenv("QAC_TEST_SMALL"), "0") != 0;
    if (!small) test_default_model();
    test_random_base_model();
    test_graphs();
    test_bad_input();
    return qac_test_summary();
}
