/* The encoder families beyond BERT (RoBERTa, XLM-RoBERTa, ModernBERT, and a
 * BERT with the XLM-R tokenizer) against sentence-transformers and torch
 * autograd on checkpoints made by tests/reference/gen_family_fixtures.py.
 * argv: [--embeddings-only] FIXTURE_DIR NAME... (--embeddings-only: the
 * real shapes of gen_family_fixtures.py --shapes, whose fixtures hold no
 * gradients; the small checkpoints carry the gradient checks)
 *
 * Per checkpoint:
 *  - embeddings of every text (Cranfield documents and queries, lines in
 *    seven scripts and emoji, the longest cut at max_seq_length) through
 *    the encoder (CPU, fp32): cosine >= 0.99999 against
 *    sentence-transformers' float32 embeddings, and the distance from the
 *    float64 forward within COS_FACTOR times torch's own float32 distance
 *    (the two float32 computations differ only in summation order, so each
 *    lands about as far from the exact value as the other; 4x is room for
 *    the order, a wrong term moves it by orders of magnitude);
 *  - the padded training forward gives the packed inference forward's
 *    pooled vectors bit for bit;
 *  - fine-tuning gradients (InfoNCE, tau 0.05, cosine) of every tensor
 *    against autograd in float64, within GRAD_FACTOR times torch's own
 *    float32 distance from it (relative to the tensor's largest gradient),
 *    plus 4 sqrt(R) 2^-24 for the R token rows of the batch: qac sums bias
 *    and LayerNorm gradients row by row in order (so that they depend on
 *    nothing but the rows), a sum whose rounding grows like sqrt(R) units
 *    of float32 where torch's blocked sums grow less; 4 deviations. The
 *    batch holds a pad token inside a passage, so the rows that
 *    nn.Embedding(padding_idx=...) leaves without a gradient (the pad's
 *    word row; RoBERTa's position row padding_idx) are compared too;
 *  - save and load back: the same parameters, config and fingerprint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_pool.h"
#include "qac_safetensors.h"
#include "qac_train.h"
#include "qac_util.h"
#include "testutil.h"

#define COS_MIN 0.99999
#define EMB_FACTOR 4.0
#define GRAD_FACTOR 4.0
#define REL_FLOOR 0x1p-20 /* embeddings: where torch's float32 lands nearly on float64 */

static qac_safetensors *ref;

static const qac_st_tensor *need(const char *name) {
    const qac_st_tensor *t = qac_safetensors_find(ref, name);
    if (!t) {
        fprintf(stderr, "FAIL: the fixture has no tensor %s\n", name);
        exit(1);
    }
    return t;
}

static void *read_all(const char *name, size_t elem) {
    const qac_st_tensor *t = need(name);
    void *out = malloc(t->numel * elem);
    if (elem == 4 && t->dtype == QAC_ST_I32) memcpy(out, t->data, t->numel * 4);
    else if (elem == 4) qac_safetensors_read_f32(t, out);
    else memcpy(out, t->data, t->numel * 8); /* F64 as stored */
    return out;
}

static size_t numel(const char *name) { return (size_t)need(name)->numel; }

