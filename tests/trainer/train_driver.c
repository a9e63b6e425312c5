/* A small training program over the fixture's batch, for the resume test:
 * each step takes NQ_STEP of the fixture's query groups in an order
 * shuffled per epoch with the seed; the cursor is (epoch, position).
 * Usage: train_driver FIXTURE OUT_DIR STEPS SAVE_EVERY [--resume]
 * Prints "resumed at step K" (K = 0 for a fresh run) and "steps A..B" to
 * stderr. The model is the tiny random BERT of the parity test with
 * dropout 0.1, or the checkpoint named by QAC_DRIVER_MODEL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../encoder/fixture.h"
#include "qac_rng.h"
#include "qac_safetensors.h"
#include "qac_train.h"
#include "testutil.h"

#define NQ_STEP 2

typedef struct src {
    int nq, n, q_T, p_T;
    const int32_t *q_ids, *p_ids;
    const int32_t *q_lens, *p_lens;
    int64_t epoch, pos;
    int32_t qb[NQ_STEP * 64], pb[NQ_STEP * 16 * 256];
    int ql[NQ_STEP], pl[NQ_STEP * 16];
    qac_train_batch b;
} src;

static int group_at(const src *s, int64_t epoch, int64_t pos) {
    int perm[64];
    for (int i = 0; i < s->nq; i++) perm[i] = i;
    uint64_t key = qac_rng_key(7, (uint64_t)epoch, 0, 0);
    for (int i = s->nq - 1; i > 0; i--) {
        int j = (int)qac_rng_below(key, (uint64_t)i, (uint64_t)i + 1), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    return perm[pos];
}

static qac_status next(void *user, const qac_train_batch **out) {
    src *s = user;
    for (int k = 0; k < NQ_STEP; k++) {
        if (s->pos == s->nq) s->epoch++, s->pos = 0;
        int g = group_at(s, s->epoch, s->pos++);
        memcpy(s->qb + (size_t)k * s->q_T, s->q_ids + (size_t)g * s->q_T, (size_t)s->q_T * 4);
        s->ql[k] = s->q_lens[g];
        memcpy(s->pb + (size_t)k * s->n * s->p_T, s->p_ids + (size_t)g * s->n * s->p_T, (size_t)s->n * s->p_T * 4);
        for (int j = 0; j < s->n; j++) s->pl[k * s->n + j] = s->p_lens[g * s->n + j];
    }
    qac_train_batch b = {NQ_STEP, s->n, s->q_T, s->p_T, s->qb, s->ql, s->pb, s->pl};
    s->b = b;
    *out = &s->b;
    return QAC_OK;
}

static qac_status get_cursor(void *user, void **bytes, size_t *len) {
    src *s = user;
    int64_t *c = malloc(2 * sizeof *c);
    if (!c) return qac_set_error(QAC_ERR_NOMEM, "out of memory");
    c[0] = s->epoch, c[1] = s->pos;
    *bytes = c, *len = 2 * sizeof *c;
    return QAC_OK;
}

static qac_status set_cursor(void *user, const void *bytes, size_t len) {
    src *s = user;
    if (len != 2 * sizeof(int64_t)) return qac_set_error(QAC_ERR_FORMAT, "bad cursor");
    memcpy(&s->epoch, bytes, 8);
    memcpy(&s->pos, (const char *)bytes + 8, 8);
    return QAC_OK;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: train_driver FIXTURE OUT_DIR STEPS SAVE_EVERY [--resume]\n");
        return 2;
    }
    qac_safetensors *fx;
    if (qac_safetensors_open(&fx, argv[1])) return fprintf(stderr, "%s\n", qac_last_error()), 1;
    const qac_st_tensor *qi = qac_safetensors_find(fx, "q_ids"), *pi = qac_safetensors_find(fx, "p_ids");
    src s;
    memset(&s, 0, sizeof s);
    s.nq = (int)qi->shape[0], s.q_T = (int)qi->shape[1], s.p_T = (int)pi->shape[1];
    s.n = (int)pi->shape[0] / s.nq;
    s.q_ids = qi->data, s.p_ids = pi->data;
    s.q_lens = qac_safetensors_find(fx, "q_lens")->data, s.p_lens = qac_safetensors_find(fx, "p_lens")->data;
    if (s.q_T > 64 || s.p_T > 256 || s.n > 16) return fprintf(stderr, "fixture batch too large\n"), 1;

    qac_bert_config c = {.vocab_size = 30522, .hidden_size = 64, .num_layers = 2, .num_heads = 4, .intermediate_size = 128, .max_position = 128, .type_vocab_size = 2, .pad_token_id = 0, .layer_norm_eps = 1e-12f, .hidden_dropout = 0.1f, .attn_dropout = 0.1f};
    qac_model *m;
    const char *dir = getenv("QAC_DRIVER_MODEL");
    if (dir ? qac_model_load(&m, dir) : qac_model_create(&m, &c, qac_test_model_dir()))
        return fprintf(stderr, "%s\n", qac_last_error()), 1;
    if (!dir) enc_fill_random_params(m, ENC_FIXTURE_SEED);
    qac_train_opts o;
    qac_train_opts_default(&o);
    o.total_steps = atol(argv[3]);
    o.warmup_steps = 2;
    o.lr = 1e-3;
    o.tau = 0.05f;
    o.sim = QAC_SIM_COS;
    o.threads = 2;
    qac_trainer *t;
    if (qac_trainer_create(&t, m, &o)) return fprintf(stderr, "%s\n", qac_last_error()), 1;
    qac_batch_source bs = {&s, next, get_cursor, set_cursor};
    qac_run_opts ro = {.out_dir = argv[2], .save_every = atol(argv[4]), .keep = 2,
                       .resume = argc > 5 && !strcmp(argv[5], "--resume")};
    long from = 0;
    qac_status st = qac_train_run(t, &bs, &ro, &from);
    fprintf(stderr, "resumed at step %ld\n", from);
    if (st) return fprintf(stderr, "train: %s\n", qac_last_error()), 1;
    fprintf(stderr, "steps %ld..%ld\n", from + 1, qac_trainer_steps_done(t));
    qac_trainer_free(t);
    qac_model_free(m);
    qac_safetensors_close(fx);
    return 0;
}
