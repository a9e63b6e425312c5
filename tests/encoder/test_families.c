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
 *    float64 forward within FAM_EMB_FACTOR times torch's own float32 distance
 *    (the two float32 computations differ only in summation order, so each
 *    lands about as far from the exact value as the other; 4x is room for
 *    the order, a wrong term moves it by orders of magnitude);
 *  - the padded training forward gives the packed inference forward's
 *    pooled vectors bit for bit;
 *  - fine-tuning gradients (InfoNCE, tau 0.05, cosine) of every tensor
 *    against autograd in float64, within FAM_GRAD_FACTOR times torch's own
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
#include "family_check.h"
#include "qac_encoder.h"
#include "qac_model.h"
#include "qac_pool.h"
#include "qac_util.h"
#include "testutil.h"

#define COS_MIN 0.99999
#define REL_FLOOR 0x1p-20 /* embeddings: where torch's float32 lands nearly on float64 */

static int emb_only; /* --embeddings-only */

/* Embeddings of the fixture's texts from their ids. */
static void check_embeddings(const char *name, const qac_model *m) {
    int n = (int)fam_numel("lens"), C = m->cfg.hidden_size;
    int32_t *ids = fam_read_all("ids", 4);
    int *lens = fam_read_all("lens", 4);
    float *e32 = fam_read_all("emb32", 4);
    double *e64 = fam_read_all("emb64", 8);
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
    fam_emb_diff d = fam_emb_compare(got, e32, e64, n, C);
    double bound = FAM_EMB_FACTOR * d.d_torch + REL_FLOOR * d.scale;
    printf("%-16s %2d texts (longest %3d tokens): min cosine %.9f, max|qac-f64| %.2e, max|torch32-f64| %.2e "
           "(bound %.2e, worst text %d)\n",
           name, n, qac_encoder_max_len(e, 0), d.min_cos, d.d_qac, d.d_torch, bound, d.worst);
    CHECK_MSG(d.min_cos >= COS_MIN, "%s: cosine %.9f < %.5f", name, d.min_cos, COS_MIN);
    CHECK_MSG(d.d_qac <= bound, "%s: embeddings %.3e from float64, torch's float32 %.3e (bound %.3e)", name, d.d_qac,
              d.d_torch, bound);

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
    qac_train_opts o;
    fam_train_opts(&o);
    o.threads = 2;
    fam_check_grads(name, m, &o, "");
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

static void check_all(const char *name, qac_model *m) {
    printf("%s: %s, %d layers, hidden %d, %s pooling%s\n", name, qac_family_name(m->cfg.family), m->cfg.num_layers,
           m->cfg.hidden_size, qac_pooling_name(m->pooling), m->normalize ? ", normalised" : "");
    check_embeddings(name, m);
    if (!emb_only) check_grads(name, m);
    check_save(name, m);
}

int main(int argc, char **argv) {
    emb_only = argc > 1 && !strcmp(argv[1], "--embeddings-only");
    argv += emb_only, argc -= emb_only;
    if (argc < 3) {
        fprintf(stderr, "usage: %s [--embeddings-only] FIXTURE_DIR NAME...\n", argv[0]);
        return 2;
    }
    return fam_run(argv[1], argv + 2, argc - 2, check_all);
}