/* Embeddings of the fixture's texts from their ids. */
static void check_embeddings(const char *name, const qac_model *m) {
    int n = (int)numel("lens"), C = m->cfg.hidden_size;
    int32_t *ids = read_all("ids", 4);
    int *lens = read_all("lens", 4);
    float *e32 = read_all("emb32", 4);
    double *e64 = read_all("emb64", 8);
    const int32_t **ptr = malloc((size_t)n * sizeof *ptr);
    size_t off = 0;
    for (int i = 0; i < n; i++) ptr[i] = ids + off, off += (size_t)lens[i];
    float *got = malloc((size_t)n * C * sizeof *got);
    qac_encoder_opts o = qac_encoder_default_opts();
    o.device = QAC_DEVICE_CPU;
    o.cpu_precision = QAC_PREC_FP32;
    o.threads = 2;
    o.max_batch = 8; /* several batches, each padded to its longest */
    qac_encoder *e = NULL;
    CHECK_OK(qac_encoder_create(&e, m, &o));
    if (!e) exit(1);
    CHECK_OK(qac_encoder_encode_ids(e, ptr, lens, n, got));
    double dq = 0, dt = 0, scale = 0, mincos = 1;
    int worst = 0;
    for (int i = 0; i < n; i++) {
        double dot = 0, ng = 0, nr = 0;
        for (int k = 0; k < C; k++) {
            size_t j = (size_t)i * C + k;
            double a = fabs(got[j] - e64[j]), b = fabs(e32[j] - e64[j]);
            if (!(a <= dq)) dq = isnan(a) ? INFINITY : a, worst = i;
            dt = b > dt ? b : dt;
            scale = fabs(e64[j]) > scale ? fabs(e64[j]) : scale;
            dot += got[j] * (double)e32[j];
            ng += (double)got[j] * got[j];
            nr += (double)e32[j] * e32[j];
        }
        double cs = dot / (sqrt(ng * nr) + 1e-300);
        if (!(cs >= mincos)) mincos = isnan(cs) ? -1 : cs;
    }
    double bound = EMB_FACTOR * dt + REL_FLOOR * scale;
    printf("%-16s %2d texts (longest %3d tokens): min cosine %.9f, max|qac-f64| %.2e, max|torch32-f64| %.2e "
           "(bound %.2e, worst text %d)\n",
           name, n, qac_encoder_max_len(e, 0), mincos, dq, dt, bound, worst);
    CHECK_MSG(mincos >= COS_MIN, "%s: cosine %.9f < %.5f", name, mincos, COS_MIN);
    CHECK_MSG(dq <= bound, "%s: embeddings %.3e from float64, torch's float32 %.3e (bound %.3e)", name, dq, dt, bound);

    /* the padded training forward pools to the same bits */
    int B = n < 6 ? n : 6, T = 0;
    for (int i = 0; i < B; i++) T = lens[i] > T ? lens[i] : T;
    int32_t *pad = calloc((size_t)B * T, sizeof *pad);
    for (int i = 0; i < B; i++) {
        memcpy(pad + (size_t)i * T, ptr[i], (size_t)lens[i] * sizeof *pad);
        for (int t = lens[i]; t < T; t++) pad[(size_t)i * T + t] = m->cfg.pad_token_id;
    }
    qac_pool *pool = NULL;
    CHECK_OK(qac_pool_create(&pool, 2));
    qac_bert_packed pk;
    qac_bert_acts a = {0};
    CHECK_OK(qac_bert_pack(&pk, &m->cfg, &m->p));
    CHECK_OK(qac_bert_acts_alloc(&a, &m->cfg, B, T, QAC_ACTS_KEEP, 2));
    CHECK_OK(qac_bert_forward_train(&a, &m->cfg, &m->p, &pk, pad, NULL, lens, B, T, NULL, pool));
    float *pooled = malloc((size_t)B * C * sizeof *pooled);
    qac_pooling_forward(pooled, a.last, lens, B, T, C, m->pooling, m->normalize);
    int same = memcmp(pooled, got, (size_t)B * C * sizeof *got) == 0;
    CHECK_MSG(same, "%s: the padded training forward differs from the packed inference forward", name);
    qac_bert_acts_free(&a);
    qac_bert_packed_free(&pk);
    qac_pool_free(pool);
    qac_encoder_free(e);
    free(pooled), free(pad), free(got), free(ptr), free(ids), free(lens), free(e32), free(e64);
}

static void check_grads(const char *name, qac_model *m) {
    int qr, pr;
    int32_t *q_ids = read_all("q_ids", 4), *p_ids = read_all("p_ids", 4);
    int *q_lens = read_all("q_lens", 4), *p_lens = read_all("p_lens", 4);
    qr = (int)need("q_ids")->shape[0];
    pr = (int)need("p_ids")->shape[0];
    qac_train_batch b = {qr, pr / qr, (int)need("q_ids")->shape[1], (int)need("p_ids")->shape[1],
                         q_ids, q_lens, p_ids, p_lens};
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.tau = 0.05f;
    o.sim = QAC_SIM_COS;
    o.hidden_dropout = o.attn_dropout = 0.0f;
    o.threads = 2;
    o.total_steps = 1;
    qac_trainer *t = NULL;
    CHECK_OK(qac_trainer_create(&t, m, &o));
    if (!t) exit(1);
    double loss = 0, *l32 = read_all("loss32", 8), *l64 = read_all("loss64", 8);
    CHECK_OK(qac_trainer_grads(t, &b, &loss));
    double lq = fabs(loss - *l64), lt = fabs(*l32 - *l64);
    printf("%-16s loss %.9f (float64 %.9f, torch32 off by %.1e, qac %.1e)\n", name, loss, *l64, lt, lq);
    CHECK_MSG(lq <= EMB_FACTOR * lt + 1e-6 * fabs(*l64), "%s: loss %.9f, float64 %.9f", name, loss, *l64);
    const float *g = qac_trainer_grad_mem(t);
    double rows = (double)b.nq * b.q_T + (double)b.nq * b.n * b.p_T, row_floor = 4 * sqrt(rows) * 0x1p-24;
    size_t off = 0;
    int compared = 0;
    for (int i = 0; i < QAC_BERT_NUM_TENSORS; i++) {
        size_t n = qac_bert_tensor_size(&m->cfg, i);
        const char *tn = qac_bert_tensor_name(i);
        if (!n || !strncmp(tn, "pooler", 6)) { /* absent, or never trained */
            off += n;
            continue;
        }
        char k32[64], k64[64];
        snprintf(k32, sizeof k32, "grad32.%s", tn);
        snprintf(k64, sizeof k64, "grad64.%s", tn);
        if (numel(k64) != n) {
            fprintf(stderr, "FAIL: %s: %s has %zu values, qac %zu\n", name, k64, numel(k64), n);
            exit(1);
        }
        float *r32 = read_all(k32, 4);
        double *r64 = read_all(k64, 8), mq = 0, mt = 0, mr = 0;
        for (size_t j = 0; j < n; j++) {
            double a = fabs(g[off + j] - r64[j]), c = fabs(r32[j] - r64[j]);
            if (!(a <= mq)) mq = isnan(a) ? INFINITY : a;
            mt = c > mt ? c : mt;
            mr = fabs(r64[j]) > mr ? fabs(r64[j]) : mr;
        }
        double rq = mr > 0 ? mq / mr : mq, rt = mr > 0 ? mt / mr : mt, bound = GRAD_FACTOR * rt + row_floor;
        printf("  grad %-10s qac %.2e  torch32 %.2e  (relative to max %.2e; bound %.2e)\n", tn, rq, rt, mr, bound);
        CHECK_MSG(rq <= bound, "%s: gradient of %s off by %.3e relative (torch's float32 %.3e)", name, tn, rq, rt);
        compared++;
        off += n;
        free(r32), free(r64);
    }
    CHECK(compared >= 8);
    qac_trainer_free(t);
    free(q_ids), free(p_ids), free(q_lens), free(p_lens), free(l32), free(l64);
}

/* Saved in the family's layout and loaded back: the same model. (That
 * transformers loads it as the same model is test_families_e2e.py's.) */
static void check_save(const char *name, const qac_model *m) {
    const char *dir = qac_test_tmpdir(name);
    CHECK_OK(qac_model_save(m, dir));
    qac_model *back = NULL;
    CHECK_OK(qac_model_load_untokenized(&back, dir));
    if (!back) return;
    CHECK_MSG(back->n_params == m->n_params &&
                  !memcmp(back->param_mem, m->param_mem, m->n_params * sizeof(float)),
              "%s: parameters differ after save and load", name);
    CHECK_MSG(!memcmp(&back->cfg, &m->cfg, sizeof m->cfg), "%s: config differs after save and load", name);
    CHECK(back->pooling == m->pooling && back->normalize == m->normalize && back->max_seq_len == m->max_seq_len);
    qac_model_free(back);
}

int main(int argc, char **argv) {
    int emb_only = argc > 1 && !strcmp(argv[1], "--embeddings-only");
    argv += emb_only, argc -= emb_only;
    if (argc < 3) {
        fprintf(stderr, "usage: %s [--embeddings-only] FIXTURE_DIR NAME...\n", argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        char dir[4096], path[4096];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], argv[i]);
        snprintf(path, sizeof path, "%s/%s.ref.safetensors", argv[1], argv[i]);
        if (qac_safetensors_open(&ref, path) != QAC_OK) {
            fprintf(stderr, "FAIL: %s\n", qac_last_error());
            return 1;
        }
        qac_model *m = NULL;
        CHECK_OK(qac_model_load_untokenized(&m, dir));
        if (!m) return qac_test_summary();
        printf("%s: %s, %d layers, hidden %d, %s pooling%s\n", argv[i], qac_family_name(m->cfg.family),
               m->cfg.num_layers, m->cfg.hidden_size, qac_pooling_name(m->pooling),
               m->normalize ? ", normalised" : "");
        check_embeddings(argv[i], m);
        if (!emb_only) check_grads(argv[i], m);
        check_save(argv[i], m);
        qac_model_free(m);
        qac_safetensors_close(ref);
    }
    return qac_test_summary();
}
